"""Pitfalls practitioners hit, each one run live.  (``09_pitfalls``)

Every function here sets up one small experiment on the learner's device, runs it, and returns a frozen
record of what it measured; its ``reading()`` (printed by its ``str()``) is a :class:`amp_lab.text.Reading`:
reason codes and the numbers, which :data:`amp_lab.text.REASONS` turns into sentences.

* :func:`weight_cast_cache`: inside one autocast region, an in-place weight update (an optimizer step
  inside the region) is not seen by the cached low-precision copy of the weight;
* :func:`adam_eps_underflow`: Adam with FP16 optimizer state: ``eps=1e-8`` rounds to 0 and the squares of
  small gradients underflow, so the update divides by zero; FP32 master weights and state do not;
* :func:`attention_overflow`: attention logits ``Q @ K.T`` overflowing FP16 although every input is small,
  and the fixes;
* :func:`compile_autocast`: what ``torch.compile`` does with autocast, captured by a recording backend (no
  C++ compiler needed).

:func:`read_cast_cache` and :func:`read_fp16_eps` read the notebook's own hand-run experiments.  The
notebook's other two pitfalls have rooms of their own: :mod:`amp_lab.swamping` (bfloat16 swamping and its
remedies) and :mod:`amp_lab.subnormals` (CPU subnormals and flush-to-zero); the bounds below are shared.
"""

from __future__ import annotations

import dataclasses
import math
import types
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._checks import check_bool, check_float, check_int, check_seed
from .device import amp_dtype, check_fits, float64_on_cpu, get_device, seeded
from .dtypes import dtype_name, parse_dtype
from .text import Reading

# Bounds on the work one call of 09's demonstrations may do (CONTRIBUTING.md, "Bounded work"), here and in
# amp_lab.swamping and amp_lab.subnormals: every loop stays well under a few seconds at them.
MAX_STEPS = 10_000  # optimizer steps or updates of one run
MAX_WORK = 1 << 26  # elements times steps of one run (adam_eps_underflow, swamping_run)
MAX_NUMEL = 1 << 22  # elements of one tensor a learner sizes (4 Mi float32 = 16 MiB)
MAX_HEAD_DIM = 4096  # attention: head dimension
MAX_SEQ = 1024  # attention: sequence length (the logits are seq x seq)

FP16_HALF_SUBNORMAL = torch.finfo(torch.float16).tiny * torch.finfo(torch.float16).eps / 2  # 2**-25


def check_work(numel: int, num_steps: int) -> None:
    """Refuse a run of more than :data:`MAX_WORK` element-steps (internal: its callers checked both)."""
    if numel * num_steps > MAX_WORK:
        raise ValueError(
            f"numel={numel} times num_steps={num_steps} is {numel * num_steps:,} element-steps, more than the "
            f"{MAX_WORK:,} one demonstration may take; choose fewer weights or fewer steps"
        )


def _low_dtype(dtype, device: torch.device) -> torch.dtype:
    """``dtype`` checked (float16 or bfloat16), or the course's autocast dtype for ``device``."""
    return amp_dtype(device) if dtype is None else parse_dtype(dtype)


# ---------------------------------------------------------------------------------------------------
# 1. The autocast weight-cast cache
# ---------------------------------------------------------------------------------------------------


def read_cast_cache(weight_changed: bool, stale_inside: bool) -> Reading:
    """What two forward passes around an ``opt.step()`` inside one autocast region show: outcome
    ``"pitfalls.cache_stale"`` (the step changed the weight, the second pass gave the same output: the
    cached copy), ``"pitfalls.cache_fresh"`` or ``"pitfalls.cache_no_change"``.  (``09_pitfalls``)"""
    weight_changed = check_bool("weight_changed", weight_changed)
    stale_inside = check_bool("stale_inside", stale_inside)
    if not weight_changed:
        outcome = "pitfalls.cache_no_change"
    else:
        outcome = "pitfalls.cache_stale" if stale_inside else "pitfalls.cache_fresh"
    return Reading(outcome, facts={"weight_changed": weight_changed, "stale_inside": stale_inside})


