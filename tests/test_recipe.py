"""amp_lab.recipe: the decision flow, the training step, resuming from a checkpoint, evaluation.

Oracles: float64 gradients of the same model (accumulation, unscale_ before clipping),
torch.autocast itself (the chosen dtype, inference dtypes), torch.amp.GradScaler and the lr
scheduler's own warning, and the uninterrupted run (checkpoint resume, bit for bit).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import statistics
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from amp_lab import amp as amp_choice
from amp_lab import checkpoints, clipping, compare, cost, cpus, gpus, hardware, models, recipe
from amp_lab.data import Split, load_digits
from amp_lab.device import torch_threads
from amp_lab.dtypes import dtype_name
from amp_lab.gpus import tensor_core_generation
from amp_lab.hardware import describe
from amp_lab.intervals import speedup_estimate


@pytest.fixture(scope="module")
def data():
    return load_digits(device="cpu")


def fresh(dtype, *, seed=0, init_scale=2.0**16, growth_interval=2000, lr=3e-3, with_scheduler=False):
    model = models.make_mlp(64, 10, hidden=32, seed=seed, device="cpu")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    scaler = recipe.make_scaler(dtype, "cpu", init_scale=init_scale, growth_interval=growth_interval)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=30) if with_scheduler else None
    return model, opt, scaler, scheduler


# --------------------------------------------------------------------------------------------
# The decision flow
# --------------------------------------------------------------------------------------------


def machine(**changes):
    return dataclasses.replace(describe("cpu"), **changes)


def gpu(capability, name="test GPU"):
    return hardware.report_for("cuda", capability=capability, gpu_name=name, system="Linux")


def cpu(cpuinfo=None, *, sysctl=None, system="Linux"):
    flags = (
        hardware.cpu_flags(cpuinfo, sysctl=sysctl)
        if (cpuinfo or sysctl)
        else dict.fromkeys(hardware.CPU_FLAGS)
    )
    return hardware.report_for("cpu", flags=flags, system=system)


# Excerpts of real /proc/cpuinfo and sysctl text, written out here (not taken from recipe.py).
AVX2_ONLY = "flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2\n"
AVX512_BF16 = "flags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512vl avx512_bf16 avx512_vnni\n"
AMX = "flags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8\n"
GRAVITON3 = "Features\t: fp asimd fphp asimdhp sve svei8mm svebf16 i8mm bf16\nCPU implementer\t: 0x41\nCPU part\t: 0xd40\n"
NEOVERSE_N1 = "Features\t: fp asimd evtstrm aes pmull fphp asimdhp asimddp\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n"
APPLE_M2 = "machdep.cpu.brand_string: Apple M2\nhw.optional.arm64: 1\nhw.optional.arm.FEAT_BF16: 1\n"
NO = None  # "measure it": no prediction


@pytest.mark.parametrize(
    "report, dtype, use_scaler, speedup",
    [
        (gpu((9, 0)), torch.bfloat16, False, True),  # H100
        (gpu((8, 0)), torch.bfloat16, False, True),  # A100
        (gpu((8, 9)), torch.bfloat16, False, True),  # L4 (Ada)
        (gpu((7, 5)), torch.float16, True, True),  # T4 (Turing)
        (gpu((7, 0)), torch.float16, True, True),  # V100 (Volta)
        (gpu((6, 1)), torch.float16, True, False),  # GTX 1080 (Pascal): no Tensor Cores
        (cpu(AMX), torch.bfloat16, False, True),
        (cpu(AVX512_BF16), torch.bfloat16, False, True),
        (cpu(GRAVITON3), torch.bfloat16, False, True),  # ARM bf16
        (cpu(AVX2_ONLY), torch.bfloat16, False, False),  # like the machine the notebooks are stored on
        (cpu(NEOVERSE_N1), torch.bfloat16, False, False),  # ARM without bf16
        (cpu(sysctl=APPLE_M2, system="Darwin"), torch.bfloat16, False, False),  # FP32 on Apple's matrix units
        (cpu(), torch.bfloat16, False, NO),  # nothing known
        (hardware.report_for("mps", system="Darwin"), torch.float16, True, NO),
    ],
    ids=["H100", "A100", "L4", "T4", "V100", "GTX1080", "AMX", "AVX512-BF16", "Graviton3", "AVX2", "NeoverseN1",
         "AppleM2", "unknown", "MPS"],
)  # fmt: skip
def test_choose_amp_dtype(report, dtype, use_scaler, speedup):
    choice = amp_choice.choose_amp_dtype(report)
    assert (choice.dtype, choice.use_scaler, choice.expect_speedup) == (dtype, use_scaler, speedup)
    # One decision: the flow agrees with gpus.amp_dtype_for, device.amp_dtype's rule, and the verdict.
    assert choice.dtype == gpus.amp_dtype_for(report.race_device, report.capability) == report.race_dtype
    assert (choice.use_scaler, choice.expect_speedup) == (report.use_scaler, report.expect_speedup)
    assert choice.verdict == report.verdict and choice.basis
    assert choice.device == report.race_device
    text = str(choice)
    assert text.startswith("1. Is the course running on a CUDA GPU?")
    assert dtype_name(dtype) in text.splitlines()[-2]
    assert ("with torch.amp.GradScaler" in text) == use_scaler


def test_cpu_native_answer_comes_from_cpu_has_native(monkeypatch):
    """The flow asks hardware.cpu_has_native whether the CPU multiplies bf16: change that answer and
    the flow's expectation follows."""
    report = cpu(AVX2_ONLY)
    assert amp_choice.choose_amp_dtype(report).expect_speedup is False
    calls = []

    def says_native(dtype, flags=None):
        calls.append(dtype)
        return True

    monkeypatch.setattr(cpus, "cpu_has_native", says_native)
    choice = amp_choice.choose_amp_dtype(report)
    assert calls and all(d == torch.bfloat16 for d in calls)
    assert "yes" in choice.steps[1][1]


def test_a_replaced_report_gets_its_own_flow_not_the_stale_verdict():
    """A T4 built by replacing GPU facts in this CPU's report (with is_bf16_supported() True, as torch
    says there because it can emulate bf16).  The flow reads the facts, not the stale CPU verdict."""
    t4 = machine(race_device="cuda", cuda_available=True, gpu_name="Tesla T4", capability=(7, 5),
                 tensor_cores=tensor_core_generation((7, 5)), bf16_supported=True)  # fmt: skip
    assert t4.race_dtype == torch.bfloat16  # the stale CPU verdict
    choice = amp_choice.choose_amp_dtype(t4)
    assert (choice.dtype, choice.use_scaler, choice.device) == (torch.float16, True, "cuda")


def test_choice_matches_what_cpu_autocast_runs_and_needs_no_scaler():
    choice = amp_choice.choose_amp_dtype(device="cpu")
    a = torch.randn(8, 8)
    with torch.autocast("cpu", dtype=choice.dtype):
        assert (a @ a).dtype == choice.dtype
    # bfloat16 keeps float32's exponent range: the smallest normal float32 survives the cast.
    tiny = torch.finfo(torch.float32).tiny
    assert torch.tensor(tiny).to(choice.dtype).item() != 0.0
    assert not choice.use_scaler
    assert choice.expect_speedup == cpus.cpu_has_native(torch.bfloat16)


def test_example_machines_table():
    machines = amp_choice.example_machines()
    names = [name for name, _ in machines]
    for wanted in ("T4", "A100", "H100", "Graviton 3", "AVX2"):
        assert any(wanted in n for n in names), wanted
    rows = {row[0]: row for row in amp_choice.choice_rows(machines)}
    assert all(len(row) == len(amp_choice.CHOICE_HEADER) for row in rows.values())
    by = {
        key: next(row for name, row in rows.items() if key in name)
        for key in ("T4", "A100", "H100", "Graviton", "AVX2")
    }
    assert by["T4"][1:4] == ["float16", "yes", "yes, on large matmuls"]
    assert by["A100"][1:3] == by["H100"][1:3] == ["bfloat16", "no"]
    assert by["Graviton"][1:4] == ["bfloat16", "no", "yes, on large matmuls"]
    assert by["AVX2"][1:4] == ["bfloat16", "no", "no"]
    # The CPUs are read from their own cpuinfo text, as this machine's is.
    graviton = dict(machines)[next(n for n in names if "Graviton" in n)]
    assert cpus.cpu_has_native(torch.bfloat16, graviton.cpu_flags) is True


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
    ((X64, y64),) = recipe.micro_batches(data.train, step=7, batch_size=64)
    assert torch.equal(torch.cat([a[0][0], a[1][0]]), X64) and torch.equal(torch.cat([a[0][1], a[1][1]]), y64)
    # One epoch never repeats an example.
    per_epoch = len(data.train) // 64
    seen = torch.cat(
        [recipe.micro_batches(data.train, step=s, batch_size=64)[0][1] for s in range(per_epoch)]
    )
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


@pytest.mark.parametrize(
    "dtype, rtol", [(torch.float32, 1e-5), (torch.bfloat16, 0.05), (torch.float16, 0.01)]
)
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
        torch.testing.assert_close(
            p.grad.double(), clipped, rtol=rtol, atol=rtol * float(clipped.abs().max())
        )


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_disabled_scaler_never_skips_even_on_nan_gradients(data, dtype):
    """bfloat16 and float32 have no loss scaling: the optimizer steps on NaN gradients, so the step is not
    'skipped' (the weights turn NaN)."""
    model, opt, scaler, _ = fresh(dtype)
    with torch.no_grad():
        model[0].weight.fill_(3e38)  # the forward overflows to inf: loss and gradients are NaN
    batches = recipe.micro_batches(data.train, step=0, batch_size=64)
    for step in (recipe.train_step, recipe.sync_free_step):
        result = step(model, opt, scaler, batches, dtype=dtype)
        result = result if isinstance(result, recipe.StepResult) else result.result()
        assert not math.isfinite(result.grad_norm) and not result.skipped
    assert not scaler.is_enabled() and not torch.isfinite(model[-1].weight).all()


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
        history = recipe.train(
            model, opt, scaler, data.train, dtype=torch.float16, num_steps=3, scheduler=scheduler
        )
    assert history.skipped[0]
    assert scheduler.last_epoch == 3 - history.num_skipped


