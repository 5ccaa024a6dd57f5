"""Do ``race_matmul`` and ``race_elementwise`` measure what ``torch.utils.benchmark`` measures?  (issues 7
and 15, ``06_timing_race``)

For each size, in one run, this script measures the same two kernels twice:

* with ``amp_lab.race.race_matmul(n)`` (``--kind matmul``, the default) or
  ``amp_lab.race.race_elementwise(numel)`` (``--kind elementwise``): the course's timer (warm-up,
  interleaved samples, median);
* with ``torch.utils.benchmark.Timer(...).blocked_autorange()``, an independent harness, given the
  **same thread count** (``Timer`` would otherwise use one thread) and the same operands:
  ``A @ B`` in FP32, and ``A @ B`` under ``torch.autocast`` (casts included); or
  ``torch.add(a, b, out=c)`` on FP32 tensors and on the same values stored in the 16-bit dtype.  The two
  Timers take turns in short runs whose samples are merged, so a change of load hits both.

It prints both speedups (race_matmul: the median of its per-round FP32/AMP ratios, sampled until the
95% interval is about +-5% wide or ``--max-time-s`` is spent; Timer: FP32 median / AMP median) and their
ratio, and passes when they agree within the tolerance (default +-10%).  Each size is measured in ``--rounds`` alternating rounds
and the medians over rounds are compared, so a burst of noise from other programs lands on both
harnesses.  Exit status 0 when every size agrees, 1 otherwise.

Defaults suit the device: on a CPU small sizes (low precision is 40-70x slower than FP32 on
CPUs without AVX512-BF16/AMX, so n = 256 already takes tens of ms per AMP call); on CUDA larger.

    python benchmarks/bench_race_fidelity.py [--sizes 64 128 256] [--threads N] [--rounds 3]
    python benchmarks/bench_race_fidelity.py --kind elementwise [--sizes 1048576 16777216] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys

os.environ.setdefault("AMP_LAB_PROGRESS", "0")

import torch  # noqa: E402
from torch.utils import benchmark  # noqa: E402

from amp_lab import hardware, race, roofline, text, timing  # noqa: E402
from amp_lab.device import amp_dtype, get_device  # noqa: E402
from amp_lab.dtypes import dtype_name, parse_dtype

AMP_STMT = "with torch.autocast(device_type, dtype=dtype):\n    A @ B"


def timer_speedup(n, dev, dtype, threads, min_run_time, chunks, kind="matmul") -> tuple[float, float, float]:
    """FP32 median, AMP median and their ratio, measured by torch.utils.benchmark.Timer.

    The two Timers take turns in ``chunks`` short ``blocked_autorange`` runs whose samples are
    merged (``benchmark.Measurement.merge``), so a change in the machine's load between the FP32 and
    the AMP measurement does not land on one of them only, the same reason ``race`` interleaves.
    """
    if kind == "elementwise":
        a, b = roofline._elementwise_operands(n, dev)  # the very operands race_elementwise adds
        env = {"torch": torch, "a": a, "b": b, "c": torch.empty_like(a), "al": a.to(dtype), "bl": b.to(dtype),
               "cl": torch.empty(n, dtype=dtype, device=dev)}  # fmt: skip
        stmts = ("torch.add(a, b, out=c)", "torch.add(al, bl, out=cl)")
    else:
        A, B = race._operands(n, dev)  # the very operands race_matmul multiplies
        env = {"A": A, "B": B, "torch": torch, "dtype": dtype, "device_type": dev.type}
        stmts = ("A @ B", AMP_STMT)
    fp32 = benchmark.Timer(stmts[0], globals=env, num_threads=threads, label="fp32", sub_label=f"size {n}")
    amp = benchmark.Timer(stmts[1], globals=env, num_threads=threads, label="amp", sub_label=f"size {n}")
    runs = {"fp32": [], "amp": []}
    for _ in range(chunks):
        tf32_off = hardware.tf32_matmul(False) if dev.type == "cuda" else contextlib.nullcontext()
        with tf32_off:  # race_matmul's FP32 contestant runs with TF32 off as well
            runs["fp32"].append(fp32.blocked_autorange(min_run_time=min_run_time / chunks))
        runs["amp"].append(amp.blocked_autorange(min_run_time=min_run_time / chunks))
    t_fp32 = benchmark.Measurement.merge(runs["fp32"])[0].median
    t_amp = benchmark.Measurement.merge(runs["amp"])[0].median
    return t_fp32, t_amp, t_fp32 / t_amp


def main(argv=None) -> int:
    return 1 if any(not ok for *_, ok in run(argv)) else 0


def run(argv=None) -> list[tuple[int, float, float, float, bool]]:
    """Measure, print, and return ``(n, race speedup, Timer speedup, ratio, within tolerance)`` per size."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=("matmul", "elementwise"), default="matmul",
                        help="race_matmul (sizes are n) or race_elementwise (sizes are numel)")
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None, help="bf16 or fp16 (default: the device's AMP dtype)")
    parser.add_argument("--threads", type=int, default=None, help="default: torch.get_num_threads()")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=15, help="race_matmul: at least this many rounds")
    parser.add_argument("--min-sample-s", type=float, default=0.02, help="race_matmul: shortest sample (s)")
    parser.add_argument("--target-rel-width", type=float, default=0.1, help="race_matmul: interval to sample down to")
    parser.add_argument("--max-time-s", type=float, default=5.0, help="race_matmul: time budget per race (s)")
    parser.add_argument("--min-run-time", type=float, default=0.5, help="Timer.blocked_autorange per kernel (s)")
    parser.add_argument("--chunks", type=int, default=5, help="alternating Timer runs per kernel and round")
    parser.add_argument("--tolerance", type=float, default=0.10)
    args = parser.parse_args(argv)

    dev = get_device(args.device)
    dtype = amp_dtype(dev) if args.dtype is None else parse_dtype(args.dtype)
    threads = args.threads or torch.get_num_threads()
    if args.kind == "elementwise":
        sizes = args.sizes or ((2**24, 2**26, 2**28) if dev.type == "cuda" else (2**20, 2**22, 2**24))
    else:
        sizes = args.sizes or ((1024, 2048, 4096) if dev.type == "cuda" else (64, 128, 256))
    racer = roofline.race_elementwise if args.kind == "elementwise" else race.race_matmul
    ctx = timing.timing_context(dev)
    print(
        f"{racer.__name__} fidelity on {dev} ({ctx['device_name']}), AMP dtype {dtype_name(dtype)}, "
        f"{threads} threads for both harnesses, torch {torch.__version__}, load average {ctx['load_avg_1min']}"
    )
    print(f"{'size':>9} {'round':>5} {'race FP32':>11} {'race AMP':>11} {'race x':>9} "
          f"{'Timer FP32':>11} {'Timer AMP':>11} {'Timer x':>9}")  # fmt: skip
    rows = []
    for n in sizes:
        ours, theirs = [], []
        for rnd in range(args.rounds):
            r = racer(
                n, device=dev, dtype=dtype, num_threads=threads, repeats=args.repeats, min_sample_s=args.min_sample_s,
                target_rel_width=args.target_rel_width, max_time_s=args.max_time_s,
            )  # fmt: skip
            t_fp32, t_amp, s_timer = timer_speedup(n, dev, dtype, threads, args.min_run_time, args.chunks, args.kind)
            ours.append(r.speedup)
            theirs.append(s_timer)
            print(
                f"{n:>9} {rnd + 1:>5} {text.format_seconds(r.fp32.median):>11} {text.format_seconds(r.amp.median):>11} "
                f"{r.speedup:>8.4g}x {text.format_seconds(t_fp32):>11} {text.format_seconds(t_amp):>11} {s_timer:>8.4g}x",
                flush=True,
            )
        a, b = statistics.median(ours), statistics.median(theirs)
        ratio = a / b
        ok = abs(ratio - 1) <= args.tolerance
        rows.append((n, a, b, ratio, ok))
    print()
    print(f"{'size':>9} {racer.__name__:>16} {'Timer':>10} {'ratio':>7}  verdict (within +-{100 * args.tolerance:.0f}%)")
    for n, a, b, ratio, ok in rows:
        print(f"{n:>9} {a:>15.4g}x {b:>9.4g}x {ratio:>7.3f}  {'PASS' if ok else 'FAIL'}")
    load = timing.timing_context(dev)["load_avg_1min"]
    if dev.type == "cpu" and load is not None and load > (os.cpu_count() or 1):
        print(
            f"note: load average {load} on {os.cpu_count()} cores: other programs compete for the CPU, so both "
            "harnesses are noisy (multi-threaded kernels stall when their threads are descheduled); "
            "compare on a quiet machine, or with --threads 1."
        )
    return rows


if __name__ == "__main__":
    sys.exit(main())
