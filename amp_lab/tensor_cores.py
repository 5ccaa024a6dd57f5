"""What a Tensor Core computes, emulated (taught in ``02_tensor_cores``).

A Tensor Core computes ``D = A·B + C`` on a small tile, one MMA (matrix multiply-accumulate):
low-precision inputs (FP16, BF16, TF32, FP8), products formed exactly, and a running sum kept in
an accumulator (FP32, or FP16 where the library asks for it).  This module emulates that
arithmetic on any device with every rounding modelled exactly (see below for where hardware
differs), so a CPU-only learner can see why the accumulator's precision matters as the inner
dimension ``K`` grows:

* ``mma(A, B, C, inputs=, accumulate=)`` - the emulated multiply-accumulate; ``reference_mma``
  - the same product in float64.
* ``running_sum(values, accumulate=)`` - every partial sum of a sequential accumulation (the
  famous stall: adding 1.0 to an FP16 sum stops at 2048).
* ``stall_reading(n, accumulate)`` - where adding 1.0 ``n`` times stalls, as a :class:`~amp_lab.text.Reading`.
* ``accumulation_curve`` - relative error against float64 for every ``K`` up to ``k_max``;
  ``AccumulationCurve.output_errors`` the same error once the result is rounded to FP16/BF16, as an
  autocast matmul returns it, and ``AccumulationCurve.reading()`` the two accumulators compared.  The K
  slider over it is ``amp_lab.accumulation``'s; why dimensions should be multiples of 8 is ``amp_lab.alignment``'s.
* ``gpus.ACCUMULATE_RATES`` - datasheet rates of FP16 accumulation against FP32 accumulation
  (the same on data-centre parts, half on GeForce cards).
* ``generations_table()`` - Tensor Core generations from ``amp_lab.gpus.tensor_core_generation``
  plus per-clock throughput from NVIDIA's whitepapers.

The arithmetic model: inputs rounded to ``inputs`` (as ``formats.round_to`` does), every
product exact, then added one at a time in ``k`` order, each addition rounded once (to nearest,
ties to even) to the accumulator format.  Real Tensor Cores add several products at once and,
as Fasi, Higham, Mikaitis and Pranesh measured ("Numerical behavior of NVIDIA tensor cores",
PeerJ CS 2021), align and truncate the addends, so their last bits can differ from this model;
the lesson (the accumulator's precision decides how the error grows with ``K``) does not.

Which accumulator a real matmul uses is not autocast's choice: autocast only picks the input
dtype, and the library kernel (cuBLAS) picks the accumulator.  cuBLAS accumulates FP16/BF16 GEMMs
in FP32 by default, but PyTorch lets it reduce partial sums in reduced precision
(``torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction``, True by default), and
Hopper's FP8 GEMMs keep only about 14 bits in their accumulator (DeepSeek-V3 technical report,
2024).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import formats
from ._checks import (
    ArgumentTypeError,
    check_choice,
    check_float,
    check_int,
    check_seed,
)
from .device import check_fits, float64_on_cpu, float64_to, get_device
from .gpus import ARCHITECTURE_DETAILS, TENSOR_CORE_DETAILS, tensor_core_generation
from .text import Reading

__all__ = [
    "INPUT_FORMATS",
    "ACCUMULATE_FORMATS",
    "mma",
    "reference_mma",
    "running_sum",
    "first_stall",
    "AccumulationCurve",
    "accumulation_curve",
    "generations_table",
    "stall_reading",
]

# Inputs whose pairwise products fit float64 exactly (at most 26 significant bits each).
INPUT_FORMATS = ("fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2")
ACCUMULATE_FORMATS = ("fp32", "fp16", "bf16")

# Bounds on the emulation's work, checked before it starts.  The emulation adds one term at a time
# (a Python-level loop over K, each step a few numpy passes over an M×N tile): about 15 ns per
# element and 30 µs per step on a laptop core, so these limits keep any call within a few seconds.
MAX_MMA_WORK = 1 << 24  # M * N * K of one mma (a 256×256×256 product)
MAX_K = 1 << 16  # additions in one sequential sum: mma's K, running_sum's length, accumulation_curve's k_max
MAX_CURVE_ELEMENTS = 1 << 22  # batch * k_max of accumulation_curve (the default is 32 * 4096 = 2**17)


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``s = fl(a + b)`` and the exact error ``e`` with ``a + b == s + e`` (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _add_rounded(acc: np.ndarray, p: np.ndarray, f: formats.FloatFormat) -> np.ndarray:
    """``acc + p`` rounded once to ``f`` (correctly: the float64 sum plus its exact error)."""
    with np.errstate(all="ignore"):
        s, err = _two_sum(acc, p)
    return formats.round_array(s, f, err)


def _matrix(name: str, x, dev: torch.device) -> torch.Tensor:
    # real numbers only: a bool or complex matrix is refused (its imaginary part would be dropped)
    x = formats.real_tensor(x, name, f"{name} must be a 2-D tensor or nested list of numbers")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D (a matrix), got shape {tuple(x.shape)}")
    return x.to(dev).float()


def _operands(A, B, C, inputs, accumulate, device, work_limit: bool = False):
    dev = get_device(device)
    work = torch.device("cpu")
    check_choice("inputs", formats.get_format(inputs).name, INPUT_FORMATS)
    check_choice("accumulate", formats.get_format(accumulate).name, ACCUMULATE_FORMATS)
    A = _matrix("A", A, work)
    B = _matrix("B", B, work)
    if A.shape[1] != B.shape[0]:
        raise ValueError(
            f"A's columns must match B's rows (inner dimension K), got {tuple(A.shape)} and {tuple(B.shape)}"
        )
    M, N = A.shape[0], B.shape[1]
    if work_limit:
        K = A.shape[1]
        if K > MAX_K:
            raise ValueError(
                f"mma emulates one addition at a time, so K = {K:,} (A's columns) means {K:,} steps: the limit "
                f"is K <= {MAX_K:,} (2**16); use smaller inputs, or reference_mma / torch.matmul for big products"
            )
        if max(M, 1) * max(N, 1) * max(K, 1) > MAX_MMA_WORK:
            raise ValueError(
                f"mma emulates one addition at a time, so A {tuple(A.shape)} @ B {tuple(B.shape)} "
                f"(M*N*K = {M * N * K:,}) is too much work: the limit is M*N*K <= {MAX_MMA_WORK:,} (2**24); "
                "use smaller inputs (a tile such as 16×16×256 shows the same rounding), or reference_mma / "
                "torch.matmul for big products"
            )
    # float64 copies of A, B, C and the accumulator
    check_fits(
        8 * (M * A.shape[1] + A.shape[1] * N + 2 * M * N), work, "the emulated product", "use smaller inputs"
    )
    if C is None:
        C = torch.zeros(M, N, device=work)
    else:
        C = _matrix("C", C, work)
        if tuple(C.shape) != (M, N):
            raise ValueError(f"C must have shape {(M, N)} (rows of A, columns of B), got {tuple(C.shape)}")
    Ar = float64_on_cpu(formats.round_to(A, inputs)).numpy()
    Br = float64_on_cpu(formats.round_to(B, inputs)).numpy()
    return dev, Ar, Br, float64_on_cpu(C).numpy()


def mma(A, B, C=None, *, inputs="fp16", accumulate="fp32", device=None) -> torch.Tensor:
    """Emulate a Tensor Core's ``D = A·B + C``; returns float32 ``D`` on ``device``.

    ``A`` (M×K) and ``B`` (K×N) are rounded to ``inputs`` (one of ``INPUT_FORMATS``), ``C`` (M×N,
    default zeros) to the accumulator format ``accumulate`` (``"fp32"``, ``"fp16"``, ``"bf16"``).
    Starting from ``C``, the exact products ``A[:, k] * B[k, :]`` are added for ``k = 0 .. K-1``,
    each addition rounded once to the accumulator (see the module docstring for how this models
    real Tensor Cores).

    The emulation adds one term at a time, so its work is bounded before it starts: ``M*N*K`` at
    most :data:`MAX_MMA_WORK` (2**24) and ``K`` at most :data:`MAX_K` (2**16); a larger product
    is refused with a ``ValueError`` (use smaller inputs, or :func:`reference_mma`).  Bool and
    complex inputs are refused (a complex product's imaginary part has no place in a real format).
    """
    dev, Ar, Br, C = _operands(A, B, C, inputs, accumulate, device, work_limit=True)
    facc = formats.get_format(accumulate)
    acc = formats.round_array(C, facc)
    for k in range(Ar.shape[1]):
        acc = _add_rounded(acc, Ar[:, k : k + 1] * Br[k : k + 1, :], facc)  # products exact in float64
    return torch.from_numpy(acc).float().to(dev)


def reference_mma(A, B, C=None, *, inputs="fp16", device=None) -> torch.Tensor:
    """``A·B + C`` in float64 from the same rounded inputs: the reference ``mma`` is compared with.

    Returned on ``device``, except on an Apple GPU (MPS), which has no float64: there it stays on
    the CPU.  Compare with ``D.cpu().double()``, which works on every device.
    """
    dev, Ar, Br, C = _operands(A, B, C, inputs, "fp32", device)
    return float64_to(torch.from_numpy(Ar @ Br + C), dev)


def running_sum(values, accumulate="fp16", *, device=None) -> torch.Tensor:
    """Every partial sum of ``values`` added in order along the last dimension (float32 result).

    Each addition is rounded once to ``accumulate`` (any ``formats.FORMATS`` name); the values are
    used exactly as float32.  ``running_sum(torch.ones(3000), "fp16")`` stalls at 2048.

    Real values only (bool and complex are refused).  The sum runs one addition at a time, so
    the last dimension is at most :data:`MAX_K` (2**16) long and ``values`` holds at most
    :data:`MAX_MMA_WORK` (2**24) elements.
    """
    dev = get_device(device)
    f = formats.get_format(accumulate)
    values = formats.real_tensor(values, "values", "values must be a tensor or a list of numbers")
    if values.dim() == 0 or values.shape[-1] == 0:
        raise ValueError(
            f"values must have at least one element along the last dimension, got shape {tuple(values.shape)}"
        )
    if values.shape[-1] > MAX_K or values.numel() > MAX_MMA_WORK:
        raise ValueError(
            f"values of shape {tuple(values.shape)} is too long a sum to emulate one addition at a time: "
            f"the last dimension may be at most {MAX_K:,} (2**16) long and values at most {MAX_MMA_WORK:,} "
            "elements; use fewer values"
        )
    v = float64_on_cpu(values.float()).numpy()
    out = _accumulate(v, f)
    return torch.from_numpy(out).float().to(dev)


def _accumulate(p: np.ndarray, f: formats.FloatFormat) -> np.ndarray:
    """All partial sums of ``p`` along its last axis, each addition rounded once to ``f``."""
    if f.name == "fp32":
        p32 = p.astype(np.float32)
        if np.array_equal(p32, p, equal_nan=True):
            # Terms exact in float32 (products of FP16/BF16/TF32/FP8 inputs are): numpy's
            # accumulate adds them in order in IEEE float32, which is this model exactly.
            return np.add.accumulate(p32, axis=-1, dtype=np.float32).astype(np.float64)
    p = np.ascontiguousarray(np.moveaxis(p, -1, 0))  # one row per addition
    out = np.empty_like(p)
    acc = np.zeros(p.shape[1:], dtype=np.float64)
    for k in range(p.shape[0]):
        acc = _add_rounded(acc, p[k], f)
        out[k] = acc
    return np.moveaxis(out, 0, -1)


def first_stall(partial_sums) -> tuple[int, float] | None:
    """``(index, value)`` of the first addition that left a 1-D running sum unchanged, or None.

    The index counts additions from 1, so ``first_stall(running_sum(torch.ones(3000), "fp16"))``
    is ``(2049, 2048.0)``: the 2049th ``+ 1.0`` no longer changes the sum.  ``partial_sums`` must
    be 1-D (one running sum; for a batch, call it on each row): flattening several sums into one
    would report a "stall" where one row ends and the next begins.
    """
    t = formats.real_tensor(
        partial_sums, "partial_sums", "partial_sums must be a 1-D tensor or a list of numbers"
    )
    if t.dim() != 1:
        raise ValueError(
            f"partial_sums must be 1-D (one running sum), got shape {tuple(t.shape)}; "
            "for several sums, call first_stall on each row"
        )
    s = float64_on_cpu(t)
    if s.numel() < 2:
        return None
    same = torch.nonzero(s[1:] == s[:-1]).flatten()
    if same.numel() == 0:
        return None
    i = int(same[0]) + 1
    return i + 1, float(s[i])


def stall_reading(n: int = 3000, accumulate="fp16") -> Reading:
    """Add 1.0 ``n`` times in ``accumulate`` (:func:`running_sum`) and read where the sum stalls: outcome
    ``tc.stalls`` (facts ``index``, ``stalled``, ``precision`` and ``start`` = 2**precision, where the
    format's step becomes 2) or ``tc.no_stall``; ``final`` is the sum after ``n`` additions."""
    n = check_int("n", n, minimum=1, maximum=MAX_K)
    f = formats.get_format(accumulate)
    sums = running_sum(torch.ones(n), f)
    stall = first_stall(sums)
    facts = {
        "n": n,
        "label": f.label,
        "precision": f.precision,
        "start": 2**f.precision,
        "final": float(sums[-1]),
    }
    if stall is None:
        return Reading("tc.no_stall", (), facts)
    return Reading("tc.stalls", (), facts | {"index": stall[0], "stalled": stall[1]})


# --------------------------------------------------------------------------------------------
# Error against K
# --------------------------------------------------------------------------------------------


@dataclass
class AccumulationCurve:
    """Dot products of length 1..k_max accumulated in several formats (see ``accumulation_curve``).

    ``reference`` and ``partial[fmt]`` are (batch, k_max) float64 partial sums; ``errors[fmt]`` is
    the median over the batch of the relative error against ``reference``, for every ``K``.
    """

    inputs: str
    accumulators: tuple[str, ...]
    k_max: int
    reference: torch.Tensor
    partial: dict[str, torch.Tensor]
    errors: dict[str, torch.Tensor]
    low: float = 0.0
    high: float = 1.0

    def at(self, k: int) -> dict:
        """Numbers at ``K = k``: first dot product's values and median relative errors."""
        k = check_int("k", k, minimum=1, maximum=self.k_max)
        row = {"K": k, "reference": float(self.reference[0, k - 1])}
        for name in self.accumulators:
            row[f"{name}_value"] = float(self.partial[name][0, k - 1])
            row[f"{name}_error"] = float(self.errors[name][k - 1])
        return row

    def output_partial(self, accumulator: str, output="fp16") -> torch.Tensor:
        """``partial[accumulator]`` rounded once more to ``output`` (float64, same shape).

        Under ``torch.autocast`` a matmul's result is stored in the low dtype (FP16 or BF16)
        whatever the accumulator was, so its error includes this last rounding; it *is* torch's
        cast, ``partial.float().to(torch.float16)``.
        """
        name = check_choice("accumulator", formats.get_format(accumulator).name, self.accumulators)
        out = formats.get_format(output)
        check_choice("output", out.name, ACCUMULATE_FORMATS)
        return float64_on_cpu(formats.round_to(self.partial[name].float(), out))

    def output_errors(self, output="fp16") -> dict[str, torch.Tensor]:
        """Median relative error against float64, for every ``K``, of each accumulator's result
        rounded to ``output`` (see :meth:`output_partial`): the error an autocast matmul returns."""
        errors = {}
        for name in self.accumulators:
            out = self.output_partial(name, output)
            rel = (out - self.reference).abs() / self.reference.abs().clamp_min(
                torch.finfo(torch.float64).tiny
            )
            errors[name] = rel.median(dim=0).values
        return errors

    def reading(self, low: str = "fp16", high: str = "fp32") -> Reading:
        """The ``low`` accumulator's median error at ``K = k_max`` against the ``high`` one's, each also in
        units of its format's unit roundoff (``eps / 2``): outcome ``tc.accumulator_ratio``, facts ``ratio``,
        ``e_low``, ``e_high``, ``u_low``, ``u_high``."""
        fl, fh = formats.get_format(low), formats.get_format(high)
        e_low, e_high = float(self.errors[fl.name][-1]), float(self.errors[fh.name][-1])
        u_low, u_high = fl.eps / 2, fh.eps / 2
        facts = {
            "k": self.k_max,
            "low": fl.label,
            "high": fh.label,
            "e_low": e_low,
            "e_high": e_high,
            "u_low": u_low,
            "u_high": u_high,
            "in_u_low": e_low / u_low,
            "in_u_high": e_high / u_high,
            "u_ratio": u_low / u_high,
            "ratio": e_low / e_high,
        }
        return Reading("tc.accumulator_ratio", ("tc.accumulator_why",), facts)


def accumulation_curve(
    k_max: int = 4096,
    *,
    inputs="fp16",
    accumulators=("fp32", "fp16"),
    batch: int = 32,
    seed: int = 0,
    low: float = 0.0,
    high: float = 1.0,
    device=None,
) -> AccumulationCurve:
    """Accumulate ``batch`` random dot products of length ``k_max`` in each accumulator format.

    Inputs are uniform in ``[low, high)`` rounded to ``inputs``; the run is sequential in ``K``, so
    the partial sum after ``K`` terms *is* the length-``K`` dot product and one pass gives the
    whole curve.  The float64 reference is the cumulative sum of the exact products (its own
    rounding error, about ``K * 2**-53``, is far below anything plotted).
    """
    k_max = check_int("k_max", k_max, minimum=1, maximum=MAX_K)
    batch = check_int("batch", batch, minimum=1, maximum=4096)
    if batch * k_max > MAX_CURVE_ELEMENTS:
        raise ValueError(
            f"batch * k_max = {batch} * {k_max} = {batch * k_max:,} is more than the {MAX_CURVE_ELEMENTS:,} (2**22) "
            "terms accumulation_curve emulates; choose a smaller batch or k_max"
        )
    seed = check_seed("seed", seed)
    check_choice("inputs", formats.get_format(inputs).name, INPUT_FORMATS)
    accs = _accumulator_names(accumulators)
    low = check_float("low", low)
    high = check_float("high", high)
    if not high > low:
        raise ValueError(f"high must be > low, got low={low}, high={high}")
    get_device(device)  # validated for a uniform API; the emulation is exact float64 work on the CPU
    # a, b (float32), their float64 roundings, the products, the reference, and per accumulator its
    # partial sums, relative errors and a working copy (float64)
    check_fits(
        batch * k_max * (2 * 4 + 4 * 8 + 3 * 8 * len(accs)),
        torch.device("cpu"),
        f"accumulation_curve(k_max={k_max}, batch={batch})",
        "choose a smaller batch or k_max",
    )
    g = torch.Generator().manual_seed(seed)
    a = low + (high - low) * torch.rand(batch, k_max, generator=g)
    b = low + (high - low) * torch.rand(batch, k_max, generator=g)
    a64, b64 = float64_on_cpu(formats.round_to(a, inputs)), float64_on_cpu(formats.round_to(b, inputs))
    p = a64 * b64  # exact products
    reference = torch.cumsum(p, dim=1)
    partial, errors = {}, {}
    for name in accs:
        out = torch.from_numpy(_accumulate(p.numpy(), formats.get_format(name)))
        partial[name] = out
        rel = (out - reference).abs() / reference.abs().clamp_min(torch.finfo(torch.float64).tiny)
        errors[name] = rel.median(dim=0).values
    return AccumulationCurve(
        inputs=formats.get_format(inputs).name,
        accumulators=accs,
        k_max=k_max,
        reference=reference.cpu(),
        partial=partial,
        errors=errors,
        low=float(low),
        high=float(high),
    )


def _accumulator_names(accumulators) -> tuple[str, ...]:
    """Accumulator formats from one name or a non-empty list of distinct ones in ACCUMULATE_FORMATS."""
    if isinstance(accumulators, (str, formats.FloatFormat, torch.dtype)):
        accumulators = (accumulators,)
    elif not isinstance(accumulators, (list, tuple)):
        raise ArgumentTypeError(
            f"accumulators must be a format name or a list of them, got {type(accumulators).__name__}: "
            f"{accumulators!r:.80}"
        )
    accs = tuple(
        check_choice("accumulators", formats.get_format(a).name, ACCUMULATE_FORMATS) for a in accumulators
    )
    if not accs:
        raise ValueError("accumulators must name at least one of: " + ", ".join(ACCUMULATE_FORMATS))
    if len(set(accs)) != len(accs):
        raise ValueError(f"accumulators={accumulators!r} names a format twice; name each one once")
    return accs


# --------------------------------------------------------------------------------------------
# Generations
# --------------------------------------------------------------------------------------------


DEFAULT_CAPABILITIES = ((6, 0), (7, 0), (7, 5), (8, 0), (8, 9), (9, 0), (10, 0))


def generations_table(capabilities=DEFAULT_CAPABILITIES) -> list[dict]:
    """One row per compute capability: architecture, Tensor Core generation, precisions (from
    ``amp_lab.gpus.tensor_core_generation``) and per-clock throughput (``TENSOR_CORE_DETAILS`` by
    generation, ``ARCHITECTURE_DETAILS`` where an architecture differs from its generation's data-centre part)."""
    if isinstance(capabilities, (str, bytes)) or not isinstance(capabilities, (list, tuple)):
        raise ArgumentTypeError(
            f"capabilities must be a list of (major, minor) pairs such as [(8, 0), (9, 0)], got "
            f"{type(capabilities).__name__}: {capabilities!r:.80}"
        )
    if not capabilities:
        raise ValueError("capabilities must hold at least one (major, minor) pair")
    if len(capabilities) == 2 and all(isinstance(c, int) and not isinstance(c, bool) for c in capabilities):
        raise ValueError(
            f"capabilities={capabilities!r} is one capability; pass a list of them: [{tuple(capabilities)!r}]"
        )
    rows = []
    for cap in capabilities:
        tc = tensor_core_generation(cap)
        d = None
        if tc.generation is not None:
            d = ARCHITECTURE_DETAILS.get(tc.architecture, TENSOR_CORE_DETAILS.get(tc.generation))
        per_sm = (
            d.fma_per_tensor_core_per_clock * d.tensor_cores_per_sm
            if d and d.fma_per_tensor_core_per_clock and d.tensor_cores_per_sm
            else None
        )
        rows.append(
            {
                "capability": f"{tc.capability[0]}.{tc.capability[1]}",
                "architecture": tc.architecture,
                "generation": tc.generation if tc.generation is not None else "-",
                "precisions": ", ".join(tc.precisions).upper() if tc.precisions else "(no Tensor Cores)",
                "per clock (per Tensor Core)": d.per_clock if d else "-",
                "dense FP16 FMA/clock/SM": per_sm if per_sm else "-",
                "reference part": d.reference_part if d else "-",
                "MMA instruction": d.instruction if d else "-",
                "note": d.note if d else "FP16 runs on ordinary CUDA cores",
            }
        )
    return rows
