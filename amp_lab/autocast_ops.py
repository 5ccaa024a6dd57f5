"""What autocast really does (05): the catalogue probed under autocast (float32, low and mixed inputs, with
and without it; casts seen by :func:`dispatch_trace`) beside the docs and rules of ``autocast_lists``."""

from __future__ import annotations

import math
import textwrap
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from numbers import Integral

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import autocast_lists as al
from ._checks import (
    bounded_list,
    check_bool,
    check_callable,
    check_choice,
    check_float,
    check_instance,
    check_int,
)
from .device import check_fits, get_device
from .dtypes import parse_dtype
from .gpus import bf16_hardware
from .text import Reading, say

MAX_CLASSIFY_ELEMENTS = 2**20  # the probe reads dtypes, so tiny tensors suffice


# Ops that only relabel or allocate memory: they say nothing about where the arithmetic happened.
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
    """One operator call the dispatcher saw: ``op``, its tensors' dtypes in and out, and a cast's ``to``."""

    op: str
    inputs: tuple[torch.dtype, ...]
    outputs: tuple[torch.dtype, ...]
    to: torch.dtype | None = None

    @property
    def name(self) -> str:
        return self.op.split(".")[1 if "." in self.op else 0]

    @property
    def is_cast(self) -> bool:
        return self.name == "_to_copy" and self.to is not None and self.inputs[:1] != (self.to,)

    @property
    def is_view(self) -> bool:  # relabels or allocates memory: no arithmetic
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
        return False  # else torch imports torch._dynamo (seconds) on first use; nothing here is compiled

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
    """The low dtype autocast uses on ``device`` (default: float16 on CUDA, bfloat16 on CPU) or ValueError."""
    dev = get_device(device)
    allowed = (torch.bfloat16, torch.float16)
    if dev.type == "cuda" and not bf16_hardware(torch.cuda.get_device_capability(dev)):
        allowed = (torch.float16,)  # this very GPU's hardware, not torch.cuda.is_bf16_supported()'s emulation
    dtype = torch.get_autocast_dtype(dev.type) if dtype is None else dtype
    return parse_dtype(dtype, allowed=allowed, name="dtype")


def dispatch_trace(
    fn: Callable, *args, device=None, dtype=None, enabled: bool = True, cache_enabled: bool | None = None
):
    """``(output, calls)`` of ``fn(*args)`` under ``torch.autocast`` (or not): the :class:`TraceCall` list."""
    check_callable("fn", fn)
    enabled = check_bool("enabled", enabled)
    cache_enabled = None if cache_enabled is None else check_bool("cache_enabled", cache_enabled)
    dev = get_device(device)
    return _run(fn, args, dev.type, autocast_dtype(dev, dtype), enabled, cache_enabled)


@dataclass(frozen=True)
class OpResult:
    """What autocast did to one op: ``policy``, output dtypes (float32, low, mixed inputs), ``evidence``."""

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
        return "" if self.evidence is None else str(self.evidence)


class ProbeTable(dict):
    """``{op name: OpResult}`` plus ``device_type``, ``dtype`` (the low dtype) and ``torch_version``."""

    def __init__(self, results: Iterable[OpResult], *, device_type: str, dtype: torch.dtype):
        super().__init__((r.op, r) for r in results)
        self.device_type, self.dtype, self.torch_version = device_type, dtype, torch.__version__

    def by_policy(self) -> dict[str, list[str]]:
        """Op names grouped by policy, in the order of :data:`~amp_lab.autocast_lists.POLICIES`."""
        return {p: [r.op for r in self.values() if r.policy == p] for p in al.POLICIES}

    def __repr__(self) -> str:
        counts = ", ".join(f"{p}: {len(ops)}" for p, ops in self.by_policy().items() if ops)
        return f"ProbeTable({self.device_type}, {short(self.dtype)}, {len(self)} ops; {counts})"


def _first_float(out) -> torch.dtype | None:
    """The dtype of the first floating (or complex: its real part's) output tensor."""
    return next((t.dtype.to_real() for t in _tensors(out) if t.is_floating_point() or t.is_complex()), None)


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else type(exc).__name__)[:160]}"


