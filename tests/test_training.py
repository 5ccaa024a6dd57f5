"""amp_lab.training: the comparison loop of notebook 04 and its widget."""

from __future__ import annotations

import math

import pytest
import torch

from amp_lab.data import load_digits
from amp_lab.scaling import DynamicLossScaler, StaticLossScaler
from amp_lab.training import (
    _readout_html,
    cpu_threads,
    gradient_zero_fraction,
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


def test_gradient_zero_fraction_counts_exact_zeros():
    a = torch.nn.Parameter(torch.zeros(4))
    b = torch.nn.Parameter(torch.zeros(6))
    c = torch.nn.Parameter(torch.zeros(2))  # grad None: counted as zero
    a.grad = torch.tensor([0.0, -0.0, 1e-45, 1.0])
    b.grad = torch.tensor([0.0, 2.0, 3.0, math.nan, 5.0, 6.0])
    assert gradient_zero_fraction([a, b, c]) == (2 + 1 + 2) / 12
    assert gradient_zero_fraction([]) == 0.0


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
    with pytest.raises(ValueError, match="last"):
        run.recent_loss(0)
    # summary() prints exactly these figures
    assert f"{run.recent_loss():7.4f}" in run.summary() and "zero gradients  25.0%" in run.summary()
