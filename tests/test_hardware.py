"""amp_lab.hardware: the Tensor Core table, CPU features (x86, ARM, macOS), the dtype decision, the verdict."""

import platform
import subprocess

import pytest
import torch

from amp_lab import cpus, gpus, hardware
from amp_lab.cpus import cpu_flags, cpu_has_native, cpu_model
from amp_lab.gpus import tensor_core_generation
from amp_lab.hardware import describe, machine_verdict
from amp_lab.text import REASONS

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


def short_verdict(**facts):
    """(verdict text, race device, race dtype) of machine_verdict for ``facts``."""
    v = machine_verdict(**facts)
    return v.text, v.device, v.dtype


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


@pytest.mark.parametrize(
    "cap, arch", [((6, 1), "Pascal"), ((6, 0), "Pascal"), ((5, 2), "Maxwell"), ((3, 7), "Kepler")]
)
def test_pre_volta_has_none_and_says_so(cap, arch):
    tc = tensor_core_generation(cap)
    assert tc.generation is None and not tc.has_tensor_cores and tc.precisions == ()
    assert arch in tc.summary and "no Tensor Cores" in tc.summary


def test_accepts_lists_and_torch_style_tuples():
    assert tensor_core_generation([8, 0]) == tensor_core_generation((8, 0))


@pytest.mark.parametrize(
    "bad",
    [
        (),
        (8,),
        (8, 0, 1),
        "8.0",
        "(8, 0)",
        b"80",
        8,
        8.0,
        None,
        (8.0, 0),
        (8, "0"),
        (-1, 0),
        (8, -1),
        (0, 0),
        (True, 0),
    ],
)
def test_malformed_capability_raises_value_error(bad):
    with pytest.raises(ValueError, match="capability"):
        tensor_core_generation(bad)


# ---------------------------------------------------------------------------------------------
# Real machines, as their kernels (and macOS) describe them.  Excerpts of /proc/cpuinfo: one
# processor block each (two for the ARM servers), with the full flags/Features line.
# ---------------------------------------------------------------------------------------------

# AWS m7i: Intel Xeon Sapphire Rapids (AMX, AVX512-BF16, AVX512-FP16).
CPUINFO_SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8488C
stepping\t: 8
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht \
syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni \
pclmulqdq ssse3 fma cx16 pdcm pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand \
hypervisor lahf_lm abm 3dnowprefetch cpuid_fault invpcid_single ssbd ibrs ibpb stibp ibrs_enhanced fsgsbase \
tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd \
sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 wbnoinvd ida arat avx512vbmi umip pku \
ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq rdpid cldemote \
movdiri movdir64b md_clear serialize amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities
bogomips\t: 4800.00
"""

# AWS m7a: AMD EPYC Zen 4 (AVX512-BF16, no AMX, no AVX512-FP16).
CPUINFO_ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht \
syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid aperfmperf \
tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand \
hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch topoext perfctr_core invpcid_single \
ssbd ibrs ibpb stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 invpcid avx512f avx512dq rdseed adx smap avx512ifma \
clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx512_bf16 clzero xsaveerptr \
rdpru wbnoinvd arat avx512vbmi pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg \
avx512_vpopcntdq rdpid fsrm
"""

# AWS m6i: Intel Xeon Ice Lake: AVX-512, but no bf16 instructions.
CPUINFO_ICE_LAKE = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht \
syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni \
pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand \
hypervisor lahf_lm abm 3dnowprefetch invpcid_single ssbd ibrs ibpb stibp ibrs_enhanced fsgsbase tsc_adjust bmi1 \
avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw \
avx512vl xsaveopt xsavec xgetbv1 xsaves wbnoinvd ida arat avx512vbmi pku ospke avx512_vbmi2 gfni vaes vpclmulqdq \
avx512_vnni avx512_bitalg tme avx512_vpopcntdq rdpid md_clear flush_l1d arch_capabilities
"""

# The machine the course was developed on: AMD EPYC with AVX2 (and F16C conversions) only.
CPUINFO_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht \
syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid extd_apicid \
tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx \
f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext vmmcall \
fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 \
xsaves clzero xsaveerptr arat umip vaes vpclmulqdq rdpid fsrm
"""


def _arm_cpuinfo(
    features: str, variant: str, part: str, bogomips: str = "2100.00", implementer: str = "0x41"
) -> str:
    block = (
        "processor\t: {n}\nBogoMIPS\t: {bogomips}\nFeatures\t: {features}\nCPU implementer\t: {implementer}\n"
        "CPU architecture: 8\nCPU variant\t: {variant}\nCPU part\t: {part}\nCPU revision\t: 1\n"
    )
    return "\n".join(
        block.format(
            n=n, bogomips=bogomips, features=features, implementer=implementer, variant=variant, part=part
        )
        for n in range(2)
    )