def _inputs(op: al.Op, index: int, device: torch.device) -> list[torch.Tensor]:
    # Values in (0.1, 0.9): inside the domain of log, acos, erfinv, BCE's probabilities...
    gen = torch.Generator().manual_seed(1000 + index)
    return [(0.1 + 0.8 * torch.rand(s, generator=gen)).to(device) for s in op.shapes]


def _kernels(calls: list[TraceCall], dtype: torch.dtype) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c.name for c in calls if c.name not in _VIEWS and dtype in c.inputs))


def _casts_to(calls: list[TraceCall], dtype: torch.dtype, plain: list[TraceCall] = ()) -> int:
    """Casts to ``dtype`` in ``calls`` that the same call without autocast (``plain``) does not make."""
    count = Counter((c.inputs[0], c.to) for c in calls if c.is_cast)
    count -= Counter((c.inputs[0], c.to) for c in plain if c.is_cast)
    return sum(n for (_, to), n in count.items() if to == dtype)


def _probe_one(op: al.Op, index: int, dev: torch.device, low: torch.dtype) -> OpResult:
    f32 = torch.float32
    facts = {"op": op.name, "device": dev.type, "low": short(low), "torch": torch.__version__}

    def result(
        policy, code, *reasons, dtype=None, low_dtype=None, mixed_dtype=None, casts=0, kernels=(), **more
    ):
        shown = dict(dtype=short(dtype), low_dtype=short(low_dtype), mixed_dtype=short(mixed_dtype))
        listed = ", ".join(kernels[:3]) + (", ..." if len(kernels) > 3 else "") if kernels else "the op"
        facts.update(shown, casts=casts, kernels=listed, **more)
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
    """Classify any callable as :func:`probe` classifies its catalogue: ``fn`` takes one float tensor per
    shape of ``shapes`` (at most :data:`MAX_CLASSIFY_ELEMENTS` elements in all), e.g. ``[(3, 4), (3, 4)]``."""
    check_instance("shapes", shapes, (list, tuple), "a non-empty list of shapes such as [(3, 4)]")
    if not shapes:
        raise ValueError("shapes must be a non-empty list of shapes such as [(3, 4)], got none")
    clean = []
    for i, shape in enumerate(shapes):
        shape = (shape,) if isinstance(shape, Integral) and not isinstance(shape, bool) else shape
        check_instance(f"shapes[{i}]", shape, (list, tuple), "a tuple of positive ints such as (3, 4)")
        clean.append(tuple(check_int(f"shapes[{i}][{j}]", n, minimum=1) for j, n in enumerate(shape)))
    check_callable("fn", fn)
    check_instance("name", name, str, "a string")
    elements = sum(torch.Size(s).numel() for s in clean)
    if elements > MAX_CLASSIFY_ELEMENTS:
        most = f"classify allows at most {MAX_CLASSIFY_ELEMENTS:,} (the probe only looks at dtypes)"
        raise ValueError(f"shapes hold {elements:,} elements in all; {most}: choose shapes such as [(3, 4)]")
    dev = get_device(device)
    check_fits(16 * elements, dev, f"classify(shapes={clean!r:.80})", "choose smaller shapes, e.g. [(3, 4)]")
    return _probe_one(al.Op(name, "custom", tuple(clean), fn), 999, dev, autocast_dtype(dev, dtype))


def probe(device=None, dtype=None, *, ops: Iterable[str] | None = None) -> ProbeTable:
    """Run the catalogue (or its ``ops`` named) under ``torch.autocast`` in ``dtype`` (None: the device's
    default) and classify each op, keyed by the docs' names; an op that cannot run here is ``"n/a"``."""
    dev = get_device(device)
    low = autocast_dtype(dev, dtype)
    wanted = None if ops is None else set(al.op_list("ops", ops))
    todo = [(i, op) for i, op in enumerate(al.catalogue()) if wanted is None or op.name in wanted]
    return ProbeTable([_probe_one(op, i, dev, low) for i, op in todo], device_type=dev.type, dtype=low)


@dataclass(frozen=True)
class Difference:
    """One op where the probe and the docs disagree; ``reading`` says how."""

    op: str
    probed: str
    documented: str
    reading: Reading


