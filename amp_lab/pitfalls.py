"""Pitfalls run live (09): autocast's cast cache, Adam's eps in FP16, attention logits overflowing FP16 (and
SDPA), ``torch.compile`` with autocast; its bounds are shared with swamping and subnormals."""

from __future__ import annotations

import contextlib
import math
import types
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ._checks import check_bool, check_float, check_int, check_seed
from .device import amp_dtype, check_fits, float64_on_cpu, get_device, seeded
from .dtypes import dtype_name, parse_dtype
from .text import Reading

# Bounds on the work of one call (CONTRIBUTING.md, "Bounded work"): every loop stays under a few seconds.
MAX_STEPS = 10_000  # optimizer steps or updates of one run
MAX_WORK = 1 << 26  # elements times steps of one run (adam_eps_underflow, swamping_run)
MAX_NUMEL = 1 << 22  # elements of one tensor a learner sizes
MAX_HEAD_DIM = 4096  # attention: head dimension
MAX_SEQ = 1024  # attention: sequence length (the logits are seq x seq)

FP16_HALF_SUBNORMAL = torch.finfo(torch.float16).tiny * torch.finfo(torch.float16).eps / 2  # 2**-25


def check_work(numel: int, num_steps: int) -> None:
    """Refuse a run of more than :data:`MAX_WORK` element-steps."""
    if numel * num_steps > MAX_WORK:
        raise ValueError(
            f"numel={numel} times num_steps={num_steps} is {numel * num_steps:,} element-steps, more than the "
            f"{MAX_WORK:,} one demonstration may take; choose fewer weights or fewer steps"
        )


class Reads:
    """A record whose ``str()`` is its :meth:`reading`, wrapped between words at 100 characters (JupyterLab's
    own wrapping at 1280 px breaks inside a number)."""

    def __str__(self) -> str:
        return str(self.reading())


def read_cast_cache(weight_changed: bool, stale_inside: bool) -> Reading:
    """Two forward passes around an ``opt.step()`` inside one autocast region: ``pitfalls.cache_stale`` (the
    weight changed, the output did not), ``pitfalls.cache_fresh`` or ``pitfalls.cache_no_change``."""
    weight_changed = check_bool("weight_changed", weight_changed)
    stale_inside = check_bool("stale_inside", stale_inside)
    outcome = "pitfalls.cache_stale" if stale_inside else "pitfalls.cache_fresh"
    if not weight_changed:
        outcome = "pitfalls.cache_no_change"
    return Reading(outcome, facts={"weight_changed": weight_changed, "stale_inside": stale_inside})


@dataclass(frozen=True)
class CastCacheResult(Reads):
    """What one autocast region saw of a weight updated in place inside it, and whether each way out gives
    the updated weight's output ``F.linear(X.to(dtype), W_new.to(dtype))``."""

    device_type: str
    dtype: torch.dtype
    cache_enabled: bool  # torch.is_autocast_cache_enabled() when the experiment ran
    weight_changed: bool
    stale_inside: bool
    stale_error: float  # largest |output after the step inside the region - the updated weight's output|
    matches_update_new_region: bool
    matches_update_cleared: bool
    matches_update_uncached: bool

    @property
    def cache_applies(self) -> bool:
        """The weight changed, yet the region kept using its old low-precision copy."""
        return self.weight_changed and self.stale_inside

    def reading(self) -> Reading:
        base = read_cast_cache(self.weight_changed, self.stale_inside)
        reasons = ("pitfalls.cache_stale_error",) if self.cache_applies else ()
        new, clear, off = (
            self.matches_update_new_region,
            self.matches_update_cleared,
            self.matches_update_uncached,
        )
        reasons += (
            "pitfalls.cache_new_region_matches" if new else "pitfalls.cache_new_region_stale",
            "pitfalls.cache_cleared_matches" if clear else "pitfalls.cache_cleared_stale",
            "pitfalls.cache_uncached_matches" if off else "pitfalls.cache_uncached_stale",
        )
        facts = vars(self) | base.facts | {"dtype": dtype_name(self.dtype)}
        return Reading(base.outcome, reasons, facts)


