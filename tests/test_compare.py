"""07's comparison of FP32 and AMP: sized by the machine as 06's race is (a pure function of its facts,
checked against a table of machines), bounded before it starts, read from what it measured."""

from __future__ import annotations

import dataclasses
import statistics
import time

import nbformat
import pytest
import torch

from amp_lab import amp, compare, cost, cpus, gpus, hardware, sweeps
from amp_lab.data import load_digits
from amp_lab.intervals import speedup_estimate
from amp_lab.progress import progress as real_progress

NOTEBOOK = "notebooks/07_amp_training_recipe.ipynb"
DIGITS_TRAIN = 1348  # scikit-learn's digits, 75% for training

# Excerpts of real /proc/cpuinfo flags (as in tests/test_recipe.py).
AVX2_ONLY = "flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2\n"
AVX512_BF16 = "flags\t\t: fpu sse2 avx avx2 avx512f avx512bw avx512vl avx512_bf16 avx512_vnni\n"
AMX = "flags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8\n"
# Real GPUs: compute capability and the exact name torch reports (tests/test_gpu_facts.py's table).
GPUS = {
    "T4": ((7, 5), "Tesla T4"),
    "V100": ((7, 0), "Tesla V100-SXM2-16GB"),
    "A100": ((8, 0), "NVIDIA A100-SXM4-80GB"),
    "RTX 4090": ((8, 9), "NVIDIA GeForce RTX 4090"),
    "H100": ((9, 0), "NVIDIA H100 80GB HBM3"),
    "H200": ((9, 0), "NVIDIA H200"),
}
# What one training step costs on an H200 when launches set its pace (docs/results/mlp-sizes_nvidia-h200_*).
LAUNCH_FLOOR_S = 1.5e-3


@pytest.fixture(scope="module")
def data():
    return load_digits()


def cpu_sizes(cpuinfo):
    native = cpus.cpu_has_native(torch.bfloat16, hardware.cpu_flags(cpuinfo))
    return native, compare.comparison_sizes("cpu", torch.bfloat16, native=native, num_examples=DIGITS_TRAIN)


@pytest.mark.parametrize("cpuinfo, native", [(AVX2_ONLY, False), (AVX512_BF16, True), (AMX, True)])
def test_cpu_sizes_are_the_races(cpuinfo, native):
    """One decision: the width, batch and thread of 06's race for the same facts, the batch within the data."""
    got_native, sizes = cpu_sizes(cpuinfo)
    race = sweeps.race_sizes("cpu", torch.bfloat16, native=native)
    assert got_native is native
    assert (sizes.case, sizes.hidden, sizes.batch_size, sizes.threads) == (
        race.case,
        race.width,
        race.batch,
        1,
    )
    assert sizes.batch_size <= DIGITS_TRAIN
    assert str(sizes)  # its sentence, filled from the sizes


def test_an_emulated_cpu_compares_within_budget_and_a_native_one_computes():
    """On a 2-core AVX2 CPU, emulated bf16 runs at about 0.6 GFLOP/s (measured on this CPU with oneDNN capped
    at AVX2): the default comparison stays far inside its 30 s, while on a bf16 CPU the step has 100 times
    the arithmetic of the small model 07 used to compare."""
    emulated_rate = 0.6e9
    _, slow = cpu_sizes(AVX2_ONLY)
    flops = cost.step_flops(64, 10, hidden=slow.hidden, depth=2, batch_size=slow.batch_size)
    assert 16 * flops / emulated_rate < 10
    _, fast = cpu_sizes(AMX)
    big = cost.step_flops(64, 10, hidden=fast.hidden, depth=2, batch_size=fast.batch_size)
    assert big > 100 * cost.step_flops(64, 10, hidden=64, depth=2, batch_size=64)


@pytest.mark.parametrize("name", list(GPUS))
def test_gpu_sizes_make_the_fp32_step_compute_bound(name):
    """On every GPU of the table, the FP32 step's matmuls at the datasheet's peak take several times the
    launch floor of a step, so AMP's faster arithmetic shows; and the race's width is used."""
    capability, gpu_name = GPUS[name]
    dtype = gpus.amp_dtype_for("cuda", capability)
    sizes = compare.comparison_sizes("cuda", dtype, native=None, num_examples=DIGITS_TRAIN)
    race = sweeps.race_sizes("cuda", dtype)
    assert (sizes.case, sizes.hidden, sizes.threads) == ("gpu", race.width, None)
    assert sizes.batch_size == 1024  # the race's 8192, cut to the largest power of two within 1348
    flops = cost.step_flops(64, 10, hidden=sizes.hidden, depth=2, batch_size=sizes.batch_size)
    fp32_s = flops / (gpus.datasheet_entry(gpu_name).tflops(torch.float32) * 1e12)
    assert fp32_s > 3 * LAUNCH_FLOOR_S


