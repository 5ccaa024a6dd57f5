"""Measure the course's races on a real CUDA GPU and write reference results.  (``make gpu-check``)

Runs, on CUDA:

* ``race_matmul`` (FP32 with TF32 off, TF32, and AMP in float16 and, where supported, bfloat16),
* ``race_mlp`` (training steps of the seed's model, with peak memory),
* the alignment rule (n = 4096 against 4095),
* two sweeps (matmul sizes; MLP widths with memory) with the datasheet ceiling,
* the autocast probe (``amp_lab.autocast_ops.probe``) on CUDA and on the CPU,

and writes ``gpu-check_<gpu>_<YYYYMMDD>.json`` (plus a ``.md`` summary) into ``--out``
(default ``docs/results/``).  Notebook ``06_timing_race`` shows committed files as reference
numbers next to the learner's own.  ``docs/results/README.md`` describes the format.

The full run takes about a minute on an H100-class GPU (well under five anywhere that CUDA
runs).  ``--quick`` shrinks every size (a smoke test); ``--device cpu`` runs the script on the
CPU with tiny sizes so the script itself can be tested without a GPU; such a file says
``"device": "cpu"`` and is not reference material.

Usage::

    python scripts/gpu_check.py [--out DIR] [--device cuda|cuda:N|cpu] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Sizes: what the GPU run measures, and what --quick / --device cpu shrink them to.
FULL = {
    "matmul_n": (1024, 4096, 8192),
    "mlp": ((1024, 256), (4096, 1024), (8192, 4096)),
    "sweep_matmul": (256, 512, 1024, 2048, 4096, 8192, 16384),
    "sweep_mlp": (256, 512, 1024, 2048, 4096, 8192),
    "sweep_batch": 1024,
    "align": (4096, 4095),
    "repeats": 10,
    "warmup": 3,
    "min_sample_s": 0.01,
    # sample until each speedup's 95% interval is about +-5% wide, or 20 s per race
    "target_rel_width": 0.1,
    "max_time_s": 20.0,
}
QUICK = {
    "matmul_n": (64, 256),
    "mlp": ((128, 64),),
    "sweep_matmul": (64, 128, 256),
    "sweep_mlp": (64, 128),
    "sweep_batch": 64,
    "align": (256, 255),
    "repeats": 6,
    "warmup": 2,
    "min_sample_s": 0.01,
    "target_rel_width": 0.1,
    "max_time_s": 5.0,
}
TINY = {  # --device cpu: low precision is slow on CPUs without bf16/fp16 instructions
    "matmul_n": (32,),
    "mlp": ((32, 16),),
    "sweep_matmul": (16, 32),
    "sweep_mlp": (16, 32),
    "sweep_batch": 16,
    "align": (32, 31),
    "repeats": 3,
    "warmup": 1,
    "min_sample_s": 0.001,
    "target_rel_width": None,  # a test of the script: fixed, few rounds
    "max_time_s": None,
}


def _log(msg: str) -> None:
    print(msg, flush=True)


def driver_version(index: int) -> str | None:
    """The NVIDIA driver version (NVML through pynvml when installed, else nvidia-smi)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(index)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info(dev) -> dict:
    import torch

    from amp_lab.hardware import cpu_model

    info = {
        "device": str(dev),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu": cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "gpu_name": None,
        "capability": None,
        "gpu_memory_gib": None,
        "driver": None,
        "bf16_supported": None,
    }
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        info.update(
            gpu_name=props.name,
            capability=f"{props.major}.{props.minor}",
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            multiprocessors=props.multi_processor_count,
            driver=driver_version(index),
            bf16_supported=bool(torch.cuda.is_bf16_supported()),
        )
    return info


def _plain(value):
    """JSON-ready form of whatever the autocast probe returns."""
    from amp_lab.timing import _jsonable

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return _jsonable(value)


def run_probe(device_type: str) -> dict:
    """The autocast probe on one device; {"status": "unavailable", ...} when it cannot run."""
    try:
        from amp_lab import autocast_ops
    except ImportError as exc:
        return {"status": "unavailable", "reason": f"amp_lab.autocast_ops cannot be imported: {exc}"}
    if not hasattr(autocast_ops, "probe"):
        return {"status": "unavailable", "reason": "amp_lab.autocast_ops has no probe()"}
    try:
        table = autocast_ops.probe(device_type)
    except Exception as exc:  # the probe is someone else's module: record, do not crash the check
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    ops = {str(name): _plain(result) for name, result in table.items()}
    policies: dict[str, int] = {}
    for result in ops.values():
        policy = result.get("policy", "?") if isinstance(result, dict) else "?"
        policies[policy] = policies.get(policy, 0) + 1
    out = {
        "status": "ok",
        "device_type": device_type,
        "dtype": _plain(getattr(table, "dtype", None)),
        "policy_counts": policies,
        "ops": ops,
    }
    if hasattr(autocast_ops, "compare"):
        try:
            out["compare_with_documented"] = _plain(autocast_ops.compare(table))
        except Exception as exc:
            out["compare_with_documented"] = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    return out


