"""amp_lab.recipe: the decision flow, the training step, resuming from a checkpoint, evaluation.

Oracles: float64 gradients of the same model (accumulation, unscale_ before clipping),
torch.autocast itself (the chosen dtype, inference dtypes), torch.amp.GradScaler and the lr
scheduler's own warning, and the uninterrupted run (checkpoint resume, bit for bit).
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import warnings

import pytest
import torch
import torch.nn.functional as F

from amp_lab import hardware, recipe
from amp_lab.data import load_digits
from amp_lab.device import torch_threads
from amp_lab.hardware import describe, tensor_core_generation
from amp_lab.timing import speedup_estimate


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


def gpu(capability, name="test GPU"):
    return hardware.report_for("cuda", capability=capability, gpu_name=name, system="Linux")


def cpu(cpuinfo=None, *, sysctl=None, system="Linux"):
    flags = hardware.cpu_flags(cpuinfo, sysctl=sysctl) if (cpuinfo or sysctl) else dict.fromkeys(hardware.CPU_FLAGS)
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
    choice = recipe.choose_amp_dtype(report)
    assert (choice.dtype, choice.use_scaler, choice.expect_speedup) == (dtype, use_scaler, speedup)
    # One decision: the flow agrees with hardware.amp_dtype_for, device.amp_dtype's rule, and the verdict.
    assert choice.dtype == hardware.amp_dtype_for(report.race_device, report.capability) == report.race_dtype
    assert (choice.use_scaler, choice.expect_speedup) == (report.use_scaler, report.expect_speedup)
    assert choice.verdict == report.verdict and choice.basis
    assert choice.device == report.race_device
    text = str(choice)
    assert text.startswith("1. Is the course running on a CUDA GPU?")
    assert recipe.dtype_name(dtype) in text.splitlines()[-2]
    assert ("with torch.amp.GradScaler" in text) == use_scaler


def test_cpu_native_answer_comes_from_cpu_has_native(monkeypatch):
    """The flow asks hardware.cpu_has_native whether the CPU multiplies bf16: change that answer and
    the flow's expectation follows."""
    report = cpu(AVX2_ONLY)
    assert recipe.choose_amp_dtype(report).expect_speedup is False
    calls = []

    def says_native(dtype, flags=None):
        calls.append(dtype)
        return True

    monkeypatch.setattr(hardware, "cpu_has_native", says_native)
    choice = recipe.choose_amp_dtype(report)
    assert calls and all(d == torch.bfloat16 for d in calls)
    assert "yes" in choice.steps[1][1]


def test_a_replaced_report_gets_its_own_flow_not_the_stale_verdict():
    """A T4 built by replacing GPU facts in this CPU's report (with is_bf16_supported() True, as torch
    says there because it can emulate bf16).  The flow reads the facts, not the stale CPU verdict."""
    t4 = machine(race_device="cuda", cuda_available=True, gpu_name="Tesla T4", capability=(7, 5),
                 tensor_cores=tensor_core_generation((7, 5)), bf16_supported=True)  # fmt: skip
    assert t4.race_dtype == torch.bfloat16  # the stale CPU verdict
    choice = recipe.choose_amp_dtype(t4)
    assert (choice.dtype, choice.use_scaler, choice.device) == (torch.float16, True, "cuda")


def test_choice_matches_what_cpu_autocast_runs_and_needs_no_scaler():
    choice = recipe.choose_amp_dtype(device="cpu")
    a = torch.randn(8, 8)
    with torch.autocast("cpu", dtype=choice.dtype):
        assert (a @ a).dtype == choice.dtype
    # bfloat16 keeps float32's exponent range: the smallest normal float32 survives the cast.
    tiny = torch.finfo(torch.float32).tiny
    assert torch.tensor(tiny).to(choice.dtype).item() != 0.0
    assert not choice.use_scaler
    assert choice.expect_speedup == hardware.cpu_has_native(torch.bfloat16)