def test_compare_precisions_defaults_to_the_machines_sizes(data, monkeypatch):
    small = compare.ComparisonSizes("cpu-emulated", 16, 32, 1)
    monkeypatch.setattr(compare, "sizes_for", lambda data, dtypes, device=None: small)
    rows = compare.compare_precisions(data, num_steps=2, warmup_steps=0)
    assert rows[0].step_flops == cost.step_flops(64, 10, hidden=16, depth=2, batch_size=32)
    assert all(r.context["threads"] == 1 for r in rows)


def test_sizes_for_this_machine(data):
    sizes = compare.sizes_for(data, (torch.float32, "bf16"), device="cpu")
    race = sweeps.race_sizes("cpu", torch.bfloat16, native=cpus.cpu_has_native(torch.bfloat16))
    assert (sizes.hidden, sizes.threads) == (race.width, 1)
    with pytest.raises(TypeError, match="data"):
        compare.sizes_for("digits")
    with pytest.raises(ValueError, match="dtypes"):
        compare.sizes_for(data, ())


def test_refuses_beyond_its_budget_before_training(data, monkeypatch):
    """An AVX2 CPU's emulated bf16 rate, injected: the race's bf16-CPU size would take many minutes; it is
    refused in well under a second, naming budget_s and its estimate."""
    monkeypatch.setattr(compare, "_seconds_per_flop", lambda dev, dtype, hidden, batch: 1 / 0.6e9)
    monkeypatch.setattr(compare, "train_loop", lambda *a, **k: pytest.fail("trained before refusing"))
    start = time.perf_counter()
    with pytest.raises(ValueError, match="budget_s") as err:
        compare.compare_precisions(data, hidden=2048, batch_size=1024)
    assert time.perf_counter() - start < 2
    flops = cost.step_flops(64, 10, hidden=2048, depth=2, batch_size=1024)
    estimate = 2 * 16 * (flops / 0.6e9 + 1e-3)
    assert f"about {estimate:.0f} s" in str(err.value)
    with pytest.raises(ValueError, match="budget_s"):
        compare.compare_precisions(data, hidden=8, budget_s=0)


@pytest.mark.parametrize("seconds_per_flop, shown", [(1e-4, True), (1e-15, False)])
def test_progress_past_a_few_seconds(data, monkeypatch, seconds_per_flop, shown):
    bars = []
    monkeypatch.setattr(compare, "_seconds_per_flop", lambda *args: seconds_per_flop)
    monkeypatch.setattr(compare, "progress", lambda *a, **k: bars.append(k) or real_progress(*a, **k))
    flops = cost.step_flops(64, 10, hidden=8, depth=1, batch_size=16)
    estimate = 2 * 3 * (flops * seconds_per_flop + 1e-3)
    assert (estimate > compare.PROGRESS_AFTER_S) is shown
    compare.compare_precisions(
        data, num_steps=3, warmup_steps=0, hidden=8, depth=1, batch_size=16, budget_s=3600
    )
    assert bool(bars) is shown


def test_the_calibration_is_bounded_and_positive():
    start = time.perf_counter()
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert 0 < compare._seconds_per_flop(torch.device("cpu"), dtype, 4096, 1024) < 1e-6
    assert time.perf_counter() - start < 3


# -- What the comparison says on a CPU, from the matmul rates it timed ------------------------------------

FP32_STEPS = tuple(0.2 * (1 + 0.05 * ((7 * i) % 11) / 10) for i in range(13))


