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


# ------------------------------------------------------------------------------------------
# Rowwise and blockwise lanes (issue 26): scales against torchao and hand-computed tiles, layouts against torch's
# own CUDA checks (the meta kernels of torch._scaled_mm and scaled_mm check shapes and strides as CUDA does)
# ------------------------------------------------------------------------------------------


def _torchao():
    from amp_lab.fp8 import import_torchao

    import_torchao()
    from torchao.float8.float8_utils import ScalingGranularity, tensor_to_scale, to_fp8_saturated

    return ScalingGranularity, tensor_to_scale, to_fp8_saturated


def _spread_rows(m, k, seed=0, dtype=torch.float32):
    """Rows whose magnitudes span 2**-12 .. 2**12 (tokens of very different sizes), as rowwise scaling meets them."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=gen) * 2.0 ** torch.linspace(-12, 12, m)[:, None]).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rowwise_and_tensorwise_tiles_are_torchaos_bit_for_bit(dtype):
    granularity, tensor_to_scale, to_fp8_saturated = _torchao()
    x = _spread_rows(32, 48, dtype=dtype)
    x[3, 5] = 0.0
    x[7] = 0.0  # an all-zero row: torchao's EPS floor gives it a finite scale
    q, inv = race._e4m3_tiles(x, 1, 48)
    scale = tensor_to_scale(x, torch.float8_e4m3fn, scaling_granularity=granularity.AXISWISE, axiswise_dim=-1)
    assert inv.shape == scale.shape == (32, 1) and inv.dtype == torch.float32
    assert torch.equal(inv, scale.reciprocal())
    assert torch.equal(q.view(torch.uint8), to_fp8_saturated(x.float() * scale, torch.float8_e4m3fn).view(torch.uint8))
    q, inv = race._e4m3_tiles(x, 32, 48)  # one tile: tensorwise
    scale = tensor_to_scale(x, torch.float8_e4m3fn)
    assert torch.equal(inv.reshape(()), scale.reciprocal())
    assert torch.equal(q.view(torch.uint8), to_fp8_saturated(x.float() * scale, torch.float8_e4m3fn).view(torch.uint8))


def test_blockwise_tiles_against_hand_computed_scales():
    x = _spread_rows(256, 384, seed=1)
    x[128:, 256:] = 0.0  # one all-zero 128 x 128 block
    for rows, cols in ((1, 128), (128, 128)):
        q, inv = race._e4m3_tiles(x, rows, cols)
        assert q.dtype == torch.float8_e4m3fn and inv.shape == (256 // rows, 384 // cols)
        for i, j in ((0, 0), (inv.shape[0] - 1, 1), (inv.shape[0] // 2, 2)):
            tile = x[i * rows : (i + 1) * rows, j * cols : (j + 1) * cols]
            amax = max(tile.abs().max().item(), 1e-12)  # torchao's EPS
            scale = np.float32(448.0 / amax)  # in float64, then float32
            assert inv[i, j].item() == np.float32(1.0) / scale
            part = q[i * rows : (i + 1) * rows, j * cols : (j + 1) * cols].float()
            assert part.abs().max().item() == (448.0 if amax > 1e-12 else 0.0)  # each tile's amax lands on 448
            expected = torch.clamp(tile * torch.tensor(scale), -448, 448).to(torch.float8_e4m3fn).float()
            assert torch.equal(part, expected)


@pytest.mark.parametrize("scaling", ["rowwise", "blockwise"])
@pytest.mark.parametrize(("m", "k", "n"), [(128, 128, 128), (256, 384, 512), (512, 1024, 256), (384, 640, 128)])
def test_the_operands_pass_torchs_cuda_layout_checks(scaling, m, k, n):
    """On the meta device torch runs its CUDA checks (row-major A, column-major B, dims multiples of 16, the
    scales' shapes and strides for each recipe, K/128 padded to fours for 128 x 128 blocks) without a GPU."""
    A, B = torch.empty(m, k, device="meta"), torch.empty(k, n, device="meta")
    a8, b8, sa, sb = race._fp8_operands(A, B, scaling)
    assert a8.is_contiguous() and b8.stride() == (1, k) and sa.dtype == sb.dtype == torch.float32
    out = race._scaled_gemm(a8, b8, sa, sb, scaling)()
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    if scaling == "blockwise":
        assert sa.shape == (m, k // 128) and sa.stride(0) == 1
        assert sb.shape == (-(-k // 128 // 4) * 4, n // 128) and sb.stride(0) == 1
        if k > 128:  # the same tile scales laid out row-major: refused, so the check can fail
            with pytest.raises(RuntimeError, match="1x128 x 128x128 blockwise scaling"):
                race._blockwise_mm(a8, b8, sa.contiguous(), sb)
    else:
        assert (sa.shape, sb.shape) == ((m, 1), (1, n))


def _dequantized_blockwise(a8, b8, sa, sb):
    """The blockwise GEMM emulated from its definition: each tile times its multiplier, then an FP32 product."""
    k, n = a8.shape[1], b8.shape[1]
    a = a8.float() * sa.repeat_interleave(128, 1)[:, :k]
    b = b8.float() * sb[: -(-k // 128)].repeat_interleave(128, 0)[:k].repeat_interleave(128, 1)[:, :n]
    return (a @ b).to(torch.bfloat16)


@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise", "blockwise"])
def test_finer_scales_follow_rows_of_different_sizes(scaling):
    """On rows spanning 2**24, tensorwise E4M3 flushes the small rows; rowwise and blockwise keep them.  The
    dequantized product against float64 (and, where the CPU runs it, torch._scaled_mm's own result)."""
    A, B = _spread_rows(256, 256, seed=2), torch.randn(256, 256, generator=torch.Generator().manual_seed(3))
    if scaling == "tensorwise":
        (a8, sa), (b8, sb) = race._tensorwise_e4m3(A), race._tensorwise_e4m3(B)
        out = torch._scaled_mm(a8, b8.t().contiguous().t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    else:
        ops = race._fp8_operands(A, B, scaling)
        out = _dequantized_blockwise(*ops) if scaling == "blockwise" else race._scaled_gemm(*ops, scaling)()
        deq = (ops[0].double() * ops[2].double()) @ (ops[1].double() * ops[3].double()) if scaling == "rowwise" else None
        if deq is not None:  # row by row, as the rows' sizes differ by 2**24
            size = deq.abs().amax(1, keepdim=True)
            torch.testing.assert_close(out.double() / size, deq / size, rtol=2**-7, atol=1e-3)
    exact = A.double() @ B.double()
    small = slice(0, 32)  # the smallest rows: magnitudes near 2**-12
    rel = ((out[small].double() - exact[small]).norm() / exact[small].norm()).item()
    if scaling == "tensorwise":
        assert rel > 0.5  # most of them rounded to zero
    else:
        assert rel < 0.1  # within E4M3's few percent


# ------------------------------------------------------------------------------------------
# Which GPUs run blockwise FP8 GEMMs (torch 2.13: cuBLASLt's kernel, Hopper only, CUDA 12.9 and later)
# ------------------------------------------------------------------------------------------

# (GPU, capability, CUDA version of the build, blockwise runs?, reason code or None where FP8 itself is missing)
BLOCKWISE = [
    ("T4", (7, 5), "13.0", False, None),
    ("A100", (8, 0), "13.0", False, None),
    ("L4", (8, 9), "13.0", False, "blockwise_hopper_only"),
    ("H100", (9, 0), "13.0", True, "blockwise_runs"),
    ("H100 cu129", (9, 0), "12.9", True, "blockwise_runs"),
    ("H100 cu128", (9, 0), "12.8", False, "blockwise_old_cuda"),
    ("H200 cu126", (9, 0), "12.6", False, "blockwise_old_cuda"),
    ("H200 unchecked", (9, 0), None, True, "blockwise_runs"),
    ("B200", (10, 0), "13.0", False, "blockwise_hopper_only"),
    ("RTX 5090", (12, 0), "12.8", False, "blockwise_hopper_only"),
]


@pytest.mark.parametrize(("name", "capability", "cuda", "runs", "code"), BLOCKWISE, ids=[g[0] for g in BLOCKWISE])
def test_blockwise_support_of_real_gpus(name, capability, cuda, runs, code):
    support = race.fp8_blockwise_support(capability, CU130, cuda)
    assert bool(support) is runs and support.supported is runs
    if code is None:  # no FP8 Tensor Cores: FP8's own reason
        assert support == gpus.fp8_matmul_support(capability, CU130)
        return
    assert support.code == f"fp8_recipes_race.{code}" and f"sm_{capability[0]}{capability[1]}" in support.reason
    if code == "blockwise_old_cuda":
        assert f"CUDA {cuda}" in support.reason and "12.9" in support.reason


def test_blockwise_support_needs_kernels_a_gpu_and_the_api(monkeypatch):
    assert race.fp8_blockwise_support((9, 0), CU126[:4], "13.0").code == "fp8.no_kernels"  # a build without sm_90
    assert race.fp8_blockwise_support(None) == gpus.fp8_matmul_support(None)
    monkeypatch.delattr(torch.nn.functional, "ScalingType")  # a torch from before scaled_mm's block scales
    old = race.fp8_blockwise_support((9, 0), CU130, "13.0")
    assert not old and old.code == "fp8_recipes_race.blockwise_no_api" and torch.__version__ in old.reason


# ------------------------------------------------------------------------------------------
# race_fp8_matmul(scaling=...)
# ------------------------------------------------------------------------------------------


def test_a_rowwise_race_adds_its_lane_beside_the_tensorwise_one(spy):
    n = 32
    r = race.race_fp8_matmul(n, device="cpu", scaling="rowwise", **FAST)
    assert list(r.timings) == ["fp32", "amp", "fp8", "fp8_rowwise"] and r.params == {"n": n, "scaling": "rowwise"}
    A, B = race._operands(n, torch.device("cpu"))
    cells = spy["closures"]["fp8_rowwise"].__closure__
    a8, b8, sa, sb = (cell.cell_contents for cell in cells if isinstance(cell.cell_contents, torch.Tensor))
    assert (sa.shape, sb.shape, b8.stride()) == ((n, 1), (1, n), (1, n))
    out = spy["fp8_rowwise"]
    assert out.dtype == torch.bfloat16 and torch.equal(out, torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb,
                                                                             out_dtype=torch.bfloat16))  # fmt: skip
    exact = A.double() @ B.double()
    assert 0 < ((out.double() - exact).norm() / exact.norm()).item() < 0.1
    assert torch.equal(spy["fp8"], spy["closures"]["fp8"]())  # the tensorwise lane as before
    rows = np.array(r.amp.samples) / np.array(r.timings["fp8_rowwise"].samples)
    assert r.lane_speedup("fp8_rowwise").ratio == pytest.approx(float(np.median(rows)), rel=1e-12)
    assert r.lane_speedup("fp8_rowwise", "fp8") == intervals.speedup_estimate(r.fp8, r.timings["fp8_rowwise"])
    assert r.lane_speedup("fp8_blockwise") is None and r.bytes_moved("fp8_rowwise") == 4 * n * n
    data = json.loads(json.dumps(r.to_dict()))
    assert data["fp8_rowwise_speedup_interval"]["pairs"] == 4 and "fp8_rowwise_vs_tensorwise" in data
    assert "rowwise scales" in r.context["fp8_rowwise"] and "tensorwise scales" in r.context["fp8"]
    lines = str(r).splitlines()
    assert f"  speedup (FP8 tensorwise / FP8 rowwise): {r.lane_speedup('fp8_rowwise', 'fp8')}" in lines
    assert set(r.regimes) == {"fp32", "amp", "fp8", "fp8_rowwise"}
    assert race.fp8_summary(r).reasons[:2] == ("race.fp8_head", "race.fp8_no_units")


def test_reuse_takes_a_rowwise_race_for_a_tensorwise_one_never_the_reverse(monkeypatch):
    rowwise = race.race_fp8_matmul(16, device="cpu", scaling="rowwise", **FAST)
    plain = race.race_fp8_matmul(16, device="cpu", **FAST)
    monkeypatch.setattr(race, "measure", lambda *a, **k: pytest.fail("raced a configuration measured already"))
    assert race.race_fp8_matmul(16, device="cpu", reuse=[rowwise], **FAST) is rowwise  # it holds a tensorwise lane
    assert race.race_fp8_matmul(16, device="cpu", scaling="rowwise", reuse=[plain, rowwise], **FAST) is rowwise
    with pytest.raises(pytest.fail.Exception):
        race.race_fp8_matmul(16, device="cpu", scaling="rowwise", reuse=[plain], **FAST)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"scaling": "colwise"}, ValueError, "scaling='colwise' is not allowed"),
        ({"scaling": 5}, TypeError, "scaling must be"),
        ({"scaling": "blockwise"}, ValueError, "n must be >= 128"),
        ({"n": 200, "scaling": "blockwise"}, ValueError, "choose n=128 or n=256"),
        ({"n": 128, "scaling": "blockwise"}, ValueError, r"scaling='blockwise'\) cannot race on cpu: torch has no CPU"),
    ],
)
def test_bad_scalings_are_refused_before_anything_is_allocated(no_allocation, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        race.race_fp8_matmul(**{"n": 16, "device": "cpu", **FAST, **kwargs})


@pytest.mark.parametrize(("capability", "cuda", "says"), [((10, 0), "13.0", "only on Hopper"),
                                                          ((9, 0), "12.8", "CUDA 12.8"), ((8, 9), "13.0", "Hopper")])  # fmt: skip
def test_blockwise_elsewhere_than_a_new_hopper_build_is_refused_with_the_reason(monkeypatch, no_allocation,
                                                                                capability, cuda, says):  # fmt: skip
    _gpu_facts(monkeypatch, capability, CU130)
    monkeypatch.setattr(race, "_cuda_version", lambda: cuda)
    with pytest.raises(ValueError, match=r"race_fp8_matmul\(scaling='blockwise'\) cannot race") as info:
        race.race_fp8_matmul(128, device="cpu", scaling="blockwise", **FAST)
    assert says in str(info.value) and race.fp8_blockwise_support(capability, CU130, cuda).reason in str(info.value)


def test_a_hopper_races_the_blockwise_lane(monkeypatch, spy):
    """H100 facts, CPU tensors: the CUDA path runs, its GEMM emulated from the definition (the CPU has no kernel)."""
    _gpu_facts(monkeypatch, (9, 0), CU130)
    monkeypatch.setattr(race, "_cuda_version", lambda: "13.0")
    monkeypatch.setattr(race, "_blockwise_mm", _dequantized_blockwise)
    r = race.race_fp8_matmul(256, device="cpu", scaling="blockwise", **FAST)
    assert list(r.timings) == ["fp32", "amp", "fp8", "fp8_blockwise"] and r.params["scaling"] == "blockwise"
    A, B = race._operands(256, torch.device("cpu"))
    exact = A.double() @ B.double()
    out = spy["fp8_blockwise"]
    assert out.dtype == torch.bfloat16 and 0 < ((out.double() - exact).norm() / exact.norm()).item() < 0.1
    assert "blockwise scales" in r.context["fp8_blockwise"] and "fp8_blockwise_vs_tensorwise" in r.to_dict()


# ------------------------------------------------------------------------------------------
# fp8_cast_overhead: the cast of an operand, and torchao's rule measured in the same rounds
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
def test_the_cast_overhead_times_torchaos_cast_and_reads_the_rule_from_the_rounds(spy, scaling):
    granularity, tensor_to_scale, to_fp8_saturated = _torchao()
    n = 32
    c = race.fp8_cast_overhead(n, device="cpu", scaling=scaling, dtype="bf16", **{**FAST, "repeats": 6})
    assert (c.n, c.scaling, c.dtype) == (n, scaling, torch.bfloat16) and list(c.timings) == ["amp", "fp8", "cast"]
    A, B = race._operands(n, torch.device("cpu"))
    A_low = A.bfloat16()
    assert torch.equal(spy["amp"], A_low @ B.bfloat16())
    q, inv = spy["cast"]  # the timed cast: torchao's scale and saturating cast of the bfloat16 operand
    kw = {"scaling_granularity": granularity.AXISWISE, "axiswise_dim": -1} if scaling == "rowwise" else {}
    scale = tensor_to_scale(A_low, torch.float8_e4m3fn, **kw)
    assert torch.equal(q.view(torch.uint8), to_fp8_saturated(A_low.float() * scale, torch.float8_e4m3fn).view(torch.uint8))
    assert torch.equal(inv.reshape(scale.shape), scale.reciprocal())
    samples = {k: t.samples for k, t in c.timings.items()}
    assert c.seconds == float(np.median(samples["cast"])) and c.overhead_s == 2 * c.seconds
    assert c.savings_s == pytest.approx(float(np.median(samples["amp"]) - np.median(samples["fp8"])))
    # six rounds at 95%: the sign test's interval of a median runs from the smallest sample to the largest
    iv = c.seconds_interval
    assert (iv.low, iv.high, iv.pairs) == (min(samples["cast"]), max(samples["cast"]), 6)
    ratios = sorted(a / (f + 2 * k) for a, f, k in zip(samples["amp"], samples["fp8"], samples["cast"], strict=True))
    assert (c.rule.ratio, c.rule.low, c.rule.high) == pytest.approx((np.median(ratios), ratios[0], ratios[-1]))
    assert c.rule.outcome == ("faster" if ratios[0] > 1 else "slower" if ratios[-1] < 1 else "too close to call")
    data = json.loads(json.dumps(c.to_dict()))
    assert data["params"] == {"n": n, "scaling": scaling} and data["rule_outcome"] == c.rule.outcome
    assert data["cast_interval_s"] == [iv.low, iv.high] and set(data["timings"]) == {"amp", "fp8", "cast"}
    assert str(c).splitlines()[-1].endswith(f"{c.rule}: {c.rule.outcome}")


def test_too_few_rounds_give_the_cast_an_open_interval():
    c = race.fp8_cast_overhead(16, device="cpu", **{**FAST, "repeats": 3})
    assert c.seconds_interval.high == float("inf") and "too few rounds" in str(c)
    assert json.loads(json.dumps(c.to_dict()))["cast_interval_s"][1] == "inf"


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"scaling": "blockwise"}, ValueError, "scaling='blockwise' is not allowed"),
        ({"n": 40}, ValueError, "choose n=32 or n=48"),
        ({"n": 2.5}, TypeError, "n must be an integer"),
        ({"repeats": 7000, "min_sample_s": 0.2, "target_rel_width": None}, ValueError, "3 contestants"),
        ({"budget_s": 0.5}, ValueError, "budget_s must be >= 1"),
        ({"device": "tpu"}, ValueError, "device"),
    ],
)
def test_the_cast_overhead_refuses_bad_arguments_before_allocating(no_allocation, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        race.fp8_cast_overhead(**{"n": 16, "device": "cpu", **FAST, **kwargs})


def test_the_cast_overhead_is_bounded_by_memory_time_and_the_gpu(monkeypatch, no_allocation):
    monkeypatch.setattr(device_module, "available_bytes", lambda dev=None: 10**6)
    with pytest.raises(ValueError, match=r"fp8_cast_overhead\(n=1024, scaling='tensorwise'\).*refused before"):
        race.fp8_cast_overhead(1024, device="cpu", **FAST)
    monkeypatch.undo()
    monkeypatch.setattr(race, "_operands", lambda *a: pytest.fail("allocated the operands of a refused run"))
    monkeypatch.setattr(race._timing, "calibrated_seconds", lambda *a, **k: 100.0)  # calls of 100 s each
    with pytest.raises(ValueError, match=r"fp8_cast_overhead\(n=64, scaling='rowwise'\) would take about"):
        race.fp8_cast_overhead(64, device="cpu", scaling="rowwise", **FAST)
    _gpu_facts(monkeypatch, (8, 0), CU130)
    with pytest.raises(ValueError, match=r"fp8_cast_overhead cannot race on cpu: Ampere \(sm_80\)"):
        race.fp8_cast_overhead(64, device="cpu", **FAST)
