"""Exercises of notebook 04 (loss scaling from scratch): every expected value comes from GradScaler, run here;
the learner's scalers run beside it (:func:`amp_lab.scaling.compare_with_grad_scaler`), the first difference names the mistake."""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import torch

from ..check import check_value
from ..check_base import CheckResult, finish, is_placeholder
from ..scaling import ScalerComparison, compare_with_grad_scaler, show_value, to_float32
from . import exercise, finite_float, wrong

# parameters are compared bit for bit, then within PARAM_RTOL: dividing by S where GradScaler multiplies by 1/S
PARAM_RTOL = 1e-6  # differs in the last bit unless S is a power of two
CLEAN = ("clean",)


class Schedule(NamedTuple):  # a fault schedule and the GradScaler settings it runs with
    name: str
    faults: tuple
    init_scale: float
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000


# Exercise 1: no faults, and a growth interval beyond the schedule, so GradScaler's scale stays put.
STATIC_SCHEDULES = (
    Schedule("a static scale of 2**10", CLEAN * 6, 2.0**10, growth_interval=1000),
    Schedule("a static scale of 2**-3", CLEAN * 4, 2.0**-3, growth_interval=1000),
)
DYNAMIC_SCHEDULES = (
    Schedule("clean steps: growth every 3", CLEAN * 8, 2.0**10, growth_interval=3),
    Schedule("an inf gradient at step 2", CLEAN * 2 + ("inf",) + CLEAN * 7, 2.0**10, growth_interval=3),
    Schedule(
        "two skips in a row (NaN, then inf)", ("clean", "nan", "inf") + CLEAN * 5, 2.0**12, growth_interval=2
    ),
    Schedule(
        "growth up against float32's max", CLEAN * 3 + ("inf",) + CLEAN * 3, 2.0**126, growth_interval=1
    ),
    Schedule(
        "a scale float32 must round (init_scale=1000.1, backoff_factor=0.3)",
        CLEAN * 3 + ("inf", "inf") + CLEAN * 4,
        1000.1,
        backoff_factor=0.3,
        growth_interval=2,
    ),
)
_CALLS_HINT = "the check calls scale, unscale_, step, update and get_scale as a training loop does"


def _judge(answer, name: str, schedules, make, hint_for, show: bool) -> CheckResult:
    """The learner's class beside GradScaler on every schedule: passed, not written yet, or the first difference."""
    if is_placeholder(answer):
        text = f"no answer yet: write the class `{name}` above and run this cell again."
        return finish("unanswered", text, show=show)
    if not callable(answer):
        text = f"`{name}` is a {type(answer).__name__}, not a class: pass the class itself."
        return finish("wrong", text, show=show)
    name = getattr(answer, "__name__", name)
    verdict, steps = "exact", 0
    for sched in schedules:
        settings = {k: v for k, v in sched._asdict().items() if k not in ("name", "faults")}
        settings["device"] = "cpu"  # tiny and deterministic; GradScaler's rules are the same on every device
        for rtol in (0.0, PARAM_RTOL):
            found = compare_with_grad_scaler(
                functools.partial(make, sched), list(sched.faults), rtol=rtol, **settings
            )
            if found.same:
                break
        if not found.same:
            break
        verdict = "exact" if verdict == "exact" and rtol == 0 else "close"
        steps += found.steps
    else:
        exactly = (
            "bit for bit" if verdict == "exact" else f"within a relative {PARAM_RTOL:g} on the parameters"
        )
        text = f"{name} matches torch.amp.GradScaler on all {len(schedules)} schedules ({steps} steps), {exactly}: "
        text += "the same scaled loss, skipped steps, scale and parameters at every step (first difference: none)."
        return finish(verdict, text, show=show, details={"steps": steps})
    text = str(found.mine)
    if found.what == "error" and found.step == 0 and found.call in ("the constructor", "scale()"):
        if "returned None" in text or "not written yet" in text:
            text = f"{name} is not written yet: its {found.call} {text}. Fill in the TODOs and run this cell again."
            return finish("unanswered", text, show=show)
    hint, scales = hint_for(sched, found), ", ".join(map(show_value, found.scales)) or "(none)"
    notes = [found.describe(), f"GradScaler's scale after each update so far: {scales}", f"hint: {hint}"]
    head = f'{name} differs from torch.amp.GradScaler on the schedule "{sched.name}".'
    details = {"schedule": sched.name, "comparison": found, "hint": hint}
    return finish("wrong", head, notes, show=show, details=details)


