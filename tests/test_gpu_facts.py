"""The GPU decisions, tested without a GPU: every one is a pure function of facts (compute capability,
name, a torch build's arch list, memory numbers, timings), fed here with the facts of real GPUs.  And the
TF32 switch and the race's CUDA contestant logic, run on this CPU build where torch allows it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_lab import cost, device, gpus, hardware, models, race, race_trainer, race_widget, sweeps, timing

# torch.cuda.get_arch_list() of the CUDA wheels: cu130 read from torch 2.14.1+cu130's libtorch_cuda.so
# (its -gencode flags); cu126 is the older CUDA 12 variant that still builds Volta and Pascal.
CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


@dataclass(frozen=True)
class Gpu:
    name: str  # torch.cuda.get_device_name()
    capability: tuple[int, int]
    amp_dtype: torch.dtype
    bf16_hardware: bool
    tf32: bool  # a TF32 contestant races
    on_cu130: bool  # the default CUDA wheel has kernels for it
    ceiling_fp16: float | None  # datasheet: FP16 Tensor / FP32 rate
    ceiling_bf16: float | None


GPUS = [
    Gpu("Tesla T4", (7, 5), torch.float16, False, False, True, 8.02, None),
    Gpu("Tesla V100-SXM2-16GB", (7, 0), torch.float16, False, False, False, 7.96, None),
    Gpu("NVIDIA A100-SXM4-80GB", (8, 0), torch.bfloat16, True, True, True, 16.0, 16.0),
    Gpu("NVIDIA GeForce RTX 4090", (8, 9), torch.bfloat16, True, True, True, 2.0, 2.0),
    Gpu("NVIDIA H100 80GB HBM3", (9, 0), torch.bfloat16, True, True, True, 14.77, 14.77),
    Gpu("NVIDIA H100 NVL", (9, 0), torch.bfloat16, True, True, True, 13.93, 13.93),
    Gpu("NVIDIA H200", (9, 0), torch.bfloat16, True, True, True, 14.77, 14.77),
    Gpu("NVIDIA B200", (10, 0), torch.bfloat16, True, True, True, None, None),  # not in the table: measured
    Gpu("NVIDIA GeForce RTX 5090", (12, 0), torch.bfloat16, True, True, True, None, None),
]
IDS = [g.name for g in GPUS]


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_each_gpu_gets_its_dtype_contestants_and_bf16_answer(gpu):
    assert gpus.amp_dtype_for("cuda", gpu.capability) == gpu.amp_dtype
    assert gpus.bf16_hardware(gpu.capability) is gpu.bf16_hardware
    names = race.contestant_names("cuda", gpu.capability)
    assert names == (("fp32", "amp", "tf32") if gpu.tf32 else ("fp32", "amp"))
    report = hardware.report_for("cuda", capability=gpu.capability, gpu_name=gpu.name)
    assert report.race_dtype == gpu.amp_dtype and report.bf16_supported is gpu.bf16_hardware
    assert report.use_scaler is (gpu.amp_dtype == torch.float16)


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_each_gpu_against_the_wheels(gpu):
    assert gpus.arch_supported(gpu.capability, CU130) is gpu.on_cu130
    advice = gpus.arch_advice(gpu.capability, CU130, "13.0")
    if gpu.on_cu130:
        assert advice is None
    else:  # the V100: the CUDA 13 wheel dropped Volta; the CUDA 12.6 one still has it
        assert "sm_70" in advice and "cu126" in advice and "doctor" in advice
        assert gpus.arch_supported(gpu.capability, CU126)


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_each_gpu_datasheet_ceiling_by_exact_name(gpu):
    for dtype, expected in ((torch.float16, gpu.ceiling_fp16), (torch.bfloat16, gpu.ceiling_bf16)):
        c = sweeps.datasheet_ceiling(gpu.name, dtype)
        assert (c is None) if expected is None else (c.vs_fp32 == expected and "datasheet" in c.source)
    entry = gpus.datasheet_entry(gpu.name)
    if entry is not None:  # ratios are computed from the rates the entry states, never typed
        assert entry.fp16_tflops / entry.fp32_tflops == pytest.approx(gpu.ceiling_fp16, abs=0.005)
        if entry.tf32_tflops is not None:
            assert sweeps.datasheet_ceiling(gpu.name, torch.float16).vs_tf32 == 2.0


def test_datasheet_matches_exact_names_only():
    assert gpus.datasheet_entry("NVIDIA RTX A1000") is None  # not an A100
    assert gpus.datasheet_entry("NVIDIA A100") is None  # a fragment is not a model name
    assert gpus.datasheet_entry("NVIDIA H100 NVL").model == "H100 NVL"  # not the SXM
    assert gpus.datasheet_entry("NVIDIA H100 80GB HBM3").model == "H100 SXM"
    assert gpus.datasheet_entry("  nvidia  h200 ").model == "H200 SXM"  # case and spacing aside
    assert gpus.datasheet_entry("NVIDIA H200 NVL").model == "H200 NVL"
    assert gpus.datasheet_entry(None) is None and sweeps.datasheet_ceiling(None) is None
    assert sweeps.datasheet_ceiling("Tesla V100-SXM2-32GB", torch.bfloat16) is None  # no bf16 Tensor Cores
    assert sweeps.datasheet_ceiling("Tesla V100-SXM2-32GB", torch.float16).vs_tf32 is None  # no TF32


def test_arch_supported_follows_cubin_and_ptx_rules():
    assert gpus.arch_supported((8, 9), ["sm_86"])  # same major, higher minor
    assert not gpus.arch_supported((8, 0), ["sm_86"])  # lower minor
    assert not gpus.arch_supported((9, 0), ["sm_86"])  # another major
    assert gpus.arch_supported((9, 0), ["sm_90a"]) and not gpus.arch_supported((9, 1), ["sm_90a"])
    assert gpus.arch_supported((10, 3), ["sm_100f"])
    assert gpus.arch_supported((12, 0), ["compute_90"])  # PTX compiles forward
    assert not gpus.arch_supported((8, 6), ["compute_90"])
    assert gpus.arch_supported((12, 1), CU130)  # DGX Spark runs sm_120 cubins
    assert not gpus.arch_supported((11, 0), CU130)  # Thor: no sm_110 in the CUDA 13.0 wheel
    assert not gpus.arch_supported((9, 0), [])  # a CPU-only build
    advice = gpus.arch_advice((11, 0), CU130, "13.0")
    assert "newer than the build" in advice and "sm_75, sm_80" in advice
    assert "CPU-only build" in gpus.arch_advice((9, 0), [], None)


@pytest.mark.parametrize("bad", [["gfx90a"], ["sm_9"], [90]])
def test_arch_supported_refuses_what_is_not_an_arch_list(bad):
    with pytest.raises(ValueError, match="arch_list"):
        gpus.arch_supported((9, 0), bad)


def test_bf16_hardware_refuses_bad_capabilities():
    for bad in ("8.0", (8,), None, (8, -1)):
        with pytest.raises(ValueError, match="capability"):
            gpus.bf16_hardware(bad)


def test_describe_flags_a_wheel_without_this_gpu(fake_gpu):
    """On a V100 with the CUDA 13 wheel, describe() says what to install (is_available() is True)."""
    fake_gpu("Tesla V100-SXM2-16GB", (7, 0), CU130)
    report = hardware.describe("cpu")
    assert report.bf16_supported is False and report.arch_supported is False
    assert any("sm_70" in n and "cu126" in n for n in report.notes)
    assert "no kernels for this GPU" in dict(report.lines())["GPU kernels in this torch"]
    fake_gpu("NVIDIA H100 80GB HBM3", (9, 0), CU130)
    report = hardware.describe("cpu")
    assert report.arch_supported is True and report.bf16_supported is True
    assert not any("cu126" in n for n in report.notes)


def test_cuda_available_bytes_counts_memory_the_allocator_holds():
    # a 10 GB card after a sweep: 4 GiB free for the driver, 5 GiB reserved by torch, 1 GiB in use
    gib = 2**30
    assert device.cuda_available_bytes(4 * gib, 5 * gib, 1 * gib) == 8 * gib
    assert device.cuda_available_bytes(4 * gib, 0, 0) == 4 * gib
    assert device.cuda_available_bytes(4 * gib, 1 * gib, 2 * gib) == 4 * gib  # never less than the driver's


def test_available_bytes_on_cuda_reads_the_allocator(monkeypatch):
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (4 * gib, 10 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda dev=None: 5 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda dev=None: 1 * gib)
    assert device.available_bytes(torch.device("cuda", 0)) == 8 * gib


# ------------------------------------------------------------------------------------------------
# Regimes: what limited a step, from the datasheet of the GPU that ran it
# ------------------------------------------------------------------------------------------------


def _ctx(name):
    return {"device": "cuda:0", "device_name": name}


def test_regimes_on_an_h100():
    h100 = _ctx("NVIDIA H100 80GB HBM3")
    n = 8192
    # An FP32 n=8192 matmul at 20 ms: 1.1 TFLOP at 67 TFLOP/s is 16.4 ms: the arithmetic sets the pace.
    r = timing.regime_for(20e-3, 2 * n**3, cost.call_bytes("matmul", {"n": n}, None), torch.float32, h100, unit="call")
    assert r.name == "compute-bound" and r.compute_s == pytest.approx(2 * n**3 / 67e12)
    assert "a call took 20 ms" in r.text
    # The digits-sized MLP step on a GPU: microseconds of work in a 300 us step.
    params = {"in_features": 64, "width": 64, "num_classes": 10, "batch": 64}
    flops = cost.mlp_step_flops(64, 64, in_features=64, num_classes=10)
    r = timing.regime_for(300e-6, flops, cost.call_bytes("mlp", params, torch.bfloat16), torch.bfloat16, h100)
    assert r.name == "launch-bound" and "launch/sync-bound" in r.text and "300 µs" in r.text
    # A copy-like step: bytes at 3.35 TB/s take longer than the arithmetic.
    r = timing.regime_for(1e-3, 1e6, 3e9, torch.bfloat16, h100)
    assert r.name == "memory-bound"


@pytest.mark.parametrize("context", [
    {"device": "cuda:0", "device_name": "NVIDIA B200"},  # no datasheet entry
    {"device": "cpu", "device_name": "AMD EPYC"},
    {"device": "mps", "device_name": "Apple M3"},
])  # fmt: skip
def test_regime_is_unknown_without_a_datasheet(context):
    r = timing.regime_for(1e-3, 1e9, 1e6, torch.bfloat16, context)
    assert r.name == "unknown" and r.compute_s is None and "cannot tell" in r.text


def test_classify_regime_is_pure():
    a = timing.classify_regime(1e-3, flops=1e9, bytes_moved=1e6, peak_flops=1e12, peak_bytes_per_s=1e12)
    assert a == timing.classify_regime(1e-3, flops=1e9, bytes_moved=1e6, peak_flops=1e12, peak_bytes_per_s=1e12)
    assert a.name == "compute-bound"  # 1 ms of arithmetic in a 1 ms step
    assert timing.classify_regime(4.1e-3, flops=1e9, bytes_moved=1e6, peak_flops=1e12, peak_bytes_per_s=1e12).name == "launch-bound"


# ------------------------------------------------------------------------------------------------
# TF32: the one switch, and the crash it prevents
# ------------------------------------------------------------------------------------------------

PAIRS = [("generic", "all"), ("cuda", "all"), ("cuda", "matmul"), ("mkldnn", "all"), ("mkldnn", "matmul")]


def _reset():
    torch.set_float32_matmul_precision("highest")
    for backend, op in PAIRS:
        torch._C._set_fp32_precision_setter(backend, op, "none")


@pytest.fixture
def clean_tf32():
    _reset()
    yield
    _reset()


def _try(fn):
    try:
        return fn()
    except RuntimeError:
        return "refused"


def _observe() -> tuple:
    """Everything a program (or cuBLAS) can read about FP32 matmul precision."""
    return (
        _try(torch.get_float32_matmul_precision),
        _try(torch._C._get_cublas_allow_tf32),  # what cuBLAS reads on every FP32 matmul
        *(torch._C._get_fp32_precision_getter(b, o) for b, o in PAIRS),
    )


def test_tf32_switch_can_be_read_by_cublas(clean_tf32):
    """The crash it prevents: with only the new flag set, cuBLAS's read raises on every FP32 matmul."""
    for enabled in (True, False):
        with hardware.tf32_matmul(enabled):
            assert torch._C._get_cublas_allow_tf32() is enabled
            assert hardware.tf32_matmul_enabled() is enabled
    assert _observe() == ("highest", False, "none", "none", "none", "none", "none")


