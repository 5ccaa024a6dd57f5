"""Overhead of amp_lab's DynamicLossScaler versus torch.amp.GradScaler in a full training step.

A full step is: zero_grad, forward, loss, ``scaler.scale(loss).backward()``, ``scaler.step(opt)``,
``scaler.update()``, on an MLP with many parameter tensors (default 60 Linear layers: 120
tensors), so that per-tensor costs of the scaler show.  The forward pass runs in FP32 by default:
on a CPU without FP16/BF16 hardware, low-precision matmuls are so slow that they would hide
the scaler entirely (``--autocast`` runs it under autocast anyway).

The two scalers run in alternating blocks, and the script prints the median step time of
each and their ratio (target: ours / GradScaler <= 1.2 on CPU), plus the same for the
scaler's own work alone: ``unscale_`` (inf/NaN check and unscaling) and ``update``.

Usage: ``python benchmarks/bench_scaler_overhead.py [--layers 60] [--width 64] [--batch 64]
[--steps 200] [--device cpu] [--autocast] [--threads N] [--optimizer adam|sgd]`` (on a shared machine ``--threads 1``
avoids threads waiting for each other, which adds noise far larger than the scaler).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from amp_lab.device import amp_dtype, get_device, synchronize
from amp_lab.scaling import DynamicLossScaler


def make_model(layers: int, width: int, device) -> torch.nn.Module:
    torch.manual_seed(0)
    mods = []
    for _ in range(layers - 1):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    mods.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*mods).to(device)


def step_times(scaler, model, opt, X, y, steps, device, autocast_dtype) -> tuple[list[float], list[float]]:
    """Seconds per full training step, and per scaler-only part (unscale_ + update)."""
    full, own = [], []
    for _ in range(steps):
        synchronize(device)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(
            device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None
        ):
            out = model(X)
        loss = torch.nn.functional.cross_entropy(out.float(), y)
        scaler.scale(loss).backward()
        synchronize(device)
        t1 = time.perf_counter()
        scaler.unscale_(opt)
        synchronize(device)
        t2 = time.perf_counter()
        scaler.step(opt)
        synchronize(device)
        t3 = time.perf_counter()
        scaler.update()
        synchronize(device)
        t4 = time.perf_counter()
        full.append(t4 - t0)
        own.append((t2 - t1) + (t4 - t3))
    return full, own


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=60)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200, help="timed steps per scaler (in blocks)")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--device", default=None)
    parser.add_argument("--autocast", action="store_true", help="run the forward pass under autocast")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("AMP_LAB_PROGRESS", "0")

    device = get_device(args.device)
    autocast_dtype = amp_dtype(device) if args.autocast else None
    torch.manual_seed(0)
    X = torch.randn(args.batch, args.width, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)

    runs = {}
    for name, make_scaler in [
        ("GradScaler", lambda: torch.amp.GradScaler(device.type, init_scale=2.0**16, growth_interval=100)),
        ("ours", lambda: DynamicLossScaler(init_scale=2.0**16, growth_interval=100)),
    ]:
        model = make_model(args.layers, args.width, device)
        if args.optimizer == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        else:
            opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
        runs[name] = (make_scaler(), model, opt, [], [])
    num_tensors = len(list(runs["ours"][1].parameters()))

    per_block = max(1, args.steps // args.blocks)
    for scaler, model, opt, _, _ in runs.values():  # warm-up
        step_times(scaler, model, opt, X, y, 10, device, autocast_dtype)
    for _ in range(args.blocks):
        for scaler, model, opt, full, own in runs.values():
            f, o = step_times(scaler, model, opt, X, y, per_block, device, autocast_dtype)
            full += f
            own += o

    print(
        f"device={device} threads={torch.get_num_threads()} parameter tensors={num_tensors} "
        f"batch={args.batch} width={args.width} autocast={autocast_dtype} optimizer={args.optimizer}"
    )
    med = {name: (statistics.median(r[3]), statistics.median(r[4])) for name, r in runs.items()}
    for name, (full, own) in med.items():
        print(f"{name:>10}: full step {full * 1e3:8.3f} ms   scaler's own work {own * 1e3:8.3f} ms")
    ratio = med["ours"][0] / med["GradScaler"][0]
    own_ratio = med["ours"][1] / med["GradScaler"][1]
    print(f"ratio full step ours / GradScaler: {ratio:.3f} (target <= 1.2)")
    print(f"ratio scaler-only ours / GradScaler: {own_ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
