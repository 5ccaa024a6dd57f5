"""Notebook 04's loss scalers, bit for bit against ``torch.amp.GradScaler``, and the comparison beside it.

Unlike GradScaler: one optimizer per step, ``step()`` returns whether it stepped, and a backoff below
float32's normal range raises :class:`ScaleUnderflowError`.  Argument checks: :mod:`amp_lab.scaler_checks`.
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import torch

from . import scaler_checks as checks
from ._checks import (
    FLOAT32_TINY,
    bounded_list,
    check_bool,
    check_callable,
    check_float,
    check_instance,
    check_scale,
)
from .device import float64_on_cpu, get_device, seeded
from .text import Reading


class ScaleUnderflowError(RuntimeError):
    """A backoff would take the scale below float32's normal range: the loss itself is likely inf/NaN."""


def to_float32(x: float) -> float:
    """Round a Python number to the nearest float32 (overflow gives inf), as GradScaler stores its scale."""
    return torch.tensor(float(x), dtype=torch.float64, device="cpu").float().item()


class StaticLossScaler:
    """One fixed scale ``S``: ``step()`` always steps, so an inf/NaN gradient goes into the weights."""

    def __init__(self, scale: float):
        # a float32 tensor, as GradScaler keeps it (on the CPU: float64 products are computed there)
        self._scale = torch.tensor(check_scale("scale", scale), dtype=torch.float32, device="cpu")
        self._found_inf = None  # whether unscale_ found an inf/NaN (None: not called yet this step)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * S``: an FP16/BF16 loss times a float32 tensor is computed in float32, rounded once."""
        return loss * self._scale.to(loss.device)

    def unscale_(self, optimizer) -> None:
        """Look for inf/NaN in the scaled gradients, then multiply them by ``1/S`` in place."""
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        # the largest |g| of a gradient is inf or NaN exactly when one of its elements is
        self._found_inf = (
            bool(grads) and not torch.stack(torch._foreach_norm(grads, math.inf)).isfinite().all()
        )
        if grads:  # 1/S in float64, rounded to float32, as GradScaler computes it
            torch._foreach_mul_(grads, (1 / float64_on_cpu(self._scale)).float().to(grads[0].device))

    def step(self, optimizer) -> bool:
        """Unscale (unless done already), then ``optimizer.step()``; return whether it stepped."""
        if self._found_inf is None:
            self.unscale_(optimizer)
        optimizer.step()
        return True

    def update(self) -> None:
        """End the step: a static scale never changes."""
        self._found_inf = None

    def get_scale(self) -> float:
        return self._scale.item()


