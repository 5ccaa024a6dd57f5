"""amp_lab.race's FP8 part: which GPUs run FP8 GEMMs, the FP8 datasheet figures, and race_fp8_matmul.

The GPU decisions are pure functions of facts, tested against real GPUs (compute capabilities from NVIDIA's
CUDA GPU list) and real wheels' ``torch.cuda.get_arch_list()``; the race runs on the CPU (torch's CPU build
has ``torch._scaled_mm``) and, with a GPU's facts injected, through its CUDA checks.  No test asserts a
speed: the machine is shared and noisy.  Oracles: torch's own matmuls and dtype casts, float64, and
torchao's ``tensor_to_scale``/``to_fp8_saturated`` for the tensorwise scale.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import cost, gpus, hardware, intervals, race, race_readout, sweeps, timing
from amp_lab import device as device_module

FAST = {"warmup": 0, "repeats": 4, "min_sample_s": 1e-4, "target_rel_width": None}

# torch.cuda.get_arch_list() of real wheels: torch 2.13 CUDA 13.0 (no sm_70, no sm_89: Ada runs sm_86 cubins),
# CUDA 12.6 (no Blackwell), CUDA 12.8 (Blackwell, with PTX for newer GPUs).
CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
CU128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]

# (GPU, compute capability, FP8 Tensor Cores?): Ada (8.9), Hopper (9.0) and Blackwell (10.0, 12.0) have them.
GPUS = [
    ("T4", (7, 5), False),
    ("V100", (7, 0), False),
    ("A100", (8, 0), False),
    ("A10", (8, 6), False),
    ("RTX 4090", (8, 9), True),
    ("L4", (8, 9), True),
    ("L40S", (8, 9), True),
    ("H100", (9, 0), True),
    ("H200", (9, 0), True),
    ("B200", (10, 0), True),
    ("RTX 5090", (12, 0), True),
]


def _has_kernels(capability, arch_list) -> bool:
    """Typed from the wheels' lists above, not computed: which of these GPUs each wheel runs on."""
    table = {
        "cu130": {(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)},
        "cu126": {(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0)},
        "cu128": {(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)},
    }
    name = {tuple(CU130): "cu130", tuple(CU126): "cu126", tuple(CU128): "cu128"}[tuple(arch_list)]
    return capability in table[name]


# ------------------------------------------------------------------------------------------
# fp8_matmul_support
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch_list", [CU130, CU126, CU128], ids=["cu130", "cu126", "cu128"])
@pytest.mark.parametrize(("name", "capability", "fp8"), GPUS, ids=[g[0] for g in GPUS])
def test_fp8_support_of_real_gpus_under_real_wheels(name, capability, fp8, arch_list):
    support = gpus.fp8_matmul_support(capability, arch_list)
    expected = fp8 and _has_kernels(capability, arch_list)
    assert support.supported is expected and bool(support) is expected
    why = support.reason
    sm = f"sm_{capability[0]}{capability[1]}"
    assert sm in why
    if not fp8:
        assert "8.9" in why and "not FP8" in why
    elif expected:
        assert "FP8 (E4M3, E5M2)" in why and "has kernels for it" in why
    else:  # FP8 Tensor Cores, but a wheel without kernels for them: the doctor's advice says why
        assert "has FP8 Tensor Cores" in why
        assert gpus.arch_advice(capability, arch_list) in why
    # Without an arch list only the Tensor Cores decide.
    assert gpus.fp8_matmul_support(capability).supported is fp8


def test_fp8_support_without_a_gpu_and_with_special_builds():
    none = gpus.fp8_matmul_support(None)
    assert not none and none.reason.startswith("no CUDA GPU: ") and "8.9" in none.reason
    assert gpus.fp8_matmul_support(None, CU130).supported is False  # the list does not matter without a GPU
    # An architecture-specific cubin runs on exactly its GPU; PTX on it and anything newer.
    assert gpus.fp8_matmul_support((9, 0), ["sm_90a"]) and not gpus.fp8_matmul_support((10, 0), ["sm_90a"])
    assert gpus.fp8_matmul_support((10, 0), ["compute_90"]) and not gpus.fp8_matmul_support((8, 9), ["compute_90"])
    cpu_build = gpus.fp8_matmul_support((9, 0), [])
    assert not cpu_build and "CPU-only build" in cpu_build.reason
    assert gpus.fp8_matmul_support((6, 1)).reason.startswith("Pascal (sm_61) has no Tensor Cores")
    assert "Ampere (Jetson Orin) (sm_87) Tensor Cores" in gpus.fp8_matmul_support((8, 7)).reason  # no FP8
    assert gpus.fp8_matmul_support((9, 0), tuple(CU130))  # a tuple, as CudaFacts holds it


