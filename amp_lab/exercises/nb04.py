"""Exercises of notebook 04 (loss scaling from scratch).

The learner writes the two scalers themselves: ``MyStaticScaler`` (exercise 1) and
``MyDynamicScaler`` (exercise 2), with ``torch.amp.GradScaler``'s method names.  Each check runs the
learner's class beside GradScaler on fault schedules (:func:`amp_lab.scaling.compare_with_grad_scaler`:
steps whose gradients hold an inf or a NaN, growth, growth up against float32's max, two skips in a
row, a scale float32 must round) and reports the first step where they differ and what differed; the
common mistakes are recognised from that difference, so the hint names the idea that was missed.
Exercise 3 asks what GradScaler does at the top of float32's range.  Every expected value comes from
GradScaler itself, run here.
"""

from __future__ import annotations

import functools
import math
from numbers import Real
from typing import NamedTuple

import torch

from ..check import check_value
from ..check_base import CheckResult
from ..check_base import finish as _finish
from ..check_base import is_placeholder as _is_placeholder
from ..scaling import ScalerComparison, compare_with_grad_scaler, to_float32
from . import Mistake, exercise

__all__ = ["ex1", "ex2", "ex3", "ex4", "STATIC_SCHEDULES", "DYNAMIC_SCHEDULES", "GROWTH_TEST"]

# Parameters are compared bit for bit first; a scaler that divides where GradScaler multiplies by
# 1/S (the same for a power-of-two S, a last-bit difference otherwise) passes within this tolerance.
PARAM_RTOL = 1e-6


class Schedule(NamedTuple):
    """A fault schedule and the GradScaler settings it runs with."""

    name: str
    faults: tuple
    init_scale: float
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000


def _steps(*parts) -> tuple:
    """("clean", 3), "inf" ... -> the flat schedule."""
    out = []
    for p in parts:
        out += [p[0]] * p[1] if isinstance(p, tuple) else [p]
    return tuple(out)


# Exercise 1: no faults, and a growth interval beyond the schedule, so GradScaler's scale stays put.
STATIC_SCHEDULES = (
    Schedule("a static scale of 2**10", _steps(("clean", 6)), 2.0**10, growth_interval=1000),
    Schedule("a static scale of 2**-3", _steps(("clean", 4)), 2.0**-3, growth_interval=1000),
)

DYNAMIC_SCHEDULES = (
    Schedule("clean steps: growth every 3", _steps(("clean", 8)), 2.0**10, growth_interval=3),
    Schedule(
        "an inf gradient at step 2", _steps(("clean", 2), "inf", ("clean", 7)), 2.0**10, growth_interval=3
    ),
    Schedule(
        "two skips in a row (NaN, then inf)",
        _steps("clean", "nan", "inf", ("clean", 5)),
        2.0**12,
        growth_interval=2,
    ),
    Schedule(
        "growth up against float32's max",
        _steps(("clean", 3), "inf", ("clean", 3)),
        2.0**126,
        growth_interval=1,
    ),
    Schedule(
        "a scale float32 must round (init_scale=1000.1, backoff_factor=0.3)",
        _steps(("clean", 3), "inf", "inf", ("clean", 4)),
        1000.1,
        backoff_factor=0.3,
        growth_interval=2,
    ),
)

# Exercise 3: GradScaler at the top of float32's range.
GROWTH_TEST = {"init_scale": 2.0**127, "growth_interval": 1}


def _compare(make, sched: Schedule, rtol: float) -> ScalerComparison:
    return compare_with_grad_scaler(
        make,
        list(sched.faults),
        init_scale=sched.init_scale,
        growth_factor=sched.growth_factor,
        backoff_factor=sched.backoff_factor,
        growth_interval=sched.growth_interval,
        rtol=rtol,
        device="cpu",  # tiny and deterministic; GradScaler's rules are the same on every device
    )


