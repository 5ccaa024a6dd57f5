"""Bounded on any CPU (issue 24, deliverable 6): every learner-facing call that trains or times is estimated
before it starts and refuses past its budget_s with the estimate; expanded views are sized by numel."""

import re
import time

import pytest
import torch

from amp_lab import alignment, formats, gradients, range_counts, recipe, roofline, sweeps, timing, training
from amp_lab.data import load_digits
from amp_lab.models import make_mlp


def slow(row_s=1e-6, small_s=5e-6, matmul_flops=1e9):
    """A fake calibration of a slow (2-core AVX2, emulated 16-bit) CPU: a layer's product ``row_s`` a row, a
    small op ``small_s``, a square matmul at ``matmul_flops``, an add at 1 GB/s."""

    def calibrated_seconds(make, size, device, *, power=3, start=64):
        if power == 1:
            return small_s if size == 1 else size * (row_s if getattr(make, "dtype", 0) != 0 else 12e-9)
        return 2.0 * size**3 / matmul_flops

    return calibrated_seconds


def estimate(info) -> float:
    return float(re.search(r"take about ([\d,.]+) s", str(info.value)).group(1).replace(",", ""))


@pytest.fixture
def slow_cpu(monkeypatch):
    monkeypatch.setattr(timing, "calibrated_seconds", slow())


def refuses_fast(call, match=r"budget_s=30 s"):
    began = time.perf_counter()
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert time.perf_counter() - began < 2
    return estimate(info)


def test_training_runs_past_their_budget_are_refused_before_they_start(slow_cpu, monkeypatch):
    data = load_digits()
    monkeypatch.setattr(recipe, "train_loop", lambda *a, **k: pytest.fail("trained before the estimate"))
    monkeypatch.setattr(training, "train_loop", lambda *a, **k: pytest.fail("trained before the estimate"))
    monkeypatch.setattr(gradients, "train_loop", lambda *a, **k: pytest.fail("trained before the estimate"))
    monkeypatch.setattr(training, "make_mlp", lambda *a, **k: pytest.fail("built before the estimate"))
    # depth 18: 17 weights of 256 rows at 1e-4 s a row, 3 products each, 36 tensors of 50 small ops
    seconds = refuses_fast(lambda: training.train_digits(num_steps=100_000, data=data))
    assert seconds == pytest.approx(100_000 * (3 * 18 * 256 * 1e-6 + 50 * 36 * 5e-6), rel=1e-3)
    model = make_mlp(64, 10, hidden=64, depth=3)
    before = [p.detach().clone() for p in model.parameters()]
    refuses_fast(lambda: gradients.train_steps(model, data.train, num_steps=100_000))
    opt = torch.optim.Adam(model.parameters())
    scaler = recipe.make_scaler(torch.float32)
    refuses_fast(lambda: recipe.train(model, opt, scaler, data.train, dtype=torch.float32, num_steps=100_000))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # unchanged
    with pytest.raises(ValueError, match="budget_s must be >= 1"):
        training.train_digits(num_steps=1, data=data, budget_s=0.5)


def test_the_notebooks_training_runs_are_accepted_on_a_slow_cpu(slow_cpu, monkeypatch):
    # 03, 04, 07, 08, 09's calls (their largest), estimated on the slow CPU: within 30 s each
    data = load_digits()
    seen = []
    monkeypatch.setattr(
        timing, "check_estimate", lambda what, s, budget, *a: seen.append((what, s, budget)) or s
    )
    training.train_digits(None, num_steps=1, data=data)  # the estimate is for the run asked for
    for what, seconds, budget in [
        ("04", timing.training_seconds("04", _mlp_shapes(18, 16), 256, 300, "cpu", torch.float16), 30),
        ("08", timing.training_seconds("08", _mlp_shapes(7, 64), 256, 300, "cpu", torch.float16), 30),
        ("03", timing.training_seconds("03", make_mlp(64, 10, hidden=64, depth=7), 64, 300, "cpu"), 30),
        ("07", timing.training_seconds("07", make_mlp(64, 10, hidden=128, depth=2), 64, 200, "cpu"), 30),
        ("04 explorer", timing.training_seconds("x", _mlp_shapes(18, 16), 256, 60, "cpu", torch.float16), 2),
    ]:
        assert seconds <= budget, (what, seconds)


def _mlp_shapes(depth, width):
    widths = [64] + [width] * (depth - 1) + [10]
    return [(b, a)[: 2 - i] for a, b in zip(widths, widths[1:], strict=False) for i in (0, 1)]


