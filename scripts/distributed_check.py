"""Measure notebook 10's mixed precision across processes at real sizes and write the results.
(``make distributed-check``)

Runs under ``torchrun`` on one machine, one process (rank) per GPU with NCCL, or CPU processes with gloo:

    torchrun --standalone --nproc-per-node N scripts/distributed_check.py [--quick] [--out DIR] [--backend B]
    python scripts/distributed_check.py --nproc N [--quick] [--out DIR] [--backend B]   # runs the line above

Every measurement calls the package's rank functions directly, the code notebook 10 runs in
``amp_lab.distributed.spawn``'s processes, here in torchrun's, at sizes a notebook cannot afford:

* ``allreduce``: ``distributed.allreduce_rank`` on 2**24 values per rank (2**16 with ``--quick``) in bfloat16,
  float16 and float32: each dtype's mean relative error against the float64 sum of the ranks' tensors;
* ``fsdp_bf16_fp32``, ``fsdp_fp16_fp32_inf``, ``fsdp_bf16_bf16``: ``distributed.fsdp_rank``, the course's MLP
  (hidden 1024; 64 with ``--quick``) on the digits under FSDP2's ``MixedPrecisionPolicy(param_dtype,
  reduce_dtype)``, with the dtypes read from the tensors; the float16 run has a ``ShardedGradScaler`` and an
  inf put into the last rank's gradients at the middle step, which every rank must skip;
* ``activation_bytes``: ``memory.activation_bytes`` of a larger MLP (hidden 1024, depth 4, batch 1024; 64, 2,
  64 with ``--quick``) in float32 and under autocast (the course's dtype on rank 0's device), on rank 0;
* ``bytes_per_parameter``: ``memory.bytes_per_parameter`` beside ZeRO's formulas at this world size, with
  the FSDP2 row measured on the ranks of ``fsdp_bf16_fp32``.

Each section is timed between two barriers (after ``torch.cuda.synchronize`` where the ranks compute on
CUDA).  The file also records the backend, the world size, each rank's device and GPU, and torch's version.

**Backend.** ``--backend auto`` (the default): NCCL when this machine has a GPU for every rank and torch has
NCCL, else gloo; ``amp_lab.distributed.choose_backend`` checks the choice.  **127.0.0.1 only.** The
documented command passes ``--standalone`` (torchrun's rendezvous on a free local port); the script then
points every rank at ``MASTER_ADDR=127.0.0.1`` and tells gloo (``GLOO_SOCKET_IFNAME``) or NCCL
(``NCCL_SOCKET_IFNAME``) to use the loopback interface, as ``spawn`` does.  It runs on one machine only.

**Files.** Rank 0 writes ``distributed-check_<gpu>_<YYYYMMDD>-<HHMMSS>[_quick].json`` (UTC; plus a ``.md``
summary; ``<gpu>`` as ``gpu_check.py`` names it, ``cpu`` for gloo on CPUs) in ``--out`` (default
``docs/results/``, which holds GPU runs: a gloo run must be given ``--out``), at the start and after every
section.  **Exit status**: 0 every section ok, 1 some section failed (the file holds the others), 2 cannot
run (bad arguments, one rank, several machines, not under torchrun without ``--nproc``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:  # run by path under torchrun, or loaded by path in a test
    sys.path.insert(0, str(HERE))

import gpu_check  # noqa: E402  (its file names, machine facts, atomic writes and exit statuses)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from amp_lab import distributed, memory  # noqa: E402
from amp_lab.device import amp_dtype, check_fits, synchronize  # noqa: E402
from amp_lab.dtypes import dtype_name  # noqa: E402
from amp_lab.intervals import jsonable  # noqa: E402
from amp_lab.models import make_mlp  # noqa: E402
from amp_lab.references import utc_now  # noqa: E402
from amp_lab.text import format_bytes, format_ratio  # noqa: E402

SCHEMA = "amp-lab/distributed-check/1"
PREFIX = "distributed-check"
PG_TIMEOUT_S = 600  # a collective that waits longer than this (a rank that died) fails instead of hanging
EXIT_OK, EXIT_FAILED, EXIT_CANNOT_RUN = gpu_check.EXIT_OK, gpu_check.EXIT_FAILED, gpu_check.EXIT_CANNOT_RUN

FULL = {
    "numel": 2**24,  # allreduce: values per rank
    "hidden": 1024,  # FSDP2's MLP, and bytes_per_parameter's
    "depth": 2,
    "steps": 20,
    "batch_size": 256,  # the global batch: rounded down to a multiple of the world size
    "lr": 1e-3,
    "init_scale": 2.0**16,
    "seed": 0,
    "activation_hidden": 1024,
    "activation_depth": 4,
    "activation_batch": 1024,
}
QUICK = {
    **FULL,
    "numel": 2**16,
    "hidden": 64,
    "steps": 4,
    "activation_hidden": 64,
    "activation_depth": 2,
    "activation_batch": 64,
}
ALLREDUCE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# allreduce_rank holds every rank's draws in float64, their rounding, its float64 copy and the exact sum: about
# 20 bytes per value per rank, in every process at once
ALLREDUCE_BYTES_PER_VALUE = 20
FSDP_RUNS = {  # section: (param_dtype, reduce_dtype, an inf on the last rank at the middle step)
    "fsdp_bf16_fp32": (torch.bfloat16, torch.float32, False),
    "fsdp_fp16_fp32_inf": (torch.float16, torch.float32, True),
    "fsdp_bf16_bf16": (torch.bfloat16, torch.bfloat16, False),
}
MEMORY_RUN = "fsdp_bf16_fp32"  # the FSDP2 row of bytes_per_parameter
SECTIONS = ("allreduce", *FSDP_RUNS, "activation_bytes", "bytes_per_parameter")


def _log(msg: str) -> None:
    print(msg, flush=True)


def _refuse(msg: str, code: int = EXIT_CANNOT_RUN) -> int:
    print(f"distributed_check: {msg}", file=sys.stderr, flush=True)
    return code


# --------------------------------------------------------------------------------------------
# Where the ranks run
# --------------------------------------------------------------------------------------------


def pick_backend(requested: str, local_world_size: int, cuda_devices: int, nccl_available: bool) -> str:
    """``auto``: NCCL when every rank on this machine has a GPU of its own and torch has NCCL, else gloo;
    ``gloo`` or ``nccl`` as asked, checked by :func:`amp_lab.distributed.choose_backend`."""
    if requested == "auto":
        requested = "nccl" if nccl_available and cuda_devices >= local_world_size else "gloo"
    return distributed.choose_backend(requested, local_world_size, cuda_devices, nccl_available)


def loopback_environment(backend: str) -> dict[str, str]:
    """The variables that keep the ranks on 127.0.0.1: the store's address, and the interface gloo or NCCL
    opens its connections on (where the loopback interface can be named)."""
    env = {"MASTER_ADDR": distributed.LOOPBACK}
    iface = distributed.loopback_interface()
    if iface:
        env["GLOO_SOCKET_IFNAME" if backend == "gloo" else "NCCL_SOCKET_IFNAME"] = iface
    return env


def torchrun_command(nproc: int, args: list[str]) -> list[str]:
    """The torchrun line ``--nproc N`` runs: this script on ``nproc`` local ranks, rendezvous on this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            str(Path(__file__).resolve()), *args]  # fmt: skip


