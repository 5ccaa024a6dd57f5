"""Notebook 04's exercises and the comparison they run: a scaler beside torch.amp.GradScaler.

The solution classes (as in the solutions notebook) pass; the skeletons are "not attempted"; each
deliberately broken scaler is caught at the right first step, with the hint for its mistake.
"""

from __future__ import annotations

import math

import pytest
import torch
from exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check

from amp_lab.exercises import nb04
from amp_lab.scaling import DynamicLossScaler, StaticLossScaler, compare_with_grad_scaler

# --------------------------------------------------------------------------------------------
# The solutions (the same classes as notebooks/solutions/04_loss_scaling_from_scratch_solutions.ipynb)
# --------------------------------------------------------------------------------------------


class MyStaticScaler:
    def __init__(self, scale):
        self.s = torch.tensor(scale, dtype=torch.float32)

    def scale(self, loss):
        return loss * self.s

    def unscale_(self, opt):
        inv = (1 / self.s.double()).float()
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(inv)

    def step(self, opt):
        opt.step()

    def update(self):
        pass

    def get_scale(self):
        return self.s.item()


class MyDynamicScaler:
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.s = torch.tensor(init_scale, dtype=torch.float32)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.tracker = 0
        self.found_inf = False

    def scale(self, loss):
        return loss * self.s

    def unscale_(self, opt):
        inv = (1 / self.s.double()).float()
        self.found_inf = False
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    if not torch.isfinite(p.grad).all():
                        self.found_inf = True
                    p.grad.mul_(inv)

    def step(self, opt):
        if not self.found_inf:
            opt.step()

    def backoff(self):
        self.s = (self.s.double() * self.backoff_factor).float()
        self.tracker = 0

    def grow(self):
        grown = (self.s.double() * self.growth_factor).float()
        if torch.isfinite(grown):
            self.s = grown
        self.tracker = 0

    def update(self):
        if self.found_inf:
            self.backoff()
        else:
            self.tracker += 1
            if self.tracker == self.growth_interval:
                self.grow()
        self.found_inf = False

    def get_scale(self):
        return self.s.item()


# --------------------------------------------------------------------------------------------
# The skeletons of the stored notebook, and broken scalers
# --------------------------------------------------------------------------------------------


class StaticSkeleton:
    def __init__(self, scale): ...
    def scale(self, loss): ...
    def unscale_(self, opt): ...
    def step(self, opt): ...
    def update(self): ...
    def get_scale(self): ...


class DynamicSkeleton:
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000): ...
    def scale(self, loss): ...
    def unscale_(self, opt): ...
    def step(self, opt): ...
    def update(self): ...
    def get_scale(self): ...


class NotYetWritten(DynamicSkeleton):
    def scale(self, loss):
        raise NotImplementedError


class NoUnscale(MyStaticScaler):
    def unscale_(self, opt):
        pass


class UnscaleTwice(MyStaticScaler):
    def step(self, opt):  # divides again although unscale_ already did
        self.unscale_(opt)
        opt.step()


class MultiplyInstead(MyStaticScaler):
    def unscale_(self, opt):
        for group in opt.param_groups:
            for p in group["params"]:
                p.grad.mul_(self.s)


class NeverSteps(MyStaticScaler):
    def step(self, opt):
        pass


class Float64Static(MyStaticScaler):
    def __init__(self, scale):
        super().__init__(scale)
        self.s = float(scale)

    def unscale_(self, opt):
        for group in opt.param_groups:
            for p in group["params"]:
                p.grad.div_(self.s)

    def get_scale(self):
        return self.s


class NoResetAfterSkip(MyDynamicScaler):
    def backoff(self):
        self.s = (self.s.double() * self.backoff_factor).float()  # the count of clean steps is kept


class NoResetAfterGrowth(MyDynamicScaler):
    def grow(self):
        grown = (self.s.double() * self.growth_factor).float()
        if torch.isfinite(grown):
            self.s = grown  # the count is not reset: with ==, the scale never grows again


class Float64Dynamic(MyDynamicScaler):
    """The scale kept as a Python float: exact powers of two agree, 1000.1 and 2**128 do not."""

    def __init__(self, init_scale=2.0**16, *args):
        super().__init__(init_scale, *args)
        self.s = float(init_scale)

    def unscale_(self, opt):
        self.found_inf = False
        for group in opt.param_groups:
            for p in group["params"]:
                if not torch.isfinite(p.grad).all():
                    self.found_inf = True
                p.grad.div_(self.s)

    def backoff(self):
        self.s *= self.backoff_factor
        self.tracker = 0

    def grow(self):
        if math.isfinite(self.s * self.growth_factor):
            self.s *= self.growth_factor
        self.tracker = 0

    def get_scale(self):
        return self.s


