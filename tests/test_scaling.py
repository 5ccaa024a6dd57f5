"""amp_lab.scaling against its oracle, torch.amp.GradScaler("cpu"), bit for bit.

The same model is trained twice from the same initial weights, once with our scaler and once
with GradScaler, while the same faults (inf, -inf, NaN) are written into the same scaled
gradients at the same steps.  After every iteration the scale, the skip decision, the
state_dict and every parameter (compared as raw bits) must be identical.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab.scaling import FLOAT32_MAX, DynamicLossScaler, ScaleRecord, StaticLossScaler, to_float32

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


@settings(max_examples=240)
@given(
    faults=schedule,
    init_scale=init_scales,
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
        ours.scaler.update()
        ref.scaler.update()

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


def test_growth_tracker_above_interval_never_grows_like_gradscaler():
    """GradScaler compares the tracker with ``==``: a loaded tracker past the interval never grows."""
    ours, ref = _pair(init_scale=8.0, growth_interval=3)
    state = {
        "scale": 8.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 3,
        "_growth_tracker": 5,
    }
    ours.scaler.load_state_dict(state)
    ref.scaler.load_state_dict(state)
    for _ in range(4):
        _iterate([ours, ref])
        assert ours.scaler.state_dict() == ref.scaler.state_dict()
    assert ours.scaler.get_scale() == 8.0


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