def _run_all(make_for, schedules) -> tuple[str, Schedule | None, ScalerComparison | None, int]:
    """('exact' | 'close' | 'wrong', failing schedule, its comparison, steps compared)."""
    verdict, steps = "exact", 0
    for sched in schedules:
        found = _compare(make_for(sched), sched, 0.0)
        if not found.same:
            found = _compare(make_for(sched), sched, PARAM_RTOL)
            if not found.same:
                return "wrong", sched, found, steps
            verdict = "close"
        steps += found.steps
    return verdict, None, None, steps


def _skeleton(found: ScalerComparison) -> bool:
    """The class is still the skeleton: at step 0, its constructor or scale() is not written."""
    return (
        found.what == "error"
        and found.step == 0
        and found.call in ("the constructor", "scale()")
        and ("returned None" in str(found.mine) or "not written yet" in str(found.mine))
    )


def _not_a_class(answer, name: str, show: bool) -> CheckResult | None:
    if _is_placeholder(answer):
        return _finish(
            "unanswered",
            f"no answer yet: write the class `{name}` above and run this cell again.",
            show=show,
            details={"answered": False},
        )
    if not callable(answer):
        return _finish(
            "wrong",
            f"`{name}` is a {type(answer).__name__}, not a class: pass the class itself, "
            f"`{name}`, not an instance or a value.",
            show=show,
        )
    return None


def _failed(name: str, sched: Schedule, found: ScalerComparison, hint: str, show: bool) -> CheckResult:
    head = f'{name} differs from torch.amp.GradScaler on the schedule "{sched.name}".'
    notes = [
        found.describe(),
        f"GradScaler's scale after each update so far: {_scales(found.scales)}",
        f"hint: {hint}",
    ]
    return _finish(
        "wrong", head, notes, show=show, details={"schedule": sched.name, "comparison": found, "hint": hint}
    )


def _scales(scales) -> str:
    return ", ".join(_show(s) for s in scales) or "(none yet)"


def _show(x: float) -> str:
    if x > 0 and math.isfinite(x) and math.log2(x).is_integer():
        return f"2**{int(math.log2(x))}"
    return f"{x:.7g}"


def _passed(verdict: str, name: str, schedules, steps: int, show: bool) -> CheckResult:
    exactly = "bit for bit" if verdict == "exact" else f"within a relative {PARAM_RTOL:g} on the parameters"
    head = (
        f"{name} matches torch.amp.GradScaler on all {len(schedules)} schedules ({steps} steps), {exactly}: "
        "the same scaled loss, skipped steps, scale and parameters at every step (first difference: none)."
    )
    return _finish(verdict, head, show=show, details={"steps": steps})


# --------------------------------------------------------------------------------------------
# Exercise 1: MyStaticScaler
# --------------------------------------------------------------------------------------------

_NO_UNSCALE_HINT = "the optimizer saw gradients still multiplied by S: unscale_ must divide every parameter's .grad by S, in place"
_TWICE_HINT = "the optimizer saw gradients divided by S twice: unscale_ has already divided them, so step must not divide again"
_MULTIPLY_HINT = (
    "the optimizer saw gradients multiplied by S twice: unscaling divides by S (or multiplies by 1/S)"
)


class _RecordingOptimizer(torch.optim.Optimizer):
    """An optimizer whose step() only records the gradients it was given."""

    def __init__(self, params):
        super().__init__(params, {})
        self.seen = None

    def step(self, closure=None):
        self.seen = [
            p.grad.detach().clone() for g in self.param_groups for p in g["params"] if p.grad is not None
        ]


def _gradient_ratio(answer, scale: float) -> float | None:
    """What the learner's scaler hands the optimizer, as a multiple of the true gradient (None: unknown)."""
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 3)
            X = torch.randn(8, 4)
        model(X).square().mean().backward()
        true = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        opt = _RecordingOptimizer(model.parameters())
        scaler = answer(scale)
        scaler.scale(model(X).square().mean()).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        if not opt.seen:
            return None
        got = torch.cat([g.flatten() for g in opt.seen]).double()
        want = torch.cat([g.flatten() for g in true]).double()
        mask = want != 0
        return (got[mask] / want[mask]).median().item()
    except Exception:  # the learner's code: no diagnosis, the comparison reports it
        return None