def test_half_model_cannot_be_unscaled():
    model = models.make_mlp(4, 2, hidden=4).half()
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
    first = recipe.train(
        model, opt, scaler, data.train, dtype=dtype, num_steps=CUT, scheduler=scheduler, **RUN
    )
    path = checkpoints.save_checkpoint(
        tmp_path / "ckpt.pt", model, opt, scaler, step=CUT, scheduler=scheduler
    )
    # A new process would build everything afresh: different initial weights prove the load works.
    model, opt, scaler, scheduler = fresh(dtype, seed=123, with_scheduler=True, **scaler_kw)
    if load_scaler:
        start = checkpoints.load_checkpoint(path, model, opt, scaler, scheduler=scheduler)
    else:  # the classic mistake: restore model and optimizer only
        throwaway = recipe.make_scaler(dtype, "cpu")
        start = checkpoints.load_checkpoint(path, model, opt, throwaway, scheduler=scheduler)
    assert start == CUT
    second = recipe.train(
        model,
        opt,
        scaler,
        data.train,
        dtype=dtype,
        num_steps=TOTAL - CUT,
        start_step=start,
        scheduler=scheduler,
        **RUN,
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
    whole = recipe.train(
        model, opt, scaler, data.train, dtype=dtype, num_steps=TOTAL, scheduler=scheduler, **RUN
    )
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
        checkpoints.load_checkpoint(tmp_path / "missing.pt", model, opt, scaler)
    path = checkpoints.save_checkpoint(tmp_path / "c.pt", model, opt, scaler, step=0)
    with pytest.raises(ValueError, match="scheduler"):
        checkpoints.load_checkpoint(path, model, opt, scaler, scheduler=scheduler)


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


def test_amp_halves_what_autograd_saves_for_backward(data):
    model = models.make_mlp(64, 10, hidden=64)
    X, y = data.train.X[:128], data.train.y[:128]
    fp32 = compare.saved_activation_bytes(model, X, y, dtype=torch.float32)
    bf16 = compare.saved_activation_bytes(model, X, y, dtype=torch.bfloat16)
    # At least the input and the two hidden activations are kept for backward in float32.
    assert fp32 >= (X.numel() + 2 * 128 * 64) * 4
    assert bf16 < 0.75 * fp32


def test_compare_precisions_measures_each_dtype(data):
    threads = torch.get_num_threads()
    rows = compare.compare_precisions(
        data, (torch.float32, "bf16"), num_steps=8, warmup_steps=1, hidden=16, threads=1
    )
    assert torch.get_num_threads() == threads  # restored
    assert [r.dtype for r in rows] == [torch.float32, torch.bfloat16]
    assert all(r.context["threads"] == 1 for r in rows)
    # Both runs saw the same batches in lockstep: their first losses agree to bfloat16 precision.
    assert rows[1].losses[0] == pytest.approx(rows[0].losses[0], rel=2**-6)
    for r in rows:
        assert r.seconds_per_step > 0 and 0.0 <= r.test_accuracy <= 1.0
        assert r.peak_memory_bytes is None and r.num_skipped == 0
        assert len(r.step_seconds) == 8 - 1  # the timed steps, after the warm-up
        assert r.seconds_per_step == statistics.median(r.step_seconds)
    # The speed-up pairs step i of FP32 with step i of AMP: the timer's own estimate, from those pairs.
    assert rows[0].speedup is None
    assert rows[1].speedup == speedup_estimate(rows[0].step_seconds, rows[1].step_seconds)
    assert rows[1].saved_bytes < rows[0].saved_bytes
    table = compare.comparison_rows(rows)
    assert len(table) == 2 and all(len(row) == len(compare.COMPARISON_HEADER) for row in table)
    assert table[1][2].startswith(f"{rows[1].speedup.ratio:.2f}x (")
    with pytest.raises(ValueError, match="dtypes"):
        compare.compare_precisions(data, (torch.float64,), num_steps=2)
    with pytest.raises(ValueError, match="num_steps"):
        compare.compare_precisions(data, num_steps=1, warmup_steps=3)


def test_compare_precisions_runs_equal_separate_runs_bit_for_bit(data):
    """Interleaving (and flipping the order every step) changes nothing but the clock: each dtype's
    losses equal those of the same run trained on its own."""
    rows = compare.compare_precisions(data, (torch.float32, "bf16"), num_steps=5, warmup_steps=1, hidden=16,
                                     lr=1e-2, threads=1, batch_size=64)  # fmt: skip
    for r in rows:
        model = models.make_mlp(64, 10, hidden=16, seed=0)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        with torch_threads(1):
            alone = recipe.train(
                model, opt, recipe.make_scaler(r.dtype), data.train, dtype=r.dtype, num_steps=5
            )
        assert list(r.losses) == alone.losses


def test_bad_arguments(data):
    model, opt, scaler, _ = fresh(torch.float32)
    with pytest.raises(ValueError, match="num_steps"):
        recipe.train(model, opt, scaler, data.train, dtype=torch.float32, num_steps=-1)
    with pytest.raises(ValueError, match="max_grad_norm"):
        recipe.train(model, opt, scaler, data.train, dtype=torch.float32, num_steps=1, max_grad_norm=0)
    with pytest.raises(ValueError, match="dtype"):
        recipe.train(model, opt, scaler, data.train, dtype="fp8", num_steps=1)
    with pytest.raises(ValueError, match="hidden"):
        models.make_mlp(64, 10, hidden=0)
    with pytest.raises(ValueError, match="device"):
        models.make_mlp(64, 10, device="tpu")


# --------------------------------------------------------------------------------------------
# Reading the comparison: sentences composed from the numbers and the verdict
# --------------------------------------------------------------------------------------------

# Paired step times (seconds): FP32's wobble, and AMP's at a given ratio to each FP32 step.
FP32_STEPS = tuple(1e-3 * (1 + 0.05 * ((7 * i) % 11) / 10) for i in range(27))
TIMES = {
    "faster": tuple(t / 1.6 for t in FP32_STEPS),
    "slower": tuple(t * 1.8 for t in FP32_STEPS),
    # Half the steps 10% faster, half 10% slower: an interval that straddles 1.
    "too close to call": tuple(t * (0.9 if i % 2 else 1.1) for i, t in enumerate(FP32_STEPS)),
}


def fake_results(amp_dtype, outcome, *, saved=(72_000, 37_000), accuracy=(0.91, 0.90), peaks=(None, None)):
    def row(dtype, steps, saved_bytes, acc, peak, speedup):
        return compare.PrecisionResult(
            dtype=dtype, seconds_per_step=statistics.median(steps), saved_bytes=saved_bytes,
            peak_memory_bytes=peak, test_accuracy=acc, num_skipped=0,
            step_seconds=steps, speedup=speedup,
        )  # fmt: skip

    amp_steps = TIMES[outcome]
    return [
        row(torch.float32, FP32_STEPS, saved[0], accuracy[0], peaks[0], None),
        row(amp_dtype, amp_steps, saved[1], accuracy[1], peaks[1], speedup_estimate(FP32_STEPS, amp_steps)),
    ]


READ_MACHINES = {
    "CPU without bf16": cpu(AVX2_ONLY),
    "CPU with bf16": cpu(AMX),
    "CPU, unknown": cpu(),
    "CUDA Volta": gpu((7, 0), "Tesla V100"),
    "CUDA Ampere": gpu((8, 0), "A100"),
    "CUDA Hopper": gpu((9, 0), "H100"),
}


OUTCOME_CODES = {
    "faster": "recipe.faster",
    "slower": "recipe.slower",
    "too close to call": "recipe.too_close",
}


@pytest.mark.parametrize("outcome", list(TIMES))
@pytest.mark.parametrize("machine_name", list(READ_MACHINES))
def test_read_comparison_codes(machine_name, outcome):
    choice = amp_choice.choose_amp_dtype(READ_MACHINES[machine_name])
    results = fake_results(choice.dtype, outcome)
    reading = compare.read_comparison(results, choice)
    oracle = speedup_estimate(FP32_STEPS, TIMES[outcome])  # the interval, from the timer itself
    assert oracle.outcome == outcome  # the fake times really are faster / slower / too close to call
    assert reading.outcome == OUTCOME_CODES[outcome]
    facts = reading.facts
    assert (facts["speedup"], facts["pairs"]) == (str(oracle), 27)
    assert facts["name"] == dtype_name(choice.dtype) and facts["slowdown"] == 1 / oracle.ratio
    # Does the measurement match the decision flow's expectation?  Hand-written, case by case.
    expect = choice.expect_speedup
    first = {
        (None, "faster"): "recipe.unpredicted", (None, "slower"): "recipe.unpredicted",
        (None, "too close to call"): "recipe.unpredicted",
        (True, "faster"): "recipe.matches_fast", (True, "slower"): "recipe.contradicts_fast",
        (True, "too close to call"): "recipe.undecided_fast",
        (False, "faster"): "recipe.contradicts_slow", (False, "slower"): "recipe.matches_slow",
        (False, "too close to call"): "recipe.undecided_slow",
    }[expect, outcome]  # fmt: skip
    assert reading.reasons[0] == first
    small = {"cuda": "recipe.small_cuda", "cpu": "recipe.small_cpu"}[choice.device]
    assert (small in reading.reasons) == (
        (expect is True and outcome != "faster") or (expect is False and outcome == "too close to call")
    )
    assert ("recipe.see_race" in reading.reasons) == (first in ("recipe.contradicts_fast", "recipe.undecided_fast",
                                                                "recipe.undecided_slow") or outcome == "too close to call")  # fmt: skip
    assert ("recipe.within_noise" in reading.reasons) == (outcome == "too close to call")
    if choice.basis:
        assert facts["basis"] == f" ({choice.basis})"
    assert str(reading)  # every code has its sentence, filled from the facts


def test_read_memory_follows_the_numbers():
    choice = amp_choice.choose_amp_dtype(cpu(AVX2_ONLY))
    half = compare.read_memory(fake_results(torch.bfloat16, "slower"), choice)
    assert half.outcome == "recipe.memory_half" and half.facts["saved_ratio"] == 37_000 / 72_000
    assert half.reasons == ("recipe.weights_stay", "recipe.accuracy_within")
    for saved, code in [((50_000, 50_000), "same"), ((50_000, 40_000), "less"), ((50_000, 60_000), "more")]:
        assert (
            compare.read_memory(fake_results(torch.bfloat16, "slower", saved=saved), choice).outcome
            == f"recipe.memory_{code}"
        )
    worse = compare.read_memory(fake_results(torch.bfloat16, "slower", accuracy=(0.91, 0.86)), choice)
    assert worse.reasons[-1] == "recipe.accuracy_beyond" and worse.facts["accuracy_gap"] == pytest.approx(
        0.05
    )
    edge = compare.read_memory(fake_results(torch.bfloat16, "slower", accuracy=(0.91, 0.86)), choice,
                               accuracy_tolerance=0.05)  # fmt: skip
    assert edge.reasons[-1] == "recipe.accuracy_within" and edge.facts["points"] == 5
    gpu_choice = amp_choice.choose_amp_dtype(gpu((8, 0), "A100"))
    peak = compare.read_memory(
        fake_results(gpu_choice.dtype, "slower", peaks=(4 * 2**20, 3 * 2**20)), gpu_choice
    )
    assert "recipe.peak" in peak.reasons and peak.facts["peak_ratio"] == 0.75
    assert (peak.facts["base_peak"], peak.facts["amp_peak"]) == ("4.00 MiB", "3.00 MiB")


def test_read_comparison_errors():
    choice = amp_choice.choose_amp_dtype(cpu(AVX2_ONLY))
    results = fake_results(torch.bfloat16, "slower")
    with pytest.raises(TypeError, match="choice"):
        compare.read_comparison(results, "bf16")
    with pytest.raises(ValueError, match="results"):
        compare.read_comparison(results[:1], choice)
    with pytest.raises(ValueError, match=r"results\[0\]"):
        compare.read_comparison(results[::-1], choice)
    with pytest.raises(ValueError, match="float16"):
        compare.read_comparison(
            fake_results(torch.bfloat16, "slower"), amp_choice.choose_amp_dtype(gpu((7, 5)))
        )
    with pytest.raises(ValueError, match="accuracy_tolerance"):
        compare.read_memory(results, choice, accuracy_tolerance=-0.1)
    bare = [dataclasses.replace(r, speedup=None, step_seconds=()) for r in results]
    with pytest.raises(ValueError, match="speedup"):
        compare.read_comparison(bare, choice)


# --------------------------------------------------------------------------------------------
# the CUDA paths, tested without a GPU
# --------------------------------------------------------------------------------------------


def test_make_model_weights_are_those_of_manual_seed():
    """The oracle is the recipe before device.seeded: torch.manual_seed(seed), then the construction."""
    for seed, depth in [(0, 2), (7, 3)]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            ref = torch.nn.Sequential(
                *[
                    m
                    for _ in range(depth)
                    for m in (torch.nn.Linear(64 if _ == 0 else 32, 32), torch.nn.ReLU())
                ],
                torch.nn.Linear(32, 10),
            )
        model = models.make_mlp(64, 10, hidden=32, depth=depth, seed=seed)
        assert [n for n, _ in model.named_parameters()] == [n for n, _ in ref.named_parameters()]
        assert all(torch.equal(p, q) for p, q in zip(model.parameters(), ref.parameters(), strict=True))
    with pytest.raises(ValueError, match="seed"):
        models.make_mlp(64, 10, seed=-1)


def test_make_model_leaves_the_learners_cpu_and_cuda_generators_alone(monkeypatch):
    """A fake CUDA device 0 whose generator torch.manual_seed reseeds (as it reseeds every real one):
    after make_model, the CPU's generator and the GPU's are exactly where the learner left them."""
    from amp_lab import device as device_module

    gpu_rng = {}
    monkeypatch.setattr(device_module, "_rng_devices", lambda: [0])
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=0: gpu_rng[int(device)])
    monkeypatch.setattr(
        torch.cuda, "set_rng_state", lambda state, device=0: gpu_rng.__setitem__(int(device), state)
    )
    monkeypatch.setattr(
        torch.cuda, "manual_seed_all", lambda seed: gpu_rng.__setitem__(0, f"reseeded to {seed}")
    )
    torch.manual_seed(1234)
    gpu_rng[0] = "the learner's CUDA state"  # after the learner's own seeding
    cpu_before = torch.random.get_rng_state()
    models.make_mlp(64, 10, hidden=8, seed=5)
    assert torch.equal(torch.random.get_rng_state(), cpu_before)
    assert gpu_rng[0] == "the learner's CUDA state"
    torch.manual_seed(5)  # the fake is live: a bare manual_seed does reseed it
    assert gpu_rng[0] == "reseeded to 5"