def test_tf32_switch_restores_what_a_learner_set(clean_tf32):
    torch.set_float32_matmul_precision("high")
    before = _observe()
    with hardware.tf32_matmul(False):
        assert torch._C._get_cublas_allow_tf32() is False
    assert _observe() == before and torch.get_float32_matmul_precision() == "high"
    assert torch._C._get_cublas_allow_tf32() is True
    # a program that set only the new generic flag (as some libraries do): the race still reads a
    # defined setting, and the program's (mixed) state comes back as it was
    _reset()
    torch.backends.fp32_precision = "tf32"
    before = _observe()
    assert before[1] == "refused"
    with hardware.tf32_matmul(True):
        assert torch._C._get_cublas_allow_tf32() is True
    assert _observe() == before


_VALUES = {"generic": ["none", "ieee", "tf32", "bf16"], "cuda": ["none", "ieee", "tf32"],
           "mkldnn": ["none", "ieee", "tf32", "bf16"]}  # fmt: skip
_ACTION = st.one_of(
    st.tuples(st.just("legacy"), st.sampled_from(["highest", "high", "medium"])),
    st.tuples(st.just("allow_tf32"), st.booleans()),
    st.sampled_from(PAIRS).flatmap(lambda p: st.tuples(st.just("new"), st.just(p), st.sampled_from(_VALUES[p[0]]))),
)