# AWS c7g: Graviton 3, Neoverse V1 (bf16, svebf16, i8mm).
CPUINFO_GRAVITON3 = _arm_cpuinfo(
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 "
    "sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 "
    "dgh rng",
    variant="0x1", part="0xd40",
)  # fmt: skip
# AWS c8g: Graviton 4, Neoverse V2 (SVE2 with bf16).
CPUINFO_GRAVITON4 = _arm_cpuinfo(
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 "
    "asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes svepmull svebitperm "
    "svesha3 flagm2 frint svei8mm svebf16 i8mm bf16 dgh rng bti",
    variant="0x0", part="0xd4f", bogomips="2000.00",
)  # fmt: skip
# AWS c6g: Graviton 2, Neoverse N1 (FP16 arithmetic, no bf16).
CPUINFO_GRAVITON2 = _arm_cpuinfo(
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs",
    variant="0x3", part="0xd0c", bogomips="243.75",
)  # fmt: skip
# Ampere Altra (Oracle A1, Azure Dpsv5): Neoverse N1 cores, no bf16.
CPUINFO_ALTRA = _arm_cpuinfo(
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs",
    variant="0x3", part="0xd0c", bogomips="50.00",
)  # fmt: skip

# `sysctl machdep.cpu.brand_string hw.optional` on macOS 14.
_SYSCTL_APPLE = """machdep.cpu.brand_string: Apple {chip}
hw.optional.arm.FEAT_FlagM: 1
hw.optional.arm.FEAT_FlagM2: 1
hw.optional.arm.FEAT_FHM: 1
hw.optional.arm.FEAT_DotProd: 1
hw.optional.arm.FEAT_SHA3: 1
hw.optional.arm.FEAT_RDM: 1
hw.optional.arm.FEAT_LSE: 1
hw.optional.arm.FEAT_SHA256: 1
hw.optional.arm.FEAT_SHA512: 1
hw.optional.arm.FEAT_SHA1: 1
hw.optional.arm.FEAT_AES: 1
hw.optional.arm.FEAT_PMULL: 1
hw.optional.arm.FEAT_SPECRES: 0
hw.optional.arm.FEAT_SB: 1
hw.optional.arm.FEAT_FRINTTS: 1
hw.optional.arm.FEAT_LRCPC: 1
hw.optional.arm.FEAT_LRCPC2: 1
hw.optional.arm.FEAT_FCMA: 1
hw.optional.arm.FEAT_JSCVT: 1
hw.optional.arm.FEAT_PAuth: 1
hw.optional.arm.FEAT_PAuth2: {new}
hw.optional.arm.FEAT_FPAC: {new}
hw.optional.arm.FEAT_DPB: 1
hw.optional.arm.FEAT_DPB2: 1
hw.optional.arm.FEAT_BF16: {new}
hw.optional.arm.FEAT_I8MM: {new}
hw.optional.arm.FEAT_ECV: 1
hw.optional.arm.FEAT_LSE2: 1
hw.optional.arm.FEAT_CSV2: 1
hw.optional.arm.FEAT_CSV3: 1
hw.optional.arm.FEAT_DIT: 1
hw.optional.arm.FEAT_FP16: 1
hw.optional.arm.FEAT_SSBS: 1
hw.optional.arm.FEAT_BTI: {new}
hw.optional.arm.FP_SyncExceptions: 1
hw.optional.floatingpoint: 1
hw.optional.neon: 1
hw.optional.neon_hpfp: 1
hw.optional.neon_fp16: 1
hw.optional.armv8_1_atomics: 1
hw.optional.armv8_2_fhm: 1
hw.optional.armv8_2_sha512: 1
hw.optional.armv8_2_sha3: 1
hw.optional.armv8_3_compnum: 1
hw.optional.watchpoint: 4
hw.optional.breakpoint: 6
hw.optional.armv8_crc32: 1
hw.optional.armv8_gpi: 1
hw.optional.adler32_vec: 1
hw.optional.ucnormal_mem: 1
hw.optional.arm64: 1
"""
SYSCTL_M1 = _SYSCTL_APPLE.format(chip="M1", new=0)
SYSCTL_M2 = _SYSCTL_APPLE.format(chip="M2", new=1)
SYSCTL_M3 = _SYSCTL_APPLE.format(chip="M3 Pro", new=1)
# An Intel Mac: macOS lists AVX-512 subsets but no bf16/fp16 instruction sets at all.
SYSCTL_INTEL_MAC = """machdep.cpu.brand_string: Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz
hw.optional.floatingpoint: 1
hw.optional.mmx: 1
hw.optional.sse: 1
hw.optional.sse2: 1
hw.optional.sse3: 1
hw.optional.supplementalsse3: 1
hw.optional.sse4_1: 1
hw.optional.sse4_2: 1
hw.optional.x86_64: 1
hw.optional.aes: 1
hw.optional.avx1_0: 1
hw.optional.rdrand: 1
hw.optional.f16c: 1
hw.optional.enfstrg: 1
hw.optional.fma: 1
hw.optional.avx2_0: 1
hw.optional.bmi1: 1
hw.optional.bmi2: 1
hw.optional.rtm: 0
hw.optional.hle: 0
hw.optional.adx: 1
hw.optional.mpx: 0
hw.optional.sgx: 0
hw.optional.avx512f: 0
hw.optional.avx512cd: 0
hw.optional.avx512dq: 0
hw.optional.avx512bw: 0
hw.optional.avx512vl: 0
hw.optional.avx512ifma: 0
hw.optional.avx512vbmi: 0
"""

