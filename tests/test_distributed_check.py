"""scripts/distributed_check.py run for real: torchrun, 2 gloo ranks on 127.0.0.1, --quick, into a temporary
folder (one run shared by the module), its numbers checked against torch, hand counts and the script's own
settings; then its refusals and decisions, in this process (nothing is launched for those)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from amp_lab import distributed
from amp_lab.models import make_mlp

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "distributed_check.py"
STEM = re.compile(r"^distributed-check_cpu_\d{8}-\d{6}_quick$")
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("distributed_check_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One real run: ``torchrun --standalone --nproc-per-node=2`` (``python -m torch.distributed.run``, so the
    test's own interpreter), gloo forced, so it is the same on a GPU machine.  About 7 s on 2 cores."""
    out = tmp_path_factory.mktemp("distributed-check")
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env.update(AMP_LAB_DEVICE="cpu", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(SCRIPT),
               "--quick", "--backend", "gloo", "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted(p.name for p in out.iterdir())
    (path,) = out.glob("*.json")
    return {"out": out, "files": files, "report": json.loads(path.read_text()), "stdout": done.stdout}


def test_the_run_writes_one_json_and_its_summary_named_like_gpu_check(run, check):
    assert len(run["files"]) == 2, run["files"]  # no temporary file left behind
    stems = {name.rsplit(".", 1)[0] for name in run["files"]}
    assert len(stems) == 1 and STEM.match(stems.pop())
    report = run["report"]
    assert report["schema"] == "amp-lab/distributed-check/1" and report["complete"] is True
    assert report["quick"] is True and report["mode"] == "quick" and report["launcher"] == "torchrun"
    assert report["backend"] == "gloo" and report["world_size"] == 2
    assert {k: v["status"] for k, v in report["sections"].items()} == dict.fromkeys(check.SECTIONS, "ok")
    assert all(report["durations_s"][name] >= 0 for name in check.SECTIONS) and report["total_s"] > 0
    assert report["machine"]["torch"] == torch.__version__
    assert [(r["rank"], r["device"]) for r in report["ranks"]] == [(0, "cpu"), (1, "cpu")]
    # each rank's peak memory: more than the draws of the all-reduce alone (2 ranks x 2**16 float64), no GPU's
    assert all(
        r["peak_rss_bytes"] > 2 * 2**16 * 8 and r["peak_cuda_allocated_bytes"] is None
        for r in report["ranks"]
    )
    assert report["sizes"] == check.QUICK
    md = (run["out"] / run["files"][1]).read_text()
    assert all(f"| {name} | ok |" in md for name in check.SECTIONS)


def test_every_rank_talked_through_127_0_0_1(run):
    loopback = run["report"]["loopback"]
    assert loopback["MASTER_ADDR"] == "127.0.0.1"
    iface = distributed.loopback_interface()
    assert loopback.get("GLOO_SOCKET_IFNAME") == iface and "NCCL_SOCKET_IFNAME" not in loopback


def test_the_allreduce_errors_are_those_of_one_rounded_sum(run):
    """On 2 ranks an all-reduce (sum) is one addition in the dtype, correctly rounded: torch's rounding of the
    float64 sum of the same rounded draws gives the same error, computed here independently.  (Equal to the bit
    here; rel=1e-6 leaves room for a gloo build that adds bfloat16 in float32 first, a double rounding.)"""
    ar = run["report"]["allreduce"]
    assert ar["numel"] == 2**16 and ar["world_size"] == 2 and ar["ranks_agree"] is True
    draws = torch.randn(
        2, ar["numel"], generator=torch.Generator().manual_seed(ar["seed"]), dtype=torch.float64
    )
    errors = ar["errors"]
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        inputs = draws.to(dtype)
        exact = inputs.double().sum(0)
        rounded = exact.to(dtype).double()
        expected = float((rounded - exact).abs().sum() / exact.abs().sum())
        assert errors[str(dtype).removeprefix("torch.")] == pytest.approx(expected, rel=1e-6)
    assert errors["bfloat16"] > errors["float16"] > errors["float32"] > 0
    assert ar["vs_float32"]["bfloat16"] == pytest.approx(errors["bfloat16"] / errors["float32"])


@pytest.mark.parametrize(
    ("section", "policy", "read"),
    [
        ("fsdp_bf16_fp32", ("bfloat16", "float32"), ("float32", "bfloat16", "float32")),
        ("fsdp_fp16_fp32_inf", ("float16", "float32"), ("float32", "float16", "float32")),
        ("fsdp_bf16_bf16", ("bfloat16", "bfloat16"), ("float32", "bfloat16", "bfloat16")),
    ],
)
def test_fsdp_dtypes_read_from_the_tensors_on_every_rank(run, section, policy, read):
    r = run["report"][section]
    assert (r["policy"]["param_dtype"], r["policy"]["reduce_dtype"]) == policy
    expected = dict(zip(("master", "compute", "reduce"), read, strict=True))
    assert r["dtypes"] == expected and r["dtypes_by_rank"] == [expected, expected]
    steps = run["report"]["sizes"]["steps"]
    assert len(r["losses"]) == steps and all(math.isfinite(x) for x in r["losses"])
    # the course's MLP at the script's sizes, counted here, sharded over 2 ranks: 4 bytes per float32 parameter
    s = run["report"]["sizes"]
    n = sum(p.numel() for p in make_mlp(hidden=s["hidden"], depth=s["depth"], device="cpu").parameters())
    assert r["num_parameters"] == n and sum(m["parameters"] for m in r["memory"]) == 4 * n
    assert r["settings"]["batch_size"] == 256 and r["settings"]["hidden"] == 64


def test_fsdp_first_loss_is_the_single_process_loss_in_low_precision(run):
    """Step 0's model and global batch are the same in one process: its float32 loss, within bfloat16's unit
    roundoff (2**-9, about 2e-3; measured here: 1.4e-5 for bf16, 7e-7 for fp16, 2 ranks)."""
    s = run["report"]["sizes"]
    (single,) = distributed.single_process_losses(1, hidden=s["hidden"], depth=s["depth"], batch_size=256)
    for section in ("fsdp_bf16_fp32", "fsdp_fp16_fp32_inf", "fsdp_bf16_bf16"):
        assert run["report"][section]["losses"][0] == pytest.approx(single, rel=2**-9), section


def test_an_inf_on_the_last_rank_skips_that_step_on_both_ranks(run):
    r = run["report"]["fsdp_fp16_fp32_inf"]
    steps = run["report"]["sizes"]["steps"]
    step = steps // 2
    assert r["inject_inf"] == {str(step): 1}
    assert r["skipped_steps"] == [[step], [step]]
    scales = r["scales"]
    assert scales[0] == scales[1] and scales[0][0] == run["report"]["sizes"]["init_scale"]
    assert scales[0][step + 1] == scales[0][step] / 2  # the skipped step halved the scale, on every rank
    assert "distributed.ranks_agree" in r["reading"]["reasons"]
    for section in ("fsdp_bf16_fp32", "fsdp_bf16_bf16"):  # no scaler: nothing skipped, no scale
        assert run["report"][section]["skipped_steps"] == [[], []]
        assert run["report"][section]["scales"] == [[None] * steps] * 2


def test_activation_bytes_match_a_hand_count(run):
    """x and each ReLU's output are saved (4 bytes each in float32, 2 under bfloat16 autocast), and autocast keeps
    the bfloat16 copies of the weights whose input needs a gradient: every Linear's but the first."""
    ab = run["report"]["activation_bytes"]
    m = ab["model"]
    assert (m["hidden"], m["depth"], m["batch"]) == (64, 2, 64) and ab["autocast_dtype"] == "bfloat16"
    values = m["batch"] * (m["num_features"] + m["hidden"] * m["depth"])
    weights = m["hidden"] * m["hidden"] * (m["depth"] - 1) + m["hidden"] * m["num_classes"]
    assert ab["float32"]["activations"] == 4 * values and ab["float32"]["parameter_copies"] == 0
    assert ab["autocast"]["activations"] == 2 * values and ab["autocast"]["parameter_copies"] == 2 * weights
    assert ab["autocast_over_float32"] == pytest.approx((2 * values + 2 * weights) / (4 * values))


def test_bytes_per_parameter_beside_zero_at_two_ranks(run):
    bp = run["report"]["bytes_per_parameter"]
    assert bp["world_size"] == 2 and bp["fsdp_run"] == "fsdp_bf16_fp32"
    rows = [(r["measured"], r["formula"]) for r in bp["rows"]]
    # fp32 Adam 4 + 4 + 8; bf16 copies 2; bf16 + fp32 master 2 + 2 + 12; ZeRO-1/2/3 at 2 ranks; FSDP2 16 / 2
    assert rows == [
        (16.0, 16),
        (16.0, 16),
        (2.0, 2),
        (16.0, 16),
        (None, 10.0),
        (None, 9.0),
        (None, 8.0),
        (8.0, 8.0),
    ]
    fsdp = run["report"]["fsdp_bf16_fp32"]["memory"]
    n = run["report"]["fsdp_bf16_fp32"]["num_parameters"]
    assert max(m["parameters"] + m["gradients"] + m["optimizer"] for m in fsdp) == 8 * n


# -- in this process: the decisions and refusals, before any process group --


@pytest.mark.parametrize(
    ("requested", "local", "gpus", "nccl", "expected"),
    [
        ("auto", 2, 0, True, "gloo"),
        ("auto", 2, 2, True, "nccl"),
        ("auto", 8, 8, True, "nccl"),
        ("auto", 4, 2, True, "gloo"),  # fewer GPUs than ranks
        ("auto", 2, 2, False, "gloo"),  # a build without NCCL
        ("gloo", 2, 8, True, "gloo"),
        ("nccl", 2, 1, True, ValueError),
        ("nccl", 2, 2, False, ValueError),
    ],
)
def test_the_backend_is_nccl_only_with_a_gpu_per_rank(check, requested, local, gpus, nccl, expected):
    if expected is ValueError:
        with pytest.raises(ValueError, match="one GPU per rank"):
            check.pick_backend(requested, local, gpus, nccl)
    else:
        assert check.pick_backend(requested, local, gpus, nccl) == expected


def test_loopback_environment_and_the_torchrun_line(check):
    iface = distributed.loopback_interface()
    for backend, key in (("gloo", "GLOO_SOCKET_IFNAME"), ("nccl", "NCCL_SOCKET_IFNAME")):
        env = check.loopback_environment(backend)
        assert env["MASTER_ADDR"] == "127.0.0.1" and env.get(key) == iface
    command = check.torchrun_command(3, ["--quick"])
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--standalone" in command and "--nproc-per-node=3" in command and command[-1] == "--quick"
    assert not any(a.startswith("--master-addr") or a.startswith("--rdzv") for a in command)


def _torchrun_env(monkeypatch, world_size: int, local_world_size: int | None = None) -> None:
    for name, value in (("RANK", 0), ("WORLD_SIZE", world_size), ("LOCAL_RANK", 0),
                        ("LOCAL_WORLD_SIZE", local_world_size or world_size)):  # fmt: skip
        monkeypatch.setenv(name, str(value))


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], None, "run it under torchrun"),
        (["--nproc", "1"], None, "at least 2 ranks"),
        (["--backend", "mpi"], None, None),  # argparse refuses
        (["--out", "x"], (1, None), "one rank"),
        (["--out", "x"], (4, 2), "one machine"),
        (["--backend", "gloo"], (2, None), "give --out DIR"),
        (["--nproc", "2", "--out", "x"], (2, None), "under torchrun leave it out"),
    ],
)
def test_cannot_run_exits_2_before_any_process_group(check, monkeypatch, capsys, argv, env, message):
    for name in TORCHRUN_ENV:
        monkeypatch.delenv(name, raising=False)
    if env:
        _torchrun_env(monkeypatch, *env)
    assert check.main(argv) == check.EXIT_CANNOT_RUN
    assert not torch.distributed.is_initialized()
    if message:
        assert message in capsys.readouterr().err


def test_same_second_runs_do_not_overwrite(check, tmp_path):
    report = {
        "backend": "gloo",
        "machine": {"gpu_name": None},
        "date": "2026-12-01T05:06:07+00:00",
        "quick": True,
    }
    first = check.results_for(tmp_path, report)
    assert first.json_path.name == "distributed-check_cpu_20261201-050607_quick.json"
    first.json_path.write_text("{}")
    assert (
        check.results_for(tmp_path, report).json_path.name
        == "distributed-check_cpu_20261201-050607_quick-2.json"
    )
    nccl = {**report, "backend": "nccl", "machine": {"gpu_name": "NVIDIA H100 80GB HBM3"}, "quick": False}
    assert (
        check.results_for(tmp_path, nccl).json_path.name
        == "distributed-check_nvidia-h100-80gb-hbm3_20261201-050607.json"
    )
