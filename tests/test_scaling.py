"""amp_lab.scaling against its oracle, torch.amp.GradScaler("cpu"), bit for bit.

The same model is trained twice from the same initial weights, once with our scaler and once
with GradScaler, while the same faults (inf, -inf, NaN) are written into the same scaled
gradients at the same steps.  After every iteration the scale, the skip decision, the
state_dict and every parameter (compared as raw bits) must be identical.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st

from amp_lab import scaling
from amp_lab.scaling import FLOAT32_MAX, DynamicLossScaler, ScaleRecord, StaticLossScaler, to_float32

FLOAT32_TINY = torch.finfo(torch.float32).tiny  # the smallest normal float32, 2**-126

FAULTS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These tensors are tiny: a second thread only adds contention (10x slower on a busy 2-core box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
    reload_at=st.integers(-1, 25),
    seed=st.integers(0, 2**16),
)
def test_dynamic_scaler_matches_gradscaler_under_random_faults(
    faults, init_scale, growth_factor, backoff_factor, growth_interval, opt_kind, clip_every, reload_at, seed
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
    assert ours.scaler.state_dict() == ref.scaler.state_dict()
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
            before, history = ours.scaler.state_dict(), list(ours.scaler.history)
            with pytest.raises(scaling.ScaleUnderflowError, match="2\\*\\*-126"):
                ours.scaler.update()
            assert ours.scaler.state_dict() == before and ours.scaler.history == history
            assert before["scale"] >= FLOAT32_TINY
            event("GradScaler's scale left float32's normal range")
            break
        ours.scaler.update()

        assert ours.scaler.get_scale() == ref.scaler.get_scale()
        assert ours.scaler.state_dict() == ref.scaler.state_dict()
        for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True):
            assert same_bits(p, q)
        assert ours.scaler.history[-1].skipped == (not stepped)

        if t == reload_at:
            # A checkpoint mid-run: a fresh scaler loaded from GradScaler's state continues identically.
            fresh = DynamicLossScaler()
            fresh.load_state_dict(ref.scaler.state_dict())
            assert fresh.state_dict() == ref.scaler.state_dict()
            ours.scaler = fresh

    assert len(steps_taken) == expected_steps
    assert all(isinstance(r, ScaleRecord) for r in ours.scaler.history)


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
        assert ours.scaler.state_dict()["_growth_tracker"] == ref.scaler.state_dict()["_growth_tracker"] == 0


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


@pytest.mark.parametrize("tracker", [3, 5])
def test_growth_tracker_at_or_past_the_interval_is_refused(tracker):
    """GradScaler compares the tracker with ``==``: loaded at or past the interval, its scale never
    grows again, silently.  Ours refuses such a state and keeps its own."""
    ours, ref = _pair(init_scale=8.0, growth_interval=3)
    state = {
        "scale": 8.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 3,
        "_growth_tracker": tracker,
    }
    ref.scaler.load_state_dict(state)
    for _ in range(7):
        _iterate([ref])
    assert ref.scaler.get_scale() == 8.0  # the oracle: 7 clean steps at interval 3, and no growth
    before = ours.scaler.state_dict()
    with pytest.raises(ValueError, match="_growth_tracker"):
        ours.scaler.load_state_dict(state)
    assert ours.scaler.state_dict() == before


def test_state_dict_round_trips_both_ways():
    ours, ref = _pair(init_scale=1000.0, growth_factor=1.5, backoff_factor=0.25, growth_interval=2)
    for t in range(5):
        _iterate([ours, ref], faults=[(1, t, "inf")] if t == 2 else ())
    state = ours.scaler.state_dict()
    assert state == ref.scaler.state_dict()
    assert set(state) == {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
    other_ref = torch.amp.GradScaler("cpu")
    other_ref.load_state_dict(state)
    other_ours = DynamicLossScaler()
    other_ours.load_state_dict(ref.scaler.state_dict())
    ours.scaler, ref.scaler = other_ours, other_ref
    for t in range(6):
        _iterate([ours, ref], faults=[(2, 0, "nan")] if t == 3 else ())
        assert ours.scaler.state_dict() == ref.scaler.state_dict()


def test_state_before_first_scale_matches_gradscaler():
    ours, ref = DynamicLossScaler(init_scale=0.1), torch.amp.GradScaler("cpu", init_scale=0.1)
    assert ours.get_scale() == ref.get_scale() == 0.1  # not yet rounded to float32
    assert ours.state_dict() == ref.state_dict()
    ours.scale(torch.ones(())), ref.scale(torch.ones(()))
    assert ours.get_scale() == ref.get_scale() == to_float32(0.1)


@pytest.mark.parametrize("new_scale", [3.0, 1e-3, torch.tensor(123.456, dtype=torch.float64)])
def test_update_with_new_scale(new_scale):
    ours, ref = _pair(init_scale=64.0, growth_interval=2)
    _iterate([ours, ref])
    for run in (ours, ref):
        run.backward()
        run.scaler.step(run.opt)
        run.scaler.update(new_scale)
    assert ours.scaler.state_dict() == ref.scaler.state_dict()
    _iterate([ours, ref])
    assert ours.scaler.state_dict() == ref.scaler.state_dict()


def test_scale_of_fp16_and_bf16_outputs_and_lists_matches():
    ours, ref = DynamicLossScaler(init_scale=1 / 3), torch.amp.GradScaler("cpu", init_scale=1 / 3)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        x = torch.randn(1000).to(dtype)
        assert same_bits(ours.scale(x), ref.scale(x))
    outs = [torch.randn(3), torch.randn(2)]
    for a, b in zip(ours.scale(outs), ref.scale(outs), strict=True):
        assert same_bits(a, b)
    assert isinstance(ours.scale(tuple(outs)), tuple)


def test_two_optimizers_skip_independently_and_update_together():
    torch.manual_seed(0)
    model = Net()
    X, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    results = []
    for scaler in (DynamicLossScaler(init_scale=256.0), torch.amp.GradScaler("cpu", init_scale=256.0)):
        m = copy.deepcopy(model)
        opt_a = torch.optim.SGD(m.fc1.parameters(), lr=0.1)
        opt_b = torch.optim.Adam([*m.fc2.parameters(), *m.fc3.parameters()], lr=0.1)
        for t in range(4):
            for opt in (opt_a, opt_b):
                opt.zero_grad()
            scaler.scale(torch.nn.functional.cross_entropy(m(X), y)).backward()
            if t == 1:
                m.fc3.bias.grad[0] = math.inf  # only opt_b sees it
            scaler.step(opt_a)
            scaler.step(opt_b)
            scaler.update()
        results.append((scaler.get_scale(), [p.detach().clone() for p in m.parameters()]))
    (s1, p1), (s2, p2) = results
    assert s1 == s2 == 128.0
    assert all(same_bits(a, b) for a, b in zip(p1, p2, strict=True))


def test_sparse_gradients_match():
    results = []
    for scaler in (DynamicLossScaler(init_scale=2.0**10), torch.amp.GradScaler("cpu", init_scale=2.0**10)):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(20, 4, sparse=True)
        opt = torch.optim.SGD(emb.parameters(), lr=0.1)
        for t in range(3):
            opt.zero_grad()
            loss = emb(torch.tensor([1, 3, 3, 7])).pow(2).sum()
            scaler.scale(loss).backward()
            if t == 1:
                emb.weight.grad._values()[0, 0] = math.nan
            scaler.step(opt)
            scaler.update()
        results.append((scaler.get_scale(), emb.weight.detach().clone()))
    assert results[0][0] == results[1][0]
    assert same_bits(results[0][1], results[1][1])


# -- misuse raises the same kind of error as GradScaler -------------------------------


def _scaled_backward(scaler, opt, model):
    opt.zero_grad()
    scaler.scale(model(torch.randn(4, 5)).sum()).backward()


@pytest.mark.parametrize(
    "calls",
    [
        ["unscale_", "unscale_"],  # twice before update
        ["step", "unscale_"],  # after step
        ["step", "step"],  # step twice
    ],
)
def test_misuse_raises_runtime_error_like_gradscaler(calls):
    for scaler in (DynamicLossScaler(), torch.amp.GradScaler("cpu")):
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _scaled_backward(scaler, opt, model)
        getattr(scaler, calls[0])(opt)
        with pytest.raises(RuntimeError):
            getattr(scaler, calls[1])(opt)


def test_unscale_twice_message_names_the_problem():
    scaler, model = DynamicLossScaler(), Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _scaled_backward(scaler, opt, model)
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)


def test_closure_and_calls_before_scale_raise():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="before scale"):
        DynamicLossScaler().step(opt)
    with pytest.raises(RuntimeError, match="before scale"):
        DynamicLossScaler().update()
    scaler = DynamicLossScaler()
    _scaled_backward(scaler, opt, model)
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.step(opt, closure=lambda: 0.0)


def test_update_without_any_inf_check_raises():
    scaler = DynamicLossScaler()
    scaler.scale(torch.ones(()))
    with pytest.raises(RuntimeError, match="update"):
        scaler.update()


def test_fp16_gradients_are_refused_like_gradscaler():
    for scaler in (DynamicLossScaler(), torch.amp.GradScaler("cpu")):
        model = Net(torch.float16)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        opt.zero_grad()
        scaler.scale(model(torch.randn(4, 5, dtype=torch.float16)).float().sum()).backward()
        with pytest.raises(ValueError, match="FP16 gradients"):
            scaler.unscale_(opt)


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
    assert ours.scaler.state_dict() == {"scale": to_float32(1000.0)}


def test_static_scaler_steps_on_inf_and_poisons_the_weights():
    torch.manual_seed(0)
    run = Run(Net(), "sgd", StaticLossScaler(2.0**10), torch.randn(8, 5), torch.randint(0, 3, (8,)))
    run.backward()
    run.inject([(0, 0, "inf")])
    assert run.scaler.step(run.opt) is True
    run.scaler.update()
    assert run.scaler.history == [ScaleRecord(0, 1024.0, True, False)]
    assert not torch.isfinite(run.model.fc1.weight).all()


def test_history_records_scale_used_and_skips():
    ours, _ = _pair(init_scale=16.0, growth_interval=2)
    _iterate([ours])
    _iterate([ours], faults=[(0, 0, "nan")])
    _iterate([ours])
    assert ours.scaler.history == [
        ScaleRecord(0, 16.0, False, False),
        ScaleRecord(1, 16.0, True, True),
        ScaleRecord(2, 8.0, False, False),
    ]


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


def test_bad_new_scale_and_outputs_raise_value_error():
    scaler = DynamicLossScaler()
    with pytest.raises(ValueError, match="outputs"):
        scaler.scale(3.0)
    scaler.scale(torch.ones(()))
    with pytest.raises(ValueError, match="new_scale"):
        scaler.update(new_scale=-1.0)


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


def _snapshot(scaler):
    return scaler.state_dict(), list(scaler.history), scaler.get_scale()


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
    before = _snapshot(ours.scaler)
    with pytest.raises(scaling.ScaleUnderflowError, match="backoff_factor") as info:
        ours.scaler.update()
    assert isinstance(info.value, RuntimeError) and not isinstance(info.value, ZeroDivisionError)
    assert _snapshot(ours.scaler) == before  # nothing changed: not the scale, not the history
    with pytest.raises(scaling.ScaleUnderflowError):  # and it stays refused, never a ZeroDivisionError
        ours.scaler.update()


@pytest.mark.parametrize(
    "new_scale",
    [
        1e-50,
        2.0**-127,
        0.0,
        -1.0,
        math.nan,
        math.inf,
        1e39,
        torch.tensor(1e-50, dtype=torch.float64),
        torch.tensor(math.nan),
    ],
)
def test_update_with_a_bad_new_scale_is_refused_and_changes_nothing(new_scale):
    ours, ref = _pair(init_scale=64.0, growth_interval=2)
    for run in (ours, ref):
        run.backward()
        run.scaler.step(run.opt)
    before = _snapshot(ours.scaler)
    with pytest.raises(ValueError, match="new_scale"):
        ours.scaler.update(new_scale)
    assert _snapshot(ours.scaler) == before
    ours.scaler.update()  # the iteration is still open: a plain update() ends it, as GradScaler's does
    ref.scaler.update()
    assert ours.scaler.state_dict() == ref.scaler.state_dict()


@pytest.mark.parametrize(
    "new_scale, error",
    [
        (True, TypeError),
        ("8", TypeError),
        ([8.0], TypeError),
        (torch.tensor([1.0, 2.0]), ValueError),
        (torch.tensor(True), TypeError),
        (torch.tensor(2.0 + 1j), TypeError),
    ],
)
def test_update_with_a_new_scale_of_the_wrong_kind_names_it(new_scale, error):
    scaler = DynamicLossScaler()
    scaler.scale(torch.ones(()))
    with pytest.raises(error, match="new_scale"):
        scaler.update(new_scale)
    assert scaler.history == []


@pytest.mark.parametrize("new_scale", [np.float32(3.0), np.int64(8), 5, torch.tensor(7, dtype=torch.int32)])
def test_update_accepts_numpy_scalars_ints_and_integer_tensors(new_scale):
    scaler = DynamicLossScaler()
    scaler.scale(torch.ones(()))
    scaler.update(new_scale)
    assert scaler.get_scale() == to_float32(float(new_scale))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"backoff_factor": 1e-300}, "backoff_factor"),  # every backoff from any scale gives 0
        ({"backoff_factor": scaling.MIN_BACKOFF_FACTOR / 2}, "backoff_factor"),
        ({"backoff_factor": True}, "backoff_factor"),
        ({"backoff_factor": "0.5"}, "backoff_factor"),
        ({"backoff_factor": None}, "backoff_factor"),
        ({"growth_factor": 1e300}, "growth_factor"),  # every growth from any scale overflows
        ({"growth_factor": scaling.MAX_GROWTH_FACTOR * 2}, "growth_factor"),
        ({"growth_factor": -math.inf}, "growth_factor"),
        ({"growth_factor": np.bool_(True)}, "growth_factor"),
        ({"growth_interval": 2**31}, "growth_interval"),  # GradScaler's tracker is an int32
        ({"growth_interval": np.float64(3.0)}, "growth_interval"),
        ({"growth_interval": None}, "growth_interval"),
        ({"record_history": "no"}, "record_history"),
        ({"record_history": 1}, "record_history"),
    ],
)
def test_more_bad_dynamic_arguments_are_refused(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DynamicLossScaler(**kwargs)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"backoff_factor": "0.5"}, "backoff_factor"),
        ({"growth_interval": 2.5}, "growth_interval"),
        ({"init_scale": None}, "init_scale"),
    ],
)
def test_wrong_types_raise_type_error(kwargs, name):
    with pytest.raises(TypeError, match=name):
        DynamicLossScaler(**kwargs)


def test_factors_at_their_bounds_still_match_gradscaler():
    for kwargs, faults in [
        (dict(init_scale=FLOAT32_MAX, backoff_factor=scaling.MIN_BACKOFF_FACTOR), [(0, 0, "inf")]),
        (dict(init_scale=FLOAT32_TINY, growth_factor=scaling.MAX_GROWTH_FACTOR, growth_interval=1), []),
    ]:
        ours, ref = _pair(**kwargs)
        _iterate([ours, ref], faults)
        assert ours.scaler.state_dict() == ref.scaler.state_dict()


def test_numpy_scalars_are_accepted_as_numbers():
    kwargs = dict(init_scale=1024.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    ours = DynamicLossScaler(
        init_scale=np.float32(1024.0),
        growth_factor=np.float64(2.0),
        backoff_factor=np.float32(0.5),
        growth_interval=np.int64(3),
    )
    assert ours.state_dict() == torch.amp.GradScaler("cpu", **kwargs).state_dict()
    assert StaticLossScaler(np.int32(8)).get_scale() == 8.0
    quiet = StaticLossScaler(8.0, record_history=np.bool_(False))
    assert quiet.record_history is False


@pytest.mark.parametrize(
    "attribute, value",
    [
        ("growth_factor", 0.5),
        ("growth_factor", "2"),
        ("backoff_factor", 1.5),
        ("backoff_factor", 0.0),
        ("growth_interval", 0),
        ("growth_interval", 1.5),
    ],
)
def test_setting_a_bad_factor_or_interval_is_refused(attribute, value):
    scaler = DynamicLossScaler()
    before = scaler.state_dict()
    with pytest.raises(ValueError, match=attribute):
        setattr(scaler, attribute, value)
    assert scaler.state_dict() == before


def test_growth_interval_cannot_be_set_at_or_below_the_clean_steps_counted():
    ours, _ = _pair(init_scale=8.0, growth_interval=5)
    for _ in range(3):
        _iterate([ours])
    with pytest.raises(ValueError, match="growth_interval"):
        ours.scaler.growth_interval = 3
    assert ours.scaler.growth_interval == 5
    ours.scaler.growth_interval = 4
    _iterate([ours])
    assert ours.scaler.get_scale() == 16.0  # the fourth clean step grew it


# -- load_state_dict checks everything first and changes nothing on refusal -------------

GOOD_STATE = {
    "scale": 4.0,
    "growth_factor": 3.0,
    "backoff_factor": 0.25,
    "growth_interval": 7,
    "_growth_tracker": 2,
}


def _without(key):
    return {k: v for k, v in GOOD_STATE.items() if k != key}


@pytest.mark.parametrize(
    "state, name, error",
    [
        (_without("scale"), "'scale'", ValueError),
        (_without("growth_factor"), "'growth_factor'", ValueError),
        (_without("_growth_tracker"), "'_growth_tracker'", ValueError),
        ({**GOOD_STATE, "growth_intervall": 7}, "growth_intervall", ValueError),  # a typo, not ignored
        ({**_without("growth_interval"), "growth_intervall": 7}, "growth_intervall", ValueError),
        ({**GOOD_STATE, "scale": 1e-50}, "scale", ValueError),
        ({**GOOD_STATE, "scale": 2.0**-149}, "scale", ValueError),
        ({**GOOD_STATE, "scale": math.nan}, "scale", ValueError),
        ({**GOOD_STATE, "scale": "4"}, "scale", TypeError),
        ({**GOOD_STATE, "growth_factor": 1.0}, "growth_factor", ValueError),
        ({**GOOD_STATE, "backoff_factor": 1e-300}, "backoff_factor", ValueError),
        ({**GOOD_STATE, "backoff_factor": None}, "backoff_factor", TypeError),
        ({**GOOD_STATE, "growth_interval": 0}, "growth_interval", ValueError),
        ({**GOOD_STATE, "growth_interval": 7.0}, "growth_interval", TypeError),
        ({**GOOD_STATE, "_growth_tracker": 7}, "_growth_tracker", ValueError),  # == interval: never grows
        ({**GOOD_STATE, "_growth_tracker": -1}, "_growth_tracker", ValueError),
        ({**GOOD_STATE, "_growth_tracker": True}, "_growth_tracker", TypeError),
        ({}, "empty", ValueError),
        ([("scale", 4.0)], "state_dict", TypeError),
        (None, "state_dict", TypeError),
    ],
)
def test_bad_state_dicts_are_refused_before_anything_changes(state, name, error):
    ours, _ = _pair(init_scale=1024.0, growth_interval=3)
    _iterate([ours])  # scale set, tracker 1
    before = _snapshot(ours.scaler)
    with pytest.raises(error, match=name):
        ours.scaler.load_state_dict(state)
    assert _snapshot(ours.scaler) == before


def test_empty_state_dict_is_still_a_runtime_error_like_gradscalers():
    with pytest.raises(RuntimeError):
        torch.amp.GradScaler("cpu").load_state_dict({})
    with pytest.raises(RuntimeError, match="empty"):
        DynamicLossScaler().load_state_dict({})


def test_state_dict_keys_are_gradscalers_and_a_good_state_loads_into_both():
    ours, ref = DynamicLossScaler(), torch.amp.GradScaler("cpu")
    assert list(ours.state_dict()) == list(ref.state_dict())
    ours.load_state_dict(GOOD_STATE)
    ref.load_state_dict(GOOD_STATE)
    assert ours.state_dict() == ref.state_dict() == GOOD_STATE
    numpy_state = {k: (np.int64(v) if isinstance(v, int) else np.float64(v)) for k, v in GOOD_STATE.items()}
    fresh = DynamicLossScaler()
    fresh.load_state_dict(numpy_state)
    assert fresh.state_dict() == GOOD_STATE


@pytest.mark.parametrize(
    "state, name",
    [
        ({"scale": 4.0, "growth_factor": 2.0}, "growth_factor"),
        ({"scal": 4.0}, "scal"),
        ({"scale": 0.0}, "scale"),
        ({}, "empty"),
    ],
)
def test_static_scaler_load_state_dict_checks_first(state, name):
    scaler = StaticLossScaler(8.0)
    scaler.scale(torch.ones(()))
    with pytest.raises(ValueError, match=name):
        scaler.load_state_dict(state)
    assert scaler.get_scale() == 8.0 and scaler.state_dict() == {"scale": 8.0}
    scaler.load_state_dict({"scale": 2.0})
    assert scaler.get_scale() == 2.0


# -- duck-typed arguments get a TypeError naming them ------------------------------------


@pytest.mark.parametrize("method", ["unscale_", "step"])
@pytest.mark.parametrize("optimizer", [None, "adam", torch.nn.Linear(2, 2), [torch.zeros(2)]])
def test_optimizer_arguments_must_be_optimizers(method, optimizer):
    for scaler in (StaticLossScaler(8.0), DynamicLossScaler()):
        scaler.scale(torch.ones(()))
        with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
            getattr(scaler, method)(optimizer)
        assert scaler._states == {}  # nothing recorded for the bad argument


@pytest.mark.parametrize(
    "outputs, what",
    [
        ("x", "outputs"),
        (None, "outputs"),
        (3.0, "outputs"),
        ([torch.ones(()), "x"], "outputs"),
        ((torch.ones(()), [torch.ones(2), None]), "outputs"),
        (torch.ones(3, dtype=torch.int64), "floating-point"),
        (torch.ones(3, dtype=torch.bool), "floating-point"),
    ],
)
def test_scale_refuses_what_is_not_a_loss_and_changes_nothing(outputs, what):
    scaler = DynamicLossScaler(init_scale=0.1)
    with pytest.raises(TypeError, match=what):
        scaler.scale(outputs)
    assert scaler._scale is None and scaler.get_scale() == 0.1  # not even the lazy float32 rounding


@pytest.mark.parametrize("x", [0.1, np.float32(0.1), np.float64(1e39), 7, np.int64(2**60), math.inf])
def test_to_float32_rounds_like_torch(x):
    expected = torch.tensor(float(x), dtype=torch.float64).float().item()
    assert to_float32(x) == expected or (math.isnan(expected) and math.isnan(to_float32(x)))


def test_check_and_unscale_of_no_gradients_finds_nothing():
    found_inf = scaling.check_and_unscale_([], torch.tensor(0.5))
    assert found_inf.dtype == torch.bool and not found_inf


@pytest.mark.parametrize("new_scale", [1e-50, -1.0, "2", torch.tensor([1.0, 2.0])])
def test_a_bad_new_scale_is_named_even_before_the_first_scale_call(new_scale):
    with pytest.raises(ValueError, match="new_scale"):
        DynamicLossScaler().update(new_scale)
    with pytest.raises(RuntimeError, match="before scale"):  # a good one: GradScaler's misuse error
        DynamicLossScaler().update(8.0)


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