X86 = ("avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16")
ARM = ("arm_bf16", "arm_sve_bf16")


def machine_flags(x86=None, arm=None):
    """The expected cpu_flags(): the named instruction sets True, the rest of that architecture
    False, the other architecture None (not applicable)."""
    flags = dict.fromkeys(X86 + ARM)
    if x86 is not None:
        flags.update({k: k in x86 for k in X86})
    if arm is not None:
        flags.update({k: k in arm for k in ARM})
    return flags


# name: (cpuinfo or sysctl text, expected flags, bf16 native, fp16 native, cpu model)
MACHINES = {
    "Sapphire Rapids": (dict(cpuinfo=CPUINFO_SAPPHIRE_RAPIDS), machine_flags(x86=X86[:3]), True, True,
                        "Intel(R) Xeon(R) Platinum 8488C"),
    "Zen 4": (dict(cpuinfo=CPUINFO_ZEN4), machine_flags(x86=("avx512_bf16",)), True, False, "AMD EPYC 9R14"),
    "Ice Lake": (dict(cpuinfo=CPUINFO_ICE_LAKE), machine_flags(x86=()), False, False,
                 "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"),
    "AVX2 only": (dict(cpuinfo=CPUINFO_AVX2), machine_flags(x86=()), False, False, "AMD EPYC"),
    "Graviton 3": (dict(cpuinfo=CPUINFO_GRAVITON3), machine_flags(arm=ARM), True, None, "ARM Neoverse-V1"),
    "Graviton 4": (dict(cpuinfo=CPUINFO_GRAVITON4), machine_flags(arm=ARM), True, None, "ARM Neoverse-V2"),
    "Graviton 2": (dict(cpuinfo=CPUINFO_GRAVITON2), machine_flags(arm=()), False, None, "ARM Neoverse-N1"),
    "Ampere Altra": (dict(cpuinfo=CPUINFO_ALTRA), machine_flags(arm=()), False, None, "ARM Neoverse-N1"),
    # macOS reports FEAT_BF16 but nothing about SVE: SVE-BF16 stays unknown.
    "Apple M1": (dict(sysctl=SYSCTL_M1), {**machine_flags(arm=()), "arm_sve_bf16": None}, False, None, "Apple M1"),
    "Apple M2": (dict(sysctl=SYSCTL_M2), {**machine_flags(arm=("arm_bf16",)), "arm_sve_bf16": None}, True, None,
                 "Apple M2"),
    "Apple M3 Pro": (dict(sysctl=SYSCTL_M3), {**machine_flags(arm=("arm_bf16",)), "arm_sve_bf16": None}, True, None,
                     "Apple M3 Pro"),
    "Intel Mac": (dict(sysctl=SYSCTL_INTEL_MAC), machine_flags(), None, None,
                  "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz"),
}  # fmt: skip


@pytest.mark.parametrize("name", MACHINES)
def test_cpu_flags_of_real_machines(name):
    text, expected, _, _, _ = MACHINES[name]
    assert cpu_flags(**text) == expected


@pytest.mark.parametrize("name", MACHINES)
def test_cpu_flags_agree_with_a_plain_reading_of_the_text(name):
    # Independent reading: the features named by the text's own words, however it lays them out.
    text, _, _, _, _ = MACHINES[name]
    flags = cpu_flags(**text)
    if "cpuinfo" in text:
        words = set(text["cpuinfo"].replace(":", " ").split())
        tokens = {f.key: f.token for f in cpus.CPU_FEATURES}
        for key, value in flags.items():
            if value is not None:
                assert value == (tokens[key] in words), key
    else:
        bf16 = "hw.optional.arm.FEAT_BF16: 1" in text["sysctl"]
        assert flags["arm_bf16"] in ((bf16,) if "FEAT_BF16" in text["sysctl"] else (None,))


