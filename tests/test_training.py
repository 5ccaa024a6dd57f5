"""amp_lab.training: the comparison loop of notebook 04 and its widget."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from amp_lab.data import load_digits
from amp_lab.scaling import DynamicLossScaler, StaticLossScaler
from amp_lab.training import (
    _readout_html,
    cpu_threads,
    scaler_explorer,
    train_digits,
)

SMALL = dict(depth=3, width=8, batch_size=32)


@pytest.fixture(scope="module")
def data():
    return load_digits()


def test_runs_record_one_entry_per_step(data):
    run = train_digits(None, dtype=None, num_steps=7, data=data, **SMALL)
    assert len(run.losses) == len(run.zero_fraction) == len(run.scales) == len(run.stepped) == 7
    assert run.scales == [1.0] * 7 and all(run.stepped) and run.finite
    assert 0.0 <= run.test_accuracy <= 1.0
    assert run.label == "FP32"


def test_same_seed_same_run_and_fp32_learns(data):
    a = train_digits(None, dtype=None, num_steps=40, lr=1e-2, data=data, **SMALL)
    b = train_digits(None, dtype=None, num_steps=40, lr=1e-2, data=data, **SMALL)
    assert a.losses == b.losses
    assert sum(a.losses[-5:]) < sum(a.losses[:5])


@pytest.mark.parametrize("max_grad_norm", [None, 0.5])
def test_our_scaler_and_gradscaler_give_identical_runs(data, max_grad_norm):
    kwargs = dict(init_scale=2.0**20, growth_interval=3)
    ours = train_digits(DynamicLossScaler(**kwargs), num_steps=12, data=data, max_grad_norm=max_grad_norm)
    ref = train_digits(
        torch.amp.GradScaler("cpu", **kwargs), num_steps=12, data=data, max_grad_norm=max_grad_norm
    )
    assert ours.losses == ref.losses
    assert ours.scales == ref.scales
    assert ours.stepped == ref.stepped
    assert ours.zero_fraction == ref.zero_fraction
    for p, q in zip(ours.model.parameters(), ref.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert ours.label.endswith("DynamicLossScaler") and ref.label.endswith("GradScaler")


def test_fp16_gradients_of_the_default_network_underflow_and_scaling_recovers_them(data):
    """Step 0 sees the same weights and batch in every run: the zeros differ only by precision."""
    fp32 = train_digits(None, dtype=None, num_steps=1, data=data)
    fp16 = train_digits(None, dtype=torch.float16, num_steps=1, data=data)
    scaled = train_digits(DynamicLossScaler(), dtype=torch.float16, num_steps=1, data=data)
    assert fp16.zero_fraction[0] > fp32.zero_fraction[0] + 0.2
    assert abs(scaled.zero_fraction[0] - fp32.zero_fraction[0]) < 0.02


def test_static_scale_too_large_poisons_the_weights(data):
    run = train_digits(StaticLossScaler(2.0**40), num_steps=3, data=data)
    assert not run.finite
    assert all(run.stepped)  # the static scaler never skips
    assert not all(math.isfinite(v) for v in run.losses)


def test_cpu_threads_restores_the_thread_count():
    before = torch.get_num_threads()
    with cpu_threads(1, torch.device("cpu")):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"num_steps": 0}, "num_steps"),
        ({"batch_size": 0}, "batch_size"),
        ({"lr": -1.0}, "lr"),
        ({"lr": math.nan}, "lr"),
        ({"dtype": "int8"}, "dtype"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
        ({"num_threads": 0}, "num_threads"),
        ({"seed": -1}, "seed"),
        ({"depth": 0}, "depth"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, name):
    with pytest.raises(ValueError, match=name):
        train_digits(**kwargs)


def test_widget_reruns_training_and_redraws(data):
    explorer = scaler_explorer(num_steps=6, growth_interval=2, train_kwargs=SMALL)
    assert explorer.widget.children[0] is explorer.init_scale
    for control, css in [
        (explorer.init_scale, "amp-scaler-init-scale"),
        (explorer.growth_interval, "amp-scaler-growth-interval"),
        (explorer.backoff_factor, "amp-scaler-backoff"),
        (explorer.readout, "amp-scaler-readout"),
        (explorer.pane.image, "amp-scaler-plot"),
    ]:
        assert css in control._dom_classes
    renders, before = explorer.pane.renders, explorer.readout.value

    explorer.init_scale.value = 30  # 2^30: overflows at once, so steps get skipped
    expected = train_digits(
        DynamicLossScaler(init_scale=2.0**30, growth_interval=2), num_steps=6, data=data, **SMALL
    )
    assert explorer.run.scales == expected.scales
    assert explorer.run.stepped == expected.stepped
    assert explorer.run.skipped_steps, "2^30 should overflow FP16 at the first step"
    scaler = DynamicLossScaler(init_scale=2.0**30, growth_interval=2)
    train_digits(scaler, num_steps=6, data=data, **SMALL)
    assert explorer.readout.value == _readout_html(expected, scaler.get_scale()) != before
    assert explorer.pane.renders == renders + 1

    explorer.backoff_factor.value = 0.25
    explorer.growth_interval.value = 1
    scaler = DynamicLossScaler(init_scale=2.0**30, growth_interval=1, backoff_factor=0.25)
    expected = train_digits(scaler, num_steps=6, data=data, **SMALL)
    assert explorer.run.scales == expected.scales
    assert explorer.readout.value == _readout_html(expected, scaler.get_scale())
    assert explorer.pane.renders == renders + 3


def test_recent_figures_and_first_nonfinite_step_read_the_run():
    from amp_lab.training import TrainingRun

    run = TrainingRun(label="x", losses=[4.0, 3.0, 2.0, 1.0], zero_fraction=[0.5, 0.25, 0.25, 0.0])
    assert run.recent_loss(2) == 1.5 and run.recent_loss(10) == 2.5
    assert run.recent_zero_fraction(2) == 0.125
    assert run.first_nonfinite_step is None
    assert math.isnan(TrainingRun(label="empty").recent_loss())
    poisoned = TrainingRun(label="nan", losses=[2.0, 2.1, math.inf, math.nan])
    assert poisoned.first_nonfinite_step == 2 and math.isnan(poisoned.recent_loss(2))
    # summary() prints exactly these figures
    assert f"{run.recent_loss():7.4f}" in run.summary() and "zero gradients  25.0%" in run.summary() and len(run.summary()) <= 100


# -- every bad input gets a clear error, no call hangs, nothing is half-changed ----------


def _fail_if_called(*args, **kwargs):
    raise AssertionError("a refused call must not build anything")


@pytest.fixture
def no_building(monkeypatch):
    """Refusals must come before the network is built or the data loaded."""
    import amp_lab.data
    import amp_lab.training

    monkeypatch.setattr(amp_lab.training, "make_mlp", _fail_if_called)
    monkeypatch.setattr(amp_lab.data, "load_digits", _fail_if_called)


def _dataset(
    data, *, train_X=None, train_y=None, test_X=None, test_y=None, num_features=None, num_classes=None
):
    """A copy of ``data`` with some parts replaced (Split checks its own tensors when built)."""
    from amp_lab.data import Dataset, Split

    return Dataset(
        Split(data.train.X if train_X is None else train_X, data.train.y if train_y is None else train_y),
        Split(data.test.X if test_X is None else test_X, data.test.y if test_y is None else test_y),
        data.num_features if num_features is None else num_features,
        data.num_classes if num_classes is None else num_classes,
        "copy",
    )


@pytest.mark.parametrize(
    "kwargs, name, error",
    [
        ({"num_steps": 10**9}, "num_steps", ValueError),  # would run for days
        ({"num_steps": 100_001}, "num_steps", ValueError),
        ({"num_steps": True}, "num_steps", TypeError),
        ({"num_steps": 5.0}, "num_steps", TypeError),
        ({"num_steps": "5"}, "num_steps", TypeError),
        ({"num_steps": None}, "num_steps", TypeError),
        ({"batch_size": -4}, "batch_size", ValueError),
        ({"batch_size": np.float64(32)}, "batch_size", TypeError),
        ({"lr": math.inf}, "lr", ValueError),
        ({"lr": "0.01"}, "lr", TypeError),
        ({"lr": False}, "lr", TypeError),
        ({"lr": 1e300}, "lr", ValueError),  # torch's Adam: "cannot be converted to type float"
        ({"depth": 10**6}, "depth", ValueError),
        ({"width": 0}, "width", ValueError),
        ({"width": 10**5}, "width", ValueError),
        ({"max_grad_norm": math.nan}, "max_grad_norm", ValueError),
        ({"max_grad_norm": -1.0}, "max_grad_norm", ValueError),
        ({"seed": 2**32}, "seed", ValueError),
        ({"seed": 1.5}, "seed", TypeError),
        ({"num_threads": -3}, "num_threads", ValueError),
        ({"num_threads": 10**6}, "num_threads", ValueError),
        ({"num_threads": True}, "num_threads", TypeError),
        ({"dtype": torch.float32}, "dtype", ValueError),  # FP32 is dtype=None
        ({"dtype": 16}, "dtype", ValueError),
        ({"label": 3}, "label", TypeError),
        ({"device": "tpu"}, "device", ValueError),
        ({"scaler": "dynamic"}, "scaler", TypeError),
        ({"scaler": 2.0**16}, "scaler", TypeError),
        ({"scaler": DynamicLossScaler}, "scaler", TypeError),  # the class, not an instance
        ({"data": "digits"}, "data", TypeError),
        ({"data": (torch.zeros(4, 64), torch.zeros(4, dtype=torch.int64))}, "data", TypeError),
    ],
)
def test_train_digits_refuses_bad_arguments_before_building_anything(kwargs, name, error, no_building):
    with pytest.raises(error, match=name):
        train_digits(**kwargs)


def test_train_digits_accepts_numpy_scalars(data):
    a = train_digits(
        None, dtype=None, num_steps=np.int64(3), lr=np.float32(1e-2), seed=np.uint8(0), data=data, **SMALL
    )
    b = train_digits(None, dtype=None, num_steps=3, lr=float(np.float32(1e-2)), seed=0, data=data, **SMALL)
    assert a.losses == b.losses


@pytest.mark.parametrize(
    "change, name, error",
    [
        (
            lambda d: dict(train_X=d.train.X[:, :10]),
            "data.train.X",
            ValueError,
        ),  # 10 features, model wants 64
        (lambda d: dict(test_X=d.test.X[:, :10]), "data.test.X", ValueError),
        (lambda d: dict(train_X=d.train.X.double()), "float32", ValueError),
        (lambda d: dict(train_X=d.train.X.half()), "float32", ValueError),
        (lambda d: dict(train_y=d.train.y + 1), "labels from 0 to 9", ValueError),  # label 10: out of bounds
        (lambda d: dict(test_y=d.test.y - 1), "labels from 0 to 9", ValueError),
        (lambda d: dict(num_classes=5), "labels from 0 to 4", ValueError),
        (lambda d: dict(num_features=10), "num_features", ValueError),
        (lambda d: dict(num_classes=1), "num_classes", ValueError),
        (lambda d: dict(num_features=64.0), "num_features", TypeError),
        (lambda d: dict(train_X=d.train.X[:0], train_y=d.train.y[:0]), "empty", ValueError),
    ],
)
def test_data_that_does_not_fit_the_network_is_refused_with_a_clear_message(
    data, change, name, error, monkeypatch
):
    import amp_lab.training

    monkeypatch.setattr(amp_lab.training, "make_mlp", _fail_if_called)
    with pytest.raises(error, match=name):
        train_digits(None, dtype=None, num_steps=1, data=_dataset(data, **change(data)), **SMALL)


def test_the_torch_errors_the_checks_replace(data):
    """The oracle for the table above: without the checks, torch fails deep inside the step."""
    model = torch.nn.Linear(64, 10)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        model(data.train.X[:4, :10])
    with pytest.raises(RuntimeError, match="Long"):
        torch.nn.functional.cross_entropy(model(data.train.X[:4]), data.train.y[:4].int())


def test_a_network_too_big_for_memory_is_refused_before_allocating(data, monkeypatch):
    import amp_lab.device
    import amp_lab.training

    monkeypatch.setattr(amp_lab.device, "available_bytes", lambda device=None: 10**6)  # a 1 MB machine
    monkeypatch.setattr(amp_lab.training, "make_mlp", _fail_if_called)
    with pytest.raises(ValueError, match="refused before allocating.*depth or width"):
        train_digits(None, dtype=None, num_steps=1, data=data, depth=8, width=1024)


@pytest.mark.parametrize(
    "num_threads, error",
    [
        (-3, ValueError),
        (0, ValueError),
        (10**6, ValueError),
        (True, TypeError),
        (1.5, TypeError),
        ("2", TypeError),
    ],
)
def test_cpu_threads_refuses_bad_counts_when_called(num_threads, error):
    before = torch.get_num_threads()
    with pytest.raises(error, match="num_threads"):
        cpu_threads(num_threads, torch.device("cpu"))  # refused at the call, not deep in torch on entry
    assert torch.get_num_threads() == before


def test_cpu_threads_accepts_numpy_ints_and_none_and_refuses_a_bad_device():
    before = torch.get_num_threads()
    with cpu_threads(np.int64(1), "cpu"):
        assert torch.get_num_threads() == 1
    with cpu_threads(None, torch.device("cpu")):
        assert torch.get_num_threads() == before
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="device"):
        cpu_threads(1, "tpu")


@pytest.mark.parametrize(
    "kwargs, name, error",
    [
        ({"num_steps": 10**7}, "num_steps", ValueError),  # every slider move would re-run it
        ({"num_steps": 501}, "num_steps", ValueError),
        ({"num_steps": 0}, "num_steps", ValueError),
        ({"log2_init_scale": 33}, "log2_init_scale", ValueError),  # off the slider
        ({"log2_init_scale": 16.0}, "log2_init_scale", TypeError),
        ({"growth_interval": 101}, "growth_interval", ValueError),
        ({"backoff_factor": 0.01}, "backoff_factor", ValueError),  # the slider would clamp it to 0.05
        ({"backoff_factor": 1.0}, "backoff_factor", ValueError),
        ({"train_kwargs": "seed=1"}, "train_kwargs", TypeError),
        ({"train_kwargs": {"num_steps": 5}}, "num_steps", ValueError),
        ({"train_kwargs": {"scaler": None}}, "scaler", ValueError),
        ({"train_kwargs": {"sed": 1}}, "sed", ValueError),
        ({"train_kwargs": {"lr": -1.0}}, "lr", ValueError),
        ({"train_kwargs": {"depth": 10**6}}, "depth", ValueError),
        ({"train_kwargs": {"convert": 3}}, "convert", TypeError),
        ({"device": "tpu"}, "device", ValueError),
    ],
)
def test_scaler_explorer_refuses_bad_arguments_before_building(kwargs, name, error, no_building):
    with pytest.raises(error, match=name):
        scaler_explorer(**kwargs)


def test_convert_replaces_the_model_that_trains():
    seen = {}

    def wrap(model):
        seen["before"] = [p.detach().clone() for p in model.parameters()]
        seen["wrapped"] = torch.nn.Sequential(model)
        return seen["wrapped"]

    run = train_digits(None, dtype=None, num_steps=2, depth=2, width=4, batch_size=8, convert=wrap)
    assert run.model is seen["wrapped"]
    after = list(run.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, seen["before"], strict=True)), (
        "the converted model did not train"
    )


@pytest.mark.parametrize("convert", [lambda m: None, lambda m: torch.nn.ReLU(), 3])
def test_convert_must_give_a_module_with_parameters(convert):
    with pytest.raises(TypeError, match="convert"):
        train_digits(None, dtype=None, num_steps=1, depth=2, width=4, batch_size=8, convert=convert)


# -- 04's reveal after the static runs: codes and numbers, from hand-made runs --------------------


def _run(losses):
    from amp_lab.training import TrainingRun

    return TrainingRun(label="x", losses=list(losses), finite=all(math.isfinite(v) for v in losses))


def test_read_static_runs_names_survivors_and_when_the_others_were_lost():
    from amp_lab.training import read_static_runs

    runs = {
        2.0**4: _run([2.0] * 20),
        2.0**16: _run([1.0] * 12 + [math.nan] * 8),
        2.0**24: _run([1.0, math.nan]),
    }
    reading = read_static_runs(runs)
    assert reading.outcome == "training.static_some_lost"
    assert reading.reasons == ("training.static_lost_early", "training.static_lost_later")
    assert reading.facts["answer"] == "only 2^4"
    assert reading.facts["lost_steps"] == {2.0**16: 12, 2.0**24: 1}
    assert reading.facts["lost_early"] == "2^24" and reading.facts["lost_later"] == "2^16"


def test_read_static_runs_gives_the_gradients_growth_as_a_reason_only_where_it_was_measured():
    """04 c21 said 'because the gradients grow as the network learns' whatever the notebook measured."""
    from amp_lab.training import read_static_runs

    runs = {2.0**4: _run([2.0] * 20), 2.0**16: _run([1.0] * 12 + [math.nan] * 8)}
    assert read_static_runs(runs).reasons == ("training.static_lost_later",)
    grew = read_static_runs(runs, grew=True)
    assert grew.reasons == ("training.static_lost_later", "training.static_gradients_grew")
    assert "2^16" in str(grew)  # its sentence is filled from the facts
    early = {2.0**24: _run([1.0, math.nan])}  # nothing lost later: growth explains nothing here
    assert read_static_runs(early, grew=True).reasons == ("training.static_lost_early",)
    with pytest.raises(TypeError, match="grew"):
        read_static_runs(runs, grew="yes")


def test_read_static_runs_when_all_or_none_survive():
    from amp_lab.training import read_static_runs

    clean = {2.0**k: _run([1.0]) for k in (4, 16, 24)}
    assert read_static_runs(clean).outcome == "training.static_none_lost"
    assert read_static_runs(clean).facts["answer"] == "all three"
    lost = {2.0**k: _run([1.0] * 6 + [math.nan]) for k in (4, 16)}
    reading = read_static_runs(lost)
    assert reading.facts["answer"] == "none" and reading.reasons == ("training.static_lost_mid",)
    assert reading.facts["lost_mid"] == "2^4 and 2^16"
    assert read_static_runs({2.0**4: _run([1.0]), 2.0**16: _run([1.0])}).facts["answer"] == "all 2"
    with pytest.raises(TypeError, match="runs"):
        read_static_runs([_run([1.0])])


class _HandWrittenDynamicScaler:
    """A learner's dynamic scaler (04's exercise 2): its step() returns None, so train_digits must see
    the skipped steps itself (the optimizer's step hook), as it does for GradScaler."""

    def __init__(self, init_scale, growth_interval):
        self.s = torch.tensor(init_scale, dtype=torch.float32)
        self.interval, self.tracker, self.found_inf = growth_interval, 0, False

    def scale(self, loss):
        return loss * self.s

    def unscale_(self, opt):
        inv = (1 / self.s.double()).float()
        self.found_inf = False
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.found_inf |= not bool(torch.isfinite(p.grad).all())
                    p.grad.mul_(inv)

    def step(self, opt):
        if not self.found_inf:
            opt.step()

    def update(self):
        if self.found_inf:
            self.s, self.tracker = (self.s.double() * 0.5).float(), 0
        else:
            self.tracker += 1
            if self.tracker == self.interval:
                grown = (self.s.double() * 2.0).float()
                self.s = grown if torch.isfinite(grown) else self.s
                self.tracker = 0

    def get_scale(self):
        return self.s.item()


def test_a_hand_written_scaler_records_the_same_skips_as_gradscaler(data):
    # 2**30 overflows at once on this network: the first steps are skipped until the scale has backed off
    mine = train_digits(_HandWrittenDynamicScaler(2.0**30, 5), num_steps=12, data=data, **SMALL)
    ref = train_digits(
        torch.amp.GradScaler("cpu", init_scale=2.0**30, growth_interval=5), num_steps=12, data=data, **SMALL
    )
    assert ref.skipped_steps and mine.skipped_steps == ref.skipped_steps
    assert mine.scales == ref.scales and mine.losses == ref.losses


class _RecordingScaler(_HandWrittenDynamicScaler):
    """Records whether each step() called opt.step(): the oracle of TrainingRun.stepped."""

    def __init__(self, *args):
        super().__init__(*args)
        self.decisions = []

    def step(self, opt):
        self.decisions.append(not self.found_inf)
        super().step(opt)


def test_steps_after_a_skip_are_recorded_as_stepped(data):
    # 2**30 overflows at once: the first steps are skipped, the ones after the backoff step again (04 c39
    # listed every step after the first skip as skipped)
    scaler = _RecordingScaler(2.0**30, 100)
    run = train_digits(scaler, num_steps=12, data=data, **SMALL)
    assert False in scaler.decisions and scaler.decisions[-1], scaler.decisions
    assert run.stepped == scaler.decisions


def test_04s_runs_are_long_enough_to_leave_the_plateau(data):
    """04's explorer re-ran 60 steps, inside the ~40-60 step plateau at ln 10 that every run of its network
    starts on (FP32 too): its loss read near chance. At the notebook's NUM_STEPS = 200 it learns."""
    fp32 = train_digits(None, dtype=None, num_steps=200, seed=1, data=data)
    assert abs(sum(fp32.losses[:30]) / 30 - math.log(10)) < 0.05  # the plateau
    explorer = scaler_explorer(num_steps=200, train_kwargs={"seed": 1})
    assert explorer.run.recent_loss(10) < 1.5 < 1.8 < scaler_explorer(train_kwargs={"seed": 1}).run.recent_loss(10)