@settings(max_examples=60, deadline=None)
@given(
    major=st.integers(1, 15),
    minor=st.integers(0, 9),
    arch=st.lists(st.sampled_from(sorted(set(CU130 + CU126 + CU128 + ["sm_90a", "compute_90", "sm_89"]))),
                  max_size=6),
)  # fmt: skip
def test_fp8_support_needs_an_fp8_tensor_core_gpu_and_kernels(major, minor, arch):
    support = gpus.fp8_matmul_support((major, minor), arch)
    if support:
        assert (major, minor) >= (8, 9) and gpus.arch_supported((major, minor), arch)
        assert "fp8" in gpus.tensor_core_generation((major, minor)).precisions
    elif (major, minor) in {(8, 9), (9, 0), (10, 0), (12, 0)}:
        assert not gpus.arch_supported((major, minor), arch)
    assert isinstance(support.reason, str) and f"sm_{major}{minor}" in support.reason


@pytest.mark.parametrize(
    ("capability", "arch_list", "exc", "match"),
    [
        ("9.0", None, TypeError, "capability must be a"),
        ((9,), None, ValueError, "capability must be a"),
        ((9, -1), None, ValueError, "capability must have a major version >= 1 and a minor >= 0"),
        ((9, 0), ["gfx90a"], ValueError, "arch_list entries must look like"),
    ],
)
def test_fp8_support_refuses_malformed_facts(capability, arch_list, exc, match):
    with pytest.raises(exc, match=match):
        gpus.fp8_matmul_support(capability, arch_list)


# ------------------------------------------------------------------------------------------
# The FP8 datasheet figures
# ------------------------------------------------------------------------------------------


def test_fp8_rows_compute_the_ratio_from_each_entrys_figures():
    rows = gpus.fp8_datasheet_rows()
    assert gpus.FP8_DATASHEET_HEADER == ["GPU", "FP8", "BF16", "FP8 / BF16", "source"]
    by_model = {e.model: e for e in gpus.DATASHEETS}
    assert [r[0] for r in rows] == [e.model for e in gpus.DATASHEETS if e.fp8_tflops is not None]
    assert {r[0] for r in rows} == {"H200 SXM", "H200 NVL", "H100 SXM", "H100 NVL", "H100 PCIe", "RTX 4090"}
    for model, fp8, bf16, ratio, source in rows:
        e = by_model[model]
        assert float(fp8) == e.fp8_tflops and float(bf16) == e.bf16_tflops
        assert e.fp8_over_bf16 == e.fp8_tflops / e.bf16_tflops  # computed, not typed
        assert ratio == f"{e.fp8_tflops / e.bf16_tflops:.3g}x"
        assert source == e.fp8_source and e.fp8_source
        assert 1.99 < e.fp8_over_bf16 <= 2.0  # the datasheets' doubling


def test_every_fp8_figure_carries_the_figure_its_source_prints():
    for e in gpus.DATASHEETS:
        if e.fp8_tflops is None:
            assert e.fp8_source is None and e.fp8_over_bf16 is None and e.tflops("fp8") is None
            continue
        assert e.tflops("fp8") == e.tflops(torch.float8_e4m3fn) == e.tflops(torch.float8_e5m2) == e.fp8_tflops
        if e.model.startswith(("H100", "H200")):  # the datasheet prints the rate with sparsity: twice the dense
            assert f"{2 * e.fp8_tflops:,g} FP8 Tensor TFLOPS with sparsity" in e.fp8_source
            assert f"{2 * e.bf16_tflops:,g} FP16/BF16" in e.fp8_source
        else:
            assert f"{e.fp8_tflops:g} FP8 Tensor TFLOPS dense with FP32 accumulation" in e.fp8_source
        assert "FP8" not in e.source  # notebook 06 prints `source`: it stays as it was
    no_fp8 = [e.model for e in gpus.DATASHEETS if e.fp8_tflops is None]
    assert all(m.startswith(("A100", "V100", "T4")) for m in no_fp8) and len(no_fp8) == 7


