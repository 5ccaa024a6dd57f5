"""Why matrix dimensions should be multiples of 8 (``02_tensor_cores``): the alignment each format needs,
padding, the work partial tiles and partial waves waste, and a timing of ``n`` against ``n - 1`` on CUDA."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from . import formats
from . import timing as _timing
from ._checks import MAX_REPEATS, MAX_SECONDS, check_float, check_int
from .device import amp_dtype, check_fits, get_device
from .dtypes import dtype_name, parse_dtype
from .text import Reading
from .timing import DEFAULT_BUDGET_S, check_estimate, op_maker

A100_SMS = 108  # streaming multiprocessors of an A100 (NVIDIA A100 whitepaper)
INNER = 3  # back-to-back matmuls per sample of alignment_demo


def alignment_multiple(fmt="fp16") -> int:
    """The dimension multiple that keeps rows 16-byte aligned for ``fmt``: 8 for FP16/BF16, 4 for TF32/FP32,
    16 for FP8 (cuBLAS picks its fastest Tensor Core kernels when M, N and K are multiples of it)."""
    f = formats.get_format(fmt)
    return 16 // (4 if f.torch_dtype is None else f.torch_dtype.itemsize)


def pad_to_multiple(n: int, multiple: int = 8) -> int:
    """The smallest multiple of ``multiple`` that is ``>= n`` (e.g. a vocabulary of 50257 -> 50264)."""
    n = check_int("n", n, minimum=0)
    multiple = check_int("multiple", multiple, minimum=1)
    return -(-n // multiple) * multiple


def tile_quantization(m: int, n: int, *, tile_m: int = 128, tile_n: int = 128, sms: int = A100_SMS) -> dict:
    """How much of an ``m×n`` GEMM's work partial tiles and a partial last wave waste: ``tile_m×tile_n`` tiles
    in waves of ``sms`` (NVIDIA's "Matrix Multiplication Background" model).  Arguments <= 2**31."""
    limit = 1 << 31
    m = check_int("m", m, minimum=1, maximum=limit)
    n = check_int("n", n, minimum=1, maximum=limit)
    tile_m = check_int("tile_m", tile_m, minimum=1, maximum=limit)
    tile_n = check_int("tile_n", tile_n, minimum=1, maximum=limit)
    sms = check_int("sms", sms, minimum=1, maximum=limit)
    tiles = -(-m // tile_m) * -(-n // tile_n)
    waves = -(-tiles // sms)
    tile_eff = m * n / (tiles * tile_m * tile_n)
    wave_eff = tiles / (waves * sms)
    out = {"m": m, "n": n, "tile_m": tile_m, "tile_n": tile_n, "sms": sms, "tiles": tiles}
    out |= {"tile_efficiency": tile_eff, "waves": waves, "wave_efficiency": wave_eff}
    return out | {"efficiency": tile_eff * wave_eff}


def padding_reading(m: int, n: int, *, tile_n: int = 64) -> Reading:
    """What padding ``n`` to a multiple of ``tile_n`` instead of 8 gains in useful tile work (128×``tile_n``
    tiles): outcome ``tc.padding_worth_it`` (1 % or more) or ``tc.padding_small_gain``.  Arguments <= 2**30."""
    m = check_int("m", m, minimum=1, maximum=1 << 30)
    n = check_int("n", n, minimum=1, maximum=1 << 30)
    tile_n = check_int("tile_n", tile_n, minimum=1, maximum=1 << 30)
    n8, n_tile = pad_to_multiple(n, 8), pad_to_multiple(n, tile_n)
    useful_8 = tile_quantization(m, n8, tile_n=tile_n)["tile_efficiency"]
    useful_tile = tile_quantization(m, n_tile, tile_n=tile_n)["tile_efficiency"]
    gain = useful_tile - useful_8
    facts = {"m": m, "n": n, "tile_n": tile_n, "n8": n8, "n_tile": n_tile}
    facts |= {"useful_8": useful_8, "useful_tile": useful_tile, "gain": gain}
    return Reading("tc.padding_worth_it" if gain >= 0.01 else "tc.padding_small_gain", (), facts)


def _matmul_operands(n: int, dtype: torch.dtype, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The two seeded ``n×n`` operands of :func:`time_matmul`, drawn on ``dev``."""
    g = torch.Generator(device=dev).manual_seed(0)
    return tuple(torch.randn(n, n, generator=g, device=dev).to(dtype) for _ in range(2))


def time_matmul(n: int, *, dtype, device, repeats: int = 20, warmup: int = 5, inner: int = 1) -> dict:
    """Median time of an ``n×n @ n×n`` matmul on a CUDA ``device``: CUDA events around ``inner`` back-to-back
    matmuls after ``warmup`` untimed ones, ``repeats`` samples.  Returns ``n``, ``dtype``, ``median_ms`` (per
    matmul), ``tflops`` and ``samples_ms``."""
    samples = []
    # Event.record() records on the *current* device's stream: make ``device`` current
    with torch.cuda.device(device), torch.inference_mode():
        a, b = _matmul_operands(n, dtype, device)
        for _ in range(warmup):
            a @ b
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                a @ b
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / inner)
    median = statistics.median(samples)
    tflops = 2.0 * n**3 / (median * 1e-3) / 1e12
    return {"n": n, "dtype": dtype_name(dtype), "median_ms": median, "tflops": tflops, "samples_ms": samples}


@dataclass
class AlignmentDemo:
    """Result of :func:`alignment_demo`: its ``reading``, and :func:`time_matmul`'s rows for ``n`` and ``n - 1``
    (empty where no CUDA GPU was used)."""

    reading: Reading
    rows: list[dict] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [str(self.reading)]
        if self.rows:
            lines.append(f"{'n':>6}  {'multiple of 8':>13}  {'median ms':>9}  {'TFLOP/s':>8}")
        for r in self.rows:
            aligned = "yes" if r["n"] % 8 == 0 else "no"
            lines.append(f"{r['n']:>6}  {aligned:>13}  {r['median_ms']:>9.3f}  {r['tflops']:>8.1f}")
        return "\n".join(lines)


def alignment_demo(
    n: int = 4096,
    *,
    dtype=None,
    device=None,
    repeats: int = 20,
    warmup: int = 5,
    budget_s: float | None = None,
) -> AlignmentDemo:
    """Time ``n×n`` against ``(n-1)×(n-1)`` matmuls on CUDA; elsewhere nothing is timed (CPU matmuls say
    nothing about Tensor Cores) and the reading says what it would show.  ``n`` <= 2**15, ``warmup + 3 *
    repeats`` <= ``MAX_REPEATS``; a size the device cannot hold, or one whose matmuls are estimated past
    ``budget_s`` (default 30 s), is refused before its operands are allocated."""
    dev = get_device(device)
    n = check_int("n", n, minimum=9, maximum=1 << 15)
    repeats = check_int("repeats", repeats, minimum=1, maximum=MAX_REPEATS)
    warmup = check_int("warmup", warmup, minimum=0, maximum=MAX_REPEATS)
    if warmup + repeats * INNER > MAX_REPEATS:
        raise ValueError(
            f"warmup + {INNER} * repeats = {warmup + repeats * INNER:,} matmuls is more than MAX_REPEATS = "
            f"{MAX_REPEATS:,}; choose fewer repeats"
        )
    if dtype is not None:
        dtype = parse_dtype(dtype, allowed=(torch.float16, torch.bfloat16))
    if budget_s is not None:
        budget_s = check_float("budget_s", budget_s, ge=1.0, le=MAX_SECONDS)
    facts = {"n": n, "n1": n - 1, "repeats": repeats, "multiple": alignment_multiple("fp16")}
    facts["device"] = dev.type
    if dev.type != "cuda":
        facts["dtype"] = dtype_name(amp_dtype("cuda") if torch.cuda.is_available() else torch.float16)
        return AlignmentDemo(Reading("tc.alignment_skipped", ("tc.alignment_would_show",), facts))
    dtype = dtype or torch.float16
    # the two operands and the product in dtype, plus the FP32 draw of each operand
    check_fits(n * n * (4 + 3 * dtype.itemsize), dev, f"alignment_demo(n={n})", "choose a smaller n")
    call_s = _timing.calibrated_seconds(op_maker(dev, dtype, cast=True), n, dev)  # both sizes as n, at most
    planned = 2 * (warmup + repeats * INNER) * call_s
    fix, basis = "choose a smaller n or fewer repeats", "its matmul timed at small sizes, scaled by its work"
    check_estimate(f"alignment_demo(n={n})", planned, budget_s or DEFAULT_BUDGET_S, fix, basis)
    a, b = rows = [
        time_matmul(m, dtype=dtype, device=dev, repeats=repeats, warmup=warmup, inner=INNER)
        for m in (n, n - 1)
    ]
    facts |= {"gpu": torch.cuda.get_device_name(dev), "dtype": dtype_name(dtype)}
    facts |= {"work": b["n"] ** 3 / a["n"] ** 3, "time": b["median_ms"] / a["median_ms"]}
    return AlignmentDemo(Reading("tc.alignment_measured", ("tc.alignment_ratio",), facts), rows)