def _apply(action):
    if action[0] == "legacy":
        torch.set_float32_matmul_precision(action[1])
    elif action[0] == "allow_tf32":
        torch.backends.cuda.matmul.allow_tf32 = action[1]
    else:
        torch._C._set_fp32_precision_setter(*action[1], action[2])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.lists(_ACTION, max_size=5), after=st.lists(_ACTION, max_size=3), enabled=st.booleans())
def test_tf32_switch_leaves_no_trace(clean_tf32, before, after, enabled):
    """Whatever a program set (any mix of the legacy and new APIs), entering and leaving the switch
    changes nothing it, or cuBLAS, can observe, now or after further changes (an inherited "none" stays
    inherited): compared with the same program that never raced."""
    results = []
    for race_in_between in (False, True):
        _reset()
        for a in before:
            _apply(a)
        if race_in_between:
            with hardware.tf32_matmul(enabled):
                assert torch._C._get_cublas_allow_tf32() is enabled
        observed = [_observe()]
        for a in after:
            _apply(a)
            observed.append(_observe())
        results.append(observed)
    assert results[0] == results[1]


# ------------------------------------------------------------------------------------------------
# The CUDA race's contestant logic, run on the CPU with a GPU's facts
# ------------------------------------------------------------------------------------------------


def _spy_measure(monkeypatch, seen):
    real = timing.measure

    def spy(contestants, **kwargs):
        for name, c in contestants.items():
            with c.context():
                seen[name] = _try(torch._C._get_cublas_allow_tf32)
        return real(contestants, **kwargs)

    monkeypatch.setattr(race, "measure", spy)


