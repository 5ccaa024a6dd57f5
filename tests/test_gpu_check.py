"""scripts/gpu_check.py on the CPU: sections, files, exit statuses, the plan, the dtype and arch choices.

(Two older checks of the script live in tests/test_race.py.)
"""

import importlib.util
import json
import re
import time
from pathlib import Path

import pytest
import torch

from amp_lab import gpus, race, references, sweeps, timing

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not in sys.modules, as tests/test_race.py loads it too
    return module


@pytest.fixture(autouse=True)
def freed(gpu_check, monkeypatch):
    """The devices ``_free_memory`` was asked to clean up after a section, in order.  On the CPU it only
    runs ``gc.collect()``, which costs about a second in a test process that has run thousands of tests
    (six per run): recorded here instead, and checked to be called after every section."""
    calls = []
    monkeypatch.setattr(gpu_check, "_free_memory", calls.append)
    return calls


def _report(tmp_path) -> dict:
    (path,) = tmp_path.glob("*.json")
    return json.loads(path.read_text())


STEM = re.compile(r"^gpu-check_cpu_\d{8}-\d{6}_quick$")


def test_cpu_run_writes_every_section_with_status_ok(gpu_check, tmp_path, capsys, freed):
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    assert [str(d) for d in freed] == ["cpu"] * len(gpu_check.SECTIONS)  # after every section
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2, names  # no temporary file left behind
    stems = {name.rsplit(".", 1)[0] for name in names}
    assert len(stems) == 1 and STEM.match(stems.pop())
    report = _report(tmp_path)
    assert report["schema"] == references.RESULTS_SCHEMA and report["complete"] is True
    # every section ok, but the FP8 races: skipped by design on the CPU test device, with the reason
    fp8_sections = ("race_fp8_matmul", "race_fp8_rowwise", "fp8_blockwise")
    assert {k: v["status"] for k, v in report["sections"].items()} == {
        **dict.fromkeys(gpu_check.SECTIONS, "ok"), **dict.fromkeys(fp8_sections, "skipped")}
    fp8 = report["sections"]["race_fp8_matmul"]
    assert fp8["reason"] == gpus.fp8_matmul_support(None).reason and fp8["planned_s"] == 0.0
    for name in fp8_sections:
        assert report["sections"][name]["reason"] == fp8["reason"] and report["sections"][name]["planned_s"] == 0.0
        assert report[name]["supported"] is False and report[name]["results"] == []
    assert report["race_fp8_rowwise"]["cast_overhead"] == []
    assert report["plan"]["skipped"] == dict.fromkeys(fp8_sections, fp8["reason"])
    for key in ("precision_table", "race_matmul", "race_mlp", "alignment", "sweeps", "autocast_probe"):
        assert report[key], key
    rows = report["precision_table"]["rows"]
    assert [rows[k]["status"] for k in ("fp32", "tf32", "bf16", "fp16")] == ["ok", "skipped", "ok", "ok"]
    n = report["precision_table"]["n"]
    assert n == gpu_check.TINY["table_n"]
    for key in ("fp32", "bf16", "fp16"):
        assert rows[key]["tflops"] == pytest.approx(2 * n**3 / rows[key]["median_s"] / 1e12)
    m = report["machine"]
    assert m["device"] == "cpu" and m["torch"] == torch.__version__ and report["quick"] is True
    assert report["autocast_probe"]["cpu"]["status"] == "ok" and report["date"]
    assert m["arch_list"] == torch.cuda.get_arch_list() and m["arch_supported"] is None
    assert m["bf16_hardware"] is None and m["amp_dtypes"] == ["bfloat16"]
    out = capsys.readouterr().out
    assert "planned worst case" in out and out.count("race_matmul n=") == 1
    assert f"race_fp8_matmul, race_fp8_rowwise, fp8_blockwise skipped: {fp8['reason']}" in out
    # The notebook's loader finds the timestamped file; the summary is beside it.
    assert references.load_reference_results(tmp_path)[0]["_file"] == names[0]
    md = (tmp_path / names[1]).read_text()
    assert md.startswith("# GPU check") and "## race_fp8_matmul" in md
    assert f"Not raced: {fp8['reason']}." in md and "| race_fp8_matmul | skipped: no CUDA GPU" in md
    assert "## race_fp8_rowwise" in md and "## fp8_blockwise" in md and md.count(f"Not raced: {fp8['reason']}.") == 3


