"""What training holds in memory, measured from the tensors (10, and 06's step memory): the bytes autograd saves
for backward in one forward pass (``activation_bytes``), with or without autocast, and the bytes per parameter
of each training setup (``bytes_per_parameter``) beside the usual formulas (ZeRO's stages, FSDP)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ._checks import ArgumentTypeError, check_instance, check_int, check_numel
from .dtypes import dtype_name, parse_dtype
from .models import make_mlp
from .text import Reading, format_bytes
from .widgets import table_html

MAX_INPUT_NUMEL = 2**24  # activation_bytes' input: one forward pass of a course-sized model
MAX_WORLD_SIZE = 1024  # bytes_per_parameter's formulas: ranks a ZeRO or FSDP row is sharded over


@dataclass(frozen=True)
class SavedTensor:
    """One storage autograd keeps for backward: a tensor's ``shape`` and ``dtype``, the ``nbytes`` of its
    storage, and its ``kind``: ``"activation"``, ``"parameter copy"`` (a cast of a parameter, as autocast makes)
    or ``"parameter"`` (a parameter itself, held anyway)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    kind: str


class _ParameterCasts(TorchDispatchMode):
    """Records the storages of the casts (``aten._to_copy``) made of a parameter while it is active."""

    def __init__(self, parameters: set[int]):
        super().__init__()
        self.parameters, self.copies = parameters, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (
            func is torch.ops.aten._to_copy.default
            and args[0].untyped_storage().data_ptr() in self.parameters
        ):
            self.copies[out.untyped_storage().data_ptr()] = out.untyped_storage().nbytes()
        return out


def saved_tensors(run, parameters=(), exclude=()) -> tuple[list[SavedTensor], dict[int, int]]:
    """What autograd keeps for backward while ``run()`` runs, one row per storage (a tensor saved by two ops
    counted once), and the casts of ``parameters`` made meanwhile (storage -> bytes); storages of
    ``exclude`` (tensors that exist anyway) are left out."""
    params = {p.untyped_storage().data_ptr() for p in parameters}
    seen = {t.untyped_storage().data_ptr() for t in exclude}
    casts, rows = _ParameterCasts(params), []

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            kind = "parameter" if st.data_ptr() in params else "activation"
            kind = "parameter copy" if st.data_ptr() in casts.copies else kind
            rows.append(SavedTensor(tuple(t.shape), t.dtype, st.nbytes(), kind))
        return t

    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
        casts if params else contextlib.nullcontext(),
    ):
        run()
    return rows, casts.copies


@dataclass(frozen=True)
class ActivationBytes:
    """What :func:`activation_bytes` measured: ``activations`` (bytes of the tensors a forward pass makes and
    autograd keeps, the input batch included), ``parameter_copies`` (autocast's cast weights kept for backward),
    ``cast_bytes`` (every cast of a parameter the pass made, kept or not), ``saved`` (one row per storage) and
    the ``dtype`` of autocast (None: float32)."""

    activations: int
    parameter_copies: int
    cast_bytes: int
    saved: tuple[SavedTensor, ...]
    dtype: torch.dtype | None

    @property
    def total(self) -> int:
        """The bytes held for backward beyond the parameters: activations and parameter copies."""
        return self.activations + self.parameter_copies

    def __str__(self) -> str:
        where = f"autocast({dtype_name(self.dtype)})" if self.dtype else "float32"
        return (
            f"{where}: {format_bytes(self.total)} saved for backward ({format_bytes(self.activations)} of "
            f"activations, {format_bytes(self.parameter_copies)} of cast parameters) in {len(self.saved)} tensors"
        )