@dataclass(frozen=True)
class CastCacheResult:
    """What one autocast region saw of a weight updated in place inside it.  (``09_pitfalls``)

    ``stale_inside``: the forward pass after the in-place step, still inside the region, gave bit for bit
    the output of the forward pass before the step; ``matches_update_*``: whether each way out (a new region,
    ``torch.clear_autocast_cache()``, a region with ``cache_enabled=False``) gives the output of the updated
    weight, computed without autocast as ``F.linear(X.to(dtype), W_new.to(dtype))``."""

    device_type: str
    dtype: torch.dtype
    cache_enabled: bool  # torch.is_autocast_cache_enabled() when the experiment ran
    weight_changed: bool  # the step changed the float32 weight
    stale_inside: bool
    stale_error: float  # largest |output inside the region after the step - output of the updated weight|
    matches_update_new_region: bool
    matches_update_cleared: bool
    matches_update_uncached: bool

    @property
    def cache_applies(self) -> bool:
        """The cache bit: the weight changed, yet the region kept using its old low-precision copy."""
        return self.weight_changed and self.stale_inside

    def reading(self) -> Reading:
        """:func:`read_cast_cache`'s outcome; then the stale output's error and whether each way out matches
        the updated weight."""
        base = read_cast_cache(self.weight_changed, self.stale_inside)
        reasons = ("pitfalls.cache_stale_error",) if self.cache_applies else ()
        reasons += (
            "pitfalls.cache_new_region_matches"
            if self.matches_update_new_region
            else "pitfalls.cache_new_region_stale",
            "pitfalls.cache_cleared_matches"
            if self.matches_update_cleared
            else "pitfalls.cache_cleared_stale",
            "pitfalls.cache_uncached_matches"
            if self.matches_update_uncached
            else "pitfalls.cache_uncached_stale",
        )
        facts = {**base.facts, "device_type": self.device_type, "dtype": dtype_name(self.dtype)}
        return Reading(base.outcome, reasons, {**facts, "stale_error": self.stale_error})

    def __str__(self) -> str:
        return str(self.reading())


def weight_cast_cache(device=None, *, dtype=None, lr: float = 0.5, seed: int = 0) -> CastCacheResult:
    """Run an optimizer step *inside* one autocast region and see whether the region notices.
    (``09_pitfalls``)

    A float32 ``nn.Linear(16, 8, bias=False)`` runs forward under ``torch.autocast`` (``dtype``: float16 or
    bfloat16, default the course's dtype for ``device``), then takes an SGD step (learning rate ``lr``) and
    runs forward again, all in the same region.  Autocast keeps the low-precision copy of a float32 leaf
    tensor that requires grad for the whole region (``torch.is_autocast_cache_enabled()``), and an
    in-place update does not invalidate it.  Three ways out are run too: a new region, a call of
    ``torch.clear_autocast_cache()`` after the step, and a region with ``cache_enabled=False``.
    """
    dev = get_device(device)
    dtype = _low_dtype(dtype, dev)
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
    matches_new_region = torch.equal(fresh, reference)
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
        matches_update_new_region=matches_new_region,
        matches_update_cleared=matches_cleared,
        matches_update_uncached=torch.equal(uncached, new_output()),
    )


# ---------------------------------------------------------------------------------------------------
# 2. Adam's eps in FP16 optimizer state
# ---------------------------------------------------------------------------------------------------


def read_fp16_eps(eps: float) -> Reading:
    """What float16 stores for ``eps`` (Adam's ``eps``), against half of float16's smallest subnormal, the
    rounding boundary: outcome ``"pitfalls.eps_lost"`` (it rounds to zero) or ``"pitfalls.eps_kept"``.
    (``09_pitfalls``)"""
    eps = check_float("eps", eps, ge=0, le=1.0)
    stored = float(torch.tensor(eps, dtype=torch.float16))
    facts = {"eps": eps, "eps_in_fp16": stored, "half_subnormal": FP16_HALF_SUBNORMAL}
    return Reading("pitfalls.eps_lost" if stored == 0 else "pitfalls.eps_kept", facts=facts)