def test_sync_free_step_is_train_step_on_the_device(data):
    """The sync-free step (GradScaler's private _get_scale_async and _found_inf_per_device) against the
    public-API step, bit for bit, skipped float16 steps included."""
    for dtype, kw in [(torch.float32, {}), (torch.bfloat16, {}), (torch.float16, {"init_scale": 2.0**24})]:
        runs = [fresh(dtype, **kw) for _ in range(2)]
        for step in range(3):
            batches = recipe.micro_batches(data.train, step=step, batch_size=32, accumulation_steps=2)
            model, opt, scaler, _ = runs[0]
            now = recipe.train_step(model, opt, scaler, batches, dtype=dtype)
            model, opt, scaler, _ = runs[1]
            pending = recipe.sync_free_step(model, opt, scaler, batches, dtype=dtype)
            assert isinstance(pending, recipe.PendingStep) and isinstance(pending.loss, torch.Tensor)
            # repr: a skipped float16 step's gradient norm is inf or NaN, and NaN != NaN
            assert isinstance(now, recipe.StepResult) and repr(pending.result()) == repr(now)
        if dtype == torch.float16:
            assert now.scale < 2.0**24  # the float16 run really skipped steps
        assert all(
            torch.equal(p, q) for p, q in zip(runs[0][0].parameters(), runs[1][0].parameters(), strict=True)
        )


def test_notebook_07_prints_the_steps_alone():
    for step in (recipe.train_step, recipe.sync_free_step):
        source = inspect.getsource(step)
        assert source.startswith(f"def {step.__name__}(") and "_checked" not in source


SYNCS = ("item", "__float__", "__bool__", "__int__", "__index__", "tolist", "cpu", "numpy")