def activation_bytes(model, x, dtype=None) -> ActivationBytes:
    """The bytes autograd saves for backward in one forward pass of ``model`` on ``x`` (a float tensor of at
    most :data:`MAX_INPUT_NUMEL` elements), measured with ``torch.autograd.graph.saved_tensors_hooks``: each
    storage once; the parameters themselves, which exist anyway, apart.  With ``dtype`` (bf16 or fp16) the
    pass runs under autocast on ``x``'s device, so its cast copies of the weights show up too."""
    check_instance("model", model, nn.Module, "a torch.nn.Module (such as make_mlp())")
    check_instance("x", x, torch.Tensor, "a float tensor (a batch of inputs)")
    if not x.is_floating_point():
        raise ValueError(f"x must be a float tensor, got dtype {x.dtype}")
    check_numel("x", x, MAX_INPUT_NUMEL, "one forward pass of a small batch is enough")
    dtype = None if dtype is None else parse_dtype(dtype)
    parameters = list(model.parameters())
    if any(p.device != x.device for p in parameters):
        raise ValueError(f"x is on {x.device}, the model's parameters are not: move one to the other")
    region = torch.autocast(x.device.type, dtype=dtype) if dtype else contextlib.nullcontext()

    def forward():
        with region:
            model(x)

    try:
        rows, casts = saved_tensors(forward, parameters)
    except (RuntimeError, TypeError, ValueError) as exc:  # x does not fit the model: no trace from torch
        raise ValueError(
            f"model(x) failed for x of shape {tuple(x.shape)} and dtype {x.dtype}: {exc}"
        ) from None
    kept = {"activation": 0, "parameter copy": 0}
    for row in rows:
        kept[row.kind] = kept.get(row.kind, 0) + row.nbytes
    return ActivationBytes(
        kept["activation"], kept["parameter copy"], sum(casts.values()), tuple(rows), dtype
    )


def activation_saving(fp32: ActivationBytes, amp: ActivationBytes) -> Reading:
    """What autocast did to the bytes kept for backward, from two measurements of :func:`activation_bytes` (one
    without autocast, one with): the outcome is how the total compares (``memory.same``, ``memory.between``,
    ``memory.half``, ``memory.less``), the reason says what the activations and the weight copies did."""
    check_instance("fp32", fp32, ActivationBytes, "a result of activation_bytes(model, x)")
    check_instance("amp", amp, ActivationBytes, "a result of activation_bytes(model, x, dtype)")
    if fp32.dtype is not None or amp.dtype is None or not fp32.activations > 0:
        raise ValueError("give fp32 a measurement without autocast (dtype=None) and amp one with a dtype")
    ratio = amp.total / fp32.total
    bands = ((0.9, "memory.same"), (0.55, "memory.between"), (0.45, "memory.half"))  # ratio above: outcome
    outcome = next((code for low, code in bands if ratio > low), "memory.less")
    facts = {
        "ratio": f"{ratio:.2f}",
        "activations": f"{amp.activations / fp32.activations:.2f}",
        "copies": format_bytes(amp.parameter_copies),
        "dtype": dtype_name(amp.dtype),
    }
    return Reading(outcome, ("memory.copies",), facts)


# -- bytes per parameter --

ZERO_STAGES = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")


def zero_bytes(stage: int, world_size: int) -> float:
    """Bytes per parameter on one of ``world_size`` ranks for mixed-precision Adam as the ZeRO paper counts it
    (2 for the low-precision weights, 2 for their gradients, 12 for the FP32 master weights and Adam's two
    moments), at ``stage`` 0 (plain data parallel) to 3: stage 1 shards the 12, 2 also the gradients, 3 all."""
    sharded = (0, 12, 14, 16)[stage]
    return (16 - sharded) + sharded / world_size


@dataclass(frozen=True)
class MemoryRow:
    """One training setup: bytes per parameter ``measured`` on one rank (None: not run here) and by the
    ``formula`` (shown as ``formula_text``), and what is ``sharded``."""

    setup: str
    measured: float | None
    formula: float
    formula_text: str
    sharded: str


@dataclass(frozen=True, repr=False)
class MemoryTable:
    """:func:`bytes_per_parameter`'s rows, for ``world_size`` ranks, and the parameter count it measured."""

    rows: tuple[MemoryRow, ...]
    world_size: int
    num_parameters: int

    def row(self, setup: str) -> MemoryRow:
        return next(r for r in self.rows if r.setup == setup)

    def table_rows(self) -> list[tuple[str, str, str, str]]:
        measured = lambda r: "not run here" if r.measured is None else f"{r.measured:.2f}"  # noqa: E731
        return [(r.setup, measured(r), f"{r.formula_text} = {r.formula:.2f}", r.sharded) for r in self.rows]

    def __str__(self) -> str:
        head = ("setup", "measured", "formula", "sharded")
        rows = [head, *self.table_rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3] for r in rows
        )

    __repr__ = __str__  # what a notebook stores as text beside the HTML table

    def _repr_html_(self) -> str:
        caption = f"bytes per parameter on one rank of {self.world_size} ({self.num_parameters:,} parameters)"
        return table_html(self.table_rows(), ("setup", "measured", "formula", "sharded"), caption=caption)