@pytest.mark.parametrize("name", MACHINES)
def test_cpu_has_native_on_real_machines(name):
    text, _, bf16, fp16, _ = MACHINES[name]
    flags = cpu_flags(**text)
    assert cpu_has_native(torch.bfloat16, flags) is bf16
    assert cpu_has_native(torch.float16, flags) is fp16


@pytest.mark.parametrize("name", MACHINES)
def test_cpu_model_of_real_machines(name):
    text, _, _, _, model = MACHINES[name]
    assert cpu_model(**text) == model


def test_the_same_neoverse_n1_whoever_sells_it():
    assert cpu_flags(CPUINFO_GRAVITON2) == cpu_flags(CPUINFO_ALTRA)


def test_i8mm_and_fp16_arithmetic_do_not_count_as_bf16_or_fp16_matmuls():
    # Neoverse N1 has FP16 arithmetic (fphp/asimdhp) and a CPU may have i8mm without bf16: neither
    # makes a bf16 matmul native, and fp16 matmuls on ARM stay "unknown" (see cpus.CPU_FEATURES).
    text = CPUINFO_GRAVITON2.replace("asimddp ssbs", "asimddp ssbs i8mm")
    flags = cpu_flags(text)
    assert cpu_has_native(torch.bfloat16, flags) is False
    assert cpu_has_native(torch.float16, flags) is None


def test_unknown_without_any_text():
    assert cpu_flags("") == dict.fromkeys(X86 + ARM)
    assert cpu_has_native(torch.bfloat16, cpu_flags("")) is None
    # Reports made before ARM support (only the x86 keys) still read correctly.
    assert (
        cpu_has_native(torch.bfloat16, {"avx512_bf16": False, "amx_bf16": False, "avx512_fp16": False})
        is False
    )
    assert cpu_has_native(torch.bfloat16, {"amx_bf16": True}) is True


def test_cpu_native_labels():
    assert cpus.cpu_native_labels(torch.bfloat16, cpu_flags(CPUINFO_SAPPHIRE_RAPIDS)) == (
        "AVX512-BF16",
        "AMX-BF16",
    )
    assert cpus.cpu_native_labels(torch.bfloat16, cpu_flags(CPUINFO_AVX2)) == ("AVX512-BF16", "AMX-BF16")
    assert cpus.cpu_native_labels(torch.bfloat16, cpu_flags(CPUINFO_GRAVITON2)) == (
        "ARM BF16",
        "ARM SVE-BF16",
    )
    assert cpus.cpu_native_labels(torch.bfloat16, cpu_flags(sysctl=SYSCTL_M2)) == ("ARM BF16",)
    assert cpus.cpu_native_labels(torch.float16, cpu_flags(CPUINFO_GRAVITON3)) == ()


def test_this_machine_is_read_from_its_own_files(monkeypatch):
    # On a Mac, cpu_flags() asks sysctl; fed through read_sysctl, the M2's text gives the M2's flags.
    monkeypatch.setattr(cpus.sys, "platform", "darwin")
    monkeypatch.setattr(cpus, "read_sysctl", lambda: SYSCTL_M2)
    assert cpus.read_cpuinfo() is None
    assert cpu_flags() == cpu_flags(sysctl=SYSCTL_M2)
    assert cpu_model() == "Apple M2"
    monkeypatch.setattr(cpus, "read_sysctl", lambda: None)
    assert cpu_flags() == dict.fromkeys(X86 + ARM)


def test_read_sysctl_runs_sysctl_only_on_macos(monkeypatch):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=SYSCTL_M1, stderr="")

    monkeypatch.setattr(cpus.subprocess, "run", fake_run)
    monkeypatch.setattr(cpus.sys, "platform", "linux")
    assert cpus.read_sysctl() is None and calls == []
    monkeypatch.setattr(cpus.sys, "platform", "darwin")
    assert cpus.read_sysctl() == SYSCTL_M1
    assert calls[0][1:] == ["machdep.cpu.brand_string", "hw.optional"]

    def missing(cmd, **kwargs):
        raise FileNotFoundError(cmd[0])

    monkeypatch.setattr(cpus.subprocess, "run", missing)
    assert cpus.read_sysctl() is None


def test_cpu_flags_match_proc_cpuinfo():
    # Independent reading of the same file: split every flags/Features line by hand.
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo on this system")
    x86 = " ".join(line.split(":", 1)[1] for line in text.splitlines() if line.startswith("flags")).split()
    arm = " ".join(line.split(":", 1)[1] for line in text.splitlines() if line.startswith("Features")).split()
    expected = {}
    for f in cpus.CPU_FEATURES:
        words = x86 if f.arch == "x86" else arm
        expected[f.key] = (f.token in words) if words else None
    assert cpu_flags() == expected


# ---------------------------------------------------------------------------------------------
# The one dtype decision
# ---------------------------------------------------------------------------------------------

