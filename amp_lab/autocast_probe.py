"""Autocast's op lists, asked of autocast itself (``05_autocast_op_lists``): the dispatcher probe.

The documented lists (:mod:`amp_lab.autocast_lists`) are C++ registrations that differ by device and
version and are wider than the docs.  So :func:`probe` runs a catalogue of ops on tiny tensors under
autocast and reports what really happened; :func:`classify` does the same for any function.

Telling the policies apart is the lesson:

* **"unchanged" versus "fp32".**  Fed float32 inputs, both give float32 out, so float32 inputs prove
  nothing.  Feed *low-precision* inputs: an fp32-policy op upcasts them and returns float32, an op without
  a rule returns the low dtype.  (A kernel that returns float32 from low inputs on its own would fool that
  test, so the probe also runs the call without autocast: only a change caused by autocast counts.)
* **"promote" versus ordinary type promotion.**  ``torch.add(bf16, fp32)`` gives float32 with or without
  autocast: the kernel promotes by itself.  So the probe records the operator calls at the dispatcher (a
  ``TorchDispatchMode``, :func:`dispatch_trace`): under a promote rule autocast issues its own casts
  (``aten._to_copy``) *before* the op, absent when the same call runs without autocast.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from numbers import Integral

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ._checks import ArgumentTypeError, bounded_list, check_bool, check_callable, check_choice, check_int
from .autocast_lists import POLICIES
from .device import check_fits, get_device
from .dtypes import parse_dtype
from .gpus import bf16_hardware
from .text import Reading

FAMILIES = (
    "matmul",
    "convolution",
    "rnn cell",
    "activation",
    "softmax",
    "normalization",
    "loss",
    "reduction",
    "pointwise",
    "pooling/padding",
    "cat/index",
    "fft",
)

# The most op names a list of ops may hold: the catalogue has about a hundred, so a longer list can only
# repeat them; checked by length before the list is read.
MAX_OP_NAMES = 1000

# The most elements classify's inputs may hold together: the probe reads dtypes, so tiny tensors suffice.
MAX_CLASSIFY_ELEMENTS = 2**20


# ---------------------------------------------------------------------------------------
# The catalogue: tiny inputs, one callable per op
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Op:
    name: str
    family: str
    shapes: tuple[tuple[int, ...], ...]  # shapes of the floating-point inputs
    call: Callable[..., object]  # takes exactly those inputs


def _rows(x: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """``n`` fixed int64 labels in ``[0, k)`` on ``x``'s device (no random state)."""
    return torch.arange(n, device=x.device) % k


def _signs(x: torch.Tensor) -> torch.Tensor:
    """A +1/-1 target with ``x``'s shape, dtype and device."""
    s = torch.ones_like(x)
    s.view(-1)[1::2] = -1
    return s


