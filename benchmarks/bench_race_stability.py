"""Is the race's speedup stable?  (issue 12, ``06_timing_race``)

One configuration once read 1.32x, 0.94x and 1.07x in one run of notebook 06.  This script races the
**same configuration** ``--races`` times (default 5) in one process, each race sampling as notebook 06
does (until the speedup's 95% interval is about +-5% wide or the time budget is spent), and prints every
reported speedup with its interval, their median and their spread: the largest distance of one speedup
from the median, relative to the median.  Target: within +-10% (``--tolerance``) on an idle machine.

Then it runs ``bench_race_fidelity.py`` (the same timer against ``torch.utils.benchmark.Timer`` on the
same kernels, with the races' thread count) and prints its ratios, which must stay within 0.9-1.1.  The load average before and after
is printed: on a machine other programs are using, both targets can fail for reasons that are not the
timer's.

The configuration defaults to notebook 06's main race on this machine (``sweeps.sizes_for``): the MLP race
at its width and batch, with its budget.  Exit status 0 when both targets hold, 1 otherwise.

    python benchmarks/bench_race_stability.py [--kind mlp|matmul] [--width W --batch B | --n N]
        [--races 5] [--max-time-s S] [--threads N] [--fidelity-sizes 64 128 256] [--skip-fidelity]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("AMP_LAB_PROGRESS", "0")

from amp_lab import race, sweeps, timing  # noqa: E402
from amp_lab.device import amp_dtype, get_device  # noqa: E402
from amp_lab.dtypes import dtype_name, parse_dtype

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_race_fidelity  # noqa: E402


def _load() -> str:
    try:
        one, five, _ = os.getloadavg()
    except (AttributeError, OSError):
        return "n/a"
    return f"{one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def spread(speedups: list[float]) -> tuple[float, float]:
    """(median, largest |speedup - median| / median)."""
    med = statistics.median(speedups)
    return med, max(abs(s - med) for s in speedups) / med


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=["mlp", "matmul"], default="mlp")
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--n", type=int, default=None, help="matmul size (--kind matmul)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--races", type=int, default=5)
    parser.add_argument("--max-time-s", type=float, default=None, help="budget per race (default: notebook 06's)")
    parser.add_argument("--threads", type=int, default=None, help="default: notebook 06's (one thread on a CPU)")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--fidelity-sizes", type=int, nargs="+", default=None)
    parser.add_argument("--fidelity-rounds", type=int, default=3)
    parser.add_argument("--skip-fidelity", action="store_true")
    args = parser.parse_args(argv)

    dev = get_device(args.device)
    dtype = amp_dtype(dev) if args.dtype is None else parse_dtype(args.dtype)
    sizes = sweeps.sizes_for(dev, dtype)
    budget = dict(sizes.budget)
    if args.max_time_s is not None:
        budget["max_time_s"] = args.max_time_s
    if args.threads is not None:
        budget["num_threads"] = args.threads
    if args.kind == "mlp":
        width, batch = args.width or sizes.width, args.batch or sizes.batch
        what = f"race_mlp(width={width}, batch={batch})"

        def one():
            return race.race_mlp(width, batch, device=dev, dtype=dtype, memory=False, **budget)
    else:
        n = args.n or sizes.aligned_n
        what = f"race_matmul(n={n})"

        def one():
            return race.race_matmul(n, device=dev, dtype=dtype, **budget)

    print(f"{sizes.description}")
    print(f"racing {what}, AMP {dtype_name(dtype)} on {dev}, {args.races} times in one process; budget {budget}")
    print(f"load average before: {_load()}")
    print(f"{'race':>4} {'speedup':>9}  {'95% interval':<22} {'outcome':<18} {'rounds':>6} {'seconds':>8}")
    speedups = []
    ctx = None
    for i in range(args.races):
        start = time.perf_counter()
        r = one()
        seconds = time.perf_counter() - start
        e = r.speedup_interval
        ctx = r.context
        speedups.append(e.ratio)
        print(f"{i + 1:>4} {e.ratio:>8.3f}x  {e.ends_text():<22} {e.outcome:<18} {e.pairs:>6} {seconds:>8.1f}", flush=True)
    med, worst = spread(speedups)
    stable = worst <= args.tolerance
    print(
        f"median {med:.3f}x; speedups from {min(speedups):.3f}x to {max(speedups):.3f}x; "
        f"largest distance from the median {100 * worst:.1f}% (target within +-{100 * args.tolerance:.0f}%): "
        f"{'PASS' if stable else 'FAIL'}"
    )
    print(timing.describe_context(ctx))
    print(f"load average after: {_load()}")

    faithful = True
    if not args.skip_fidelity:
        print()
        fid_args = ["--rounds", str(args.fidelity_rounds), "--device", str(dev), "--dtype", dtype_name(dtype)]
        if args.fidelity_sizes:
            fid_args += ["--sizes", *map(str, args.fidelity_sizes)]
        threads = args.threads or budget.get("num_threads")  # the races' thread count (one on a CPU)
        if threads is not None:
            fid_args += ["--threads", str(threads)]
        rows = bench_race_fidelity.run(fid_args)
        faithful = all(ok for *_, ok in rows)
        print("fidelity ratios (race_matmul / torch.utils.benchmark): "
              + ", ".join(f"n={n}: {ratio:.3f}" for n, _a, _b, ratio, _ok in rows)
              + f" -> {'PASS' if faithful else 'FAIL'} (target 0.9-1.1)")  # fmt: skip
    return 0 if stable and faithful else 1


if __name__ == "__main__":
    sys.exit(main())
