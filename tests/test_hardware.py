"""amp_lab.hardware: the Tensor Core table, CPU flag parsing, describe() and the verdict."""

import pytest
import torch

from amp_lab import hardware
from amp_lab.hardware import cpu_flags, describe, tensor_core_generation, verdict_for

# Every row the course documents: capability -> (architecture starts with, generation, must-have precisions)
TABLE = [
    ((7, 0), "Volta", 1, {"fp16"}),
    ((7, 2), "Volta", 1, {"fp16", "int8"}),
    ((7, 5), "Turing", 2, {"fp16", "int8"}),
    ((8, 0), "Ampere", 3, {"fp16", "bf16", "tf32"}),
    ((8, 6), "Ampere", 3, {"fp16", "bf16", "tf32"}),
    ((8, 7), "Ampere", 3, {"fp16", "bf16", "tf32"}),
    ((8, 9), "Ada Lovelace", 4, {"fp16", "bf16", "tf32", "fp8"}),
    ((9, 0), "Hopper", 4, {"fp16", "bf16", "tf32", "fp8"}),
    ((10, 0), "Blackwell", 5, {"fp16", "bf16", "fp8", "fp4"}),
    ((10, 3), "Blackwell", 5, {"fp16", "bf16", "fp8", "fp4"}),
    ((12, 0), "Blackwell", 5, {"fp16", "bf16", "fp8", "fp4"}),
]


@pytest.mark.parametrize("cap, arch, gen, precisions", TABLE)
def test_every_row(cap, arch, gen, precisions):
    tc = tensor_core_generation(cap)
    assert tc.capability == cap
    assert tc.architecture.startswith(arch)
    assert tc.generation == gen
    assert tc.has_tensor_cores
    assert precisions <= set(tc.precisions)
    assert arch.split()[0] in tc.summary


def test_fp8_only_from_ada_and_bf16_only_from_ampere():
    assert "fp8" not in tensor_core_generation((8, 6)).precisions
    assert "bf16" not in tensor_core_generation((7, 5)).precisions
    assert "tf32" not in tensor_core_generation((7, 0)).precisions
    assert "fp4" not in tensor_core_generation((9, 0)).precisions


@pytest.mark.parametrize("cap, arch", [((6, 1), "Pascal"), ((6, 0), "Pascal"), ((5, 2), "Maxwell"), ((3, 7), "Kepler")])
def test_pre_volta_has_none_and_says_so(cap, arch):
    tc = tensor_core_generation(cap)
    assert tc.generation is None and not tc.has_tensor_cores and tc.precisions == ()
    assert arch in tc.summary and "no Tensor Cores" in tc.summary


def test_accepts_lists_and_torch_style_tuples():
    assert tensor_core_generation([8, 0]) == tensor_core_generation((8, 0))


@pytest.mark.parametrize(
    "bad",
    [(), (8,), (8, 0, 1), "8.0", "(8, 0)", b"80", 8, 8.0, None, (8.0, 0), (8, "0"), (-1, 0), (8, -1), (0, 0), (True, 0)],
)
def test_malformed_capability_raises_value_error(bad):
    with pytest.raises(ValueError, match="capability"):
        tensor_core_generation(bad)


CPUINFO_SPR = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
CPUINFO_ZEN4 = "model name\t: AMD EPYC 9654\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512vl\n"
CPUINFO_AVX2 = "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"
CPUINFO_ARM = "processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n"


def test_cpu_flags_parsing():
    assert cpu_flags(CPUINFO_SPR) == {"avx512_bf16": True, "amx_bf16": True, "avx512_fp16": True}
    assert cpu_flags(CPUINFO_ZEN4) == {"avx512_bf16": True, "amx_bf16": False, "avx512_fp16": False}
    assert cpu_flags(CPUINFO_AVX2) == {"avx512_bf16": False, "amx_bf16": False, "avx512_fp16": False}
    assert cpu_flags(CPUINFO_ARM) == {"avx512_bf16": False, "amx_bf16": False, "avx512_fp16": False}
    assert cpu_flags("") == {"avx512_bf16": None, "amx_bf16": None, "avx512_fp16": None}


