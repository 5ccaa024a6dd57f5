"""amp_lab.scaling against its oracle, torch.amp.GradScaler("cpu"), bit for bit.

The same model is trained twice from the same initial weights, once with our scaler and once
with GradScaler, while the same faults (inf, -inf, NaN) are written into the same scaled
gradients at the same steps.  After every iteration the scale, the skip decision, the
growth tracker and every parameter (compared as raw bits) must be identical.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st

from amp_lab import scaler_checks, scaling
from amp_lab._checks import FLOAT32_MAX
from amp_lab.scaling import DynamicLossScaler, StaticLossScaler, to_float32

FLOAT32_TINY = torch.finfo(torch.float32).tiny  # the smallest normal float32, 2**-126

FAULTS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors (tests/conftest.py)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit pattern of a float tensor, so that NaN == NaN and -0.0 != 0.0."""
    int_dtype = {4: torch.int32, 2: torch.int16, 8: torch.int64}[t.element_size()]
    return t.detach().contiguous().view(int_dtype)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(bits(a), bits(b))


class Net(torch.nn.Module):
    """Small MLP plus one parameter that never gets a gradient (grad stays None)."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.fc1 = torch.nn.Linear(5, 7)
        self.fc2 = torch.nn.Linear(7, 7)
        self.fc3 = torch.nn.Linear(7, 3)
        self.unused = torch.nn.Parameter(torch.ones(2))
        self.to(dtype)

    def forward(self, X):
        return self.fc3(torch.tanh(self.fc2(torch.relu(self.fc1(X)))))


def state(scaler) -> dict:
    """GradScaler's state_dict, or ours written as one: the scale, the factors, the interval, the tracker."""
    if isinstance(scaler, torch.amp.GradScaler):
        return scaler.state_dict()
    keys = ("growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
    return {"scale": scaler.get_scale(), **{k: getattr(scaler, k) for k in keys}}


def make_optimizer(kind: str, params):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(params, lr=0.01)
    raise AssertionError(kind)


def gradscaler_found_inf(scaler: torch.amp.GradScaler, opt) -> bool:
    """GradScaler's own skip decision (the sum it tests in _maybe_opt_step)."""
    return bool(sum(v.item() for v in scaler._found_inf_per_device(opt).values()))


def forbid_step_on_nonfinite(opt):
    """Wrap opt.step so that stepping with an inf/NaN gradient fails the test; count calls."""
    inner = opt.step
    calls = []

    def step(*args, **kwargs):
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    assert torch.isfinite(p.grad).all(), "optimizer stepped on a non-finite gradient"
        calls.append(1)
        return inner(*args, **kwargs)

    opt.step = step
    return calls


class Run:
    """One training run driven step by step by a scaler."""

    def __init__(self, model, opt_kind, scaler, X, y):
        self.model, self.scaler, self.X, self.y = model, scaler, X, y
        self.opt = make_optimizer(opt_kind, model.parameters())

    def backward(self):
        self.opt.zero_grad(set_to_none=True)
        out = self.model(self.X)
        loss = torch.nn.functional.cross_entropy(out.float(), self.y)
        self.scaler.scale(loss).backward()

    def inject(self, faults):
        params = [p for p in self.model.parameters() if p.grad is not None]
        for param_index, flat_index, kind in faults:
            grad = params[param_index % len(params)].grad
            grad.view(-1)[flat_index % grad.numel()] = FAULTS[kind]

    def finish(self, clip):
        if clip:
            self.scaler.unscale_(self.opt)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        return self.scaler.step(self.opt)


fault = st.tuples(st.integers(0, 10), st.integers(0, 100), st.sampled_from(sorted(FAULTS)))
schedule = st.lists(st.lists(fault, max_size=3), min_size=1, max_size=25)
init_scales = st.one_of(
    st.floats(2.0**-20, FLOAT32_MAX),  # any float: most are not float32 values
    st.integers(-20, 127).map(lambda e: 2.0**e),
    st.floats(FLOAT32_MAX / 8, FLOAT32_MAX),  # growth would overflow float32
)
# Near the bottom of float32's normal range a few backoffs leave it: GradScaler walks on into
# subnormals, ours refuses that backoff (ScaleUnderflowError) and changes nothing.
near_tiny = st.one_of(st.integers(-126, -110).map(lambda e: 2.0**e), st.floats(FLOAT32_TINY, 2.0**-110))


@settings(max_examples=80)
@given(
    faults=schedule,
    init_scale=st.one_of(init_scales, near_tiny),
    growth_factor=st.one_of(st.just(2.0), st.floats(1.0001, 8.0)),
    backoff_factor=st.one_of(st.just(0.5), st.floats(0.05, 0.95)),
    growth_interval=st.integers(1, 6),
    opt_kind=st.sampled_from(["sgd", "adam"]),
    clip_every=st.integers(0, 4),
    seed=st.integers(0, 2**16),
)
def test_dynamic_scaler_matches_gradscaler_under_random_faults(
    faults, init_scale, growth_factor, backoff_factor, growth_interval, opt_kind, clip_every, seed
):
    torch.manual_seed(seed)
    model = Net()
    X, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    kwargs = dict(
        init_scale=init_scale,
        growth_factor=growth_factor,
        backoff_factor=backoff_factor,
        growth_interval=growth_interval,
    )
    ours = Run(copy.deepcopy(model), opt_kind, DynamicLossScaler(**kwargs), X, y)
    ref = Run(copy.deepcopy(model), opt_kind, torch.amp.GradScaler("cpu", **kwargs), X, y)
    steps_taken = forbid_step_on_nonfinite(ours.opt)
    ref.scaler.scale(torch.ones(()))  # GradScaler rounds its scale to float32 on the first scale()
    assert state(ours.scaler) == state(ref.scaler)
    expected_steps = 0

    for t, step_faults in enumerate(faults):
        for run in (ours, ref):
            run.backward()
            run.inject(step_faults)
        # The independent oracle for the skip decision: any scaled gradient not finite?
        nonfinite = any(
            not torch.isfinite(p.grad).all() for p in ref.model.parameters() if p.grad is not None
        )
        clip = clip_every > 0 and t % clip_every == 0
        stepped = ours.finish(clip)
        ref.finish(clip)
        assert stepped == (not gradscaler_found_inf(ref.scaler, ref.opt)) == (not nonfinite)
        expected_steps += stepped
        # GradScaler unscales in place even when it skips: the gradients agree too.
        for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True):
            assert (p.grad is None) == (q.grad is None)
            if p.grad is not None:
                assert torch.equal(torch.isnan(p.grad), torch.isnan(q.grad))
                assert torch.equal(p.grad.nan_to_num(0.0), q.grad.nan_to_num(0.0))
        ref.scaler.update()
        if ref.scaler.get_scale() < FLOAT32_TINY:
            # GradScaler backed off below float32's normal range: ours refuses, and changes nothing.
            before = state(ours.scaler)
            with pytest.raises(scaling.ScaleUnderflowError, match="normal range"):
                ours.scaler.update()
            assert state(ours.scaler) == before
            assert before["scale"] >= FLOAT32_TINY
            event("GradScaler's scale left float32's normal range")
            break
        ours.scaler.update()

        assert ours.scaler.get_scale() == ref.scaler.get_scale()
        assert state(ours.scaler) == state(ref.scaler)
        for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True):
            assert same_bits(p, q)

    assert len(steps_taken) == expected_steps