class DynamicLossScaler(StaticLossScaler):
    """GradScaler's algorithm: skip a step with an inf/NaN gradient and multiply the scale by
    ``backoff_factor``; after ``growth_interval`` clean steps in a row multiply it by ``growth_factor``."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ):
        args = checks.dynamic(init_scale, growth_factor, backoff_factor, growth_interval)
        super().__init__(args["init_scale"])
        self.growth_factor, self.backoff_factor = args["growth_factor"], args["backoff_factor"]
        self.growth_interval = args["growth_interval"]
        self._growth_tracker = 0  # clean steps in a row since the scale last changed

    def step(self, optimizer) -> bool:
        """Unscale (unless done already); call ``optimizer.step()`` only if every gradient is finite."""
        if self._found_inf is None:
            self.unscale_(optimizer)
        if not self._found_inf:
            optimizer.step()
        return not self._found_inf

    def update(self) -> None:
        """Back off after an inf/NaN, grow after ``growth_interval`` clean steps (products in float64,
        rounded to float32, as GradScaler's kernel computes them)."""
        if self._found_inf:
            scale = (float64_on_cpu(self._scale) * self.backoff_factor).float()
            if scale < FLOAT32_TINY:
                raise ScaleUnderflowError(
                    f"backing off from {self._scale.item()!r} leaves float32's normal range: skipped steps "
                    "at ever smaller scales mean the loss or the forward pass itself is inf or NaN"
                )
            self._scale, self._growth_tracker = scale, 0
        elif self._growth_tracker + 1 == self.growth_interval:
            grown = (float64_on_cpu(self._scale) * self.growth_factor).float()
            if torch.isfinite(grown):  # a growth past float32's max is no growth
                self._scale = grown
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
        self._found_inf = None


# The loss times LOSS_FACTOR keeps the gradients finite at any scale (every inf/NaN is one the schedule injects);
LOSS_FACTOR, LR = 2.0**-40, 2.0**33  # LR makes up for it in the step


class ScalerComparison(NamedTuple):
    """``same``, or the first differing ``step``, its ``fault``, ``what`` differed (for "error" ``mine`` is the
    text) and the ``call``; GradScaler's ``scales`` and ``skipped`` steps so far."""

    same: bool
    steps: int
    step: int | None = None
    fault: str | None = None
    what: str | None = None
    mine: object = None
    theirs: object = None
    call: str | None = None
    scales: tuple = ()
    skipped: tuple = ()

    def describe(self) -> str:
        """One line in words: identical, or the first difference."""
        if self.same:
            return f"identical to GradScaler on all {self.steps} steps (first difference: none)"
        where = f"first difference at step {self.step} (gradients {self.fault}):"
        if self.what == "error":
            return f"{where} {self.call} {self.mine}"
        if self.what == "parameters":
            return f"{where} the parameters differ, by up to {self.mine:.2g} of their size"
        return f"{where} {self.what}: yours {show_value(self.mine)}, GradScaler's {show_value(self.theirs)}"

    __str__ = describe


def show_value(x) -> str:
    """A compared value as 04 prints it: a power of two as ``2**k``, a skip as "skipped"/"stepped"."""
    if isinstance(x, bool):
        return "skipped" if x else "stepped"
    if isinstance(x, float) and x > 0 and math.isfinite(x) and math.log2(x).is_integer():
        return f"2**{int(math.log2(x))}"
    return repr(x) if isinstance(x, float) else f"{x!r:.80}"


class _Refused(Exception):
    """The learner's scaler raised or returned something unusable: (call, text)."""


def _call(scaler, name: str, *args):
    method = getattr(scaler, name, None)
    if not callable(method):
        raise _Refused(f"{name}()", "is missing: the scaler has no such method")
    try:
        return method(*args)
    except Exception as e:  # the learner's code: reported, never raised
        raise _Refused(f"{name}()", _failed(e)) from e


def _failed(e: Exception) -> str:
    return (
        "is not written yet (NotImplementedError)"
        if isinstance(e, NotImplementedError)
        else f"raised {type(e).__name__}: {e}"
    )


def _returned(x) -> str:
    return "None (is a `return` missing?)" if x is None else f"{type(x).__name__}: {x!r:.60}"


def _run_step(scaler, model, opt, X, fault):
    """One step with ``scaler``: (scaled loss, skipped, scale after update).  Raises _Refused."""
    opt.zero_grad(set_to_none=True)
    loss = model(X).square().mean() * LOSS_FACTOR
    scaled = _call(scaler, "scale", loss)
    if not isinstance(scaled, torch.Tensor) or scaled.shape != loss.shape or not scaled.requires_grad:
        raise _Refused("scale()", f"returned {_returned(scaled)}, not the loss times the scale")
    scaled.backward()
    if fault != "clean":
        with torch.no_grad():
            model.weight.grad.view(-1)[0] = math.inf if fault == "inf" else math.nan
    _call(scaler, "unscale_", opt)
    opt.stepped = False  # set by the optimizer's step hook
    _call(scaler, "step", opt)
    _call(scaler, "update")
    raw = _call(scaler, "get_scale")
    try:
        scale = float(None if isinstance(raw, bool) else raw)  # a bool is no scale
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise _Refused("get_scale()", f"returned {_returned(raw)}, not a number") from None
    return float64_on_cpu(scaled).item(), not opt.stepped, scale


def compare_with_grad_scaler(
    make_scaler,
    schedule,
    *,
    init_scale: float = 2.0**16,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
    rtol: float = 0.0,
    device=None,
) -> ScalerComparison:
    """Run ``make_scaler()`` beside ``torch.amp.GradScaler(init_scale, ...)`` on a fault ``schedule`` (per step
    "clean", "inf" or "nan" in one gradient element), each on a copy of a tiny seeded model, and report the
    first step whose scaled loss, skip, scale or parameters (within ``rtol``) differ, or the scaler raised."""
    check_callable("make_scaler", make_scaler)
    schedule = checks.schedule(schedule)
    kwargs = checks.dynamic(init_scale, growth_factor, backoff_factor, growth_interval)
    rtol = check_float("rtol", rtol, ge=0.0, le=1.0)
    dev = get_device(device)
    with seeded(0):
        models, X = [torch.nn.Linear(4, 3).to(dev)], torch.randn(8, 4).to(dev)
    models.append(copy.deepcopy(models[0]))  # GradScaler's, then ours
    opts = [torch.optim.SGD(m.parameters(), lr=LR) for m in models]
    for opt in opts:
        opt.register_step_post_hook(lambda o, *_: setattr(o, "stepped", True))
    scales, skipped = [], []

    def differs(step, what, mine, want=None, call=None):
        found = (step, schedule[step], what, mine, want, call, tuple(scales), tuple(skipped))
        return ScalerComparison(False, len(schedule), *found)

    try:
        mine = make_scaler()
    except Exception as e:  # the learner's constructor
        return differs(0, "error", _failed(e), call="the constructor")
    if mine is None:
        return differs(0, "error", "returned None, not a scaler", call="make_scaler()")
    theirs = torch.amp.GradScaler(dev.type, **kwargs)
    for step, fault in enumerate(schedule):
        want = _run_step(theirs, models[0], opts[0], X, fault)
        scales.append(want[2])
        skipped += [step] if want[1] else []
        try:
            got = _run_step(mine, models[1], opts[1], X, fault)
        except _Refused as e:
            return differs(step, "error", e.args[1], call=e.args[0])
        m, t = got[0], want[0]
        if not (m == t or (math.isnan(m) and math.isnan(t)) or math.isclose(m, t, rel_tol=rtol)):
            return differs(step, "scaled loss", m, t)
        for what, m, t in (("skipped", got[1], want[1]), ("scale", got[2], want[2])):
            if m != t:
                return differs(step, what, m, t)
        for p, q in zip(models[1].parameters(), models[0].parameters(), strict=True):
            if not torch.allclose(p, q, rtol=rtol, atol=0.0, equal_nan=True):
                worst = ((p - q).abs() / q.abs().clamp_min(FLOAT32_TINY)).max().item()
                return differs(step, "parameters", worst, 0.0)
    return ScalerComparison(True, len(schedule), scales=tuple(scales), skipped=tuple(skipped))


def read_schedule(
    found: ScalerComparison, init_scale: float, growth_interval: int, backoff_factor: float = 0.5
) -> Reading:
    """04's reveal after a fault schedule: GradScaler's final scale, its skips and how often it grew."""
    check_instance("found", found, ScalerComparison, "a ScalerComparison (from compare_with_grad_scaler)")
    args = checks.dynamic(init_scale, 2.0, backoff_factor, growth_interval)
    before = (args["init_scale"], *found.scales[:-1])
    facts = {
        "final": show_value(found.scales[-1]) if found.scales else "?",
        "num_skipped": len(found.skipped),
        "skipped": list(found.skipped),
        "grew": sum(b > a for a, b in zip(before, found.scales, strict=True)),
        "growth_interval": args["growth_interval"],
        "backoff_factor": args["backoff_factor"],
    }
    return Reading("scaling.schedule_end", ("scaling.schedule_skips", "scaling.schedule_growth"), facts)


def read_backoff(scales: list[float], ours_refused: bool) -> Reading:
    """04's reveal after backing GradScaler off again and again: where its scale ends (``facts["answer"]``,
    worded as the prediction's options), and whether ours refused to leave float32's normal range."""
    scales = [
        check_float(f"scales[{i}]", s, ge=0.0)
        for i, s in enumerate(bounded_list("scales", scales, 10_000, "a list of scales"))
    ]
    ours_refused = check_bool("ours_refused", ours_refused)
    subnormal = next((n for n, s in enumerate(scales, 1) if s < FLOAT32_TINY), None)
    last_normal = scales[subnormal - 2] if subnormal and subnormal > 1 else None
    zero = bool(scales) and scales[-1] == 0
    facts = {
        "answer": "goes on down to exactly 0" if zero else "stops at float32's smallest normal number",
        "num_backoffs": len(scales),
        "first_subnormal": subnormal,
        "last_normal_log2": math.log2(last_normal) if last_normal else None,
        "last_log2": math.log2(scales[-1]) if scales and scales[-1] > 0 else None,
        "to_zero": len(scales) - subnormal if subnormal else None,
    }
    outcome = "scaling.backoff_reaches_zero" if zero else "scaling.backoff_stops"
    return Reading(outcome, ("scaling.ours_refuses" if ours_refused else "scaling.ours_carries_on",), facts)


def runs_use(chosen: type, mine: type) -> Reading:
    """Which scaler class 04's runs use: the learner's ``mine`` once its check passed, else the package's."""
    for name, value in (("chosen", chosen), ("mine", mine)):
        check_instance(name, value, type, "a scaler class")
    yours = chosen is mine
    facts = {"mine": mine.__name__, "package": chosen.__name__, "yours": yours}
    return Reading("scaling.runs_use_yours" if yours else "scaling.runs_use_package", (), facts)
