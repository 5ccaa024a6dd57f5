"""Latency of the loss-scale slider of notebook 03 (target: median <= 100 ms per move).

Builds ``ranges.scale_explorer`` over the notebook's gradients (the activation gradients of the
trained digits MLP, about 235,000 values) and moves the slider the way a learner does: one step at a
time with the arrow keys, up from 2^0 to the slider's top (where most values overflow) and back down.  Each move runs the real callback
(range_report of the scaled values, readout HTML, moving the histogram, re-rendering the
FigurePane's PNG), timed from setting ``slider.value`` until the callback returns.

Usage: ``python benchmarks/bench_scale_slider.py [--moves N] [--synthetic]``.  ``--synthetic`` uses
log-uniform random values of the same size instead of training the model (no data needed).
Prints the median and 90th percentile of the wall time, the split between computing and rendering,
the median CPU time of the process (the cost without competing processes), and whether the median
meets the target.  Timings are noisy on a shared machine; nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("AMP_LAB_PROGRESS", "0")
os.environ.setdefault("MPLBACKEND", "Agg")

import torch  # noqa: E402

from amp_lab import ranges  # noqa: E402
from amp_lab.device import get_device  # noqa: E402

TARGET_MS = 100.0


def gradients(synthetic: bool):
    if synthetic:
        gen = torch.Generator().manual_seed(0)
        n = 235_000
        x = torch.exp2(torch.empty(n).uniform_(-45, -5, generator=gen))
        x[torch.rand(n, generator=gen) < 0.3] = 0.0
        return {"synthetic": x}
    from amp_lab.gradients import digits_gradients

    return digits_gradients(device=get_device("cpu")).activation_grads


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=96, help="slider moves to time (default 96)")
    parser.add_argument("--synthetic", action="store_true", help="random values instead of the trained MLP")
    args = parser.parse_args(argv)

    grads = gradients(args.synthetic)
    explorer = ranges.scale_explorer(grads, "fp16")
    values = sum(t.numel() for t in grads.values())

    top = explorer.slider.max
    path = list(range(1, top + 1)) + list(range(top - 1, -1, -1))  # up to the top and back, step by step
    moves = [path[i % len(path)] for i in range(args.moves)]
    explorer.slider.value = 0
    total, cpu, render = [], [], []
    original_refresh = explorer.pane.refresh

    def timed_refresh():
        t0 = time.perf_counter()
        out = original_refresh()
        render.append(time.perf_counter() - t0)
        return out

    explorer.pane.refresh = timed_refresh
    for k in moves:
        c0, t0 = time.process_time(), time.perf_counter()
        explorer.slider.value = k
        total.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    explorer.pane.refresh = original_refresh

    med = statistics.median(total) * 1e3
    med_render = statistics.median(render) * 1e3
    print(
        f"scale slider over {values} values, fp16, 2^0 to 2^{top}, {len(total)} moves, "
        f"torch threads: {torch.get_num_threads()}"
    )
    print(
        f"callback median: {med:.1f} ms   p90: {percentile(total, 0.9) * 1e3:.1f} ms   "
        f"(render median {med_render:.1f} ms, compute + readout {med - med_render:.1f} ms)"
    )
    # CPU time of this process: what the callback costs when the machine is not shared
    # (wall time above includes waiting for cores that other processes hold).
    print(f"callback CPU time median: {statistics.median(cpu) * 1e3:.1f} ms")
    print(
        f"target <= {TARGET_MS:.0f} ms: {'met' if med <= TARGET_MS else 'NOT met'} "
        f"(median / target = {med / TARGET_MS:.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