def test_no_host_sync_inside_a_timed_step(data, monkeypatch):
    """Every way a tensor's value reaches Python (each a host sync on a GPU) is counted, and the timer's
    clock says when a step is being timed: between its start and stop nothing may be read.  Adam is made
    fused, as compare_precisions makes it on CUDA, so the float16 run takes the GPU's path through
    GradScaler.step too."""
    state = {"timing": False, "regions": 0}
    inside, outside = [], []
    ticks = iter(range(10**6))

    def clock():
        state["timing"] = not state["timing"]
        state["regions"] += state["timing"]
        return next(ticks) * 1e-3

    def counting(name, original):
        def wrapper(self, *args, **kwargs):
            (inside if state["timing"] else outside).append(name)
            return original(self, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(recipe, "_clock", clock)
    monkeypatch.setattr(
        compare, "_adam", lambda params, *, lr, device: torch.optim.Adam(params, lr=lr, fused=True)
    )
    for name in SYNCS:
        monkeypatch.setattr(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
    rows = compare.compare_precisions(
        data, (torch.float32, "bf16", "fp16"), num_steps=4, warmup_steps=1, hidden=16
    )
    assert state["regions"] == 3 * 4 and not state["timing"]
    assert inside == []
    assert "tolist" in outside  # the counter works: the numbers are read, after the clock stopped
    assert all(len(r.losses) == 4 and all(math.isfinite(v) for v in r.losses) for r in rows)


def test_the_memory_of_a_step_is_its_peak_above_what_was_alive_before_it(monkeypatch):
    """Fake CUDA allocator counters: memory_allocated says ALIVE bytes (data, weights, Adam state) and the
    peak is ALIVE + the step's.  The step alone is reported, measured after a warm-up step (Adam's state
    exists at the baseline), with the peak reset after the baseline was read."""
    ALIVE, STEP = 50 * 2**20, 300_000
    events = []

    def loop():
        for k in range(2):
            events.append(f"step {k}")
            yield

    fakes = dict(
        synchronize=lambda dev: events.append("sync"),
        memory_allocated=lambda dev: events.append("allocated") or ALIVE,
        reset_peak_memory_stats=lambda dev: events.append("reset"),
        max_memory_allocated=lambda dev: events.append("peak") or ALIVE + STEP,
    )
    for name, fake in fakes.items():
        monkeypatch.setattr(torch.cuda, name, fake)
    assert compare._step_memory(loop(), torch.device("cuda")) == STEP
    assert events == ["step 0", "sync", "allocated", "reset", "step 1", "sync", "peak"]


def test_compare_precisions_uses_fused_adam_only_on_cuda():
    """Fused on CUDA (no found_inf.item() in GradScaler.step); on the CPU the default Adam, whose losses
    the stored notebooks and the bit-for-bit tests hold (the CPU's fused Adam differs in the last bit)."""
    params = [torch.nn.Parameter(torch.zeros(3))]
    assert compare._adam(params, lr=1e-3, device=torch.device("cpu")).defaults["fused"] is False
    # torch.device("cuda") is only a description here: the optimizer is built, never stepped.
    assert compare._adam(params, lr=1e-3, device=torch.device("cuda")).defaults["fused"] is True


def test_step_flops_counts_the_matmuls_autograd_runs(data):
    """Oracle: torch's own FLOP counter over one real forward and backward (the data needs no
    gradient, so the first Linear's input gradient is never computed)."""
    from torch.utils.flop_counter import FlopCounterMode

    for hidden, depth, batch, acc in [(64, 2, 64, 1), (16, 3, 32, 2), (5, 1, 7, 3)]:
        model = models.make_mlp(64, 10, hidden=hidden, depth=depth)
        X, y = data.train.X[: batch * acc], data.train.y[: batch * acc]
        with FlopCounterMode(display=False) as counter:
            F.cross_entropy(model(X), y).backward()
        expected = counter.get_total_flops()
        got = cost.step_flops(64, 10, hidden=hidden, depth=depth, batch_size=batch, accumulation_steps=acc)
        assert got == expected, (hidden, depth, batch, acc)
    with pytest.raises(ValueError, match="accumulation_steps"):
        cost.step_flops(accumulation_steps=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_step_bytes_is_parameters_adam_inputs_and_activations(data, dtype):
    """Oracle: the real model's parameter count, and the bytes of each Linear's output as autocast makes
    it (captured by forward hooks), written once and read once."""
    model = models.make_mlp(64, 10, hidden=24, depth=3)
    outputs = []
    hooks = [m.register_forward_hook(lambda m, i, o: outputs.append(o.numel() * o.element_size()))
             for m in model if isinstance(m, torch.nn.Linear)]  # fmt: skip
    X = data.train.X[:48]
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        model(X)
    for h in hooks:
        h.remove()
    params = sum(p.numel() for p in model.parameters())
    expected = 4 * params * 2 + 4 * params * 2 + 2 * 4 * params * 2 + X.numel() * 4 + 2 * sum(outputs)
    got = cost.step_bytes(64, 10, hidden=24, depth=3, batch_size=16, accumulation_steps=3, dtype=dtype)
    assert got == expected
    with pytest.raises(ValueError, match="dtype"):
        cost.step_bytes(dtype=torch.float64)


H100_CONTEXT = {
    "device": "cuda:0",
    "device_name": "NVIDIA H100 80GB HBM3",
    "tf32_matmul": False,
    "capability": (9, 0),
}
CPU_CONTEXT = {"device": "cpu", "device_name": "AMD EPYC", "tf32_matmul": None}


def with_context(results, context, *, flops=2.5e6, nbytes=4e5):
    return [
        dataclasses.replace(r, context=dict(context), step_flops=flops, step_bytes=nbytes) for r in results
    ]


@pytest.mark.parametrize("outcome", list(TIMES))
def test_read_comparison_explains_a_gpu_step_by_its_regime(outcome):
    """A step of about a millisecond on an H100, whose datasheet needs nanoseconds of arithmetic and a
    fraction of a microsecond of memory traffic for it: launch/sync-bound, and the sentence says so with
    the numbers, instead of blaming noise or a generic small model."""
    from amp_lab.timing import regime_for

    choice = amp_choice.choose_amp_dtype(gpu((9, 0), "NVIDIA H100 80GB HBM3"))
    results = with_context(fake_results(choice.dtype, outcome, peaks=(4 * 2**20, 3 * 2**20)), H100_CONTEXT)
    amp = results[1]
    oracle = regime_for(amp.seconds_per_step, 2.5e6, 4e5, torch.bfloat16, H100_CONTEXT, unit="bfloat16 step")
    assert amp.regime == oracle and amp.regime.name == "launch-bound"
    reading = compare.read_comparison(results, choice)
    if outcome == "faster":  # the flow's expectation holds: nothing to explain
        assert "recipe.regime" not in reading.reasons
        return
    assert (
        "recipe.regime" in reading.reasons and "recipe.small_cuda" not in reading.reasons
    )  # not the generic reason
    assert reading.facts["regime_text"][1:] == oracle.text[1:]  # the regime's own numbers
    assert "recipe.within_noise" not in reading.reasons


def test_read_comparison_regime_follows_the_numbers():
    """Give the same step enough arithmetic to fill it and the reading says compute-bound instead."""
    choice = amp_choice.choose_amp_dtype(gpu((9, 0), "NVIDIA H100 80GB HBM3"))
    results = with_context(fake_results(choice.dtype, "slower"), H100_CONTEXT, flops=3e12)
    assert results[1].regime.name == "compute-bound"
    assert "recipe.regime" in compare.read_comparison(results, choice).reasons


@pytest.mark.parametrize(
    "context", [CPU_CONTEXT, {"device": "cuda:0", "device_name": "NVIDIA RTX A1000"}, {}]
)
def test_read_comparison_keeps_todays_text_where_the_regime_is_unknown(context):
    """On a CPU, on a GPU the datasheet table does not know, and for rows without a context, the regime
    is unknown and the reading is the one it was before regimes existed."""
    machine = (
        gpu((8, 0), "NVIDIA RTX A1000") if context.get("device", "").startswith("cuda") else cpu(AVX2_ONLY)
    )
    choice = amp_choice.choose_amp_dtype(machine)
    for outcome in TIMES:
        plain = fake_results(choice.dtype, outcome)
        results = with_context(plain, context)
        assert results[1].regime is not None and results[1].regime.name == "unknown"
        assert compare.read_comparison(results, choice).codes == compare.read_comparison(plain, choice).codes
        reasons = compare.read_comparison(results, choice).reasons
        if outcome == "too close to call":
            assert {"recipe.small_cuda", "recipe.small_cpu"} & set(reasons)
            assert "recipe.within_noise" in reasons


def test_the_fp32_rows_regime_uses_the_tf32_rate_when_tf32_is_on():
    """With TF32 on, an Ampere-or-later GPU's "FP32" matmuls run at the TF32 Tensor Core rate: the FP32
    row's arithmetic bound must use that rate, and the plain FP32 rate with TF32 off."""
    from amp_lab.gpus import datasheet_entry

    entry = datasheet_entry(H100_CONTEXT["device_name"])
    base = with_context(fake_results(torch.bfloat16, "slower"), H100_CONTEXT, flops=1e9)[0]
    assert base.regime.compute_s == pytest.approx(1e9 / (entry.fp32_tflops * 1e12), rel=1e-12)
    tf32 = dataclasses.replace(base, context={**H100_CONTEXT, "tf32_matmul": True})
    assert tf32.regime.compute_s == pytest.approx(1e9 / (entry.tf32_tflops * 1e12), rel=1e-12)
    assert entry.tf32_tflops != entry.fp32_tflops


# --------------------------------------------------------------------------------------------
# every bad input gets a clear error, no call hangs, nothing is half-changed
# --------------------------------------------------------------------------------------------


def snapshot(model, opt, scaler):
    """Everything a refused call must leave alone: weights, gradients, optimizer state, scale and RNG."""
    return (
        [p.detach().clone() for p in model.parameters()],
        [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        copy.deepcopy(opt.state_dict()),
        scaler.state_dict(),
        torch.random.get_rng_state(),
    )


def assert_unchanged(before, model, opt, scaler):
    params, grads, opt_state, scaler_state, rng = before
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), params, strict=True))
    assert all((g is None and p.grad is None) or torch.equal(p.grad, g)
               for p, g in zip(model.parameters(), grads, strict=True))  # fmt: skip
    now = opt.state_dict()
    assert now["param_groups"] == opt_state["param_groups"]
    assert now["state"].keys() == opt_state["state"].keys()
    for k, entry in opt_state["state"].items():
        assert all(
            torch.equal(torch.as_tensor(now["state"][k][n]), torch.as_tensor(v)) for n, v in entry.items()
        )
    assert scaler.state_dict() == scaler_state
    assert torch.equal(torch.random.get_rng_state(), rng)


def trained(dtype=torch.float32, *, steps=2, **kw):
    model, opt, scaler, scheduler = fresh(dtype, with_scheduler=True, **kw)
    data = load_digits(device="cpu")
    recipe.train(
        model, opt, scaler, data.train, dtype=dtype, num_steps=steps, batch_size=32, scheduler=scheduler
    )
    return model, opt, scaler, scheduler


@pytest.mark.parametrize(
    "max_grad_norm, error",
    [(-1.0, ValueError), (float("nan"), ValueError), (0.0, ValueError), (float("inf"), ValueError),
     ("1", TypeError), (True, TypeError), ([1.0], TypeError)],
)  # fmt: skip
def test_train_step_refuses_a_bad_max_grad_norm_before_touching_anything(data, max_grad_norm, error):
    model, _, scaler, _ = fresh(torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = recipe.micro_batches(data.train, step=0, batch_size=32)
    before = snapshot(model, opt, scaler)
    with pytest.raises(error, match="max_grad_norm"):
        recipe.train_step(model, opt, scaler, batches, dtype=torch.float32, max_grad_norm=max_grad_norm)
    assert_unchanged(before, model, opt, scaler)
    with pytest.raises(error, match="max_grad_norm"):
        recipe.train(
            model, opt, scaler, data.train, dtype=torch.float32, num_steps=1, max_grad_norm=max_grad_norm
        )
    assert_unchanged(before, model, opt, scaler)


def test_numpy_scalars_are_numbers(data):
    np = pytest.importorskip("numpy")
    runs = []
    for kw in (dict(max_grad_norm=0.5, seed=3, batch_size=32, accumulation_steps=2, num_steps=2),
               dict(max_grad_norm=np.float32(0.5), seed=np.int64(3), batch_size=np.int32(32),
                    accumulation_steps=np.int64(2), num_steps=np.int16(2))):  # fmt: skip
        model = models.make_mlp(
            np.int64(64), np.int64(10), hidden=np.int32(16), depth=np.int8(2), seed=np.uint8(0)
        )
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        runs.append(recipe.train(model, opt, recipe.make_scaler("fp16", "cpu", init_scale=np.float64(2.0**10)),
                                 data.train, dtype="fp16", **kw).losses)  # fmt: skip
    assert runs[0] == runs[1]


BAD_BATCHES = {
    "empty list": ([], ValueError, "batches must be a non-empty list"),
    "a tensor": (lambda d: d.train.X[:8], TypeError, "batches must be a non-empty list"),
    "a string": ("X, y", TypeError, "batches must be"),
    "None": (None, TypeError, "batches must be"),
    "not a pair": (lambda d: [(d.train.X[:8],)], TypeError, r"batches\[0\] must be an \(X, y\) pair"),
    "X not a tensor": (
        lambda d: [(d.train.X[:8].tolist(), d.train.y[:8])],
        TypeError,
        r"batches\[0\] X must be",
    ),
    "X 1-D": (lambda d: [(d.train.X[0], d.train.y[:1])], ValueError, "2-D float32"),
    "X float64": (lambda d: [(d.train.X[:8].double(), d.train.y[:8])], ValueError, "float32"),
    "X too narrow": (lambda d: [(d.train.X[:8, :10], d.train.y[:8])], ValueError, "model takes 64"),
    "y float": (lambda d: [(d.train.X[:8], d.train.y[:8].float())], ValueError, "int64"),
    "y int32": (lambda d: [(d.train.X[:8], d.train.y[:8].int())], ValueError, r"y.long\(\)"),
    "y 2-D": (lambda d: [(d.train.X[:8], d.train.y[:8, None])], ValueError, "1-D int64"),
    "sizes differ": (lambda d: [(d.train.X[:8], d.train.y[:7])], ValueError, "one per example"),
    "no examples": (lambda d: [(d.train.X[:0], d.train.y[:0])], ValueError, "at least one"),
    "label 10": (
        lambda d: [(d.train.X[:8], torch.full((8,), 10))],
        ValueError,
        "labels from 10 to 10.*0 to 9",
    ),
    "label -1": (lambda d: [(d.train.X[:8], torch.full((8,), -1))], ValueError, "labels from -1"),
    "NaN feature": (lambda d: [(d.train.X[:8] * float("nan"), d.train.y[:8])], ValueError, "NaN or inf"),
    "second pair bad": (
        lambda d: [(d.train.X[:8], d.train.y[:8]), (d.train.X[:8], d.train.y[:8, None])],
        ValueError,
        r"batches\[1\] y",
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(BAD_BATCHES))
def test_train_step_refuses_bad_batches_before_touching_anything(data, case):
    batches, error, match = BAD_BATCHES[case]
    batches = batches(data) if callable(batches) else batches
    model, opt, scaler, _ = fresh(torch.float32)
    recipe.train_step(model, opt, scaler, recipe.micro_batches(data.train, step=0), dtype=torch.float32)
    before = snapshot(model, opt, scaler)  # with gradients and Adam state: a refused step must keep them
    with pytest.raises(error, match=match):
        recipe.train_step(model, opt, scaler, batches, dtype=torch.float32)
    assert_unchanged(before, model, opt, scaler)


def test_train_step_takes_any_sequence_of_pairs(data):
    batches = recipe.micro_batches(data.train, step=0, batch_size=16, accumulation_steps=2)
    results = []
    for wrap in (list, tuple, iter):
        model, opt, scaler, _ = fresh(torch.float32)
        results.append(
            recipe.train_step(model, opt, scaler, wrap([list(b) for b in batches]), dtype=torch.float32)
        )
    assert results[0] == results[1] == results[2]


def other_model_opt():
    return torch.optim.SGD(models.make_mlp(64, 10, hidden=32).parameters(), lr=0.1)


BAD_STEP_OBJECTS = {
    "model None": (dict(model=None), TypeError, "model must be a torch.nn.Module"),
    "model a string": (dict(model="mlp"), TypeError, "model must be"),
    "model half": (dict(model=lambda m: copy.deepcopy(m).half()), ValueError, "float16 parameters"),
    "model frozen": (
        dict(model=lambda m: copy.deepcopy(m).requires_grad_(False)),
        ValueError,
        "requires a gradient",
    ),
    "model without parameters": (
        dict(model=lambda m: torch.nn.Sequential(torch.nn.ReLU())),
        ValueError,
        "no parameters",
    ),
    "opt None": (dict(opt=None), TypeError, "opt must be a torch.optim.Optimizer"),
    "opt of another model": (dict(opt=other_model_opt), ValueError, "not the model's"),
    "scaler None": (dict(scaler=None), TypeError, "scaler must be a torch.amp.GradScaler"),
    "scaler a float": (dict(scaler=2.0**16), TypeError, "scaler must be"),
    "dtype float64": (dict(dtype=torch.float64), ValueError, "dtype"),
    "dtype junk": (dict(dtype="fp8"), ValueError, "dtype"),
    "device junk": (dict(device="tpu"), ValueError, "device"),
}


@pytest.mark.parametrize("case", list(BAD_STEP_OBJECTS))
def test_train_step_and_train_refuse_bad_objects_before_touching_anything(data, case):
    changes, error, match = BAD_STEP_OBJECTS[case]
    model, opt, scaler, _ = fresh(torch.float32)
    args = dict(model=model, opt=opt, scaler=scaler, dtype=torch.float32)
    for key, value in changes.items():
        args[key] = (
            value(model)
            if key == "model" and callable(value)
            else value()
            if key == "opt" and callable(value)
            else value
        )
    before = snapshot(model, opt, scaler)
    batches = recipe.micro_batches(data.train, step=0)
    with pytest.raises(error, match=match):
        recipe.train_step(args.pop("model"), args.pop("opt"), args.pop("scaler"), batches, **args)
    assert_unchanged(before, model, opt, scaler)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(num_steps=10**9), ValueError, "num_steps must be <= 100000"),
        (dict(num_steps=2.0), TypeError, "num_steps"),
        (dict(num_steps=True), TypeError, "num_steps"),
        (dict(start_step=-1), ValueError, "start_step"),
        (dict(start_step=2**60), ValueError, "start_step"),
        (dict(batch_size=0), ValueError, "batch_size"),
        (dict(batch_size=10**6), ValueError, "batch_size"),
        (dict(accumulation_steps=10**12), ValueError, "accumulation_steps"),
        (dict(batch_size="64"), TypeError, "batch_size"),
        (dict(seed=1.5), TypeError, "seed"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(show_progress="no"), TypeError, "show_progress"),
        (dict(log_every=0), ValueError, "log_every must be >= 1"),
        (dict(log_every=10**6), ValueError, "log_every must be <= 100000"),
        (dict(log_every=2.0), TypeError, "log_every"),
        (dict(split=None), TypeError, "split must be a data.Split"),
        (dict(split="train"), TypeError, "split must be a data.Split"),
        (dict(scheduler="cosine"), TypeError, "scheduler"),
        (dict(scheduler="other optimizer"), ValueError, "scheduler belongs to another optimizer"),
        (dict(scheduler="plateau"), ValueError, "ReduceLROnPlateau"),
        (dict(split="labels out of range"), ValueError, "split holds class labels from 2 to 11"),
        (dict(split="NaN features"), ValueError, "NaN or inf"),
        (dict(split="narrow"), ValueError, "model takes 64"),
    ],
)
def test_train_refuses_bad_arguments_before_the_first_step(data, kwargs, error, match, monkeypatch):
    def no_step(*args, **kwargs):
        raise AssertionError("a refused train() ran a step")  # (before, num_steps=10**9 ran for days)

    monkeypatch.setattr(recipe, "step_on_device", no_step)
    model, opt, scaler, _ = fresh(torch.float32)
    split = kwargs.pop("split", data.train)
    split = (
        {
            "labels out of range": Split(data.train.X, data.train.y + 2),
            "NaN features": Split(
                data.train.X.clone().index_fill_(0, torch.tensor([5]), float("nan")), data.train.y
            ),
            "narrow": Split(data.train.X[:, :32], data.train.y),
        }.get(split, split)
        if isinstance(split, str)
        else split
    )
    scheduler = kwargs.pop("scheduler", None)
    scheduler = {
        "other optimizer": torch.optim.lr_scheduler.StepLR(other_model_opt(), 3),
        "plateau": torch.optim.lr_scheduler.ReduceLROnPlateau(opt),
    }.get(scheduler, scheduler)
    before = snapshot(model, opt, scaler)
    model.eval()
    with pytest.raises(error, match=match):
        recipe.train(
            model,
            opt,
            scaler,
            split,
            dtype=torch.float32,
            **{"num_steps": 2, "scheduler": scheduler, **kwargs},
        )
    assert_unchanged(before, model, opt, scaler)
    assert not model.training  # train() did not even switch the model to training mode


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(hidden=10**12), ValueError, "refused before allocating anything"),
        (dict(hidden=10**6), ValueError, "refused before allocating anything"),
        (dict(depth=10**6), ValueError, "depth must be <= 64"),
        (dict(depth=65), ValueError, "depth must be <= 64"),  # cost.MAX_DEPTH + 1
        (dict(hidden=2.5), TypeError, "hidden"),
        (dict(hidden=True), TypeError, "hidden"),
        (dict(num_features=0), ValueError, "num_features"),
        (dict(num_classes=1), ValueError, "num_classes"),
        (dict(seed=-1), ValueError, "seed"),
        (dict(seed=2**40), ValueError, "seed"),
        (dict(seed="0"), TypeError, "seed"),
    ],
)
def test_make_model_checks_sizes_before_allocating(kwargs, error, match, monkeypatch):
    built = []
    monkeypatch.setattr(torch.nn.Linear, "__init__", lambda self, *a, **k: built.append(a) or 1 / 0)
    with pytest.raises(error, match=match):
        models.make_mlp(**kwargs)
    assert built == []