@dataclass(frozen=True)
class Comparison:
    """A probe set beside the documented lists of its device type."""

    device_type: str
    probed_torch: str
    documented_torch: str
    agree: tuple[str, ...]
    differ: tuple[Difference, ...]

    @property
    def reading(self) -> Reading:
        counts = dict(device=self.device_type, agree=len(self.agree), differ=len(self.differ))
        return Reading("autocast.compared", (), vars(self) | counts)


def compare(probed: ProbeTable) -> Comparison:
    """Agreements and differences between a probe and its device's documented lists."""
    check_instance("probed", probed, ProbeTable, "the ProbeTable that probe() returns")
    device = check_choice("probed.device_type", probed.device_type, al.AUTOCAST_KEYS)
    agree, differ = [], []
    for name, result in probed.items():
        doc = al.documented_policy(name, device)
        if doc == result.policy:
            agree.append(name)
        elif result.policy == "n/a":
            differ.append(Difference(name, result.policy, doc, result.evidence))
        else:
            code = "autocast.documented_no_cast" if result.policy == "unchanged" else "autocast.differs"
            if doc == "unchanged":
                code = "autocast.undocumented_" + ("lower" if result.policy == "lower" else "fp32")
            facts = dict(result.evidence.facts, probed=result.policy, documented=doc)
            differ.append(Difference(name, result.policy, doc, Reading(code, (), facts)))
    documented = al.DOCUMENTED["torch_version"]
    return Comparison(device, probed.torch_version, documented, tuple(agree), tuple(differ))


@dataclass(frozen=True)
class RuleRow:
    """One op's ``documented`` policy and registered ``rule`` per device, and its ``probed`` one (or None)."""

    op: str
    aten: str
    documented: dict
    rule: dict
    probed: str | None = None
    probed_device: str | None = None


def rule_comparison(probed: ProbeTable | None = None, *, ops: Iterable[str] | None = None) -> list[RuleRow]:
    """One :class:`RuleRow` per op of ``ops`` (default: the probe's, or the catalogue): the docs, the rules
    the dispatcher holds for CPU *and* CUDA, and the probe."""
    if probed is not None:
        check_instance("probed", probed, ProbeTable, "the ProbeTable that probe() returns")
    if ops is None:
        names = list(probed) if probed is not None else al.op_names()
    else:
        names = al.op_list("ops", ops)
        for i, name in enumerate(names):
            if probed is not None and name not in probed:
                raise ValueError(f"ops[{i}]={name!r} was not probed; the probe holds {len(probed)} ops")
    rows = []
    for name in names:
        aten = al.ATEN_OPS.get(name, name)
        base = aten.partition(".")[0]  # the docs list some ops under their aten name (matmul, not __matmul__)
        doc = {d: al.documented_policy(name, d) for d in al.AUTOCAST_KEYS}
        documented = {d: al.documented_policy(base, d) if p == "unchanged" else p for d, p in doc.items()}
        rule = {d: al.has_autocast_rule(aten, d) for d in al.AUTOCAST_KEYS}
        seen = () if probed is None else (probed[name].policy, probed.device_type)
        rows.append(RuleRow(name, aten, documented, rule, *seen))
    return rows


def rule_groups(rows: Iterable[RuleRow]) -> list[Reading]:
    """One Reading per non-empty group of rows: where the devices' rules differ, where a device's rules and
    docs disagree, and which probed ops were cast without a rule of their own (by decomposition)."""
    rows = bounded_list("rows", rows, al.MAX_OP_NAMES, "the list rule_comparison() returns")
    for i, r in enumerate(rows):
        check_instance(f"rows[{i}]", r, RuleRow, "a RuleRow (rule_comparison() builds them)")
    groups: dict[tuple[str, str], list[str]] = {
        ("autocast.rule_cuda_only", ""): [r.op for r in rows if r.rule["cuda"] and not r.rule["cpu"]],
        ("autocast.rule_cpu_only", ""): [r.op for r in rows if r.rule["cpu"] and not r.rule["cuda"]],
    }
    for d in al.AUTOCAST_KEYS:
        groups["autocast.rule_undocumented", d] = [
            r.op for r in rows if r.rule[d] and r.documented[d] == "unchanged"
        ]
        groups["autocast.documented_no_rule", d] = [
            r.op for r in rows if not r.rule[d] and r.documented[d] in al.LISTED
        ]
    for r in rows:
        if r.probed_device in al.AUTOCAST_KEYS and r.probed in al.LISTED and not r.rule[r.probed_device]:
            groups.setdefault((f"autocast.probed_{r.probed}_no_rule", r.probed_device), []).append(r.op)
    return [
        Reading(code, (), {"device": device.upper(), "n": len(ops), "ops": ", ".join(ops)})
        for (code, device), ops in groups.items()
        if ops
    ]