def test_datasheet_rows_and_constructors_are_unchanged_by_the_fp8_fields():
    assert gpus.DATASHEET_HEADER == ["GPU", "FP32", "TF32", "FP16", "BF16", "memory", "FP16 / FP32", "BF16 / TF32"]
    assert all(len(row) == 8 for row in gpus.datasheet_rows())
    assert gpus.datasheet_rows()[2] == ["H100 SXM", "67", "494.5", "989.5", "989.5", "3350 GB/s", "14.8x", "2x"]
    old_style = gpus.GpuDatasheet("X", ("X",), 1.0, None, 2.0, None, 100.0, "s")  # positional, as before
    assert old_style.fp8_tflops is None and old_style.fp8_over_bf16 is None
    h100 = gpus.datasheet_entry("NVIDIA H100 80GB HBM3")
    assert h100.fp8_tflops == 1979 and h100.fp8_over_bf16 == 2.0
    assert sweeps.datasheet_ceiling("NVIDIA H100 80GB HBM3", torch.bfloat16).source == h100.source


# ------------------------------------------------------------------------------------------
# race_fp8_matmul
# ------------------------------------------------------------------------------------------


@pytest.fixture
def spy(monkeypatch):
    """What each contestant computes, asked of the tensors themselves just before they are timed."""
    seen = {}
    real_measure = timing.measure

    def measure(contestants, **kwargs):
        seen.update({name: c.fn() for name, c in contestants.items()})
        seen["closures"] = {name: c.fn for name, c in contestants.items()}
        return real_measure(contestants, **kwargs)

    monkeypatch.setattr(race, "measure", measure)
    return seen


def _fp8_operands_of(seen):
    cells = seen["closures"]["fp8"].__closure__
    names = seen["closures"]["fp8"].__code__.co_freevars
    return dict(zip(names, (c.cell_contents for c in cells), strict=True))


@pytest.mark.parametrize("n", [16, 32, 64])
def test_race_fp8_matmul_races_three_gemms_on_the_cpu(spy, n):
    r = race.race_fp8_matmul(n, device="cpu", **FAST)
    assert r.kind == "fp8_matmul" and r.params == {"n": n} and r.dtype == torch.bfloat16
    assert list(r.timings) == ["fp32", "amp", "fp8"] and r.tf32 is None and r.fp8 is r.timings["fp8"]
    A, B = race._operands(n, torch.device("cpu"))
    # FP32 and the AMP dtype multiply inputs already in their dtype: torch's own matmuls are the oracle.
    assert torch.equal(spy["fp32"], A @ B)
    assert spy["amp"].dtype == torch.bfloat16 and torch.equal(spy["amp"], A.bfloat16() @ B.bfloat16())
    # FP8: E4M3 operands, B column-major (what cuBLASLt's FP8 GEMM takes), a bfloat16 result.
    ops = _fp8_operands_of(spy)
    a8, b8 = ops["a8"], ops["b8"]
    assert a8.dtype == b8.dtype == torch.float8_e4m3fn and a8.is_contiguous() and b8.stride() == (1, n)
    assert torch.equal(b8.t().contiguous().t().float(), b8.float())
    out = spy["fp8"]
    assert out.dtype == torch.bfloat16 and out.shape == (n, n)
    deq = (a8.double() * ops["inv_a"].double()) @ (b8.double() * ops["inv_b"].double())
    torch.testing.assert_close(out.double(), deq, rtol=2**-7, atol=1e-3 * deq.abs().max().item())
    exact = A.double() @ B.double()
    rel = ((out.double() - exact).norm() / exact.norm()).item()
    assert 0 < rel < 0.1  # quantized (not FP32 in disguise), and within E4M3's few percent
    # The result reads the measurement
    assert r.flops == 2.0 * n**3 and r.tflops["fp8"] == pytest.approx(2 * n**3 / r.fp8.median / 1e12)
    ratios = np.array(r.amp.samples) / np.array(r.fp8.samples)
    assert r.fp8_speedup == pytest.approx(float(np.median(ratios)), rel=1e-12)
    assert r.fp8_speedup_interval == intervals.speedup_estimate(r.amp, r.fp8)
    assert r.speedup_interval == intervals.speedup_estimate(r.fp32, r.amp) and len(r.fp8.samples) == 4
    assert r.context["race"] == "fp8_matmul" and "float8_e4m3fn" in r.context["fp8"]
    assert r.bytes_moved("fp8") == 4 * n * n and r.bytes_moved("amp") == 6 * n * n and r.bytes_moved("fp32") == 12 * n * n
    assert set(r.regimes) == {"fp32", "amp", "fp8"} and r.size == f"n={n}"
    data = json.loads(json.dumps(r.to_dict()))
    assert data["fp8_speedup"] == pytest.approx(r.fp8_speedup) and data["fp8_speedup_interval"]["pairs"] == 4
    assert set(data["timings"]) == {"fp32", "amp", "fp8"}
    est = r.fp8_speedup_interval
    assert f"  speedup (AMP / FP8): {est}: {est.outcome}" in str(r).splitlines()


