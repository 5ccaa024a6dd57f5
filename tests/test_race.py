"""amp_lab.race: the honest timer, the races, the sweep, the widget and the refusals.

No test asserts a speed: the machine is shared and noisy.  The timer is tested with a fake
clock and fake synchronisation (so *when* it reads the clock is checked exactly), the races
against independent oracles (autocast's own output dtypes, torch.finfo, torch's Measurement,
numpy's percentiles, byte counts derived by hand from the autograd formulas).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import race

# The real functions, kept before any test replaces them with refusals.
real_race_matmul, real_race_mlp, real_sweep = race.race_matmul, race.race_mlp, race.sweep

ROOT = Path(__file__).resolve().parent.parent
FAST = {"warmup": 1, "repeats": 2, "min_sample_s": 1e-4}


# ------------------------------------------------------------------------------------------
# The timer, with a fake clock
# ------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, log):
        self.now = 0.0
        self.log = log

    def __call__(self):
        self.log.append("clock")
        return self.now


@pytest.fixture
def fake(monkeypatch):
    log: list[str] = []
    clock = FakeClock(log)
    monkeypatch.setattr(race, "_clock", clock)
    monkeypatch.setattr(race, "_synchronizer", lambda dev: (lambda: log.append("sync")))
    return log, clock


def test_timer_warms_up_then_synchronises_before_every_clock_reading(fake):
    log, clock = fake

    def fn():
        log.append("call")
        clock.now += 0.5

    t = race.measure(fn, warmup=3, repeats=4, number=2)
    first = log.index("clock")
    # the three warm-up calls happen before the clock is ever read ...
    assert log[:first] == ["call", "call", "call", "sync"]
    # ... and every sample is: synchronise, read, calls, synchronise, read
    assert log[first - 1 :] == ["sync", "clock", "call", "call", "sync", "clock"] * 4
    assert t.samples == (0.5,) * 4  # seconds per call
    assert (t.number, t.warmup, t.calls) == (2, 3, 3 + 4 * 2)


def test_warm_up_keeps_start_up_cost_out_of_the_samples(fake):
    log, clock = fake
    calls = []

    def fn():  # the first call pays a start-up cost, as CUDA context creation or kernel selection does
        calls.append(1)
        clock.now += 1.0 if len(calls) == 1 else 0.001

    warm = race.measure(fn, warmup=1, repeats=5, number=1)
    assert warm.samples == pytest.approx((0.001,) * 5)
    calls.clear()
    cold = race.measure(fn, warmup=0, repeats=5, number=1)  # the seed's mistake: the first call is timed
    assert cold.samples[0] == pytest.approx(1.0)
    assert cold.median == pytest.approx(0.001)  # the median resists one cold sample; a single trial would not


def test_number_per_sample_is_calibrated_on_the_fastest_warm_up_call(fake):
    log, clock = fake
    costs = iter([0.05, 0.004, 0.006] + [0.004] * 100)  # a slow first call must not shorten the samples

    def fn():
        log.append("call")
        clock.now += next(costs)

    t = race.measure(fn, warmup=3, repeats=3, min_sample_s=0.01)
    assert t.number == math.ceil(0.01 / 0.004)
    assert t.warmup == 3
    assert log.count("call") == t.calls == 3 + 3 * t.number
    assert t.samples == pytest.approx((0.004,) * 3)
    # warmup=0 still needs one call to calibrate, and it is not counted as a sample
    t0 = race.measure(fn, warmup=0, repeats=2, min_sample_s=0.01)
    assert t0.warmup == 1 and len(t0.samples) == 2


def test_contestants_are_interleaved_and_the_order_flips_every_round(fake):
    log, clock = fake
    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    timings = race.measure(fns, warmup=1, repeats=4, number=1)
    assert order[:2] == ["a", "b"]  # warm-up
    assert order[2:] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert set(timings) == {"a", "b"}
    assert all(len(t.samples) == 4 for t in timings.values())


def test_callback_reports_warm_up_and_every_sample(fake):
    events = []
    race.measure({"fp32": lambda: None, "amp": lambda: None}, warmup=1, repeats=3, number=1, callback=events.append)
    phases = [(e.phase, e.label, e.done) for e in events]
    assert phases[:2] == [("warmup", "fp32", 0), ("warmup", "amp", 0)]
    assert [p for p in phases if p[0] == "sample"] == [
        ("sample", "fp32", 1), ("sample", "amp", 1), ("sample", "amp", 2),
        ("sample", "fp32", 2), ("sample", "fp32", 3), ("sample", "amp", 3),
    ]  # fmt: skip
    assert len(events[-1].samples["fp32"]) == 3 and events[-1].total == 3


class FakeEvent:
    def __init__(self, log, clock):
        self.log, self.clock, self.t = log, clock, None

    def record(self):
        self.log.append("record")
        self.t = self.clock.now

    def synchronize(self):
        self.log.append("event-sync")

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3  # milliseconds, as torch.cuda.Event does


def test_cuda_event_sampler_brackets_the_calls_with_events_and_waits_for_the_end(fake):
    log, clock = fake
    sampler = race._CudaEventSampler(torch.device("cpu"), event_factory=lambda: FakeEvent(log, clock))

    def fn():
        log.append("call")
        clock.now += 0.25

    seconds = sampler(fn, 3)
    assert log == ["sync", "record", "call", "call", "call", "record", "event-sync"]
    assert seconds == pytest.approx(0.75)


def test_cuda_uses_the_event_sampler_and_the_cpu_the_wall_clock():
    assert isinstance(race._sampler(torch.device("cpu")), race._WallClockSampler)
    assert isinstance(race._sampler(torch.device("cuda")), race._CudaEventSampler)


# ------------------------------------------------------------------------------------------
# Statistics and context
# ------------------------------------------------------------------------------------------


@settings(max_examples=60)
@given(st.lists(st.floats(min_value=1e-7, max_value=10.0, allow_nan=False), min_size=1, max_size=40))
def test_median_and_iqr_match_numpy_and_torch_benchmark(samples):
    t = race.Timing("x", tuple(samples), number=3, warmup=0, context={"threads": 1})
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    assert t.median == pytest.approx(med, rel=1e-12)
    assert t.iqr == pytest.approx(q3 - q1, rel=1e-9, abs=1e-15)
    m = t.to_measurement()
    assert m.median == pytest.approx(t.median, rel=1e-9)
    assert m.iqr == pytest.approx(t.iqr, rel=1e-6, abs=1e-12)
    assert m.number_per_run == 3 and m.num_threads == 1


def test_context_records_threads_tf32_and_versions_and_threads_are_restored():
    seen = []
    before = torch.get_num_threads()
    t = race.measure(lambda: seen.append(torch.get_num_threads()), num_threads=1, warmup=1, repeats=2, number=1)
    assert set(seen) == {1} and t.context["threads"] == 1
    assert torch.get_num_threads() == before
    ctx = t.context
    assert ctx["device"] == "cpu" and ctx["torch"] == torch.__version__ and ctx["cuda"] == torch.version.cuda
    assert ctx["tf32_matmul"] is None  # TF32 is a CUDA setting
    assert "synchronise" in ctx["sync"]
    assert ctx["cpu_count"] >= 1


def test_tf32_switch_sets_torch_flag_and_restores_it_without_breaking_the_legacy_api():
    matmul = torch.backends.cuda.matmul
    old = matmul.fp32_precision
    try:
        with race._tf32_matmul(True):
            assert matmul.fp32_precision == "tf32" and race._tf32_matmul_enabled()
        with race._tf32_matmul(False):
            assert matmul.fp32_precision == "ieee" and not race._tf32_matmul_enabled()
        assert matmul.fp32_precision == old
        # a learner who used the legacy API before a race can still read it afterwards
        torch.set_float32_matmul_precision("high")
        with race._tf32_matmul(False):
            pass
        assert torch.get_float32_matmul_precision() == "high"
        assert race._tf32_matmul_enabled()
    finally:
        torch.set_float32_matmul_precision("highest")


# ------------------------------------------------------------------------------------------
# race_matmul
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_race_matmul_races_fp32_against_autocast_and_carries_its_context(monkeypatch, dtype):
    seen = {}
    real_measure = race.measure

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
    assert r.speedup == r.fp32.median / r.amp.median
    assert r.tflops["amp"] == pytest.approx(2 * n**3 / r.amp.median / 1e12)
    assert r.dtype == dtype and r.params == {"n": n} and r.kind == "matmul"
    assert r.context["device"] == "cpu" and r.context["amp_dtype"] == str(dtype).removeprefix("torch.")
    assert r.context["threads"] == torch.get_num_threads()
    assert r.fp32.warmup >= 1 and len(r.amp.samples) == 2
    data = json.loads(json.dumps(r.to_dict()))
    assert data["speedup"] == pytest.approx(r.speedup) and data["context"]["torch"] == torch.__version__
    assert "speedup (FP32 / AMP)" in str(r)


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
    real_measure = race.measure

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
    assert r.flops == race.mlp_step_flops(width, batch, in_features=in_features)
    assert set(r.memory) == {"fp32", "amp", "method"} and "estimate" in r.memory["method"]
    json.dumps(r.to_dict())


def test_mlp_step_flops_counts_forward_and_the_backward_matmuls_it_needs():
    b, i, w, c = 3, 5, 7, 2
    forward = 2 * b * i * w + 2 * b * w * c
    backward = 2 * b * i * w + 2 * (2 * b * w * c)  # first layer: weight grad only; second: weight and input
    assert race.mlp_step_flops(w, b, in_features=i, num_classes=c) == forward + backward


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
        trainer = race._Trainer(model, X, y, dev, dtype)
        trainer.step()
        assert race._saved_for_backward_bytes(trainer, [X, y, *trainer.model.parameters()]) == saved
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
    ],
)
def test_bad_mlp_arguments_raise_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        race.race_mlp(device="cpu", **kwargs)


@pytest.mark.parametrize("sizes", [(), (8, 0), (-1,), "64", 64])
def test_bad_sweep_sizes(sizes):
    with pytest.raises(ValueError, match="sizes"):
        race.sweep(sizes, device="cpu")


def test_bad_sweep_kind_and_measure_input():
    with pytest.raises(ValueError, match="kind"):
        race.sweep((8,), kind="conv", device="cpu")
    with pytest.raises(ValueError, match="fns"):
        race.measure({})
    with pytest.raises(ValueError, match="callable"):
        race.measure({"a": 3})


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

    monkeypatch.setattr(race, "_available_bytes", lambda dev: 10**9)
    monkeypatch.setattr(race, "_operands", allocate)
    dtype = torch.bfloat16
    per_element = 3 * 4 + 3 * torch.finfo(dtype).bits // 8  # A, B, C in FP32 and in bf16
    assert race.matmul_bytes(100, dtype) == 100 * 100 * per_element
    largest = math.isqrt(int(0.9 * 10**9 / per_element))
    with pytest.raises(Allocated):
        race_matmul(largest, device="cpu", dtype=dtype)  # fits: gets as far as allocating
    with pytest.raises(ValueError, match=f"choose n <= {largest}"):
        race_matmul(largest + 1, device="cpu", dtype=dtype)


# ------------------------------------------------------------------------------------------
# The ceiling and the sweep
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, dtype, vs_fp32, vs_tf32",
    [
        ("Tesla V100-SXM2-32GB", torch.float16, 8.0, None),
        ("NVIDIA A100-SXM4-80GB", torch.float16, 16.0, 2.0),
        ("NVIDIA A100-PCIE-40GB", torch.bfloat16, 16.0, 2.0),
        ("NVIDIA H100 80GB HBM3", torch.float16, 14.8, 2.0),
        ("NVIDIA H200", torch.bfloat16, 14.8, 2.0),
    ],
)
def test_datasheet_ceiling_for_known_gpus(name, dtype, vs_fp32, vs_tf32):
    c = race.datasheet_ceiling(name, dtype)
    assert c.vs_fp32 == vs_fp32 and c.vs_tf32 == vs_tf32 and "datasheet" in c.source


def test_datasheet_ceiling_unknown():
    assert race.datasheet_ceiling("NVIDIA GeForce RTX 4090", torch.float16) is None
    assert race.datasheet_ceiling("Tesla V100-SXM2-32GB", torch.bfloat16) is None  # V100 has no bf16 Tensor Cores
    assert race.datasheet_ceiling(None) is None


def test_sweep_matmul_on_cpu_uses_the_measured_gemm_ratio_as_ceiling():
    import matplotlib

    matplotlib.use("Agg")
    s = race.sweep((8, 16), device="cpu", show_progress=False, **FAST)
    assert s.sizes == (8, 16) and [r.params["n"] for r in s.results] == [8, 16]
    assert s.speedups == [r.speedup for r in s.results]
    assert "measured" in s.ceiling.source and s.ceiling.vs_fp32 == s.ceiling.measured_gemm > 0
    assert s.ceiling.gemm_shape == (16, 16, 16)
    expected = next((size for i, size in enumerate(s.sizes) if all(x > 1 for x in s.speedups[i:])), None)
    assert s.first_paying_size == expected
    ax = race.plot_sweep(s)
    ys = [tuple(line.get_ydata()) for line in ax.get_lines()]
    assert tuple(s.speedups) in ys
    assert (s.ceiling.vs_fp32, s.ceiling.vs_fp32) in ys  # the ceiling is drawn
    json.dumps(s.to_dict())
    with pytest.raises(ValueError, match="mlp"):
        race.plot_memory(s)


def test_sweep_mlp_includes_memory_and_plots_it():
    import matplotlib

    matplotlib.use("Agg")
    s = race.sweep((8, 16), kind="mlp", batch=4, device="cpu", show_progress=False, **FAST)
    assert [r.params["width"] for r in s.results] == [8, 16] and all(r.params["batch"] == 4 for r in s.results)
    ax = race.plot_memory(s)
    mib = 2.0**20
    ys = [tuple(line.get_ydata()) for line in ax.get_lines()]
    assert tuple(r.memory["amp"] / mib for r in s.results) in ys


def test_first_paying_size_needs_every_larger_size_to_pay():
    def fake_result(speedup):
        t = race.Timing("x", (1.0,), 1, 0)
        return race.RaceResult(
            "matmul", {"n": 1}, torch.bfloat16, {"fp32": race.Timing("fp32", (speedup,), 1, 0), "amp": t}, 1.0, None, {}
        )

    def sw(speedups):
        results = tuple(fake_result(s) for s in speedups)
        return race.SweepResult("matmul", (1, 2, 3, 4), results, race.Ceiling(2.0, None, "x"), {})

    assert sw([0.5, 1.5, 0.9, 2.0]).first_paying_size == 4
    assert sw([0.5, 1.5, 1.2, 2.0]).first_paying_size == 2
    assert sw([0.5, 0.6, 0.7, 0.8]).first_paying_size is None


# ------------------------------------------------------------------------------------------
# explain, results files
# ------------------------------------------------------------------------------------------


def _result(fp32_s, amp_s, device="cpu", dtype=torch.bfloat16, tf32_s=None, spread=0.0):
    def timing(name, s):
        return race.Timing(name, (s * (1 - spread), s, s * (1 + spread)), 1, 1)

    timings = {"fp32": timing("fp32", fp32_s), "amp": timing("amp", amp_s)}
    if tf32_s is not None:
        timings["tf32"] = timing("tf32", tf32_s)
    ctx = {"device": device, "threads": 2, "tf32_matmul": None, "load_avg_1min": 3.5, "cpu_count": 2}
    return race.RaceResult("mlp", {"width": 8, "batch": 4}, dtype, timings, 1e6, None, ctx)


def test_explain_reads_the_result(monkeypatch):
    monkeypatch.setattr(race, "_cpu_has_fast", lambda dtype: False)
    slow = race.explain(_result(1.0, 4.0))
    assert slow.startswith("AMP loses") and "0.25x" in slow and "4.00x as long" in slow
    assert "no AVX512-BF16 or AMX" in slow and "AMP is slower" in slow
    assert "cannot be faster" in race.explain(_result(1.0, 1.02))
    assert "suspect noise" in race.explain(_result(3.0, 1.0))
    assert "AVX512-FP16" in race.explain(_result(1.0, 4.0, dtype=torch.float16))
    monkeypatch.setattr(race, "_cpu_has_fast", lambda dtype: True)
    assert race.explain(_result(2.0, 1.0)).startswith("AMP wins: 2.00x")
    assert race.explain(_result(1.0, 1.02)).startswith("A tie")
    gpu = race.explain(_result(8.0, 1.0, device="cuda:0", dtype=torch.float16, tf32_s=2.0))
    assert "Against TF32" in gpu and "2.00x" in gpu
    noisy = race.explain(_result(1.0, 1.0, spread=0.5))
    assert "noisy" in noisy and "load average 3.5 on 2 cores" in noisy


def test_load_reference_results(tmp_path):
    assert race.load_reference_results(tmp_path) == []
    assert race.load_reference_results(tmp_path / "missing") == []
    (tmp_path / "old.json").write_text(json.dumps({"schema": race.RESULTS_SCHEMA, "date": "2025-01-01T00:00:00+00:00"}))
    (tmp_path / "new.json").write_text(json.dumps({"schema": race.RESULTS_SCHEMA, "date": "2026-01-01T00:00:00+00:00"}))
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something else"}))
    (tmp_path / "broken.json").write_text("{not json")
    found = race.load_reference_results(tmp_path)
    assert [d["_file"] for d in found] == ["new.json", "old.json"]
    assert isinstance(race.load_reference_results(), list)  # the committed docs/results/


def test_format_helpers():
    assert race.format_seconds(0.00123) == "1.23 ms"
    assert race.format_seconds(2.5) == "2.5 s"
    assert race.format_seconds(4.2e-6) == "4.2 µs"
    assert race.format_bytes(3 * 2**20) == "3.00 MiB"
    assert race.format_bytes(None) == "n/a"


def _gpu_check_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_script_writes_a_results_file_on_cpu(tmp_path, capsys):
    gpu_check = _gpu_check_module()
    if not torch.cuda.is_available():
        assert gpu_check.main(["--out", str(tmp_path)]) == 2
        assert "no CUDA GPU" in capsys.readouterr().err
        assert list(tmp_path.iterdir()) == []
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and files[0].endswith(".json") and files[1].endswith(".md")
    report = json.loads((tmp_path / files[0]).read_text())
    assert report["schema"] == race.RESULTS_SCHEMA and report["machine"]["torch"] == torch.__version__
    assert report["machine"]["device"] == "cpu" and report["quick"] is True
    for key in ("race_matmul", "race_mlp", "alignment", "sweeps", "autocast_probe", "date"):
        assert key in report
    assert report["autocast_probe"]["cpu"]["status"] in {"ok", "unavailable", "error"}
    assert race.load_reference_results(tmp_path)[0]["_file"] == files[0]
    assert "# GPU check" in (tmp_path / files[1]).read_text()


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
    return race.race_widget(device="cpu", widths=(8, 16), batches=(4, 8), in_features=16, warmup=1, repeats=3,
                            min_sample_s=1e-4)  # fmt: skip


def test_widget_has_the_stable_css_classes_and_starts_ready(racer):
    assert "amp-race-button" in racer.button._dom_classes
    assert "amp-race-result" in racer.result._dom_classes
    assert 'data-race-state="ready"' in racer.result.value
    assert racer.precision.value == "bfloat16" and racer.dtype == torch.bfloat16


def test_changing_a_control_updates_the_card_with_the_packages_flop_count(racer):
    racer.width.value = 16
    racer.batch.value = 8
    flops = race.mlp_step_flops(16, 8, in_features=16)
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
    assert f"{r.speedup:.2f}x" in racer.result.value
    assert "TF32 for FP32: n/a (CPU)" in racer.result.value and "spread (IQR)" in racer.result.value
    assert len(moves) >= racer.repeats  # the lane moved during the race, not only at the end
    fastest = min(r.fp32.median, r.amp.median)
    assert racer.fp32_bar.value == pytest.approx(racer.repeats * fastest / r.fp32.median)
    assert racer.amp_bar.value == pytest.approx(racer.repeats * fastest / r.amp.median)
    assert max(racer.fp32_bar.value, racer.amp_bar.value) == pytest.approx(racer.repeats)
    assert not racer.button.disabled


def test_a_failed_race_is_shown_in_the_card(racer, monkeypatch):
    def boom(*args, **kwargs):
        raise ValueError("width=8 is too wide for this test")

    monkeypatch.setattr(race, "race_mlp", boom)
    assert racer.run() is None
    assert 'data-race-state="error"' in racer.result.value and "too wide for this test" in racer.result.value
    assert not racer.button.disabled


def _sweep_of(speedups, ceiling, spread=0.0):
    results = tuple(_result(s, 1.0, spread=spread) for s in speedups)
    sizes = tuple(2 ** (5 + i) for i in range(len(speedups)))
    results = tuple(
        race.RaceResult("matmul", {"n": n}, r.dtype, r.timings, r.flops, None, r.context)
        for n, r in zip(sizes, results, strict=True)
    )
    return race.SweepResult("matmul", sizes, results, ceiling, results[0].context)


def test_sweep_summary_reads_the_sweep():
    datasheet = race.datasheet_ceiling("NVIDIA A100-SXM4-80GB", torch.float16)
    text = race.sweep_summary(_sweep_of([0.5, 0.9, 2.0, 8.0], datasheet))
    assert "32: 0.50x, 64: 0.90x, 128: 2.00x, 256: 8.00x" in text
    assert "AMP pays from 128 on" in text and "best 8.00x at 256, 50% of the ceiling 16x" in text
    assert "Noisy" not in text
    cpu = race.Ceiling(0.05, None, "measured on this cpu")
    text = race.sweep_summary(_sweep_of([0.9, 0.3, 0.06], cpu))
    assert "below 1" in text and "AMP cannot pay" in text and "best measured 0.90x at 32" in text
    noisy = race.sweep_summary(_sweep_of([0.9, 0.3], cpu, spread=0.5))
    assert "Noisy: IQR up to 50% of a median, load average 3.5 on 2 cores" in noisy


def test_speedup_spread_comes_from_the_quartiles():
    r = _result(2.0, 1.0, spread=0.1)
    lo, hi = race._speedup_range(r)
    assert lo == pytest.approx(r.fp32.q1 / r.amp.q3) and hi == pytest.approx(r.fp32.q3 / r.amp.q1)
    assert lo < r.speedup < hi