def test_make_model_asks_check_fits_for_the_parameters_bytes(monkeypatch):
    asked = []
    monkeypatch.setattr(
        models, "check_fits", lambda needed, device, what, hint: asked.append((needed, str(device)))
    )
    model = models.make_mlp(64, 10, hidden=32, depth=3, device="cpu")
    assert asked == [(4 * sum(p.numel() for p in model.parameters()), "cpu")]
    assert len([m for m in model if isinstance(m, torch.nn.Linear)]) == 4
    assert models.make_mlp(depth=cost.MAX_DEPTH, hidden=2)  # the bound itself is allowed


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(seed="x"), TypeError, "seed"),
        (dict(seed=1.5), TypeError, "seed"),
        (dict(seed=2**32), ValueError, "seed"),
        (dict(step=-1), ValueError, "step"),
        (dict(step=10**30), ValueError, "step"),
        (dict(step=None), TypeError, "step"),
        (dict(batch_size=0), ValueError, "batch_size"),
        (dict(accumulation_steps=10**40), ValueError, "accumulation_steps"),
        (dict(split=(None, None)), TypeError, "split must be a data.Split"),
    ],
)
def test_micro_batches_bad_arguments(data, kwargs, error, match):
    split = kwargs.pop("split", data.train)
    with pytest.raises(error, match=match):
        recipe.micro_batches(split, **{"step": 0, **kwargs})


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(init_scale=float("inf")), ValueError, "init_scale"),
        (dict(init_scale=1e39), ValueError, "float32"),
        (dict(init_scale="65536"), TypeError, "init_scale"),
        (dict(growth_interval=0), ValueError, "growth_interval"),
        (dict(growth_interval=2**63), ValueError, "growth_interval"),
        (dict(growth_interval=2.0), TypeError, "growth_interval"),
    ],
)
def test_make_scaler_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        recipe.make_scaler(torch.float16, "cpu", **kwargs)