def test_the_tensorwise_scale_is_torchaos():
    try:
        from amp_lab.fp8 import import_torchao
    except ImportError:
        pytest.importorskip("torchao")
    else:
        import_torchao()
    from torchao.float8.float8_utils import tensor_to_scale, to_fp8_saturated

    gen = torch.Generator().manual_seed(3)
    for x in (torch.randn(32, 48, generator=gen) * 1e3, torch.randn(16, 16, generator=gen) * 1e-5,
              torch.zeros(16, 16)):  # fmt: skip
        q, inv = race._tensorwise_e4m3(x)
        scale = tensor_to_scale(x, torch.float8_e4m3fn)
        assert scale.dtype == inv.dtype == torch.float32
        assert torch.equal(inv, scale.reciprocal())
        assert torch.equal(q.view(torch.uint8), to_fp8_saturated(x * scale, torch.float8_e4m3fn).view(torch.uint8))


def test_race_fp8_matmul_takes_float16_and_the_course_default(spy):
    r = race.race_fp8_matmul(16, device="cpu", dtype="fp16", **FAST)
    assert r.dtype == torch.float16 and spy["amp"].dtype == torch.float16 and spy["fp8"].dtype == torch.bfloat16
    from amp_lab.device import amp_dtype

    assert race.race_fp8_matmul(16, device="cpu", **FAST).dtype == amp_dtype("cpu")