@settings(max_examples=30)
@given(
    faults=st.lists(st.lists(fault, max_size=2), min_size=1, max_size=10),
    init_scale=init_scales,
    opt_kind=st.sampled_from(["sgd", "adam"]),
    seed=st.integers(0, 2**16),
)
def test_bf16_gradients_unscale_bit_for_bit(faults, init_scale, opt_kind, seed):
    """BF16 grads are unscaled in float32 and rounded once, as in GradScaler's kernel."""
    torch.manual_seed(seed)
    model = Net(torch.bfloat16)
    X, y = torch.randn(16, 5, dtype=torch.bfloat16), torch.randint(0, 3, (16,))
    kwargs = dict(init_scale=init_scale, growth_interval=2, backoff_factor=0.37, growth_factor=3.0)
    ours = Run(copy.deepcopy(model), opt_kind, DynamicLossScaler(**kwargs), X, y)
    ref = Run(copy.deepcopy(model), opt_kind, torch.amp.GradScaler("cpu", **kwargs), X, y)
    for step_faults in faults:
        for run in (ours, ref):
            run.backward()
            run.inject(step_faults)
            run.scaler.unscale_(run.opt)
        for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True):
            if p.grad is not None and torch.isfinite(q.grad).all():
                assert same_bits(p.grad, q.grad)
        for run in (ours, ref):
            run.scaler.step(run.opt)
            run.scaler.update()
        assert ours.scaler.get_scale() == ref.scaler.get_scale()
        for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True):
            assert same_bits(p, q)


def _pair(**kwargs):
    torch.manual_seed(0)
    model = Net()
    X, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    ours = Run(copy.deepcopy(model), "sgd", DynamicLossScaler(**kwargs), X, y)
    ref = Run(copy.deepcopy(model), "sgd", torch.amp.GradScaler("cpu", **kwargs), X, y)
    return ours, ref


