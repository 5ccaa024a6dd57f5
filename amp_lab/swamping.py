"""bfloat16 swamping and its remedies, run live.  (``09_pitfalls``, section 3)

An update smaller than half a bfloat16 gap of a weight is rounded away.  :func:`swamping_run` nudges a
weight many times, kept four ways: plain bfloat16, FP32 master weights, Kahan-compensated updates
(:func:`kahan_add_`) and stochastic rounding (:func:`stochastic_round`); :func:`plot_swamping` draws the
paths.  The run's record reads itself as a :class:`amp_lab.text.Reading`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch

from ._checks import check_axes, check_float, check_instance, check_int, check_seed
from .device import check_fits, float64_on_cpu, get_device
from .pitfalls import MAX_NUMEL, MAX_STEPS, check_work
from .text import Reading

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
        moved = self.exact - self.start
        return (self.history[method][-1] - self.start) / moved if moved else 1.0

    @property
    def lost(self) -> bool:
        """Each update is smaller than half a bf16 ulp of the starting weight: plain bf16 swallows it."""
        return abs(self.update) < self.half_ulp

    def reading(self, *, remedies: bool = True) -> Reading:
        """Outcome ``"swamping.bf16_stuck"`` (plain bfloat16 never moved), ``"swamping.bf16_exact"`` or
        ``"swamping.bf16_partway"``; with ``remedies``, how far the other three methods got."""
        end = self.final["bf16"]
        if end == self.start:
            outcome = "swamping.bf16_stuck"
        else:
            outcome = "swamping.bf16_exact" if end == self.exact else "swamping.bf16_partway"
        reasons = ("swamping.update_lost" if self.lost else "swamping.update_kept",)
        if remedies:
            reasons += ("swamping.remedies",)
        facts = {
            "start": self.start,
            "update": self.update,
            "num_steps": self.num_steps,
            "numel": self.numel,
            "half_ulp": self.half_ulp,
            "exact": self.exact,
            "spread": self.stochastic_spread,
        }
        for m in SWAMPING_METHODS:
            key = m.split()[0]
            facts[f"final_{key}"] = self.final[m]
            facts[f"progress_{key}"] = round(100 * self.progress(m)) / 100 + 0.0  # + 0.0: no "-0%"
        return Reading(outcome, reasons, facts)

    def __str__(self) -> str:
        return str(self.reading())


def _bf16_half_gap(start: float, direction: float) -> float:
    """Half the gap between ``bfloat16(start)`` and its neighbour towards ``direction``'s sign."""
    w = torch.tensor(start, dtype=torch.float32).to(torch.bfloat16)
    toward = torch.tensor(math.copysign(math.inf, direction), dtype=torch.bfloat16)
    return abs(float(torch.nextafter(w, toward)) - float(w)) / 2


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
    check_work(numel, num_steps)
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
    sr, plain = bf16.clone(), bf16.clone()
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
    stacked = {m: float64_on_cpu(torch.stack(values)) for m, values in hist.items()}
    last = stacked["stochastic"][-1]
    return SwampingResult(
        start=float(bf16[0]),
        update=update,
        num_steps=num_steps,
        numel=numel,
        half_ulp=_bf16_half_gap(start, update),
        exact=float(bf16[0]) + num_steps * update,
        history={m: tuple(t.mean(dim=1).tolist()) for m, t in stacked.items()},
        stochastic_spread=float(last.max() - last.min()),
    )


def plot_swamping(result: SwampingResult, ax=None):
    """Weight against step for the four methods of a :func:`swamping_run`, with the exact path dashed.
    Returns the Axes.  (``09_pitfalls``)"""
    check_instance("result", result, SwampingResult, "a SwampingResult (from swamping_run)")
    check_axes("ax", ax)
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