@dataclass(frozen=True)
class AdamEpsResult:
    """Adam on the same gradients with FP16 weights and state, and with FP32 master weights and state.
    (``09_pitfalls``)

    ``distance_*`` are the distances ``||w - target||`` after each step (index 0: before the first), as
    float64 numbers; nan once a weight is inf or nan."""

    device_type: str
    eps: float
    eps_in_fp16: float  # eps as float16 stores it
    grad_size: float
    grad_max: float  # the largest |gradient| of the first step (in float16, where the model computes it)
    v_zero_fraction_fp16: float  # share of exp_avg_sq entries exactly 0 after the first step, FP16 state
    v_zero_fraction_fp32: float  # the same with FP32 state
    first_nonfinite_step_fp16: int | None  # first step after which a float16 weight is inf or nan
    first_nonfinite_step_fp32: int | None
    distance_fp16: tuple[float, ...]
    distance_fp32: tuple[float, ...]

    @property
    def num_steps(self) -> int:
        return len(self.distance_fp32) - 1

    def reading(self) -> Reading:
        """Outcome: whether the FP16 weights turned inf or nan; then :func:`read_fp16_eps`'s outcome, the
        zero second moments and how the FP32 master weights ended."""
        eps = read_fp16_eps(self.eps)
        fp16_bad, fp32_bad = self.first_nonfinite_step_fp16, self.first_nonfinite_step_fp32
        facts = {
            **eps.facts,
            "device_type": self.device_type,
            "num_steps": self.num_steps,
            "grad_max": self.grad_max,
            "v_zero_fp16": self.v_zero_fraction_fp16,
            "v_zero_fp32": self.v_zero_fraction_fp32,
            "fp16_bad_step": fp16_bad,
            "fp32_bad_step": fp32_bad,
            "fp16_start": self.distance_fp16[0],
            "fp16_end": self.distance_fp16[-1],
            "fp32_start": self.distance_fp32[0],
            "fp32_end": self.distance_fp32[-1],
        }
        outcome = "pitfalls.fp16_adam_nonfinite" if fp16_bad is not None else "pitfalls.fp16_adam_finite"
        fp32 = "pitfalls.fp32_adam_nonfinite" if fp32_bad is not None else "pitfalls.fp32_adam_finite"
        return Reading(outcome, (eps.outcome, "pitfalls.adam_v_zero", fp32), facts)

    def __str__(self) -> str:
        return str(self.reading())


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
    """Adam with pure-FP16 weights and optimizer state against FP32 master weights and state, on the same
    small gradients.  (``09_pitfalls``)

    The weights ``w`` (``numel`` of them, starting at 0) chase a seeded target in [0, 1); the gradient is
    ``grad_size * (w - target)``, computed in float16 as a float16 model would (so at most ``grad_size`` in
    size).  Run 1 keeps ``w`` and ``torch.optim.Adam``'s state in float16; run 2 keeps them in float32 and
    receives the same float16 gradient cast to float32, as autocast with FP32 master weights does.
    ``num_steps`` is at most :data:`MAX_STEPS`, ``numel`` at most :data:`MAX_NUMEL`, and their product
    at most :data:`MAX_WORK`.
    """
    dev = get_device(device)
    grad_size = check_float("grad_size", grad_size, gt=0, le=1e4)
    num_steps = check_int("num_steps", num_steps, minimum=1, maximum=MAX_STEPS)
    lr = check_float("lr", lr, gt=0, le=10.0)
    eps = check_float("eps", eps, ge=0, le=1.0)
    numel = check_int("numel", numel, minimum=1, maximum=MAX_NUMEL)
    check_work(numel, num_steps)
    seed = check_seed("seed", seed)
    check_fits(
        numel * 4 * 8 + num_steps * 16, dev, f"adam_eps_underflow(numel={numel})", "choose a smaller numel"
    )
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
            g = (w.detach().to(torch.float16) - target16) * size16  # as a float16 model computes it
            if i == 0:
                first_grad = g
            w.grad = g.to(dtype)
            opt.step()
            if i == 0:
                v_zero = float((opt.state[w]["exp_avg_sq"] == 0).float().mean())
            finite.append(torch.isfinite(w.detach()).all())
        distances.append(w.detach().float() - target)
        # One transfer at the end: no host sync inside the loop.
        d = float64_on_cpu(torch.stack(distances)).norm(dim=1)
        bad = (~torch.stack(finite).cpu()).nonzero()
        first_bad = int(bad[0, 0]) + 1 if len(bad) else None
        dist = tuple(x if math.isfinite(x) else math.nan for x in d.tolist())
        return dist, first_bad, v_zero, float(first_grad.abs().max())

    d16, bad16, vz16, gmax = run(torch.float16)
    d32, bad32, vz32, _ = run(torch.float32)
    return AdamEpsResult(
        device_type=dev.type,
        eps=eps,
        eps_in_fp16=float(torch.tensor(eps, dtype=torch.float16)),
        grad_size=grad_size,
        grad_max=gmax,
        v_zero_fraction_fp16=vz16,
        v_zero_fraction_fp32=vz32,
        first_nonfinite_step_fp16=bad16,
        first_nonfinite_step_fp32=bad32,
        distance_fp16=d16,
        distance_fp32=d32,
    )