def _iterate(runs, faults=()):
    for run in runs:
        run.backward()
        run.inject(faults)
        run.scaler.step(run.opt)
        run.scaler.update()


def test_growth_that_would_overflow_float32_keeps_the_old_scale():
    ours, ref = _pair(init_scale=FLOAT32_MAX / 1.5, growth_interval=1)
    start = to_float32(FLOAT32_MAX / 1.5)
    for _ in range(3):
        _iterate([ours, ref])
        assert ours.scaler.get_scale() == ref.scaler.get_scale() == start
        assert ours.scaler._growth_tracker == ref.scaler.state_dict()["_growth_tracker"] == 0


def test_scale_falls_below_one_and_keeps_matching():
    ours, ref = _pair(init_scale=4.0, backoff_factor=0.5, growth_interval=3)
    scales = []
    for _ in range(6):
        _iterate([ours, ref], faults=[(0, 0, "nan")])
        assert ours.scaler.get_scale() == ref.scaler.get_scale()
        scales.append(ours.scaler.get_scale())
    assert scales[-1] == 2.0**-4
    for _ in range(7):  # clean steps: growth resumes from below 1
        _iterate([ours, ref])
        assert ours.scaler.get_scale() == ref.scaler.get_scale()
    for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True):
        assert same_bits(p, q)


def test_scale_of_fp16_and_bf16_losses_matches():
    ours, ref = DynamicLossScaler(init_scale=1 / 3), torch.amp.GradScaler("cpu", init_scale=1 / 3)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        x = torch.randn(1000).to(dtype)
        assert same_bits(ours.scale(x), ref.scale(x))


# -- the static scaler -----------------------------------------------------------------


def test_static_scaler_unscales_like_gradscaler_and_never_changes_scale():
    torch.manual_seed(0)
    model = Net()
    X, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    ours = Run(copy.deepcopy(model), "adam", StaticLossScaler(1000.0), X, y)
    # GradScaler never grows (huge interval) and no faults: the same fixed scale.
    ref = Run(
        copy.deepcopy(model),
        "adam",
        torch.amp.GradScaler("cpu", init_scale=1000.0, growth_interval=10**9),
        X,
        y,
    )
    for _ in range(5):
        _iterate([ours, ref])
        assert ours.scaler.get_scale() == ref.scaler.get_scale() == to_float32(1000.0)
        for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True):
            assert same_bits(p, q)


def test_static_scaler_steps_on_inf_and_poisons_the_weights():
    torch.manual_seed(0)
    run = Run(Net(), "sgd", StaticLossScaler(2.0**10), torch.randn(8, 5), torch.randint(0, 3, (8,)))
    run.backward()
    run.inject([(0, 0, "inf")])
    assert run.scaler.step(run.opt) is True
    run.scaler.update()
    assert run.scaler.get_scale() == 1024.0
    assert not torch.isfinite(run.model.fc1.weight).all()


# -- bad arguments -----------------------------------------------------------------------


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, -math.inf, 1e39, "8", None, True])
def test_bad_scales_raise_value_error(value):
    with pytest.raises(ValueError, match="init_scale"):
        DynamicLossScaler(init_scale=value)
    with pytest.raises(ValueError, match="scale"):
        StaticLossScaler(value)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"growth_factor": 1.0}, "growth_factor"),
        ({"growth_factor": 0.5}, "growth_factor"),
        ({"growth_factor": math.nan}, "growth_factor"),
        ({"growth_factor": math.inf}, "growth_factor"),
        ({"backoff_factor": 0.0}, "backoff_factor"),
        ({"backoff_factor": 1.0}, "backoff_factor"),
        ({"backoff_factor": 1.5}, "backoff_factor"),
        ({"backoff_factor": -0.5}, "backoff_factor"),
        ({"backoff_factor": math.nan}, "backoff_factor"),
        ({"growth_interval": 0}, "growth_interval"),
        ({"growth_interval": -3}, "growth_interval"),
        ({"growth_interval": 2.5}, "growth_interval"),
        ({"growth_interval": True}, "growth_interval"),
    ],
)
def test_bad_dynamic_arguments_raise_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DynamicLossScaler(**kwargs)