def weight_cast_cache(device=None, *, dtype=None, lr: float = 0.5, seed: int = 0) -> CastCacheResult:
    """An SGD step *inside* one autocast region on a float32 ``nn.Linear(16, 8, bias=False)``: does the region
    notice?  The three ways out (a new region, ``clear_autocast_cache``, ``cache_enabled=False``) run too."""
    dev = get_device(device)
    dtype = amp_dtype(dev) if dtype is None else parse_dtype(dtype)
    lr = check_float("lr", lr, gt=0, le=1e3)
    seed = check_seed("seed", seed)
    with seeded(seed):
        lin = torch.nn.Linear(16, 8, bias=False).to(dev)
        X = torch.rand(4, 16, device=dev)
    before_weight = lin.weight.detach().clone()
    opt = torch.optim.SGD(lin.parameters(), lr=lr)

    def step():
        opt.zero_grad(set_to_none=True)
        out = lin(X)
        out.float().square().sum().backward()
        opt.step()
        return out.detach()

    def new_output():
        with torch.no_grad():
            return F.linear(X.to(dtype), lin.weight.detach().to(dtype))

    cache_enabled = bool(torch.is_autocast_cache_enabled())
    with torch.autocast(dev.type, dtype=dtype):
        first = step()
        second = lin(X).detach()  # same region, after the step
    reference = new_output()
    weight_changed = not torch.equal(before_weight, lin.weight.detach())
    with torch.autocast(dev.type, dtype=dtype):  # the fix: a fresh region after the step
        fresh = lin(X).detach()
    with torch.autocast(dev.type, dtype=dtype):
        step()
        torch.clear_autocast_cache()
        cleared = lin(X).detach()
    matches_cleared = torch.equal(cleared, new_output())
    with torch.autocast(dev.type, dtype=dtype, cache_enabled=False):
        step()
        uncached = lin(X).detach()
    return CastCacheResult(
        device_type=dev.type,
        dtype=dtype,
        cache_enabled=cache_enabled,
        weight_changed=weight_changed,
        stale_inside=torch.equal(first, second),
        stale_error=float((second.float() - reference.float()).abs().max()),
        matches_update_new_region=torch.equal(fresh, reference),
        matches_update_cleared=matches_cleared,
        matches_update_uncached=torch.equal(uncached, new_output()),
    )


def read_fp16_eps(eps: float) -> Reading:
    """What float16 stores for Adam's ``eps``, against half its smallest subnormal (the rounding boundary):
    outcome ``"pitfalls.eps_lost"`` (it rounds to zero) or ``"pitfalls.eps_kept"``."""
    eps = check_float("eps", eps, ge=0, le=1.0)
    stored = float(torch.tensor(eps, dtype=torch.float16))
    facts = {"eps": eps, "eps_in_fp16": stored, "half_subnormal": FP16_HALF_SUBNORMAL}
    return Reading("pitfalls.eps_lost" if stored == 0 else "pitfalls.eps_kept", facts=facts)


@dataclass(frozen=True)
class AdamEpsResult(Reads):
    """Adam on the same gradients with FP16 weights and state, and with FP32 master weights and state:
    ``distance_*`` are ``||w - target||`` after each step (index 0: before the first), nan once non-finite."""

    device_type: str
    eps: float
    eps_in_fp16: float
    grad_max: float  # the largest |gradient| of the first step, in float16
    v_zero_fraction_fp16: float  # share of exp_avg_sq entries exactly 0 after the first step, FP16 state
    v_zero_fraction_fp32: float
    first_nonfinite_step_fp16: int | None  # first step after which a weight is inf or nan
    first_nonfinite_step_fp32: int | None
    distance_fp16: tuple[float, ...]
    distance_fp32: tuple[float, ...]

    def reading(self) -> Reading:
        """Outcome: whether the FP16 weights turned inf or nan; then eps, second moments, the FP32 run."""
        eps = read_fp16_eps(self.eps)
        d16, d32 = self.distance_fp16, self.distance_fp32
        facts = vars(self) | eps.facts | {"num_steps": len(d32) - 1, "fp16_end": d16[-1], "fp32_end": d32[-1]}
        fp16_bad = self.first_nonfinite_step_fp16 is not None
        outcome = "pitfalls.fp16_adam_nonfinite" if fp16_bad else "pitfalls.fp16_adam_finite"
        fp32_bad = self.first_nonfinite_step_fp32 is not None
        fp32 = "pitfalls.fp32_adam_nonfinite" if fp32_bad else "pitfalls.fp32_adam_finite"
        return Reading(outcome, (eps.outcome, "pitfalls.adam_v_zero", fp32), facts)


