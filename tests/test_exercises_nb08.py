"""Notebook 08's exercises: the learner's FP8 scale, cast and delayed-scaling rule beside the package's.

The solutions (as in the solutions notebook) pass; the skeletons are "not attempted"; every common
wrong answer the module declares is written here as the code a learner would write, and is caught
with its hint; measurements no answer can meet raise ValueError naming them.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import fp8, fp8_explorer, mx
from amp_lab.exercises import nb08

E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max

# --------------------------------------------------------------------------------------------
# Exercise 1: the solutions and the mistakes
# --------------------------------------------------------------------------------------------


def my_tensorwise_scale(x):
    amax = x.abs().max().to(torch.float64)
    return (E4M3_MAX / torch.clamp(amax, min=1e-12)).to(torch.float32)


def my_quantize(x, scale):
    return (x.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def scale_in_float32(x):  # divides in float32: at most one float32 ulp away, still a pass
    return torch.tensor(E4M3_MAX) / torch.clamp(x.abs().max(), min=1e-12)


def scale_skeleton(x):
    raise NotImplementedError


def quantize_skeleton(x, scale):
    return None


def test_ex1_solution_passes_and_a_float32_division_passes_within_tolerance():
    result = assert_passes(nb08.ex1, my_tensorwise_scale, my_quantize)
    assert result.verdict in ("exact", "close")
    assert_passes(nb08.ex1, scale_in_float32, my_quantize)


def test_ex1_a_plain_cast_saturates_as_torch_2_13_does():
    def plain(x, scale):  # no clamp: torch's cast to E4M3 saturates by itself (NaN stays NaN)
        return (x.float() * scale).to(torch.float8_e4m3fn)

    assert_passes(nb08.ex1, my_tensorwise_scale, plain)


def test_ex1_unfilled_is_not_attempted():
    assert_not_attempted(nb08.ex1, None, None)
    assert_not_attempted(nb08.ex1, scale_skeleton, quantize_skeleton)
    one = run_check(nb08.ex1, my_tensorwise_scale, None)
    assert one.status == "not yet"
    assert [p.status for p in one.details["parts"]] == ["passed", "not attempted"]


def test_ex1_mistakes():
    feed_mistake(nb08.ex1, "amax over max", lambda x: x.abs().max().clamp(min=1e-12) / E4M3_MAX, my_quantize)
    feed_mistake(nb08.ex1, "no clamp for an all-zero tensor", lambda x: E4M3_MAX / x.abs().max(), my_quantize)
    feed_mistake(nb08.ex1, "no clamp for an all-zero tensor", lambda x: E4M3_MAX / x.abs().max().item(), my_quantize)
    feed_mistake(nb08.ex1, "another floor for amax",
                 lambda x: E4M3_MAX / x.abs().max().clamp(min=1e-6), my_quantize)
    feed_mistake(nb08.ex1, "amax without abs", lambda x: E4M3_MAX / x.max().clamp(min=1e-12), my_quantize)
    feed_mistake(nb08.ex1, "E5M2's max for E4M3", lambda x: 57344.0 / x.abs().max().clamp(min=1e-12), my_quantize)
    feed_mistake(nb08.ex1, "dividing by the scale", my_tensorwise_scale,
                 lambda x, scale: (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn))
    feed_mistake(nb08.ex1, "no cast to FP8", my_tensorwise_scale,
                 lambda x, scale: (x * scale).clamp(-E4M3_MAX, E4M3_MAX))
    feed_mistake(nb08.ex1, "E5M2's max for E4M3", my_tensorwise_scale,
                 lambda x, scale: (x * scale).to(torch.float8_e5m2))


def test_ex1_a_function_that_raises_or_returns_junk_is_not_yet_not_a_traceback():
    def boom(x):
        raise RuntimeError("oops")

    assert run_check(nb08.ex1, boom, my_quantize).status == "not yet"
    assert run_check(nb08.ex1, lambda x: "448", my_quantize).status == "not yet"
    assert run_check(nb08.ex1, 3.0, my_quantize).status == "not yet"
    assert run_check(nb08.ex1, my_tensorwise_scale, lambda x, s: x[:2]).status == "not yet"
    assert run_check(nb08.ex1, my_tensorwise_scale, lambda x, s: torch.zeros_like(x).to(torch.float8_e4m3fn)).status == "not yet"


# --------------------------------------------------------------------------------------------
# Exercise 2: MyDelayedScaling
# --------------------------------------------------------------------------------------------


class MyDelayedScaling:
    def __init__(self, history_len, margin):
        self.history_len, self.margin = history_len, margin
        self.history = []
        self.scale = 1.0

    def update(self, amax):
        self.history = (self.history + [amax])[-self.history_len :]
        r = math.nan if any(math.isnan(a) for a in self.history) else max(self.history)
        if math.isfinite(r) and r > 0:
            self.scale = E4M3_MAX / r / 2**self.margin


class Skeleton:
    def __init__(self, history_len, margin):
        ...

    @property
    def scale(self):
        return None

    def update(self, amax):
        raise NotImplementedError


class NotebookSkeleton:  # the stored notebook's: methods whose bodies are `...`, no attribute set
    def __init__(self, history_len, margin):
        ...

    def update(self, amax):
        ...


def _variant(**changes):
    """MyDelayedScaling with one mistake, the way a learner would write it."""

    class Variant(MyDelayedScaling):
        def update(self, amax):
            self.history.append(amax)
            if not changes.get("unbounded"):
                self.history = self.history[-self.history_len :]
            if changes.get("newest"):
                r = self.history[-1]
            elif changes.get("nanmax"):
                r = max((a for a in self.history if not math.isnan(a)), default=math.nan)
            elif changes.get("torch_max"):
                r = torch.tensor(self.history).max().item()
            else:
                r = math.nan if any(math.isnan(a) for a in self.history) else max(self.history)
            margin = 0 if changes.get("no_margin") else self.margin
            if changes.get("torch_max"):
                if r != 0:
                    self.scale = E4M3_MAX / r / 2**margin  # NaN gets through
            elif changes.get("zero"):
                if not math.isnan(r):
                    self.scale = E4M3_MAX / r / 2**margin
            elif math.isfinite(r) and r > 0:
                self.scale = E4M3_MAX / r / 2**margin

    return Variant


class StartsAtMax(MyDelayedScaling):
    def __init__(self, history_len, margin):
        super().__init__(history_len, margin)
        self.scale = E4M3_MAX


class TensorScale(MyDelayedScaling):
    """Keeps the scale as a float32 tensor: the same scale, another type; passes."""

    def update(self, amax):
        super().update(amax)
        self.scale = torch.as_tensor(self.scale, dtype=torch.float32)


def test_ex2_solution_passes_exactly_and_a_tensor_scale_passes():
    assert assert_passes(nb08.ex2, MyDelayedScaling).verdict == "exact"
    assert_passes(nb08.ex2, TensorScale)


def test_ex2_right_rule_is_the_package_rule_on_every_schedule():
    # the reference trajectory itself is what fp8.DelayedScaling does, step by step
    for _what, history_len, margin, amaxes in nb08.DELAYED_SCHEDULES:
        mine, ref = MyDelayedScaling(history_len, margin), fp8.DelayedScaling("fp8_e4m3", history_len, margin)
        for a in amaxes:
            assert float(torch.tensor(mine.scale, dtype=torch.float32)) == ref.scale
            mine.update(a)
            ref.update(a)


def test_ex2_unfilled_is_not_attempted():
    assert_not_attempted(nb08.ex2, None)
    assert_not_attempted(nb08.ex2, Skeleton)
    assert_not_attempted(nb08.ex2, NotebookSkeleton)


def test_ex2_mistakes():
    feed_mistake(nb08.ex2, "using the newest amax only", _variant(newest=True))
    feed_mistake(nb08.ex2, "forgetting the margin", _variant(no_margin=True))
    feed_mistake(nb08.ex2, "a history that never forgets", _variant(unbounded=True))
    feed_mistake(nb08.ex2, "a NaN scale", _variant(torch_max=True))
    feed_mistake(nb08.ex2, "skipping the NaN", _variant(nanmax=True))
    feed_mistake(nb08.ex2, "an inf scale from an all-zero tensor", _variant(zero=True))
    feed_mistake(nb08.ex2, "starting from another scale", StartsAtMax)


def test_ex2_python_max_with_nan_is_caught():
    class PythonMax(MyDelayedScaling):  # max() over a list with NaN depends on where the NaN sits
        def update(self, amax):
            self.history = (self.history + [amax])[-self.history_len :]
            r = max(self.history)
            if r > 0:
                self.scale = E4M3_MAX / r / 2**self.margin

    result = run_check(nb08.ex2, PythonMax)
    assert result.status == "not yet" and result.details["schedule"] == "a NaN amax"


def test_ex2_errors_in_the_learners_class_are_reported():
    class Divides(MyDelayedScaling):
        def update(self, amax):
            self.history = (self.history + [amax])[-self.history_len :]
            self.scale = E4M3_MAX / max(self.history)

    result = run_check(nb08.ex2, Divides)
    assert result.status == "not yet"
    assert nb08.ex2.mistake("an inf scale from an all-zero tensor").hint in result.message
    assert run_check(nb08.ex2, 42).status == "not yet"


# --------------------------------------------------------------------------------------------
# Exercise 3: the MX block scale for FP4
# --------------------------------------------------------------------------------------------

FP4_EMAX = 2  # E2M1's largest value 6 is 1.5 * 2**2


def my_mx_scales(x, block_size):  # the solution, as in the solutions notebook
    amax = x.reshape(*x.shape[:-1], -1, block_size).abs().amax(dim=-1)
    return 2.0 ** (torch.floor(torch.log2(amax)) - FP4_EMAX)


def _rule(emax=FP4_EMAX, rounding=torch.floor, key=torch.abs, invert=False):
    def scales(x, block_size):
        s = 2.0 ** (rounding(torch.log2(key(x.reshape(*x.shape[:-1], -1, block_size)).amax(dim=-1))) - emax)
        return 1.0 / s if invert else s

    return scales


def test_ex3_the_expected_scales_are_torchaos_to_mx_scales_for_fp4():
    # the hidden expected values, against an independent oracle: torchao's own E8M0 scales
    fp8.import_torchao()
    from torchao.prototype.mx_formats.mx_tensor import to_mx

    for _, x, b in nb08._ex3_cases():
        scale_e8m0, _ = to_mx(x.contiguous(), torch.float4_e2m1fn_x2, b)
        theirs = torch.pow(2.0, scale_e8m0.view(torch.uint8).to(torch.float32) - 127)
        assert torch.equal(mx.e8m0_scales(x.reshape(-1, b), 2).flatten(), theirs.flatten())
        assert torch.equal(my_mx_scales(x, b).flatten(), theirs.flatten())


def test_ex3_solution_and_mistakes():
    assert_passes(nb08.ex3, my_mx_scales)
    assert_passes(nb08.ex3, lambda x, b: my_mx_scales(x, b).tolist())  # a list of scales counts too
    assert_passes(nb08.ex3, lambda x, b: my_mx_scales(x, b).unsqueeze(-1))  # so does keepdim
    assert_not_attempted(nb08.ex3, None)
    assert_not_attempted(nb08.ex3, lambda x, b: None)
    feed_mistake(nb08.ex3, "E4M3's offset for FP4", _rule(emax=8))
    feed_mistake(nb08.ex3, "an exact scale, not a power of two", lambda x, b: x.reshape(*x.shape[:-1], -1, b).abs().amax(-1) / 6)
    feed_mistake(nb08.ex3, "rounding log2(amax) up", _rule(rounding=torch.ceil))
    feed_mistake(nb08.ex3, "the inverse scale", _rule(invert=True))
    feed_mistake(nb08.ex3, "amax without abs", _rule(key=lambda t: t))
    feed_mistake(nb08.ex3, "one scale for all", lambda x, b: 2.0 ** (torch.floor(torch.log2(x.abs().max())) - 2))
    assert run_check(nb08.ex3, _rule(emax=3)).status == "not yet"  # an unrecognised offset: the generic hint
    assert run_check(nb08.ex3, lambda x, b: 1 / 0).status == "not yet"
    assert run_check(nb08.ex3, 42).status == "not yet"


def test_ex3_no_feedback_gives_the_offset_or_the_right_scale():
    # the right offset is E2M1's emax: floor(log2) of its largest value (6, from the FP4 rounding grid)
    emax = math.floor(math.log2(mx._round_to_fp4(torch.tensor(1e9)).item()))
    assert emax == FP4_EMAX
    wrong = [_rule(emax=8), _rule(emax=3), _rule(rounding=torch.ceil), _rule(invert=True), _rule(key=lambda t: t)]
    for rule in wrong:
        message = run_check(nb08.ex3, rule).message
        assert f"- {emax}" not in message and "emax" not in message
        case, k = re.search(r"on (.+) \(block size", message).group(1), int(re.search(r"block (\d+) \(amax", message).group(1))
        x, b = next((x, b) for c, x, b in nb08._ex3_cases() if c == case)
        right = my_mx_scales(x, b).flatten()[k].item()
        assert nb08._show(right) not in message  # the scale that would pass is never shown


# --------------------------------------------------------------------------------------------
# Exercise 4: the margin that absorbs a spike
# --------------------------------------------------------------------------------------------

HISTORY_LEN = 8
AMAXES = [1.0 * 1.02**t for t in range(40)]
AMAXES[20] *= 20.0  # a spike twenty times the amax before it


def test_ex4_solution_and_mistakes():
    steps = {m: nb08._saturated_steps(AMAXES, HISTORY_LEN, m) for m in range(8)}
    best = min(m for m, s in steps.items() if not s)
    assert best == 5 and steps[4] == [20]  # 2**4 < 20 * 1.02 < 2**5
    assert_passes(nb08.ex4, best, AMAXES, HISTORY_LEN)
    assert_passes(nb08.ex4, 5.0, AMAXES, HISTORY_LEN)
    assert_not_attempted(nb08.ex4, None, AMAXES, HISTORY_LEN)
    feed_mistake(nb08.ex4, "a margin that still saturates", 4, AMAXES, HISTORY_LEN)
    feed_mistake(nb08.ex4, "a margin that still saturates", 0, AMAXES, HISTORY_LEN)
    feed_mistake(nb08.ex4, "more margin than needed", 6, AMAXES, HISTORY_LEN)
    feed_mistake(nb08.ex4, "2**margin for the margin", 32, AMAXES, HISTORY_LEN)
    assert run_check(nb08.ex4, -1, AMAXES, HISTORY_LEN).status == "not yet"
    assert run_check(nb08.ex4, "5", AMAXES, HISTORY_LEN).status == "not yet"
    assert run_check(nb08.ex4, 2.5, AMAXES, HISTORY_LEN).status == "not yet"


def test_ex4_no_feedback_gives_the_smallest_margin():
    # the right answer, derived from the package's trajectory (independent of the check's own replay)
    tensors = [torch.tensor([a]) for a in AMAXES]
    saturates = [bool(fp8_explorer.scaling_trajectory(tensors, history_len=HISTORY_LEN, margin=m).saturated_steps)
                 for m in range(12)]
    best = saturates.index(False)
    factor_hint = nb08.ex4.mistake("2**margin for the margin").hint
    messages = {}
    for answer in (2**best, 2 ** (best + 1), 8, *range(best)):
        messages[answer] = run_check(nb08.ex4, answer, AMAXES, HISTORY_LEN).message
        assert not re.search(rf"(?<![\d.]){best}(?![\d.])", messages[answer]), messages[answer]
        assert f"2**{best}" not in messages[answer]
    # 2**best gets the same feedback as any other power of two that is too large: nothing singles it out
    assert factor_hint in messages[2**best] and factor_hint in messages[2 ** (best + 1)] and factor_hint in messages[8]
    assert messages[2**best].replace(str(2**best), "N") == messages[2 ** (best + 1)].replace(str(2 ** (best + 1)), "N")


def test_ex4_saturated_steps_agrees_with_scaling_trajectory():
    # the check's own replay against the package's trajectory on tensors whose amaxes are AMAXES
    tensors = [torch.tensor([a, -a / 3, a / 7]) for a in AMAXES]
    for margin in (0, 4, 5):
        traj = fp8_explorer.scaling_trajectory(tensors, history_len=HISTORY_LEN, margin=margin, recipe="delayed")
        assert traj.saturated_steps == nb08._saturated_steps(AMAXES, HISTORY_LEN, margin)


def test_ex4_a_spike_no_margin_absorbs_raises():
    with pytest.raises(ValueError, match="margin"):
        nb08.ex4.check(5, [1.0, 1e12], HISTORY_LEN)  # beyond any margin up to MAX_MARGIN


# --------------------------------------------------------------------------------------------
# Property tests: the checks' expected answers against an independent replay
# --------------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(
    growth=st.floats(1.0, 1.1),
    spike=st.floats(1.0, 500.0),
    spike_step=st.integers(1, 15),
    history_len=st.integers(1, 6),
)
def test_ex4_passes_exactly_the_smallest_margin_scaling_trajectory_finds(growth, spike, spike_step, history_len):
    amaxes = [growth**t for t in range(16)]
    amaxes[spike_step] *= spike
    tensors = [torch.tensor([a]) for a in amaxes]

    def saturates(m):
        return bool(fp8_explorer.scaling_trajectory(tensors, history_len=history_len, margin=m, recipe="delayed").saturated_steps)

    best = next(m for m in range(nb08.MAX_MARGIN + 1) if not saturates(m))
    assert_passes(nb08.ex4, best, amaxes, history_len)
    if best > 0:
        assert run_check(nb08.ex4, best - 1, amaxes, history_len).status == "not yet"
    assert run_check(nb08.ex4, best + 1, amaxes, history_len).status == "not yet"
