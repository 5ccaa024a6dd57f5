"""amp_lab.recipe: the decision flow, the training step, resuming from a checkpoint, evaluation.

Oracles: float64 gradients of the same model (accumulation, unscale_ before clipping),
torch.autocast itself (the chosen dtype, inference dtypes), torch.amp.GradScaler and the lr
scheduler's own warning, and the uninterrupted run (checkpoint resume, bit for bit).
"""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest
import torch
import torch.nn.functional as F

from amp_lab import recipe
from amp_lab.data import load_digits
from amp_lab.hardware import describe, tensor_core_generation


@pytest.fixture(scope="module")
def data():
    return load_digits(device="cpu")


def fresh(dtype, *, seed=0, init_scale=2.0**16, growth_interval=2000, lr=3e-3, with_scheduler=False):
    model = recipe.make_model(64, 10, hidden=32, seed=seed, device="cpu")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    scaler = recipe.make_scaler(dtype, "cpu", init_scale=init_scale, growth_interval=growth_interval)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=30) if with_scheduler else None
    return model, opt, scaler, scheduler


# --------------------------------------------------------------------------------------------
# The decision flow
# --------------------------------------------------------------------------------------------


def machine(**changes):
    return dataclasses.replace(describe("cpu"), **changes)


def cuda_machine(capability, bf16):
    return machine(
        race_device="cuda",
        cuda_available=True,
        gpu_name="test GPU",
        capability=capability,
        tensor_cores=tensor_core_generation(capability),
        bf16_supported=bf16,
    )


NO_FLAGS = {"avx512_bf16": False, "amx_bf16": False, "avx512_fp16": False}


@pytest.mark.parametrize(
    "report, dtype, use_scaler, speedup",
    [
        (cuda_machine((8, 0), True), torch.bfloat16, False, True),  # A100
        (cuda_machine((9, 0), True), torch.bfloat16, False, True),  # H100
        (cuda_machine((7, 0), False), torch.float16, True, True),  # V100
        (cuda_machine((7, 5), False), torch.float16, True, True),  # T4
        (cuda_machine((6, 1), False), torch.float16, True, False),  # Pascal: no Tensor Cores
        (machine(cpu_flags={**NO_FLAGS, "amx_bf16": True}), torch.bfloat16, False, True),
        (machine(cpu_flags={**NO_FLAGS, "avx512_bf16": True}), torch.bfloat16, False, True),
        (machine(cpu_flags=NO_FLAGS), torch.bfloat16, False, False),  # AVX2 only, like this machine
        (machine(cpu_flags=dict.fromkeys(NO_FLAGS)), torch.bfloat16, False, None),  # unknown
    ],
)
def test_choose_amp_dtype(report, dtype, use_scaler, speedup):
    choice = recipe.choose_amp_dtype(report)
    assert (choice.dtype, choice.use_scaler, choice.expect_speedup) == (dtype, use_scaler, speedup)
    assert choice.device == report.race_device
    text = str(choice)
    assert text.startswith("1. Is the course running on a CUDA GPU?")
    assert recipe.dtype_name(dtype) in text.splitlines()[-2]


def test_choice_matches_what_cpu_autocast_runs_and_needs_no_scaler():
    choice = recipe.choose_amp_dtype(device="cpu")
    a = torch.randn(8, 8)
    with torch.autocast("cpu", dtype=choice.dtype):
        assert (a @ a).dtype == choice.dtype
    # bfloat16 keeps float32's exponent range: the smallest normal float32 survives the cast.
    tiny = torch.finfo(torch.float32).tiny
    assert torch.tensor(tiny).to(choice.dtype).item() != 0.0
    assert not choice.use_scaler


def test_make_scaler_enabled_only_for_float16():
    assert recipe.make_scaler(torch.float16, "cpu").is_enabled()
    assert not recipe.make_scaler("bf16", "cpu").is_enabled()
    assert not recipe.make_scaler(torch.float32, "cpu").is_enabled()
    with pytest.raises(ValueError, match="dtype"):
        recipe.make_scaler(torch.float64, "cpu")
    with pytest.raises(ValueError, match="init_scale"):
        recipe.make_scaler(torch.float16, "cpu", init_scale=0)


