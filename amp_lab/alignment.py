"""Why matrix dimensions should be multiples of 8 (taught in ``02_tensor_cores``): the alignment each
format needs, padding, the work partial tiles and partial waves waste, and a timing of ``n`` against
``n - 1`` on CUDA (CUDA events, warm-up, median)."""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field

import torch

from . import formats
from ._checks import MAX_REPEATS, check_int
from .device import amp_dtype, check_fits, get_device
from .dtypes import parse_dtype
from .text import Reading

__all__ = [
    "alignment_multiple",
    "pad_to_multiple",
    "A100_SMS",
    "tile_quantization",
    "padding_reading",
    "alignment_demo",
]


def alignment_multiple(fmt="fp16") -> int:
    """The dimension multiple that keeps rows 16-byte aligned for ``fmt``: 8 for FP16/BF16, 4 for
    TF32/FP32, 16 for FP8.  cuBLAS picks its fastest Tensor Core kernels when M, N and K (and the
    leading dimensions) are multiples of it."""
    f = formats.get_format(fmt)
    nbytes = 4 if f.torch_dtype is None else torch.empty(0, dtype=f.torch_dtype).element_size()
    return 16 // nbytes


def pad_to_multiple(n: int, multiple: int = 8) -> int:
    """The smallest multiple of ``multiple`` that is ``>= n`` (e.g. a vocabulary of 50257 -> 50264)."""
    n = check_int("n", n, minimum=0)
    multiple = check_int("multiple", multiple, minimum=1)
    return -(-n // multiple) * multiple


A100_SMS = 108  # streaming multiprocessors of an A100 (NVIDIA A100 whitepaper)


def tile_quantization(m: int, n: int, *, tile_m: int = 128, tile_n: int = 128, sms: int = A100_SMS) -> dict:
    """How much of a GEMM's work a partial tile or a partial wave wastes (``02_tensor_cores``).

    A GEMM kernel cuts the ``m×n`` output into tiles of ``tile_m×tile_n`` (128×128, 256×128 and
    64-wide tiles are common), one thread block each, and the GPU runs the tiles in *waves* of
    ``sms`` at a time (the simplest model: one tile per streaming multiprocessor, 108 on an A100).
    A dimension that is not a multiple of the tile leaves a partial tile that costs a full one
    (tile quantization); a tile count that is not a multiple of ``sms`` leaves the last wave
    partly idle (wave quantization).  This is the model of NVIDIA's "Matrix Multiplication
    Background" guide; real kernels choose their tiles per size, so it explains, not predicts.

    Returns ``tiles``, ``tile_efficiency`` (useful share of the tiles' work: ``m*n`` over
    ``tiles * tile_m * tile_n``), ``waves``, ``wave_efficiency`` (share of SM slots busy:
    ``tiles`` over ``waves * sms``) and their product ``efficiency``, with the arguments.
    Every argument is at most 2**31 (work is a handful of integer operations).
    """
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
    return {
        "m": m,
        "n": n,
        "tile_m": tile_m,
        "tile_n": tile_n,
        "sms": sms,
        "tiles": tiles,
        "tile_efficiency": tile_eff,
        "waves": waves,
        "wave_efficiency": wave_eff,
        "efficiency": tile_eff * wave_eff,
    }


def padding_reading(m: int, n: int, *, tile_n: int = 64) -> Reading:
    """What padding ``n`` to a multiple of ``tile_n`` instead of 8 gains in useful tile work, for an ``m×n``
    output in 128×``tile_n`` tiles (:func:`tile_quantization`): outcome ``tc.padding_worth_it`` (1 % or more)
    or ``tc.padding_small_gain``; facts ``n8`` and ``n_tile`` (the padded widths), ``useful_8``,
    ``useful_tile`` and ``gain`` (shares of the tiles' work).  ``m``, ``n`` and ``tile_n`` are at most 2**30."""
    m = check_int("m", m, minimum=1, maximum=1 << 30)
    n = check_int("n", n, minimum=1, maximum=1 << 30)
    tile_n = check_int("tile_n", tile_n, minimum=1, maximum=1 << 30)
    n8, n_tile = pad_to_multiple(n, 8), pad_to_multiple(n, tile_n)
    useful_8 = tile_quantization(m, n8, tile_n=tile_n)["tile_efficiency"]
    useful_tile = tile_quantization(m, n_tile, tile_n=tile_n)["tile_efficiency"]
    gain = useful_tile - useful_8
    facts = {
        "m": m,
        "n": n,
        "tile_n": tile_n,
        "n8": n8,
        "n_tile": n_tile,
        "useful_8": useful_8,
        "useful_tile": useful_tile,
        "gain": gain,
    }
    return Reading("tc.padding_worth_it" if gain >= 0.01 else "tc.padding_small_gain", (), facts)


def _generator_device(dev: torch.device) -> torch.device:
    """Where ``time_matmul`` draws its random operands: on a CUDA device itself (a CUDA generator
    draws there), anywhere else on the CPU, then moved (a CPU generator cannot draw on an Apple
    GPU, and torch's MPS generator gives other numbers than the CPU's)."""
    return dev if dev.type == "cuda" else torch.device("cpu")


def _matmul_operands(n: int, dtype: torch.dtype, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The two seeded ``n×n`` operands of ``time_matmul``, in ``dtype`` on ``dev``."""
    where = _generator_device(dev)
    g = torch.Generator(device=where).manual_seed(0)
    a = torch.randn(n, n, generator=g, device=where).to(dev, dtype)
    b = torch.randn(n, n, generator=g, device=where).to(dev, dtype)
    return a, b


def _time_matmul_bytes(n: int, dtype: torch.dtype) -> int:
    """Bytes ``time_matmul(n)`` needs at its peak: the two operands and the product in ``dtype``,
    plus the FP32 draw each operand is made from."""
    low = torch.empty(0, dtype=dtype).element_size()
    return n * n * (4 + 3 * low)


def _synchronizer(dev: torch.device):
    """Waits for the work queued on ``dev``: the CPU runs a matmul before returning, an Apple GPU
    (MPS) only queues it, so its clock must wait for ``torch.mps.synchronize()``."""
    if dev.type == "mps":
        return lambda: torch.mps.synchronize()
    return lambda: None


def _on_device(dev: torch.device):
    """Make ``dev`` the current CUDA device for a block: ``torch.cuda.Event.record()`` records on the
    *current* device's stream, which is not ``dev`` when ``dev`` is ``cuda:1``."""
    return torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()


def time_matmul(
    n: int, *, dtype=None, device=None, repeats: int = 20, warmup: int = 5, inner: int = 1
) -> dict:
    """Median time of an ``n×n @ n×n`` matmul in ``dtype`` (default ``amp_dtype(device)``): CUDA events
    around ``inner`` back-to-back matmuls after ``warmup`` untimed ones, ``repeats`` samples; elsewhere
    ``time.perf_counter`` (on an Apple GPU after waiting for the queued work).  Returns ``n``, ``dtype``,
    ``median_ms`` (per matmul), ``tflops`` and ``samples_ms``."""
    dev = get_device(device)
    dtype = amp_dtype(dev) if dtype is None else dtype
    samples = []
    with _on_device(dev), torch.inference_mode():
        a, b = _matmul_operands(n, dtype, dev)
        for _ in range(warmup):
            a @ b
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            for _ in range(repeats):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    a @ b
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / inner)
        else:
            sync = _synchronizer(dev)
            for _ in range(repeats):
                sync()
                t0 = time.perf_counter()
                for _ in range(inner):
                    a @ b
                sync()
                samples.append((time.perf_counter() - t0) * 1e3 / inner)
    median = statistics.median(samples)
    return {
        "n": n,
        "dtype": str(dtype).removeprefix("torch."),
        "median_ms": median,
        "tflops": 2.0 * n**3 / (median * 1e-3) / 1e12,
        "samples_ms": samples,
    }


INNER = 3  # back-to-back matmuls per sample of alignment_demo


@dataclass
class AlignmentDemo:
    """Result of :func:`alignment_demo`: ``reading`` says what was (or would be) measured; ``rows`` are
    :func:`time_matmul`'s results for ``n`` and ``n - 1`` (empty where no CUDA GPU was used)."""

    reading: Reading
    rows: list[dict] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        return bool(self.rows)

    def __str__(self) -> str:
        if not self.rows:
            return str(self.reading)
        lines = [f"{'n':>6}  {'multiple of 8':>13}  {'median ms':>9}  {'TFLOP/s':>8}"]
        for r in self.rows:
            aligned = "yes" if r["n"] % 8 == 0 else "no"
            lines.append(f"{r['n']:>6}  {aligned:>13}  {r['median_ms']:>9.3f}  {r['tflops']:>8.1f}")
        return "\n".join([str(self.reading), *lines])


def alignment_demo(
    n: int = 4096, *, dtype=None, device=None, repeats: int = 20, warmup: int = 5
) -> AlignmentDemo:
    """Time ``n×n`` against ``(n-1)×(n-1)`` matmuls on CUDA (CUDA events, warm-up, median).

    Without a CUDA device nothing is timed (CPU matmuls say nothing about Tensor Cores): the reading
    says what the measurement would show.  ``n`` is at most 2**15; ``warmup + 3 * repeats`` matmuls per
    size at most ``MAX_REPEATS``; a size the device's memory cannot hold is refused before anything is
    allocated.
    """
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
    facts = {
        "n": n,
        "n1": n - 1,
        "repeats": repeats,
        "multiple": alignment_multiple("fp16"),
        "device": dev.type,
    }
    if dev.type != "cuda":
        facts["dtype"] = str(amp_dtype("cuda") if torch.cuda.is_available() else torch.float16).removeprefix(
            "torch."
        )
        return AlignmentDemo(Reading("tc.alignment_skipped", ("tc.alignment_would_show",), facts))
    dtype = torch.float16 if dtype is None else dtype
    check_fits(_time_matmul_bytes(n, dtype), dev, f"alignment_demo(n={n})", "choose a smaller n")
    rows = [
        time_matmul(m, dtype=dtype, device=dev, repeats=repeats, warmup=warmup, inner=INNER)
        for m in (n, n - 1)
    ]
    a, b = rows
    facts |= {
        "gpu": torch.cuda.get_device_name(dev),
        "dtype": str(dtype).removeprefix("torch."),
        "work": b["n"] ** 3 / a["n"] ** 3,
        "time": b["median_ms"] / a["median_ms"],
    }
    return AlignmentDemo(Reading("tc.alignment_measured", ("tc.alignment_ratio",), facts), rows)
