"""Which MLP (width, batch) puts a training-step race past launch overhead on this GPU?  (CUDA only)

Races ``race.race_mlp`` (FP32 with TF32 off, TF32, AMP) for each AMP dtype at widths and batches from
notebook 06's old GPU default (4096, 1024) up to (8192, 8192), and prints per size: the speedup of AMP
over FP32 with its 95% interval, AMP against TF32, each contestant's median step time and TFLOP/s, the
regime ``timing.classify_regime`` names for each (launch-, memory- or compute-bound) and peak memory.
Target: the size notebook 06 uses on a GPU (``sweeps.race_sizes("cuda")``) shows AMP faster than FP32 with
an interval above 1.  ``docs/results/mlp-sizes_nvidia-h200_20261130.txt`` is its output on an H200.

Usage: ``python benchmarks/bench_gpu_mlp_sizes.py`` (exits 2 without a CUDA GPU).
"""

from __future__ import annotations

import os
import sys
import time

import torch

os.environ.setdefault("AMP_LAB_PROGRESS", "0")

from amp_lab import race, sweeps  # noqa: E402
from amp_lab.gpus import amp_dtype_for, bf16_hardware  # noqa: E402

SIZES = [(4096, 1024), (4096, 4096), (4096, 8192), (8192, 4096), (8192, 8192), (4096, 16384)]


def main() -> int:
    if not torch.cuda.is_available():
        print("bench_gpu_mlp_sizes: no CUDA GPU here; this benchmark measures GPU training steps only")
        return 2
    cap = torch.cuda.get_device_capability()
    dtypes = [torch.bfloat16, torch.float16] if bf16_hardware(cap) else [torch.float16]
    course = sweeps.race_sizes("cuda", amp_dtype_for("cuda", cap))
    print(f"{torch.cuda.get_device_name()} (sm_{cap[0]}{cap[1]}), torch {torch.__version__}; "
          f"notebook 06's MLP race on a GPU: width {course.width}, batch {course.batch}")
    start, course_ok = time.time(), []
    for dtype in dtypes:
        for width, batch in SIZES + [(course.width, course.batch)] * ((course.width, course.batch) not in SIZES):
            r = race.race_mlp(width, batch, dtype=dtype, memory=True, max_time_s=3.0)
            est = r.speedup_interval
            ms = {k: round(t.median * 1e3, 3) for k, t in r.timings.items()}
            print(f"{str(dtype):15s} width={width:5d} batch={batch:5d} speedup={r.speedup:.2f}x "
                  f"[{est.low:.2f},{est.high:.2f}] vs_tf32={r.speedup_vs_tf32} ms={ms} "
                  f"tflops={ {k: round(v, 1) for k, v in r.tflops.items()} } "
                  f"regimes={ {k: v.name for k, v in r.regimes.items()} } "
                  f"mem={ {k: v for k, v in (r.memory or {}).items() if k != 'method'} }", flush=True)
            if (width, batch) == (course.width, course.batch):
                course_ok.append(est.low > 1)
    print(f"total {time.time() - start:.1f} s")
    verdict = "PASS" if all(course_ok) else "FAIL"
    print(f"{verdict}: AMP beats FP32 with an interval above 1 at the course's GPU size "
          f"(width {course.width}, batch {course.batch}) for {sum(course_ok)} of {len(course_ok)} dtype(s)")
    return 0 if all(course_ok) else 1


if __name__ == "__main__":
    sys.exit(main())
