"""Pitfalls practitioners hit, each one run live.  (``09_pitfalls``)

Every function here sets up one small experiment on the learner's device, runs it, and returns a frozen
dataclass of what it measured; its ``summary()`` (also its ``str()``) is one or two sentences composed from
those numbers, so each machine reads what it measured itself:

* :func:`weight_cast_cache`: inside one autocast region, an in-place weight update (an optimizer step
  inside the region) is not seen by the cached low-precision copy of the weight;
* :func:`adam_eps_underflow`: Adam with FP16 optimizer state: ``eps=1e-8`` rounds to 0 and the squares of
  small gradients underflow, so the update divides by zero; FP32 master weights and state do not;
* :func:`swamping_run`: updates below half a bf16 ulp of a weight are lost; FP32 master weights,
  Kahan-compensated updates (:func:`kahan_add_`) and stochastic rounding (:func:`stochastic_round`) keep
  them;
* :func:`subnormal_slowdown`: float32 arithmetic on subnormal numbers, timed, with flush-to-zero off and
  on (:func:`flush_denormal`);
* :func:`attention_overflow`: attention logits ``Q @ K.T`` overflowing FP16 although every input is small,
  and the fixes;
* :func:`compile_autocast`: what ``torch.compile`` does with autocast, captured by a recording backend (no
  C++ compiler needed).
"""

from __future__ import annotations

import contextlib
import math
import types
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._checks import (
    check_axes,
    check_bool,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_seed,
)
from .device import (
    amp_dtype,
    check_fits,
    dtype_name,
    float64_on_cpu,
    get_device,
    parse_dtype,
    seeded,
    torch_threads,
)
from .timing import Contestant, format_ratio, format_seconds, measure

__all__ = [
    "AdamEpsResult",
    "AttentionOverflowResult",
    "AttentionVariant",
    "CastCacheResult",
    "CompileResult",
    "SubnormalResult",
    "SwampingResult",
    "ATTENTION_VARIANTS",
    "MAX_STEPS",
    "MAX_NUMEL",
    "MAX_WORK",
    "SWAMPING_METHODS",
    "adam_eps_underflow",
    "attention_overflow",
    "compile_autocast",
    "flush_denormal",
    "flush_denormal_enabled",
    "kahan_add_",
    "plot_swamping",
    "stochastic_round",
    "subnormal_slowdown",
    "swamping_run",
    "weight_cast_cache",
]

# Bounds on the work one call may do (CONTRIBUTING.md, "Bounded work"): these runs are demonstrations, so
# the bounds are smaller than _checks.MAX_STEPS; every loop below stays well under a few seconds at them.
MAX_STEPS = 10_000  # optimizer steps or updates of one run
MAX_WORK = 1 << 26  # elements times steps of one run (adam_eps_underflow, swamping_run): seconds, not hours
MAX_NUMEL = 1 << 22  # elements of one tensor a learner sizes (4 Mi float32 = 16 MiB)
MAX_HEAD_DIM = 4096  # attention: head dimension
MAX_SEQ = 1024  # attention: sequence length (the logits are seq x seq)
MAX_TIMING_REPEATS = 100  # subnormal_slowdown's samples per contestant
MAX_TIMING_SAMPLE_S = 1.0  # subnormal_slowdown's seconds per sample