def _static_hint(answer, sched: Schedule, found: ScalerComparison) -> str:
    if found.what == "scaled loss":
        return "scale(loss) returns the loss multiplied by S: backward() of it gives S times every gradient"
    if found.what == "skipped":
        return "a static scaler always steps: step(opt) calls opt.step()"
    if found.what == "scale":
        return "get_scale() returns S, the scale the scaler was built with (a static scale never changes)"
    if found.what == "parameters":
        S = sched.init_scale
        ratio = _gradient_ratio(answer, S)
        if ratio is not None:
            for target, hint in ((S, _NO_UNSCALE_HINT), (1 / S, _TWICE_HINT), (S * S, _MULTIPLY_HINT)):
                if math.isclose(ratio, target, rel_tol=1e-3):
                    return hint
        return "the optimizer must see the true gradients: divided by S once, in unscale_, before opt.step()"
    return f"fix your class's {found.call} first: the check calls scale, unscale_, step, update and get_scale as a training loop does"


def _judge(name: str, schedules, make_for, hint_for, show: bool) -> CheckResult:
    """Run the learner's scaler beside GradScaler on ``schedules``: a pass, "not written yet" for an
    untouched skeleton, or the first difference with the hint ``hint_for(schedule, found)`` gives."""
    verdict, sched, found, steps = _run_all(make_for, schedules)
    if verdict != "wrong":
        return _passed(verdict, name, schedules, steps, show)
    if _skeleton(found):
        return _finish(
            "unanswered",
            f"{name} is not written yet: its {found.call} {found.mine}. Fill in the "
            "TODOs and run this cell again.",
            show=show,
            details={"answered": False},
        )
    return _failed(name, sched, found, hint_for(sched, found), show)


@exercise(
    1,
    "Write the static loss scaler",
    mistakes=[
        Mistake("forgetting to unscale", _NO_UNSCALE_HINT),
        Mistake("unscaling twice", _TWICE_HINT),
        Mistake("multiplying instead of dividing", _MULTIPLY_HINT),
        Mistake("not stepping", "a static scaler always steps"),
    ],
)
def ex1(answer, *, show: bool = True) -> CheckResult:
    """``MyStaticScaler`` beside GradScaler on fault-free schedules whose GradScaler scale never changes."""
    name = getattr(answer, "__name__", "MyStaticScaler")
    early = _not_a_class(answer, "MyStaticScaler", show)
    if early is not None:
        return early

    def make_for(s: Schedule):
        return lambda: answer(s.init_scale)

    def hint_for(sched: Schedule, found: ScalerComparison) -> str:
        return _static_hint(answer, sched, found)

    return _judge(name, STATIC_SCHEDULES, make_for, hint_for, show)


# --------------------------------------------------------------------------------------------
# Exercise 2: MyDynamicScaler
# --------------------------------------------------------------------------------------------

_TRACKER_HINT = "count the clean steps since the scale last changed: the count goes back to 0 after a skipped step and after a growth"
_FLOAT64_HINT = (
    "GradScaler keeps its scale in a float32 tensor, not in a Python float (a float64): round every scale you store "
    "to float32"
)
_OVERFLOW_HINT = "a growth whose result overflows float32 to inf is no growth: keep the old scale (GradScaler never stores an inf scale)"
_SKIP_HINT = "when unscale_ finds an inf or NaN in the gradients, step(opt) must not call opt.step()"
_BACKOFF_HINT = "after a step with an inf or NaN gradient, update() multiplies the scale by backoff_factor"
_SCALE_HINT = (
    "get_scale() returns the current scale, a number: it starts at init_scale and changes only by backoff_factor "
    "(after an inf/NaN) or by growth_factor (after growth_interval clean steps)"
)
_GROWTH_HINT = "after growth_interval clean steps in a row (not fewer, not more), update() multiplies the scale by growth_factor"