# Real GPUs: (name, compute capability, recommended dtype)
GPUS = [
    ("GTX 1080", (6, 1), torch.float16),
    ("P100", (6, 0), torch.float16),
    ("V100", (7, 0), torch.float16),
    ("T4", (7, 5), torch.float16),
    ("A100", (8, 0), torch.bfloat16),
    ("A10", (8, 6), torch.bfloat16),
    ("RTX 3090", (8, 6), torch.bfloat16),
    ("L4", (8, 9), torch.bfloat16),
    ("RTX 4090", (8, 9), torch.bfloat16),
    ("H100", (9, 0), torch.bfloat16),
    ("H200", (9, 0), torch.bfloat16),
    ("B200", (10, 0), torch.bfloat16),
]


@pytest.mark.parametrize("name, cap, dtype", GPUS, ids=[g[0] for g in GPUS])
def test_dtype_decision_on_real_gpus(name, cap, dtype):
    assert gpus.amp_dtype_for("cuda", cap) is dtype
    # Independent oracle: bfloat16 exactly where the Tensor Core table says the cores multiply it.
    assert (dtype is torch.bfloat16) == ("bf16" in tensor_core_generation(cap).precisions)
    text, device, race_dtype = short_verdict(
        cuda_available=True, tensor_cores=tensor_core_generation(cap), flags={}
    )
    assert (device, race_dtype) == ("cuda", dtype)
    assert hardware.report_for("cuda", capability=cap, gpu_name=name).race_dtype is dtype


def test_dtype_decision_off_cuda():
    assert gpus.amp_dtype_for("cpu") is torch.bfloat16
    assert gpus.amp_dtype_for("mps") is torch.float16
    assert gpus.amp_dtype_for("cuda") is torch.float16  # capability unknown: float16 runs everywhere
    # Each agrees with what autocast itself does by default on that device type.
    assert torch.get_autocast_dtype("cpu") is gpus.amp_dtype_for("cpu")
    assert torch.get_autocast_dtype("mps") is gpus.amp_dtype_for("mps")


@pytest.mark.parametrize("bad", ["tpu", "gpu", "", None])
def test_dtype_decision_names_a_bad_device_type(bad):
    with pytest.raises(ValueError, match="device_type"):
        gpus.amp_dtype_for(bad)


def test_dtype_decision_names_a_bad_capability():
    with pytest.raises(ValueError, match="capability"):
        gpus.amp_dtype_for("cuda", "8.0")


def _facts(name):
    """machine_verdict's arguments for a named CPU machine or GPU."""
    if name in MACHINES:
        text = MACHINES[name][0]
        system = "Darwin" if "sysctl" in text else "Linux"
        return dict(cuda_available=False, tensor_cores=None, flags=cpu_flags(**text), system=system)
    cap = dict((g[0], g[1]) for g in GPUS)[name]
    return dict(cuda_available=True, tensor_cores=tensor_core_generation(cap), flags={})


def _verdict(name):
    return hardware.machine_verdict(**_facts(name))


# name: (race dtype, GradScaler, expect AMP faster, outcome code, facts the sentences are filled from)
NO_X86 = {"labels": "AVX512-BF16 and AMX-BF16", "lacking": "AVX512-BF16 or AMX-BF16"}
NO_ARM = {"lacking": "ARM BF16 or ARM SVE-BF16"}
ARM_BF16 = {"labels": "ARM BF16 and ARM SVE-BF16"}
VERDICTS = {
    "AVX2 only": (torch.bfloat16, False, False, "verdict.cpu_emulated", NO_X86),
    "Ice Lake": (torch.bfloat16, False, False, "verdict.cpu_emulated", NO_X86),
    "Zen 4": (torch.bfloat16, False, True, "verdict.cpu_bf16", {"labels": "AVX512-BF16"}),
    "Sapphire Rapids": (
        torch.bfloat16,
        False,
        True,
        "verdict.cpu_bf16",
        {"labels": "AVX512-BF16 and AMX-BF16"},
    ),
    "Graviton 3": (torch.bfloat16, False, True, "verdict.cpu_bf16", ARM_BF16),
    "Graviton 4": (torch.bfloat16, False, True, "verdict.cpu_bf16", ARM_BF16),
    "Graviton 2": (torch.bfloat16, False, False, "verdict.cpu_emulated", NO_ARM),
    "Ampere Altra": (torch.bfloat16, False, False, "verdict.cpu_emulated", NO_ARM),
    "Apple M1": (torch.bfloat16, False, False, "verdict.cpu_emulated", {"lacking": "ARM BF16"}),
    "Apple M2": (torch.bfloat16, False, False, "verdict.apple_cpu", {"labels": "ARM BF16"}),
    "Intel Mac": (torch.bfloat16, False, None, "verdict.cpu_unknown", {}),
    "GTX 1080": (torch.float16, True, False, "verdict.cuda_no_tensor_cores", {"arch": "Pascal"}),
    "P100": (torch.float16, True, None, "verdict.cuda_no_tensor_cores_double_fp16", {"arch": "Pascal"}),
    "V100": (torch.float16, True, True, "verdict.cuda_fp16", {"arch": "Volta"}),
    "T4": (
        torch.float16,
        True,
        True,
        "verdict.cuda_fp16",
        {"arch": "Turing", "gpu": "CUDA Turing GPU (sm_75)"},
    ),
    "A100": (torch.bfloat16, False, True, "verdict.cuda_bf16", {"arch": "Ampere"}),
    "L4": (torch.bfloat16, False, True, "verdict.cuda_bf16", {"arch": "Ada Lovelace"}),
    "H100": (
        torch.bfloat16,
        False,
        True,
        "verdict.cuda_bf16",
        {"arch": "Hopper", "gpu": "CUDA Hopper GPU (sm_90)"},
    ),
    "B200": (torch.bfloat16, False, True, "verdict.cuda_bf16", {"arch": "Blackwell"}),
}