def test_compare_precisions_bounds_its_work_before_building_anything(data, monkeypatch):
    built = []
    monkeypatch.setattr(compare, "make_mlp", lambda *a, **k: built.append(a) or 1 / 0)
    cases = [
        (dict(num_steps=10**9), ValueError, "num_steps"),
        (dict(num_steps=60_000), ValueError, "num_steps must be <= 50000"),
        (dict(dtypes="bf16"), TypeError, "dtypes must be a sequence"),
        (dict(dtypes=torch.bfloat16), TypeError, "dtypes must be a sequence"),
        (dict(dtypes=()), ValueError, "dtypes must name at least one"),
        (dict(depth=10**6), ValueError, "depth"),
        (dict(hidden=-1), ValueError, "hidden"),
        (dict(batch_size=10**6), ValueError, "batch_size"),
        (dict(lr=float("nan")), ValueError, "lr"),
        (dict(seed=1.5), TypeError, "seed"),
        (dict(threads=0), ValueError, "threads"),
        (dict(threads=10**9), ValueError, "threads"),
        (dict(warmup_steps=-1), ValueError, "warmup_steps"),
        (dict(show_progress=None), TypeError, "show_progress"),
        (dict(data=None), TypeError, "data must be a data.Dataset"),
        (dict(data="digits"), TypeError, "data must be a data.Dataset"),
    ]
    threads = torch.get_num_threads()
    for kwargs, error, match in cases:
        dataset = kwargs.pop("data", data)
        with pytest.raises(error, match=match):
            compare.compare_precisions(
                dataset, **{"dtypes": (torch.float32, torch.bfloat16), "num_steps": 4, **kwargs}
            )
    assert built == [] and torch.get_num_threads() == threads


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: compare.comparison_rows([]), ValueError, "at least one row"),
        (lambda: compare.comparison_rows(None), TypeError, "results must be"),
        (lambda: compare.comparison_rows("rows"), TypeError, "results must be"),
        (lambda: compare.comparison_rows([1, 2]), TypeError, r"results\[0\] must be a PrecisionResult"),
        (
            lambda: compare.read_comparison(None, amp_choice.choose_amp_dtype(cpu(AVX2_ONLY))),
            TypeError,
            "results",
        ),
        (
            lambda: compare.read_comparison([1, 2], amp_choice.choose_amp_dtype(cpu(AVX2_ONLY))),
            TypeError,
            r"results\[0\]",
        ),
        (
            lambda: compare.read_memory(
                fake_results(torch.bfloat16, "slower"),
                amp_choice.choose_amp_dtype(cpu(AVX2_ONLY)),
                accuracy_tolerance="0.03",
            ),
            TypeError,
            "accuracy_tolerance",
        ),  # fmt: skip
        (
            lambda: compare.read_memory(
                fake_results(torch.bfloat16, "slower", saved=(0, 0)),
                amp_choice.choose_amp_dtype(cpu(AVX2_ONLY)),
            ),
            ValueError,
            "saved_bytes",
        ),  # fmt: skip
        (lambda: amp_choice.choose_amp_dtype("cpu"), TypeError, "report must be a hardware.MachineReport"),
        (lambda: amp_choice.choose_amp_dtype(report={"device": "cpu"}), TypeError, "report"),
        (lambda: amp_choice.example_machines(base="cpu"), TypeError, "base must be a hardware.MachineReport"),
        (lambda: amp_choice.choice_rows(None), TypeError, "machines must be"),
        (lambda: amp_choice.choice_rows("H100"), TypeError, "machines must be"),
        (lambda: amp_choice.choice_rows({"H100": gpu((9, 0))}), TypeError, "machines must be"),
        (lambda: amp_choice.choice_rows([gpu((9, 0))]), TypeError, r"machines\[0\] must be a \(name"),
        (lambda: amp_choice.choice_rows([("H100", "sm_90")]), TypeError, r"machines\[0\]\[1\]"),
        (lambda: amp_choice.choice_rows([(90, gpu((9, 0)))]), TypeError, r"machines\[0\]\[0\]"),
        (lambda: cost.step_flops(hidden=10**200), ValueError, "hidden"),
        (lambda: cost.step_bytes(depth=10**6), ValueError, "depth"),
        (lambda: cost.step_bytes(dtype="fp8"), ValueError, "dtype"),
    ],
)
def test_errors_come_from_amp_lab_not_from_deep_inside(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_comparison_rows_of_one_row_and_choice_rows_of_none():
    rows = compare.comparison_rows(fake_results(torch.bfloat16, "slower")[:1])
    assert rows[0][0] == "float32" and rows[0][2] == "1 (baseline)"
    assert amp_choice.choice_rows([]) == []
    machines = amp_choice.example_machines()
    assert (
        amp_choice.choice_rows(tuple(machines))
        == amp_choice.choice_rows(iter(machines))
        == amp_choice.choice_rows(machines)
    )


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m, d: recipe.evaluate(m, Split(d.test.X[:0], d.test.y[:0]), dtype=torch.float32), ValueError, "at least one"),
        (lambda m, d: recipe.evaluate(m, (d.test.X, d.test.y), dtype=torch.float32), TypeError, "split must be a data.Split"),
        (lambda m, d: recipe.evaluate(m, d, dtype=torch.float32), TypeError, "split must be a data.Split"),
        (lambda m, d: recipe.evaluate("model", d.test, dtype=torch.float32), TypeError, "model must be"),
        (lambda m, d: recipe.evaluate(m, d.test, dtype=torch.float32, batch_size=0), ValueError, "batch_size"),
        (lambda m, d: recipe.evaluate(m, d.test, dtype=torch.float32, batch_size=1.5), TypeError, "batch_size"),
        (lambda m, d: recipe.evaluate(m, d.test, dtype="int8"), ValueError, "dtype"),
        (lambda m, d: recipe.evaluate(m, Split(d.test.X[:, :8], d.test.y), dtype=torch.float32), ValueError, "model takes 64"),
        (lambda m, d: recipe.evaluate(m, Split(d.test.X, d.test.y + 9), dtype=torch.float32), ValueError, "labels"),
    ],
)  # fmt: skip
def test_evaluate_bad_arguments(data, call, error, match):
    model = models.make_mlp(64, 10, hidden=16)
    model.train()
    with pytest.raises(error, match=match):
        call(model, data)
    assert model.training  # not switched to eval and left there


# --------------------------------------------------------------------------------------------
# Checkpoints: validate, then change; what save_checkpoint writes always loads
# --------------------------------------------------------------------------------------------


def load_refused(path, model, opt, scaler, scheduler, match, error=ValueError):
    """load_checkpoint must refuse, and leave weights, optimizer, scaler, scheduler and RNG as they were."""
    torch.manual_seed(1234)
    before = snapshot(model, opt, scaler)
    sched_before = scheduler.state_dict() if scheduler is not None else None
    with pytest.raises(error, match=match) as err:
        checkpoints.load_checkpoint(path, model, opt, scaler, scheduler=scheduler)
    assert_unchanged(before, model, opt, scaler)
    if scheduler is not None:
        assert scheduler.state_dict() == sched_before
    return err.value


def test_a_refused_load_changes_nothing(tmp_path):
    model, opt, scaler, scheduler = trained(torch.float16, init_scale=2.0**10)
    good = checkpoints.save_checkpoint(tmp_path / "good.pt", model, opt, scaler, step=2, scheduler=scheduler)
    state = torch.load(good, weights_only=True)
    cases = {
        "no scaler": ({k: v for k, v in state.items() if k != "scaler"}, r"lacks \['scaler'\]"),
        "unknown entry": ({**state, "epoch": 3}, r"has \['epoch'\]"),
        "no model": ({k: v for k, v in state.items() if k != "model"}, r"lacks \['model'\]"),
        "bad step": ({**state, "step": -3}, "step"),
        "bad rng": ({**state, "rng_cpu": torch.zeros(3, dtype=torch.uint8)}, "random-generator"),
        "scale NaN": ({**state, "scaler": {**state["scaler"], "scale": float("nan")}}, "scale is nan"),
        "scaler from bf16 run": ({**state, "scaler": {}}, "holds no loss-scale state"),
        "scaler keys": ({**state, "scaler": {"scale": 2.0}}, "scaler state has"),
        "extra not a dict": ({**state, "extra": [1]}, "extra is a list"),
    }
    for name, (broken, match) in cases.items():
        path = tmp_path / f"{name}.pt"
        torch.save(broken, path)
        fresh_model, fresh_opt, fresh_scaler, fresh_scheduler = trained(
            torch.float16, steps=1, init_scale=2.0**12
        )
        load_refused(path, fresh_model, fresh_opt, fresh_scaler, fresh_scheduler, match)


def test_a_checkpoint_for_another_model_optimizer_or_scheduler_is_refused(tmp_path):
    model, opt, scaler, scheduler = trained()
    path = checkpoints.save_checkpoint(tmp_path / "c.pt", model, opt, scaler, step=2, scheduler=scheduler)
    # Another width: the first Linear's weight has another shape.
    other = models.make_mlp(64, 10, hidden=16)
    o = torch.optim.Adam(other.parameters(), lr=1e-3)
    err = load_refused(path, other, o, recipe.make_scaler(torch.float32, "cpu"),
                       torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=30), "another model")  # fmt: skip
    assert "size mismatch for 0.weight" in str(err)
    # Another depth: keys the model lacks.
    deeper = models.make_mlp(64, 10, hidden=32, depth=3)
    o = torch.optim.Adam(deeper.parameters(), lr=1e-3)
    load_refused(path, deeper, o, recipe.make_scaler(torch.float32, "cpu"),
                 torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=30), "another model")  # fmt: skip
    # Another optimizer: SGD cannot step with Adam's hyperparameters.
    m, _, s, _ = fresh(torch.float32)
    sgd = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    load_refused(
        path,
        m,
        sgd,
        s,
        torch.optim.lr_scheduler.CosineAnnealingLR(sgd, T_max=30),
        "another kind of optimizer",
    )
    # Another scheduler, no scheduler, a scheduler the checkpoint lacks.
    m, o, s, _ = fresh(torch.float32)
    load_refused(path, m, o, s, torch.optim.lr_scheduler.StepLR(o, 3), "another kind of lr scheduler")
    load_refused(path, m, o, s, None, "no scheduler was given")
    bare = checkpoints.save_checkpoint(tmp_path / "bare.pt", model, opt, scaler, step=2)
    m, o, s, sch = fresh(torch.float32, with_scheduler=True)
    load_refused(bare, m, o, s, sch, "holds no scheduler state")


@pytest.mark.parametrize(
    "content", ["junk", "empty", "foreign pickle", "torch list", "torch dict", "directory"]
)
def test_a_file_that_is_not_a_checkpoint_is_a_value_error_naming_the_path(tmp_path, content):
    import collections
    import pickle

    path = tmp_path / f"{content.replace(' ', '_')}.pt"
    if content == "junk":
        path.write_bytes(b"this is not a checkpoint")
    elif content == "empty":
        path.write_bytes(b"")
    elif content == "foreign pickle":
        path.write_bytes(pickle.dumps(collections.Counter("a foreign object")))
    elif content == "torch list":
        torch.save([1, 2, 3], path)
    elif content == "torch dict":
        torch.save({"weights": torch.ones(3)}, path)
    else:
        path.mkdir()
    model, opt, scaler, scheduler = trained(steps=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no warning from torch on the way
        err = load_refused(path, model, opt, scaler, scheduler, "checkpoint")
    assert type(err) is ValueError and str(path) in str(err)


def test_a_missing_checkpoint_is_a_file_not_found_error_that_is_a_value_error(tmp_path):
    model, opt, scaler, _ = fresh(torch.float32)
    path = tmp_path / "missing.pt"
    err = load_refused(path, model, opt, scaler, None, "no checkpoint file", error=FileNotFoundError)
    assert isinstance(err, ValueError) and str(path) in str(err)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda p, m, o, s: checkpoints.save_checkpoint(None, m, o, s, step=0), TypeError, "path must be a file path"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, o, s, step=-1), ValueError, "step"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, o, s, step=1.0), TypeError, "step"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, "model", o, s, step=0), TypeError, "model must be"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, None, s, step=0), TypeError, "opt must be"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, other_model_opt(), s, step=0), ValueError, "not the model's"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, o, None, step=0), TypeError, "scaler must be"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, o, s, step=0, scheduler=3), TypeError, "scheduler"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, o, s, step=0, extra=[1]), TypeError, "extra must be None or a dict"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, o, s, step=0, extra={"a": object()}), TypeError, "weights_only"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, o, s, step=0, extra={1: "a"}), TypeError, "string keys"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, o, s, step=0, extra={"f": len}), TypeError, "extra"),
        (lambda p, m, o, s: checkpoints.save_checkpoint(p, m, o, s, step=0, extra={"t": torch.ones(2).to_sparse()}),
         TypeError, "weights_only"),  # fmt: skip
        (lambda p, m, o, s: checkpoints.save_checkpoint(p.parent, m, o, s, step=0), ValueError, "is a directory"),
        (lambda p, m, o, s: checkpoints.load_checkpoint(3, m, o, s), TypeError, "path must be"),
        (lambda p, m, o, s: checkpoints.load_checkpoint(p, m, o, "scaler"), TypeError, "scaler must be"),
    ],
)  # fmt: skip
def test_save_and_load_checkpoint_bad_arguments_write_nothing(tmp_path, call, error, match):
    model, opt, scaler, _ = fresh(torch.float32)
    path = tmp_path / "ckpt" / "c.pt"
    path.parent.mkdir()
    with pytest.raises(error, match=match):
        call(path, model, opt, scaler)
    assert list(path.parent.iterdir()) == []