def _gradient_ratio(answer, scale: float) -> float | None:
    """What the learner's scaler hands the optimizer, as a multiple of the true gradient (None: unknown)."""
    try:
        w = torch.nn.Parameter(torch.ones(1))  # the true gradient of w.sum() is 1
        opt, seen = torch.optim.SGD([w], lr=0.0), []
        opt.register_step_pre_hook(lambda o, *_: seen.append(w.grad.item()))
        scaler = answer(scale)
        scaler.scale(w.sum()).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        return seen[0] if seen else None
    except Exception:  # the learner's code: no diagnosis, the comparison reports it
        return None


def _static_hint(answer, sched: Schedule, found: ScalerComparison) -> str:
    if found.what == "parameters":
        S, ratio = sched.init_scale, _gradient_ratio(answer, sched.init_scale)
        return ex1.hint(
            "the optimizer must see the true gradients: divided by S once, in unscale_, before opt.step()",
            *(ratio is not None and math.isclose(ratio, t, rel_tol=1e-3) for t in (S, 1 / S, S * S)),
        )
    return {
        "scaled loss": "scale(loss) returns the loss multiplied by S: backward() of it gives S times every gradient",
        "skipped": ex1.mistake("not stepping").hint + ": step(opt) calls opt.step()",
        "scale": "get_scale() returns S, the scale the scaler was built with (a static scale never changes)",
    }.get(found.what, f"fix your class's {found.call} first: {_CALLS_HINT}")


_EX1 = {
    "forgetting to unscale": "the optimizer saw gradients still multiplied by S: unscale_ must divide every parameter's .grad by S, in place",
    "unscaling twice": "the optimizer saw gradients divided by S twice: unscale_ has already divided them, so step must not divide again",
    "multiplying instead of dividing": "the optimizer saw gradients multiplied by S twice: unscaling divides by S (or multiplies by 1/S)",
    "not stepping": "a static scaler always steps",
}


@exercise(1, "Write the static loss scaler", mistakes=_EX1)
def ex1(answer, *, show: bool = True) -> CheckResult:
    """``MyStaticScaler`` beside GradScaler on fault-free schedules whose GradScaler scale never changes."""
    hint_for = functools.partial(_static_hint, answer)
    return _judge(answer, "MyStaticScaler", STATIC_SCHEDULES, lambda s: answer(s.init_scale), hint_for, show)


def _dynamic_hint(sched: Schedule, found: ScalerComparison) -> str:
    mine, theirs = found.mine, found.theirs
    if found.what == "skipped" and found.fault != "clean":
        return ex2.mistake("stepping on an inf gradient").hint
    if found.what != "scale":
        return {
            "scaled loss": "scale(loss) returns the loss multiplied by the current scale",
            "skipped": "a clean step must step: look for inf/NaN afresh in every unscale_ (forget the last iteration's finding)",
            "parameters": "unscale_ divides every gradient by the current scale, once, before opt.step()",
        }.get(found.what, f"fix your class's {found.call} first: {_CALLS_HINT}")
    if mine == math.inf:
        return ex2.mistake("growing when the doubled scale overflows").hint
    if math.isfinite(mine) and to_float32(mine) != mine:
        return ex2.mistake("scale kept as a Python float64").hint
    if found.fault != "clean":
        return "after a step with an inf or NaN gradient, update() multiplies the scale by backoff_factor"
    if (
        mine > 0
        and theirs > 0
        and any(math.isclose(r, sched.growth_factor) for r in (mine / theirs, theirs / mine))
    ):
        if found.skipped or any(s != sched.init_scale for s in found.scales[:-1]):
            return ex2.mistakes[0].hint  # the count goes back to 0 after a skip and after a growth
        return "after growth_interval clean steps in a row (not fewer, not more), update() multiplies the scale by growth_factor"
    return "get_scale() returns the current scale, a number: it starts at init_scale and changes only by backoff_factor (after an inf/NaN) or by growth_factor (after growth_interval clean steps)"