def results(amp_dtype, ratio, *, fp32_rate, amp_rate, flops=1e10):
    def row(dtype, steps, speedup, rate):
        return compare.PrecisionResult(
            dtype=dtype,
            seconds_per_step=statistics.median(steps),
            saved_bytes=1000,
            peak_memory_bytes=None,
            test_accuracy=0.9,
            num_skipped=0,
            step_seconds=steps,
            speedup=speedup,
            context={"device": "cpu"},
            step_flops=flops,
            step_bytes=1e6,
            matmul_flops_per_s=rate,
        )

    amp_steps = tuple(t / ratio for t in FP32_STEPS)
    return [
        row(torch.float32, FP32_STEPS, None, fp32_rate),
        row(amp_dtype, amp_steps, speedup_estimate(FP32_STEPS, amp_steps), amp_rate),
    ]


def cpu_choice(cpuinfo):
    return amp.choose_amp_dtype(hardware.report_for("cpu", flags=hardware.cpu_flags(cpuinfo), system="Linux"))


def test_an_emulated_cpu_says_why_not_from_the_rates():
    choice = cpu_choice(AVX2_ONLY)
    reading = compare.read_comparison(results(choice.dtype, 0.1, fp32_rate=90e9, amp_rate=1.2e9), choice)
    assert reading.outcome == "recipe.slower"
    assert reading.reasons == ("recipe.matches_slow", "recipe.matmul_rates", "recipe.arithmetic_slow")
    assert reading.facts["matmul_ratio"] == pytest.approx(1.2 / 90)
    assert (reading.facts["amp_gflops"], reading.facts["fp32_gflops"]) == (1.2, 90.0)
    assert str(reading)


@pytest.mark.parametrize("ratio, first", [(3.0, "recipe.matches_fast"), (0.8, "recipe.contradicts_fast")])
def test_a_bf16_cpu_reads_the_share_of_a_step_its_matmuls_fill(ratio, first):
    choice = cpu_choice(AMX)
    rows = results(choice.dtype, ratio, fp32_rate=100e9, amp_rate=400e9)
    reading = compare.read_comparison(rows, choice)
    assert reading.reasons[0] == first
    assert reading.reasons[-2:] == ("recipe.matmul_rates", "recipe.compute_share")
    assert "recipe.small_cpu" not in reading.reasons  # measured, not the guess about small models
    oracle = 100 * (1e10 / 100e9) / statistics.median(FP32_STEPS)
    assert reading.facts["compute_pct"] == pytest.approx(oracle)
    bare = [dataclasses.replace(r, matmul_flops_per_s=None) for r in rows]
    assert "recipe.matmul_rates" not in compare.read_comparison(bare, choice).reasons


# -- Notebook 07 --------------------------------------------------------------------------------------------


def cells():
    return nbformat.read(NOTEBOOK, as_version=4).cells


def test_07_compares_at_the_machines_sizes():
    calls = [c.source for c in cells() if c.cell_type == "code" and "compare.compare_precisions(" in c.source]
    assert calls
    for source in calls:
        assert "hidden=" not in source and "batch_size=" not in source and "threads=" not in source


def test_07_markdown_before_a_question_does_not_answer_it():
    """The scale question (what GradScaler does over 8 overflowing steps) and the loss-dtype question (a loss
    computed after the region): the markdown just before each must not state the outcome."""
    nb = cells()
    for i, cell in enumerate(nb):
        if cell.cell_type == "code" and "recipe.SCALE_PATH_CHOICES" in cell.source:
            assert "halve" not in nb[i - 1].source
        if cell.cell_type == "code" and "guess_loss = predict.choice" in cell.source:
            assert "keep their 16-bit dtype" not in nb[i - 1].source


def test_07_outcomes_of_runs_are_claimed_not_asserted():
    """Issue 24: 07's markdown said the checkpoint run skips steps on both sides of the cut, and that a
    scale started at float32's smallest normal falls to 0 and stays there, before anything ran.  Now the
    markdown says what the design aims at, and claims under the runs check what happened."""
    nb = cells()
    text = "\n".join(c.source for c in nb if c.cell_type == "markdown")
    assert "so the run skips steps and changes its scale" not in text
    assert "only brings it to 0 sooner, where it stays" not in text
    tiny = next(
        c.source for c in nb if c.cell_type == "code" and "torch.finfo(torch.float32).tiny" in c.source
    )
    assert tiny.count("claim(") == 2
    resume = next(
        i for i, c in enumerate(nb) if c.cell_type == "code" and "checkpoints.save_checkpoint(" in c.source
    )
    assert "claim(" in nb[resume + 1].source