# ---------------------------------------------------------------------------------------------------
# 5. Attention logits: the common real FP16 overflow
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionVariant:
    """One way of computing ``softmax(Q K^T / sqrt(d))``: how many logits overflowed, how many rows of
    probabilities hold nan, and the largest error of the probabilities against float64 (nan if any is)."""

    name: str
    inf_logits: int
    nan_rows: int
    max_error: float

    @property
    def ok(self) -> bool:
        return self.inf_logits == 0 and self.nan_rows == 0


ATTENTION_VARIANTS = (
    "fp16",
    "fp16 logits, fp32 softmax",
    "fp16 with Q scaled first",
    "bf16",
    "fp32 logits",
)


@dataclass(frozen=True)
class AttentionOverflowResult:
    """Attention logits from small inputs, computed five ways.  (``09_pitfalls``)"""

    device_type: str
    seq: int
    head_dim: int
    largest_input: float  # the largest |entry| of Q and K
    largest_logit: float  # the largest |Q K^T| entry, in float64 (before the 1/sqrt(d) scaling)
    fp16_max: float
    variants: dict  # name -> AttentionVariant

    def reading(self) -> Reading:
        """Outcome ``"pitfalls.attention_overflows"`` (plain float16 logits overflow) or
        ``"pitfalls.attention_fits"``; then how many of the variants stay finite (the table shows which)."""
        fp16 = self.variants["fp16"]
        facts = {
            "largest_input": self.largest_input,
            "fp16_max": self.fp16_max,
            "largest_logit": self.largest_logit,
            "inf_logits": fp16.inf_logits,
            "num_logits": self.seq * self.seq,
            "nan_rows": fp16.nan_rows,
            "seq": self.seq,
            "num_finite": sum(v.ok for v in self.variants.values()),
            "num_variants": len(self.variants),
        }
        outcome = "pitfalls.attention_fits" if fp16.ok else "pitfalls.attention_overflows"
        return Reading(outcome, ("pitfalls.attention_finite_variants",), facts)

    def __str__(self) -> str:
        return str(self.reading())