def test_example_machines_table():
    machines = recipe.example_machines()
    names = [name for name, _ in machines]
    for wanted in ("T4", "A100", "H100", "Graviton 3", "AVX2"):
        assert any(wanted in n for n in names), wanted
    rows = {row[0]: row for row in recipe.choice_rows(machines)}
    assert all(len(row) == len(recipe.CHOICE_HEADER) for row in rows.values())
    by = {key: next(row for name, row in rows.items() if key in name) for key in ("T4", "A100", "H100", "Graviton", "AVX2")}
    assert by["T4"][1:4] == ["float16", "yes", "yes, on large matmuls"]
    assert by["A100"][1:3] == by["H100"][1:3] == ["bfloat16", "no"]
    assert by["Graviton"][1:4] == ["bfloat16", "no", "yes, on large matmuls"]
    assert by["AVX2"][1:4] == ["bfloat16", "no", "no"]
    # The CPUs are read from their own cpuinfo text, as this machine's is.
    graviton = dict(machines)[next(n for n in names if "Graviton" in n)]
    assert hardware.cpu_has_native(torch.bfloat16, graviton.cpu_flags) is True


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
    rows = recipe.compare_precisions(data, (torch.float32, "bf16"), num_steps=8, warmup_steps=1, hidden=16, threads=1)
    assert torch.get_num_threads() == threads  # restored
    assert [r.dtype for r in rows] == [torch.float32, torch.bfloat16]
    assert all(r.threads == 1 and r.context["threads"] == 1 for r in rows)
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
    table = recipe.comparison_rows(rows)
    assert len(table) == 2 and all(len(row) == len(recipe.COMPARISON_HEADER) for row in table)
    assert table[1][2].startswith(f"{rows[1].speedup.ratio:.2f}x (")
    with pytest.raises(ValueError, match="dtypes"):
        recipe.compare_precisions(data, (torch.float64,), num_steps=2)
    with pytest.raises(ValueError, match="num_steps"):
        recipe.compare_precisions(data, num_steps=1, warmup_steps=3)