# --------------------------------------------------------------------------------------------
# Batches and gradient accumulation
# --------------------------------------------------------------------------------------------


def test_micro_batches_are_a_pure_function_of_the_step(data):
    a = recipe.micro_batches(data.train, step=7, batch_size=32, accumulation_steps=2)
    b = recipe.micro_batches(data.train, step=7, batch_size=32, accumulation_steps=2)
    assert len(a) == 2 and all(torch.equal(x, y) for (x, _), (y, _) in zip(a, b, strict=True))
    # Accumulating two micro-batches of 32 covers exactly the examples of one batch of 64.
    (X64, y64), = recipe.micro_batches(data.train, step=7, batch_size=64)
    assert torch.equal(torch.cat([a[0][0], a[1][0]]), X64) and torch.equal(torch.cat([a[0][1], a[1][1]]), y64)
    # One epoch never repeats an example.
    per_epoch = len(data.train) // 64
    seen = torch.cat([recipe.micro_batches(data.train, step=s, batch_size=64)[0][1] for s in range(per_epoch)])
    assert len(seen) == per_epoch * 64
    with pytest.raises(ValueError, match="batch_size"):
        recipe.micro_batches(data.train, step=0, batch_size=len(data.train) + 1)


def float64_gradients(model, batches):
    """The oracle: the gradient of the mean loss over all examples of the step, in float64."""
    ref = copy.deepcopy(model).double()
    X = torch.cat([b[0] for b in batches]).double()
    y = torch.cat([b[1] for b in batches])
    F.cross_entropy(ref(X), y).backward()
    return [p.grad for p in ref.parameters()]


def test_accumulated_gradients_equal_the_full_batch_gradient(data):
    model, opt, scaler, _ = fresh(torch.float32)
    batches = recipe.micro_batches(data.train, step=0, batch_size=16, accumulation_steps=4)
    expected = float64_gradients(model, batches)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the step leaves the weights alone
    recipe.train_step(model, opt, scaler, batches, dtype=torch.float32, max_grad_norm=None)
    for p, g in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad.double(), g, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 1e-5), (torch.bfloat16, 0.05), (torch.float16, 0.01)])
def test_unscale_before_clipping(data, dtype, rtol):
    """The clipped gradients are the true gradients scaled to max_grad_norm, whatever the loss scale."""
    model, _, scaler, _ = fresh(dtype, init_scale=2.0**10)
    batches = recipe.micro_batches(data.train, step=0, batch_size=32, accumulation_steps=2)
    expected = float64_gradients(model, batches)
    true_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in expected]))
    max_norm = float(true_norm) / 4  # clipping must bite
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    result = recipe.train_step(model, opt, scaler, batches, dtype=dtype, max_grad_norm=max_norm)
    assert not result.skipped
    assert result.grad_norm == pytest.approx(float(true_norm), rel=rtol)
    for p, g in zip(model.parameters(), expected, strict=True):
        clipped = g * (max_norm / true_norm)
        torch.testing.assert_close(p.grad.double(), clipped, rtol=rtol, atol=rtol * float(clipped.abs().max()))


def test_a_step_with_overflowing_gradients_is_skipped(data):
    model, opt, scaler, _ = fresh(torch.float16, init_scale=2.0**24)
    before = [p.detach().clone() for p in model.parameters()]
    batches = recipe.micro_batches(data.train, step=0, batch_size=64)
    result = recipe.train_step(model, opt, scaler, batches, dtype=torch.float16)
    assert result.skipped and result.scale == 2.0**24
    assert scaler.get_scale() == 2.0**23  # GradScaler's backoff
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    # The next step, at half the scale, is judged again by the scaler.
    assert recipe.train_step(model, opt, scaler, batches, dtype=torch.float16).scale == 2.0**23


# --------------------------------------------------------------------------------------------
# The stumbles the instructor guide answers
# --------------------------------------------------------------------------------------------