def _catalogue() -> tuple[_Op, ...]:
    o = _Op
    return (
        # matmul family ------------------------------------------------------------
        o("mm", "matmul", ((4, 4), (4, 4)), torch.mm),
        o("bmm", "matmul", ((2, 4, 4), (2, 4, 4)), torch.bmm),
        o("matmul", "matmul", ((4, 4), (4, 4)), torch.matmul),
        o("__matmul__", "matmul", ((4, 4), (4, 4)), lambda a, b: a @ b),
        o("addmm", "matmul", ((4, 4), (4, 4), (4, 4)), torch.addmm),
        o("addbmm", "matmul", ((4, 4), (2, 4, 4), (2, 4, 4)), torch.addbmm),
        o("baddbmm", "matmul", ((2, 4, 4), (2, 4, 4), (2, 4, 4)), torch.baddbmm),
        o("addmv", "matmul", ((4,), (4, 4), (4,)), torch.addmv),
        o("addr", "matmul", ((4, 4), (4,), (4,)), torch.addr),
        o("mv", "matmul", ((4, 4), (4,)), torch.mv),
        o("dot", "matmul", ((4,), (4,)), torch.dot),
        o("linear", "matmul", ((2, 4), (3, 4), (3,)), F.linear),
        o("bilinear", "matmul", ((2, 3), (2, 3), (4, 3, 3), (4,)), F.bilinear),
        o("multi_dot", "matmul", ((3, 4), (4, 4), (4, 2)), lambda a, b, c: torch.linalg.multi_dot([a, b, c])),
        o("einsum", "matmul", ((3, 4), (4, 2)), lambda a, b: torch.einsum("ij,jk->ik", a, b)),
        o("tensordot", "matmul", ((3, 4), (4, 2)), lambda a, b: torch.tensordot(a, b, dims=1)),
        o("linalg_vecdot", "matmul", ((3, 4), (3, 4)), torch.linalg.vecdot),
        o("scaled_dot_product_attention", "matmul", ((1, 2, 4, 8),) * 3, F.scaled_dot_product_attention),
        # convolutions -------------------------------------------------------------
        o("conv1d", "convolution", ((1, 2, 5), (3, 2, 3)), F.conv1d),
        o("conv2d", "convolution", ((1, 2, 5, 5), (3, 2, 3, 3)), F.conv2d),
        o("conv3d", "convolution", ((1, 2, 3, 3, 3), (3, 2, 2, 2, 2)), F.conv3d),
        o("conv_transpose1d", "convolution", ((1, 2, 5), (2, 3, 3)), F.conv_transpose1d),
        o("conv_transpose2d", "convolution", ((1, 2, 4, 4), (2, 3, 3, 3)), F.conv_transpose2d),
        o("conv_transpose3d", "convolution", ((1, 2, 3, 3, 3), (2, 3, 2, 2, 2)), F.conv_transpose3d),
        # recurrent cells (the docs name the nn modules) ------------------------------
        o("LSTMCell", "rnn cell", ((2, 3), (2, 4), (2, 4), (16, 3), (16, 4), (16,), (16,)),
          lambda x, h, c, wi, wh, bi, bh: torch.lstm_cell(x, (h, c), wi, wh, bi, bh)[0]),
        o("GRUCell", "rnn cell", ((2, 3), (2, 4), (12, 3), (12, 4), (12,), (12,)), torch.gru_cell),
        o("RNNCell", "rnn cell", ((2, 3), (2, 4), (4, 3), (4, 4), (4,), (4,)), torch.rnn_tanh_cell),
        # activations --------------------------------------------------------------
        o("relu", "activation", ((2, 4),), F.relu),
        o("gelu", "activation", ((2, 4),), F.gelu),
        o("silu", "activation", ((2, 4),), F.silu),
        o("sigmoid", "activation", ((2, 4),), torch.sigmoid),
        o("tanh", "activation", ((2, 4),), torch.tanh),
        o("softplus", "activation", ((2, 4),), F.softplus),
        o("prelu", "activation", ((2, 4), (1,)), F.prelu),
        # softmax --------------------------------------------------------------------
        o("softmax", "softmax", ((2, 4),), lambda x: torch.softmax(x, dim=-1)),
        o("log_softmax", "softmax", ((2, 4),), lambda x: torch.log_softmax(x, dim=-1)),
        o("softmin", "softmax", ((2, 4),), lambda x: F.softmin(x, dim=-1)),
        # normalisations -------------------------------------------------------------
        o("layer_norm", "normalization", ((2, 4), (4,), (4,)), lambda x, w, b: F.layer_norm(x, (4,), w, b)),
        o("group_norm", "normalization", ((1, 4, 3), (4,), (4,)), lambda x, w, b: F.group_norm(x, 2, w, b)),
        o("batch_norm", "normalization", ((3, 4), (4,), (4,)),
          lambda x, w, b: F.batch_norm(x, torch.zeros_like(w), torch.ones_like(w), w, b, training=False)),
        o("rms_norm", "normalization", ((2, 4), (4,)), lambda x, w: F.rms_norm(x, (4,), w)),
        o("normalize", "normalization", ((2, 4),), lambda x: F.normalize(x, dim=-1)),
        # losses -------------------------------------------------------------------
        o("mse_loss", "loss", ((2, 4), (2, 4)), F.mse_loss),
        o("l1_loss", "loss", ((2, 4), (2, 4)), F.l1_loss),
        o("smooth_l1_loss", "loss", ((2, 4), (2, 4)), F.smooth_l1_loss),
        o("huber_loss", "loss", ((2, 4), (2, 4)), F.huber_loss),
        o("cross_entropy", "loss", ((3, 4),), lambda x: F.cross_entropy(x, _rows(x, 3, 4))),
        o("nll_loss", "loss", ((3, 4),), lambda x: F.nll_loss(x, _rows(x, 3, 4))),
        o("kl_div", "loss", ((2, 4), (2, 4)), lambda x, y: F.kl_div(x, y, reduction="batchmean")),
        o("binary_cross_entropy", "loss", ((2, 4), (2, 4)), F.binary_cross_entropy),
        o("binary_cross_entropy_with_logits", "loss", ((2, 4), (2, 4)), F.binary_cross_entropy_with_logits),
        o("cosine_embedding_loss", "loss", ((2, 4), (2, 4)),
          lambda a, b: F.cosine_embedding_loss(a, b, _signs(a[:, 0]))),
        o("margin_ranking_loss", "loss", ((4,), (4,)), lambda a, b: F.margin_ranking_loss(a, b, _signs(a))),
        o("soft_margin_loss", "loss", ((2, 4),), lambda x: F.soft_margin_loss(x, _signs(x))),
        o("hinge_embedding_loss", "loss", ((2, 4),), lambda x: F.hinge_embedding_loss(x, _signs(x))),
        o("poisson_nll_loss", "loss", ((2, 4), (2, 4)), F.poisson_nll_loss),
        o("triplet_margin_loss", "loss", ((2, 4), (2, 4), (2, 4)), F.triplet_margin_loss),
        o("multi_margin_loss", "loss", ((3, 4),), lambda x: F.multi_margin_loss(x, _rows(x, 3, 4))),
        o("multilabel_margin_loss", "loss", ((3, 4),),
          lambda x: F.multilabel_margin_loss(x, _rows(x, 12, 4).view(3, 4))),
        # reductions and distances ---------------------------------------------------
        o("sum", "reduction", ((2, 4),), torch.sum),
        o("mean", "reduction", ((2, 4),), torch.mean),
        o("prod", "reduction", ((2, 4),), torch.prod),
        o("cumsum", "reduction", ((2, 4),), lambda x: torch.cumsum(x, dim=-1)),
        o("cumprod", "reduction", ((2, 4),), lambda x: torch.cumprod(x, dim=-1)),
        o("norm", "reduction", ((2, 4),), torch.norm),
        o("logsumexp", "reduction", ((2, 4),), lambda x: torch.logsumexp(x, dim=-1)),
        o("trace", "reduction", ((4, 4),), torch.trace),
        o("dist", "reduction", ((2, 4), (2, 4)), torch.dist),
        o("cdist", "reduction", ((3, 2), (4, 2)), torch.cdist),
        o("pdist", "reduction", ((4, 3),), F.pdist),
        o("cosine_similarity", "reduction", ((2, 4), (2, 4)), F.cosine_similarity),
        # pointwise math -------------------------------------------------------------
        o("exp", "pointwise", ((2, 4),), torch.exp),
        o("expm1", "pointwise", ((2, 4),), torch.expm1),
        o("log", "pointwise", ((2, 4),), torch.log),
        o("log2", "pointwise", ((2, 4),), torch.log2),
        o("log10", "pointwise", ((2, 4),), torch.log10),
        o("log1p", "pointwise", ((2, 4),), torch.log1p),
        o("pow", "pointwise", ((2, 4),), lambda x: torch.pow(x, 2)),
        o("reciprocal", "pointwise", ((2, 4),), torch.reciprocal),
        o("rsqrt", "pointwise", ((2, 4),), torch.rsqrt),
        o("sqrt", "pointwise", ((2, 4),), torch.sqrt),
        o("sin", "pointwise", ((2, 4),), torch.sin),
        o("sinh", "pointwise", ((2, 4),), torch.sinh),
        o("cosh", "pointwise", ((2, 4),), torch.cosh),
        o("tan", "pointwise", ((2, 4),), torch.tan),
        o("acos", "pointwise", ((2, 4),), torch.acos),
        o("asin", "pointwise", ((2, 4),), torch.asin),
        o("erfinv", "pointwise", ((2, 4),), torch.erfinv),
        o("add", "pointwise", ((2, 4), (2, 4)), torch.add),
        o("mul", "pointwise", ((2, 4), (2, 4)), torch.mul),
        o("addcmul", "pointwise", ((2, 4), (2, 4), (2, 4)), torch.addcmul),
        o("addcdiv", "pointwise", ((2, 4), (2, 4), (2, 4)), torch.addcdiv),
        o("atan2", "pointwise", ((2, 4), (2, 4)), torch.atan2),
        # pooling and padding --------------------------------------------------------
        o("max_pool2d", "pooling/padding", ((1, 1, 4, 4),), lambda x: F.max_pool2d(x, 2)),
        o("avg_pool2d", "pooling/padding", ((1, 1, 4, 4),), lambda x: F.avg_pool2d(x, 2)),
        o("max_pool3d", "pooling/padding", ((1, 1, 2, 2, 2),), lambda x: F.max_pool3d(x, 2)),
        o("avg_pool3d", "pooling/padding", ((1, 1, 2, 2, 2),), lambda x: F.avg_pool3d(x, 2)),
        o("adaptive_avg_pool3d", "pooling/padding", ((1, 1, 2, 2, 2),), lambda x: F.adaptive_avg_pool3d(x, 1)),
        o("reflection_pad2d", "pooling/padding", ((1, 1, 3, 3),), lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect")),
        o("replication_pad2d", "pooling/padding", ((1, 1, 3, 3),),
          lambda x: F.pad(x, (1, 1, 1, 1), mode="replicate")),
        # cat, stack and index ops ----------------------------------------------------
        o("cat", "cat/index", ((2, 3), (2, 3)), lambda a, b: torch.cat([a, b])),
        o("stack", "cat/index", ((2, 3), (2, 3)), lambda a, b: torch.stack([a, b])),
        o("index_copy", "cat/index", ((4, 3), (2, 3)), lambda x, s: x.index_copy(0, _rows(x, 2, 4) * 2, s)),
        o("index_put", "cat/index", ((4, 3), (2, 3)), lambda x, v: x.index_put((_rows(x, 2, 4) * 2,), v)),
        o("scatter_add", "cat/index", ((4, 3), (2, 3)),
          lambda x, s: x.scatter_add(0, _rows(x, 6, 4).view(2, 3), s)),
        o("index_select", "cat/index", ((4, 3),), lambda x: x.index_select(0, _rows(x, 2, 4))),
        o("gather", "cat/index", ((4, 3),), lambda x: x.gather(0, _rows(x, 6, 4).view(2, 3))),
        o("cross", "cat/index", ((2, 3), (2, 3)), lambda a, b: torch.cross(a, b, dim=1)),
        o("grid_sample", "cat/index", ((1, 1, 3, 3), (1, 2, 2, 2)),
          lambda x, g: F.grid_sample(x, g, align_corners=False)),
        # FFT (complex outputs are classified by their real part's dtype) ---------------
        o("fft_fft", "fft", ((8,),), torch.fft.fft),
        o("fft_rfft", "fft", ((8,),), torch.fft.rfft),
    )  # fmt: skip


_CATALOGUE: tuple[_Op, ...] | None = None


def _ops() -> tuple[_Op, ...]:
    global _CATALOGUE
    if _CATALOGUE is None:
        _CATALOGUE = _catalogue()
    return _CATALOGUE


def op_names(family: str | None = None) -> list[str]:
    """Names of the ops :func:`probe` runs (optionally only one ``family``)."""
    if family is not None:
        check_choice("family", family, FAMILIES)
    return [op.name for op in _ops() if family is None or op.family == family]


def op_list(name: str, ops) -> list[str]:
    """``ops`` as a list of at most :data:`MAX_OP_NAMES` op names: a string is one name, not its letters."""
    ops = bounded_list(name, ops, MAX_OP_NAMES, "a list of op names such as ['mm', 'softmax']")
    for i, op in enumerate(ops):
        if not isinstance(op, str):
            raise ArgumentTypeError(
                f"{name}[{i}] must be an op name such as 'mm', got {type(op).__name__}: {op!r:.80}"
            )
    return ops


# Catalogue name (the docs' spelling) -> the aten operator the catalogue's call reaches first, where the
# two differ: ``a @ b`` is aten::matmul, F.softmin(x) is softmax(-x), F.normalize and torch.norm(x) call
# linalg_vector_norm, F.cross_entropy is aten::cross_entropy_loss, the nn cells are the aten cell functions.
ATEN_OPS = {
    "__matmul__": "matmul",
    "multi_dot": "linalg_multi_dot",
    "conv_transpose2d": "conv_transpose2d.input",
    "conv_transpose3d": "conv_transpose3d.input",
    "LSTMCell": "lstm_cell",
    "GRUCell": "gru_cell",
    "RNNCell": "rnn_tanh_cell",
    "softmax": "softmax.int",
    "log_softmax": "log_softmax.int",
    "softmin": "softmax.int",
    "normalize": "linalg_vector_norm",
    "norm": "linalg_vector_norm",
    "cross_entropy": "cross_entropy_loss",
    "pow": "pow.Tensor_Scalar",
    "add": "add.Tensor",
    "mul": "mul.Tensor",
    "grid_sample": "grid_sampler",
}


def aten_op(name: str) -> str:
    """The aten op (``"softmax.int"``) behind a catalogue name (``"softmax"``, see :func:`op_names`)."""
    if not isinstance(name, str):
        raise ArgumentTypeError(
            f"name must be a catalogue op name such as 'softmax', got {type(name).__name__}"
        )
    check_choice("name", name, op_names())
    return ATEN_OPS.get(name, name)


# ---------------------------------------------------------------------------------------
# Watching the dispatcher
# ---------------------------------------------------------------------------------------

# Ops that only relabel or allocate memory; they say nothing about where the arithmetic happened.
_VIEWS = {
    "t", "view", "_unsafe_view", "reshape", "permute", "transpose", "expand", "unsqueeze",
    "squeeze", "slice", "select", "detach", "alias", "as_strided", "clone", "contiguous",
    "lift_fresh", "_to_copy", "empty_like", "zeros_like", "ones_like", "fill_", "copy_",
    "split", "split_with_sizes", "unbind", "_reshape_alias", "view_as_real", "index_put_",
    "empty", "zeros", "ones", "new_empty", "new_zeros", "arange", "_local_scalar_dense",
}  # fmt: skip


def short(dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``; None -> ``"-"``."""
    return "-" if dtype is None else str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class TraceCall:
    """One operator call seen by the dispatcher: ``op`` (e.g. ``"aten.mm.default"``), the dtypes of its
    tensor inputs and outputs, and for a cast (``aten._to_copy``) the dtype it cast to."""

    op: str
    inputs: tuple[torch.dtype, ...]
    outputs: tuple[torch.dtype, ...]
    to: torch.dtype | None = None

    @property
    def name(self) -> str:
        """The short op name: ``"mm"`` for ``aten.mm.default``."""
        parts = self.op.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    @property
    def is_cast(self) -> bool:
        return self.name == "_to_copy" and self.to is not None and self.inputs[:1] != (self.to,)

    @property
    def is_view(self) -> bool:
        """A call that only relabels or allocates memory (``t``, ``view``, ...), no arithmetic."""
        return self.name in _VIEWS and not self.is_cast

    def __str__(self) -> str:
        ins = ", ".join(short(d) for d in self.inputs)
        if self.is_cast:
            return f"cast  {ins} -> {short(self.to)}"
        return f"{self.name}({ins}) -> {', '.join(short(d) for d in self.outputs)}"


def _tensors(tree) -> list[torch.Tensor]:
    return [a for a in torch.utils._pytree.tree_leaves(tree) if isinstance(a, torch.Tensor)]


class _Recorder(TorchDispatchMode):
    """Records every operator call that reaches the dispatcher, after autocast."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ so that torch.compile skips it, which imports
        # torch._dynamo (seconds) on first use; nothing here is compiled.
        return False

    def __init__(self):
        super().__init__()
        self.calls: list[TraceCall] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        to = kwargs.get("dtype") if "_to_copy" in str(func) else None
        ins = tuple(t.dtype for t in _tensors((args, kwargs)))
        self.calls.append(TraceCall(str(func), ins, tuple(t.dtype for t in _tensors(out)), to))
        return out


def _run(fn, args, device_type, dtype, enabled, cache_enabled=None):
    """Call ``fn(*args)`` under autocast (or not) and record the dispatcher's calls."""
    rec = _Recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled), rec:
            out = fn(*args)
    return out, rec.calls


def autocast_dtype(device=None, dtype=None) -> torch.dtype:
    """The low-precision dtype autocast will use on ``device``.

    ``dtype=None`` is the device's autocast default (``torch.get_autocast_dtype``: float16 on CUDA,
    bfloat16 on CPU).  A dtype autocast does not support there raises ValueError.
    """
    dev = get_device(device)
    allowed = (torch.bfloat16, torch.float16)
    # bf16 Tensor Cores on this very GPU (torch.cuda.is_bf16_supported() counts emulation and asks about the
    # current device, not ``dev``): before Ampere the course does not race or probe bfloat16 on CUDA.
    if dev.type == "cuda" and not bf16_hardware(torch.cuda.get_device_capability(dev)):
        allowed = (torch.float16,)
    if dtype is None:
        dtype = torch.get_autocast_dtype(dev.type)
    return parse_dtype(dtype, allowed=allowed, name="dtype")


def dispatch_trace(
    fn: Callable, *args, device=None, dtype=None, enabled: bool = True, cache_enabled: bool | None = None
):
    """Run ``fn(*args)`` under ``torch.autocast`` and return ``(output, calls)``.

    ``calls`` is the list of :class:`TraceCall` the dispatcher saw, *after* autocast: the casts autocast
    inserted appear as ``aten._to_copy`` calls in front of the op they feed.  ``enabled=False`` runs the
    same call without autocast, for comparison; ``cache_enabled=False`` turns off autocast's weight-cast
    cache.
    """
    check_callable("fn", fn)
    enabled = check_bool("enabled", enabled)
    if cache_enabled is not None:
        cache_enabled = check_bool("cache_enabled", cache_enabled)
    dev = get_device(device)
    return _run(fn, args, dev.type, autocast_dtype(dev, dtype), enabled, cache_enabled)


# ---------------------------------------------------------------------------------------
# Probing
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpResult:
    """What autocast did to one op.

    ``dtype`` is the output dtype for float32 inputs; ``low_dtype`` for low-precision inputs;
    ``mixed_dtype`` for the first input low and the rest float32 (``None`` when not run).  ``casts``
    counts the casts autocast inserted in the run that decided the policy, ``kernels`` names the ops that
    then ran in the chosen dtype, and ``evidence`` is how the policy was decided (or why the op is
    ``"n/a"``): a :class:`~amp_lab.text.Reading` whose codes say which test decided it.
    """

    op: str
    family: str
    policy: str
    dtype: torch.dtype | None
    low_dtype: torch.dtype | None = None
    mixed_dtype: torch.dtype | None = None
    casts: int = 0
    kernels: tuple[str, ...] = ()
    evidence: Reading | None = None

    @property
    def reason(self) -> str:
        """The evidence in words."""
        return "" if self.evidence is None else str(self.evidence)


class ProbeTable(dict):
    """``{op name: OpResult}`` plus where it was probed: ``device_type``, ``dtype`` (the low-precision
    dtype autocast used) and ``torch_version``."""

    def __init__(self, results: Iterable[OpResult], *, device_type: str, dtype: torch.dtype):
        super().__init__((r.op, r) for r in results)
        self.device_type = device_type
        self.dtype = dtype
        self.torch_version = torch.__version__

    def policy(self, op: str) -> str:
        """The policy probed for ``op`` (a ValueError naming the probed ops when it was not probed)."""
        return probed_result(self, op, "op").policy

    def by_policy(self) -> dict[str, list[str]]:
        """Op names grouped by policy, in the order of :data:`~amp_lab.autocast_lists.POLICIES`."""
        groups: dict[str, list[str]] = {p: [] for p in POLICIES}
        for r in self.values():
            groups[r.policy].append(r.op)
        return groups

    def __repr__(self) -> str:
        counts = ", ".join(f"{p}: {len(ops)}" for p, ops in self.by_policy().items() if ops)
        return f"ProbeTable({self.device_type}, {short(self.dtype)}, {len(self)} ops; {counts})"


def probed_result(probed: ProbeTable, op, name: str) -> OpResult:
    """``probed[op]``, or a ValueError naming what was probed."""
    if not isinstance(op, str):
        raise ArgumentTypeError(
            f"{name} must be an op name such as 'mm', got {type(op).__name__}: {op!r:.80}"
        )
    if op not in probed:
        shown = ", ".join(list(probed)[:12]) + (", ..." if len(probed) > 12 else "")
        raise ValueError(f"{name}={op!r} was not probed; this table holds {len(probed)} ops: {shown}")
    return probed[op]


def _first_float(out) -> torch.dtype | None:
    for t in _tensors(out):
        if t.is_complex():
            return t.real.dtype if t.dtype != torch.complex32 else torch.float16
        if t.is_floating_point():
            return t.dtype
    return None


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else type(exc).__name__)[:160]}"