def test_the_scaler_explorer_refuses_a_run_past_its_budget(slow_cpu):
    pytest.importorskip("ipywidgets")
    budget = training.EXPLORER_BUDGET_S
    with pytest.raises(ValueError, match=rf"budget_s={budget:g} s") as info:
        training.ScalerExplorer(num_steps=500, train_kwargs={"width": 1024, "depth": 8})
    assert estimate(info) > budget
    assert training.ScalerExplorer(num_steps=2).run is not None  # a small run is accepted


def test_a_sweep_is_bounded_as_a_whole(slow_cpu, monkeypatch):
    from amp_lab import race

    monkeypatch.setattr(race, "run_race", lambda *a, **k: pytest.fail("raced before the estimate"))
    bf16 = torch.bfloat16
    # each race alone fits in 30 s, the sum does not: non-adaptive, 8 rounds of 2 s calls
    budget = dict(warmup=0, repeats=8, target_rel_width=None, max_time_s=None, num_threads=1)
    seconds = refuses_fast(lambda: sweeps.sweep([1000, 1000, 1000], device="cpu", dtype=bf16, **budget))
    assert seconds == pytest.approx(
        4 * (1 + 8) * 2 * 2.0, rel=1e-3
    )  # and the raw GEMMs', a warm-up call each

    # 06's sweeps at race_sizes' budgets are accepted (the races are faked past the estimate)
    class Accepted(Exception):
        pass

    monkeypatch.setattr(race, "run_race", lambda *a, **k: (_ for _ in ()).throw(Accepted()))

    def avx2(make, size, device, *, power=3, start=64):  # test_race's slow CPU: FP32 20 GFLOP/s, bf16 1
        return 12 * size / 1e9 if power == 1 else 2.0 * size**3 / (20e9 if make.dtype is None else 1e9)

    monkeypatch.setattr(timing, "calibrated_seconds", avx2)
    sz = sweeps.race_sizes("cpu", bf16, native=False)
    for kind, sizes in (("matmul", sz.matmul_sizes), ("mlp", sz.mlp_widths), ("batch", sz.batches)):
        with pytest.raises(Accepted):  # the first race starts
            sweeps.sweep(
                sizes, kind=kind, batch=sz.batch, width=sz.width, device="cpu", dtype=bf16, **sz.budget
            )


def test_alignment_demo_on_cuda_refuses_past_its_budget(monkeypatch):
    # the CUDA path's decision on a CPU: the device faked (a slow GPU, 1 TFLOP/s), nothing allocated or timed
    monkeypatch.setattr(timing, "calibrated_seconds", slow(matmul_flops=1e12))
    monkeypatch.setattr(alignment, "get_device", lambda device=None: torch.device("cuda", 0))
    monkeypatch.setattr(alignment, "check_fits", lambda *a: None)
    monkeypatch.setattr(alignment, "time_matmul", lambda *a, **k: pytest.fail("timed before the estimate"))
    seconds = refuses_fast(lambda: alignment.alignment_demo(16384))
    assert seconds == pytest.approx(2 * (5 + 20 * alignment.INNER) * 2 * 16384**3 / 1e12, rel=1e-3)
    rows = {"n": 0, "median_ms": 1.0, "tflops": 1.0}
    monkeypatch.setattr(alignment, "time_matmul", lambda n, **k: {**rows, "n": n})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a GPU")
    assert alignment.alignment_demo(4096).reading.outcome == "tc.alignment_measured"  # 02's call
    # on the CPU nothing is timed, whatever the size
    monkeypatch.setattr(alignment, "get_device", lambda device=None: torch.device("cpu"))
    assert alignment.alignment_demo(4096).reading.outcome == "tc.alignment_skipped"


def test_roofline_and_elementwise_refuse_past_their_budget(slow_cpu, monkeypatch):
    monkeypatch.setattr(roofline, "_elementwise_operands", lambda *a: pytest.fail("allocated first"))
    refuses_fast(
        lambda: roofline.race_elementwise(
            2**30, device="cpu", dtype=torch.bfloat16, repeats=1000, target_rel_width=None, max_time_s=None
        )
    )
    seconds = refuses_fast(lambda: roofline.measure_roofline("cpu", n=8192, repeats=3))
    assert seconds > 30


@pytest.mark.parametrize(
    "call",
    [
        lambda x: range_counts.range_report(x, "bf16"),
        lambda x: range_counts.log2_histogram(x),
        lambda x: formats.round_to(x, "fp16"),
        lambda x: formats.decompose(x, "fp16"),
    ],
)
def test_expanded_views_are_sized_by_numel_before_any_cast(call):
    x = torch.ones(1).expand(10**9)  # a 4-byte storage, a billion elements
    began = time.perf_counter()
    with pytest.raises(ValueError, match=r"1,000,000,000|single number"):
        call(x)
    assert time.perf_counter() - began < 2
    call(torch.ones(1).expand(1))  # small ones are read as before