_EX2 = {
    "forgetting to reset the growth tracker after a skip": "count the clean steps since the scale last changed: the count goes back to 0 after a skipped step and after a growth",
    "forgetting to reset the growth tracker after a growth": "the count goes back to 0 after a skipped step and after a growth",
    "scale kept as a Python float64": "GradScaler keeps its scale in a float32 tensor, not in a Python float (a float64): round every scale you store to float32",
    "growing when the doubled scale overflows": "a growth whose result overflows float32 to inf is no growth: keep the old scale (GradScaler never stores an inf scale)",
    "stepping on an inf gradient": "when unscale_ finds an inf or NaN in the gradients, step(opt) must not call opt.step()",
}


@exercise(2, "Write the dynamic loss scaler", mistakes=_EX2)
def ex2(answer, *, show: bool = True) -> CheckResult:
    """``MyDynamicScaler`` beside GradScaler on fault schedules: the first step where they differ."""
    make = lambda s: answer(s.init_scale, s.growth_factor, s.backoff_factor, s.growth_interval)  # noqa: E731
    return _judge(answer, "MyDynamicScaler", DYNAMIC_SCHEDULES, make, _dynamic_hint, show)


_EX3 = {
    "2**128": "2**128 is beyond float32's largest value: a float32 cannot hold it",
    "inf": "an inf scale would make every scaled loss inf: GradScaler refuses such a growth",
}


@exercise(3, "Growth at the top of float32", mistakes=_EX3)
def ex3(answer, *, show: bool = True) -> CheckResult:
    """GradScaler's scale after one clean update from ``init_scale=2.0**127`` with ``growth_interval=1``."""
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127, growth_interval=1)
    probe = torch.nn.Linear(2, 1)
    scaler.scale(probe(torch.ones(1, 2)).sum() * 2.0**-100).backward()  # tiny: no natural overflow
    scaler.step(torch.optim.SGD(probe.parameters(), lr=0.0))
    scaler.update()
    if finite_float(answer) == 2.0**128:
        head = (
            "`answer` = 2**128 fits a Python float (a float64), but GradScaler keeps its scale in a float32."
        )
        hint = f"{ex3.mistakes[0].hint}; what does it do with a growth it cannot store?"
        return wrong(head, hint, show=show)
    if isinstance(answer, float) and answer == math.inf:
        head = "`answer` = inf is not a scale GradScaler would keep."
        return wrong(head, f"{ex3.mistakes[1].hint}: what does it keep instead?", show=show)
    hint = "double the scale in float32: is the result a number GradScaler can use as a scale?"
    return check_value(answer, scaler.get_scale(), dtype=torch.float32, name="answer", hint=hint, show=show)


# Exercise 4: a broken training step, diagnosed and fixed

LOOP_STEPS = 6  # steps of the tiny run each training step is checked on
LOOP_OVERFLOW_STEP = 2  # this step's batch overflows FP16 in the forward pass: GradScaler must skip it
LOOP_MAX_NORM = 0.1  # clipping is active at every step


def _step(model, opt, scaler, X, y, max_norm=LOOP_MAX_NORM, *, clip="after", scaler_steps=True):
    """The right step (``clip="after"`` unscale_) or a known mistake: clip before, no clip, ``opt.step()``."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast(X.device.type, dtype=torch.float16):
        logits = model(X)
    scaler.scale(torch.nn.functional.cross_entropy(logits.float(), y)).backward()
    if clip == "before":
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if clip is not None:
        scaler.unscale_(opt)
    if clip == "after":
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt) if scaler_steps else opt.step()
    scaler.update()


@functools.lru_cache(maxsize=8)
def _trajectory(step_fn):
    """[(scale, parameters)] after each step, or ('error', step, text), or ('nothing', step)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        batches = [(torch.randn(32, 8), torch.randint(0, 4, (32,))) for _ in range(LOOP_STEPS)]
    X, y = batches[LOOP_OVERFLOW_STEP]
    batches[LOOP_OVERFLOW_STEP] = (X * 1e6, y)  # an FP16 forward pass overflows to inf: the loss is inf/NaN
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler, calls = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=2), []
    scale = scaler.scale
    scaler.scale = lambda outputs: calls.append(1) or scale(outputs)  # counted: 0 means the step did nothing
    out = []
    for i, (X, y) in enumerate(batches):
        try:
            step_fn(model, opt, scaler, X, y, LOOP_MAX_NORM)
        except NotImplementedError:
            return ("nothing", i)
        except Exception as e:  # the learner's code: reported, never raised
            return ("error", i, f"{type(e).__name__}: {e}")
        if not calls:
            return ("nothing", i)
        out.append((scaler.get_scale(), [p.detach().clone() for p in model.parameters()]))
    return out