@pytest.mark.parametrize("name", VERDICTS)
def test_verdicts(name):
    dtype, scaler, expect, outcome, facts = VERDICTS[name]
    v = _verdict(name)
    assert (v.dtype, v.use_scaler, v.expect_speedup, v.outcome) == (dtype, scaler, expect, outcome)
    assert {k: v.facts.get(k) for k in facts} == facts
    assert v.reason_codes and all(code in REASONS for code in (v.outcome, *v.reason_codes))
    # A GradScaler exactly when the dtype's exponent range is narrower than FP32's: its smallest
    # normal number is larger (torch.finfo is the oracle).
    assert v.use_scaler == (torch.finfo(v.dtype).tiny > torch.finfo(torch.float32).tiny)
    assert "why.fp16_scaler" in v.reason_codes or not v.use_scaler


def test_every_verdict_sentence_is_a_prediction_not_a_result():
    # A verdict comes from hardware facts before anything is measured: each of the table's verdict
    # sentences expects, and leaves the outcome to the race; none reports one.
    verdicts = [text for code, text in REASONS.items() if code.startswith("verdict.")]
    assert len(verdicts) == 10
    for text in verdicts:
        assert "the race measures it" in text or "for the race to measure" in text
        assert not any(
            claim in text for claim in ("will be", "AMP wins", "AMP loses", "AMP is slower", "shows it")
        )


def test_an_apple_cpu_on_linux_reads_as_an_arm_cpu():
    # Asahi Linux on an M2 reports FEAT_BF16 in /proc/cpuinfo: without macOS's Accelerate FP32 path
    # the ordinary ARM prediction applies.
    flags = cpu_flags(sysctl=SYSCTL_M2)
    on_linux = hardware.machine_verdict(cuda_available=False, tensor_cores=None, flags=flags, system="Linux")
    assert on_linux.expect_speedup is True


def test_mps_verdict():
    v = hardware.machine_verdict(
        cuda_available=False,
        tensor_cores=None,
        flags=cpu_flags(sysctl=SYSCTL_M2),
        device_type="mps",
        system="Darwin",
    )
    assert (v.device, v.dtype, v.use_scaler) == ("mps", torch.float16, True)
    assert v.outcome == "verdict.mps"


def test_forcing_the_cpu_on_a_gpu_machine_races_the_cpu():
    verdict, device, dtype = short_verdict(
        cuda_available=True,
        tensor_cores=tensor_core_generation((9, 0)),
        flags=cpu_flags(CPUINFO_ZEN4),
        device_type="cpu",
    )
    assert (device, dtype) == ("cpu", torch.bfloat16)


def test_unknown_gpu_capability():
    v = hardware.machine_verdict(cuda_available=True, tensor_cores=None, flags={})
    assert (v.device, v.dtype, v.use_scaler, v.expect_speedup) == ("cuda", torch.float16, True, None)


def test_verdict_names_a_bad_device_type():
    with pytest.raises(ValueError, match="device_type"):
        short_verdict(cuda_available=False, tensor_cores=None, flags={}, device_type="tpu")