def test_compare_precisions_runs_equal_separate_runs_bit_for_bit(data):
    """Interleaving (and flipping the order every step) changes nothing but the clock: each dtype's
    losses equal those of the same run trained on its own."""
    rows = recipe.compare_precisions(data, (torch.float32, "bf16"), num_steps=5, warmup_steps=1, hidden=16,
                                     lr=1e-2, threads=1)  # fmt: skip
    for r in rows:
        model = recipe.make_model(64, 10, hidden=16, seed=0)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        with torch_threads(1):
            alone = recipe.train(model, opt, recipe.make_scaler(r.dtype), data.train, dtype=r.dtype, num_steps=5)
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
        recipe.make_model(64, 10, hidden=0)
    with pytest.raises(ValueError, match="device"):
        recipe.make_model(64, 10, device="tpu")


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
        return recipe.PrecisionResult(
            dtype=dtype, seconds_per_step=statistics.median(steps), saved_bytes=saved_bytes,
            peak_memory_bytes=peak, test_accuracy=acc, test_loss=0.3, final_train_loss=0.1, num_skipped=0,
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


@pytest.mark.parametrize("outcome", list(TIMES))
@pytest.mark.parametrize("machine_name", list(READ_MACHINES))
def test_read_comparison_sentences(machine_name, outcome):
    choice = recipe.choose_amp_dtype(READ_MACHINES[machine_name])
    peaks = (4 * 2**20, 3 * 2**20) if choice.device == "cuda" else (None, None)
    results = fake_results(choice.dtype, outcome, peaks=peaks)
    reading = recipe.read_comparison(results, choice)
    oracle = speedup_estimate(FP32_STEPS, TIMES[outcome])  # the interval, from the timer itself
    assert oracle.outcome == outcome  # the fake times really are faster / slower / too close to call
    assert reading.outcome == outcome
    name = recipe.dtype_name(choice.dtype)
    assert str(oracle) in reading.speed and f"AMP ({name})" in reading.speed
    said = {"faster": "was faster than FP32", "slower": "was slower than FP32", "too close to call": "too close to call"}
    assert said[outcome] in reading.speed
    assert sum(phrase in reading.speed for phrase in said.values()) == 1
    if outcome == "slower":
        assert f"{1 / oracle.ratio:.2f}x as long" in reading.speed
    # Does the measurement match the decision flow's expectation?
    expect = choice.expect_speedup
    if expect is None or outcome == "too close to call":
        matches = None
    else:
        matches = expect == (outcome == "faster")
    assert reading.matches_expectation is matches
    assert ("That matches the decision flow" in reading.expectation) == (matches is True)
    assert ("does not match" in reading.expectation) == (matches is False)
    assert ("What to do" in reading.expectation) == (matches is False)
    if outcome == "too close to call" and expect is not None:
        assert "neither confirms nor contradicts" in reading.expectation
    if expect is None:
        assert "could not predict" in reading.expectation
    assert choice.basis in reading.expectation
    # Memory and accuracy are read from the numbers too.
    assert f"{37_000 / 72_000:.2f}x the bytes" in reading.memory and "about half" in reading.memory
    assert ("Peak CUDA memory" in reading.memory) == (choice.device == "cuda")
    if choice.device == "cuda":
        assert "0.75x" in reading.memory
    assert reading.accuracy.holds and str(reading.accuracy).endswith(": yes")
    assert str(reading).splitlines()[0] == reading.speed


def test_read_comparison_memory_and_accuracy_follow_the_numbers():
    choice = recipe.choose_amp_dtype(cpu(AVX2_ONLY))
    same = recipe.read_comparison(fake_results(torch.bfloat16, "slower", saved=(50_000, 50_000)), choice)
    assert "1.00x the bytes" in same.memory and "about the same" in same.memory
    some = recipe.read_comparison(fake_results(torch.bfloat16, "slower", saved=(50_000, 40_000)), choice)
    assert "0.80x the bytes" in some.memory and "not half" in some.memory
    worse = recipe.read_comparison(fake_results(torch.bfloat16, "slower", accuracy=(0.91, 0.86)), choice)
    assert not worse.accuracy.holds and str(worse.accuracy).endswith(": NO")
    edge = recipe.read_comparison(fake_results(torch.bfloat16, "slower", accuracy=(0.91, 0.86)), choice,
                                  accuracy_tolerance=0.05)  # fmt: skip
    assert edge.accuracy.holds and "within 5 points" in edge.accuracy.statement


def test_read_comparison_computes_the_interval_when_results_carry_only_step_times():
    choice = recipe.choose_amp_dtype(cpu(AVX2_ONLY))
    results = [dataclasses.replace(r, speedup=None) for r in fake_results(torch.bfloat16, "slower")]
    assert str(speedup_estimate(FP32_STEPS, TIMES["slower"])) in recipe.read_comparison(results, choice).speed


def test_read_comparison_errors():
    choice = recipe.choose_amp_dtype(cpu(AVX2_ONLY))
    results = fake_results(torch.bfloat16, "slower")
    with pytest.raises(TypeError, match="choice"):
        recipe.read_comparison(results, "bf16")
    with pytest.raises(ValueError, match="results"):
        recipe.read_comparison(results[:1], choice)
    with pytest.raises(ValueError, match=r"results\[0\]"):
        recipe.read_comparison(results[::-1], choice)
    with pytest.raises(ValueError, match="float16"):
        recipe.read_comparison(fake_results(torch.bfloat16, "slower"), recipe.choose_amp_dtype(gpu((7, 5))))
    with pytest.raises(ValueError, match="accuracy_tolerance"):
        recipe.read_comparison(results, choice, accuracy_tolerance=-0.1)
    bare = [dataclasses.replace(r, speedup=None, step_seconds=()) for r in results]
    with pytest.raises(ValueError, match="step_seconds"):
        recipe.read_comparison(bare, choice)