class Context:
    """What every section gets: this rank, the group, its device and sizes; on rank 0 also the runs so far."""

    def __init__(self, rank: int, world_size: int, backend: str, sizes: dict):
        self.rank, self.world_size, self.backend, self.sizes = rank, world_size, backend, sizes
        self.device = distributed.rank_device()
        self.runs: dict[str, distributed.FSDPRun] = {}

    @property
    def batch_size(self) -> int:
        return self.world_size * max(1, self.sizes["batch_size"] // self.world_size)

    def synchronize(self) -> None:
        synchronize(self.device)


# --------------------------------------------------------------------------------------------
# The sections: each rank's part, then rank 0's record of what every rank returned
# --------------------------------------------------------------------------------------------


def rank_allreduce(ctx: Context):
    numel = ctx.sizes["numel"]
    local = int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size))
    check_fits(
        ALLREDUCE_BYTES_PER_VALUE * ctx.world_size * numel * local,
        "cpu",
        f"the all-reduce check ({ctx.world_size} ranks x {numel} values, drawn in float64 on every rank)",
        "run with --quick, or fewer ranks",
    )
    return distributed.allreduce_rank(ctx.rank, ctx.world_size, ALLREDUCE_DTYPES, numel, ctx.sizes["seed"])


def record_allreduce(ctx: Context, ranks: list) -> dict:
    errors = ranks[0]
    return {
        "numel": ctx.sizes["numel"],
        "seed": ctx.sizes["seed"],
        "world_size": ctx.world_size,
        "errors": errors,  # rank 0's reduced tensor against the float64 sum
        "errors_by_rank": ranks,
        "ranks_agree": all(r == errors for r in ranks),
        "vs_float32": {k: (v / errors["float32"] if errors["float32"] else None) for k, v in errors.items()},
    }