@pytest.mark.parametrize("gpu", [g for g in GPUS if g.name in ("Tesla T4", "NVIDIA H100 80GB HBM3")], ids=lambda g: g.name)
def test_cuda_race_contestants_on_cpu(monkeypatch, clean_tf32, gpu):
    """race_matmul and race_mlp through the CUDA race's contestant code: a GPU's facts, CPU tensors.  A
    program that had set only the new TF32 flag first (the state that crashed every race) races fine."""
    monkeypatch.setattr(race, "device_facts", lambda dev: ("cuda", gpu.capability))
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # new API only: cuBLAS's read refuses
    before = _observe()
    assert before[1] == "refused"
    expected = {"fp32": False, "amp": False, **({"tf32": True} if gpu.tf32 else {})}
    for run in (
        lambda: race.race_matmul(16, device="cpu", dtype=torch.bfloat16, warmup=0, repeats=1,
                                 min_sample_s=1e-4, target_rel_width=None),
        lambda: race.race_mlp(8, 4, in_features=8, device="cpu", dtype=torch.bfloat16, warmup=0, repeats=1,
                              min_sample_s=1e-4, target_rel_width=None, memory=False),
    ):  # fmt: skip
        seen = {}
        _spy_measure(monkeypatch, seen)
        result = run()
        assert seen == expected and set(result.timings) == set(expected)
        assert (result.tf32 is not None) is gpu.tf32
        assert _observe() == before  # the program's own setting is back