def adam_eps_underflow(
    device=None,
    *,
    grad_size: float = 1e-4,
    num_steps: int = 200,
    lr: float = 0.01,
    eps: float = 1e-8,
    numel: int = 16,
    seed: int = 0,
) -> AdamEpsResult:
    """Adam with pure-FP16 weights and state against FP32 master weights and state: ``numel`` weights from 0
    chase a seeded target with the float16 gradient ``grad_size * (w - target)``.  Work bounded by MAX_*."""
    dev = get_device(device)
    grad_size = check_float("grad_size", grad_size, gt=0, le=1e4)
    num_steps = check_int("num_steps", num_steps, minimum=1, maximum=MAX_STEPS)
    lr = check_float("lr", lr, gt=0, le=10.0)
    eps = check_float("eps", eps, ge=0, le=1.0)
    numel = check_int("numel", numel, minimum=1, maximum=MAX_NUMEL)
    check_work(numel, num_steps)
    seed = check_seed("seed", seed)
    need = numel * 4 * 8 + num_steps * 16
    check_fits(need, dev, f"adam_eps_underflow(numel={numel})", "choose a smaller numel")
    with seeded(seed):
        target = torch.rand(numel).to(dev)
    target16 = target.to(torch.float16)
    size16 = torch.tensor(grad_size, dtype=torch.float16, device=dev)

    def run(dtype: torch.dtype):
        w = torch.nn.Parameter(torch.zeros(numel, dtype=dtype, device=dev))
        opt = torch.optim.Adam([w], lr=lr, eps=eps)
        distances, finite = [], []
        for i in range(num_steps):
            distances.append(w.detach().float() - target)
            # the gradient as a float16 model computes it
            w.grad = ((w.detach().to(torch.float16) - target16) * size16).to(dtype)
            opt.step()
            if i == 0:
                v_zero = float((opt.state[w]["exp_avg_sq"] == 0).float().mean())
            finite.append(torch.isfinite(w.detach()).all())
        distances.append(w.detach().float() - target)
        d = float64_on_cpu(torch.stack(distances)).norm(dim=1)  # one transfer at the end: no sync in the loop
        bad = (~torch.stack(finite).cpu()).nonzero()
        dist = tuple(x if math.isfinite(x) else math.nan for x in d.tolist())
        return dist, int(bad[0, 0]) + 1 if len(bad) else None, v_zero

    (d16, bad16, vz16), (d32, bad32, vz32) = run(torch.float16), run(torch.float32)
    return AdamEpsResult(
        device_type=dev.type,
        eps=eps,
        eps_in_fp16=float(torch.tensor(eps, dtype=torch.float16)),
        grad_max=float((target16 * size16).abs().max()),  # the first step's: the weights start at 0
        v_zero_fraction_fp16=vz16,
        v_zero_fraction_fp32=vz32,
        first_nonfinite_step_fp16=bad16,
        first_nonfinite_step_fp32=bad32,
        distance_fp16=d16,
        distance_fp32=d32,
    )


@dataclass(frozen=True)
class AttentionVariant:
    """One way of computing ``softmax(Q K^T / sqrt(d))``: logits that overflowed, rows of probabilities with
    nan, and the largest error of the probabilities against float64 (nan if any is)."""

    name: str
    inf_logits: int
    nan_rows: int
    max_error: float

    @property
    def ok(self) -> bool:
        return self.inf_logits == 0 and self.nan_rows == 0