def _fast(gpu_check, monkeypatch, **overrides):
    """Replace every section by a quick stand-in (``overrides`` name -> function)."""

    def noop(check, sec):
        sec.report[sec.name] = {"stand-in": True}

    table = {name: overrides.get(name, noop) for name in gpu_check.SECTIONS}
    monkeypatch.setattr(gpu_check, "SECTION_FUNCTIONS", table)


def test_a_failing_section_is_recorded_and_the_others_still_run(gpu_check, tmp_path, monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(sweeps, "sweep", boom)
    # The real sweeps section (its two sweeps fail); the other sections are stand-ins that note that they
    # ran and add nothing to the report (test_cpu_run_writes_every_section_with_status_ok runs them all).
    ran = []
    others = {name: (lambda check, sec: ran.append(sec.name)) for name in gpu_check.SECTIONS if name != "sweeps"}
    _fast(gpu_check, monkeypatch, sweeps=gpu_check.SECTION_FUNCTIONS["sweeps"], **others)
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "sweeps" in err and "RuntimeError" in err and "race_matmul" not in err
    report = _report(tmp_path)
    s = report["sections"]
    assert s["sweeps"]["status"] == "error" and s["sweeps"]["error"]["type"] == "RuntimeError"
    assert "simulated" in s["sweeps"]["error"]["message"] and len(s["sweeps"]["errors"]) == 2  # matmul and mlp
    assert all(s[k]["status"] == "ok" for k in gpu_check.SECTIONS if k != "sweeps")
    assert ran == [name for name in gpu_check.SECTIONS if name != "sweeps"] and report["complete"] is True
    assert "| sweeps | error: RuntimeError" in (tmp_path / f"{tmp_path.glob('*.json').__next__().stem}.md").read_text()


def test_a_failure_early_does_not_stop_the_later_sections(gpu_check, tmp_path, monkeypatch):
    def refused(*args, **kwargs):
        raise ValueError("race_mlp needs about 9 GiB (simulated refusal)")

    monkeypatch.setattr(race, "race_mlp", refused)
    # race_mlp and the sweeps for real (both call race.race_mlp), the other sections as stand-ins
    real = gpu_check.SECTION_FUNCTIONS
    _fast(gpu_check, monkeypatch, race_mlp=real["race_mlp"], sweeps=real["sweeps"])
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 1
    report = _report(tmp_path)
    status = {k: v["status"] for k, v in report["sections"].items()}
    assert status["race_mlp"] == "error" and report["race_mlp"] == []
    assert status["alignment"] == status["autocast_probe"] == status["precision_table"] == "ok"
    assert status["sweeps"] == "error" and "matmul_bfloat16" in report["sweeps"]  # the MLP sweep failed alone
    assert "mlp_bfloat16" not in report["sweeps"]


def test_an_exception_that_escapes_a_section_is_caught_there(gpu_check, tmp_path, monkeypatch, capsys):
    def oom(check, sec):
        raise MemoryError("simulated")

    _fast(gpu_check, monkeypatch, alignment=oom)
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 1
    assert "alignment (MemoryError: simulated)" in capsys.readouterr().err
    report = _report(tmp_path)
    status = {k: v["status"] for k, v in report["sections"].items()}
    assert status == {**dict.fromkeys(gpu_check.SECTIONS, "ok"), "alignment": "error"}
    assert report["sweeps"] == {"stand-in": True}  # the sections after it ran


def test_the_file_is_on_disk_after_the_first_section_and_survives_an_interrupt(gpu_check, tmp_path, monkeypatch):
    seen = {}

    def second(check, sec):
        seen.update(_report(tmp_path))  # what is on disk while the second section runs

    def interrupted(check, sec):
        raise KeyboardInterrupt

    _fast(gpu_check, monkeypatch, race_matmul=second, alignment=interrupted)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.main(["--device", "cpu", "--out", str(tmp_path)])
    assert seen["sections"]["precision_table"]["status"] == "ok" and seen["precision_table"] == {"stand-in": True}
    assert seen["sections"]["race_matmul"]["status"] == "running"
    report = _report(tmp_path)
    status = {k: v["status"] for k, v in report["sections"].items()}
    assert status == {"precision_table": "ok", "race_matmul": "ok", "race_fp8_matmul": "ok", "race_fp8_rowwise": "ok",
                      "fp8_blockwise": "ok", "race_mlp": "ok", "alignment": "interrupted", "autocast_probe": "pending",
                      "sweeps": "pending"}  # fmt: skip
    assert report["complete"] is False and report["sections"]["alignment"]["error"]["type"] == "KeyboardInterrupt"
    assert "total_s" in report


def test_a_skipped_section_is_not_a_failure(gpu_check, tmp_path, monkeypatch):
    def skipped(check, sec):
        sec.skipped = "nothing to probe (simulated)"

    _fast(gpu_check, monkeypatch, autocast_probe=skipped)
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    s = _report(tmp_path)["sections"]["autocast_probe"]
    assert s["status"] == "skipped" and "simulated" in s["reason"]


def test_file_stem_has_the_utc_time_and_same_second_runs_do_not_overwrite(gpu_check, tmp_path, monkeypatch):
    assert (
        gpu_check.file_stem("NVIDIA H100 80GB HBM3", "2025-03-04T05:06:07+00:00", True)
        == "gpu-check_nvidia-h100-80gb-hbm3_20250304-050607_quick"
    )
    assert gpu_check.file_stem("Tesla T4", "2025-03-04T23:59:58+00:00", False) == "gpu-check_tesla-t4_20250304-235958"
    monkeypatch.setattr(references, "utc_now", lambda: "2025-03-04T05:06:07+00:00")
    _fast(gpu_check, monkeypatch)
    for _ in range(2):
        assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    jsons = sorted(p.name for p in tmp_path.glob("*.json"))
    assert jsons == ["gpu-check_cpu_20250304-050607_quick-2.json", "gpu-check_cpu_20250304-050607_quick.json"]
    assert sorted(r["_file"] for r in references.load_reference_results(tmp_path)) == jsons


# Real GPUs: (name, compute capability, AMP dtypes with Tensor Core support).  bf16 Tensor Cores
# arrived with Ampere (A100 datasheet); Volta and Turing multiply only fp16.
GPUS = [
    ("T4", (7, 5), [torch.float16]),
    ("V100", (7, 0), [torch.float16]),
    ("A100", (8, 0), [torch.float16, torch.bfloat16]),
    ("RTX 4090", (8, 9), [torch.float16, torch.bfloat16]),
    ("H100 SXM", (9, 0), [torch.float16, torch.bfloat16]),
    ("H100 NVL", (9, 0), [torch.float16, torch.bfloat16]),
    ("H200", (9, 0), [torch.float16, torch.bfloat16]),
    ("B200", (10, 0), [torch.float16, torch.bfloat16]),
    ("RTX 5090", (12, 0), [torch.float16, torch.bfloat16]),
]


@pytest.mark.parametrize(("name", "capability", "expected"), GPUS, ids=[g[0] for g in GPUS])
def test_amp_dtypes_race_bf16_only_where_the_gpu_multiplies_it(gpu_check, name, capability, expected):
    assert gpu_check.amp_dtypes(capability) == expected
    check = gpu_check.Check(torch.device("cuda"), gpu_check.QUICK, capability)  # what the run races
    assert check.dtypes == expected
    # --quick's one race_mlp runs in the course's dtype
    assert check.mlp_dtypes == [gpus.amp_dtype_for("cuda", capability)]
    budget = gpu_check.plan(gpu_check.QUICK, check.dtypes, capability=capability)
    assert budget["total"] < gpu_check.QUICK_BUDGET_S == 180


def test_quick_worst_case_is_under_three_minutes_and_full_is_longer(gpu_check):
    h100 = (9, 0)
    quick = gpu_check.plan(gpu_check.QUICK, gpu_check.amp_dtypes(h100), capability=h100)
    full = gpu_check.plan(gpu_check.FULL, gpu_check.amp_dtypes(h100), capability=h100)
    assert quick["total"] < 180 < full["total"]
    assert quick["total"] == pytest.approx(sum(v for k, v in quick.items() if k != "total"), abs=0.5)
    # The budget is made of max_time_s per race: the same sizes with the full run's 20 s would not fit.
    slow = gpu_check.plan({**gpu_check.QUICK, "max_time_s": 20.0}, gpu_check.amp_dtypes(h100), capability=h100)
    assert slow["total"] > 180
    # Reused races are not counted twice: the quick sweep repeats three of race_matmul's sizes.
    no_reuse = gpu_check.plan({**gpu_check.QUICK, "matmul_n": (1000, 4000, 8000)}, [torch.float16], capability=h100)
    reuse = gpu_check.plan(gpu_check.QUICK, [torch.float16], capability=h100)
    assert no_reuse["sweeps"] > reuse["sweeps"]
    assert "15 s" in gpu_check.plan_text(quick, "x")
    assert gpu_check.QUICK["sweep_matmul"][-1] == 8192 and 16384 not in gpu_check.QUICK["sweep_matmul"]
    assert {4096, 8192} <= set(gpu_check.QUICK["matmul_n"]) and len(gpu_check.QUICK["mlp"]) == 1


def test_the_worst_case_model_bounds_the_real_timer(gpu_check):
    """measure_worst_s against amp_lab.timing.measure itself, with calls of a known length.  The narrowest
    target the timer takes, and one contestant whose calls alternate between two lengths, so the interval
    never gets that narrow and the measurement runs until max_time_s."""
    target = timing.MIN_TARGET_REL_WIDTH
    sizes = {"warmup": 1, "repeats": 3, "min_sample_s": 0.01, "target_rel_width": target, "max_time_s": 0.3}
    call_s = 0.002
    calls = [0]
    longest = [0.0]  # the longest call, as this machine slept it (a loaded machine oversleeps)

    def timed_sleep(s):
        t0 = time.perf_counter()
        time.sleep(s)
        longest[0] = max(longest[0], time.perf_counter() - t0)

    def slow():
        timed_sleep(call_s)

    def uneven():  # samples of 5 calls alternate between about 2.1 and 2.4 ms per call
        calls[0] += 1
        timed_sleep(call_s * (1.2 if (calls[0] // 5) % 2 else 1.0))

    began = time.perf_counter()
    timing.measure({"a": slow, "b": uneven}, warmup=1, repeats=3, min_sample_s=0.01,
                   target_rel_width=target, max_time_s=0.3)  # fmt: skip
    took = time.perf_counter() - began
    worst = gpu_check.measure_worst_s(max(longest[0], call_s * 1.25), 2, sizes)
    assert 0.2 <= took <= worst + 0.05  # it stops when the next round would pass max_time_s
    longest[0] = 0.0
    began = time.perf_counter()
    timing.measure({"a": slow, "b": slow}, warmup=1, repeats=5, min_sample_s=0.01)
    took = time.perf_counter() - began
    fixed = gpu_check.measure_worst_s(max(longest[0], call_s * 1.2), 2, sizes, repeats=5, adaptive=False)
    assert took <= fixed + 0.05


def _fake_cuda(monkeypatch, capability, arch_list):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(arch_list))


def test_a_build_without_kernels_for_the_gpu_exits_3_with_the_advice(gpu_check, tmp_path, monkeypatch, capsys):
    arch = ["sm_80", "sm_86", "sm_90"]
    _fake_cuda(monkeypatch, (12, 0), arch)  # an RTX 5090 under a torch built before Blackwell
    assert gpu_check.main(["--out", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert gpus.arch_advice((12, 0), arch, torch.version.cuda) in err
    assert list(tmp_path.iterdir()) == []  # nothing raced, nothing written
    # The same through injected facts: a V100 under a build that dropped Volta.
    facts = gpu_check.CudaFacts(0, (7, 0), ("sm_80", "sm_90"), "12.8")
    assert gpu_check.main(["--out", str(tmp_path)], facts=facts) == 3
    assert gpus.arch_advice((7, 0), ["sm_80", "sm_90"], "12.8") in capsys.readouterr().err


def test_a_build_with_kernels_passes_the_arch_check(gpu_check, tmp_path, monkeypatch, capsys):
    facts = gpu_check.CudaFacts(0, (9, 0), ("sm_80", "sm_90"), "12.8")
    code = gpu_check.main(["--out", str(tmp_path)], facts=facts)
    if not torch.cuda.is_available():  # past the arch check, get_device finds no GPU here
        assert code == 2 and "not available" in capsys.readouterr().err


def test_cannot_run_exits_2(gpu_check, tmp_path, capsys):
    if not torch.cuda.is_available():
        assert gpu_check.main(["--out", str(tmp_path)]) == 2
        assert "no CUDA GPU" in capsys.readouterr().err
    assert gpu_check.main(["--device", "cpu"]) == 2  # CPU numbers never land in docs/results
    assert gpu_check.main(["--device", "mps", "--out", str(tmp_path)]) == 2
    assert gpu_check.main(["--device", "gpu0", "--out", str(tmp_path)]) == 2
    assert gpu_check.main(["--bogus"]) == 2
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------
# The FP8 race: planned and run where the GPU's Tensor Cores multiply FP8, skipped with the reason elsewhere
# ------------------------------------------------------------------------------------------

CU130 = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")  # torch 2.13's CUDA 13.0 wheel
CU126 = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")

# (GPU, its CudaFacts under a real wheel, whether the FP8 race runs)
FP8_GPUS = [
    ("H100", ((9, 0), CU130), True),
    ("H200", ((9, 0), CU126), True),
    ("L4", ((8, 9), CU130), True),  # Ada runs the wheel's sm_86 cubins
    ("RTX 5090", ((12, 0), CU130), True),
    ("A100", ((8, 0), CU130), False),
    ("T4", ((7, 5), CU126), False),
    ("B200 under cu126", ((10, 0), CU126), False),  # FP8 Tensor Cores, but no kernels in that wheel
]


@pytest.mark.parametrize(("name", "facts", "runs"), FP8_GPUS, ids=[g[0] for g in FP8_GPUS])
def test_the_plan_has_the_fp8_race_only_where_the_gpu_multiplies_fp8(gpu_check, name, facts, runs):
    facts = gpu_check.CudaFacts(0, *facts, "13.0")
    dtypes = gpu_check.amp_dtypes(facts.capability)
    budget = gpu_check.plan(gpu_check.QUICK, dtypes, capability=facts.capability, arch_list=facts.arch_list)
    skipped = gpu_check.skipped_sections("cuda", facts.capability, facts.arch_list)
    text = gpu_check.plan_text(budget, "x", skipped)
    support = gpus.fp8_matmul_support(facts.capability, facts.arch_list)
    assert bool(support) is runs and list(budget)[:4] == ["start-up", "precision_table", "race_matmul", "race_fp8_matmul"]
    if runs:
        # two races of three contestants at --quick's sizes, each at most max_time_s plus a round and set-up
        assert gpu_check.QUICK["fp8_n"] == (4096, 8192)
        assert 2 * (gpu_check.QUICK["max_time_s"] + gpu_check.RACE_SETUP_S) <= budget["race_fp8_matmul"] < 20
        assert "race_fp8_matmul" not in skipped and f"race_fp8_matmul {budget['race_fp8_matmul']:.0f} s" in text
    else:
        assert budget["race_fp8_matmul"] == 0.0 and skipped == dict.fromkeys(
            ("race_fp8_matmul", "race_fp8_rowwise", "fp8_blockwise"), support.reason)  # fmt: skip
        assert text.endswith(f"; race_fp8_matmul, race_fp8_rowwise, fp8_blockwise skipped: {support.reason}")
        assert "race_fp8_matmul skipped," in text
        assert f"sm_{facts.capability[0]}{facts.capability[1]}" in support.reason
    assert budget["total"] < gpu_check.QUICK_BUDGET_S
    assert budget["total"] == pytest.approx(sum(v for k, v in budget.items() if k != "total"), abs=0.5)
    check = gpu_check.Check(torch.device("cuda"), gpu_check.QUICK, facts.capability, facts.arch_list)
    assert check.fp8_support == support
    # Without a GPU nothing is planned for it, whatever the facts say.
    assert gpu_check.plan(gpu_check.TINY, [torch.bfloat16], device_type="cpu", capability=facts.capability,
                          arch_list=facts.arch_list)["race_fp8_matmul"] == 0.0  # fmt: skip


FP8_RUNS = [
    ("H100", (9, 0), "NVIDIA H100 80GB HBM3", 2.0),
    ("L4", (8, 9), "NVIDIA L4", None),  # FP8 Tensor Cores, but no entry in the course's datasheet table
    ("A100", (8, 0), "NVIDIA A100-SXM4-80GB", "skipped"),
    ("T4", (7, 5), "Tesla T4", "skipped"),
]


@pytest.mark.parametrize(("name", "capability", "gpu_name", "sheet"), FP8_RUNS, ids=[g[0] for g in FP8_RUNS])
def test_the_fp8_section_with_a_gpus_facts_writes_its_table(gpu_check, tmp_path, monkeypatch, name, capability,
                                                            gpu_name, sheet):  # fmt: skip
    """The section for real on the CPU device, handed a GPU's facts (the check's capability and arch list, the
    machine's name): races n = 32 where the GPU multiplies FP8, and the summary sets the measured ratio beside
    the datasheet's; skipped with the reason where it does not."""

    class GpuFactsCheck(gpu_check.Check):
        def __init__(self, dev, sizes, *_):
            super().__init__(dev, sizes, capability, CU130)

    real_info = gpu_check.machine_info
    monkeypatch.setattr(gpu_check, "Check", GpuFactsCheck)
    monkeypatch.setattr(gpu_check, "machine_info", lambda dev, facts=None: {**real_info(dev, facts), "gpu_name": gpu_name})
    # the FP8 section for real; the others add nothing to the report, so the summary shows the FP8 part alone
    others = {k: (lambda check, sec: None) for k in gpu_check.SECTIONS if k != "race_fp8_matmul"}
    _fast(gpu_check, monkeypatch, race_fp8_matmul=gpu_check.SECTION_FUNCTIONS["race_fp8_matmul"], **others)
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    report = _report(tmp_path)
    fp8 = report["race_fp8_matmul"]
    support = gpus.fp8_matmul_support(capability, CU130)
    assert fp8["support"] == support.reason and fp8["supported"] is bool(support)
    md = next(tmp_path.glob("*.md")).read_text()
    assert "## race_fp8_matmul" in md
    if sheet == "skipped":
        assert report["sections"]["race_fp8_matmul"] == {**report["sections"]["race_fp8_matmul"], "status": "skipped",
                                                         "reason": support.reason}  # fmt: skip
        assert fp8["results"] == [] and f"Not raced: {support.reason}." in md
        return
    assert report["sections"]["race_fp8_matmul"]["status"] == "ok"
    (r,) = fp8["results"]
    assert r["kind"] == "fp8_matmul" and r["params"] == {"n": gpu_check.TINY["fp8_n"][0]} and r["dtype"] == "bfloat16"
    assert set(r["timings"]) == {"fp32", "amp", "fp8"}
    iv = r["fp8_speedup_interval"]
    assert iv["ratio"] == pytest.approx(r["fp8_speedup"])
    assert "FP8 TFLOP/s" in md and "FP8 / BF16 measured (95% interval)" in md and "FP8 / BF16 datasheet" in md
    row = next(line for line in md.splitlines() if line.startswith("| 32 | bfloat16 |"))
    assert f"| {r['tflops']['fp8']:.3g} |" in row and f"{iv['ratio']:.2f}x" in row
    if sheet is None:
        assert fp8["datasheet"] is None and row.endswith("| - |") and "has no FP8 figure for this GPU" in md
    else:
        entry = gpus.datasheet_entry(gpu_name)
        assert fp8["datasheet"]["fp8_over_bf16"] == entry.fp8_tflops / entry.bf16_tflops == sheet
        assert fp8["datasheet"]["row"] in gpus.fp8_datasheet_rows() and fp8["datasheet"]["source"] == entry.fp8_source
        assert row.endswith(f"| {sheet:.3g}x |") and entry.fp8_source in md


def test_a_failed_fp8_race_is_recorded_and_the_others_still_run(gpu_check, tmp_path, monkeypatch, capsys):
    class H100Check(gpu_check.Check):
        def __init__(self, dev, sizes, *_):
            super().__init__(dev, sizes, (9, 0), CU130)

    def boom(*args, **kwargs):
        raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED (simulated)")

    monkeypatch.setattr(gpu_check, "Check", H100Check)
    monkeypatch.setattr(race, "race_fp8_matmul", boom)
    _fast(gpu_check, monkeypatch, race_fp8_matmul=gpu_check.SECTION_FUNCTIONS["race_fp8_matmul"])
    assert gpu_check.main(["--device", "cpu", "--out", str(tmp_path)]) == 1
    assert "race_fp8_matmul (RuntimeError: CUBLAS_STATUS_NOT_SUPPORTED (simulated))" in capsys.readouterr().err
    status = {k: v["status"] for k, v in _report(tmp_path)["sections"].items()}
    assert status == {**dict.fromkeys(gpu_check.SECTIONS, "ok"), "race_fp8_matmul": "error"}


# ------------------------------------------------------------------------------------------
# The FP8 recipe sections (issue 26): rowwise with the cast overhead where FP8 GEMMs run, blockwise where torch
# runs DeepSeek's scales (Hopper, CUDA 12.9 on); decisions from the facts of real GPUs and wheels
# ------------------------------------------------------------------------------------------

# (GPU, capability, torch.version.cuda of its wheel, the wheel's arch list, rowwise races, blockwise races)
RECIPE_GPUS = [
    ("T4", (7, 5), "13.0", CU130, False, False),
    ("A100", (8, 0), "13.0", CU130, False, False),
    ("L4", (8, 9), "13.0", CU130, True, False),
    ("H100", (9, 0), "13.0", CU130, True, True),
    ("H200", (9, 0), "13.0", CU130, True, True),
    ("H200 under cu126", (9, 0), "12.6", CU126, True, False),  # cuBLASLt before 12.9: no block scales
    ("B200", (10, 0), "13.0", CU130, True, False),
    ("RTX 5090", (12, 0), "13.0", CU130, True, False),
]


@pytest.mark.parametrize(("name", "capability", "cuda", "arch", "rowwise", "blockwise"), RECIPE_GPUS,
                         ids=[g[0] for g in RECIPE_GPUS])  # fmt: skip
def test_the_quick_plan_races_each_recipe_only_where_it_runs(gpu_check, name, capability, cuda, arch, rowwise,
                                                            blockwise):  # fmt: skip
    kw = {"capability": capability, "arch_list": arch, "cuda_version": cuda}
    budget = gpu_check.plan(gpu_check.QUICK, gpu_check.amp_dtypes(capability), **kw)
    skipped = gpu_check.skipped_sections("cuda", capability, arch, cuda)
    assert list(budget) == ["start-up", *gpu_check.SECTIONS, "total"] and budget["total"] < gpu_check.QUICK_BUDGET_S
    race_s = gpu_check.QUICK["max_time_s"] + gpu_check.RACE_SETUP_S  # an adaptive race's worst case, at least
    sizes = len(gpu_check.QUICK["fp8_n"])
    if rowwise:  # the race and, per size and scaling, a cast overhead of fixed rounds with its set-up
        assert sizes * race_s + 2 * sizes * gpu_check.RACE_SETUP_S <= budget["race_fp8_rowwise"] < 30
    assert ("race_fp8_rowwise" in skipped) is (not rowwise) and (budget["race_fp8_rowwise"] == 0) is (not rowwise)
    assert ("fp8_blockwise" in skipped) is (not blockwise) and (budget["fp8_blockwise"] == 0) is (not blockwise)
    if blockwise:
        assert len(gpu_check.QUICK["fp8_block_n"]) * race_s <= budget["fp8_blockwise"] < 20
    check = gpu_check.Check(torch.device("cuda"), gpu_check.QUICK, capability, arch, cuda)
    assert check.blockwise_support == race.fp8_blockwise_support(capability, arch, cuda)
    if not blockwise:
        assert skipped["fp8_blockwise"] == check.blockwise_support.reason
    if not rowwise:
        assert skipped["race_fp8_rowwise"] == skipped["race_fp8_matmul"] == check.fp8_support.reason
    text = gpu_check.plan_text(budget, "x", skipped)
    for section in ("race_fp8_rowwise", "fp8_blockwise"):
        assert (f"{section} skipped," in text) is (section in skipped)
    assert all(f"skipped: {why}" in text for why in skipped.values())
    # without a GPU the sections plan nothing, whatever the facts
    tiny = gpu_check.plan(gpu_check.TINY, [torch.bfloat16], device_type="cpu", **kw)
    assert tiny["race_fp8_rowwise"] == tiny["fp8_blockwise"] == 0.0


def test_the_docstring_states_the_plan_of_the_new_sections(gpu_check):
    h100 = {"capability": (9, 0), "cuda_version": "13.0"}
    quick = gpu_check.plan(gpu_check.QUICK, gpu_check.amp_dtypes((9, 0)), **h100)
    full = gpu_check.plan(gpu_check.FULL, gpu_check.amp_dtypes((9, 0)), **h100)
    rows = {m[1]: (int(m[2]), int(m[3])) for m in re.finditer(r"^(\S+) .*?(\d+)\s+(\d+)$", gpu_check.__doc__, re.M)}
    for section in ("race_fp8_rowwise", "fp8_blockwise", "total"):
        assert rows[section] == pytest.approx((quick[section], full[section]), abs=1), section


def _dequantized_blockwise(a8, b8, sa, sb):
    """The blockwise GEMM from its definition (each tile times its multiplier, an FP32 product), for the CPU."""
    k, n = a8.shape[1], b8.shape[1]
    a = a8.float() * sa.repeat_interleave(128, 1)[:, :k]
    b = b8.float() * sb[: -(-k // 128)].repeat_interleave(128, 0)[:k].repeat_interleave(128, 1)[:, :n]
    return (a @ b).to(torch.bfloat16)


def _recipe_run(gpu_check, tmp_path, monkeypatch, capability, cuda="13.0"):
    """The two recipe sections for real on the CPU device, handed a GPU's facts (the check's, and the race's: its
    CUDA checks run with CPU tensors, the blockwise GEMM emulated from its definition, as the CPU has none)."""
    class FactsCheck(gpu_check.Check):
        def __init__(self, dev, sizes, *_):
            super().__init__(dev, sizes, capability, CU130, cuda)

    monkeypatch.setattr(gpu_check, "Check", FactsCheck)
    monkeypatch.setattr(race, "device_facts", lambda dev: ("cuda", capability))
    monkeypatch.setattr(race, "_cuda_arch_list", lambda: CU130)
    monkeypatch.setattr(race, "_cuda_version", lambda: cuda)
    monkeypatch.setattr(race, "_blockwise_mm", _dequantized_blockwise)
    real = gpu_check.SECTION_FUNCTIONS
    others = {k: (lambda check, sec: None) for k in gpu_check.SECTIONS if k not in ("race_fp8_rowwise", "fp8_blockwise")}
    _fast(gpu_check, monkeypatch, race_fp8_rowwise=real["race_fp8_rowwise"], fp8_blockwise=real["fp8_blockwise"],
          **others)  # fmt: skip
    code = gpu_check.main(["--device", "cpu", "--out", str(tmp_path)])
    return code, _report(tmp_path), next(tmp_path.glob("*.md")).read_text()


@pytest.mark.parametrize(("capability", "rowwise", "blockwise"), [((9, 0), True, True), ((8, 9), True, False),
                                                                  ((8, 0), False, False)], ids=["H100", "L4", "A100"])  # fmt: skip
def test_the_recipe_sections_with_a_gpus_facts_write_their_tables(gpu_check, tmp_path, monkeypatch, capability,
                                                                  rowwise, blockwise):  # fmt: skip
    code, report, md = _recipe_run(gpu_check, tmp_path, monkeypatch, capability)
    assert code == 0
    status = {k: report["sections"][k]["status"] for k in ("race_fp8_rowwise", "fp8_blockwise")}
    assert status == {"race_fp8_rowwise": "ok" if rowwise else "skipped", "fp8_blockwise": "ok" if blockwise else "skipped"}
    row, block = report["race_fp8_rowwise"], report["fp8_blockwise"]
    assert row["support"] == gpus.fp8_matmul_support(capability, CU130).reason
    assert block["support"] == race.fp8_blockwise_support(capability, CU130, "13.0").reason
    if not rowwise:
        assert row["results"] == row["cast_overhead"] == [] and md.count(f"Not raced: {row['support']}.") == 2
        return
    (r,) = row["results"]
    n = gpu_check.TINY["fp8_n"][0]
    assert r["params"] == {"n": n, "scaling": "rowwise"} and set(r["timings"]) == {"fp32", "amp", "fp8", "fp8_rowwise"}
    assert [(c["params"]["n"], c["params"]["scaling"]) for c in row["cast_overhead"]] == [(n, "tensorwise"), (n, "rowwise")]
    for c in row["cast_overhead"]:  # fixed rounds, as the sizes say
        assert c["kind"] == "fp8_cast_overhead" and len(c["timings"]["cast"]["samples_s"]) == gpu_check.TINY["cast_repeats"]
        assert c["overhead_s"] == 2 * c["cast_s"] and c["rule_outcome"] == c["rule"]["outcome"]
        pays = {"faster": "yes", "slower": "no"}.get(c["rule_outcome"], c["rule_outcome"])
        line = next(x for x in md.splitlines() if x.startswith(f"| {n} | {c['params']['scaling']} |"))
        assert line.endswith(f"| {pays} |") and "too few rounds" in line  # three rounds: no interval yet
    lines = md.splitlines()
    assert "## race_fp8_rowwise" in md and "torchao's rule: FP8 pays where the BF16 GEMM time" in md
    lane_row = next(x for x in lines if x.startswith(f"| {n} | ") and x.count("|") == 9)
    assert f"| {r['tflops']['fp8_rowwise']:.3g} |" in lane_row
    if blockwise:
        (b,) = block["results"]
        assert b["params"] == {"n": gpu_check.TINY["fp8_block_n"][0], "scaling": "blockwise"}
        assert "fp8_blockwise_vs_tensorwise" in b and any(x.startswith("| 128 | ") for x in lines)
        assert f"Why this GPU races it: {block['support']}." in md
    else:
        assert block["results"] == [] and f"Not raced: {block['support']}." in md
        assert report["sections"]["fp8_blockwise"]["reason"] == block["support"]


def test_a_failed_cast_overhead_is_recorded_and_the_race_kept(gpu_check, tmp_path, monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access (simulated)")

    monkeypatch.setattr(race, "fp8_cast_overhead", boom)
    code, report, md = _recipe_run(gpu_check, tmp_path, monkeypatch, (9, 0))
    assert code == 1 and "race_fp8_rowwise (RuntimeError: CUDA error" in capsys.readouterr().err
    s = report["sections"]["race_fp8_rowwise"]
    assert s["status"] == "error" and [e["item"] for e in s["errors"]] == ["cast n=32 tensorwise", "cast n=32 rowwise"]
    assert len(report["race_fp8_rowwise"]["results"]) == 1 and report["sections"]["fp8_blockwise"]["status"] == "ok"