class GrowsIntoInf(MyDynamicScaler):
    def grow(self):
        self.s = (self.s.double() * self.growth_factor).float()  # no check: 2**127 * 2 is inf
        self.tracker = 0


class StepsOnInf(MyDynamicScaler):
    def step(self, opt):
        opt.step()


class UpdateRaises(MyDynamicScaler):
    def update(self):
        raise KeyError("tracker")


# --------------------------------------------------------------------------------------------
# compare_with_grad_scaler
# --------------------------------------------------------------------------------------------

SKIP_AT_2 = ["clean", "clean", "inf"] + ["clean"] * 7


def _compare(cls, schedule, **kw):
    args = (kw.get("init_scale", 2.0**16), kw.get("growth_factor", 2.0), kw.get("backoff_factor", 0.5),
            kw.get("growth_interval", 2000))
    return compare_with_grad_scaler(lambda: cls(*args), schedule, device="cpu", **kw)


@pytest.mark.parametrize(
    ("schedule", "kw"),
    [
        (SKIP_AT_2, {"init_scale": 2.0**10, "growth_interval": 3}),
        (["clean", "nan", "inf", "nan"] + ["clean"] * 5, {"init_scale": 2.0**12, "growth_interval": 2}),
        (["clean"] * 3 + ["inf"] + ["clean"] * 3, {"init_scale": 2.0**126, "growth_interval": 1}),
        (["clean"] * 3 + ["inf", "inf"] + ["clean"] * 4,
         {"init_scale": 1000.1, "backoff_factor": 0.3, "growth_factor": 3.0, "growth_interval": 2}),
    ],
)
def test_the_package_scaler_and_the_solution_are_grad_scaler_step_by_step(schedule, kw):
    for make in (lambda: DynamicLossScaler(**kw),
                 lambda: MyDynamicScaler(kw.get("init_scale"), kw.get("growth_factor", 2.0),
                                         kw.get("backoff_factor", 0.5), kw.get("growth_interval"))):
        found = compare_with_grad_scaler(make, schedule, device="cpu", **kw)
        assert found.same, found.describe()
        assert found.step is None and found.steps == len(schedule) and len(found.scales) == len(schedule)
    assert list(found.skipped) == [i for i, f in enumerate(schedule) if f != "clean"]


def test_a_static_scaler_matches_a_grad_scaler_that_never_changes_its_scale():
    found = compare_with_grad_scaler(lambda: StaticLossScaler(2.0**10), ["clean"] * 6, init_scale=2.0**10,
                                     growth_interval=100, device="cpu")
    assert found.same and set(found.scales) == {2.0**10}
    # ...but it steps where GradScaler skips: caught at the first inf
    found = compare_with_grad_scaler(lambda: StaticLossScaler(2.0**10), SKIP_AT_2, init_scale=2.0**10,
                                     growth_interval=100, device="cpu")
    assert (found.same, found.step, found.what, found.mine, found.theirs) == (False, 2, "skipped", False, True)
    assert "step 2 (gradients inf): skipped: yours stepped, GradScaler's skipped" in found.describe()


@pytest.mark.parametrize(
    ("cls", "schedule", "kw", "step", "what"),
    [
        (NoResetAfterSkip, SKIP_AT_2, {"init_scale": 2.0**10, "growth_interval": 3}, 3, "scale"),
        (NoResetAfterGrowth, ["clean"] * 8, {"init_scale": 2.0**10, "growth_interval": 3}, 5, "scale"),
        (GrowsIntoInf, ["clean"] * 4, {"init_scale": 2.0**126, "growth_interval": 1}, 1, "scale"),
        (Float64Dynamic, ["clean"] * 4, {"init_scale": 2.0**126, "growth_interval": 1}, 1, "scale"),
        (Float64Dynamic, ["clean"] * 4, {"init_scale": 1000.1, "growth_interval": 2}, 0, "scale"),
        (StepsOnInf, SKIP_AT_2, {"init_scale": 2.0**10, "growth_interval": 3}, 2, "skipped"),
        (NoUnscale, ["clean"] * 3, {"init_scale": 2.0**10}, 0, "parameters"),
        (UpdateRaises, ["clean"] * 3, {"init_scale": 2.0**10}, 0, "error"),
    ],
)
def test_a_broken_scaler_is_caught_at_its_first_differing_step(cls, schedule, kw, step, what):
    if cls is NoUnscale:
        found = compare_with_grad_scaler(lambda: cls(kw["init_scale"]), schedule, device="cpu", **kw)
    else:
        found = _compare(cls, schedule, **kw)
    assert not found.same
    assert (found.step, found.what) == (step, what), found.describe()
    assert f"step {step}" in found.describe()
    if cls is GrowsIntoInf:
        assert found.mine == math.inf and found.theirs == 2.0**127
    if cls is UpdateRaises:
        assert found.call == "update()" and "KeyError" in found.mine