ATTENTION_VARIANTS = ("fp16", "fp16 logits, fp32 softmax", "fp16 with Q scaled first", "bf16", "fp32 logits")
ATTENTION_VARIANTS += ("sdpa", "sdpa math")  # F.scaled_dot_product_attention as dispatched; forced to MATH


@dataclass(frozen=True)
class AttentionOverflowResult(Reads):
    """Attention logits from small inputs, computed five ways."""

    device_type: str
    seq: int
    largest_input: float  # the largest |entry| of Q and K
    largest_logit: float  # the largest |Q K^T| entry in float64, before the 1/sqrt(d) scaling
    fp16_max: float
    variants: dict  # name -> AttentionVariant
    sdpa_backend: str  # the SDPBackend F.scaled_dot_product_attention picks for these inputs (torch says)
    math_dtype: str  # the dtype its math backend computes float16 in (torch's reduction flag)
    math_by_hand: bool  # the math backend equals Q and K times head_dim**-0.25, matmul, softmax in math_dtype

    def reading(self) -> Reading:
        """Outcome: whether plain float16 logits overflow; then how many variants stay finite, then SDPA."""
        fp16 = self.variants["fp16"]
        facts = vars(self) | {"inf_logits": fp16.inf_logits, "nan_rows": fp16.nan_rows}
        facts |= {"num_logits": self.seq**2, "num_finite": sum(v.ok for v in self.variants.values())}
        facts["num_variants"] = len(self.variants)
        outcome = "pitfalls.attention_fits" if fp16.ok else "pitfalls.attention_overflows"
        math = "pitfalls.sdpa_math_by_hand" if self.math_by_hand else "pitfalls.sdpa_math_differs"
        return Reading(outcome, ("pitfalls.attention_finite_variants", "pitfalls.sdpa_backend", math), facts)


def _sdpa_probs(q: torch.Tensor, k: torch.Tensor, backend=None) -> tuple[torch.Tensor, str]:
    """``softmax(q k^T / sqrt(d))`` out of ``F.scaled_dot_product_attention``, and the backend torch picks: V
    is the identity, q and k padded with zeros to its width (fused kernels want V as wide as q)."""
    (seq, d), w = q.shape, max(q.shape)
    q4, k4 = (F.pad(t, (0, w - d))[None, None] for t in (q, k))
    args = (q4, k4, torch.eye(seq, w, dtype=q.dtype, device=q.device)[None, None])
    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        probs = F.scaled_dot_product_attention(*args, scale=1 / math.sqrt(d))[0, 0, :, :seq]
    return probs, SDPBackend(torch._fused_sdp_choice(*args, scale=1 / math.sqrt(d))).name


