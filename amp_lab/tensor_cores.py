"""A Tensor Core emulated exactly (``02_tensor_cores``): exact products added in ``k`` order, each addition
rounded once (real ones add several at once and truncate, Fasi et al. 2021); running sums, generations; and
(11) an accumulator of few bits promoted to FP32 every N_C products (:func:`limited_accumulation_matmul`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import formats
from ._checks import (
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_int_sequence,
    check_numel,
    check_seed,
)
from .device import check_fits, float64_on_cpu, float64_to, get_device
from .gpus import ARCHITECTURE_DETAILS, TENSOR_CORE_DETAILS, tensor_core_generation
from .text import Reading

# Inputs whose pairwise products fit float64 exactly (at most 26 significant bits each).
INPUT_FORMATS = ("fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2")
ACCUMULATE_FORMATS = ("fp32", "fp16", "bf16")

# The emulation adds one term at a time (a Python loop over K): these keep any call within a few seconds.
MAX_MMA_WORK = 1 << 24  # M * N * K of one mma, elements of one running_sum
MAX_K = 1 << 16  # additions in one sequential sum
MAX_CURVE_ELEMENTS = 1 << 22  # batch * k_max of accumulation_curve


def _add_rounded(acc: np.ndarray, p: np.ndarray, f: formats.FloatFormat) -> np.ndarray:
    """``acc + p`` rounded once to ``f``: the float64 sum and its exact error (Knuth's TwoSum), rounded."""
    with np.errstate(all="ignore"):
        s = acc + p
        bb = s - acc
        err = (acc - (s - bb)) + (p - bb)
    return formats.round_array(s, f, err)


def _accumulate(p: np.ndarray, f: formats.FloatFormat) -> np.ndarray:
    """All partial sums of ``p`` along its last axis, each addition rounded once to ``f``."""
    p32 = p.astype(np.float32)
    if f.name == "fp32" and np.array_equal(p32, p, equal_nan=True):
        # terms exact in float32: numpy adds them in order in IEEE float32, which is this model exactly
        return np.add.accumulate(p32, axis=-1, dtype=np.float32).astype(np.float64)
    p = np.moveaxis(p, -1, 0)  # one row per addition
    out = np.empty_like(p)
    acc = np.zeros(p.shape[1:], dtype=np.float64)
    for k in range(p.shape[0]):
        out[k] = acc = _add_rounded(acc, p[k], f)
    return np.moveaxis(out, 0, -1)


def _operands(A, B, C, inputs, device, limit_work: bool):
    """``device``, and A, B, C as float64 numpy arrays, A and B rounded to ``inputs``; all checked."""
    dev = get_device(device)
    check_choice("inputs", formats.get_format(inputs).name, INPUT_FORMATS)
    mats = {}
    for name, x in (("A", A), ("B", B), ("C", C)):
        if x is not None or name != "C":
            x = formats.real_tensor(x, name, f"{name} must be a 2-D tensor or nested list of numbers")
            if x.dim() != 2:
                raise ValueError(f"{name} must be 2-D (a matrix), got shape {tuple(x.shape)}")
            mats[name] = x  # cast only once sized: an expanded view's storage says nothing of its work
    A, B = mats["A"], mats["B"]
    (M, K), N = A.shape, B.shape[1]
    if K != B.shape[0]:
        raise ValueError(
            f"A's columns must match B's rows (inner dimension K), got {tuple(A.shape)} and {tuple(B.shape)}"
        )
    if limit_work and (K > MAX_K or max(M, 1) * max(N, 1) * max(K, 1) > MAX_MMA_WORK):
        raise ValueError(
            f"mma emulates one addition at a time, so A {tuple(A.shape)} @ B {tuple(B.shape)} is too much work: "
            f"the limits are K <= {MAX_K:,} (2**16) and M*N*K <= {MAX_MMA_WORK:,} (2**24); use smaller inputs "
            "(a 16×16×256 tile shows the same rounding), or reference_mma / torch.matmul for big products"
        )
    if "C" in mats and tuple(mats["C"].shape) != (M, N):
        raise ValueError(
            f"C must have shape {(M, N)} (rows of A, columns of B), got {tuple(mats['C'].shape)}"
        )
    check_fits(8 * (M * K + K * N + 2 * M * N), "cpu", "the emulated product", "use smaller inputs")
    mats = {name: x.float() for name, x in mats.items()}
    C = mats.get("C", torch.zeros(M, N))
    Ar, Br = (float64_on_cpu(formats.round_to(x, inputs)).numpy() for x in (A, B))
    return dev, Ar, Br, float64_on_cpu(C).numpy()


def mma(A, B, C=None, *, inputs="fp16", accumulate="fp32", device=None) -> torch.Tensor:
    """Emulate a Tensor Core's ``D = A·B + C`` (float32 ``D`` on ``device``): A and B rounded to ``inputs``, C
    to ``accumulate``, exact products added in ``k`` order.  ``K`` <= 2**16 and ``M*N*K`` <= 2**24."""
    facc = formats.get_format(accumulate)
    check_choice("accumulate", facc.name, ACCUMULATE_FORMATS)
    dev, Ar, Br, C = _operands(A, B, C, inputs, device, limit_work=True)
    acc = formats.round_array(C, facc)
    for k in range(Ar.shape[1]):
        acc = _add_rounded(acc, Ar[:, k : k + 1] * Br[k : k + 1, :], facc)  # products exact in float64
    return torch.from_numpy(acc).float().to(dev)


def reference_mma(A, B, C=None, *, inputs="fp16", device=None) -> torch.Tensor:
    """``A·B + C`` in float64 from the same rounded inputs, on ``device`` (on the CPU for MPS, which has no
    float64: compare with ``D.cpu().double()``)."""
    dev, Ar, Br, C = _operands(A, B, C, inputs, device, limit_work=False)
    return float64_to(torch.from_numpy(Ar @ Br + C), dev)


def running_sum(values, accumulate="fp16", *, device=None) -> torch.Tensor:
    """Every partial sum of float32 ``values`` along the last dimension (<= 2**16 long, <= 2**24 elements),
    each addition rounded once to ``accumulate``: ``running_sum(torch.ones(3000), "fp16")`` stops at 2048."""
    dev = get_device(device)
    f = formats.get_format(accumulate)
    values = formats.real_tensor(values, "values", "values must be a tensor or a list of numbers")
    if values.dim() == 0 or values.shape[-1] == 0:
        raise ValueError(
            f"values must have at least one element along the last dimension, got shape {tuple(values.shape)}"
        )
    if values.shape[-1] > MAX_K or values.numel() > MAX_MMA_WORK:
        raise ValueError(
            f"values of shape {tuple(values.shape)} is too long a sum to emulate one addition at a time: the "
            f"last dimension may be at most {MAX_K:,} long and values at most {MAX_MMA_WORK:,} elements"
        )
    out = _accumulate(float64_on_cpu(values.float()).numpy(), f)
    return torch.from_numpy(out).float().to(dev)


def first_stall(partial_sums) -> tuple[int, float] | None:
    """``(index, value)`` of the first addition (counted from 1) that left a 1-D running sum unchanged, or
    None: ``first_stall(running_sum(torch.ones(3000), "fp16"))`` is ``(2049, 2048.0)``."""
    t = formats.real_tensor(
        partial_sums, "partial_sums", "partial_sums must be a 1-D tensor or a list of numbers"
    )
    if t.dim() != 1:
        raise ValueError(f"partial_sums must be 1-D (one running sum), got shape {tuple(t.shape)}")
    s = float64_on_cpu(check_numel("partial_sums", t, MAX_MMA_WORK, "pass one running_sum's output"))
    same = torch.nonzero(s[1:] == s[:-1]).flatten()
    if same.numel() == 0:
        return None
    i = int(same[0]) + 1
    return i + 1, float(s[i])


def stall_reading(n: int = 3000, accumulate="fp16") -> Reading:
    """Add 1.0 ``n`` times in ``accumulate`` and read where the sum stalls: outcome ``tc.stalls`` (facts
    ``index``, ``stalled``, ``precision``, ``start`` = 2**precision) or ``tc.no_stall``; ``final`` is the sum."""
    n = check_int("n", n, minimum=1, maximum=MAX_K)
    f = formats.get_format(accumulate)
    sums = running_sum(torch.ones(n), f)
    stall = first_stall(sums)
    facts = {"n": n, "label": f.label, "precision": f.precision, "start": 2**f.precision}
    facts["final"] = float(sums[-1])
    if stall is None:
        return Reading("tc.no_stall", (), facts)
    return Reading("tc.stalls", (), facts | {"index": stall[0], "stalled": stall[1]})


# torch's switches for what FP16 and BF16 matmuls on CUDA add their products in (any build of torch reads them)
MATMUL_FLAGS = (
    "allow_fp16_accumulation",
    "allow_fp16_reduced_precision_reduction",
    "allow_bf16_reduced_precision_reduction",
)


def matmul_flags() -> tuple[Reading, ...]:
    """02: each of :data:`MATMUL_FLAGS`, read live from ``torch.backends.cuda.matmul``, and what its value does:
    outcome ``tc.fp16_accumulation_on``/``_off`` or ``tc.split_k_on``/``_off`` (facts ``flag``, ``value``,
    ``label``)."""
    readings = []
    for flag in MATMUL_FLAGS:
        value = bool(getattr(torch.backends.cuda.matmul, flag))
        kind = "fp16_accumulation" if flag == "allow_fp16_accumulation" else "split_k"
        facts = {"flag": flag, "value": value, "label": "BF16" if "bf16" in flag else "FP16"}
        readings.append(Reading(f"tc.{kind}_{'on' if value else 'off'}", (), facts))
    return tuple(readings)


def _median_error(out: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Median over the batch of the relative error of ``out`` against ``reference``, for every ``K``."""
    rel = (out - reference).abs() / reference.abs().clamp_min(torch.finfo(torch.float64).tiny)
    return rel.median(dim=0).values


@dataclass
class AccumulationCurve:
    """Dot products of length 1..k_max in several accumulators: (batch, k_max) float64 partial sums
    ``reference`` and ``partial[fmt]``, and ``errors[fmt]``, the median relative error for every ``K``."""

    inputs: str
    accumulators: tuple[str, ...]
    k_max: int
    reference: torch.Tensor
    partial: dict[str, torch.Tensor]
    errors: dict[str, torch.Tensor]

    def at(self, k: int) -> dict:
        """Numbers at ``K = k``: the first dot product's values and the median relative errors."""
        k = check_int("k", k, minimum=1, maximum=self.k_max)
        row = {"K": k, "reference": float(self.reference[0, k - 1])}
        for name in self.accumulators:
            row[f"{name}_value"] = float(self.partial[name][0, k - 1])
            row[f"{name}_error"] = float(self.errors[name][k - 1])
        return row

    def output_errors(self, output="fp16") -> dict[str, torch.Tensor]:
        """:attr:`errors` of each accumulator's result rounded once more to ``output``, as an autocast matmul
        stores it (torch's cast): the error an autocast matmul returns."""
        return {
            name: _median_error(float64_on_cpu(formats.round_to(out.float(), output)), self.reference)
            for name, out in self.partial.items()
        }

    def reading(self, low: str = "fp16", high: str = "fp32") -> Reading:
        """The ``low`` accumulator's median error at ``K = k_max`` against the ``high`` one's, also in units of
        each format's unit roundoff (``eps / 2``): outcome ``tc.accumulator_ratio``."""
        fl, fh = formats.get_format(low), formats.get_format(high)
        e_low, e_high = float(self.errors[fl.name][-1]), float(self.errors[fh.name][-1])
        u_low, u_high = fl.eps / 2, fh.eps / 2
        facts = {"k": self.k_max, "low": fl.label, "high": fh.label, "e_low": e_low, "e_high": e_high}
        facts |= {"u_low": u_low, "u_high": u_high, "in_u_low": e_low / u_low, "in_u_high": e_high / u_high}
        facts |= {"u_ratio": u_low / u_high, "ratio": e_low / e_high}
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
    """Accumulate ``batch`` random dot products of length ``k_max`` (inputs uniform in ``[low, high)``
    rounded to ``inputs``) in each accumulator format.  The run is sequential in ``K``, so one pass gives the
    whole curve; the reference is the float64 cumulative sum of the exact products."""
    k_max = check_int("k_max", k_max, minimum=1, maximum=MAX_K)
    batch = check_int("batch", batch, minimum=1, maximum=4096)
    if batch * k_max > MAX_CURVE_ELEMENTS:
        raise ValueError(
            f"batch * k_max = {batch} * {k_max} = {batch * k_max:,} is more than the {MAX_CURVE_ELEMENTS:,} "
            "(2**22) terms accumulation_curve emulates; choose a smaller batch or k_max"
        )
    seed = check_seed("seed", seed)
    check_choice("inputs", formats.get_format(inputs).name, INPUT_FORMATS)
    if isinstance(accumulators, (str, formats.FloatFormat, torch.dtype)):
        accumulators = (accumulators,)
    check_instance("accumulators", accumulators, (list, tuple), "a format name or a list of them")
    accs = tuple(
        check_choice("accumulators", formats.get_format(a).name, ACCUMULATE_FORMATS) for a in accumulators
    )
    if not accs or len(set(accs)) != len(accs):
        raise ValueError(
            f"accumulators must name at least one of {ACCUMULATE_FORMATS}, none twice; got {accs}"
        )
    low, high = check_float("low", low), check_float("high", high)
    if not high > low:
        raise ValueError(f"high must be > low, got low={low}, high={high}")
    get_device(device)  # checked for a uniform API; the emulation is float64 work on the CPU
    need = batch * k_max * (2 * 4 + 4 * 8 + 3 * 8 * len(accs))
    what = f"accumulation_curve(k_max={k_max}, batch={batch})"
    check_fits(need, "cpu", what, "choose a smaller batch or k_max")
    g = torch.Generator().manual_seed(seed)
    a, b = (low + (high - low) * torch.rand(batch, k_max, generator=g) for _ in range(2))
    p = float64_on_cpu(formats.round_to(a, inputs)) * float64_on_cpu(formats.round_to(b, inputs))  # exact
    reference = torch.cumsum(p, dim=1)
    partial = {name: torch.from_numpy(_accumulate(p.numpy(), formats.get_format(name))) for name in accs}
    return AccumulationCurve(
        inputs=formats.get_format(inputs).name,
        accumulators=accs,
        k_max=k_max,
        reference=reference,
        partial=partial,
        errors={name: _median_error(out, reference) for name, out in partial.items()},
    )


DEFAULT_CAPABILITIES = ((6, 0), (7, 0), (7, 5), (8, 0), (8, 9), (9, 0), (10, 0))


def generations_table(capabilities=DEFAULT_CAPABILITIES) -> list[dict]:
    """One row per compute capability: architecture, Tensor Core generation and precisions
    (``gpus.tensor_core_generation``) and per-clock throughput (``gpus.TENSOR_CORE_DETAILS``)."""
    check_instance(
        "capabilities", capabilities, (list, tuple), "a list of (major, minor) pairs such as [(8, 0), (9, 0)]"
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
        cores = d and d.fma_per_tensor_core_per_clock and d.tensor_cores_per_sm  # per SM, where known
        rows.append(
            {
                "capability": f"{tc.capability[0]}.{tc.capability[1]}",
                "architecture": tc.architecture,
                "generation": tc.generation if tc.generation is not None else "-",
                "precisions": ", ".join(tc.precisions).upper() if tc.precisions else "(no Tensor Cores)",
                "per clock (per Tensor Core)": d.per_clock if d else "-",
                "dense FP16 FMA/clock/SM": d.fma_per_tensor_core_per_clock * cores if cores else "-",
                "reference part": d.reference_part if d else "-",
                "MMA instruction": d.instruction if d else "-",
                "note": d.note if d else "FP16 runs on ordinary CUDA cores",
            }
        )
    return rows


# ------------------------------------------------------------------------------------------------------------
# An accumulator that keeps too few bits (11: FP8 GEMMs on Hopper, DeepSeek-V3 section 3.3)
# ------------------------------------------------------------------------------------------------------------

MAX_MANTISSA_BITS = 52  # float64's fraction bits: there the model is plain float64 summation


def round_accumulator(x, mantissa_bits: int) -> torch.Tensor:
    """The rounding :func:`limited_accumulation_matmul` applies to its running sum after each addition:
    float64 ``x`` truncated (toward zero) to ``mantissa_bits`` fraction bits, by clearing the float64 bits
    below them; inf and NaN pass.  ``round_accumulator(torch.tensor([1.75]), 1)`` is 1.5.  (Notebook 11.)"""
    t = formats.real_tensor(x, "x", "x must be a tensor, a number or a list of numbers")
    mantissa_bits = check_int("mantissa_bits", mantissa_bits, minimum=1, maximum=MAX_MANTISSA_BITS)
    t = check_numel("x", t, MAX_MMA_WORK, "round fewer values at once")
    out = np.asarray(_truncate(float64_on_cpu(t).numpy(), mantissa_bits))  # (numpy makes a 0-d a scalar)
    return float64_to(torch.from_numpy(out), t.device)


def _truncate(x: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """float64 ``x`` chopped to ``mantissa_bits`` fraction bits: a float64 is sign, exponent, 52 fraction
    bits, so clearing the low ``52 - mantissa_bits`` of its bit pattern truncates its magnitude."""
    return (x.view(np.int64) & ~np.int64((1 << (52 - mantissa_bits)) - 1)).view(np.float64)


def limited_accumulation_matmul(a, b, mantissa_bits: int, promote_every: int | None = None) -> torch.Tensor:
    """``a @ b`` (float32, on ``a``'s device) through an accumulator that keeps ``mantissa_bits`` fraction
    bits (float32 keeps 23), the model of an FP8 Tensor Core that DeepSeek-V3 measured on H800s (about 14
    bits; a max relative error near 2% at K = 4096).  ``a`` and ``b`` are taken as float32, so each product
    is exact in float64; the products are added in ``k`` order, each addition formed in float64 and then
    truncated by :func:`round_accumulator`.  Truncation, not rounding to nearest: a Tensor Core aligns the
    addends to the largest exponent and drops the bits shifted out below its kept width (Fasi et al. 2021
    measured this on earlier generations; Hopper's FP8 path is reported to do the same), so every addition
    loses a little, always in the same direction, and the error grows with K instead of averaging out.
    ``promote_every=N_C``: every N_C products the partial sum is added into a float32 accumulator and
    restarted at zero (DeepSeek's fix: N_C = 128, on CUDA cores).  With ``mantissa_bits=52`` and no
    promotion this is float64 summation in k order.  K <= 2**16, M*N*K <= 2**24.  (Notebook 11.)"""
    A, B = (formats.real_tensor(t, name, f"{name} must be a 2-D tensor") for t, name in ((a, "a"), (b, "b")))
    for name, t in (("a", A), ("b", B)):
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D (a matrix), got shape {tuple(t.shape)}")
    (M, K), N = A.shape, B.shape[1]
    if K != B.shape[0]:
        raise ValueError(f"a's columns must match b's rows (K), got {tuple(A.shape)} and {tuple(B.shape)}")
    mantissa_bits, promote_every = _check_accumulator(mantissa_bits, promote_every)
    if K > MAX_K or max(M, 1) * max(N, 1) * max(K, 1) > MAX_MMA_WORK:
        raise ValueError(
            f"limited_accumulation_matmul adds one product at a time, so a {tuple(A.shape)} @ b {tuple(B.shape)}"
            f" is too much work: K <= {MAX_K:,} and M*N*K <= {MAX_MMA_WORK:,} (2**24); use smaller inputs"
        )
    check_fits(8 * (M * K + K * N + 4 * M * N), "cpu", "the emulated product", "use smaller inputs")
    an, bn = (float64_on_cpu(t.to(torch.float32)).numpy() for t in (A, B))
    return torch.from_numpy(_limited_sums(an, bn, mantissa_bits, promote_every, [K])[0]).float().to(A.device)


def _check_accumulator(mantissa_bits, promote_every) -> tuple[int, int | None]:
    mantissa_bits = check_int("mantissa_bits", mantissa_bits, minimum=1, maximum=MAX_MANTISSA_BITS)
    if promote_every is not None:
        promote_every = check_int("promote_every", promote_every, minimum=1, maximum=MAX_K)
    return mantissa_bits, promote_every


def _limited_sums(an: np.ndarray, bn: np.ndarray, mantissa_bits: int, promote_every, stops) -> list:
    """The model's float32 results after the first ``k`` products, for each ``k`` of increasing ``stops``:
    one pass over K, vectorised over (M, N) (each output element is its own running sum)."""
    M, N = an.shape[0], bn.shape[1]
    total = np.zeros((M, N), dtype=np.float32)  # the float32 accumulator partial sums are promoted into
    partial = np.zeros((M, N))
    out = []
    with np.errstate(all="ignore"):
        for k in range(stops[-1]):
            partial = _truncate(partial + an[:, k : k + 1] * bn[k : k + 1, :], mantissa_bits)
            if promote_every and (k + 1) % promote_every == 0:
                total, partial = total + partial.astype(np.float32), np.zeros((M, N))
            if k + 1 in stops:
                out.append(
                    total + partial.astype(np.float32) if promote_every else partial.astype(np.float32)
                )
    return out


def limited_accumulation_curve(
    ks, mantissa_bits: int, promote_every: int | None = None, *, size: int = 16, seed: int = 0
) -> list[float]:
    """:func:`limited_accumulation_error` at each K of increasing ``ks`` (at most 64 of them), in one pass
    over one ``size x max(ks)`` by ``max(ks) x size`` draw: K's error is that of its first K products.
    (Notebook 11's accumulator widget.)"""
    ks = check_int_sequence("ks", ks, minimum=1, maximum=MAX_K, max_length=64)
    if any(b <= a for a, b in zip(ks, ks[1:], strict=False)):
        raise ValueError(f"ks must increase, got {ks}")
    mantissa_bits, promote_every = _check_accumulator(mantissa_bits, promote_every)
    size = check_int("size", size, minimum=1, maximum=64)
    if ks[-1] * size * size > MAX_MMA_WORK:
        raise ValueError(f"k * size**2 may be at most {MAX_MMA_WORK:,} (2**24), got k={ks[-1]}, size={size}")
    g = torch.Generator().manual_seed(check_seed("seed", seed))
    # DeepSeek-like inputs: uniform in [0, 1), rounded to FP8 E4M3; positive, so the truncations add up
    n = ks[-1]
    a, b = (
        float64_on_cpu(torch.rand(s, generator=g).to(torch.float8_e4m3fn)) for s in ((size, n), (n, size))
    )
    errors = []
    for k, out in zip(ks, _limited_sums(a.numpy(), b.numpy(), mantissa_bits, promote_every, ks), strict=True):
        exact = (a[:, :k] @ b[:k]).numpy()  # exact products; float64's own rounding, ~1e-16, is negligible
        nonzero = exact != 0
        errors.append(float((np.abs(out - exact)[nonzero] / exact[nonzero]).max()) if nonzero.any() else 0.0)
    return errors


def limited_accumulation_error(
    k: int, mantissa_bits: int, promote_every: int | None = None, *, size: int = 32, seed: int = 0
) -> float:
    """The max relative error of :func:`limited_accumulation_matmul` against float64 for a ``size x k`` by
    ``k x size`` product of DeepSeek-like inputs: values uniform in [0, 1) (from ``seed``) rounded to FP8
    E4M3, positive as in DeepSeek's test, so the truncations add up.  About 3% at k = 4096 with 14 bits,
    about 100 times less with ``promote_every=128``.  ``size`` 1 to 64.  (Notebook 11.)"""
    k = check_int("k", k, minimum=1, maximum=MAX_K)
    return limited_accumulation_curve([k], mantissa_bits, promote_every, size=size, seed=seed)[0]