def test_compare_refuses_bad_arguments_naming_them():
    ok = lambda: DynamicLossScaler()  # noqa: E731
    with pytest.raises(TypeError, match="make_scaler"):
        compare_with_grad_scaler(3, ["clean"])
    with pytest.raises(TypeError, match="schedule"):
        compare_with_grad_scaler(ok, "clean")
    with pytest.raises(ValueError, match=r"schedule\[1\]"):
        compare_with_grad_scaler(ok, ["clean", "overflow"])
    with pytest.raises(ValueError, match="schedule"):
        compare_with_grad_scaler(ok, [])
    with pytest.raises(ValueError, match="init_scale"):
        compare_with_grad_scaler(ok, ["clean"], init_scale=0.0)
    with pytest.raises(ValueError, match="growth_interval"):
        compare_with_grad_scaler(ok, ["clean"], growth_interval=0)
    with pytest.raises(ValueError, match="backoff_factor"):
        compare_with_grad_scaler(ok, ["clean"], backoff_factor=1.5)
    with pytest.raises(ValueError, match="rtol"):
        compare_with_grad_scaler(ok, ["clean"], rtol=-1.0)


def test_a_constructor_that_raises_or_a_factory_that_returns_none_is_a_difference_not_an_error():
    found = compare_with_grad_scaler(lambda: None, ["clean"], device="cpu")
    assert (found.same, found.what, found.call) == (False, "error", "make_scaler()")
    found = compare_with_grad_scaler(lambda: 1 / 0, ["clean"], device="cpu")
    assert found.what == "error" and "ZeroDivisionError" in found.mine


# --------------------------------------------------------------------------------------------
# The exercises
# --------------------------------------------------------------------------------------------


def test_ex1_the_solution_passes_the_skeleton_is_not_attempted():
    assert assert_passes(nb04.ex1, MyStaticScaler).verdict == "exact"
    assert_not_attempted(nb04.ex1, None)
    assert_not_attempted(nb04.ex1, ...)
    assert_not_attempted(nb04.ex1, StaticSkeleton)


def test_ex1_common_mistakes():
    feed_mistake(nb04.ex1, "forgetting to unscale", NoUnscale)
    feed_mistake(nb04.ex1, "unscaling twice", UnscaleTwice)
    feed_mistake(nb04.ex1, "multiplying instead of dividing", MultiplyInstead)
    feed_mistake(nb04.ex1, "not stepping", NeverSteps)


def test_ex1_an_instance_instead_of_the_class_is_not_yet_with_a_reason():
    result = run_check(nb04.ex1, MyStaticScaler(2.0**10))
    assert result.status == "not yet" and "not a class" in result.message


def test_ex1_a_float64_static_scale_passes_on_power_of_two_scales():
    # powers of two are exact in float32 and float64: the static exercise does not demand float32
    assert_passes(nb04.ex1, Float64Static)


def test_ex2_the_solution_passes_the_skeleton_is_not_attempted():
    result = assert_passes(nb04.ex2, MyDynamicScaler)
    assert result.verdict == "exact"
    assert_not_attempted(nb04.ex2, None)
    assert_not_attempted(nb04.ex2, DynamicSkeleton)
    assert_not_attempted(nb04.ex2, NotYetWritten)


def _first_difference(r):
    found = r.details["comparison"]
    return r.details["schedule"], found.step, found.what, found.mine, found.theirs