def test_describe_on_cpu_matches_torch():
    report = describe("cpu")
    assert report.torch_version == torch.__version__
    assert report.cuda_available == torch.cuda.is_available()
    assert report.threads == torch.get_num_threads()
    assert report.tf32_matmul == torch.backends.cuda.matmul.allow_tf32
    assert report.float32_matmul_precision == torch.get_float32_matmul_precision()
    assert report.cpu_flags == cpu_flags()
    assert report.race_device == "cpu" and report.race_dtype is torch.bfloat16
    from amp_lab.device import amp_dtype

    assert report.race_dtype is amp_dtype("cpu")
    v = hardware.machine_verdict(
        cuda_available=False, tensor_cores=None, flags=cpu_flags(), system=platform.system()
    )
    assert (report.verdict, report.use_scaler, report.expect_speedup, report.reasons) == (
        v.text,
        v.use_scaler,
        v.expect_speedup,
        v.reasons,
    )
    text = str(report)
    labels = [f"CPU {cpus.CPU_FLAGS[k]}" for k, v in cpu_flags().items() if v is not None]
    for label in ["torch", "CPU threads", "verdict", *labels]:
        assert label in text
    assert report.explain().split("\nwhy:")[0].split() == f"verdict: {report.verdict}".split()  # wrapped
    for r in report.reasons:
        assert r in report.explain()


def test_report_lists_only_the_instruction_sets_of_its_architecture():
    arm = hardware.report_for("cpu", flags=cpu_flags(CPUINFO_GRAVITON3), cpu="ARM Neoverse-V1")
    labels = [k for k, _ in arm.lines()]
    assert "CPU ARM BF16" in labels and "CPU AVX512-BF16" not in labels
    unknown = hardware.report_for("cpu", flags=cpu_flags(""))
    assert ("CPU bf16/fp16 instructions", "unknown") in unknown.lines()


def test_report_for_another_machine_recomputes_the_verdict():
    here = describe("cpu")
    h100 = hardware.report_for("cuda", capability=(9, 0), gpu_name="NVIDIA H100", base=here)
    assert (h100.race_device, h100.race_dtype, h100.use_scaler) == ("cuda", torch.bfloat16, False)
    assert h100.bf16_supported is True and h100.tensor_cores.architecture == "Hopper"
    assert "GPU" in dict(h100.lines()) and "NVIDIA H100" in dict(h100.lines())["GPU"]
    t4 = hardware.report_for("cuda", capability=(7, 5), base=here)
    assert (t4.race_dtype, t4.use_scaler, t4.bf16_supported) == (torch.float16, True, False)
    g3 = hardware.report_for("cpu", flags=cpu_flags(CPUINFO_GRAVITON3), base=here)
    assert g3.expect_speedup is True and "ARM BF16" in g3.verdict
    m2 = hardware.report_for("cpu", flags=cpu_flags(sysctl=SYSCTL_M2), system="Darwin", base=here)
    assert m2.expect_speedup is False and m2.platform.startswith("Darwin")
    with pytest.raises(ValueError, match="device_type"):
        hardware.report_for("tpu", base=here)


def test_describe_and_banner_on_mps(monkeypatch, capsys):
    # No Mac here: pretend MPS is available, as torch.backends.mps reports it on one.
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(cpus.sys, "platform", "darwin")
    monkeypatch.setattr(cpus, "read_sysctl", lambda: SYSCTL_M2)
    report = describe("mps")
    assert (report.race_device, report.race_dtype, report.use_scaler) == ("mps", torch.float16, True)
    assert report.mps_available and report.gpu_name == "Apple M2 GPU"
    assert ("MPS (Apple GPU)", "yes") in report.lines()
    hardware.setup_banner("mps")
    out = capsys.readouterr().out
    assert "device: mps (Apple M2 GPU)" in out and "verdict: Apple GPU (MPS): float16" in out


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