def inject_inf(ctx: Context, section: str) -> dict[int, int]:
    return {ctx.sizes["steps"] // 2: ctx.world_size - 1} if FSDP_RUNS[section][2] else {}


def rank_fsdp(ctx: Context, section: str):
    param_dtype, reduce_dtype, _ = FSDP_RUNS[section]
    s = ctx.sizes
    return distributed.fsdp_rank(
        ctx.rank, ctx.world_size, param_dtype, reduce_dtype, s["steps"], inject_inf(ctx, section), s["lr"],
        ctx.batch_size, s["hidden"], s["depth"], s["seed"], s["init_scale"],
    )  # fmt: skip


def record_fsdp(ctx: Context, section: str, ranks: list) -> dict:
    param_dtype, reduce_dtype, _ = FSDP_RUNS[section]
    run = distributed.FSDPRun.from_ranks(ranks, param_dtype, reduce_dtype)
    ctx.runs[section] = run
    reading = run.reading()
    s = ctx.sizes
    return jsonable(
        {
            "policy": run.policy,
            "dtypes": run.dtypes,  # read from the tensors
            "dtypes_by_rank": [r["dtypes"] for r in ranks],
            "inject_inf": {str(step): rank for step, rank in inject_inf(ctx, section).items()},
            "losses": run.losses,
            "skipped": run.skipped,
            "skipped_steps": [[i for i, x in enumerate(per_rank) if x] for per_rank in run.skipped],
            "scales": run.scales,
            "memory": run.memory,
            "num_parameters": run.num_parameters,
            "settings": {
                "steps": s["steps"],
                "hidden": s["hidden"],
                "depth": s["depth"],
                "batch_size": ctx.batch_size,
                "lr": s["lr"],
                "seed": s["seed"],
                "init_scale": s["init_scale"] if param_dtype == torch.float16 else None,
            },  # fmt: skip
            "reading": {
                "outcome": reading.outcome,
                "reasons": list(reading.reasons),
                "facts": reading.facts,
                "text": reading.text,
            },  # fmt: skip
        }
    )


def _bytes(a: memory.ActivationBytes) -> dict:
    return {
        "activations": a.activations,
        "parameter_copies": a.parameter_copies,
        "cast_bytes": a.cast_bytes,
        "total": a.total,
        "tensors": len(a.saved),
        "summary": str(a),
    }


def rank_activation_bytes(ctx: Context):
    if ctx.rank != 0:
        return None
    s = ctx.sizes
    model = make_mlp(
        hidden=s["activation_hidden"], depth=s["activation_depth"], seed=s["seed"], device=ctx.device
    )
    x = torch.randn(s["activation_batch"], 64, generator=torch.Generator().manual_seed(s["seed"])).to(
        ctx.device
    )
    dtype = amp_dtype(ctx.device)
    fp32, amp = memory.activation_bytes(model, x), memory.activation_bytes(model, x, dtype)
    return {
        "device": str(ctx.device),
        "model": {
            "num_features": 64,
            "num_classes": 10,
            "hidden": s["activation_hidden"],
            "depth": s["activation_depth"],
            "batch": s["activation_batch"],
        },  # fmt: skip
        "autocast_dtype": dtype_name(dtype),
        "float32": _bytes(fp32),
        "autocast": _bytes(amp),
        "autocast_over_float32": amp.total / fp32.total,
    }


def rank_bytes_per_parameter(ctx: Context):
    if ctx.rank != 0:
        return None
    run = ctx.runs.get(MEMORY_RUN)
    table = memory.bytes_per_parameter(ctx.world_size, dtype="bf16", hidden=ctx.sizes["hidden"],
                                       depth=ctx.sizes["depth"], fsdp=run)  # fmt: skip
    return {
        "world_size": table.world_size,
        "num_parameters": table.num_parameters,
        "fsdp_run": MEMORY_RUN if run is not None else None,
        "rows": [dataclasses.asdict(r) for r in table.rows],
        "table": [list(r) for r in table.table_rows()],
    }


RANK_FUNCTIONS = {
    "allreduce": rank_allreduce,
    **{name: (lambda ctx, name=name: rank_fsdp(ctx, name)) for name in FSDP_RUNS},
    "activation_bytes": rank_activation_bytes,
    "bytes_per_parameter": rank_bytes_per_parameter,
}
RECORDS = {
    "allreduce": record_allreduce,
    **{name: (lambda ctx, ranks, name=name: record_fsdp(ctx, name, ranks)) for name in FSDP_RUNS},
    "activation_bytes": lambda ctx, ranks: ranks[0],
    "bytes_per_parameter": lambda ctx, ranks: ranks[0],
}


# --------------------------------------------------------------------------------------------
# The report and its files (rank 0)
# --------------------------------------------------------------------------------------------


def rank_facts(ctx: Context) -> dict:
    cuda = ctx.device.type == "cuda"
    return {
        "rank": ctx.rank,
        "device": str(ctx.device),
        "gpu_name": torch.cuda.get_device_name(ctx.device) if cuda else None,
        "threads": torch.get_num_threads(),
    }


def peak_memory(ctx: Context) -> dict:
    """This rank's peak resident memory (``getrusage``; None where there is none, as on Windows) and, on CUDA,
    the most torch allocated on its GPU."""
    try:
        import resource
    except ImportError:
        rss = None
    else:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        rss = rss if sys.platform == "darwin" else rss * 1024
    cuda = torch.cuda.max_memory_allocated(ctx.device) if ctx.device.type == "cuda" else None
    return {"peak_rss_bytes": rss, "peak_cuda_allocated_bytes": cuda}


def machine_facts(ctx: Context) -> dict:
    """gpu_check.py's machine facts for rank 0's device, and every GPU this machine shows."""
    cuda = ctx.device.type == "cuda"
    info = gpu_check.machine_info(ctx.device, gpu_check.cuda_facts(ctx.device.index) if cuda else None)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    info["gpus"] = [torch.cuda.get_device_name(i) for i in range(count)]
    try:
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if cuda else None
    except Exception:  # a build without NCCL's version
        info["nccl"] = None
    return info


class Results:
    """The report and its two files, written again after every section (to a temporary file, then renamed)."""

    def __init__(self, out: Path, stem: str, report: dict):
        self.report, self.json_path, self.md_path = report, out / f"{stem}.json", out / f"{stem}.md"

    def save(self) -> None:
        gpu_check._write_atomic(self.json_path, json.dumps(self.report, indent=1, allow_nan=False) + "\n")
        try:
            md = markdown(self.report)
        except Exception as exc:  # the summary must never cost the data
            md = f"# Distributed check\n\nThe summary could not be written ({type(exc).__name__}: {exc}); see the JSON.\n"
        gpu_check._write_atomic(self.md_path, md)


def results_for(out: Path, report: dict) -> Results:
    gpu = report["machine"]["gpu_name"] if report["backend"] == "nccl" else "cpu"
    base = gpu_check.file_stem(gpu or "cpu", report["date"], report["quick"], prefix=PREFIX)
    stem = base
    for k in range(2, 100):  # two runs in the same second must not overwrite each other
        if not (out / f"{stem}.json").exists():
            break
        stem = f"{base}-{k}"
    return Results(out, stem, report)


def _rank_text(r: dict) -> str:
    peaks = [f"{what} {format_bytes(r[key])}" for what, key in (("peak resident", "peak_rss_bytes"),
             ("peak CUDA allocated", "peak_cuda_allocated_bytes")) if r.get(key) is not None]  # fmt: skip
    return f"{r['rank']}: {r['gpu_name'] or r['device']}" + (f" ({', '.join(peaks)})" if peaks else "")


def markdown(report: dict) -> str:
    m = report["machine"]
    where = f"{report['world_size']} x {m['gpu_name']}" if report["backend"] == "nccl" else "CPU processes"
    lines = [
        f"# Distributed check: {where} ({report['backend']}, {report['world_size']} ranks)",
        "",
        f"- date (UTC): {report['date']}; sizes: {report['mode']}; written by `scripts/distributed_check.py`",
        f"- backend {report['backend']} on {report['loopback']['MASTER_ADDR']}, world size {report['world_size']}; "
        f"torch {m['torch']}, CUDA runtime {m['cuda_runtime']}, NCCL {m.get('nccl')}, Python {m['python']}",
        "- ranks: " + "; ".join(_rank_text(r) for r in report.get("ranks", [])),
        f"- CPU: {m['cpu']}; GPUs on this machine: {', '.join(m.get('gpus') or []) or 'none'}",
        "",
        "| section | status | time (s) |",
        "| --- | --- | ---: |",
    ]
    for name, s in report["sections"].items():
        note = s["status"] + (f": {s['error']['type']} on rank {s['error']['rank']}: {s['error']['message']}"
                              if s.get("error") else "")  # fmt: skip
        lines.append(
            f"| {name} | {note.replace('|', '/').replace(chr(10), ' ')} | {s.get('duration_s', '-')} |"
        )
    ar = report.get("allreduce")
    if ar:
        lines += ["", f"## All-reduce (sum) of {ar['numel']:,} values per rank, against float64", "",
                  "| dtype | mean relative error | / float32's | every rank the same |", "| --- | ---: | ---: | --- |"]  # fmt: skip
        for name, err in ar["errors"].items():
            ratio = ar["vs_float32"][name]
            shown = "-" if ratio is None else format_ratio(ratio)
            lines.append(f"| {name} | {err:.3e} | {shown} | {ar['ranks_agree']} |")
    runs = {name: report[name] for name in FSDP_RUNS if report.get(name)}
    if runs:
        lines += ["", "## FSDP2 with MixedPrecisionPolicy (dtypes read from the tensors)", "",
                  "| run | param / reduce (policy) | master | compute | reduce | loss first -> last | skipped steps per rank |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        for name, r in runs.items():
            d, p = r["dtypes"], r["policy"]
            skipped = "; ".join(",".join(map(str, s)) or "none" for s in r["skipped_steps"])
            lines.append(
                f"| {name} | {p['param_dtype']} / {p['reduce_dtype']} | {d['master']} | {d['compute']} | "
                f"{d['reduce']} | {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f} | {skipped} |"
            )
        lines += [""] + [f"- {name}: {r['reading']['text']}" for name, r in runs.items()]
    ab = report.get("activation_bytes")
    if ab:
        mdl = ab["model"]
        lines += ["", f"## Saved for backward: MLP hidden {mdl['hidden']}, depth {mdl['depth']}, batch {mdl['batch']} "
                  f"on {ab['device']}", "",
                  f"- float32: {ab['float32']['summary']}", f"- {ab['autocast']['summary']}",
                  f"- autocast / float32: {format_ratio(ab['autocast_over_float32'])}"]  # fmt: skip
    bp = report.get("bytes_per_parameter")
    if bp:
        lines += ["", f"## Bytes per parameter on one rank of {bp['world_size']} ({bp['num_parameters']:,} parameters)",
                  "", "| setup | measured | formula | sharded |", "| --- | ---: | --- | --- |"]  # fmt: skip
        lines += [f"| {' | '.join(c.strip() for c in row)} |" for row in bp["table"]]
    total = report.get("total_s")
    lines += ["", f"Durations (s): {report.get('durations_s')}; total {total} s", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a check of the script, in seconds")
    parser.add_argument(
        "--out", default=None, help="directory for the results files (default: docs/results/)"
    )
    parser.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"),
                        help="auto (default): NCCL with one GPU per rank, else gloo")  # fmt: skip
    parser.add_argument("--nproc", type=int, default=None,
                        help="not under torchrun: launch N ranks through torchrun --standalone")  # fmt: skip
    return parser.parse_args(argv)


def launch(args, argv: list[str]) -> int:
    """``--nproc N`` outside torchrun: run torchrun on this script with the other arguments."""
    if args.nproc < 2:
        return _refuse(f"--nproc {args.nproc}: the check needs at least 2 ranks")
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            rest.append(a)
    command = torchrun_command(args.nproc, rest)
    _log("distributed_check: " + " ".join(command))
    return subprocess.call(command)


def main(argv: list[str] | None = None, *, log=_log) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse(argv)
    except SystemExit as exc:  # argparse has printed why
        return EXIT_CANNOT_RUN if exc.code else EXIT_OK
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        if args.nproc is None:
            return _refuse(
                "run it under torchrun (torchrun --standalone --nproc-per-node N scripts/distributed_check.py), "
                "or give --nproc N"
            )
        return launch(args, argv)
    if args.nproc is not None:
        return _refuse("--nproc launches torchrun itself; under torchrun leave it out")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    say = log if rank == 0 else (lambda msg: None)
    if world_size < 2:
        return _refuse("one rank has nothing to all-reduce or shard: give --nproc-per-node 2 or more")
    if local_world != world_size:
        return _refuse(f"this check runs on one machine; this run has {world_size // local_world} or more")
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        backend = pick_backend(args.backend, local_world, cuda, dist.is_nccl_available())
    except ValueError as exc:
        return _refuse(str(exc))
    if backend == "gloo" and args.out is None:
        return _refuse(
            "a gloo run measures CPU processes, and docs/results/ holds GPU runs (NCCL): give --out DIR"
        )
    out = Path(args.out) if args.out is not None else ROOT / "docs" / "results"
    sizes = QUICK if args.quick else FULL
    os.environ.setdefault("AMP_LAB_PROGRESS", "0")

    loopback = loopback_environment(backend)
    os.environ.update(loopback)
    began = time.perf_counter()
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device_id = torch.device("cuda", local_rank)
    else:
        device_id = None
    dist.init_process_group(backend, timeout=timedelta(seconds=PG_TIMEOUT_S), device_id=device_id)
    try:
        code = _run(Context(rank, world_size, backend, sizes), args, out, loopback, began, say)
        dist.barrier()  # rank 0 writes last: a rank that tore its group down while rank 0 still held its
        return code  # connections once aborted at exit ("terminate called without an active exception")
    finally:
        dist.destroy_process_group()


def _gather(value):
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def _error(rank: int, exc: BaseException) -> dict:
    return {
        "rank": rank,
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": traceback.format_exc(),
    }


def _run(ctx: Context, args, out: Path, loopback: dict, began: float, say) -> int:
    ranks = _gather(rank_facts(ctx))
    results = None
    if ctx.rank == 0:
        mode = "quick" if args.quick else "full"
        report = {
            "schema": SCHEMA,
            "date": utc_now(),
            "quick": bool(args.quick),
            "mode": mode,
            "launcher": "torchrun",
            "backend": ctx.backend,
            "world_size": ctx.world_size,
            "loopback": loopback,
            "machine": machine_facts(ctx),
            "ranks": ranks,
            "sizes": dict(ctx.sizes),
            "sections": {name: {"status": "pending"} for name in SECTIONS},
            "durations_s": {},
            "complete": False,
        }
        out.mkdir(parents=True, exist_ok=True)
        results = results_for(out, report)
        results.save()
        say(f"distributed_check: {ctx.world_size} ranks, {ctx.backend} on {distributed.LOOPBACK}, {mode} sizes, "
            f"torch {torch.__version__}; writing {results.json_path} (and .md) after every section")  # fmt: skip
    failed = []
    try:
        for name in SECTIONS:
            if results:
                results.report["sections"][name]["status"] = "running"
                results.save()  # a run killed now says which section it was in
            dist.barrier()
            start = time.perf_counter()
            try:
                value, error = RANK_FUNCTIONS[name](ctx), None
            except Exception as exc:  # recorded; the other ranks' results still come back
                value, error = None, _error(ctx.rank, exc)
            ctx.synchronize()
            gathered = _gather((value, error))
            duration = round(time.perf_counter() - start, 3)
            if results is None:
                continue
            status = results.report["sections"][name]
            errors = [e for _, e in gathered if e]
            if not errors:
                try:
                    results.report[name] = RECORDS[name](ctx, [v for v, _ in gathered])
                except Exception as exc:
                    errors = [_error(0, exc)]
            if errors:
                status.update(status="error", error=errors[0], errors=errors)
            else:
                status["status"] = "ok"
            status["duration_s"] = results.report["durations_s"][name] = duration
            if errors:
                failed.append(name)
                say(
                    f"{name}: FAILED on rank {errors[0]['rank']}: {errors[0]['type']}: {errors[0]['message']}"
                )
            else:
                say(f"{name}: ok in {duration} s")
            results.save()
        peaks = _gather(peak_memory(ctx))
        if results:
            for facts, peak in zip(results.report["ranks"], peaks, strict=True):
                facts.update(peak)
    finally:
        if results:
            results.report["total_s"] = round(time.perf_counter() - began, 1)
            results.save()
    if results is None:
        return EXIT_OK
    results.report["complete"] = True
    results.save()
    say(f"wrote {results.json_path} and {results.md_path.name} in {results.report['total_s']} s")
    if failed:
        return _refuse(
            f"{len(failed)} section(s) failed: {', '.join(failed)}. The file holds the others.", EXIT_FAILED
        )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