def _dynamic_hint(sched: Schedule, found: ScalerComparison) -> str:
    if found.what == "scaled loss":
        return "scale(loss) returns the loss multiplied by the current scale"
    if found.what == "skipped":
        if found.fault != "clean":
            return _SKIP_HINT
        return "a clean step must step: look for inf/NaN afresh in every unscale_ (forget the last iteration's finding)"
    if found.what == "parameters":
        return "unscale_ divides every gradient by the current scale, once, before opt.step()"
    if found.what == "scale":
        mine, theirs = found.mine, found.theirs
        if mine == math.inf:
            return _OVERFLOW_HINT
        if isinstance(mine, float) and math.isfinite(mine) and to_float32(mine) != mine:
            return _FLOAT64_HINT
        if found.fault != "clean":
            return _BACKOFF_HINT
        before = found.scales[:-1]
        changed_before = any(
            a != b for a, b in zip((sched.init_scale, *before), before, strict=False)
        ) or bool(found.skipped)
        ratios = (mine / theirs, theirs / mine) if mine > 0 and theirs > 0 else ()
        if any(math.isclose(r, sched.growth_factor) for r in ratios):
            return _TRACKER_HINT if changed_before else _GROWTH_HINT
        return _SCALE_HINT
    return f"fix your class's {found.call} first: the check calls scale, unscale_, step, update and get_scale as a training loop does"


@exercise(
    2,
    "Write the dynamic loss scaler",
    mistakes=[
        Mistake("forgetting to reset the growth tracker after a skip", _TRACKER_HINT),
        Mistake(
            "forgetting to reset the growth tracker after a growth",
            "the count goes back to 0 after a skipped step and after a growth",
        ),
        Mistake("scale kept as a Python float64", _FLOAT64_HINT),
        Mistake("growing when the doubled scale overflows", _OVERFLOW_HINT),
        Mistake("stepping on an inf gradient", _SKIP_HINT),
    ],
)
def ex2(answer, *, show: bool = True) -> CheckResult:
    """``MyDynamicScaler`` beside GradScaler on fault schedules: the first step where they differ."""
    name = getattr(answer, "__name__", "MyDynamicScaler")
    early = _not_a_class(answer, "MyDynamicScaler", show)
    if early is not None:
        return early

    def make_for(s: Schedule):
        return lambda: answer(s.init_scale, s.growth_factor, s.backoff_factor, s.growth_interval)

    return _judge(name, DYNAMIC_SCHEDULES, make_for, _dynamic_hint, show)


# --------------------------------------------------------------------------------------------
# Exercise 3: growth at the top of float32's range
# --------------------------------------------------------------------------------------------


def _grad_scaler_after_one_clean_step(init_scale: float, growth_interval: int) -> float:
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    probe = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(probe.parameters(), lr=0.0)
    scaler.scale(probe(torch.ones(1, 2)).sum() * 2.0**-100).backward()  # tiny: no natural overflow
    scaler.step(opt)
    scaler.update()
    return scaler.get_scale()


_EXCEEDS_HINT = "2**128 is beyond float32's largest value: a float32 cannot hold it"
_INF_HINT = "an inf scale would make every scaled loss inf: GradScaler refuses such a growth"


@exercise(
    3,
    "Growth at the top of float32",
    mistakes=[
        Mistake("2**128", _EXCEEDS_HINT),
        Mistake("inf", _INF_HINT),
    ],
)
def ex3(answer, *, show: bool = True) -> CheckResult:
    """GradScaler's scale after one clean update from ``init_scale=2.0**127`` with ``growth_interval=1``."""
    expected = _grad_scaler_after_one_clean_step(**GROWTH_TEST)
    grown = GROWTH_TEST["init_scale"] * 2.0  # what a float64 would hold
    if isinstance(answer, Real) and not isinstance(answer, bool):
        value = float(answer) if not (isinstance(answer, int) and answer.bit_length() > 1000) else math.inf
        if value == grown:
            return _finish(
                "wrong",
                "`answer` = 2**128 fits a Python float (a float64), but GradScaler keeps its scale in a float32.",
                [f"hint: {_EXCEEDS_HINT}; what does GradScaler do with a growth it cannot store?"],
                show=show,
            )
        if value == math.inf:
            return _finish(
                "wrong",
                "`answer` = inf is not a scale GradScaler would keep.",
                [f"hint: {_INF_HINT}: what does it keep instead?"],
                show=show,
            )
    return check_value(
        answer,
        expected,
        dtype=torch.float32,
        name="answer",
        show=show,
        hint="double the scale in float32: is the result a number GradScaler can use as a scale?",
    )