@pytest.mark.parametrize("growth_factor, backoff_factor", [(1.1, 0.3), (1.7, 0.7), (2.0, 0.5)])
def test_factors_that_are_not_float32_values_round_like_the_kernel(growth_factor, backoff_factor):
    """The kernel multiplies in double and rounds to float32 once; float32 arithmetic would drift."""
    ours, ref = _pair(
        init_scale=1000.0, growth_factor=growth_factor, backoff_factor=backoff_factor, growth_interval=1
    )
    for t in range(40):
        _iterate([ours, ref], faults=[(0, 0, "inf")] if t % 5 == 4 else ())
        assert ours.scaler.get_scale() == ref.scaler.get_scale()


# -- loss scales are validated in float64, used in float32 -------------------------------


def _inf_step(run):
    """One iteration whose first gradient element is inf (so the step is skipped)."""
    run.backward()
    run.inject([(0, 0, "inf")])
    run.scaler.step(run.opt)


@pytest.mark.parametrize(
    "make",
    [
        lambda: StaticLossScaler(1e-50),
        lambda: StaticLossScaler(2.0**-127),  # subnormal in float32: 1/S overflows to inf
        lambda: DynamicLossScaler(init_scale=2.0**-149),  # float32's smallest subnormal
        lambda: DynamicLossScaler(init_scale=1e-50),  # 0 in float32
        lambda: DynamicLossScaler(init_scale=np.float64(1e-40)),
    ],
)
def test_scales_that_are_not_normal_float32_values_are_refused(make):
    # The oracle: GradScaler stores what float32 makes of them, 0 or a subnormal.
    with pytest.raises(ValueError, match="scale.*2\\*\\*-126"):
        make()


def test_gradscaler_turns_a_tiny_init_scale_into_zero_and_nan_weights():
    """What the refusal saves a learner from: GradScaler's scale 0, a scaled loss 0, NaN weights."""
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.1)
    ref = torch.amp.GradScaler("cpu", init_scale=1e-50)
    ref.scale((2 * p).sum()).backward()
    assert ref.get_scale() == 0.0 and torch.equal(p.grad, torch.zeros(3))
    ref.step(opt)
    ref.update()
    assert torch.isnan(p).all()
    with pytest.raises(ValueError, match="init_scale"):
        DynamicLossScaler(init_scale=1e-50)


def _gradscaler_backoffs(init_scale, backoff_factor=0.5, limit=400):
    """GradScaler's float32 scale after each backoff (every step inf), until it reaches 0."""
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.0)
    ref = torch.amp.GradScaler("cpu", init_scale=init_scale, backoff_factor=backoff_factor)
    scales = []
    while (not scales or scales[-1] > 0) and len(scales) < limit:
        opt.zero_grad()
        ref.scale(p.sum()).backward()
        p.grad[0] = math.inf
        ref.step(opt)
        ref.update()
        scales.append(ref.get_scale())
    return scales