@pytest.fixture
def no_allocation(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("allocated tensors for a race that was refused")

    monkeypatch.setattr(race, "_operands", refuse)
    monkeypatch.setattr(race, "measure", refuse)


@pytest.mark.parametrize(
    ("n", "exc", "match"),
    [
        (40, ValueError, r"n=40 is not a multiple of 16.*choose n=32 or n=48"),
        (17, ValueError, r"n=17 is not a multiple of 16"),
        (8, ValueError, "n must be >= 16"),
        (0, ValueError, "n must be >= 16"),
        (2.5, TypeError, "n must be an integer"),
        (True, TypeError, "n must be an integer"),
        (2**32, ValueError, "n must be <= "),
    ],
)
def test_bad_sizes_are_refused_naming_n(no_allocation, n, exc, match):
    with pytest.raises(exc, match=match):
        race.race_fp8_matmul(n, device="cpu", **FAST)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"repeats": 10**12}, ValueError, "repeats must be <= 10000"),
        ({"warmup": -1}, ValueError, "warmup must be >= 0"),
        ({"min_sample_s": 1e6}, ValueError, "min_sample_s must be <= 10"),
        ({"max_time_s": 1e9}, ValueError, "max_time_s must be <= 3600"),
        ({"callback": 5}, TypeError, "callback must be a function"),
        ({"reuse": 5}, TypeError, "reuse must be a RaceResult"),
        ({"dtype": "int8"}, ValueError, "dtype='int8'"),
        ({"device": "tpu"}, ValueError, "device"),
        # three contestants: 7000 rounds of 0.2 s samples is 4200 s, past the hour (two would be 2800 s)
        ({"repeats": 7000, "min_sample_s": 0.2, "target_rel_width": None}, ValueError, "3 contestants"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_allocated(no_allocation, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        race.race_fp8_matmul(16, **{"device": "cpu", **kwargs})


def test_an_oversized_request_is_refused_before_allocating(monkeypatch, no_allocation):
    monkeypatch.setattr(device_module, "available_bytes", lambda dev=None: 10**7)
    n = 1024
    assert cost.fp8_matmul_bytes(n) == n * n * (12 + 6 + 2 + 2 + 12) > 10**7
    with pytest.raises(ValueError, match=r"race_fp8_matmul\(n=1024\).*refused before allocating"):
        race.race_fp8_matmul(n, device="cpu", **FAST)
    assert cost.fp8_matmul_bytes(16, torch.float16) == cost.matmul_bytes(16, torch.float16) + 16 * 16 * 16


def _gpu_facts(monkeypatch, capability, arch_list, device_type="cuda"):
    """A GPU's facts for a race on the CPU: the CUDA path's checks and contexts run with CPU tensors."""
    monkeypatch.setattr(race, "device_facts", lambda dev: (device_type, capability))
    monkeypatch.setattr(race, "_cuda_arch_list", lambda: tuple(arch_list))


@pytest.mark.parametrize(("capability", "says"), [((8, 0), "Ampere (sm_80)"), ((7, 5), "Turing (sm_75)"),
                                                  ((8, 6), "Ampere (sm_86)")])  # fmt: skip
def test_a_gpu_without_fp8_tensor_cores_is_refused_with_the_reason(monkeypatch, no_allocation, capability, says):
    _gpu_facts(monkeypatch, capability, CU130)
    with pytest.raises(ValueError, match="race_fp8_matmul cannot race") as info:
        race.race_fp8_matmul(16, device="cpu", **FAST)
    assert says in str(info.value) and gpus.fp8_matmul_support(capability, CU130).reason in str(info.value)


def test_a_build_without_kernels_for_the_gpu_is_refused_with_the_advice(monkeypatch, no_allocation):
    _gpu_facts(monkeypatch, (10, 0), CU126)  # a B200 under a wheel built before Blackwell
    with pytest.raises(ValueError, match="has FP8 Tensor Cores, but this torch has kernels for"):
        race.race_fp8_matmul(16, device="cpu", **FAST)
    _gpu_facts(monkeypatch, None, [], device_type="mps")
    with pytest.raises(ValueError, match="cannot race on cpu: FP8 GEMMs run on NVIDIA GPUs"):
        race.race_fp8_matmul(16, device="cpu", **FAST)


@pytest.mark.parametrize("capability", [(8, 9), (9, 0), (10, 0), (12, 0)])
def test_an_fp8_gpu_races_with_tf32_off_for_every_contestant(monkeypatch, capability):
    _gpu_facts(monkeypatch, capability, CU130)
    seen = []
    real_measure = timing.measure

    def measure(contestants, **kwargs):
        for name, c in contestants.items():
            with c.context():
                seen.append((name, torch._C._get_cublas_allow_tf32()))
        return real_measure(contestants, **kwargs)

    monkeypatch.setattr(race, "measure", measure)
    before = torch.backends.cuda.matmul.allow_tf32
    with hardware.tf32_matmul(True):
        r = race.race_fp8_matmul(16, device="cpu", **FAST)
    assert seen == [("fp32", False), ("amp", False), ("fp8", False)] and list(r.timings) == ["fp32", "amp", "fp8"]
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_reuse_returns_the_fp8_race_and_never_mixes_it_with_race_matmul(monkeypatch):
    fp8 = race.race_fp8_matmul(16, device="cpu", **FAST)
    plain = race.race_matmul(16, device="cpu", **{**FAST, "warmup": 1, "repeats": 2})

    def refuse(*args, **kwargs):
        raise AssertionError("raced a configuration that had been measured already")

    monkeypatch.setattr(race, "measure", refuse)
    assert race.race_fp8_matmul(16, device="cpu", reuse=[plain, fp8], **FAST) is fp8
    assert race.race_fp8_matmul(16, device="cpu", reuse=fp8, **FAST) is fp8
    s = sweeps.SweepResult("matmul", (16,), (fp8,), sweeps.Ceiling(1.0, None, "x"), fp8.context)
    assert race.race_fp8_matmul(16, device="cpu", reuse=s, **FAST) is fp8
    assert race.race_matmul(16, device="cpu", reuse=[fp8, plain], **FAST) is plain
    for call in (
        lambda: race.race_matmul(16, device="cpu", reuse=[fp8], **FAST),  # an FP8 race is not a plain one
        lambda: race.race_fp8_matmul(16, device="cpu", reuse=[plain], **FAST),
        lambda: race.race_fp8_matmul(32, device="cpu", reuse=[fp8], **FAST),
        lambda: race.race_fp8_matmul(16, device="cpu", dtype="fp16", reuse=[fp8], **FAST),
    ):
        with pytest.raises(AssertionError, match="measured already"):
            call()


# ------------------------------------------------------------------------------------------
# Reading an FP8 race
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fp8_result():
    return race.race_fp8_matmul(32, device="cpu", **FAST)


def _on_gpu(result, name, capability):
    context = {**result.context, "device": "cuda:0", "device_name": name, "capability": list(capability)}
    return race.RaceResult(result.kind, result.params, result.dtype, result.timings, result.flops, None, context)


def test_fp8_summary_on_the_cpu_says_it_measured_no_fp8_hardware(fp8_result):
    reading = race.fp8_summary(fp8_result)
    est = fp8_result.fp8_speedup_interval
    vs32 = intervals.speedup_estimate(fp8_result.fp32, fp8_result.fp8)
    assert reading.outcome == est.outcome and reading.reasons[:2] == ("race.fp8_head", "race.fp8_no_units")
    assert (reading.facts["vs_amp"], reading.facts["vs_fp32"]) == (str(est), str(vs32))
    assert {k: reading.facts[f"tflops_{k}"] for k in ("fp32", "amp", "fp8")} == fp8_result.tflops
    assert str(reading).startswith(f"FP8 (E4M3) against bfloat16, n=32 on cpu: {est}")
    assert race_readout.explain(fp8_result)  # the plain race reading still reads FP32 against AMP


NO_BF16 = {"avx512_bf16": False, "amx_bf16": False, "avx512_fp16": False}
AVX512_BF16 = {"avx512_bf16": True, "amx_bf16": False, "avx512_fp16": False}


@pytest.mark.parametrize(
    ("medians", "flags", "says"),
    [
        ({"fp32": 1e-3, "amp": 20e-3, "fp8": 3e-3}, NO_BF16, True),  # this machine's story: bf16 emulated, slowest
        ({"fp32": 1e-3, "amp": 20e-3, "fp8": 3e-3}, AVX512_BF16, False),  # native bf16: no emulation to blame
        ({"fp32": 1e-3, "amp": 2e-3, "fp8": 3e-3}, NO_BF16, False),  # bf16 not the slowest: nothing to explain
    ],
)
def test_fp8_summary_blames_an_emulated_amp_dtype_only_when_it_was_the_slowest(medians, flags, says):
    timings = {k: intervals.Timing(k, (m, m * 1.01, m * 0.99, m), 1, 1) for k, m in medians.items()}
    ctx = {"device": "cpu", "threads": 1, "cpu_flags": flags, "torch": torch.__version__}
    r = race.RaceResult("fp8_matmul", {"n": 64}, torch.bfloat16, timings, 2.0 * 64**3, None, ctx)
    reading = race.fp8_summary(r)
    assert ("race.fp8_amp_emulated" in reading.reasons) is says
    ratio = medians["amp"] / medians["fp8"]  # hand-computed from the medians: 20/3 or 2/3
    assert r.fp8_speedup == pytest.approx(ratio) and reading.facts["vs_amp"].startswith(f"{ratio:.2f}x")


def test_fp8_summary_on_a_gpu_sets_the_measurement_beside_the_datasheet(fp8_result):
    h100 = _on_gpu(fp8_result, "NVIDIA H100 80GB HBM3", (9, 0))
    reading = race.fp8_summary(h100)
    measured = h100.fp8_speedup
    assert reading.reasons == ("race.fp8_head", "race.fp8_support", "race.fp8_datasheet")
    assert reading.facts["support"].startswith("Hopper (sm_90) Tensor Cores multiply FP8")
    assert (reading.facts["model"], reading.facts["sheet_ratio"]) == ("H100 SXM", 2.0)
    assert reading.facts["share"] == pytest.approx(measured / 2)
    assert h100.regimes["fp8"].name != "unknown"  # the FP8 peak comes from the datasheet
    l4 = race.fp8_summary(_on_gpu(fp8_result, "NVIDIA L4", (8, 9)))
    assert l4.reasons[-1] == "race.fp8_no_datasheet" and l4.facts["support"].startswith("Ada Lovelace (sm_89)")


def test_fp8_summary_refuses_what_is_not_an_fp8_race(fp8_result):
    plain = race.RaceResult("matmul", {"n": 32}, torch.bfloat16,
                            {k: fp8_result.timings[k] for k in ("fp32", "amp")}, 1.0, None, fp8_result.context)  # fmt: skip
    assert plain.fp8 is None and plain.fp8_speedup is None and "fp8_speedup" not in plain.to_dict()
    with pytest.raises(ValueError, match="result must be an FP8 race"):
        race.fp8_summary(plain)
    with pytest.raises(TypeError, match="result must be"):
        race.fp8_summary(None)


def test_step_bytes_of_an_fp8_race_counts_no_casts():
    n = 48
    assert cost.call_bytes("fp8_matmul", {"n": n}, None) == 12 * n * n
    assert cost.call_bytes("fp8_matmul", {"n": n}, torch.bfloat16) == 6 * n * n
    assert cost.call_bytes("matmul", {"n": n}, torch.bfloat16) == 18 * n * n  # race_matmul: + casts (8 + 4)