def test_cpu_flags_unknown_off_linux(monkeypatch):
    monkeypatch.setattr(hardware.sys, "platform", "darwin")
    assert cpu_flags() == {"avx512_bf16": None, "amx_bf16": None, "avx512_fp16": None}


def test_cpu_flags_match_proc_cpuinfo():
    # Independent reading of the same file: split every flags line by hand.
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo on this system")
    words = set(text.split())
    assert cpu_flags() == {k: (k in words) for k in ("avx512_bf16", "amx_bf16", "avx512_fp16")}


@pytest.mark.parametrize(
    "flags, expected",
    [
        (cpu_flags(CPUINFO_SPR), "CPU bf16 (AMX-BF16)"),
        (cpu_flags(CPUINFO_ZEN4), "CPU bf16 (AVX512-BF16)"),
        (cpu_flags(CPUINFO_AVX2), "CPU without bf16 hardware: AMP will be slower here, and the race will show it"),
    ],
)
def test_cpu_verdicts(flags, expected):
    verdict, device, dtype = verdict_for(cuda_available=False, tensor_cores=None, flags=flags)
    assert verdict == expected and device == "cpu" and dtype is torch.bfloat16


def test_unknown_cpu_verdict():
    verdict, _, _ = verdict_for(cuda_available=False, tensor_cores=None, flags=cpu_flags(""))
    assert "unknown" in verdict


def test_cuda_verdicts():
    verdict, device, dtype = verdict_for(
        cuda_available=True, tensor_cores=tensor_core_generation((9, 0)), flags=cpu_flags(CPUINFO_AVX2)
    )
    assert verdict.startswith("CUDA fp16 on Tensor Cores") and "Hopper" in verdict
    assert (device, dtype) == ("cuda", torch.float16)
    verdict, _, _ = verdict_for(cuda_available=True, tensor_cores=tensor_core_generation((6, 1)), flags={})
    assert "without Tensor Cores" in verdict
    # Forcing the CPU on a GPU machine races the CPU.
    verdict, device, _ = verdict_for(
        cuda_available=True, tensor_cores=tensor_core_generation((9, 0)), flags=cpu_flags(CPUINFO_ZEN4), device_type="cpu"
    )
    assert device == "cpu" and "AVX512-BF16" in verdict


def test_describe_on_cpu_matches_torch():
    report = describe("cpu")
    assert report.torch_version == torch.__version__
    assert report.cuda_available == torch.cuda.is_available()
    assert report.threads == torch.get_num_threads()
    assert report.tf32_matmul == torch.backends.cuda.matmul.allow_tf32
    assert report.float32_matmul_precision == torch.get_float32_matmul_precision()
    assert report.cpu_flags == cpu_flags()
    assert report.race_device == "cpu" and report.race_dtype is torch.bfloat16
    expected, _, _ = verdict_for(cuda_available=False, tensor_cores=None, flags=cpu_flags())
    assert report.verdict == expected
    text = str(report)
    for label in ("torch", "CPU AVX512-BF16", "CPU AMX-BF16", "CPU AVX512-FP16", "CPU threads", "verdict"):
        assert label in text
    d = report.as_dict()
    assert d["race_dtype"] == "bfloat16" and d["threads"] == torch.get_num_threads()


def test_describe_reflects_thread_count():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert describe("cpu").threads == 1
    finally:
        torch.set_num_threads(before)


def test_setup_banner_prints_device_and_verdict(capsys):
    assert hardware.setup_banner("cpu") is None
    out = capsys.readouterr().out
    assert "device: cpu" in out and "verdict:" in out and torch.__version__ in out


def test_tf32_setting_survives_the_new_api():
    # Once a program sets the new fp32_precision flag, torch refuses reads through the old API;
    # describe() must still report the setting.
    matmul = torch.backends.cuda.matmul
    if not hasattr(matmul, "fp32_precision"):
        pytest.skip("this torch has only the old TF32 API")
    before = matmul.fp32_precision
    try:
        matmul.fp32_precision = "tf32"
        assert hardware.tf32_setting() == (True, "tf32")
        assert describe("cpu").tf32_matmul is True
    finally:
        matmul.fp32_precision = before