def test_a_cyclic_extra_is_refused():
    model, opt, scaler, _ = fresh(torch.float32)
    loop = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nests too deeply"):
        checkpoints.save_checkpoint("unused.pt", model, opt, scaler, step=0, extra={"loop": loop})


def test_a_failed_save_leaves_an_existing_checkpoint_whole(tmp_path, monkeypatch):
    model, opt, scaler, _ = fresh(torch.float32)
    path = checkpoints.save_checkpoint(tmp_path / "c.pt", model, opt, scaler, step=1)
    before = path.read_bytes()

    def failing_save(obj, f):
        Path(f).write_bytes(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        checkpoints.save_checkpoint(path, model, opt, scaler, step=2)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


def extra_values():
    from hypothesis import strategies as st

    np = pytest.importorskip("numpy")
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(),
        st.integers(-(2**63), 2**63 - 1).map(np.int64), st.floats(width=32).map(np.float32),
        st.booleans().map(np.bool_),
        st.lists(st.floats(width=32), max_size=5).map(lambda v: torch.tensor(v, dtype=torch.float32)),
        st.lists(st.integers(-100, 100), max_size=5).map(lambda v: torch.tensor(v, dtype=torch.int64)),
    )  # fmt: skip
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(inner, max_size=4).map(tuple),
            st.dictionaries(st.text(max_size=8), inner, max_size=4),
        ),  # fmt: skip
        max_leaves=12,
    )


def plain(value):
    """The oracle for what weights_only loading gives back: plain Python numbers, lists, tuples, dicts."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, plain(value.tolist()))
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if hasattr(value, "item") and not isinstance(value, (bool, int, float, str)):
        value = value.item()  # a numpy scalar is saved as the Python number it holds
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def test_a_checkpoint_save_checkpoint_writes_always_loads(tmp_path):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    model, opt, scaler, scheduler = trained(steps=1)
    path = tmp_path / "c.pt"

    @settings(max_examples=60, deadline=None)
    @given(st.dictionaries(st.text(max_size=8), extra_values(), max_size=4))
    def check(extra):
        checkpoints.save_checkpoint(path, model, opt, scaler, step=1, scheduler=scheduler, extra=extra)
        assert checkpoints.load_checkpoint(path, model, opt, scaler, scheduler=scheduler) == 1
        assert plain(torch.load(path, weights_only=True)["extra"]) == plain(extra)

    check()


def endless_pairs(data):
    """An iterator without a length that never ends: read to the end, it would fill memory."""
    pair = (data.train.X[:8], data.train.y[:8])
    while True:
        yield pair


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda d, s: recipe.train_step(*s, range(10**12), dtype=torch.float32),
            ValueError,
            "batches may hold at most",
        ),
        (
            lambda d, s: recipe.train_step(*s, range(2**70), dtype=torch.float32),
            ValueError,
            "batches may hold at most",
        ),
        (
            lambda d, s: recipe.train_step(*s, endless_pairs(d), dtype=torch.float32),
            ValueError,
            "batches may hold",
        ),
        (
            lambda d, s: compare.compare_precisions(d, dtypes=range(10**12)),
            ValueError,
            "dtypes may hold at most",
        ),
        (lambda d, s: compare.comparison_rows(range(10**12)), ValueError, "results may hold at most"),
        (
            lambda d, s: compare.read_comparison(range(10**12), amp_choice.choose_amp_dtype(cpu(AVX2_ONLY))),
            ValueError,
            "results may hold at most",
        ),  # fmt: skip
        (lambda d, s: amp_choice.choice_rows(range(10**12)), ValueError, "machines may hold at most"),
        (
            lambda d, s: compare.compare_precisions(d, lr=1e300, num_steps=2, warmup_steps=0),
            ValueError,
            "lr must be <=",
        ),
        (
            lambda d, s: compare.compare_precisions(d, lr=2e6, num_steps=2, warmup_steps=0),
            ValueError,
            "lr must be <=",
        ),
    ],
)
def test_list_arguments_and_lr_are_bounded_before_any_work(data, call, error, match):
    model, opt, scaler, _ = fresh(torch.float32)
    before = snapshot(model, opt, scaler)
    with pytest.raises(error, match=match):
        call(data, (model, opt, scaler))
    assert_unchanged(before, model, opt, scaler)


# --------------------------------------------------------------------------------------------
# the training loop does not wait for the device inside a step
# --------------------------------------------------------------------------------------------


def count_reads(monkeypatch):
    """Count every way a tensor's value reaches Python (each a host sync on a GPU), and GradScaler.get_scale
    (a read of the scale: it calls .item()), by patching torch's own methods."""
    reads = []

    def counting(name, original):
        def wrapper(self, *args, **kwargs):
            reads.append(name)
            return original(self, *args, **kwargs)

        return wrapper

    for name in SYNCS:
        monkeypatch.setattr(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(
        torch.amp.GradScaler, "get_scale", counting("get_scale", torch.amp.GradScaler.get_scale)
    )
    return reads


def fused(dtype, **kw):
    """fresh(), with Adam fused: its step counter stays a tensor (the default Adam reads it with .item() on
    the CPU, where its state lives even on a GPU), and an enabled GradScaler hands it the inf check as a
    tensor instead of reading it, as compare_precisions' Adam does on CUDA."""
    model, opt, scaler, scheduler = fresh(dtype, **kw)
    return model, torch.optim.Adam(model.parameters(), lr=3e-3, fused=True), scaler


@pytest.mark.parametrize(
    "dtype, with_scheduler", [(torch.float32, True), (torch.bfloat16, True), (torch.float16, False)]
)
def test_train_reads_the_device_once_per_window_not_once_per_step(data, monkeypatch, dtype, with_scheduler):
    reads = count_reads(monkeypatch)

    def run(num_steps, log_every=None):
        model, opt, scaler = fused(dtype, init_scale=2.0**24)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10) if with_scheduler else None
        reads.clear()
        history = recipe.train(model, opt, scaler, data.train, dtype=dtype, num_steps=num_steps, batch_size=32,
                               scheduler=scheduler, log_every=log_every)  # fmt: skip
        assert len(history) == num_steps
        return len(reads)

    base = run(2)
    assert base >= 1  # the counter counts: at least the one read of the run's numbers
    assert run(6) == base  # six steps read no more than two: nothing is read per step
    assert run(6, log_every=2) == base + 2  # three windows of two steps: one read each
    assert run(6, log_every=1) == base + 5  # one read per step


def test_train_reads_each_step_only_where_the_scheduler_needs_it(data, monkeypatch):
    """float16 with a scheduler: whether a step was skipped decides whether the scheduler steps, so each step is
    read once (and only once); the default Adam adds torch's own read of the inf check in GradScaler.step."""
    reads = count_reads(monkeypatch)

    def run(num_steps, make):
        model, opt, scaler = make()
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
        reads.clear()
        recipe.train(model, opt, scaler, data.train, dtype=torch.float16, num_steps=num_steps, batch_size=32,
                     scheduler=scheduler)  # fmt: skip
        return len(reads), list(reads)

    (two, _), (six, names) = (run(n, lambda: fused(torch.float16)) for n in (2, 6))
    assert six - two == 4 and names.count("tolist") >= 6
    (two, _), (six, _) = (run(n, lambda: fresh(torch.float16)[:3]) for n in (2, 6))
    # the same number of reads every step, more than ours: the default Adam reads its step counters (.item(), one
    # per parameter) and GradScaler.step reads the inf check (found_inf.item()): why compare_precisions fuses Adam
    assert (six - two) % 4 == 0 and six - two > 4


def test_pending_step_result_is_one_read_of_exactly_what_float_reads(data, monkeypatch):
    for dtype, kw in [(torch.float32, {}), (torch.float16, {"init_scale": 2.0**24})]:
        model, opt, scaler, _ = fresh(dtype, **kw)
        batches = recipe.micro_batches(data.train, step=0, batch_size=32, accumulation_steps=2)
        pending = recipe.sync_free_step(model, opt, scaler, batches, dtype=dtype)
        oracle = (float(pending.loss), float(pending.grad_norm), float(pending.scale))
        reads = count_reads(monkeypatch)
        result = pending.result()
        assert reads == ["tolist"]
        monkeypatch.undo()
        assert repr((result.loss, result.grad_norm, result.scale)) == repr(oracle)
        assert result.skipped == (dtype == torch.float16)  # 2**24 overflows the first float16 step
        if dtype == torch.float16:  # GradScaler's own oracle: it halved the scale after finding inf
            assert scaler.get_scale() == oracle[2] / 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_sync_free_train_gives_bitwise_the_history_of_the_synced_loop(data, dtype):
    """The oracle is the plain loop: train_step (which reads every step) called step by step, scheduler stepped
    after steps that were not skipped.  train() reads at the end, every 3 steps, or every step: the same bits."""
    kw = {"init_scale": 2.0**20, "growth_interval": 2} if dtype == torch.float16 else {}
    model, opt, scaler, scheduler = fresh(dtype, with_scheduler=True, **kw)
    expected = []
    for step in range(7):
        batches = recipe.micro_batches(data.train, step=step, batch_size=32, accumulation_steps=2)
        result = recipe.train_step(model, opt, scaler, batches, dtype=dtype)
        if not result.skipped:
            scheduler.step()
        expected.append(result)
    oracle = repr([(r.loss, r.grad_norm, r.scale, r.skipped) for r in expected])
    if dtype == torch.float16:
        assert any(r.skipped for r in expected) and not all(r.skipped for r in expected)
    for log_every, with_scheduler in [(None, True), (3, True), (1, True), (None, False)]:
        model, opt, scaler, scheduler = fresh(dtype, with_scheduler=with_scheduler, **kw)
        history = recipe.train(model, opt, scaler, data.train, dtype=dtype, num_steps=7, batch_size=32,
                               accumulation_steps=2, scheduler=scheduler, log_every=log_every)  # fmt: skip
        got = repr(
            list(zip(history.losses, history.grad_norms, history.scales, history.skipped, strict=True))
        )
        if with_scheduler:
            assert got == oracle, (log_every, with_scheduler)
        else:  # without a scheduler the learning rate stays put, so the losses move apart after step 0
            assert history.losses[0] == expected[0].loss
        assert history.steps == list(range(7)) and len(history.seconds) == 7 and min(history.seconds) >= 0