def attention_overflow(
    seq: int = 16, head_dim: int = 64, *, magnitude: float = 60.0, device=None, seed: int = 0
) -> AttentionOverflowResult:
    """``softmax(Q K^T / sqrt(head_dim))`` of entries in [0, ``magnitude``), computed the ways of
    :data:`ATTENTION_VARIANTS`, against float64.  ``seq`` <= MAX_SEQ, ``head_dim`` <= MAX_HEAD_DIM."""
    seq = check_int("seq", seq, minimum=1, maximum=MAX_SEQ)
    head_dim = check_int("head_dim", head_dim, minimum=1, maximum=MAX_HEAD_DIM)
    fp16_max = torch.finfo(torch.float16).max
    magnitude = check_float("magnitude", magnitude, gt=0, le=fp16_max)
    seed = check_seed("seed", seed)
    dev = get_device(device)
    what = f"attention_overflow(seq={seq}, head_dim={head_dim})"
    need = seq * head_dim * 2 * 8 + seq * seq * 8 * 10 + max(seq, head_dim) ** 2 * 24
    check_fits(need, dev, what, "choose a smaller seq or head_dim")
    # torch.rand draws the same values on every CPU kernel; float16 inputs for every variant
    with seeded(seed):
        Q = (magnitude * torch.rand(seq, head_dim)).to(torch.float16)
        K = (magnitude * torch.rand(seq, head_dim)).to(torch.float16)
    Q64, K64 = float64_on_cpu(Q), float64_on_cpu(K)
    logits64 = Q64 @ K64.T
    reference = torch.softmax(logits64 / math.sqrt(head_dim), dim=-1)
    Qd, Kd = Q.to(dev), K.to(dev)
    scale = 1.0 / math.sqrt(head_dim)

    def naive(q, k):
        logits = q @ k.T
        return logits, torch.softmax(logits * scale, dim=-1)

    logits, probs = naive(Qd, Kd)
    scaled = (Qd * scale) @ Kd.T
    # the math backend by hand: Q and K each times sqrt(1/sqrt(d)), in float32 unless torch allows float16
    allowed = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    math_dtype, w = (torch.float16 if allowed else torch.float32), max(seq, head_dim)
    q4, k4 = (F.pad(t, (0, w - head_dim)).to(math_dtype)[None, None] * math.sqrt(scale) for t in (Qd, Kd))
    by_hand = (q4 @ k4.transpose(-2, -1))[0, 0]  # on SDPA's own padded 4-D shapes, for the same kernels
    (sdpa, backend), (sdpa_math, _) = _sdpa_probs(Qd, Kd), _sdpa_probs(Qd, Kd, SDPBackend.MATH)
    computed = {
        "fp16": (logits, probs),
        "fp16 logits, fp32 softmax": (logits, torch.softmax(logits.float() * scale, dim=-1)),
        "fp16 with Q scaled first": (scaled, torch.softmax(scaled, dim=-1)),
        "bf16": naive(Qd.to(torch.bfloat16), Kd.to(torch.bfloat16)),
        "fp32 logits": naive(Qd.float(), Kd.float()),
        "sdpa": (torch.zeros(()), sdpa),
        "sdpa math": (by_hand, sdpa_math),
    }
    variants = {}
    for name in ATTENTION_VARIANTS:
        lg, pr = (float64_on_cpu(t) for t in computed[name])
        nan_rows = int(torch.isnan(pr).any(dim=-1).sum())
        err = math.nan if nan_rows else float((pr - reference).abs().max())
        variants[name] = AttentionVariant(name, int(torch.isinf(lg).sum()), nan_rows, err)
    return AttentionOverflowResult(
        device_type=dev.type,
        seq=seq,
        largest_input=float(torch.maximum(Q64.abs().max(), K64.abs().max())),
        largest_logit=float(logits64.abs().max()),
        fp16_max=fp16_max,
        variants=variants,
        sdpa_backend=backend,
        math_dtype=dtype_name(math_dtype),
        math_by_hand=torch.equal(sdpa_math, torch.softmax(by_hand, dim=-1).to(torch.float16)),
    )


@dataclass(frozen=True)
class CompileResult(Reads):
    """What ``torch.compile`` made of a function with an autocast region, seen by a recording backend (dtypes
    by name); with ``available`` False, ``reason`` says why and the other fields are empty.
    ``sees_in_place_update``: inside one region, the compiled function saw a weight updated in place;
    ``graphs_outside_then_inside``: graphs compiled for a function called outside, then inside, a region."""

    available: bool
    reason: str
    device_type: str
    dtype: str
    autocast_regions: int = 0  # _enter_autocast nodes in the graph Dynamo captured
    casts: int = 0  # casts to dtype in the ATen graph AOTAutograd traced
    aten_graph: str = ""  # that graph's code
    eager_dtype: str = ""
    compiled_dtype: str = ""
    bitwise_equal: bool = False
    max_abs_diff: float = math.nan
    sees_in_place_update: bool = False
    graphs_outside_then_inside: int = 0
    dtypes_outside_then_inside: tuple[str, ...] = ()

    def reading(self) -> Reading:
        """Outcome: unavailable, or the casts; then compiled against eager, the in-place update, the guard."""
        if not self.available:
            return Reading("pitfalls.compile_unavailable", facts=vars(self))
        reasons = (
            "pitfalls.compile_bitwise" if self.bitwise_equal else "pitfalls.compile_close",
            "pitfalls.compile_sees_update" if self.sees_in_place_update else "pitfalls.compile_stale",
            "pitfalls.compile_guard",
        )
        return Reading("pitfalls.compile_casts", reasons, vars(self))