# --------------------------------------------------------------------------------------------
# Exercise 4: a broken training step, diagnosed and fixed
# --------------------------------------------------------------------------------------------

LOOP_STEPS = 6  # steps of the tiny run each training step is checked on
LOOP_OVERFLOW_STEP = 2  # this step's batch overflows FP16 in the forward pass: GradScaler must skip it
LOOP_MAX_NORM = 0.1  # clipping is active at every step


class _WatchedGradScaler(torch.amp.GradScaler):
    """GradScaler that counts its scale() calls (0 after the step: the learner's function did nothing)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale_calls = 0

    def scale(self, outputs):
        self.scale_calls += 1
        return super().scale(outputs)


def _loop_setup():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        batches = [(torch.randn(32, 8), torch.randint(0, 4, (32,))) for _ in range(LOOP_STEPS)]
    X, y = batches[LOOP_OVERFLOW_STEP]
    batches[LOOP_OVERFLOW_STEP] = (X * 1e6, y)  # an FP16 forward pass overflows to inf: the loss is inf/NaN
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = _WatchedGradScaler("cpu", init_scale=2.0**12, growth_interval=2)
    return model, opt, scaler, batches


def _forward_loss(model, X, y):
    with torch.autocast(X.device.type, dtype=torch.float16):
        logits = model(X)
    return torch.nn.functional.cross_entropy(logits.float(), y)


def _good_step(model, opt, scaler, X, y, max_norm=LOOP_MAX_NORM):
    opt.zero_grad(set_to_none=True)
    loss = _forward_loss(model, X, y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt)
    scaler.update()
    return loss.detach()


def _clip_first(model, opt, scaler, X, y, max_norm=LOOP_MAX_NORM):
    opt.zero_grad(set_to_none=True)
    loss = _forward_loss(model, X, y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    return loss.detach()


def _plain_opt_step(model, opt, scaler, X, y, max_norm=LOOP_MAX_NORM):
    opt.zero_grad(set_to_none=True)
    loss = _forward_loss(model, X, y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    scaler.update()
    return loss.detach()


def _no_clip(model, opt, scaler, X, y, max_norm=LOOP_MAX_NORM):
    opt.zero_grad(set_to_none=True)
    loss = _forward_loss(model, X, y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.detach()


@functools.lru_cache(maxsize=8)
def _known_trajectory(step_fn):
    """The right step's and the known mistakes' runs: computed once per session."""
    return _trajectory(step_fn)


def _trajectory(step_fn):
    """[(scale, parameters)] after each step, or ('error', step, text), or ('nothing', step)."""
    model, opt, scaler, batches = _loop_setup()
    out = []
    for i, (X, y) in enumerate(batches):
        try:
            step_fn(model, opt, scaler, X, y, LOOP_MAX_NORM)
        except NotImplementedError:
            return ("nothing", i, "")
        except Exception as e:  # the learner's code: reported, never raised
            return ("error", i, f"{type(e).__name__}: {e}")
        if scaler.scale_calls == 0:
            return ("nothing", i, "")
        out.append((scaler.get_scale(), [p.detach().clone() for p in model.parameters()]))
    return out


def _same_trajectory(a, b) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a == b
    return all(_same_step(sa, pa, sb, pb) for (sa, pa), (sb, pb) in zip(a, b, strict=True))


def _same_step(sa, pa, sb, pb) -> bool:
    # NaN weights (a step taken on inf/NaN gradients) count as the same where both have them
    return sa == sb and all(
        torch.allclose(p, q, rtol=0.0, atol=0.0, equal_nan=True) for p, q in zip(pa, pb, strict=True)
    )


_CLIP_FIRST_HINT = "clip_grad_norm_ reads the gradients while they are still multiplied by the scale: make them the true gradients first"
_PLAIN_STEP_HINT = (
    "opt.step() steps even when a gradient is inf or NaN: let the scaler decide whether to step"
)
_NO_UPDATE_HINT = "the scale never changes: without scaler.update() it can neither back off nor grow"
_NO_CLIP_HINT = "keep the clipping: the fixed step still clips the gradient norm to max_norm"
_TWICE_RAISES_HINT = (
    "unscale_ may run once per step, before clipping; scaler.step(opt) then does not unscale again"
)

_KNOWN_LOOP_MISTAKES = (
    (_clip_first, _CLIP_FIRST_HINT),
    (_plain_opt_step, _PLAIN_STEP_HINT),
    (_no_clip, _NO_CLIP_HINT),
)


@exercise(
    4,
    "Fix a broken training step",
    mistakes=[
        Mistake("clipping before unscale_", _CLIP_FIRST_HINT),
        Mistake("opt.step() instead of scaler.step(opt)", _PLAIN_STEP_HINT),
        Mistake("forgetting scaler.update()", _NO_UPDATE_HINT),
        Mistake("dropping the clipping", _NO_CLIP_HINT),
        Mistake("unscale_ twice", _TWICE_RAISES_HINT),
    ],
)
def ex4(answer, *, show: bool = True) -> CheckResult:
    """``fixed_step(model, opt, scaler, X, y, max_norm)``: broken_step with its bug fixed, run for a few
    steps with a GradScaler (one batch overflows FP16) beside the right step: same scale, same weights."""
    if _is_placeholder(answer):
        return _finish(
            "unanswered",
            "no answer yet: write `fixed_step` above and run this cell again.",
            show=show,
            details={"answered": False},
        )
    if not callable(answer):
        return _finish("wrong", f"`fixed_step` is a {type(answer).__name__}, not a function.", show=show)
    want = _known_trajectory(_good_step)
    got = _trajectory(answer)
    if isinstance(got, tuple) and got[0] == "nothing" and got[1] == 0:
        return _finish(
            "unanswered",
            "fixed_step does not train yet (it never calls scaler.scale): fill in the TODO "
            "and run this cell again.",
            show=show,
            details={"answered": False},
        )
    if _same_trajectory(got, want):
        fell = want[LOOP_OVERFLOW_STEP][0] < want[LOOP_OVERFLOW_STEP - 1][0]
        return _finish(
            "exact",
            f"fixed_step trains exactly as the right step does: the same scale and the same "
            f"weights, bit for bit, after each of {LOOP_STEPS} steps (step {LOOP_OVERFLOW_STEP}'s batch "
            f"overflows FP16{' and is skipped' if fell else ''}).",
            show=show,
        )
    if isinstance(got, tuple):
        if got[0] == "error":
            if "unscale_() has already been called" in got[2]:
                hint = _TWICE_RAISES_HINT
            elif "after step()" in got[2]:  # GradScaler's words when the last step's update() is missing
                hint = _NO_UPDATE_HINT
            else:
                hint = "read the error: the step must run scale, backward, unscale_, clip, step, update"
            return _finish(
                "wrong", f"fixed_step raised at step {got[1]}: {got[2]}", [f"hint: {hint}"], show=show
            )
        return _finish(
            "wrong",
            f"fixed_step stopped training at step {got[1]} (it never called scaler.scale).",
            ["hint: every step scales the loss, steps and updates the scaler"],
            show=show,
        )
    hint = next(
        (h for fn, h in _KNOWN_LOOP_MISTAKES if _same_trajectory(got, _known_trajectory(fn))),
        "compare your step line by line with the modern loop of section 6",
    )
    first = next(
        i
        for i, ((sa, pa), (sb, pb)) in enumerate(zip(got, want, strict=True))
        if not _same_step(sa, pa, sb, pb)
    )
    what = "the scale" if got[first][0] != want[first][0] else "the weights"
    return _finish(
        "wrong",
        f"fixed_step differs from the right step at step {first}: {what} differ.",
        [f"hint: {hint}"],
        show=show,
    )