def test_ex2_common_mistakes_each_reported_at_its_first_step():
    r = feed_mistake(nb04.ex2, "forgetting to reset the growth tracker after a skip", NoResetAfterSkip)
    assert _first_difference(r) == ("an inf gradient at step 2", 3, "scale", 2.0**10, 2.0**9)
    r = feed_mistake(nb04.ex2, "forgetting to reset the growth tracker after a growth", NoResetAfterGrowth)
    assert _first_difference(r) == ("clean steps: growth every 3", 5, "scale", 2.0**11, 2.0**12)
    top = "growth up against float32's max"
    r = feed_mistake(nb04.ex2, "scale kept as a Python float64", Float64Dynamic)
    assert _first_difference(r) == (top, 1, "scale", 2.0**128, 2.0**127)
    r = feed_mistake(nb04.ex2, "growing when the doubled scale overflows", GrowsIntoInf)
    assert _first_difference(r) == (top, 1, "scale", math.inf, 2.0**127)
    r = feed_mistake(nb04.ex2, "stepping on an inf gradient", StepsOnInf)
    assert _first_difference(r) == ("an inf gradient at step 2", 2, "skipped", False, True)


def test_ex2_an_error_in_the_learners_code_is_reported_not_raised():
    result = run_check(nb04.ex2, UpdateRaises)
    found = result.details["comparison"]
    assert result.status == "not yet" and found.call == "update()" and found.mine.startswith("raised KeyError")


def test_ex2_the_hints_never_state_the_schedule_answers():
    for cls in (NoResetAfterSkip, NoResetAfterGrowth, Float64Dynamic, GrowsIntoInf, StepsOnInf):
        hint = run_check(nb04.ex2, cls).details["hint"]
        assert "2**" not in hint and "1000.0999" not in hint


def test_ex3():
    assert_passes(nb04.ex3, 2.0**127)
    assert_not_attempted(nb04.ex3, None)
    feed_mistake(nb04.ex3, "2**128", 2.0**128)
    feed_mistake(nb04.ex3, "2**128", 2**128)
    feed_mistake(nb04.ex3, "inf", math.inf)
    assert run_check(nb04.ex3, 2.0**126).status == "not yet"
    assert run_check(nb04.ex3, "2**127").status == "not yet"


@pytest.mark.parametrize("ex", [nb04.ex1, nb04.ex2, nb04.ex3])
def test_show_must_be_a_bool(ex):
    with pytest.raises(TypeError, match="show"):
        ex.check(None, show="yes")


# --------------------------------------------------------------------------------------------
# Exercise 4: the broken training step
# --------------------------------------------------------------------------------------------


def _forward(model, X, y):
    with torch.autocast(X.device.type, dtype=torch.float16):
        logits = model(X)
    return torch.nn.functional.cross_entropy(logits.float(), y)


def fixed_step(model, opt, scaler, X, y, max_norm=0.1):
    opt.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, X, y)).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt)
    scaler.update()


def broken_step(model, opt, scaler, X, y, max_norm=0.1):  # the notebook's: clips the scaled gradients
    opt.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, X, y)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()


def plain_opt_step(model, opt, scaler, X, y, max_norm=0.1):
    opt.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, X, y)).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    scaler.update()


def no_update(model, opt, scaler, X, y, max_norm=0.1):
    opt.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, X, y)).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(opt)


def no_clip(model, opt, scaler, X, y, max_norm=0.1):
    opt.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, X, y)).backward()
    scaler.step(opt)
    scaler.update()


def unscale_twice(model, opt, scaler, X, y, max_norm=0.1):
    opt.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, X, y)).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()


def fixed_step_skeleton(model, opt, scaler, X, y, max_norm=0.1): ...


def test_ex4_the_fix_passes_the_skeleton_is_not_attempted():
    result = assert_passes(nb04.ex4, fixed_step)
    assert "is skipped" in result.message  # the overflowing batch really was skipped
    assert_not_attempted(nb04.ex4, None)
    assert_not_attempted(nb04.ex4, fixed_step_skeleton)


def test_ex4_common_mistakes():
    r = feed_mistake(nb04.ex4, "clipping before unscale_", broken_step)
    assert "step 0" in r.message
    r = feed_mistake(nb04.ex4, "opt.step() instead of scaler.step(opt)", plain_opt_step)
    assert f"step {nb04.LOOP_OVERFLOW_STEP}" in r.message
    feed_mistake(nb04.ex4, "forgetting scaler.update()", no_update)
    feed_mistake(nb04.ex4, "dropping the clipping", no_clip)
    feed_mistake(nb04.ex4, "unscale_ twice", unscale_twice)
    assert run_check(nb04.ex4, "fixed_step").status == "not yet"
