"""Where values land in a format's range (notebooks 03, 04, 08): four categories, the largest safe loss scale,
log2 histograms, lost updates.  ``x``: tensors (alone, in a dict or list), a GradientRecord, or numbers."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from ._checks import FLOAT32_MAX, FLOAT32_TINY, ArgumentTypeError, check_instance, check_int, check_scale
from .formats import MAX_VALUES, FloatFormat, get_format, real_tensor, round_to

CATEGORIES = ("underflow", "subnormal", "normal", "overflow")
COLORS = {"underflow": "#d62728", "subnormal": "#ff7f0e", "normal": "#2ca02c", "overflow": "#9467bd"}

# The powers of two a loss scale can be (check_scale's range): 2**-126 .. 2**127.
MIN_LOG2_SCALE = math.frexp(FLOAT32_TINY)[1] - 1
MAX_LOG2_SCALE = math.frexp(FLOAT32_MAX)[1] - 1


def flat_float32(x, name: str = "x", keep_float64: bool = False) -> torch.Tensor:
    """One 1-D float32 tensor from a tensor, tensors in a dict/list, a GradientRecord or numbers (real only);
    with ``keep_float64``, float64 input stays float64 (its values beyond float32's range are kept)."""
    if isinstance(x, torch.Tensor):
        parts = [x]
    elif hasattr(x, "activation_grads") and hasattr(x, "layers"):  # a GradientRecord
        parts = list(x.activation_grads.values())
    elif isinstance(x, Mapping):
        parts = list(x.values())
    elif isinstance(x, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in x):
        parts = list(x)
    else:
        what = f"{name} must be a tensor, a dict or list of tensors, a GradientRecord or a list of numbers"
        parts = [real_tensor(x, name, what)]
    for i, t in enumerate(parts):
        if not isinstance(t, torch.Tensor):
            raise ArgumentTypeError(f"{name} must contain only tensors, found {type(t).__name__} at item {i}")
        real_tensor(t, name)  # no bool or complex tensors
    if not parts:
        return torch.empty(0)
    if (
        numel := sum(t.numel() for t in parts)
    ) > MAX_VALUES:  # before any copy: an expanded view counts in full
        raise ValueError(
            f"{name} holds {numel:,} values; at most {MAX_VALUES:,}: pass a slice or a sample of them"
        )
    wide = keep_float64 and any(t.dtype == torch.float64 for t in parts)
    flat = [t.detach().reshape(-1).to(torch.float64 if wide else torch.float32) for t in parts]
    return flat[0] if len(flat) == 1 else torch.cat(flat)


def overflow_threshold(fmt) -> tuple[float, bool]:
    """``(threshold, inclusive)``: magnitudes above ``max`` plus half its ulp overflow ``fmt``; at it, the tie
    rounds to even: up when ``max`` ends in a 1 bit (FP16's 65520), down otherwise (E4M3's 464)."""
    f = get_format(fmt)
    ulp = math.ldexp(1.0, f.emax - f.mantissa_bits)
    return f.max + ulp / 2, int(f.max / ulp) % 2 == 1


def log2_limits(fmt) -> dict[str, float]:
    """log2 of ``fmt``'s boundaries, for plots: ``zero_below`` (at or below it values round to zero),
    ``min_subnormal``, ``min_normal``, ``max`` and ``overflow_from`` (:func:`overflow_threshold`)."""
    f = get_format(fmt)
    return {
        "zero_below": math.log2(f.min_subnormal) - 1,
        "min_subnormal": math.log2(f.min_subnormal),
        "min_normal": math.log2(f.min_normal),
        "max": math.log2(f.max),
        "overflow_from": math.log2(overflow_threshold(f)[0]),
    }


def _float32_threshold(f: FloatFormat) -> tuple[float, bool]:
    """:func:`overflow_threshold` as a float32 value ``t``: float32 ``a`` overflows exactly when ``a > t``
    (``>=`` when inclusive), so the test needs no float64 (an Apple GPU has none)."""
    thr, inclusive = overflow_threshold(f)
    with np.errstate(over="ignore"):
        t = np.float32(thr)
    if float(t) == thr:
        return thr, inclusive
    if float(t) > thr:  # no float32 between the one below and the threshold
        t = np.nextafter(t, np.float32(-np.inf))
    return float(t), False


def _categorize(y: torch.Tensor, f: FloatFormat) -> dict[str, torch.Tensor]:
    """Boolean masks of the four categories for non-zero finite float32 (or float64) ``y``."""
    r = round_to(y, f)  # a float64 y is rounded once, from its value
    t, inclusive = overflow_threshold(f) if y.dtype == torch.float64 else _float32_threshold(f)
    a = y.abs()
    # a cast that returns inf/NaN has overflowed whatever the threshold says (an older torch's E4M3 NaN)
    over = ((a >= t) if inclusive else (a > t)) | ~torch.isfinite(r)
    zero = (r == 0) & ~over
    sub = (r != 0) & (r.abs() < f.min_normal) & ~over
    return {"underflow": zero, "subnormal": sub, "normal": ~(over | zero | sub), "overflow": over}


def scale_str(scale: float) -> str:
    m, e = math.frexp(scale)
    return f"2^{e - 1}" if m == 0.5 else f"{scale:g}"


@dataclass(frozen=True)
class RangeReport:
    """What happens to the non-zero finite elements of ``x * scale`` in ``fmt``: ``counts`` per category of
    ``total``; ``zeros`` and ``nonfinite`` count the elements left out.  ``underflow`` etc. are fractions."""

    fmt: str
    scale: float
    total: int
    counts: dict
    zeros: int = 0
    nonfinite: int = 0

    def fraction(self, category: str) -> float:
        return self.counts[category] / self.total if self.total else 0.0

    underflow = property(lambda self: self.fraction("underflow"))
    subnormal = property(lambda self: self.fraction("subnormal"))
    normal = property(lambda self: self.fraction("normal"))
    overflow = property(lambda self: self.fraction("overflow"))

    def summary(self, digits: int = 3) -> str:
        """One line: format, scale and the four percentages with ``digits`` decimals."""
        return f"{get_format(self.fmt).label} at scale {scale_str(self.scale)}: " + ", ".join(
            f"{c} {100 * self.fraction(c):.{digits}f}%" for c in CATEGORIES
        )

    def __str__(self) -> str:
        return self.summary(3)


def _count(mask: torch.Tensor) -> int:
    return int(torch.count_nonzero(mask))  # several times faster than .sum() on a bool mask


def select_values(t: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """``(non-zero finite elements, number of exact zeros, number of inf/NaN)`` of flat ``t``."""
    finite, nonzero = torch.isfinite(t), t != 0
    return t[finite & nonzero], _count(finite & ~nonzero), _count(~finite)


def report_of(sel: torch.Tensor, zeros: int, nonfinite: int, f: FloatFormat, s: float) -> RangeReport:
    masks = _categorize(sel * torch.tensor(s, dtype=sel.dtype, device=sel.device), f)
    counts = {c: _count(m) for c, m in masks.items()}
    return RangeReport(f.name, s, int(sel.numel()), counts, zeros, nonfinite)


def range_report(x, fmt, scale: float = 1.0) -> RangeReport:
    """Classify the non-zero finite elements of ``x * scale`` rounded to ``fmt``: *underflow* (to zero),
    *subnormal* (below ``min_normal``), *overflow* (beyond :func:`overflow_threshold`) or *normal*.  The product
    is float32, or float64 for float64 ``x`` (read from its own values, beyond float32's range too)."""
    f = get_format(fmt)
    return report_of(*select_values(flat_float32(x, keep_float64=True)), f, check_scale("scale", scale))


def per_layer_reports(tensors: Mapping, fmt, scale: float = 1.0) -> dict[str, RangeReport]:
    """``{name: range_report(tensor, fmt, scale)}`` for a dict such as ``record.activation_grads``."""
    check_instance("tensors", tensors, Mapping, "a dict of name -> tensor")
    f = get_format(fmt)
    s = check_scale("scale", scale)
    return {name: range_report(t, f, s) for name, t in tensors.items()}


def largest_safe_log2(amax: float, f: FloatFormat) -> int:
    """The largest ``k`` for which ``amax * 2**k`` (a positive magnitude) does not overflow ``f``."""
    thr, inclusive = overflow_threshold(f)

    def safe(k: int) -> bool:  # amax * 2**k is exact in float64
        v = math.ldexp(amax, k)
        return v < thr or (v == thr and not inclusive)

    k = math.floor(math.log2(thr) - math.log2(amax))
    while not safe(k):
        k -= 1
    while safe(k + 1):
        k += 1
    return k


def suggest_log2_scale(x, fmt) -> int | None:
    """The largest ``k`` such that no element of ``x * 2**k`` overflows ``fmt`` (negative when values must be
    scaled down), ignoring zeros and inf/NaN; None when nothing is left.  A loss scale is a float32, so ``k``
    is at most 127 (a ``UserWarning`` says so); where even 2**-126 overflows, ``ValueError``."""
    f = get_format(fmt)
    t = select_values(flat_float32(x))[0]
    if t.numel() == 0:
        return None
    amax = float(t.abs().max())
    k = largest_safe_log2(amax, f)
    if k > MAX_LOG2_SCALE:
        warnings.warn(
            f"the largest value here would allow a scale of 2**{k} before overflowing {f.label}, but a loss scale "
            f"is stored in float32, whose largest power of two is 2**{MAX_LOG2_SCALE}: suggesting 2**{MAX_LOG2_SCALE}",
            UserWarning,
            stacklevel=3,
        )
        return MAX_LOG2_SCALE
    if k < MIN_LOG2_SCALE:
        raise ValueError(
            f"no usable loss scale keeps x in {f.label}'s range: even the smallest, 2**{MIN_LOG2_SCALE} "
            f"(float32's smallest normal), lets |x| = {amax:g} overflow"
        )
    return k


def suggest_scale(x, fmt) -> float:
    """The largest power of two ``S`` such that no element of ``x * S`` overflows ``fmt`` (Micikevicius et al.,
    2018, made exact): ``2**suggest_log2_scale(x, fmt)``, or ``math.inf`` when ``x`` has no non-zero finite value."""
    k = suggest_log2_scale(x, fmt)
    return math.inf if k is None else math.ldexp(1.0, k)


@dataclass(frozen=True)
class Log2Histogram:
    """Counts of ``floor(log2|x * scale|)``: bin ``i`` holds magnitudes in ``[2**edges[i], 2**edges[i+1])``;
    ``zeros``/``nonfinite`` count the elements left out, ``outside`` those beyond ``[lo, hi)``."""

    edges: np.ndarray
    counts: np.ndarray
    zeros: int
    nonfinite: int
    outside: int
    scale: float

    @property
    def total(self) -> int:
        return int(self.counts.sum()) + self.outside

    @property
    def lefts(self) -> np.ndarray:
        return self.edges[:-1]


LOG2_BINADES = 1100  # log2_histogram's bins stay within ±this: float64's binades are 2**-1074 .. 2**1023


def log2_histogram(x, *, scale: float = 1.0, lo: int | None = None, hi: int | None = None) -> Log2Histogram:
    """Histogram of ``floor(log2|x * scale|)``, one bin per binade from ``lo`` to ``hi`` (default: the data's
    smallest and largest), exact (``frexp``, not a rounded ``log2``); float64 ``x`` is read in float64."""
    s = check_scale("scale", scale)
    if lo is not None:
        lo = check_int("lo", lo, minimum=-LOG2_BINADES, maximum=LOG2_BINADES)
    if hi is not None:
        hi = check_int("hi", hi, minimum=1 - LOG2_BINADES if lo is None else lo + 1, maximum=LOG2_BINADES + 1)
    sel, zeros, nonfinite = select_values(flat_float32(x, keep_float64=True))
    prod = sel * torch.tensor(s, dtype=sel.dtype, device=sel.device)
    vanished, blown = prod == 0, ~torch.isfinite(prod)  # a tiny or huge scale leaves the dtype's range
    e = torch.frexp(prod[~vanished & ~blown].cpu())[1].to(torch.int64) - 1  # |t| = m * 2**e, m in [0.5, 1)
    lo = (int(e.min()) if e.numel() else 0) if lo is None else lo
    hi = (int(e.max()) + 1 if e.numel() else lo + 1) if hi is None else hi
    hi = check_int("hi", hi, minimum=lo + 1, maximum=LOG2_BINADES + 1)  # the data's lo is within float64's
    inside = (e >= lo) & (e < hi)
    return Log2Histogram(
        edges=np.arange(lo, hi + 1),
        counts=torch.bincount(e[inside] - lo, minlength=hi - lo).numpy().astype(np.int64),
        zeros=zeros + _count(vanished),
        nonfinite=nonfinite + _count(blown),
        outside=_count(~inside),
        scale=s,
    )


def bin_categories(lefts: np.ndarray, f: FloatFormat) -> list[str]:
    """Category of each binade ``[2**k, 2**(k+1))``, judged at its geometric middle by :func:`range_report`'s
    rule (a bin straddling a boundary gets one colour; the readouts, not the colours, are exact)."""
    mids = torch.tensor(
        [math.ldexp(math.sqrt(2.0), int(k)) for k in lefts], dtype=torch.float64, device="cpu"
    )
    masks = _categorize(mids, f)  # float64, so binades beyond float32's range are judged too
    return [next(c for c in CATEGORIES if bool(masks[c][i])) for i in range(len(lefts))]


def lost_update_fraction(weight, update, fmt="fp16") -> float:
    """Fraction of the non-zero ``update`` elements that change nothing when the weights are stored in
    ``fmt``: ``round(round(w) + round(Δw)) == round(w)`` (swamping).  The sum is formed in float32, which has
    the ``2p + 2`` bits that make it the correctly rounded ``fmt`` addition."""
    f = get_format(fmt)
    w, d = flat_float32(weight, "weight"), flat_float32(update, "update")
    if w.shape != d.shape:
        raise ValueError(
            f"weight and update must have the same number of elements, got {w.numel()} and {d.numel()}"
        )
    keep = (d != 0) & torch.isfinite(d) & torch.isfinite(w)
    if _count(keep) == 0:
        return 0.0
    w_f = round_to(w[keep], f)
    new = round_to(w_f + round_to(d[keep], f), f)
    return _count(new == w_f) / _count(keep)  # one correctly rounded division: a float64 mean, on any device