def _tensor_bytes(tensors) -> int:
    local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors if t is not None]
    sizes = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in local}
    return sum(sizes.values())


def _optimizer_bytes(opt) -> int:
    return _tensor_bytes(v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim())


def _measured_rows(dtype: torch.dtype, hidden: int, depth: int) -> tuple[int, float, float, float]:
    """Bytes per parameter of float32 Adam, autocast's cast copies, and low-precision weights with float32
    master weights (Adam on the masters), each from the tensors after one step of the course's MLP."""
    model = make_mlp(hidden=hidden, depth=depth, device="cpu")
    n = sum(p.numel() for p in model.parameters())
    X, y = torch.randn(8, 64, generator=torch.Generator().manual_seed(0)), torch.arange(8) % 10
    opt = torch.optim.Adam(model.parameters())
    nn.functional.cross_entropy(model(X), y).backward()
    opt.step()
    fp32 = _tensor_bytes([*model.parameters(), *(p.grad for p in model.parameters())]) + _optimizer_bytes(opt)
    casts = activation_bytes(model, X, dtype).cast_bytes
    low = make_mlp(hidden=hidden, depth=depth, device="cpu").to(dtype)
    master = [p.detach().float().requires_grad_() for p in low.parameters()]
    opt = torch.optim.Adam(master)
    low(X.to(dtype)).float().logsumexp(1).sum().backward()
    for m, p in zip(master, low.parameters(), strict=True):
        m.grad = p.grad.float()  # the update reads a float32 copy of the gradient, then drops it
    opt.step()
    low_bytes = _tensor_bytes([*low.parameters(), *(p.grad for p in low.parameters()), *master])
    return n, fp32 / n, casts / n, (low_bytes + _optimizer_bytes(opt)) / n


def bytes_per_parameter(world_size: int = 8, *, dtype="bf16", hidden: int = 64, depth: int = 2, fsdp=None):
    """Bytes per parameter on one rank of ``world_size``, measured from the tensors where this process can (the
    course's MLP, one Adam step) beside the usual formulas (the ZeRO paper's 2 + 2 + 12 for mixed-precision
    Adam; ZeRO stages 1-3 shard the 12, then the gradients, then the weights).  ``fsdp``: a record of
    :func:`amp_lab.distributed.fsdp_train` (its ``memory``), measured on its own ranks."""
    world_size = check_int("world_size", world_size, minimum=1, maximum=MAX_WORLD_SIZE)
    dtype = parse_dtype(dtype)
    hidden = check_int("hidden", hidden, minimum=1, maximum=1024)
    depth = check_int("depth", depth, minimum=1, maximum=8)
    if fsdp is not None and not all(
        hasattr(fsdp, a) for a in ("memory", "world_size", "num_parameters", "dtypes")
    ):
        raise ArgumentTypeError(
            f"fsdp must be what amp_lab.distributed.fsdp_train returned, or None; got {fsdp!r:.80}"
        )
    n, fp32, casts, low = _measured_rows(dtype, hidden, depth)
    name, w = dtype_name(dtype), world_size
    rows = [
        MemoryRow("FP32 weights, Adam", fp32, 16, "4 + 4 + 8", "none"),
        MemoryRow("autocast: FP32 weights, Adam", fp32, 16, "4 + 4 + 8", "none"),
        MemoryRow(f"  + its {name} weight copies (until backward)", casts, 2, "2", "none"),
        MemoryRow(f"{name} weights + FP32 master, Adam", low, 16, "2 + 2 + 12", "none"),
        MemoryRow("ZeRO-1: optimizer state, master", None, zero_bytes(1, w), f"2 + 2 + 12/{w}", "12 of 16"),
        MemoryRow("ZeRO-2: and the gradients", None, zero_bytes(2, w), f"2 + 14/{w}", "14 of 16"),
        MemoryRow("ZeRO-3: and the weights", None, zero_bytes(3, w), f"16/{w}", "16 of 16"),
    ]
    if fsdp is not None:
        mem, ranks = fsdp.memory, fsdp.world_size
        measured = max(m["parameters"] + m["gradients"] + m["optimizer"] for m in mem) / fsdp.num_parameters
        setup = f"FSDP2 ({dtype_name(fsdp.dtypes['compute'])} compute), {ranks} ranks"
        rows.append(MemoryRow(setup, measured, 16 / ranks, f"(4 + 4 + 8)/{ranks}", "16 of 16"))
    return MemoryTable(tuple(rows), world_size, n)