@pytest.mark.parametrize(
    "init_scale, backoff_factor", [(2.0**16, 0.5), (1.0, 1e-30), (3e-30, 0.37), (2.0**-126, 0.5)]
)
def test_backoff_below_float32_normal_range_raises_where_gradscaler_goes_on_silently(
    init_scale, backoff_factor
):
    expected = _gradscaler_backoffs(init_scale, backoff_factor)
    assert expected[-1] == 0.0  # the oracle reaches 0 ...
    leaves = next(i for i, v in enumerate(expected) if v < FLOAT32_TINY)
    assert all(v < FLOAT32_TINY for v in expected[leaves:])  # ... through subnormals, and never returns
    ours, _ = _pair(init_scale=init_scale, backoff_factor=backoff_factor)
    for i in range(leaves):  # bit for bit while the scale stays normal
        _inf_step(ours)
        ours.scaler.update()
        assert ours.scaler.get_scale() == expected[i]
    _inf_step(ours)
    before = state(ours.scaler)
    with pytest.raises(scaling.ScaleUnderflowError, match="inf or NaN") as info:
        ours.scaler.update()
    assert isinstance(info.value, RuntimeError)
    assert state(ours.scaler) == before  # nothing changed
    with pytest.raises(scaling.ScaleUnderflowError):  # and it stays refused, never a ZeroDivisionError
        ours.scaler.update()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"backoff_factor": 1e-300}, "backoff_factor"),  # every backoff from any scale gives 0
        ({"backoff_factor": scaler_checks.MIN_BACKOFF_FACTOR / 2}, "backoff_factor"),
        ({"backoff_factor": True}, "backoff_factor"),
        ({"backoff_factor": "0.5"}, "backoff_factor"),
        ({"backoff_factor": None}, "backoff_factor"),
        ({"growth_factor": 1e300}, "growth_factor"),  # every growth from any scale overflows
        ({"growth_factor": scaler_checks.MAX_GROWTH_FACTOR * 2}, "growth_factor"),
        ({"growth_factor": -math.inf}, "growth_factor"),
        ({"growth_factor": np.bool_(True)}, "growth_factor"),
        ({"growth_interval": 2**31}, "growth_interval"),  # GradScaler's tracker is an int32
        ({"growth_interval": np.float64(3.0)}, "growth_interval"),
        ({"growth_interval": None}, "growth_interval"),
    ],
)
def test_more_bad_dynamic_arguments_are_refused(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DynamicLossScaler(**kwargs)


def test_factors_at_their_bounds_still_match_gradscaler():
    for kwargs, faults in [
        (dict(init_scale=FLOAT32_MAX, backoff_factor=scaler_checks.MIN_BACKOFF_FACTOR), [(0, 0, "inf")]),
        (dict(init_scale=FLOAT32_TINY, growth_factor=scaler_checks.MAX_GROWTH_FACTOR, growth_interval=1), []),
    ]:
        ours, ref = _pair(**kwargs)
        _iterate([ours, ref], faults)
        assert state(ours.scaler) == state(ref.scaler)


def test_numpy_scalars_are_accepted_as_numbers():
    kwargs = dict(init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    ours = DynamicLossScaler(
        init_scale=np.float32(1024.0),
        growth_factor=np.float64(2.0),
        backoff_factor=np.float32(0.5),
        growth_interval=np.int64(3),
    )
    assert state(ours) == state(torch.amp.GradScaler("cpu", **kwargs))
    assert StaticLossScaler(np.int32(8)).get_scale() == 8.0


@pytest.mark.parametrize("x", [0.1, np.float32(0.1), np.float64(1e39), 7, np.int64(2**60), math.inf])
def test_to_float32_rounds_like_torch(x):
    expected = torch.tensor(float(x), dtype=torch.float64).float().item()
    assert to_float32(x) == expected or (math.isnan(expected) and math.isnan(to_float32(x)))


# -- 04's reveals: codes and numbers --------------------------------------------------------------


def test_read_schedule_counts_skips_and_growth_of_gradscalers_run():
    # GradScaler from 2**10, growth_interval=2: clean, clean (grow), clean, inf (back off), nan (back off),
    # clean, clean (grow), clean, clean (grow): worked out by hand, then checked against GradScaler itself
    schedule = ["clean", "clean", "clean", "inf", "nan", "clean", "clean", "clean", "clean"]
    found = scaling.compare_with_grad_scaler(
        lambda: DynamicLossScaler(init_scale=2.0**10, growth_interval=2), schedule, init_scale=2.0**10,
        growth_interval=2, device="cpu",
    )  # fmt: skip
    assert found.scales == (2**10, 2**11, 2**11, 2**10, 2**9, 2**9, 2**10, 2**10, 2**11)
    reading = scaling.read_schedule(found, 2.0**10, 2)
    assert reading.codes == ("scaling.schedule_end", "scaling.schedule_skips", "scaling.schedule_growth")
    assert reading.facts["skipped"] == [3, 4] and reading.facts["grew"] == 3
    assert reading.facts["final"] == "2**11"


def test_read_backoff_finds_the_last_normal_scale_and_zero():
    tiny = FLOAT32_TINY
    scales = [4 * tiny, 2 * tiny, tiny, tiny / 2, tiny / 4, 0.0]
    reading = scaling.read_backoff(scales, ours_refused=True)
    assert reading.codes == ("scaling.backoff_reaches_zero", "scaling.ours_refuses")
    assert reading.facts["answer"] == "goes on down to exactly 0"
    assert reading.facts["first_subnormal"] == 4 and reading.facts["last_normal_log2"] == -126
    assert reading.facts["to_zero"] == 2
    assert scaling.read_backoff([0.5, 0.25], ours_refused=False).codes == (
        "scaling.backoff_stops",
        "scaling.ours_carries_on",
    )
    with pytest.raises(ValueError, match="scales"):
        scaling.read_backoff([-1.0], ours_refused=True)


def test_runs_use_says_whose_scaler_the_runs_use():
    class MyStaticScaler:
        pass

    assert scaling.runs_use(MyStaticScaler, mine=MyStaticScaler).outcome == "scaling.runs_use_yours"
    fallback = scaling.runs_use(StaticLossScaler, mine=MyStaticScaler)
    assert fallback.outcome == "scaling.runs_use_package" and fallback.facts["package"] == "StaticLossScaler"
    with pytest.raises(TypeError, match="chosen"):
        scaling.runs_use(StaticLossScaler(2.0), mine=MyStaticScaler)