def attention_overflow(
    seq: int = 16, head_dim: int = 64, *, magnitude: float = 60.0, device=None, seed: int = 0
) -> AttentionOverflowResult:
    """Queries and keys with every entry in [0, ``magnitude``) (far inside float16's range), and the
    attention probabilities ``softmax(Q K^T / sqrt(head_dim))`` computed five ways on ``device``:
    (``09_pitfalls``)

    * ``"fp16"``: ``(Q @ K.T) / sqrt(d)`` in float16, the order most code writes;
    * ``"fp16 logits, fp32 softmax"``: the same float16 logits, softmax in float32 (too late: inf is inf);
    * ``"fp16 with Q scaled first"``: ``(Q / sqrt(d)) @ K.T`` in float16 (what fused attention kernels do);
    * ``"bf16"``: the first order in bfloat16 (float32's range, fewer digits);
    * ``"fp32 logits"``: float16 inputs, logits and softmax in float32.

    Each is compared with float64 (on the CPU).  ``seq`` is at most :data:`MAX_SEQ`, ``head_dim`` at most
    :data:`MAX_HEAD_DIM`; the inputs are drawn with ``torch.rand`` under ``seed``.
    """
    seq = check_int("seq", seq, minimum=1, maximum=MAX_SEQ)
    head_dim = check_int("head_dim", head_dim, minimum=1, maximum=MAX_HEAD_DIM)
    fp16_max = torch.finfo(torch.float16).max
    magnitude = check_float("magnitude", magnitude, gt=0, le=fp16_max)
    seed = check_seed("seed", seed)
    dev = get_device(device)
    check_fits(seq * head_dim * 2 * 8 + seq * seq * 8 * 8, dev, f"attention_overflow(seq={seq}, head_dim={head_dim})",
               "choose a smaller seq or head_dim")  # fmt: skip
    with seeded(seed):
        # torch.rand draws the same values on every CPU kernel (torch.randn does not); float16 inputs first,
        # so every variant starts from the same numbers.
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
    computed = {
        "fp16": (logits, probs),
        "fp16 logits, fp32 softmax": (logits, torch.softmax(logits.float() * scale, dim=-1)),
        "fp16 with Q scaled first": (scaled, torch.softmax(scaled, dim=-1)),
        "bf16": naive(Qd.to(torch.bfloat16), Kd.to(torch.bfloat16)),
        "fp32 logits": naive(Qd.float(), Kd.float()),
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
        head_dim=head_dim,
        largest_input=float(torch.maximum(Q64.abs().max(), K64.abs().max())),
        largest_logit=float(logits64.abs().max()),
        fp16_max=fp16_max,
        variants=variants,
    )


# ---------------------------------------------------------------------------------------------------
# 6. torch.compile with autocast
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompileResult:
    """What ``torch.compile`` made of a function with an autocast region, seen by a recording backend.
    (``09_pitfalls``)  With ``available`` False, ``reason`` says why and the other fields are empty."""

    available: bool
    reason: str
    device_type: str
    dtype: torch.dtype
    autocast_regions: int  # _enter_autocast nodes in the graph Dynamo captured
    casts: int  # casts to dtype in the ATen graph AOTAutograd traced
    aten_graph: str  # that graph's code
    eager_dtype: torch.dtype | None
    compiled_dtype: torch.dtype | None
    bitwise_equal: bool
    max_abs_diff: float
    sees_in_place_update: bool  # inside one region, the compiled function saw a weight updated in place
    graphs_outside_then_inside: int  # graphs compiled for a function called outside, then inside, a region
    dtypes_outside_then_inside: tuple

    def reading(self) -> Reading:
        """Outcome ``"pitfalls.compile_unavailable"`` or ``"pitfalls.compile_casts"`` (the region became
        explicit casts); then whether compiled equals eager, sees an in-place update, and the guard."""
        if not self.available:
            return Reading("pitfalls.compile_unavailable", facts={"reason": self.reason})
        outside, inside = self.dtypes_outside_then_inside
        facts = {
            "device_type": self.device_type,
            "dtype": dtype_name(self.dtype),
            "autocast_regions": self.autocast_regions,
            "casts": self.casts,
            "compiled_dtype": dtype_name(self.compiled_dtype),
            "eager_dtype": dtype_name(self.eager_dtype),
            "max_abs_diff": self.max_abs_diff,
            "graphs": self.graphs_outside_then_inside,
            "dtype_outside": dtype_name(outside),
            "dtype_inside": dtype_name(inside),
        }
        reasons = (
            "pitfalls.compile_bitwise" if self.bitwise_equal else "pitfalls.compile_close",
            "pitfalls.compile_sees_update" if self.sees_in_place_update else "pitfalls.compile_stale",
            "pitfalls.compile_guard",
        )
        return Reading("pitfalls.compile_casts", reasons, facts)

    def __str__(self) -> str:
        return str(self.reading())