def _same_step(a, b) -> bool:
    # NaN weights (a step taken on inf/NaN gradients) count as the same where both have them
    same = (torch.allclose(p, q, rtol=0, atol=0, equal_nan=True) for p, q in zip(a[1], b[1], strict=True))
    return a[0] == b[0] and all(same)


_KNOWN_LOOP_MISTAKES = (  # in the order of ex4's first three mistakes
    functools.partial(_step, clip="before"),
    functools.partial(_step, scaler_steps=False),
    functools.partial(_step, clip=None),
)


_EX4 = {
    "clipping before unscale_": "clip_grad_norm_ reads the gradients while they are still multiplied by the scale: make them the true gradients first",
    "opt.step() instead of scaler.step(opt)": "opt.step() steps even when a gradient is inf or NaN: let the scaler decide whether to step",
    "dropping the clipping": "keep the clipping: the fixed step still clips the gradient norm to max_norm",
    "forgetting scaler.update()": "the scale never changes: without scaler.update() it can neither back off nor grow",
    "unscale_ twice": "unscale_ may run once per step, before clipping; scaler.step(opt) then does not unscale again",
}


@exercise(4, "Fix a broken training step", mistakes=_EX4)
def ex4(answer, *, show: bool = True) -> CheckResult:
    """``fixed_step(model, opt, scaler, X, y, max_norm)``: broken_step with its bug fixed, run for a few
    steps with a GradScaler (one batch overflows FP16) beside the right step: same scale, same weights."""
    if is_placeholder(answer):
        return finish(
            "unanswered", "no answer yet: write `fixed_step` above and run this cell again.", show=show
        )
    if not callable(answer):
        return finish("wrong", f"`fixed_step` is a {type(answer).__name__}, not a function.", show=show)
    want, got = _trajectory(_step), _trajectory.__wrapped__(answer)
    if got == ("nothing", 0):
        text = "fixed_step does not train yet (it never calls scaler.scale): fill in the TODO and run this cell again."
        return finish("unanswered", text, show=show)
    if isinstance(got, tuple):
        if got[0] == "nothing":
            head = f"fixed_step stopped training at step {got[1]} (it never called scaler.scale)."
            return wrong(head, "every step scales the loss, steps and updates the scaler", show=show)
        hint = "read the error: the step must run scale, backward, unscale_, clip, step, update"
        if "unscale_() has already been called" in got[2]:
            hint = ex4.mistake("unscale_ twice").hint
        elif "after step()" in got[2]:  # GradScaler's words when the last step's update() is missing
            hint = ex4.mistake("forgetting scaler.update()").hint
        return wrong(f"fixed_step raised at step {got[1]}: {got[2]}", hint, show=show)
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if not _same_step(a, b)), None)
    if first is None:
        fell = want[LOOP_OVERFLOW_STEP][0] < want[LOOP_OVERFLOW_STEP - 1][0]
        text = "fixed_step trains exactly as the right step does: the same scale and the same weights, bit for bit, "
        text += f"after each of {LOOP_STEPS} steps (step {LOOP_OVERFLOW_STEP}'s batch overflows FP16"
        return finish("exact", text + f"{' and is skipped' if fell else ''}).", show=show)
    hint = ex4.hint(
        "compare your step line by line with the modern loop of section 6",
        *(all(map(_same_step, got, _trajectory(fn))) for fn in _KNOWN_LOOP_MISTAKES),
    )
    what = "the scale" if got[first][0] != want[first][0] else "the weights"
    return wrong(f"fixed_step differs from the right step at step {first}: {what} differ.", hint, show=show)