def _inputs(op: _Op, index: int, device: torch.device) -> list[torch.Tensor]:
    # Values in (0.1, 0.9): inside the domain of log, acos, erfinv, BCE's probabilities...
    gen = torch.Generator().manual_seed(1000 + index)
    return [(0.1 + 0.8 * torch.rand(s, generator=gen)).to(device) for s in op.shapes]


def _kernels(calls: list[TraceCall], dtype: torch.dtype) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c.name for c in calls if c.name not in _VIEWS and dtype in c.inputs))


def _listing(names: tuple[str, ...], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (", ..." if len(names) > limit else "") if names else "the op"


def _casts_to(calls: list[TraceCall], dtype: torch.dtype, plain: list[TraceCall] = ()) -> int:
    """Casts to ``dtype`` in ``calls`` that the same call without autocast (``plain``) does not make."""
    count = Counter((c.inputs[0], c.to) for c in calls if c.is_cast)
    count -= Counter((c.inputs[0], c.to) for c in plain if c.is_cast)
    return sum(n for (_, to), n in count.items() if to == dtype)


def _probe_one(op: _Op, index: int, dev: torch.device, low: torch.dtype) -> OpResult:
    f32 = torch.float32
    facts = {"op": op.name, "device": dev.type, "low": short(low), "torch": torch.__version__}

    def result(
        policy, code, *reasons, dtype=None, low_dtype=None, mixed_dtype=None, casts=0, kernels=(), **more
    ):
        shown = dict(dtype=short(dtype), low_dtype=short(low_dtype), mixed_dtype=short(mixed_dtype))
        facts.update(shown, casts=casts, kernels=_listing(kernels), **more)
        evidence = Reading(code, reasons, dict(facts))
        return OpResult(op.name, op.family, policy, dtype, low_dtype, mixed_dtype, casts, kernels, evidence)

    x32 = _inputs(op, index, dev)
    # 1. float32 inputs under autocast: does the op run lower?
    try:
        out, calls = _run(op.call, x32, dev.type, low, True)
    except Exception as exc:
        try:
            _run(op.call, x32, dev.type, low, False)
        except Exception:
            return result("n/a", "autocast.unavailable", dtype=None, error=_message(exc))
        return result("n/a", "autocast.refused", dtype=None, error=_message(exc))
    d32 = _first_float(out)
    down = _casts_to(calls, low)
    if d32 == low or down:
        # A composite op (an LSTM cell, say) may run its matmuls in the low dtype and still return float32,
        # because a later op without a rule meets a float32 tensor.
        back = () if d32 == low else ("autocast.promoted_back",)
        return result("lower", "autocast.lowered", *back, dtype=d32, casts=down, kernels=_kernels(calls, low))

    # 2. low-precision inputs under autocast: forced back to float32, or left alone?
    xlo = [t.to(low) for t in x32]
    try:
        out, calls = _run(op.call, xlo, dev.type, low, True)
    except Exception as exc:
        return result("n/a", "autocast.low_inputs_fail", dtype=d32, error=_message(exc))
    dlo = _first_float(out)
    if dlo == f32 and d32 == f32:
        # Some kernels return float32 from low-precision inputs by themselves; only call it autocast's fp32
        # policy when the same call without autocast stays low.
        try:
            plain = _first_float(_run(op.call, xlo, dev.type, low, False)[0])
            why, error = "autocast.plain_stays", ""
        except Exception as exc:
            plain, why, error = None, "autocast.plain_raises", _message(exc)
        if plain != f32:
            up = _casts_to(calls, f32)
            kw = dict(casts=up, kernels=_kernels(calls, f32), plain=short(plain), error=error)
            return result("fp32", "autocast.upcast", why, dtype=d32, low_dtype=dlo, **kw)
        return result("unchanged", "autocast.kernel_fp32", dtype=d32, low_dtype=dlo)
    if len(x32) < 2:
        return result("unchanged", "autocast.input_dtype", dtype=d32, low_dtype=dlo)

    # 3. mixed inputs: does *autocast* cast them to the widest type, or does the kernel promote by itself
    #    (or refuse)?  Compare the casts with and without autocast.
    xmix = [xlo[0], *x32[1:]]
    try:
        out, calls = _run(op.call, xmix, dev.type, low, True)
        dmix = _first_float(out)
    except Exception as exc:
        return result("unchanged", "autocast.mixed_raise", dtype=d32, low_dtype=dlo, error=_message(exc))
    try:
        plain_calls, why, error = _run(op.call, xmix, dev.type, low, False)[1], "autocast.plain_no_cast", ""
    except Exception as exc:
        plain_calls, why, error = [], "autocast.plain_mixed_raises", _message(exc)
    upcasts = _casts_to(calls, dmix, plain_calls)
    if dmix == f32 and upcasts:
        kw = dict(casts=upcasts, kernels=_kernels(calls, f32), error=error)
        return result("promote", "autocast.promote", why, dtype=d32, low_dtype=dlo, mixed_dtype=dmix, **kw)
    return result("unchanged", "autocast.kernel_promotion", dtype=d32, low_dtype=dlo, mixed_dtype=dmix)


def classify(fn: Callable, shapes, *, name: str = "custom", device=None, dtype=None) -> OpResult:
    """Classify any callable the way :func:`probe` classifies its catalogue.

    ``fn`` takes one floating-point tensor per entry of ``shapes`` (each a tuple of positive ints); integer
    arguments such as class labels go inside ``fn``.  For example
    ``classify(F.pairwise_distance, [(3, 4), (3, 4)])``.  All inputs together may hold at most
    :data:`MAX_CLASSIFY_ELEMENTS` elements and must fit in the device's free memory, checked before
    anything is allocated.
    """
    if not isinstance(shapes, (list, tuple)):
        raise ArgumentTypeError(
            f"shapes must be a non-empty list of shapes such as [(3, 4)], got {shapes!r:.80}"
        )
    if not shapes:
        raise ValueError("shapes must be a non-empty list of shapes such as [(3, 4)], got an empty list")
    clean = []
    for i, shape in enumerate(shapes):
        shape = (shape,) if isinstance(shape, Integral) and not isinstance(shape, bool) else shape
        if not isinstance(shape, (list, tuple)):
            raise ArgumentTypeError(
                f"shapes[{i}] must be a tuple of positive ints such as (3, 4), got {shape!r:.80}"
            )
        clean.append(tuple(check_int(f"shapes[{i}][{j}]", n, minimum=1) for j, n in enumerate(shape)))
    check_callable("fn", fn)
    if not isinstance(name, str):
        raise ArgumentTypeError(f"name must be a string, got {type(name).__name__}: {name!r:.80}")
    elements = sum(torch.Size(s).numel() for s in clean)
    if elements > MAX_CLASSIFY_ELEMENTS:
        raise ValueError(
            f"shapes={clean!r:.120} hold {elements:,} elements in all; classify needs tiny tensors and allows at "
            f"most {MAX_CLASSIFY_ELEMENTS:,} (the probe only looks at dtypes): choose shapes such as [(3, 4)]"
        )
    dev = get_device(device)
    # float32 inputs, their low-precision copies and outputs: a generous 16 bytes per element.
    check_fits(
        16 * elements, dev, f"classify(shapes={clean!r:.80})", "choose smaller shapes such as [(3, 4)]"
    )
    low = autocast_dtype(dev, dtype)
    return _probe_one(_Op(name, "custom", tuple(clean), fn), 999, dev, low)


def probe(device=None, dtype=None, *, ops: Iterable[str] | None = None) -> ProbeTable:
    """Run the catalogue under ``torch.autocast(device.type, dtype)`` and classify each op.

    Returns a :class:`ProbeTable` keyed by the op names PyTorch's AMP docs use (``"mm"``, ``"softmax"``,
    ``"cross_entropy"``, ...); each :class:`OpResult` carries ``policy`` and the output ``dtype``.
    ``dtype=None`` is the device's autocast default; a dtype autocast does not support on the device raises
    ValueError.  ``ops`` restricts the probe to some names (see :func:`op_names`).  Every tensor is tiny, so
    the whole catalogue takes about a second.  An op that cannot run here comes back ``"n/a"`` with the
    reason, never as an exception.
    """
    dev = get_device(device)
    low = autocast_dtype(dev, dtype)
    index = {op.name: i for i, op in enumerate(_ops())}
    if ops is not None:
        wanted = set(op_list("ops", ops))
        for name in wanted:
            check_choice("ops", name, index)
    chosen = [op for op in _ops() if ops is None or op.name in wanted]
    return ProbeTable(
        [_probe_one(op, index[op.name], dev, low) for op in chosen], device_type=dev.type, dtype=low
    )