def test_naive_scheduler_after_a_skipped_first_step_warns_but_train_does_not(data):
    batches = recipe.micro_batches(data.train, step=0, batch_size=64)
    model, opt, scaler, scheduler = fresh(torch.float16, init_scale=2.0**24, with_scheduler=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert recipe.train_step(model, opt, scaler, batches, dtype=torch.float16).skipped
        scheduler.step()  # what the usual loop does
    assert any("lr_scheduler.step()" in str(w.message) for w in caught)

    model, opt, scaler, scheduler = fresh(torch.float16, init_scale=2.0**24, with_scheduler=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        history = recipe.train(model, opt, scaler, data.train, dtype=torch.float16, num_steps=3, scheduler=scheduler)
    assert history.skipped[0]
    assert scheduler.last_epoch == 3 - history.num_skipped


def test_half_model_cannot_be_unscaled():
    model = recipe.make_model(4, 2, hidden=4).half()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    loss = model(torch.randn(3, 4, dtype=torch.float16)).float().sum()
    scaler.scale(loss).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(opt)


# --------------------------------------------------------------------------------------------
# Checkpoints: a resumed run equals the uninterrupted one, bit for bit
# --------------------------------------------------------------------------------------------

TOTAL, CUT = 10, 4
RUN = dict(batch_size=32, accumulation_steps=2)


def run_with_resume(data, dtype, tmp_path, *, load_scaler=True, **scaler_kw):
    model, opt, scaler, scheduler = fresh(dtype, with_scheduler=True, **scaler_kw)
    first = recipe.train(model, opt, scaler, data.train, dtype=dtype, num_steps=CUT, scheduler=scheduler, **RUN)
    path = recipe.save_checkpoint(tmp_path / "ckpt.pt", model, opt, scaler, step=CUT, scheduler=scheduler)
    # A new process would build everything afresh: different initial weights prove the load works.
    model, opt, scaler, scheduler = fresh(dtype, seed=123, with_scheduler=True, **scaler_kw)
    if load_scaler:
        start = recipe.load_checkpoint(path, model, opt, scaler, scheduler=scheduler)
    else:  # the classic mistake: restore model and optimizer only
        throwaway = recipe.make_scaler(dtype, "cpu")
        start = recipe.load_checkpoint(path, model, opt, throwaway, scheduler=scheduler)
    assert start == CUT
    second = recipe.train(
        model, opt, scaler, data.train, dtype=dtype, num_steps=TOTAL - CUT, start_step=start, scheduler=scheduler, **RUN
    )
    return first, second, model


@pytest.mark.parametrize(
    "dtype, scaler_kw",
    [
        (torch.float32, {}),
        (torch.bfloat16, {}),
        # float16 with a scale that starts too high and grows every 2 steps: skips and growth
        # on both sides of the cut, so the scaler's state matters.
        (torch.float16, {"init_scale": 2.0**20, "growth_interval": 2}),
    ],
)
def test_resumed_run_equals_uninterrupted_run_bit_for_bit(data, tmp_path, dtype, scaler_kw):
    model, opt, scaler, scheduler = fresh(dtype, with_scheduler=True, **scaler_kw)
    whole = recipe.train(model, opt, scaler, data.train, dtype=dtype, num_steps=TOTAL, scheduler=scheduler, **RUN)
    first, second, resumed = run_with_resume(data, dtype, tmp_path, **scaler_kw)
    assert first.losses + second.losses == whole.losses
    assert first.scales + second.scales == whole.scales
    assert first.skipped + second.skipped == whole.skipped
    assert all(torch.equal(p, q) for p, q in zip(resumed.parameters(), model.parameters(), strict=True))
    if dtype == torch.float16:
        assert any(whole.skipped[:CUT]) and len(set(whole.scales)) > 2


def test_forgetting_the_scaler_state_changes_the_resumed_run(data, tmp_path):
    kw = {"init_scale": 2.0**20, "growth_interval": 2}
    good_first, good_second, _ = run_with_resume(data, torch.float16, tmp_path, **kw)
    _, bad_second, _ = run_with_resume(data, torch.float16, tmp_path, load_scaler=False, **kw)
    assert bad_second.scales != good_second.scales
    assert bad_second.losses != good_second.losses


def test_load_checkpoint_errors(tmp_path):
    model, opt, scaler, scheduler = fresh(torch.float32, with_scheduler=True)
    with pytest.raises(ValueError, match="path"):
        recipe.load_checkpoint(tmp_path / "missing.pt", model, opt, scaler)
    path = recipe.save_checkpoint(tmp_path / "c.pt", model, opt, scaler, step=0)
    with pytest.raises(ValueError, match="scheduler"):
        recipe.load_checkpoint(path, model, opt, scaler, scheduler=scheduler)


# --------------------------------------------------------------------------------------------
# Evaluation under autocast and the comparison
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_evaluate_under_autocast(data, dtype):
    model, opt, scaler, _ = fresh(dtype)
    recipe.train(model, opt, scaler, data.train, dtype=dtype, num_steps=5, batch_size=64)
    model.train()
    ev = recipe.evaluate(model, data.test, dtype=dtype, batch_size=100)
    assert model.training  # mode restored
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        logits = model(data.test.X)
    assert logits.dtype == dtype
    assert ev.accuracy == pytest.approx((logits.argmax(1) == data.test.y).double().mean().item(), abs=1e-12)
    assert ev.num_examples == len(data.test)


def test_amp_halves_what_autograd_saves_for_backward(data):
    model = recipe.make_model(64, 10, hidden=64)
    X, y = data.train.X[:128], data.train.y[:128]
    fp32 = recipe.saved_activation_bytes(model, X, y, dtype=torch.float32)
    bf16 = recipe.saved_activation_bytes(model, X, y, dtype=torch.bfloat16)
    # At least the input and the two hidden activations are kept for backward in float32.
    assert fp32 >= (X.numel() + 2 * 128 * 64) * 4
    assert bf16 < 0.75 * fp32


def test_compare_precisions_measures_each_dtype(data):
    threads = torch.get_num_threads()
    rows = recipe.compare_precisions(data, (torch.float32, "bf16"), num_steps=4, warmup_steps=1, hidden=16, threads=1)
    assert torch.get_num_threads() == threads  # restored
    assert [r.dtype for r in rows] == [torch.float32, torch.bfloat16]
    assert all(r.threads == 1 for r in rows)
    # Both runs saw the same batches in lockstep: their first losses agree to bfloat16 precision.
    assert rows[1].losses[0] == pytest.approx(rows[0].losses[0], rel=2**-6)
    for r in rows:
        assert r.seconds_per_step > 0 and 0.0 <= r.test_accuracy <= 1.0
        assert r.peak_memory_bytes is None and r.num_skipped == 0
    assert rows[1].saved_bytes < rows[0].saved_bytes
    table = recipe.comparison_rows(rows)
    assert len(table) == 2 and len(table[0]) == len(recipe.COMPARISON_HEADER)
    with pytest.raises(ValueError, match="dtypes"):
        recipe.compare_precisions(data, (torch.float64,), num_steps=2)
    with pytest.raises(ValueError, match="num_steps"):
        recipe.compare_precisions(data, num_steps=1, warmup_steps=3)


def test_bad_arguments(data):
    model, opt, scaler, _ = fresh(torch.float32)
    with pytest.raises(ValueError, match="num_steps"):
        recipe.train(model, opt, scaler, data.train, dtype=torch.float32, num_steps=-1)
    with pytest.raises(ValueError, match="max_grad_norm"):
        recipe.train(model, opt, scaler, data.train, dtype=torch.float32, num_steps=1, max_grad_norm=0)
    with pytest.raises(ValueError, match="dtype"):
        recipe.train(model, opt, scaler, data.train, dtype="fp8", num_steps=1)
    with pytest.raises(ValueError, match="hidden"):
        recipe.make_model(64, 10, hidden=0)
    with pytest.raises(ValueError, match="device"):
        recipe.make_model(64, 10, device="tpu")