def compile_autocast(device=None, *, dtype=None, seed: int = 0) -> CompileResult:
    """Compile a small model with an autocast region inside, through a recording backend on AOTAutograd (no
    C++ compiler), against eager; then the cast cache compiled, and the guard on the autocast state."""
    dev = get_device(device)
    dtype = amp_dtype(dev) if dtype is None else parse_dtype(dtype)
    seed = check_seed("seed", seed)
    with seeded(seed):
        lin = torch.nn.Linear(16, 8).to(dev)
        X = torch.rand(4, 16, device=dev)
    dynamo_graphs, aten_graphs = [], []

    def record_aten(gm, example_inputs):
        aten_graphs.append(gm)
        return gm.forward

    def backend(gm, example_inputs):
        dynamo_graphs.append(gm)
        return aot_autograd(fw_compiler=record_aten)(gm, example_inputs)

    def region(x):
        with torch.autocast(x.device.type, dtype=dtype):
            return torch.relu(lin(x))

    def plain(x):
        return torch.relu(lin(x))

    def fresh(fn):  # a code object of its own: Dynamo caches graphs on it, and each call must compile anew
        return types.FunctionType(
            fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
        )

    try:
        from torch._dynamo.backends.common import aot_autograd  # an optional part of torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(fresh(region), backend=backend, fullgraph=True)
            with torch.no_grad():
                eager = region(X)
                out = compiled(X)
            region_graph = dynamo_graphs[0]  # with fullgraph=True, compiling gives one graph or raises
            with torch.no_grad(), torch.autocast(dev.type, dtype=dtype):  # the cast cache
                first = compiled(X)
                lin.weight.add_(1.0)
                second = compiled(X)
            lin.weight.data.sub_(1.0)
            dynamo_graphs.clear()  # a guard on the autocast state: called outside, then inside a region
            compiled_plain = torch.compile(fresh(plain), backend=backend, fullgraph=True)
            with torch.no_grad():
                outside = compiled_plain(X)
                with torch.autocast(dev.type, dtype=dtype):
                    inside = compiled_plain(X)
    except Exception as exc:  # noqa: BLE001 - say why, show what can be shown
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        return CompileResult(False, f"{type(exc).__name__}: {first_line}", dev.type, dtype_name(dtype))
    if not aten_graphs:
        return CompileResult(False, "the recording backend received no graph", dev.type, dtype_name(dtype))
    nodes = region_graph.graph.nodes
    regions = sum("_enter_autocast" in getattr(n.target, "__name__", str(n.target)) for n in nodes)
    is_cast = lambda n: any(s in str(n.target) for s in ("_to_copy", "convert_element_type"))  # noqa: E731
    casts = sum(
        n.op == "call_function" and is_cast(n) and dtype in (*n.args[1:], *n.kwargs.values())
        for n in aten_graphs[0].graph.nodes
    )
    return CompileResult(
        available=True,
        reason="",
        device_type=dev.type,
        dtype=dtype_name(dtype),
        autocast_regions=regions,
        casts=casts,
        aten_graph=aten_graphs[0].code.strip(),
        eager_dtype=dtype_name(eager.dtype),
        compiled_dtype=dtype_name(out.dtype),
        bitwise_equal=torch.equal(out, eager),
        max_abs_diff=float((out.float() - eager.float()).abs().max()),
        sees_in_place_update=not torch.equal(first, second),
        graphs_outside_then_inside=len(dynamo_graphs),
        dtypes_outside_then_inside=(dtype_name(outside.dtype), dtype_name(inside.dtype)),
    )
