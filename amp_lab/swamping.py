"""bfloat16 swamping (``09_pitfalls``, section 3): an update below half a weight's bfloat16 gap is lost;
:func:`swamping_run` keeps a weight the four ways of ``SWAMPING_METHODS``; :func:`plot_swamping` draws."""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch

from ._checks import check_axes, check_float, check_instance, check_int, check_seed
from .device import check_fits, float64_on_cpu, get_device
from .pitfalls import MAX_NUMEL, MAX_STEPS, Reads, check_work
from .text import Reading

SWAMPING_METHODS = ("bf16", "fp32 master", "kahan", "stochastic")


def stochastic_round(x: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """Round a float32 tensor to bfloat16 *stochastically*, so ``E[result] == x``: a random integer in
    [0, 2**16) is added to the 16 low bits bfloat16 drops, which are then cleared; inf, nan pass."""
    check_instance("x", x, torch.Tensor, "a torch.Tensor")
    if x.dtype != torch.float32:
        raise ValueError(f"x must be a float32 tensor (the master copy being rounded), got dtype {x.dtype}")
    if generator is not None:
        check_instance("generator", generator, torch.Generator, "a torch.Generator or None")
        if generator.device.type != x.device.type:
            raise ValueError(
                f"generator is on {generator.device} but x is on {x.device}: make it on x's device"
            )
    if x.numel() > MAX_NUMEL:
        raise ValueError(f"x may hold at most {MAX_NUMEL} elements, got {x.numel()}")
    noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32, device=x.device, generator=generator)
    bits = x.contiguous().view(torch.int32)
    # -65536 is 0xFFFF0000 as an int32: sign, exponent and bfloat16's 7 mantissa bits; the cast is then exact
    rounded = ((bits + noise) & -65536).view(torch.float32).to(torch.bfloat16)
    return torch.where(torch.isfinite(x), rounded, x.to(torch.bfloat16))


def kahan_add_(weight: torch.Tensor, compensation: torch.Tensor, update) -> torch.Tensor:
    """``weight += update`` with Kahan compensation, in place and in the tensors' dtype: ``compensation``
    (starting at zero) carries what rounding ``weight`` lost into the next update.  Returns ``weight``."""
    with torch.no_grad():
        compensation.add_(update)
        old = weight.clone()
        weight.add_(compensation)
        compensation.add_(old.sub_(weight))
    return weight


@dataclass(frozen=True)
class SwampingResult(Reads):
    """A weight nudged ``num_steps`` times by ``update``, kept four ways: ``history[method]`` is the weight
    after each step (index 0: the start; for ``"stochastic"`` the mean over ``numel`` weights); ``exact`` is
    ``start + num_steps * update`` in float64."""

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

    def percent(self, method: str) -> str:
        """:meth:`progress` as a whole percentage: ``"0%"``, never ``"-0%"`` (``round`` gives an int)."""
        return f"{round(100 * self.progress(method))}%"

    @property
    def lost(self) -> bool:
        """Each update is smaller than half a bf16 ulp of the starting weight: plain bf16 swallows it."""
        return abs(self.update) < self.half_ulp

    def reading(self, *, remedies: bool = True) -> Reading:
        """Outcome ``"swamping.bf16_stuck"``, ``"swamping.bf16_exact"`` or ``"swamping.bf16_partway"``; with
        ``remedies``, how far the other three methods got."""
        end = self.final["bf16"]
        outcome = "swamping.bf16_exact" if end == self.exact else "swamping.bf16_partway"
        if end == self.start:
            outcome = "swamping.bf16_stuck"
        reasons = ("swamping.update_lost" if self.lost else "swamping.update_kept",)
        if remedies:
            reasons += ("swamping.remedies",)
        facts = {"start": self.start, "update": self.update, "num_steps": self.num_steps, "numel": self.numel}
        facts |= {"half_ulp": self.half_ulp, "exact": self.exact, "spread": self.stochastic_spread}
        for m in SWAMPING_METHODS:
            key = m.split()[0]
            facts[f"final_{key}"] = self.final[m]
            facts[f"progress_{key}"] = self.percent(m)
        return Reading(outcome, reasons, facts)


def swamping_run(
    num_steps: int = 500,
    *,
    update: float = -1e-3,
    start: float = 1.0,
    numel: int = 64,
    seed: int = 0,
    device=None,
) -> SwampingResult:
    """Nudge ``numel`` weights from ``start`` ``num_steps`` times by ``update``, kept the four ways of
    :data:`SWAMPING_METHODS`.  ``num_steps`` <= MAX_STEPS, ``numel`` <= 2**16, their product <= MAX_WORK."""
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
    what = f"swamping_run(num_steps={num_steps}, numel={numel})"
    check_fits(num_steps * numel * 2 + numel * 16, dev, what, "choose fewer steps or weights")
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
        x = sr.float() + update
        # on MPS the random bits are drawn on the CPU
        sr = stochastic_round(x.cpu() if dev.type == "mps" else x, generator=gen).to(dev)
        for m, w in zip(SWAMPING_METHODS, (plain, master, kahan_w, sr), strict=True):
            hist[m].append(w.to(torch.bfloat16, copy=True))
    # means of bfloat16 values in float64 are exact sums here (few, short mantissas): the same on any CPU
    stacked = {m: float64_on_cpu(torch.stack(values)) for m, values in hist.items()}
    last = stacked["stochastic"][-1]
    w = torch.tensor(start, dtype=torch.float32).to(torch.bfloat16)
    toward = torch.tensor(math.copysign(math.inf, update), dtype=torch.bfloat16)
    return SwampingResult(
        start=float(bf16[0]),
        update=update,
        num_steps=num_steps,
        numel=numel,
        half_ulp=abs(float(torch.nextafter(w, toward)) - float(w)) / 2,
        exact=float(bf16[0]) + num_steps * update,
        history={m: tuple(t.mean(dim=1).tolist()) for m, t in stacked.items()},
        stochastic_spread=float(last.max() - last.min()),
    )


def plot_swamping(result: SwampingResult, ax=None):
    """Weight against step for the four methods of a :func:`swamping_run`, the exact path dashed; returns the Axes."""
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