def _fresh(fn):
    """A copy of ``fn`` with a code object of its own: Dynamo caches compiled graphs on the code object, so
    each call of :func:`compile_autocast` compiles (and records) anew instead of hitting an old cache."""
    return types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )


def compile_autocast(device=None, *, dtype=None, seed: int = 0) -> CompileResult:
    """Compile a small model step that has an autocast region inside, with a recording backend built on
    ``backend="aot_eager"``'s machinery (Dynamo's graph, then AOTAutograd's ATen graph, run eagerly: no
    C++ compiler, a second or two of CPU), and compare it with eager.  (``09_pitfalls``)

    Also run: the cast-cache experiment of :func:`weight_cast_cache` on the compiled function, and a
    function without its own region called outside, then inside, an autocast region (a recompile).
    Where ``torch.compile`` cannot run (no Dynamo on this Python, or any error it raises), returns a result
    with ``available=False`` and the reason.
    """
    dev = get_device(device)
    dtype = _low_dtype(dtype, dev)
    seed = check_seed("seed", seed)
    with seeded(seed):
        lin = torch.nn.Linear(16, 8).to(dev)
        X = torch.rand(4, 16, device=dev)
    empty = CompileResult(False, "", dev.type, dtype, 0, 0, "", None, None, False, math.nan, False, 0, ())
    try:  # an optional part of torch: imported where it is used
        from torch._dynamo.backends.common import aot_autograd
    except Exception as exc:  # noqa: BLE001 - any failure means: not available here
        return dataclasses.replace(
            empty, reason=f"torch._dynamo is not available ({type(exc).__name__}: {exc})"
        )

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

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(_fresh(region), backend=backend, fullgraph=True)
            with torch.no_grad():
                eager = region(X)
                out = compiled(X)
            region_graph = dynamo_graphs[0] if dynamo_graphs else None
            # The cast cache: step inside one region, call again in the same region.
            with torch.no_grad(), torch.autocast(dev.type, dtype=dtype):
                first = compiled(X)
                lin.weight.add_(1.0)
                second = compiled(X)
            lin.weight.data.sub_(1.0)
            # A guard on the autocast state: no region inside, called outside then inside one.
            dynamo_graphs.clear()
            compiled_plain = torch.compile(_fresh(plain), backend=backend, fullgraph=True)
            with torch.no_grad():
                outside = compiled_plain(X)
                with torch.autocast(dev.type, dtype=dtype):
                    inside = compiled_plain(X)
    except Exception as exc:  # noqa: BLE001 - say why, show what can be shown
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        return dataclasses.replace(empty, reason=f"{type(exc).__name__}: {first_line}")
    if not aten_graphs:
        return dataclasses.replace(empty, reason="the recording backend received no graph")
    region_nodes = () if region_graph is None else region_graph.graph.nodes
    regions = sum("_enter_autocast" in getattr(n.target, "__name__", str(n.target)) for n in region_nodes)
    casts = sum(
        1
        for n in aten_graphs[0].graph.nodes
        if n.op == "call_function"
        and any(s in str(n.target) for s in ("_to_copy", "convert_element_type"))
        and dtype in (*n.args[1:], *n.kwargs.values())
    )
    return CompileResult(
        available=True,
        reason="",
        device_type=dev.type,
        dtype=dtype,
        autocast_regions=regions,
        casts=casts,
        aten_graph=aten_graphs[0].code.strip(),
        eager_dtype=eager.dtype,
        compiled_dtype=out.dtype,
        bitwise_equal=torch.equal(out, eager),
        max_abs_diff=float((out.float() - eager.float()).abs().max()),
        sees_in_place_update=not torch.equal(first, second),
        graphs_outside_then_inside=len(dynamo_graphs),
        dtypes_outside_then_inside=(outside.dtype, inside.dtype),
    )