def run_check(dev, sizes: dict, *, log=_log) -> dict:
    import torch

    from amp_lab import race
    from amp_lab.device import dtype_name

    if dev.type == "cuda":
        dtypes = [torch.float16] + ([torch.bfloat16] if torch.cuda.is_bf16_supported() else [])
    else:  # a test of the script: CPU autocast's dtype only
        dtypes = [torch.bfloat16]
    common = {
        "device": dev,
        "warmup": sizes["warmup"],
        "repeats": sizes["repeats"],
        "min_sample_s": sizes["min_sample_s"],
        "target_rel_width": sizes["target_rel_width"],
        "max_time_s": sizes["max_time_s"],
    }
    durations = {}
    results: dict = {}

    start = time.perf_counter()
    results["race_matmul"] = []
    for dtype in dtypes:
        for n in sizes["matmul_n"]:
            r = race.race_matmul(n, dtype=dtype, **common)
            log(f"race_matmul n={n} {dtype}: speedup {r.speedup_interval}: {r.outcome}")
            results["race_matmul"].append(r.to_dict())
    durations["race_matmul"] = time.perf_counter() - start

    start = time.perf_counter()
    results["race_mlp"] = []
    for dtype in dtypes:
        for width, batch in sizes["mlp"]:
            r = race.race_mlp(width, batch, dtype=dtype, **common)
            log(f"race_mlp width={width} batch={batch} {dtype}: speedup {r.speedup_interval}: {r.outcome}")
            results["race_mlp"].append(r.to_dict())
    durations["race_mlp"] = time.perf_counter() - start

    start = time.perf_counter()
    aligned, unaligned = sizes["align"]
    a = race.race_matmul(aligned, dtype=dtypes[0], **common)
    u = race.race_matmul(unaligned, dtype=dtypes[0], **common)
    results["alignment"] = {
        "dtype": dtype_name(dtypes[0]),
        "n_aligned": aligned,
        "n_unaligned": unaligned,
        "amp_tflops_aligned": a.tflops["amp"],
        "amp_tflops_unaligned": u.tflops["amp"],
        "aligned": a.to_dict(),
        "unaligned": u.to_dict(),
    }
    log(f"alignment: AMP {a.tflops['amp']:.3g} TFLOP/s at n={aligned}, {u.tflops['amp']:.3g} at n={unaligned}")
    durations["alignment"] = time.perf_counter() - start

    start = time.perf_counter()
    results["sweeps"] = {}
    for dtype in dtypes:
        s = race.sweep(sizes["sweep_matmul"], kind="matmul", dtype=dtype, show_progress=False, **common)
        results["sweeps"][f"matmul_{dtype_name(dtype)}"] = s.to_dict()
        log(f"sweep matmul {dtype}: " + ", ".join(f"{n}: {x:.2f}x" for n, x in zip(s.sizes, s.speedups, strict=True)))
    s = race.sweep(
        sizes["sweep_mlp"], kind="mlp", batch=sizes["sweep_batch"], dtype=dtypes[0], show_progress=False, **common
    )
    results["sweeps"][f"mlp_{dtype_name(dtypes[0])}"] = s.to_dict()
    log("sweep mlp: " + ", ".join(f"{n}: {x:.2f}x" for n, x in zip(s.sizes, s.speedups, strict=True)))
    durations["sweeps"] = time.perf_counter() - start

    start = time.perf_counter()
    results["autocast_probe"] = {dev.type: run_probe(dev.type)}
    if dev.type == "cuda":
        results["autocast_probe"]["cpu"] = run_probe("cpu")
    log("autocast probe: " + ", ".join(f"{k}: {v.get('status')}" for k, v in results["autocast_probe"].items()))
    durations["autocast_probe"] = time.perf_counter() - start
    results["durations_s"] = {k: round(v, 2) for k, v in durations.items()}
    return results


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def markdown(report: dict) -> str:
    from amp_lab.timing import format_seconds

    m = report["machine"]
    lines = [
        f"# GPU check: {m['gpu_name'] or m['device']}",
        "",
        f"- date (UTC): {report['date']}",
        f"- GPU: {m['gpu_name']} (compute capability {m['capability']}, {m['gpu_memory_gib']} GiB)",
        f"- driver {m['driver']}, CUDA runtime {m['cuda_runtime']}, cuDNN {m['cudnn']}, torch {m['torch']}, "
        f"Python {m['python']}",
        f"- sizes: {'quick' if report['quick'] else 'full'}; written by `scripts/gpu_check.py`",
        "",
        "## race_matmul (C = A @ B, n x n, FP32 inputs)",
        "",
        "| n | AMP dtype | FP32 | TF32 | AMP | speedup vs FP32 (95% interval) | vs TF32 | AMP TFLOP/s |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def t(r, name):
        timing = r["timings"].get(name)
        return format_seconds(timing["median_s"]) if timing else "-"

    def x(value):
        return "-" if value is None else f"{value:.2f}x"

    def xi(r):
        """The speedup with its interval and outcome (files written before intervals existed: the speedup)."""
        iv = r.get("speedup_interval")
        if not iv:
            return x(r["speedup"])
        if iv["high"] == "inf":
            return f"{iv['ratio']:.2f}x (too few pairs)"
        return f"{iv['ratio']:.2f}x ({iv['low']:.2f}-{iv['high']:.2f}, {iv['outcome']})"

    for r in report["race_matmul"]:
        lines.append(
            f"| {r['params']['n']} | {r['dtype']} | {t(r, 'fp32')} | {t(r, 'tf32')} | {t(r, 'amp')} | "
            f"{xi(r)} | {x(r['speedup_vs_tf32'])} | {r['tflops']['amp']:.3g} |"
        )
    lines += [
        "",
        "## race_mlp (training steps of the seed's model)",
        "",
        "| width | batch | AMP dtype | FP32 | TF32 | AMP | speedup vs FP32 (95% interval) | vs TF32 | memory FP32 | memory AMP |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    from amp_lab.timing import format_bytes

    for r in report["race_mlp"]:
        mem = r.get("memory") or {}
        lines.append(
            f"| {r['params']['width']} | {r['params']['batch']} | {r['dtype']} | {t(r, 'fp32')} | {t(r, 'tf32')} | "
            f"{t(r, 'amp')} | {xi(r)} | {x(r['speedup_vs_tf32'])} | "
            f"{format_bytes(mem.get('fp32'))} | {format_bytes(mem.get('amp'))} |"
        )
    al = report["alignment"]
    lines += [
        "",
        "## Alignment",
        "",
        f"AMP ({al['dtype']}) matmul: {al['amp_tflops_aligned']:.3g} TFLOP/s at n = {al['n_aligned']}, "
        f"{al['amp_tflops_unaligned']:.3g} TFLOP/s at n = {al['n_unaligned']}.",
        "",
        "## Sweeps",
        "",
    ]
    for name, s in report["sweeps"].items():
        pairs = ", ".join(f"{n}: {v:.2f}x" for n, v in zip(s["sizes"], s["speedups"], strict=True))
        c = s["ceiling"]
        lines.append(f"- {name}: {pairs}; ceiling {c['vs_fp32']:.3g}x ({c['source']})")
    lines += ["", "## Autocast probe", ""]
    for device_type, p in report["autocast_probe"].items():
        if p.get("status") == "ok":
            counts = ", ".join(f"{k}: {v}" for k, v in sorted(p["policy_counts"].items()))
            lines.append(f"- {device_type} ({p.get('dtype')}): {len(p['ops'])} ops; {counts}")
        else:
            lines.append(f"- {device_type}: {p.get('status')} ({p.get('reason')})")
    lines += ["", f"Durations (s): {report['durations_s']}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="directory for the results files (default: docs/results/)")
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu to test this script")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test, not reference numbers")
    args = parser.parse_args(argv)

    os.environ.setdefault("AMP_LAB_PROGRESS", "0")
    import torch

    from amp_lab.device import get_device
    from amp_lab.race import RESULTS_SCHEMA, utc_now

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA GPU here (torch.cuda.is_available() is False), so there is nothing to check. "
            "Run it on a machine with an NVIDIA GPU, or pass --device cpu to test the script.",
            file=sys.stderr,
        )
        return 2
    try:
        dev = get_device(args.device)
    except ValueError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    if dev.type != "cuda" and args.out is None:
        print(
            f"gpu_check: --device {dev} only tests this script, and its numbers are not reference material "
            "for docs/results/: give --out DIR",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out) if args.out is not None else ROOT / "docs" / "results"
    sizes = TINY if dev.type == "cpu" else (QUICK if args.quick else FULL)

    began = time.perf_counter()
    machine = machine_info(dev)
    _log(f"gpu_check on {machine['gpu_name'] or dev} (torch {machine['torch']}, CUDA {machine['cuda_runtime']})")
    report = {
        "schema": RESULTS_SCHEMA,
        "date": utc_now(),
        "quick": bool(args.quick or dev.type == "cpu"),
        "machine": machine,
        **run_check(dev, sizes),
    }
    report["total_s"] = round(time.perf_counter() - began, 1)

    out.mkdir(parents=True, exist_ok=True)
    stem = f"gpu-check_{slug(machine['gpu_name'] or dev.type)}_{report['date'][:10].replace('-', '')}"
    if report["quick"]:
        stem += "_quick"
    json_path = out / f"{stem}.json"
    json_path.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    (out / f"{stem}.md").write_text(markdown(report), encoding="utf-8")
    _log(f"wrote {json_path} and {stem}.md in {report['total_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