# --------------------------------------------------------------------------------------------
# clipping the scaled gradients
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clip_runs(data):
    return clipping.compare_clipping(data, num_steps=4, batch_size=32, hidden=32)


def test_clipping_scaled_gradients_fires_every_step_at_max_norm_over_scale(clip_runs):
    for optimizer in ("Adam", "SGD"):
        wrong, right = clip_runs.run(optimizer, scaled=True), clip_runs.run(optimizer, scaled=False)
        assert wrong.effective_max_norm == 1.0 / 2.0**16 and right.effective_max_norm == 1.0
        assert wrong.num_clipped == wrong.num_steps == 4 and not any(wrong.skipped)
        # clip_grad_norm_ saw the true norm times the scale (a power of two: exactly, up to float32 rounding)
        for seen, true in zip(wrong.seen_norms, wrong.true_norms, strict=True):
            assert seen == pytest.approx(true * 2.0**16, rel=1e-6)
        # the first step starts from the same weights and batch: the same true gradient either way
        assert wrong.true_norms[0] == pytest.approx(right.true_norms[0], rel=1e-6)
        assert right.num_clipped == sum(n > 1.0 for n in right.seen_norms)


def test_clipping_scaled_gradients_shrinks_sgd_steps_and_barely_changes_adams(clip_runs):
    lr = 1e-2
    right, wrong = clip_runs.run("SGD", scaled=False), clip_runs.run("SGD", scaled=True)
    # SGD's update is lr times the (clipped) gradient: an independent formula for both runs' first step
    true = right.true_norms[0]
    assert right.update_norms[0] == pytest.approx(lr * true * min(1.0, 1.0 / (true + 1e-6)), rel=1e-3)
    seen = wrong.seen_norms[0]
    # (10% here: steps of about 1e-9 per weight are below the float32 weights' ulp, so each is rounded)
    assert wrong.update_norms[0] == pytest.approx(lr * seen * (1.0 / (seen + 1e-6)) / 2.0**16, rel=0.1)
    assert clip_runs.update_ratio("SGD") < 1e-3
    assert 0.5 < clip_runs.update_ratio("Adam") <= 1.01
    reading = clip_runs.reading()
    assert reading.outcome == "clip.threshold" and reading.facts["effective"] == 2.0**-16
    assert (
        reading.facts["adam_scaled_clipped"],
        reading.facts["adam_true_clipped"],
        reading.facts["num_steps"],
    ) == (4, 0, 4)
    assert reading.reasons == ("clip.adam_little", "clip.adam_why", "clip.sgd_shrank", "clip.sgd_why")
    assert reading.facts["sgd_ratio"] == clip_runs.update_ratio("SGD") and str(clip_runs) == "\n".join(
        reading.sentences()
    )


def test_adam_is_invariant_to_the_gradient_scale_apart_from_eps(data):
    """The reason behind the Adam sentence, checked with torch's Adam itself: with eps = 0 a gradient 2**-16 times
    smaller takes the identical step; with the default eps, a smaller one."""
    g = torch.randn(100, generator=torch.Generator().manual_seed(0)) * 1e-2
    steps = {}
    for eps in (0.0, 1e-8):
        for factor in (1.0, 2.0**-16):
            w = torch.nn.Parameter(torch.zeros(100))
            opt = torch.optim.Adam([w], lr=1e-2, eps=eps)
            w.grad = g * factor
            opt.step()
            steps[eps, factor] = w.detach().norm().item()
    assert steps[0.0, 1.0] == pytest.approx(steps[0.0, 2.0**-16], rel=1e-6)
    assert steps[1e-8, 2.0**-16] < steps[1e-8, 1.0]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(data=None), TypeError, "data must be a data.Dataset"),
        (dict(scale=0.0), ValueError, "scale"),
        (dict(scale=float("inf")), ValueError, "scale"),
        (dict(max_norm=0), ValueError, "max_norm must be > 0"),
        (dict(max_norm=float("nan")), ValueError, "max_norm"),
        (dict(num_steps=0), ValueError, "num_steps must be >= 1"),
        (dict(num_steps=10**6), ValueError, "num_steps must be <= 25000"),
        (dict(num_steps=True), TypeError, "num_steps"),
        (dict(batch_size=10**6), ValueError, "batch_size"),
        (dict(hidden=0), ValueError, "hidden"),
        (dict(depth=10**3), ValueError, "depth"),
        (dict(lr=-1.0), ValueError, "lr"),
        (dict(dtype="fp8"), ValueError, "dtype"),
        (dict(seed=-1), ValueError, "seed"),
    ],
)
def test_compare_clipping_refuses_bad_arguments_before_training(data, kwargs, error, match, monkeypatch):
    def no_run(*args, **kw):
        raise AssertionError("a refused compare_clipping trained")

    monkeypatch.setattr(clipping, "_clipping_run", no_run)
    kwargs = {"data": data, **kwargs}
    with pytest.raises(error, match=match):
        clipping.compare_clipping(**kwargs)


# --------------------------------------------------------------------------------------------
# One MLP cost model: cost.mlp_step_flops is cost.step_flops of a one-hidden-layer MLP
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "width, batch, in_features, num_classes", [(1, 1, 1, 2), (64, 32, 64, 10), (1000, 7, 3, 5)]
)
def test_race_and_recipe_count_the_same_mlp_step_flops(width, batch, in_features, num_classes):
    # hand count: forward 2b(iw + wc); backward: weight gradients 2b(iw + wc), input gradient of layer 2 only 2bwc
    b, i, w, c = batch, in_features, width, num_classes
    hand = 2 * b * (i * w + w * c) * 2 + 2 * b * w * c
    assert cost.mlp_step_flops(width, batch, in_features=in_features, num_classes=num_classes) == hand
    assert cost.step_flops(in_features, num_classes, hidden=width, depth=1, batch_size=batch) == hand
    assert cost._mlp_matmul_flops([in_features, width, num_classes], batch) == hand  # what race can call


# --------------------------------------------------------------------------------------------
# a forward overflow is skipped at every scale, 0 included
# --------------------------------------------------------------------------------------------


def test_a_forward_overflow_skips_every_step_even_once_the_scale_is_zero(data):
    """Inputs 1e5 too large overflow float16's forward pass: the loss is NaN, and NaN (or inf) times any scale,
    0 included (inf * 0 = NaN), is not finite.  From the smallest normal float32 scale, 24 halvings reach 0;
    GradScaler still skips every step (its own flag), so the weights never change."""
    bad = Split(data.train.X * 1e5, data.train.y)
    model, opt, scaler, _ = fresh(torch.float16, init_scale=2.0**-126)
    before = [p.detach().clone() for p in model.parameters()]
    history = recipe.train(model, opt, scaler, bad, dtype=torch.float16, num_steps=30, batch_size=32)
    assert scaler.get_scale() == 0.0 and history.scales[-1] == 0.0
    assert all(history.skipped) and all(math.isnan(v) for v in history.losses)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert math.isnan(float(torch.tensor(float("inf")) * 0.0))


def test_count_host_reads_counts_each_read_and_restores_torch():
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "__float__", "__bool__")}
    t = torch.tensor([1.5])
    with recipe.count_host_reads() as reads:
        float(t), t.item(), t.tolist(), bool(t), t.item()
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4)
        scaler.scale(torch.ones(()))
        scaler.get_scale()  # torch's own .item()
    assert reads == {"__float__": 1, "item": 3, "tolist": 1, "__bool__": 1} and reads.total == 6
    assert all(getattr(torch.Tensor, name) is f for name, f in originals.items())
    with pytest.raises(RuntimeError), recipe.count_host_reads():
        raise RuntimeError("inside the block")
    # restored after an error too
    assert all(getattr(torch.Tensor, name) is f for name, f in originals.items())


def test_read_scale_path_names_what_the_scaler_did(data):
    """Hand-made histories: each path of the prediction, and the facts of the backoff sentence."""
    from amp_lab.recipe import History, StepResult

    def history(scales):
        h = History()
        for k, scale in enumerate(scales):
            h.append(k, StepResult(1.0, 1.0, scale, k % 2 == 0), 0.0)
        return h

    scaler = recipe.make_scaler(torch.float16, init_scale=2.0**8)
    cases = {
        (2.0**16, 2.0**15, 2.0**14): "recipe.scale_halved_each_step",
        (2.0**16, 2.0**16, 2.0**17): "recipe.scale_grew",
        (2.0**16, 2.0**16, 2.0**16): "recipe.scale_kept",
        (2.0**16, 2.0**15, 2.0**15): "recipe.scale_halved_once",
    }
    for scales, code in cases.items():
        reading = recipe.read_scale_path(history(scales), scaler)
        assert reading.outcome == code and reading.reasons == ("recipe.scale_backoff",)
        assert reading.facts == dict(num_skipped=2, num_steps=3, first_log2=16.0, last_log2=8.0)
    assert (
        recipe.SCALE_PATH_CHOICES[recipe.SCALE_PATHS.index("recipe.scale_halved_each_step")]
        == "halve it at every step"
    )
    with pytest.raises(ValueError, match="history holds no steps"):
        recipe.read_scale_path(History(), scaler)
    assert recipe.read_scaled_norm(2.0**16).facts == dict(scale=65536.0, log2=16.0)


def test_read_tf32_follows_the_setting_and_the_gpu(monkeypatch):
    """A fake Ampere GPU (its generation from gpus' table) and torch's own TF32 switch."""
    assert compare.read_tf32("cpu").outcome == "recipe.tf32_none"
    monkeypatch.setattr(compare, "get_device", lambda device=None: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (8, 0))
    for allowed, code in [(True, "recipe.tf32_on"), (False, "recipe.tf32_off")]:
        monkeypatch.setattr(
            compare, "tf32_setting", lambda allowed=allowed: (allowed, "high" if allowed else "highest")
        )
        reading = compare.read_tf32()
        assert reading.outcome == code and reading.facts["allowed"] is allowed
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (7, 5))  # Turing: no TF32
    assert compare.read_tf32().outcome == "recipe.tf32_none"
