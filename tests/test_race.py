"""amp_lab.race: the honest timer, the races, the sweep, the widget and the refusals.

No test asserts a speed: the machine is shared and noisy.  The timer is tested with a fake
clock and fake synchronisation (so *when* it reads the clock is checked exactly), the races
against independent oracles (autocast's own output dtypes, torch.finfo, torch's Measurement,
numpy's percentiles, byte counts derived by hand from the autograd formulas).
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from amp_lab import (
    cost,
    cpus,
    intervals,
    race,
    race_readout,
    race_trainer,
    race_widget,
    references,
    roofline,
    sweeps,
    text,
    timing,
)
from amp_lab import device as device_module

# The real functions, kept before any test replaces them with refusals.
real_race_matmul, real_race_mlp, real_sweep = race.race_matmul, race.race_mlp, sweeps.sweep

ROOT = Path(__file__).resolve().parent.parent
FAST = {"warmup": 1, "repeats": 2, "min_sample_s": 1e-4, "target_rel_width": None}


# ------------------------------------------------------------------------------------------
# race_matmul
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_race_matmul_races_fp32_against_autocast_and_carries_its_context(monkeypatch, dtype):
    seen = {}
    real_measure = timing.measure

    def spy(contestants, **kwargs):
        # the oracle: what the contestants really compute, asked of the tensors themselves
        seen.update({name: c.fn() for name, c in contestants.items()})
        return real_measure(contestants, **kwargs)

    monkeypatch.setattr(race, "measure", spy)
    n = 16
    r = race.race_matmul(n, device="cpu", dtype=dtype, **FAST)
    assert seen["fp32"].dtype == torch.float32 and seen["amp"].dtype == dtype
    A, B = race._operands(n, torch.device("cpu"))
    torch.testing.assert_close(seen["fp32"], A @ B)
    torch.testing.assert_close(seen["amp"], A.to(dtype) @ B.to(dtype))
    assert set(r.timings) == {"fp32", "amp"} and r.tf32 is None  # no TF32 contestant on the CPU
    # the speedup is the median of the per-round ratios, and its interval comes with it
    ratios = np.array(r.fp32.samples) / np.array(r.amp.samples)
    assert r.speedup == pytest.approx(float(np.median(ratios)), rel=1e-12)
    assert (
        r.speedup_interval == intervals.speedup_estimate(r.fp32, r.amp)
        and r.outcome == r.speedup_interval.outcome
    )
    assert r.tflops["amp"] == pytest.approx(2 * n**3 / r.amp.median / 1e12)
    assert r.dtype == dtype and r.params == {"n": n} and r.kind == "matmul"
    assert r.context["device"] == "cpu" and r.context["amp_dtype"] == str(dtype).removeprefix("torch.")
    assert r.context["threads"] == torch.get_num_threads()
    assert r.fp32.warmup >= 1 and len(r.amp.samples) == 2
    data = json.loads(json.dumps(r.to_dict()))
    assert data["speedup"] == pytest.approx(r.speedup) and data["context"]["torch"] == torch.__version__
    assert data["outcome"] == r.outcome and data["speedup_interval"]["pairs"] == 2
    assert f"  speedup (FP32 / AMP): {r.speedup_interval}: {r.outcome}" in str(r).splitlines()


def test_default_dtype_is_the_devices_amp_dtype():
    from amp_lab.device import amp_dtype

    r = race.race_matmul(8, device="cpu", **FAST)
    assert r.dtype == amp_dtype("cpu")


# ------------------------------------------------------------------------------------------
# race_mlp
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_race_mlp_trains_identical_copies_with_autocast_and_a_scaler_for_fp16(monkeypatch, dtype):
    seen = {}
    real_measure = timing.measure

    def spy(contestants, **kwargs):
        trainers = {name: c.fn.__self__ for name, c in contestants.items()}
        fp32, amp = trainers["fp32"], trainers["amp"]
        for p, q in zip(fp32.model.parameters(), amp.model.parameters(), strict=True):
            assert p is not q and torch.equal(p, q)  # same start, separate copies
        seen["scaler"] = amp.scaler
        with torch.autocast("cpu", dtype=dtype):
            seen["amp_out"] = amp.model(amp.X).dtype
        seen["fp32_scaler"] = fp32.scaler
        return real_measure(contestants, **kwargs)

    monkeypatch.setattr(race, "measure", spy)
    width, batch, in_features = 8, 4, 16
    r = race.race_mlp(width, batch, in_features=in_features, device="cpu", dtype=dtype, **FAST)
    assert seen["amp_out"] == dtype
    assert seen["fp32_scaler"] is None
    if dtype == torch.float16:
        assert isinstance(seen["scaler"], torch.amp.GradScaler)
    else:
        assert seen["scaler"] is None  # bfloat16 has FP32's range: no loss scaling
    assert r.kind == "mlp" and r.params == {"width": 8, "batch": 4, "in_features": 16, "num_classes": 10}
    assert r.flops == cost.mlp_step_flops(width, batch, in_features=in_features)
    assert set(r.memory) == {"fp32", "amp", "method"} and "estimate" in r.memory["method"]
    json.dumps(r.to_dict())


def test_mlp_step_flops_counts_forward_and_the_backward_matmuls_it_needs():
    b, i, w, c = 3, 5, 7, 2
    forward = 2 * b * i * w + 2 * b * w * c
    backward = 2 * b * i * w + 2 * (2 * b * w * c)  # first layer: weight grad only; second: weight and input
    assert cost.mlp_step_flops(w, b, in_features=i, num_classes=c) == forward + backward


def test_cpu_memory_estimate_equals_counts_derived_by_hand():
    dev = torch.device("cpu")
    b, w, i, c = 32, 64, 16, 10
    X, y, model = race._mlp_setup(w, b, i, c, dev)
    params = sum(p.numel() for p in model.parameters())
    for dtype, saved in [
        # FP32: ReLU's output, log_softmax's output, nll_loss's total_weight scalar
        (None, 4 * b * w + 4 * b * c + 4),
        # bf16: X cast, ReLU's bf16 output, the second weight's cast, log_softmax (fp32 policy), total_weight;
        # the first weight's cast is not saved because X needs no gradient
        (torch.bfloat16, 2 * b * i + 2 * b * w + 2 * w * c + 4 * b * c + 4),
    ]:
        trainer = race_trainer.Trainer(model, X, y, dev, dtype)
        trainer.step()
        assert race_trainer.saved_for_backward_bytes(trainer, [X, y, *trainer.model.parameters()]) == saved
        # parameters, gradients, Adam's two moments (all FP32) and Adam's per-parameter step counters
        assert trainer.static_bytes() == 4 * 4 * params + 4 * len(list(model.parameters()))


# ------------------------------------------------------------------------------------------
# Bad input, and the request that cannot fit
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -3, 1.5, True, "64", None])
def test_bad_matmul_size_raises_value_error_naming_n(n):
    with pytest.raises(ValueError, match=r"\bn\b"):
        race.race_matmul(n, device="cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, "int8", "fp8"])
def test_dtype_must_be_float16_or_bfloat16(dtype):
    with pytest.raises(ValueError, match="dtype"):
        race.race_matmul(8, device="cpu", dtype=dtype)
    with pytest.raises(ValueError, match="dtype"):
        race.race_mlp(8, 4, device="cpu", dtype=dtype)


@pytest.mark.parametrize("device", ["tpu", "gpu", "cuda:99", "nonsense device"])
def test_unknown_or_missing_device_raises_value_error(device):
    with pytest.raises(ValueError, match="device"):
        race.race_matmul(8, device=device)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"width": 0, "batch": 4}, "width"),
        ({"width": 4, "batch": 0}, "batch"),
        ({"width": -1, "batch": 4}, "width"),
        ({"width": 4, "batch": 4, "repeats": 0}, "repeats"),
        ({"width": 4, "batch": 4, "warmup": -1}, "warmup"),
        ({"width": 4, "batch": 4, "min_sample_s": 0}, "min_sample_s"),
        ({"width": 4, "batch": 4, "num_threads": 0}, "num_threads"),
        ({"width": 4, "batch": 4, "target_rel_width": 0}, "target_rel_width"),
        ({"width": 4, "batch": 4, "max_time_s": -1.0}, "max_time_s"),
        ({"width": 4, "batch": 4, "reuse": ["not a result"]}, r"reuse\[0\]"),
    ],
)
def test_bad_mlp_arguments_raise_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        race.race_mlp(device="cpu", **kwargs)


@pytest.mark.parametrize("sizes", [(), (8, 0), (-1,), "64", 64])
def test_bad_sweep_sizes(sizes):
    with pytest.raises(ValueError, match="sizes"):
        sweeps.sweep(sizes, device="cpu")


def test_bad_sweep_kind_width_and_batch():
    with pytest.raises(ValueError, match="kind"):
        sweeps.sweep((8,), kind="conv", device="cpu")
    with pytest.raises(ValueError, match="width"):
        sweeps.sweep((8,), kind="batch", width=0, device="cpu")
    with pytest.raises(ValueError, match="batch"):
        sweeps.sweep((8,), kind="mlp", batch=-2, device="cpu")


@pytest.fixture
def no_allocation(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("allocated tensors for a request that cannot fit")

    monkeypatch.setattr(race, "_operands", refuse)
    monkeypatch.setattr(race, "_mlp_setup", refuse)
    monkeypatch.setattr(race, "race_matmul", refuse)
    monkeypatch.setattr(race, "race_mlp", refuse)


def test_oversized_requests_are_refused_quickly_before_any_allocation(no_allocation):
    start = time.perf_counter()
    for call in (
        lambda: real_race_matmul(10**6, device="cpu"),
        lambda: real_race_mlp(10**7, 10**6, device="cpu"),
        lambda: real_sweep((64, 10**6), device="cpu"),
    ):
        with pytest.raises(ValueError, match="refused before allocating"):
            call()
    assert time.perf_counter() - start < 5.0


def test_refusal_threshold_follows_the_byte_estimate(monkeypatch):
    race_matmul = real_race_matmul

    class Allocated(Exception):
        pass

    def allocate(*args):
        raise Allocated

    monkeypatch.setattr(device_module, "available_bytes", lambda dev=None: 10**9)
    monkeypatch.setattr(race, "_operands", allocate)
    monkeypatch.setattr(timing, "calibrated_seconds", lambda *a, **k: 1e-6)  # a quick machine
    dtype = torch.bfloat16
    per_element = 3 * 4 + 3 * torch.finfo(dtype).bits // 8  # A, B, C in FP32 and in bf16
    assert cost.matmul_bytes(100, dtype) == 100 * 100 * per_element
    largest = math.isqrt(int(0.9 * 10**9 / per_element))
    with pytest.raises(Allocated):
        race_matmul(largest, device="cpu", dtype=dtype)  # fits: gets as far as allocating
    with pytest.raises(ValueError, match=f"choose n <= {largest}"):
        race_matmul(largest + 1, device="cpu", dtype=dtype)


# ------------------------------------------------------------------------------------------
# The ceiling and the sweep
# ------------------------------------------------------------------------------------------


# The datasheet table, exact names and every GPU's ceiling: tests/test_gpu_facts.py


def test_sweep_matmul_on_cpu_uses_the_measured_gemm_ratio_as_ceiling():
    import matplotlib

    matplotlib.use("Agg")
    s = sweeps.sweep((8, 16), device="cpu", show_progress=False, **FAST)
    assert s.sizes == (8, 16) and [r.params["n"] for r in s.results] == [8, 16]
    assert (
        s.ceiling.vs_fp32 == s.ceiling.measured_gemm > 0
    )  # no datasheet on a CPU: the raw GEMMs are the ceiling
    assert s.ceiling.gemm_shape == (16, 16, 16)
    expected = next(
        (size for i, size in enumerate(s.sizes) if all(o == "faster" for o in s.outcomes[i:])), None
    )
    assert s.first_paying_size == expected
    ax = sweeps.plot_sweep(s)
    ys = [tuple(line.get_ydata()) for line in ax.get_lines()]
    assert tuple(s.speedups) in ys
    assert (s.ceiling.vs_fp32, s.ceiling.vs_fp32) in ys  # the ceiling is drawn
    json.dumps(s.to_dict())
    with pytest.raises(ValueError, match="mlp"):
        sweeps.plot_memory(s)


def test_sweep_mlp_includes_memory_and_plots_it():
    import matplotlib

    matplotlib.use("Agg")
    s = sweeps.sweep((8, 16), kind="mlp", batch=4, device="cpu", show_progress=False, **FAST)
    assert [r.params["width"] for r in s.results] == [8, 16] and all(
        r.params["batch"] == 4 for r in s.results
    )
    ax = sweeps.plot_memory(s)
    mib = 2.0**20
    ys = [tuple(line.get_ydata()) for line in ax.get_lines()]
    assert tuple(r.memory["amp"] / mib for r in s.results) in ys


# ------------------------------------------------------------------------------------------
# Faked results: chosen samples, chosen machines
# ------------------------------------------------------------------------------------------

FASTER = [2.0, 2.1, 1.9, 2.0, 2.05, 1.95, 2.0, 2.02]  # per-round FP32/AMP ratios, interval well above 1
SLOWER = [0.25, 0.26, 0.24, 0.25, 0.25, 0.27, 0.23, 0.25]  # well below 1
CLOSE = [0.9, 1.1, 0.95, 1.05, 1.0, 0.92, 1.08, 1.02]  # straddles 1

NO_BF16 = {"avx512_bf16": False, "amx_bf16": False, "avx512_fp16": False}
AVX512_BF16 = {"avx512_bf16": True, "amx_bf16": False, "avx512_fp16": False}
UNKNOWN = {"avx512_bf16": None, "amx_bf16": None, "avx512_fp16": None}
GPUS = {"volta": ("Tesla V100-SXM2-32GB", (7, 0)), "ampere": ("NVIDIA A100-SXM4-80GB", (8, 0)),
        "hopper": ("NVIDIA H100 80GB HBM3", (9, 0)), "blackwell": ("NVIDIA B200", (10, 0))}  # fmt: skip


def _timing(name, seconds, spread=0.0):
    # spread puts a zig-zag on the samples (same on every contestant, so the ratios keep their values)
    return intervals.Timing(name, tuple(s * (1 + spread * (-1) ** i) for i, s in enumerate(seconds)), 1, 1)


def _result(ratios, *, device="cpu", dtype=torch.bfloat16, flags=NO_BF16, gpu=None, tf32_ratios=None, spread=0.0,
            kind="mlp", params=None, memory=None):  # fmt: skip
    """A RaceResult whose per-round FP32/AMP ratios are ``ratios`` (AMP: 1 ms per step)."""
    amp = [1e-3] * len(ratios)
    timings = {"fp32": _timing("fp32", [r * a for r, a in zip(ratios, amp, strict=True)], spread),
               "amp": _timing("amp", amp, spread)}  # fmt: skip
    if tf32_ratios is not None:
        timings["tf32"] = _timing("tf32", [r * 1e-3 for r in tf32_ratios], spread)
    ctx = {"device": device, "threads": 2, "tf32_matmul": None, "load_avg_1min": 3.5, "cpu_count": 2,
           "cpu_flags": flags, "sync": "perf_counter", "torch": torch.__version__}  # fmt: skip
    if gpu is not None:
        ctx.update(device="cuda:0", device_name=GPUS[gpu][0], capability=GPUS[gpu][1], tf32_matmul=False)
    params = params or {"width": 8, "batch": 4}
    return race.RaceResult(kind, params, dtype, timings, 1e6, memory, ctx)


def test_faked_results_have_the_outcomes_they_were_built_for():
    assert _result(FASTER).outcome == "faster" and _result(SLOWER).outcome == "slower"
    assert _result(CLOSE).outcome == "too close to call"
    assert _result(FASTER).speedup == pytest.approx(float(np.median(FASTER)))


def test_first_paying_size_needs_every_larger_size_to_be_measurably_faster():
    def sw(kinds):
        results = tuple(_result({"f": FASTER, "s": SLOWER, "c": CLOSE}[k], kind="matmul", params={"n": n})
                        for n, k in zip((1, 2, 3, 4), kinds, strict=True))  # fmt: skip
        return sweeps.SweepResult("matmul", (1, 2, 3, 4), results, sweeps.Ceiling(2.0, None, "x"), {})

    assert sw("sfcf").first_paying_size == 4
    assert sw("sfff").first_paying_size == 2
    assert sw("ssss").first_paying_size is None
    assert sw("fffc").first_paying_size is None  # too close to call at the largest size does not pay
    assert sw("sfcf").outcomes == ["slower", "faster", "too close to call", "faster"]


# ------------------------------------------------------------------------------------------
# explain: sentences composed from the measurement and the machine's facts
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ratios, flags, verdict, reason",
    [
        (SLOWER, NO_BF16, "race.verdict_slower", "race.cpu_emulated_slower"),
        (CLOSE, NO_BF16, "race.verdict_close", "race.cpu_emulated_close"),
        (FASTER, NO_BF16, "race.verdict_faster", "race.cpu_emulated_faster"),
        (FASTER, AVX512_BF16, "race.verdict_faster", "race.cpu_native_faster"),
        (SLOWER, AVX512_BF16, "race.verdict_slower", "race.cpu_native_not_faster"),
        (CLOSE, AVX512_BF16, "race.verdict_close", "race.cpu_native_not_faster"),
        (CLOSE, UNKNOWN, "race.verdict_close", "race.cpu_unknown"),
    ],
)
def test_explain_on_a_cpu_with_and_without_bf16(ratios, flags, verdict, reason):
    r = _result(ratios, flags=flags)
    reading = race_readout.explain(r)
    assert reading.outcome == r.outcome and reading.reasons[:2] == (verdict, reason)
    assert reading.facts["ratio"] == text.format_ratio(r.speedup) and reading.facts["low"] == "bfloat16"
    assert reading.facts["basis"] == f"95% interval {r.speedup_interval.ends_text()}, 8 interleaved pairs"
    assert reading.facts["inverse"] == pytest.approx(1 / r.speedup)
    assert str(reading)  # every code has its sentence
    assert race.native_arithmetic(r) is cpus.cpu_has_native(torch.bfloat16, flags=flags)


def test_explain_reads_the_recorded_flags_not_this_machines(monkeypatch):
    monkeypatch.setattr(
        race, "cpu_has_native", lambda dtype, flags=None: None if flags is None else flags["x"]
    )
    slow = race_readout.explain(_result(SLOWER, flags={"x": False}))
    assert "race.cpu_emulated_slower" in slow.reasons and slow.facts["insn"].startswith(
        "AVX512-BF16, AMX-BF16"
    )
    assert "race.cpu_native_faster" in race_readout.explain(_result(FASTER, flags={"x": True})).reasons


def test_explain_names_the_fp16_instructions_for_fp16():
    reading = race_readout.explain(_result(SLOWER, dtype=torch.float16))
    assert reading.facts["insn"] == "AVX512-FP16 or AMX-FP16" and reading.facts["low"] == "float16"


@pytest.mark.parametrize(
    "gpu, dtype, ratios, codes, arch",
    [
        ("volta", torch.float16, FASTER, ("race.gpu_faster", "race.gpu_regime"), "Volta"),
        ("volta", torch.bfloat16, SLOWER, ("race.gpu_bf16_emulated",), "Volta"),
        ("volta", torch.float16, CLOSE, ("race.gpu_launch_bound",), "Volta"),
        ("ampere", torch.bfloat16, FASTER, ("race.gpu_faster", "race.gpu_regime"), "Ampere"),
        ("ampere", torch.float16, SLOWER, ("race.gpu_launch_bound",), "Ampere"),
        ("hopper", torch.bfloat16, FASTER, ("race.gpu_faster", "race.gpu_regime"), "Hopper"),
        ("hopper", torch.float16, CLOSE, ("race.gpu_launch_bound",), "Hopper"),
        ("blackwell", torch.bfloat16, CLOSE, ("race.gpu_unknown_regime",), "Blackwell"),
    ],
)
def test_explain_on_cuda_volta_ampere_hopper(gpu, dtype, ratios, codes, arch):
    r = _result(ratios, gpu=gpu, dtype=dtype, tf32_ratios=[x / 2 for x in ratios])
    reading = race_readout.explain(r)
    assert reading.outcome == r.outcome and reading.reasons[1 : 1 + len(codes)] == codes
    assert reading.facts["arch"].startswith(arch)
    if "race.gpu_launch_bound" in codes:
        assert r.regimes["amp"].name == "launch-bound"  # 1 ms for a width-8 step: no GPU is busy with that
        assert reading.facts["regime"] == str(r.regimes["amp"])
    tf32 = r.speedup_vs_tf32_interval
    assert reading.facts["vs_tf32"] == str(tf32)
    assert ("race.tf32_none_on_arch" if gpu == "volta" else "race.tf32_vs") in reading.reasons
    assert race.native_arithmetic(r) is (not (gpu == "volta" and dtype == torch.bfloat16))
    assert str(reading)


def test_explain_warns_when_the_measurement_is_noisy():
    # noisy samples whose pairs still agree (the zig-zag hits both contestants alike): a remark only
    paired = race_readout.explain(_result(FASTER, spread=0.5, flags=AVX512_BF16))
    assert paired.reasons[-1] == "race.noisy_but_narrow" and "race.noisy" not in paired.reasons
    assert paired.facts["worst_iqr_pct"] > 20 and paired.facts["busy"] == ", load average 3.5 on 2 cores"
    # pairs that disagree: the interval is wide, and the reading says to race again
    wide = race_readout.explain(_result([0.5, 1.6, 0.7, 1.4, 0.6, 1.5, 0.8, 1.3]))
    assert wide.reasons[-1] == "race.noisy" and wide.facts["widest_pct"] > 25
    assert not {"race.noisy", "race.noisy_but_narrow"} & set(
        race_readout.explain(_result(FASTER, flags=AVX512_BF16)).reasons
    )


def test_too_few_pairs_is_too_close_to_call_and_says_why():
    r = _result([3.0, 3.0, 3.0])
    assert r.outcome == "too close to call"
    reading = race_readout.explain(r)
    assert reading.reasons[0] == "race.verdict_close" and "race.noisy" not in reading.reasons
    assert reading.facts["basis"] == "3 pairs: too few for a 95% interval"


# ------------------------------------------------------------------------------------------
# Sizes from facts; one measurement per configuration
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "device_type, native, case, largest_n, mlp",
    [
        ("cpu", False, "cpu-emulated", 256, (256, 64)),  # AVX2 laptop: stays small
        ("cpu", None, "cpu-unknown", 256, (256, 64)),  # unknown: as small as without
        ("cpu", True, "cpu-native", 1024, (2048, 1024)),  # AVX512-BF16 / AMX / ARM bf16: where bf16 wins
        ("cuda", None, "gpu", 8192, (8192, 8192)),  # past launch overhead on an H200 (docs/results)
        ("cuda", False, "gpu", 8192, (8192, 8192)),  # "native" is a CPU fact: ignored on a GPU
    ],
)
def test_race_sizes_are_a_pure_function_of_the_machines_facts(device_type, native, case, largest_n, mlp):
    s = sweeps.race_sizes(device_type, torch.bfloat16, native=native)
    assert s.case == case and s.device_type == device_type
    assert max(s.matmul_sizes) == largest_n and (s.width, s.batch) == mlp
    assert s.width in s.mlp_widths and s.batch in s.batches  # the main race is one point of each sweep
    assert s.aligned_n in s.matmul_sizes
    for sizes in (s.matmul_sizes, s.mlp_widths, s.batches, s.widget_widths, s.widget_batches):
        assert list(sizes) == sorted(set(sizes))
    assert s.budget["target_rel_width"] > 0 and s.budget["max_time_s"] > 0
    assert s.budget.get("num_threads") == (1 if device_type == "cpu" else None)
    # the same facts give the same sizes; other facts may not
    assert sweeps.race_sizes(device_type, torch.bfloat16, native=native) == s


def test_a_native_cpu_races_larger_sizes_than_an_emulating_one():
    assert sweeps.race_sizes("cpu", torch.float16, native=False).dtype == torch.float16
    native, emulated = sweeps.race_sizes("cpu", native=True), sweeps.race_sizes("cpu", native=False)
    assert max(native.matmul_sizes) >= 4 * max(emulated.matmul_sizes)
    assert native.width * native.batch >= 64 * emulated.width * emulated.batch


def test_sizes_for_reads_this_machine(monkeypatch):
    monkeypatch.setattr(sweeps, "cpu_has_native", lambda dtype, flags=None: True)
    assert sweeps.sizes_for("cpu").case == "cpu-native"
    monkeypatch.setattr(sweeps, "cpu_has_native", lambda dtype, flags=None: False)
    assert sweeps.sizes_for("cpu").case == "cpu-emulated"


def test_default_sweep_sizes_follow_the_verdict(monkeypatch):
    seen = []
    monkeypatch.setattr(
        race, "race_matmul", lambda n, **kw: seen.append(n) or _result(FASTER, kind="matmul", params={"n": n})
    )
    monkeypatch.setattr(
        sweeps, "_raw_gemm_ratio", lambda *a, **kw: (intervals.speedup_estimate(FASTER, [1.0] * 8), {})
    )
    monkeypatch.setattr(sweeps, "check_fits", lambda *a: None)
    for native in (True, False):
        monkeypatch.setattr(sweeps, "cpu_has_native", lambda dtype, flags=None, native=native: native)
        seen.clear()
        s = sweeps.sweep(device="cpu", show_progress=False)
        assert tuple(seen) == s.sizes == sweeps.race_sizes("cpu", native=native).matmul_sizes


def test_reuse_returns_the_same_measurement_instead_of_racing_again(monkeypatch):
    first = race.race_matmul(8, device="cpu", **FAST)
    mlp = race.race_mlp(8, 4, in_features=16, device="cpu", **FAST)

    def refuse(*args, **kwargs):
        raise AssertionError("raced a configuration that had been measured already")

    monkeypatch.setattr(race, "measure", refuse)
    assert race.race_matmul(8, device="cpu", reuse=[mlp, first], **FAST) is first
    assert race.race_mlp(8, 4, in_features=16, device="cpu", reuse=[first, mlp], **FAST) is mlp
    s = sweeps.SweepResult("matmul", (8,), (first,), sweeps.Ceiling(1.0, None, "x"), first.context)
    assert race.race_matmul(8, device="cpu", reuse=s, **FAST) is first  # a sweep's results count too
    with pytest.raises(AssertionError, match="measured already"):  # another size, dtype or thread count races
        race.race_matmul(16, device="cpu", reuse=[first], **FAST)
    with pytest.raises(AssertionError, match="measured already"):
        race.race_matmul(8, device="cpu", dtype="fp16", reuse=[first], **FAST)
    with pytest.raises(AssertionError, match="measured already"):
        race.race_matmul(8, device="cpu", num_threads=first.context["threads"] + 1, reuse=[first], **FAST)
    without_memory = dataclasses.replace(mlp, memory=None)
    assert (
        race.race_mlp(8, 4, in_features=16, device="cpu", memory=False, reuse=[without_memory], **FAST)
        is without_memory
    )
    with pytest.raises(
        AssertionError, match="measured already"
    ):  # memory asked for but not measured: race again
        race.race_mlp(8, 4, in_features=16, device="cpu", reuse=[without_memory], **FAST)


def test_batch_sweep_races_batches_at_one_width_and_reuses_the_main_race():
    import matplotlib

    matplotlib.use("Agg")
    main = race.race_mlp(16, 8, device="cpu", **FAST)
    s = sweeps.sweep((4, 8), kind="batch", width=16, device="cpu", show_progress=False, reuse=[main], **FAST)
    assert [r.params["batch"] for r in s.results] == [4, 8] and all(
        r.params["width"] == 16 for r in s.results
    )
    assert s.results[1] is main
    assert s.ceiling.gemm_shape == (8, cost.IN_FEATURES, 16)
    ax = sweeps.plot_memory(s)
    assert "batch (width 16)" in ax.get_xlabel()
    reading = race_readout.sweep_summary(s)
    assert reading.facts["what"] == "training step of the tutorial loop's model at width 16, by batch"
    assert reading.facts["name"] == "batch" and reading.facts["largest"] == 8


# ------------------------------------------------------------------------------------------
# memory_summary
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fp32, amp, outcome, why",
    [
        (100.0, 60.0, "saves", "race.memory_activations_win"),
        (100.0, 102.0, "costs", "race.memory_small_share"),
        (100.0, 97.0, "saves", "race.memory_small_share"),
        (100.0, 130.0, "costs", "race.memory_copies_cost"),
        (100.0, 100.2, "nothing", "race.memory_small_share"),
    ],
)
def test_memory_summary_reads_the_measured_memory(fp32, amp, outcome, why):
    mib = 2**20
    r = _result(
        FASTER, memory={"fp32": fp32 * mib, "amp": amp * mib, "method": "measured: max_memory_allocated"}
    )
    reading = race_readout.memory_summary(r)
    assert reading.outcome == outcome and reading.reasons == (f"race.memory_{outcome}", why)
    assert reading.facts["saving"] == pytest.approx(1 - amp / fp32)  # hand-computed: 40%, -2%, 3%, -30%
    assert reading.facts["fp32_bytes"] == f"{fp32:.2f} MiB" and reading.facts["how"] == "measured"


def test_memory_summary_of_a_sweep_and_bad_input():
    mib = 2**20
    rs = tuple(_result(FASTER, params={"width": w, "batch": 4}, memory={"fp32": 100 * mib, "amp": a * mib, "method": "estimate"})
               for w, a in ((8, 101), (16, 70)))  # fmt: skip
    s = sweeps.SweepResult("mlp", (8, 16), rs, sweeps.Ceiling(1.0, None, "x"), {})
    reading = race_readout.memory_summary(s)
    assert reading.reasons[-2:] == ("race.sweep_memory_first_costs", "race.sweep_memory_last_saves")
    assert reading.facts["first_saving"] == pytest.approx(0.01) and reading.facts[
        "last_saving"
    ] == pytest.approx(0.3)
    assert reading.outcome == "saves" and reading.facts["how"] == "estimated"
    with pytest.raises(ValueError, match="memory"):
        race_readout.memory_summary(_result(FASTER))


# ------------------------------------------------------------------------------------------
# Results files
# ------------------------------------------------------------------------------------------


def test_load_reference_results(tmp_path):
    assert references.load_reference_results(tmp_path) == []
    with pytest.raises(ValueError, match="directory=.*missing.*does not exist"):
        references.load_reference_results(tmp_path / "missing")  # issue 14: a typo is not "no results"
    (tmp_path / "old.json").write_text(
        json.dumps({"schema": references.RESULTS_SCHEMA, "date": "2025-01-01T00:00:00+00:00"})
    )
    (tmp_path / "new.json").write_text(
        json.dumps({"schema": references.RESULTS_SCHEMA, "date": "2026-01-01T00:00:00+00:00"})
    )
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something else"}))
    (tmp_path / "broken.json").write_text("{not json")
    found = references.load_reference_results(tmp_path)
    assert [d["_file"] for d in found] == ["new.json", "old.json"]
    assert isinstance(references.load_reference_results(), list)  # the committed docs/results/


def _gpu_check_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_records_a_missing_probe_instead_of_failing(monkeypatch):
    gpu_check = _gpu_check_module()
    import amp_lab

    monkeypatch.setitem(sys.modules, "amp_lab.autocast_ops", None)  # importing it now raises ImportError
    monkeypatch.delattr(amp_lab, "autocast_ops", raising=False)
    result = gpu_check.run_probe("cpu")
    assert result["status"] == "unavailable" and "autocast_ops" in result["reason"]


# ------------------------------------------------------------------------------------------
# The widget
# ------------------------------------------------------------------------------------------


@pytest.fixture
def racer():
    return race_widget.race_widget(device="cpu", widths=(8, 16), batches=(4, 8), in_features=16, warmup=1, repeats=3,
                            min_sample_s=1e-4, target_rel_width=None)  # fmt: skip


def test_widget_has_the_stable_css_classes_and_starts_ready(racer):
    assert "amp-race-button" in racer.button._dom_classes
    assert "amp-race-result" in racer.result._dom_classes
    assert 'data-race-state="ready"' in racer.result.value
    assert racer.precision.value == "bfloat16" and racer.dtype == torch.bfloat16


def test_widget_defaults_come_from_the_sizes_for_this_machine():
    w = race_widget.race_widget(device="cpu")
    s = sweeps.sizes_for("cpu")
    assert tuple(w.width.options) == s.widget_widths and tuple(w.batch.options) == s.widget_batches
    assert w.budget == {"num_threads": None, **s.budget}


def test_changing_a_control_updates_the_card_with_the_packages_flop_count(racer):
    racer.width.value = 16
    racer.batch.value = 8
    flops = cost.mlp_step_flops(16, 8, in_features=16)
    assert "width 16, batch 8" in racer.result.value
    assert f"{flops / 1e6:,.1f} MFLOP" in racer.result.value
    racer.precision.value = "float16"
    assert "AMP in float16" in racer.result.value


def test_pressing_race_runs_the_race_moves_both_lanes_and_fills_the_card(racer):
    racer.precision.value = "float16"
    moves = []
    racer.fp32_bar.observe(lambda ch: moves.append(ch["new"]), names="value")
    racer.button.click()
    r = racer.last
    assert isinstance(r, race.RaceResult) and r.dtype == torch.float16 and r.params["width"] == 8
    assert 'data-race-state="done"' in racer.result.value
    assert f"<b class='amp-race-speedup'>{text.format_ratio(r.speedup)}</b>" in racer.result.value
    assert f"data-outcome='{r.outcome}'" in racer.result.value
    assert html.escape(str(race_readout.explain(r))) in racer.result.value
    for t in r.timings.values():  # each contestant's median and spread, as the package prints them
        assert (
            f">{text.format_seconds(t.median)}<" in racer.result.value
            and f">{text.format_seconds(t.iqr)}<" in racer.result.value
        )
    assert len(moves) >= racer.repeats  # the lane moved during the race, not only at the end
    rounds = len(r.fp32.samples)
    fastest = min(r.fp32.median, r.amp.median)
    assert racer.fp32_bar.value == pytest.approx(rounds * fastest / r.fp32.median)
    assert racer.amp_bar.value == pytest.approx(rounds * fastest / r.amp.median)
    assert max(racer.fp32_bar.value, racer.amp_bar.value) == pytest.approx(rounds)
    assert not racer.button.disabled


def test_lanes_grow_when_sampling_goes_past_the_minimum_and_colours_follow_the_outcome():
    w = race_widget.race_widget(device="cpu", widths=(8,), batches=(4,), in_features=16, warmup=1, repeats=3)
    w._show(_result(FASTER))
    assert w.fp32_bar.max == w.amp_bar.max == 8 and w.amp_bar.value == pytest.approx(8)
    assert (w.fp32_bar.bar_style, w.amp_bar.bar_style) == ("warning", "success")
    w._show(_result(SLOWER))
    assert (w.fp32_bar.bar_style, w.amp_bar.bar_style) == ("success", "warning")
    w._show(_result(CLOSE))
    assert (w.fp32_bar.bar_style, w.amp_bar.bar_style) == ("info", "info")
    assert "data-outcome='too close to call'" in w.result.value


def test_the_card_says_too_close_to_call_and_reads_the_memory():
    mib = 2**20
    card = race_widget.result_card_html(
        _result(CLOSE, memory={"fp32": 4 * mib, "amp": 4.1 * mib, "method": "estimate"})
    )
    assert "data-outcome='too close to call'" in card
    reading = race_readout.explain(_result(CLOSE))
    assert reading.reasons[0] == "race.verdict_close" and html.escape(str(reading)) in card


def test_a_failed_race_is_shown_in_the_card(racer, monkeypatch):
    def boom(*args, **kwargs):
        raise ValueError("width=8 is too wide for this test")

    monkeypatch.setattr(race, "race_mlp", boom)
    assert racer.run() is None
    assert 'data-race-state="error"' in racer.result.value and "too wide for this test" in racer.result.value
    assert not racer.button.disabled


# ------------------------------------------------------------------------------------------
# sweep_summary
# ------------------------------------------------------------------------------------------


def _sweep_of(kinds, ceiling, spread=0.0, flags=NO_BF16):
    series = {
        "f": FASTER,
        "s": SLOWER,
        "c": CLOSE,
        "F": [4 * x for x in FASTER],
        "S": [x / 4 for x in SLOWER],
    }
    sizes = tuple(2 ** (5 + i) for i in range(len(kinds)))
    results = tuple(_result(series[k], kind="matmul", params={"n": n}, spread=spread, flags=flags)
                    for n, k in zip(sizes, kinds, strict=True))  # fmt: skip
    return sweeps.SweepResult("matmul", sizes, results, ceiling, results[0].context)


def test_sweep_summary_reads_the_sweep_with_intervals():
    datasheet = sweeps.datasheet_ceiling("NVIDIA A100-SXM4-80GB", torch.float16)
    s = _sweep_of("scfF", datasheet)
    reading = race_readout.sweep_summary(s)
    assert reading.outcome == "pays" and reading.facts["pays_from"] == 128
    assert reading.reasons == (
        "race.sweep_sizes",
        "race.sweep_pays",
        "race.sweep_grew",
        "race.peak_ratio",
        "race.speedup_bound",
    )
    for n, e in zip(s.sizes, s.intervals, strict=True):
        assert (
            f"n {n}: {text.format_ratio(e.ratio)} ({e.ends_text()}): {e.outcome}" in reading.facts["per_size"]
        )
    assert (reading.facts["first_ratio"], reading.facts["last_ratio"]) == ("0.25x", "8.00x")
    assert reading.facts["best"] == "8.00x" and reading.facts["best_at"] == 256
    assert reading.facts["peak_ratio"] == 16  # the A100's FP16 / FP32 peaks (bounds: tests/test_race_nb06.py)


def test_sweep_summary_too_close_at_the_top_and_a_ceiling_below_one():
    cpu = sweeps.Ceiling(
        0.05,
        None,
        "measured on this cpu",
        measured_interval=intervals.speedup_estimate([0.05] * 8, [1.0] * 8),
    )
    reading = race_readout.sweep_summary(_sweep_of("Ssc", cpu))
    assert reading.outcome == "does_not_pay" and reading.facts["last_outcome"] == "too close to call"
    assert reading.reasons == (
        "race.sweep_sizes",
        "race.sweep_never_pays",
        "race.sweep_grew",
        "race.peak_ratio_below_one",
    )
    assert reading.facts["measured"] == "0.05x (95% interval 0.05x to 0.05x)"
    assert "race.sweep_flat" in race_readout.sweep_summary(_sweep_of("cc", cpu)).reasons
    assert "race.sweep_shrank" in race_readout.sweep_summary(_sweep_of("fs", cpu)).reasons
    noisy = race_readout.sweep_summary(_sweep_of("cs", cpu, spread=0.5))
    assert noisy.reasons[-1] == "race.noisy_but_narrow" and noisy.facts["worst_iqr_pct"] == pytest.approx(100)


def test_the_plot_draws_the_interval():
    import matplotlib

    matplotlib.use("Agg")
    s = _sweep_of("scf", sweeps.Ceiling(2.0, None, "x"))
    ax = sweeps.plot_sweep(s)
    bars = ax.containers[0].lines[2][0].get_segments()  # one vertical segment per size: its interval
    e = s.intervals[1]
    assert (bars[1][0][1], bars[1][1][1]) == pytest.approx((e.low, e.high)) and e.low < 1 < e.high
    assert "95% interval" in " ".join(t.get_text() for t in ax.get_legend().get_texts())
    r = _result([3.0, 3.0], kind="matmul", params={"n": 32})
    few = sweeps.plot_sweep(
        sweeps.SweepResult("matmul", (32,), (r,), sweeps.Ceiling(2.0, None, "x"), r.context)
    )
    seg = few.containers[0].lines[2][0].get_segments()[0]  # too few pairs: no bar rather than 0..inf
    assert seg[0][1] == seg[1][1] == pytest.approx(3.0)


# ----------------------------------------------------------------------------------------------
# Issue 14: every bad input gets a clear error before any work starts; nothing runs unbounded
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def no_racing(monkeypatch):
    """Racing (or allocating a model) fails loudly: a refused call must stop before either."""

    def boom(*args, **kwargs):
        raise AssertionError("work started although the arguments should have been refused")

    monkeypatch.setattr(race, "measure", boom)
    monkeypatch.setattr(roofline, "measure", boom)
    monkeypatch.setattr(sweeps, "measure", boom)
    monkeypatch.setattr(race, "race_matmul", boom)
    monkeypatch.setattr(race, "race_mlp", boom)
    monkeypatch.setattr(torch.nn, "Linear", boom)
    return boom


_real_race_matmul, _real_race_mlp, _real_sweep, _real_measure = (
    race.race_matmul,
    race.race_mlp,
    sweeps.sweep,
    timing.measure,
)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: _real_race_matmul(16, device="cpu", repeats=10**12), ValueError, "repeats must be <= 10000"),
        (
            lambda: _real_race_matmul(16, device="cpu", min_sample_s=1e6),
            ValueError,
            "min_sample_s must be <= 10",
        ),
        (lambda: _real_race_matmul(16, device="cpu", warmup=10**9), ValueError, "warmup must be <= 10000"),
        (
            lambda: _real_race_matmul(16, device="cpu", max_time_s=1e9),
            ValueError,
            "max_time_s must be <= 3600",
        ),
        (
            lambda: _real_race_matmul(16, device="cpu", num_threads=10**6),
            ValueError,
            "num_threads must be <= 1024",
        ),
        (
            lambda: _real_race_matmul(16, device="cpu", repeats=9000, min_sample_s=1.0),
            ValueError,
            "limit of 3600",
        ),
        (lambda: _real_race_matmul(16, device="cpu", callback=5), TypeError, "callback must be a function"),
        (lambda: _real_race_matmul(16, device="cpu", reuse=5), TypeError, "reuse must be a RaceResult"),
        (
            lambda: _real_race_mlp(16, 8, device="cpu", memory="yes"),
            TypeError,
            "memory must be True or False",
        ),
        (lambda: _real_race_mlp(16, 8, device="cpu", repeats=10**12), ValueError, "repeats must be <= 10000"),
        (lambda: _real_measure(_no_call, min_sample_s=1e6), ValueError, "min_sample_s must be <= 10"),
        (lambda: _real_measure(_no_call, repeats=10**12), ValueError, "repeats must be <= 10000"),
        (lambda: _real_sweep({16: 1}, device="cpu"), TypeError, "sizes must be a list or tuple"),
        (lambda: _real_sweep({16, 32}, device="cpu"), TypeError, "sizes must be a list or tuple"),
        (lambda: _real_sweep(list(range(1, 100)), device="cpu"), ValueError, "at most 64"),
        (
            lambda: _real_sweep([16], device="cpu", show_progress="no"),
            TypeError,
            "show_progress must be True or False",
        ),
        (lambda: _real_sweep([16], device="cpu", repeats=10**12), ValueError, "repeats must be <= 10000"),
        (
            lambda: _real_sweep([16] * 10, device="cpu", max_time_s=3000.0),
            ValueError,
            "more than the course's limit",
        ),
    ],
)
def test_races_and_sweeps_are_bounded_before_they_start(no_racing, call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def _no_call():
    raise AssertionError("timed although refused")


@pytest.mark.parametrize(
    "fn",
    [race_readout.explain, race_readout.tf32_summary, race.native_arithmetic, race_readout.sweep_summary,
     sweeps.plot_sweep, sweeps.plot_memory, race_readout.memory_summary, references.describe_reference, references.reference_table_html],
)  # fmt: skip
@pytest.mark.parametrize("bad", [None, "result", {"kind": "matmul"}])
def test_readers_of_results_refuse_what_is_not_a_result_with_a_type_error(fn, bad):
    if fn is references.describe_reference and isinstance(bad, dict):
        bad = 5
    with pytest.raises(TypeError, match=r"^(result|reference|references) must be"):
        fn(bad)


def test_load_reference_results_names_a_folder_that_is_not_there(tmp_path):
    with pytest.raises(ValueError, match="directory='/nonexistent' does not exist"):
        references.load_reference_results("/nonexistent")
    (tmp_path / "a.json").write_text("{}")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        references.load_reference_results(tmp_path / "a.json")
    with pytest.raises(TypeError, match="directory must be a folder path"):
        references.load_reference_results(123)
    (tmp_path / "README.md").write_text("results go here")
    assert (
        references.load_reference_results(tmp_path) == [] == references.load_reference_results(str(tmp_path))
    )


def test_the_default_results_folder_with_only_a_readme_gives_no_results(tmp_path, monkeypatch):
    (tmp_path / "README.md").write_text("results go here")
    with pytest.raises(ValueError, match="does not exist"):  # an explicit folder must exist ...
        references.load_reference_results(tmp_path / "not-created-yet")
    monkeypatch.setattr(references, "RESULTS_DIR", tmp_path)
    assert references.load_reference_results() == []
    monkeypatch.setattr(references, "RESULTS_DIR", tmp_path / "not-created-yet")
    assert (
        references.load_reference_results() == []
    )  # the default folder may be missing from a trimmed checkout


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"widths": {64: 1}}, TypeError, "widths must be a list or tuple"),
        ({"batches": {16, 32}}, TypeError, "batches must be a list or tuple"),
        ({"widths": []}, ValueError, "widths must hold at least one"),
        ({"repeats": 10**12}, ValueError, "repeats must be <= 10000"),
        ({"warmup": 10**9}, ValueError, "warmup must be <= 10000"),
        ({"min_sample_s": 1e6}, ValueError, "min_sample_s must be <= 10"),
        ({"max_time_s": 1e9}, ValueError, "max_time_s must be <= 3600"),
        ({"widths": [10**6], "batches": [10**6]}, ValueError, "RaceWidget's largest race.*refused before"),
    ],
)
def test_race_widget_checks_its_settings_before_it_is_built(no_racing, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        race_widget.RaceWidget(device="cpu", **kwargs)


# ------------------------------------------------------------------------------------------
# Issue 14: what the fuzz suite found, each refused by amp_lab with the argument named
# ------------------------------------------------------------------------------------------


def _mlp_sweep():
    memory = {"fp32": 3 * 2**20, "amp": 2 * 2**20, "method": "estimate"}
    results = tuple(_result(FASTER, params={"width": w, "batch": 4}, memory=memory) for w in (8, 16))
    return sweeps.SweepResult("mlp", (8, 16), results, sweeps.datasheet_ceiling("NVIDIA A100-SXM4-80GB", torch.bfloat16),
                            results[0].context)  # fmt: skip


@pytest.mark.parametrize("plot", [sweeps.plot_sweep, sweeps.plot_memory])
@pytest.mark.parametrize("bad", [0, 1.5, True, "junk", [], {}, torch.ones(2), lambda: None])
def test_plots_refuse_an_ax_that_is_not_a_matplotlib_axes(plot, bad):
    import matplotlib

    matplotlib.use("Agg")
    with pytest.raises(TypeError, match=r"^ax must be a matplotlib Axes"):
        plot(_mlp_sweep(), ax=bad)


def test_plots_still_draw_on_a_given_axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    assert sweeps.plot_memory(_mlp_sweep(), ax=ax) is ax
    plt.close("all")


@pytest.mark.parametrize("target", [1e-50, 1e-9, 9.99e-4])
@pytest.mark.parametrize("call", ["race_matmul", "race_mlp", "sweep", "RaceWidget"])
def test_a_target_interval_too_narrow_to_reach_is_refused_before_any_race(monkeypatch, call, target):
    def refuse(*args, **kwargs):
        raise AssertionError("started a race with a target it can never reach")

    monkeypatch.setattr(race, "_operands", refuse)
    monkeypatch.setattr(race, "_mlp_setup", refuse)
    monkeypatch.setattr(race, "measure", refuse)
    fn = {"race_matmul": lambda **k: race.race_matmul(8, device="cpu", **k),
          "race_mlp": lambda **k: race.race_mlp(8, 8, device="cpu", **k),
          "sweep": lambda **k: sweeps.sweep((8,), device="cpu", **k),
          "RaceWidget": lambda **k: race_widget.RaceWidget(device="cpu", **k)}[call]  # fmt: skip
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"^target_rel_width=.* is narrower than a timer can resolve"):
        fn(target_rel_width=target)
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    ("capability", "expected"),
    [(None, None), ((7, 0), "no bf16 Tensor Cores"), ((8, 0), None)],
)
def test_precision_warning_reads_an_unknown_capability_as_no_warning(capability, expected):
    got = race_widget.precision_warning("cuda", capability, torch.bfloat16)
    assert got is None if expected is None else expected in got


# ----------------------------------------------------------------------------------------------
# Issue 15: the memory-bound regime (arithmetic intensity, race_elementwise, the measured roofline)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "m, n, k, dtype, out_dtype, flops, nbytes",
    [
        # 2 * 1024**3 FLOPs over A, B and C of 1024**2 elements each: 4 or 2 bytes per element
        (1024, 1024, 1024, torch.float32, None, 2 * 1024**3, 3 * 1024**2 * 4),
        (1024, 1024, 1024, torch.float16, None, 2 * 1024**3, 3 * 1024**2 * 2),
        (1024, 1024, 1024, torch.bfloat16, None, 2 * 1024**3, 3 * 1024**2 * 2),
        # 16-bit A and B, FP32 C: 2 + 2 + 4 bytes per element of each n x n matrix
        (1024, 1024, 1024, torch.float16, torch.float32, 2 * 1024**3, 1024**2 * (2 + 2 + 4)),
        # non-square: A 64 x 256, B 256 x 32, C 64 x 32, in FP32
        (64, 32, 256, torch.float32, None, 2 * 64 * 32 * 256, 4 * (64 * 256 + 256 * 32 + 64 * 32)),
        # a matrix-vector product (n = 1): about 2 FLOPs per 4-byte weight read, whatever the size
        (4096, 1, 4096, torch.float32, None, 2 * 4096 * 4096, 4 * (4096 * 4096 + 4096 + 4096)),
    ],
)
def test_matmul_intensity_is_flops_over_the_bytes_of_a_b_and_c(m, n, k, dtype, out_dtype, flops, nbytes):
    assert cost.matmul_intensity(m, n, k, dtype, out_dtype=out_dtype) == pytest.approx(
        flops / nbytes, rel=1e-15
    )


def test_matmul_intensity_hand_values_and_the_byte_counts_it_shares():
    assert cost.matmul_intensity(1024, 1024, 1024, "fp32") == pytest.approx(512 / 3)  # 170.67
    assert cost.matmul_intensity(1024, 1024, 1024, "fp16") == pytest.approx(1024 / 3)  # 341.33
    assert cost.matmul_intensity(1024, 1024, 1024, "fp16", out_dtype="fp32") == 256.0
    # one cost model: the FP32 race_matmul contestant's bytes are exactly A, B and C
    for n in (1, 7, 256):
        assert cost.call_bytes("matmul", {"n": n}, None) == 2 * n**3 / cost.matmul_intensity(n, n, n)
    # the oracle for the element sizes is torch itself
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        size = torch.empty((), dtype=dtype).element_size()
        assert cost.elementwise_intensity(dtype) == pytest.approx(1 / (3 * size))
        assert (
            cost.call_bytes("elementwise", {"numel": 10}, None if dtype == torch.float32 else dtype)
            == 30 * size
        )


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: cost.matmul_intensity(0, 4, 4), ValueError, "m must be >= 1"),
        (lambda: cost.matmul_intensity(4, 4.0, 4), TypeError, "n must be an integer"),
        (lambda: cost.matmul_intensity(4, 4, 2**40), ValueError, "k must be <="),
        (lambda: cost.matmul_intensity(4, 4, 4, "int8"), ValueError, "dtype='int8'"),
        (
            lambda: cost.matmul_intensity(4, 4, 4, torch.float16, out_dtype=torch.float64),
            ValueError,
            "out_dtype=",
        ),
        (lambda: cost.elementwise_intensity(torch.int32), ValueError, "dtype="),
        (lambda: cost.elementwise_intensity(None), TypeError, "dtype must be a torch dtype"),
    ],
)
def test_intensity_helpers_refuse_bad_arguments_naming_them(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_race_elementwise_adds_tensors_stored_in_each_dtype(monkeypatch, dtype):
    seen = {}
    real_measure = timing.measure

    def spy(contestants, **kwargs):
        seen.update({name: c.fn().clone() for name, c in contestants.items()})
        return real_measure(contestants, **kwargs)

    monkeypatch.setattr(race, "measure", spy)
    numel = 1000
    r = roofline.race_elementwise(numel, device="cpu", dtype=dtype, **FAST)
    a, b = roofline._elementwise_operands(numel, torch.device("cpu"))
    # the oracle: torch.add on the values stored in each dtype, no autocast involved
    assert seen["fp32"].dtype == torch.float32 and seen["amp"].dtype == dtype
    torch.testing.assert_close(seen["fp32"], a + b, rtol=0, atol=0)
    torch.testing.assert_close(seen["amp"], a.to(dtype) + b.to(dtype), rtol=0, atol=0)
    assert set(r.timings) == {"fp32", "amp"} and r.kind == "elementwise" and r.params == {"numel": numel}
    assert r.flops == numel and r.size == f"numel={numel}" and r.dtype == dtype
    assert r.bytes_moved("fp32") == 12 * numel and r.bytes_moved("amp") == 6 * numel
    assert r.intensity("fp32") == cost.elementwise_intensity(torch.float32)
    assert r.context["race"] == "elementwise" and r.context["op"] == "torch.add"
    assert r.context["tf32_matmul"] is None  # stated as race_matmul states it: not applicable on a CPU
    ratios = np.array(r.fp32.samples) / np.array(r.amp.samples)
    assert r.speedup == pytest.approx(float(np.median(ratios)), rel=1e-12)
    json.dumps(r.to_dict())
    assert (
        timing.regime_for(1e-3, r.flops, r.bytes_moved("amp"), dtype, r.context).name == "unknown"
    )  # no datasheet
    assert roofline.race_elementwise(numel, device="cpu", dtype=dtype, reuse=[r], **FAST) is r


def test_race_elementwise_refuses_bad_inputs_before_racing(no_racing):
    for call, exc, match in [
        (lambda: roofline.race_elementwise(0, device="cpu"), ValueError, "numel must be >= 1"),
        (lambda: roofline.race_elementwise(2.0**10, device="cpu"), TypeError, "numel must be an integer"),
        (lambda: roofline.race_elementwise(True, device="cpu"), TypeError, "numel must be an integer"),
        (lambda: roofline.race_elementwise(2**41, device="cpu"), ValueError, "numel must be <="),
        (lambda: roofline.race_elementwise(8, device="cpu", dtype=torch.float32), ValueError, "dtype="),
        (lambda: roofline.race_elementwise(8, device="tpu"), ValueError, "device"),
        (
            lambda: roofline.race_elementwise(8, device="cpu", repeats=10**12),
            ValueError,
            "repeats must be <= 10000",
        ),
        (
            lambda: roofline.race_elementwise(8, device="cpu", max_time_s=1e9),
            ValueError,
            "max_time_s must be <= 3600",
        ),
        (
            lambda: roofline.race_elementwise(8, device="cpu", target_rel_width=1e-9),
            ValueError,
            "target_rel_width",
        ),
        (
            lambda: roofline.race_elementwise(8, device="cpu", callback=5),
            TypeError,
            "callback must be a function",
        ),
        (
            lambda: roofline.race_elementwise(8, device="cpu", reuse=5),
            TypeError,
            "reuse must be a RaceResult",
        ),
    ]:
        with pytest.raises(exc, match=match):
            call()


def test_race_elementwise_refuses_an_oversized_request_before_allocating(monkeypatch, no_racing):
    class Allocated(Exception):
        pass

    def allocate(*args):
        raise Allocated

    monkeypatch.setattr(device_module, "available_bytes", lambda dev=None: 10**9)
    monkeypatch.setattr(roofline, "_elementwise_operands", allocate)
    dtype = torch.bfloat16
    per_element = 3 * 4 + 3 * 2  # a, b and c in FP32 and in bf16
    assert cost.elementwise_bytes(100, dtype) == 100 * per_element
    largest = int(0.9 * 10**9 / per_element)
    with pytest.raises(Allocated):
        roofline.race_elementwise(largest, device="cpu", dtype=dtype)  # fits: gets as far as allocating
    start = time.perf_counter()
    with pytest.raises(
        ValueError,
        match=rf"race_elementwise\(numel={largest + 1}\).*refused before allocating.*numel <= {largest}",
    ):
        roofline.race_elementwise(largest + 1, device="cpu", dtype=dtype)
    with pytest.raises(ValueError, match="refused before allocating"):
        roofline.measure_roofline("cpu", numel=10**9)
    assert time.perf_counter() - start < 1.0


def test_race_elementwise_agrees_with_torch_utils_benchmark():
    """Fidelity: the FP32 and bf16 medians of race_elementwise against torch.utils.benchmark.Timer timing the
    same op on the same tensors with the same thread count, within a factor of 2 (a shared, noisy machine:
    the best of three attempts).  A timer that timed the wrong thing (the allocation of a fresh output, one
    call without warm-up, the conversion to 16 bits) would be off by more."""
    from torch.utils import benchmark

    numel, dtype = 2**18, torch.bfloat16
    a, b = roofline._elementwise_operands(numel, torch.device("cpu"))
    env = {"torch": torch, "a": a, "b": b, "c": torch.empty_like(a), "al": a.to(dtype), "bl": b.to(dtype),
           "cl": torch.empty(numel, dtype=dtype)}  # fmt: skip
    worst = []
    for _ in range(3):
        r = roofline.race_elementwise(numel, device="cpu", dtype=dtype, warmup=2, repeats=15, min_sample_s=0.01,
                                  target_rel_width=None, num_threads=1)  # fmt: skip
        theirs = {
            "fp32": benchmark.Timer("torch.add(a, b, out=c)", globals=env, num_threads=1).blocked_autorange(min_run_time=0.2),
            "amp": benchmark.Timer("torch.add(al, bl, out=cl)", globals=env, num_threads=1).blocked_autorange(min_run_time=0.2),
        }  # fmt: skip
        worst.append(max(abs(math.log(r.timings[k].median / theirs[k].median)) for k in theirs))
        if worst[-1] < math.log(2):
            break
    assert min(worst) < math.log(2), f"medians differ by up to {math.exp(min(worst)):.2f}x"


def _roofline(peak=100e9, bw=20e9, device="cpu"):
    t = intervals.Timing("matmul", (1e-3,), 1, 1)
    return roofline.Roofline(
        peak, bw, 1024, 2**24, {"matmul": t, "copy": t, "add": t}, {"device": device, "threads": 1}
    )


def test_roofline_ridge_and_attainable_follow_from_the_two_roofs():
    roof = _roofline(100e9, 20e9)
    assert roof.ridge == 5.0
    assert roof.attainable(1.0) == 20e9 and roof.attainable(5.0) == 100e9 and roof.attainable(50.0) == 100e9

    # the regime comes from the one cost model, classify_regime, with the measured rates
    def regime(*args):
        return timing.classify_regime(*args, roof.peak_flops, roof.bytes_per_s)

    add = regime(12 * 2**24 / 20e9, 2**24, 12 * 2**24)
    assert add.name == "memory-bound" and add.memory_s == pytest.approx(12 * 2**24 / 20e9)
    assert regime(2 * 1024**3 / 100e9, 2 * 1024**3, 12 * 1024**2).name == "compute-bound"
    assert regime(1.0, 2 * 1024**3, 12 * 1024**2).name == "launch-bound"


def test_measure_roofline_measures_both_roofs_from_its_timings(monkeypatch):
    seen = {}
    real_measure = timing.measure

    def spy(contestants, **kwargs):
        seen["names"] = list(contestants)
        seen["kwargs"] = kwargs
        return real_measure(contestants, **kwargs)

    monkeypatch.setattr(roofline, "measure", spy)
    roof = roofline.measure_roofline(
        "cpu", n=64, numel=4096, warmup=1, repeats=2, min_sample_s=1e-4, num_threads=1
    )
    assert seen["names"] == ["matmul", "copy", "add"] and seen["kwargs"]["num_threads"] == 1
    t = roof.timings
    # a roof is the best the machine did: the fastest sample of each
    assert roof.peak_flops == pytest.approx(2 * 64**3 / min(t["matmul"].samples))
    assert roof.bytes_per_s == pytest.approx(
        max(8 * 4096 / min(t["copy"].samples), 12 * 4096 / min(t["add"].samples))
    )
    assert roof.ridge == pytest.approx(roof.peak_flops / roof.bytes_per_s)
    assert roof.context["threads"] == 1 and (roof.matmul_n, roof.numel) == (64, 4096)


def test_measure_roofline_bad_inputs(no_racing):
    for call, exc, match in [
        (lambda: roofline.measure_roofline("cpu", n=0), ValueError, "n must be >= 1"),
        (lambda: roofline.measure_roofline("cpu", numel="big"), TypeError, "numel must be an integer"),
        (lambda: roofline.measure_roofline("cpu", repeats=0), ValueError, "repeats must be >= 1"),
        (
            lambda: roofline.measure_roofline("cpu", repeats=9000, min_sample_s=1.0),
            ValueError,
            "limit of 3600",
        ),
        (lambda: roofline.measure_roofline("cpu", num_threads=0), ValueError, "num_threads must be >= 1"),
    ]:
        with pytest.raises(exc, match=match):
            call()


def test_explain_reads_an_elementwise_race_by_its_bytes():
    faster = _result(FASTER, kind="elementwise", params={"numel": 2**20})
    reading = race_readout.explain(faster)
    assert reading.reasons[:3] == ("race.verdict_faster", "race.add_head", "race.add_faster")
    assert (reading.facts["b32"], reading.facts["blow"], reading.facts["fewer"]) == (
        "12.00 MiB",
        "6.00 MiB",
        2.0,
    )
    assert reading.facts["share"] == 1.0  # a 2x speedup is all of the 2x the bytes allow
    assert not any(
        code.startswith("race.cpu_") for code in reading.reasons
    )  # the matmul reading does not apply
    slower = race_readout.explain(_result(SLOWER, kind="elementwise", params={"numel": 2**20}))
    assert slower.reasons[:3] == ("race.verdict_slower", "race.add_head", "race.add_not_faster")
    band = race_readout.elementwise_band(faster)
    assert band.outcome == ("faster, by less than 2x" if faster.speedup < 2 else "2x or more")
    assert band.facts["b32"] == "12.00 MiB" and band.reasons == ("race.add_band",)
    assert (
        race_readout.elementwise_band(_result(SLOWER, kind="elementwise", params={"numel": 8})).outcome
        == "slower"
    )
    assert "step" not in race_widget.result_card_html(faster).split("</div>")[0]


def test_roofline_summary_and_plot_place_every_contestant():
    import matplotlib

    matplotlib.use("Agg")
    roof = _roofline(100e9, 20e9)
    add = dataclasses.replace(
        _result(FASTER, kind="elementwise", params={"numel": 2**20}), flops=float(2**20)
    )
    gemm = dataclasses.replace(_result(SLOWER, kind="matmul", params={"n": 256}), flops=2.0 * 256**3)
    reading = roofline.roofline_summary(roof, [add, gemm])
    assert reading.reasons == ("race.roof", "race.roof_points") and reading.facts["ridge"] == 5.0
    p_add, p_gemm = reading.facts["points"]
    # hand-computed: an add does 1 FLOP per 12 bytes, 60x below a ridge of 5; a GEMM of n = 256 does
    # 2 * 256**3 FLOPs over 3 * 256**2 * 4 bytes = 42.7 FLOP per byte, 8.53x above it
    assert (p_add["side"], p_add["times"]) == ("below", pytest.approx(60)) and p_add[
        "intensity"
    ] == pytest.approx(1 / 12)
    assert (p_gemm["side"], p_gemm["times"]) == ("above", pytest.approx(512 / 60)) and p_gemm[
        "what"
    ] == "matmul"
    ax = roofline.plot_roofline(roof, [add, gemm])
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert {"add FP32", "add bf16", "matmul FP32", "matmul AMP bf16"} <= set(lines)
    x, y = lines["add FP32"].get_data()
    assert x[0] == pytest.approx(1 / 12) and y[0] == pytest.approx(add.flops / add.fp32.median / 1e9)
    with pytest.raises(TypeError, match="roofline must be"):
        roofline.roofline_summary("roof", [add])
    with pytest.raises(TypeError, match=r"results\[0\] must be"):
        roofline.plot_roofline(roof, ["add"])


# --- Bounded on any CPU: a race is estimated before it starts (issue 24, deliverable 6) --------------------


def slow_cpu(fp32=20e9, low=1e9, add=1e9):
    """A fake calibration: seconds a call would take at these FLOP/s (and add bytes/s): by default a 2-core AVX2
    CPU, FP32 matmuls at 20 GFLOP/s and emulated 16-bit ones at 1 GFLOP/s (tens of times slower)."""

    def calibrated_seconds(make, size, device, *, power=3, start=64):
        if power == 1:
            return 12 * size / add
        return 2.0 * size**3 / (fp32 if getattr(make, "dtype", None) is None else low)

    return calibrated_seconds


def test_a_race_far_past_its_budget_is_refused_at_once_with_its_estimate(monkeypatch):
    monkeypatch.setattr(timing, "calibrated_seconds", slow_cpu())
    monkeypatch.setattr(race, "_operands", lambda *a: pytest.fail("allocated before the estimate"))
    estimates = []
    for call in (
        lambda: race.race_matmul(6144, device="cpu", dtype=torch.bfloat16, repeats=1, warmup=0),
        lambda: race.race_mlp(8192, 8192, device="cpu", dtype=torch.bfloat16, memory=False),
    ):
        began = time.perf_counter()
        with pytest.raises(ValueError, match=r"budget_s=30 s; choose a smaller") as info:
            call()
        assert time.perf_counter() - began < 2
        estimates.append(
            float(re.search(r"take about ([\d,.]+) s", str(info.value)).group(1).replace(",", ""))
        )
    # the matmul: 2 * 6144**3 FLOPs a call, AMP at 1 GFLOP/s and FP32 at 20, one warm-up call and one round each
    assert estimates[0] == pytest.approx(2 * 2 * 6144**3 * (1 / 1e9 + 1 / 20e9), rel=1e-3)
    assert estimates[1] > 30
    # a larger budget_s lets it through (to the memory check and the race, here stopped at the operands)
    with pytest.raises(pytest.fail.Exception, match="allocated before"):
        race.race_matmul(512, device="cpu", dtype=torch.bfloat16, repeats=1, warmup=0, budget_s=100)


@pytest.mark.parametrize("case", ["cpu-emulated", "cpu-native"])
def test_the_notebooks_races_are_estimated_within_their_budget_on_a_slow_cpu(monkeypatch, case):
    # 06's races at the sizes and budgets of sweeps.race_sizes, on a slow CPU of the case: AVX2 (FP32 20 GFLOP/s,
    # 16-bit emulated at 1) or a native one (FP32 50, bf16 150): all are accepted (run_race is not reached here).
    rates = {"cpu-emulated": slow_cpu(), "cpu-native": slow_cpu(50e9, 150e9, 5e9)}
    monkeypatch.setattr(timing, "calibrated_seconds", rates[case])
    monkeypatch.setattr(race, "run_race", lambda *a, **k: "accepted")
    sz = sweeps.race_sizes("cpu", torch.bfloat16, native=case == "cpu-native")
    budget = sz.budget
    for n in (*sz.matmul_sizes, sz.aligned_n - 1):
        assert race.race_matmul(n, device="cpu", dtype=torch.bfloat16, **budget) == "accepted"
    for w, b in [
        (sz.width, sz.batch),
        *((w, sz.batch) for w in sz.mlp_widths),
        *((sz.width, b) for b in sz.batches),
    ]:
        assert race.race_mlp(w, b, device="cpu", dtype=torch.bfloat16, memory=False, **budget) == "accepted"
    # the widget's largest race, with the widget's budget
    w, b = max(sz.widget_widths), max(sz.widget_batches)
    assert race.race_mlp(w, b, device="cpu", dtype=torch.bfloat16, memory=False, **budget) == "accepted"


def test_calibration_grows_its_size_until_a_call_is_long_enough_then_scales_by_work(monkeypatch):
    sizes = []

    def make(m):
        sizes.append(m)
        return lambda: (m / 1000) ** 3  # the fake sampler reads this as the call's seconds

    monkeypatch.setattr(timing, "_sampler", lambda dev: lambda fn, number: fn())
    assert timing.calibrated_seconds(make, 6144, "cpu") == pytest.approx(6.144**3)
    assert sizes == [64, 128]  # 128**3 / 1e9 s = 2.1 ms >= CALIBRATION_S, grown as the work: no larger operands
    sizes.clear()
    assert timing.calibrated_seconds(make, 100, "cpu") == pytest.approx(0.1**3)  # the size itself, at most
    assert sizes == [64, 100]
    # a time that grows faster than the work (caches outgrown) is followed, up to power + 1
    monkeypatch.setattr(timing, "_sampler", lambda dev: lambda fn, number: fn() ** (3.5 / 3))
    assert timing.calibrated_seconds(make, 4096, "cpu") == pytest.approx((4.096**3) ** (3.5 / 3), rel=1e-6)


def test_a_fixed_cost_is_not_scaled_as_work(monkeypatch):
    """An emulated FP8 matmul costs ~15 ms at 64 and at 128 (casts and launches, not arithmetic) and 64 ms at
    256: the calibration goes on to where the time grows with the work instead of scaling 15 ms by 4**3."""
    sizes = []

    def make(m):
        sizes.append(m)
        return lambda: 0.015 + (m / 1000) ** 3 * 0.8  # a fixed cost plus the work

    monkeypatch.setattr(timing, "_sampler", lambda dev: lambda fn, number: fn())
    estimate = timing.calibrated_seconds(make, 256, "cpu")
    assert sizes == [64, 128, 256] and estimate == pytest.approx(0.015 + 0.256**3 * 0.8)
    sizes.clear()
    big = timing.calibrated_seconds(make, 8192, "cpu")  # stops once the time grows as m**2 or faster
    truth = 0.015 + 8.192**3 * 0.8
    assert sizes[-1] < 8192 and truth <= big <= 2 * truth