def _fmt(x: float) -> str:
    """A number as a sentence shows it: 4 significant figures, 'inf'/'nan' as such."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return f"{x:.4g}"


def _check_work(numel: int, num_steps: int) -> None:
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

    def summary(self) -> str:
        dt = dtype_name(self.dtype)
        if self.cache_applies:
            first = (
                f"On {self.device_type}, {dt} autocast caches the cast weight: after an optimizer step inside "
                f"the region, the next forward pass in the same region still used the old weight (its output "
                f"was unchanged, off by up to {_fmt(self.stale_error)} from the updated weight's)."
            )
        elif self.weight_changed:
            first = (
                f"On {self.device_type}, {dt} autocast did not reuse a stale weight here: the forward pass after "
                f"the step inside the region saw the updated weight."
            )
        else:
            first = f"On {self.device_type}, the step did not change the weight, so this run shows nothing."
        fixes = {
            "a new autocast region (step outside the region)": self.matches_update_new_region,
            "torch.clear_autocast_cache()": self.matches_update_cleared,
            "cache_enabled=False": self.matches_update_uncached,
        }
        good = [k for k, v in fixes.items() if v]
        bad = [k for k, v in fixes.items() if not v]
        second = f"Matching the updated weight bit for bit: {', '.join(good) or 'none of the fixes'}"
        if bad:
            second += f"; not: {', '.join(bad)}"
        return f"{first} {second}."

    def __str__(self) -> str:
        return self.summary()


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
    stale_inside = torch.equal(first, second)
    stale_error = float((second.float() - reference.float()).abs().max())
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
    matches_uncached = torch.equal(uncached, new_output())
    return CastCacheResult(
        device_type=dev.type,
        dtype=dtype,
        cache_enabled=cache_enabled,
        weight_changed=weight_changed,
        stale_inside=stale_inside,
        stale_error=stale_error,
        matches_update_new_region=matches_new_region,
        matches_update_cleared=matches_cleared,
        matches_update_uncached=matches_uncached,
    )


# ---------------------------------------------------------------------------------------------------
# 2. Adam's eps in FP16 optimizer state
# ---------------------------------------------------------------------------------------------------


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
    v_zero_fraction_fp16: (
        float  # share of Adam's exp_avg_sq entries exactly 0 after the first step, FP16 state
    )
    v_zero_fraction_fp32: float  # the same with FP32 state
    first_nonfinite_step_fp16: int | None  # first step after which a float16 weight is inf or nan
    first_nonfinite_step_fp32: int | None
    distance_fp16: tuple[float, ...]
    distance_fp32: tuple[float, ...]

    @property
    def num_steps(self) -> int:
        return len(self.distance_fp32) - 1

    def summary(self) -> str:
        eps_text = f"eps={self.eps:g} is {_fmt(self.eps_in_fp16)} in float16" + (
            " (it rounds to zero)" if self.eps_in_fp16 == 0 else ""
        )
        v_text = (
            f"after one step {100 * self.v_zero_fraction_fp16:.0f}% of the float16 second moments are exactly 0 "
            f"(gradients up to {_fmt(self.grad_max)}; float32 state: {100 * self.v_zero_fraction_fp32:.0f}%)"
        )
        if self.first_nonfinite_step_fp16 is not None:
            fp16_text = f"the FP16 weights became inf or nan at step {self.first_nonfinite_step_fp16}"
        else:
            fp16_text = (
                f"the FP16 weights ended {_fmt(self.distance_fp16[-1])} from the target "
                f"(they started {_fmt(self.distance_fp16[0])} away)"
            )
        if self.first_nonfinite_step_fp32 is not None:
            fp32_text = f"the FP32 master weights became inf or nan at step {self.first_nonfinite_step_fp32}"
        else:
            fp32_text = (
                f"the FP32 master weights ended {_fmt(self.distance_fp32[-1])} from it "
                f"(from {_fmt(self.distance_fp32[0])})"
            )
        return f"On {self.device_type}, {eps_text}; {v_text}. After {self.num_steps} steps {fp16_text}; {fp32_text}."

    def __str__(self) -> str:
        return self.summary()


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
    _check_work(numel, num_steps)
    seed = check_seed("seed", seed)
    check_fits(
        numel * 4 * 8 + num_steps * 16, dev, f"adam_eps_underflow(numel={numel})", "choose a smaller numel"
    )
    with seeded(seed):
        target = torch.rand(numel).to(dev)
    target16 = target.to(torch.float16)

    def grad16(w: torch.Tensor) -> torch.Tensor:
        # The gradient as a float16 model produces it: computed in float16.
        return (w.detach().to(torch.float16) - target16) * torch.tensor(
            grad_size, dtype=torch.float16, device=dev
        )

    def run(dtype: torch.dtype):
        w = torch.nn.Parameter(torch.zeros(numel, dtype=dtype, device=dev))
        opt = torch.optim.Adam([w], lr=lr, eps=eps)
        distances, finite = [], []
        first_grad = None
        v_zero = 0.0
        for i in range(num_steps):
            with torch.no_grad():
                distances.append(w.detach().float() - target)
            g = grad16(w)
            if first_grad is None:
                first_grad = g
            w.grad = g.to(dtype)
            opt.step()
            if i == 0:
                v = opt.state[w]["exp_avg_sq"]
                v_zero = float((v == 0).float().mean())
            finite.append(torch.isfinite(w.detach()).all())
        with torch.no_grad():
            distances.append(w.detach().float() - target)
        # One transfer at the end: no host sync inside the loop.
        d = float64_on_cpu(torch.stack(distances)).norm(dim=1)
        ok = torch.stack(finite).cpu()
        bad = (~ok).nonzero()
        first_bad = int(bad[0, 0]) + 1 if len(bad) else None
        dist = tuple(float("nan") if not math.isfinite(x) else x for x in d.tolist())
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
# 3. bf16 swamping, and its remedies
# ---------------------------------------------------------------------------------------------------

_BF16_LOW_BITS = 0xFFFF  # the 16 low bits of a float32 that bfloat16 drops
_BF16_MASK = -65536  # 0xFFFF0000 as an int32: keeps sign, exponent and bfloat16's 7 mantissa bits


def stochastic_round(x: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """Round a float32 tensor to bfloat16 *stochastically*: up with probability equal to the distance
    from the bfloat16 value below, so the result is unbiased (``E[result] == x``).  (``09_pitfalls``)

    The integer trick: view the float32 bits as int32, add a random integer from 0 to 2**16 - 1 to the 16
    low bits that bfloat16 drops, then clear them.  A carry out of the low bits moves to the next bfloat16
    value (towards larger magnitude: the bits are sign and magnitude, so this works for negative numbers
    too), and it happens with probability (low bits) / 2**16.  The result is always one of the two
    bfloat16 values around ``x`` (``x`` itself when it is one).  Infinities and nan are passed through as
    ``x.to(torch.bfloat16)`` does.  ``generator`` seeds the random bits (a ``torch.Generator`` on ``x``'s
    device, or None for torch's default one).
    """
    check_instance("x", x, torch.Tensor, "a torch.Tensor")
    if x.dtype != torch.float32:
        raise ValueError(f"x must be a float32 tensor (the master copy being rounded), got dtype {x.dtype}")
    if generator is not None:
        check_instance("generator", generator, torch.Generator, "a torch.Generator or None")
        if generator.device.type != x.device.type:
            raise ValueError(
                f"generator is on {generator.device} but x is on {x.device}: make the generator on x's device"
            )
    if x.numel() > MAX_NUMEL:
        raise ValueError(f"x may hold at most {MAX_NUMEL} elements, got {x.numel()}")
    noise = torch.randint(
        0, _BF16_LOW_BITS + 1, x.shape, dtype=torch.int32, device=x.device, generator=generator
    )
    bits = x.contiguous().view(torch.int32)
    rounded = ((bits + noise) & _BF16_MASK).view(torch.float32).to(torch.bfloat16)  # exact: low bits are 0
    return torch.where(torch.isfinite(x), rounded, x.to(torch.bfloat16))


def kahan_add_(weight: torch.Tensor, compensation: torch.Tensor, update) -> torch.Tensor:
    """``weight += update`` with Kahan compensation, in place, for low-precision weights.  (``09_pitfalls``)

    ``compensation`` (same shape and dtype as ``weight``, starting at zero) carries what the rounding of
    ``weight`` lost; it is added to the next update, so many updates each smaller than half an ulp of the
    weight still add up::

        compensation += update;  old = weight;  weight += compensation;  compensation += old - weight

    Every operation rounds to the tensors' dtype, as an optimizer working in bfloat16 would.  ``update`` is
    a number or a tensor that broadcasts to ``weight``.  Returns ``weight``.
    """
    check_instance("weight", weight, torch.Tensor, "a torch.Tensor")
    check_instance("compensation", compensation, torch.Tensor, "a torch.Tensor")
    if not weight.is_floating_point():
        raise ValueError(f"weight must be a floating-point tensor, got dtype {weight.dtype}")
    if (
        compensation.shape != weight.shape
        or compensation.dtype != weight.dtype
        or compensation.device != weight.device
    ):
        raise ValueError(
            f"compensation must match weight's shape, dtype and device ({tuple(weight.shape)}, {weight.dtype}, "
            f"{weight.device}), got {tuple(compensation.shape)}, {compensation.dtype}, {compensation.device}"
        )
    if isinstance(update, torch.Tensor):
        if not update.is_floating_point():
            raise ValueError(f"update must be a floating-point tensor or a number, got dtype {update.dtype}")
        try:
            torch.broadcast_shapes(update.shape, weight.shape)
        except RuntimeError:
            raise ValueError(
                f"update of shape {tuple(update.shape)} does not broadcast to weight's {tuple(weight.shape)}"
            ) from None
        if torch.broadcast_shapes(update.shape, weight.shape) != weight.shape:
            raise ValueError(
                f"update of shape {tuple(update.shape)} would grow weight's {tuple(weight.shape)}"
            )
        update = update.to(device=weight.device)
    else:
        update = check_float("update", update)
    with torch.no_grad():
        compensation.add_(update)
        old = weight.clone()
        weight.add_(compensation)
        compensation.add_(old.sub_(weight))
    return weight


SWAMPING_METHODS = ("bf16", "fp32 master", "kahan", "stochastic")


@dataclass(frozen=True)
class SwampingResult:
    """A weight nudged ``num_steps`` times by ``update``, kept four ways.  (``09_pitfalls``)

    ``history[method]`` is the weight after each step (index 0: the start), as float64 numbers: for
    ``"stochastic"`` the mean over ``numel`` weights (each rounded with its own random bits); the others
    are the same for every weight.  ``exact`` is ``start + num_steps * update`` in float64."""

    start: float
    update: float
    num_steps: int
    numel: int
    half_ulp: float  # half the gap between bfloat16(start) and its neighbour in the update's direction
    exact: float
    history: dict  # method -> tuple of floats
    stochastic_spread: float  # the largest minus the smallest weight under stochastic rounding, at the end

    @property
    def final(self) -> dict:
        return {m: h[-1] for m, h in self.history.items()}

    def progress(self, method: str) -> float:
        """How far ``method`` got, as a share of the exact movement (1: all the way, 0: not at all)."""
        check_choice("method", method, SWAMPING_METHODS)
        moved = self.exact - self.start
        return (self.history[method][-1] - self.start) / moved if moved else 1.0

    @property
    def lost(self) -> bool:
        """Each update is smaller than half a bf16 ulp of the starting weight: plain bf16 swallows it."""
        return abs(self.update) < self.half_ulp

    def summary(self) -> str:
        p = {m: round(100 * self.progress(m)) + 0 for m in SWAMPING_METHODS}  # + 0: no "-0%"
        size = "smaller" if self.lost else "not smaller"
        return (
            f"Each update of {self.update:g} is {size} than half a bfloat16 ulp of {self.start:g} "
            f"({self.half_ulp:g}). After {self.num_steps} updates the exact weight is {_fmt(self.exact)}: plain "
            f"bfloat16 weights got {p['bf16']:.0f}% of the way ({_fmt(self.final['bf16'])}), FP32 master "
            f"weights {p['fp32 master']:.0f}% ({_fmt(self.final['fp32 master'])}), Kahan-compensated bfloat16 "
            f"{p['kahan']:.0f}% ({_fmt(self.final['kahan'])}), stochastic rounding {p['stochastic']:.0f}% on "
            f"average over {self.numel} weights ({_fmt(self.final['stochastic'])}, spread "
            f"{_fmt(self.stochastic_spread)})."
        )

    def __str__(self) -> str:
        return self.summary()


def _bf16_half_gap(start: float, direction: float) -> float:
    """Half the gap between ``bfloat16(start)`` and its neighbour towards ``direction``'s sign."""
    w = torch.tensor(start, dtype=torch.float32).to(torch.bfloat16)
    toward = torch.tensor(math.copysign(math.inf, direction), dtype=torch.bfloat16)
    neighbour = torch.nextafter(w, toward)
    return abs(float(neighbour) - float(w)) / 2


def swamping_run(
    num_steps: int = 500,
    *,
    update: float = -1e-3,
    start: float = 1.0,
    numel: int = 64,
    seed: int = 0,
    device=None,
) -> SwampingResult:
    """Nudge a weight ``num_steps`` times by a constant ``update`` (think ``-lr * grad``), kept four ways:
    plain bfloat16 weights, FP32 master weights (a bfloat16 copy for the forward pass), bfloat16 weights
    with a bfloat16 Kahan compensation (:func:`kahan_add_`), and bfloat16 weights rounded stochastically
    from float32 after each update (:func:`stochastic_round`, seeded by ``seed``).  (``09_pitfalls``)

    ``numel`` weights start at ``start`` (stochastic rounding gives each its own path).  ``num_steps`` is
    at most :data:`MAX_STEPS`; ``numel`` is at most 2**16, and their product at most :data:`MAX_WORK`.
    """
    num_steps = check_int("num_steps", num_steps, minimum=1, maximum=MAX_STEPS)
    seed = check_seed("seed", seed)
    update = check_float("update", update)
    start = check_float("start", start)
    numel = check_int("numel", numel, minimum=1, maximum=1 << 16)
    _check_work(numel, num_steps)
    dev = get_device(device)
    limit = torch.finfo(torch.bfloat16).max / 2
    if abs(start) > limit or abs(start) + num_steps * abs(update) > limit:
        raise ValueError(
            f"start={start:g} and num_steps * |update| = {num_steps * abs(update):g} must stay within half of "
            f"bfloat16's largest value ({limit:.3g}), so no method overflows"
        )
    if update == 0:
        raise ValueError("update must not be 0: a run without movement shows nothing")
    check_fits(num_steps * numel * 2 + numel * 16, dev, f"swamping_run(num_steps={num_steps}, numel={numel})",
               "choose fewer steps or weights")  # fmt: skip
    gen = torch.Generator(device=dev.type if dev.type != "mps" else "cpu").manual_seed(seed)
    bf16 = torch.full((numel,), start, dtype=torch.float32, device=dev).to(torch.bfloat16)
    master = bf16.float()  # FP32 master weights start from the same bfloat16 value
    kahan_w, kahan_c = bf16.clone(), torch.zeros_like(bf16)
    sr = bf16.clone()
    plain = bf16.clone()
    hist = {m: [bf16.clone()] for m in SWAMPING_METHODS}
    for _ in range(num_steps):
        plain.add_(update)
        master.add_(update)
        kahan_add_(kahan_w, kahan_c, update)
        if dev.type == "mps":  # the random bits are drawn on the CPU there
            sr = stochastic_round(sr.float().cpu() + update, generator=gen).to(dev)
        else:
            sr = stochastic_round(sr.float() + update, generator=gen)
        hist["bf16"].append(plain.clone())
        hist["fp32 master"].append(master.to(torch.bfloat16))
        hist["kahan"].append(kahan_w.clone())
        hist["stochastic"].append(sr)
    # Means of bfloat16 values in float64 are exact sums here (few, short mantissas): the same on any CPU.
    history = {}
    spread = 0.0
    for m, values in hist.items():
        t = float64_on_cpu(torch.stack(values))
        history[m] = tuple(t.mean(dim=1).tolist())
        if m == "stochastic":
            spread = float(t[-1].max() - t[-1].min())
    return SwampingResult(
        start=float(bf16[0]),
        update=update,
        num_steps=num_steps,
        numel=numel,
        half_ulp=_bf16_half_gap(start, update),
        exact=float(bf16[0]) + num_steps * update,
        history=history,
        stochastic_spread=spread,
    )


def plot_swamping(result: SwampingResult, ax=None):
    """Weight against step for the four methods of a :func:`swamping_run`, with the exact path dashed.
    Returns the Axes.  (``09_pitfalls``)"""
    check_instance("result", result, SwampingResult, "a SwampingResult (from swamping_run)")
    check_axes("ax", ax)
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    steps = range(result.num_steps + 1)
    ax.plot(steps, [result.start + i * result.update for i in steps], "k--", lw=1, label="exact")
    for m in SWAMPING_METHODS:
        label = f"{m} (mean of {result.numel})" if m == "stochastic" else m
        ax.plot(steps, result.history[m], lw=1.5, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("weight")
    ax.set_title(f"{result.num_steps} updates of {result.update:g} to a bfloat16 weight")
    ax.legend(fontsize=8)
    return ax


# ---------------------------------------------------------------------------------------------------
# 4. CPU subnormals
# ---------------------------------------------------------------------------------------------------


def flush_denormal_enabled() -> bool:
    """Whether this thread's CPU flushes subnormal float32 numbers to zero now, *measured*: torch has no
    getter for ``torch.set_flush_denormal``, so a subnormal is multiplied by 1 and the result compared with
    0.  (``09_pitfalls``)"""
    tiny = torch.tensor([torch.finfo(torch.float32).smallest_normal / 4])
    return bool((tiny * 1.0).item() == 0.0)


def flush_denormal(enabled: bool):
    """Run a block with ``torch.set_flush_denormal(enabled)``, then restore the setting found before
    (measured by :func:`flush_denormal_enabled`), even when the block raises.  Yields whether this CPU
    supports the switch (``set_flush_denormal`` returns False where it does not: then nothing changes).
    The setting belongs to the calling thread: torch's other CPU threads keep theirs.  ``enabled`` is
    checked when this is called, before any block runs.  (``09_pitfalls``)"""
    return _flush_denormal(check_bool("enabled", enabled))


@contextlib.contextmanager
def _flush_denormal(enabled: bool):
    before = flush_denormal_enabled()
    supported = bool(torch.set_flush_denormal(enabled))
    try:
        yield supported
    finally:
        torch.set_flush_denormal(before)


@dataclass(frozen=True)
class SubnormalResult:
    """Float32 arithmetic on normal and on subnormal inputs, timed, with flush-to-zero off and on.
    (``09_pitfalls``)  ``timings`` maps a label to an :class:`amp_lab.timing.Timing`."""

    op: str
    numel: int
    flush_supported: bool
    flushes_to_zero: bool  # with flush-to-zero on, op(subnormal) gave only zeros
    restored: bool  # the flush setting after the run equals the one before
    timings: dict

    @property
    def slowdown(self) -> float:
        """Median time on subnormal inputs / median time on normal inputs (flush-to-zero off)."""
        return self.timings["subnormal"].median / self.timings["normal"].median

    @property
    def flushed_slowdown(self) -> float | None:
        """The same with flush-to-zero on (None where the CPU does not support it)."""
        t = self.timings.get("subnormal, flush-to-zero")
        return None if t is None else t.median / self.timings["normal"].median

    def summary(self) -> str:
        n = self.timings["normal"].median
        s = self.timings["subnormal"].median
        text = (
            f"On this CPU, {self.op} of {self.numel:,} float32 numbers took {format_seconds(s)} on subnormal "
            f"inputs against {format_seconds(n)} on normal ones: {format_ratio(self.slowdown)} as long"
        )
        if self.slowdown < 1.2:
            text += " (little or no penalty on this CPU)"
        if not self.flush_supported:
            return text + "; torch.set_flush_denormal is not supported here (it returned False)."
        f = self.timings["subnormal, flush-to-zero"].median
        zeros = "read as zero" if self.flushes_to_zero else "were NOT flushed"
        return (
            f"{text}. With flush-to-zero on, the subnormal inputs {zeros} and took {format_seconds(f)} "
            f"({format_ratio(self.flushed_slowdown)} the normal time)."
        )

    def __str__(self) -> str:
        return self.summary()


_SUBNORMAL_OPS = {
    "div": ("division by 3", lambda x, out: torch.div(x, 3.0, out=out)),
    "mul": ("multiplication by 0.75", lambda x, out: torch.mul(x, 0.75, out=out)),
    "add": ("addition to itself", lambda x, out: torch.add(x, x, out=out)),
}


def subnormal_slowdown(
    numel: int = 1 << 18, *, op: str = "div", repeats: int = 8, min_sample_s: float = 0.005
) -> SubnormalResult:
    """Time ``op`` on ``numel`` float32 numbers on the CPU: normal inputs (1.5), subnormal inputs (a quarter
    of the smallest normal float32), and subnormal inputs with ``torch.set_flush_denormal(True)``.
    (``09_pitfalls``)

    Timed by :func:`amp_lab.timing.measure` (warm-up, interleaved samples, medians) on **one** CPU thread,
    because the flush-to-zero setting belongs to the thread that sets it.  The setting found before is
    restored afterwards (:func:`flush_denormal`).  ``op`` is ``"div"``, ``"mul"`` or ``"add"``;
    ``repeats`` is at most :data:`MAX_TIMING_REPEATS` and ``min_sample_s`` at most
    :data:`MAX_TIMING_SAMPLE_S`.
    """
    numel = check_int("numel", numel, minimum=1, maximum=MAX_NUMEL)
    check_choice("op", op, list(_SUBNORMAL_OPS))
    repeats = check_int("repeats", repeats, minimum=1, maximum=MAX_TIMING_REPEATS)
    min_sample_s = check_float("min_sample_s", min_sample_s, gt=0, le=MAX_TIMING_SAMPLE_S)
    check_fits(numel * 4 * 3, "cpu", f"subnormal_slowdown(numel={numel})", "choose a smaller numel")
    name, fn = _SUBNORMAL_OPS[op]
    before = flush_denormal_enabled()
    tiny = torch.finfo(torch.float32).smallest_normal / 4
    normal = torch.full((numel,), 1.5)
    subnormal = torch.full((numel,), tiny)
    out = torch.empty(numel)
    with torch_threads(1), flush_denormal(True) as supported:  # one thread: the setting is per thread
        flushes = bool(supported and (fn(subnormal, out) == 0).all())
    fns = {
        "normal": lambda: fn(normal, out),
        "subnormal": Contestant(lambda: fn(subnormal, out), lambda: flush_denormal(False)),
    }
    if supported:
        fns["subnormal, flush-to-zero"] = Contestant(lambda: fn(subnormal, out), lambda: flush_denormal(True))
    with flush_denormal(False):
        timings = measure(
            fns, device="cpu", warmup=2, repeats=repeats, min_sample_s=min_sample_s, num_threads=1
        )
    return SubnormalResult(
        op=name,
        numel=numel,
        flush_supported=supported,
        flushes_to_zero=flushes,
        restored=flush_denormal_enabled() == before,
        timings=timings,
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

    def summary(self) -> str:
        v = self.variants
        good = [n for n in ATTENTION_VARIANTS if v[n].ok]
        bad = [n for n in ATTENTION_VARIANTS if not v[n].ok]
        return (
            f"Every entry of Q and K is at most {_fmt(self.largest_input)} (float16 holds up to "
            f"{_fmt(self.fp16_max)}), yet the largest logit of Q K^T is {_fmt(self.largest_logit)}: in float16 "
            f"{v['fp16'].inf_logits} of {self.seq * self.seq} logits overflow to inf and {v['fp16'].nan_rows} of "
            f"{self.seq} rows of softmax are nan. Finite everywhere: "
            f"{'; '.join(f'{n} (largest error {v[n].max_error:.2g})' for n in good) or 'none'}. Still nan: "
            f"{'; '.join(bad) or 'none'}."
        )

    def __str__(self) -> str:
        return self.summary()


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

    computed = {}
    logits, probs = naive(Qd, Kd)
    computed["fp16"] = (logits, probs)
    computed["fp16 logits, fp32 softmax"] = (logits, torch.softmax(logits.float() * scale, dim=-1))
    scaled = (Qd * scale) @ Kd.T
    computed["fp16 with Q scaled first"] = (scaled, torch.softmax(scaled, dim=-1))
    computed["bf16"] = naive(Qd.to(torch.bfloat16), Kd.to(torch.bfloat16))
    computed["fp32 logits"] = naive(Qd.float(), Kd.float())
    variants = {}
    for name in ATTENTION_VARIANTS:
        lg, pr = computed[name]
        lg, pr = float64_on_cpu(lg), float64_on_cpu(pr)
        nan_rows = int(torch.isnan(pr).any(dim=-1).sum())
        err = float("nan") if nan_rows else float((pr - reference).abs().max())
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

    def summary(self) -> str:
        if not self.available:
            return f"torch.compile could not run here: {self.reason}"
        dt = dtype_name(self.dtype)
        same = "bit for bit" if self.bitwise_equal else f"to within {_fmt(self.max_abs_diff)}"
        cache = (
            "saw a weight updated in place inside the region (its graph casts the weight on every call)"
            if self.sees_in_place_update
            else "did not see a weight updated in place inside the region"
        )
        outs = " then ".join(dtype_name(d) for d in self.dtypes_outside_then_inside)
        return (
            f"On {self.device_type}, Dynamo's graph kept the autocast region ({self.autocast_regions} enter/exit "
            f"pair), and AOTAutograd turned it into {self.casts} explicit casts to {dt}; the compiled "
            f"function returned {dtype_name(self.compiled_dtype)} like eager ({dtype_name(self.eager_dtype)}), "
            f"equal {same}. The compiled function {cache}. A function without a region of its own, called "
            f"outside and then inside an autocast region, was compiled {self.graphs_outside_then_inside} times "
            f"and returned {outs}: the autocast state is a guard."
        )

    def __str__(self) -> str:
        return self.summary()


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
    try:
        import importlib

        aot_autograd = importlib.import_module("torch._dynamo.backends.common").aot_autograd
    except Exception as exc:  # noqa: BLE001 - any failure means: not available here
        return _replace(empty, reason=f"torch._dynamo is not available ({type(exc).__name__}: {exc})")

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
            sees_update = not torch.equal(first, second)
            lin.weight.data.sub_(1.0)
            # A guard on the autocast state: no region inside, called outside then inside one.
            dynamo_graphs.clear()
            compiled_plain = torch.compile(_fresh(plain), backend=backend, fullgraph=True)
            with torch.no_grad():
                outside = compiled_plain(X)
                with torch.autocast(dev.type, dtype=dtype):
                    inside = compiled_plain(X)
            n_plain = len(dynamo_graphs)
    except Exception as exc:  # noqa: BLE001 - say why, show what can be shown
        return _replace(empty, reason=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if not aten_graphs:
        return _replace(empty, reason="the recording backend received no graph")
    graph = aten_graphs[0].graph
    regions = (
        0
        if region_graph is None
        else sum(
            1
            for n in region_graph.graph.nodes
            if "_enter_autocast" in getattr(n.target, "__name__", str(n.target))
        )
    )
    casts = sum(
        1
        for n in graph.nodes
        if n.op == "call_function"
        and any(s in str(n.target) for s in ("_to_copy", "convert_element_type"))
        and dtype in (*n.args[1:], *n.kwargs.values())
    )
    diff = (out.float() - eager.float()).abs().max()
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
        max_abs_diff=float(diff),
        sees_in_place_update=sees_update,
        graphs_outside_then_inside=n_plain,
        dtypes_outside_then_inside=(outside.dtype, inside.dtype),
    )


def _replace(result: CompileResult, **changes) -> CompileResult:
    import dataclasses

    return dataclasses.replace(result, **changes)