def format_groups(probed: ProbeTable, *, width: int = 100) -> str:
    """The probe as one paragraph per policy: ``policy (n) - meaning:`` and its ops."""
    check_instance("probed", probed, ProbeTable, "the ProbeTable that probe() returns")
    width = check_int("width", width, minimum=20, maximum=10_000)
    return "\n".join(
        f"{policy} ({len(names)}) - {say('autocast.policy_' + policy.replace('/', ''))}:\n"
        + textwrap.fill(", ".join(names), width=width, initial_indent="    ", subsequent_indent="    ")
        for policy, names in probed.by_policy().items()
        if names
    )


_FLOATS = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def _float_dtype(name: str, value) -> torch.dtype:
    check_instance(name, value, torch.dtype, "a torch dtype such as torch.float32")
    return check_choice(name, value, _FLOATS)


def read_call(op: str, device_type: str, in_dtype, out_dtype, plain_dtype=None) -> Reading:
    """What autocast did to one call of the aten op ``op``: ``in_dtype`` inputs gave ``out_dtype``
    (``plain_dtype``: without autocast); the reasons say whether each device registers a rule."""
    rules = {d: al.has_autocast_rule(op, d) for d in al.AUTOCAST_KEYS}  # validates op
    check_choice("device_type", device_type, al.AUTOCAST_KEYS)
    din, dout = _float_dtype("in_dtype", in_dtype), _float_dtype("out_dtype", out_dtype)
    dplain = None if plain_dtype is None else _float_dtype("plain_dtype", plain_dtype)
    wide = {d: torch.finfo(d).bits + (d == torch.float16) for d in _FLOATS}  # float16 above bfloat16
    outcome = "kept" if din == dout else "lowered" if wide[dout] < wide[din] else "upcast"
    reasons = ["autocast.rule_here" if rules[device_type] else "autocast.no_rule_here"]
    if rules["cpu"] != rules["cuda"]:
        reasons.append("autocast.rule_decides")
    if dplain is not None:
        reasons.append("autocast.plain_gives")
    facts = dict(op=op.removeprefix("aten::"), device=device_type.upper(), rule=rules[device_type])
    facts |= {f"rule_{d}": "yes" if rules[d] else "no" for d in al.AUTOCAST_KEYS}
    facts |= dict(in_dtype=short(din), dtype=short(dout), plain=short(dplain))
    return Reading(f"autocast.call_{outcome}", tuple(reasons), facts)


VARIANCE_BANDS = ("within 1% of it", "off by 1% to 50%", "off by more than half of it")


def read_variance(
    truth: float, autocast_value: float, protected_value: float, mean_square: float, dtype
) -> Reading:
    """How the variance by moments fared inside autocast (``autocast_value``, in ``dtype``) and outside it
    against the float64 ``truth``, given E[x^2] (``mean_square``); ``facts["band"]``: VARIANCE_BANDS."""
    truth = check_float("truth", truth, gt=0)
    autocast_value = check_float("autocast_value", autocast_value)
    protected_value = check_float("protected_value", protected_value)
    mean_square = check_float("mean_square", mean_square, gt=0, le=torch.finfo(torch.float64).max)
    dtype = _float_dtype("dtype", dtype)
    error = abs(autocast_value - truth)
    band = 0 if error < truth / 100 else 1 if error <= truth / 2 else 2
    spacing = torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(mean_square))  # the dtype's step there
    reasons = (
        "autocast.spacing_far" if spacing > 10 * truth else "autocast.spacing_comparable",
        "autocast.protected_ok" if abs(protected_value - truth) < 1e-3 else "autocast.protected_off",
    )
    outcome = ("autocast.variance_close", "autocast.variance_off", "autocast.variance_lost")[band]
    facts = dict(
        band=VARIANCE_BANDS[band], error=error, truth=truth, dtype=short(dtype), mean_square=mean_square
    )
    return Reading(outcome, reasons, facts | {"spacing": spacing})