def test_tf32_contestant_is_only_for_ampere_and_later():
    assert race.contestant_names("cpu") == ("fp32", "amp")
    assert race.contestant_names("mps") == ("fp32", "amp")
    assert race.contestant_names("cuda", None) == ("fp32", "amp")  # capability unknown: no claim of TF32
    assert race.contestant_names("cuda", (6, 1)) == ("fp32", "amp")
    with pytest.raises(ValueError, match="device_type"):
        race.contestant_names("tpu")


def test_fp16_race_on_cuda_uses_fused_adam(monkeypatch):
    """With the default (foreach) Adam, GradScaler.step syncs on found_inf.item() every float16 step."""
    made = []
    real = torch.optim.Adam

    def adam(params, **kw):
        made.append(kw)
        return real(params, **{k: v for k, v in kw.items() if k != "fused"})

    monkeypatch.setattr(torch.optim, "Adam", adam)
    model = models.make_mlp(8, 10, hidden=8, depth=1)
    X, y = torch.randn(4, 8), torch.randint(0, 10, (4,))
    race_trainer.Trainer(model, X, y, torch.device("cpu"), torch.float16)
    assert made[-1].get("fused") is None
    fake_cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: self)  # the model stays on the CPU
    # On a CPU build GradScaler("cuda") warns and disables itself; on a real GPU the fused step on CPU
    # tensors fails later.  Either way the optimizer was asked for fused Adam first.
    warns = pytest.warns(UserWarning, match="CUDA is not available") if not torch.cuda.is_available() else contextlib.nullcontext()
    with warns, contextlib.suppress(RuntimeError):
        race_trainer.Trainer(model, X, y, fake_cuda, torch.float16)
    assert made[-1].get("fused") is True


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_race_widget_precisions_for_each_gpu(gpu):
    choices = race_widget.precision_choices("cuda", gpu.capability)
    assert choices[0][1] == str(gpu.amp_dtype).removeprefix("torch.")
    labels = dict((v, k) for k, v in choices)
    assert labels["bfloat16"] == ("bf16" if gpu.bf16_hardware else "bf16 (emulated)")
    warning = race_widget.precision_warning("cuda", gpu.capability, torch.bfloat16)
    assert (warning is None) is gpu.bf16_hardware
    assert race_widget.precision_warning("cuda", gpu.capability, torch.float16) is None


def test_race_widget_on_a_t4_warns_before_an_emulated_bf16_race(monkeypatch):
    monkeypatch.setattr(race, "device_facts", lambda dev: ("cuda", (7, 5)))
    w = race_widget.RaceWidget(device="cpu")
    assert [o for o in w.precision.options] == [("fp16", "float16"), ("bf16 (emulated)", "bfloat16")]
    assert w.precision.value == "float16" and "Note:" not in w.result.value
    w.precision.value = "bfloat16"
    assert "Turing (sm_75) has no bf16 Tensor Cores" in w.result.value
    assert race_widget.precision_choices("cpu") == [("bf16", "bfloat16"), ("fp16", "float16")]


@pytest.mark.parametrize("gpu", GPUS, ids=IDS)
def test_autocast_probe_dtype_asks_this_gpus_hardware(monkeypatch, gpu):
    from amp_lab import autocast_ops, device

    asked = []
    monkeypatch.setattr(device, "_device_available", lambda dev: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: asked.append(dev) or gpu.capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # counts emulation
    assert autocast_ops.autocast_dtype("cuda:1", torch.float16) == torch.float16
    assert asked[-1] == torch.device("cuda", 1)  # the device's own index, not the current device
    if gpu.bf16_hardware:
        assert autocast_ops.autocast_dtype("cuda:1", torch.bfloat16) == torch.bfloat16
    else:
        with pytest.raises(ValueError, match="dtype"):
            autocast_ops.autocast_dtype("cuda:1", torch.bfloat16)