# --------------------------------------------------------------------------------------------
# What the environment lets torch use: a bf16 CPU told to stay below AVX512-BF16 emulates bf16
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "capped"),
    [
        ({}, set()),
        ({"ONEDNN_MAX_CPU_ISA": "SSE41"}, {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16"}),
        ({"ONEDNN_MAX_CPU_ISA": "avx512_core_vnni"}, {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16"}),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, {"amx_bf16", "avx512_fp16", "amx_fp16"}),
        ({"ONEDNN_MAX_CPU_ISA": "AVX10_1_512_AMX"}, {"amx_fp16"}),
        ({"DNNL_MAX_CPU_ISA": "AVX2"}, {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16"}),
        ({"ONEDNN_MAX_CPU_ISA": "ALL"}, set()),
        ({"ONEDNN_MAX_CPU_ISA": "NOT_AN_ISA"}, set()),
        ({"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}, {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16"}),
        ({"MKL_ENABLE_INSTRUCTIONS": "AVX512_E3"}, {"amx_bf16", "avx512_fp16", "amx_fp16"}),
        ({"MKL_CBWR": "COMPATIBLE"}, {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16"}),
        ({"MKL_CBWR": "AUTO"}, set()),
        # The course's simulated "other kernels" machine (Makefile KERNELS_ENV) caps every one of them.
        (
            {
                "ATEN_CPU_CAPABILITY": "default",
                "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                "MKL_CBWR": "COMPATIBLE",
                "ONEDNN_MAX_CPU_ISA": "SSE41",
            },
            {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16"},
        ),
    ],
)
def test_cpu_isa_limits(env, capped):
    limits = cpus.cpu_isa_limits(env)
    assert set(limits) == capped
    for why in limits.values():
        var, _, value = why.partition("=")
        assert env[var] == value


def test_a_capped_bf16_cpu_is_judged_emulated():
    spr = cpu_flags(CPUINFO_SAPPHIRE_RAPIDS)
    assert cpus.cpu_has_native(torch.bfloat16, spr) is True
    capped = cpus.usable_cpu_flags(spr, {"ONEDNN_MAX_CPU_ISA": "SSE41"})
    assert cpus.cpu_has_native(torch.bfloat16, capped) is False
    # Only what the CPU has is turned off; what it lacks or does not know stays as it was.
    half = cpus.usable_cpu_flags(spr, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"})
    assert half["avx512_bf16"] is True and half["amx_bf16"] is False
    assert cpus.cpu_has_native(torch.bfloat16, half) is True
    graviton = cpu_flags(CPUINFO_GRAVITON3)
    assert cpus.usable_cpu_flags(graviton, {"ONEDNN_MAX_CPU_ISA": "SSE41"}) == graviton


def test_this_machine_reads_the_environment(monkeypatch):
    monkeypatch.setattr(cpus, "cpu_flags", lambda *a, **k: cpu_flags(CPUINFO_ZEN4))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS", raising=False)
    monkeypatch.delenv("MKL_CBWR", raising=False)
    assert cpus.cpu_has_native(torch.bfloat16) is True
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert cpus.cpu_has_native(torch.bfloat16) is False


# ----------------------------------------------------------------------------------------------
# Every bad input to the learner-facing names gets a clear error naming the argument
# ----------------------------------------------------------------------------------------------

import numpy as np  # noqa: E402


@pytest.mark.parametrize(
    "call, exc, match",
    [
        # A set has no order: {7, 5} used to come back as a made-up sm_57.
        (lambda: gpus.tensor_core_generation({7, 5}), TypeError, "capability must be a .major, minor. tuple"),
        (lambda: gpus.tensor_core_generation(frozenset({8, 0})), TypeError, "capability must be"),
        (lambda: gpus.tensor_core_generation(np.array([8, 0])), TypeError, "capability must be"),
        (lambda: gpus.tensor_core_generation((8.0, 0)), TypeError, "capability must be"),
        (lambda: gpus.bf16_hardware({8, 0}), TypeError, "capability must be"),
        (lambda: short_verdict(cuda_available=False, tensor_cores=None, flags={"avx512_bf16": "yes"}), TypeError,
         r"flags\['avx512_bf16'\] must be True or False"),
        (lambda: short_verdict(cuda_available="no", tensor_cores=None, flags={}), TypeError,
         "cuda_available must be True or False"),
        (lambda: short_verdict(cuda_available=1, tensor_cores=None, flags={}), TypeError, "cuda_available"),
        (lambda: short_verdict(cuda_available=False, tensor_cores=None, flags=None), TypeError, "flags must be a dict"),
        (lambda: short_verdict(cuda_available=True, tensor_cores=(8, 0), flags={}), TypeError,
         "tensor_cores must be a TensorCoreGeneration"),
        (lambda: short_verdict(cuda_available=False, tensor_cores=None, flags={}, system=5), TypeError, "system must be"),
        (lambda: short_verdict(cuda_available=False, tensor_cores=None, flags={}, device_type=0), TypeError,
         "device_type must be"),
        (lambda: hardware.machine_verdict(cuda_available=None, tensor_cores=None, flags={}), TypeError,
         "cuda_available"),
        (lambda: gpus.amp_dtype_for(("cuda",)), TypeError, "device_type must be"),
        (lambda: hardware.report_for("cuda", capability={8, 0}), TypeError, "capability must be"),
    ],
)  # fmt: skip
def test_hardware_facts_of_the_wrong_type_are_refused_by_name(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_numpy_facts_are_accepted():
    tc = gpus.tensor_core_generation((np.int64(8), np.int32(0)))
    assert tc.capability == (8, 0) and type(tc.capability[0]) is int
    text, device, dtype = short_verdict(cuda_available=np.bool_(False), tensor_cores=None,
                                      flags={"avx512_bf16": np.bool_(True)})  # fmt: skip
    assert (device, dtype) == ("cpu", torch.bfloat16) and "AVX512-BF16" in text
    with pytest.raises(TypeError, match="cuda_available must be True or False"):
        short_verdict(cuda_available=np.int64(1), tensor_cores=None, flags={})  # a number is not a bool
