"""Where values land in a format's range: underflow, subnormal, normal, overflow (the counts).

Taught in ``03_underflow_and_overflow`` and used by 04 and 08; :mod:`amp_lab.ranges` draws the
pictures (the log2 histogram, the scale slider) and is where learners import these names from.
Micikevicius et al. (2018, Fig. 3) showed that many activation gradients of a real network lie
below FP16's smallest subnormal, 2^-24, and become zero; multiplying the loss by a scale ``S``
shifts every gradient by log2(S) binades, into range.

* :func:`range_report` classifies the non-zero finite elements of ``x * scale`` after rounding
  with :func:`amp_lab.formats.round_to` (the casts themselves are never re-implemented here).
* :func:`suggest_scale` is the paper's rule of thumb made exact: the largest power of two that
  overflows nothing.
* :func:`log2_histogram` bins ``floor(log2|x|)`` (one bin per binade, exact via ``frexp``).
* :func:`lost_update_fraction` counts weight updates that vanish when ``w + Δw`` is stored in
  a narrow format (swamping: why optimizers keep FP32 master weights).

``x`` may be a tensor, a dict or list of tensors (e.g. ``record.activation_grads`` from
:func:`amp_lab.gradients.collect_gradients`), a :class:`~amp_lab.gradients.GradientRecord`
(its activation gradients) or a list of numbers; everything is flattened to float32.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from ._checks import FLOAT32_MAX, FLOAT32_TINY, ArgumentTypeError, check_int, check_scale
from .formats import FloatFormat, get_format, real_tensor, round_to

CATEGORIES = ("underflow", "subnormal", "normal", "overflow")

# Colours of the four categories, shared by every plot of this module.
COLORS = {"underflow": "#d62728", "subnormal": "#ff7f0e", "normal": "#2ca02c", "overflow": "#9467bd"}


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def flat_float32(x, name: str = "x") -> torch.Tensor:
    """One 1-D float32 tensor from a tensor, tensors in a dict/list, a GradientRecord or numbers.

    Real numbers only: text, bools (and bool tensors) and complex values are refused, as
    :func:`amp_lab.formats.round_to` refuses them."""
    what = f"{name} must be a tensor, a dict or list of tensors, a GradientRecord or a list of numbers"
    if isinstance(x, torch.Tensor):
        parts = [x]
    elif hasattr(x, "activation_grads") and hasattr(x, "layers"):  # a GradientRecord
        parts = list(x.activation_grads.values())
    elif isinstance(x, Mapping):
        parts = list(x.values())
    elif isinstance(x, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in x):
        parts = list(x)
    else:
        parts = [real_tensor(x, name, what)]
    for i, t in enumerate(parts):
        if not isinstance(t, torch.Tensor):
            raise ArgumentTypeError(f"{name} must contain only tensors, found {type(t).__name__} at item {i}")
        real_tensor(t, name)  # no bool or complex tensors
    if not parts:
        return torch.empty(0)
    flat = [t.detach().reshape(-1).float() for t in parts]
    return flat[0] if len(flat) == 1 else torch.cat(flat)


# The powers of two a loss scale can be (check_scale's range): 2**-126 .. 2**127.
MIN_LOG2_SCALE = math.frexp(FLOAT32_TINY)[1] - 1  # -126
MAX_LOG2_SCALE = math.frexp(FLOAT32_MAX)[1] - 1  # 127


# --------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------


def overflow_threshold(fmt) -> tuple[float, bool]:
    """``(threshold, inclusive)``: magnitudes ``> threshold`` (or ``== threshold`` when
    ``inclusive``) overflow ``fmt`` under round-to-nearest-even.

    The threshold is ``max`` plus half an ulp of ``max``.  A tie rounds to the even neighbour:
    up (overflow) when ``max`` ends in a 1 bit, as IEEE formats' all-ones ``max`` does (FP16:
    65520 becomes inf), down when it ends in 0, as FP8 E4M3's 1.110b × 2^8 = 448 does (464
    rounds to 448).  This is also the rule for a *saturating* format, where the cast hides the
    overflow by returning ``±max``.
    """
    f = get_format(fmt)
    ulp = math.ldexp(1.0, f.emax - f.mantissa_bits)
    max_odd = int(f.max / ulp) % 2 == 1
    return f.max + ulp / 2, max_odd


def log2_limits(fmt) -> dict[str, float]:
    """log2 of the boundaries of ``fmt``'s range, for plots: ``zero_below`` (values at or below
    2^this round to zero: half the smallest subnormal), ``min_subnormal``, ``min_normal``,
    ``max`` and ``overflow_from`` (log2 of :func:`overflow_threshold`)."""
    f = get_format(fmt)
    thr, _ = overflow_threshold(f)
    return {
        "zero_below": math.log2(f.min_subnormal) - 1,
        "min_subnormal": math.log2(f.min_subnormal),
        "min_normal": math.log2(f.min_normal),
        "max": math.log2(f.max),
        "overflow_from": math.log2(thr),
    }


def _float32_threshold(fmt) -> tuple[float, bool]:
    """:func:`overflow_threshold` as a test on float32 magnitudes: ``(t, inclusive)`` with ``t``
    a float32 value, such that a float32 ``a`` overflows ``fmt`` exactly when ``a > t`` (or
    ``a >= t`` when ``inclusive``).

    Where the threshold is a float32 value (every course format's is, FP32's aside) this is the
    threshold itself.  Otherwise no float32 lies between ``t``, the largest float32 below it, and
    the threshold, so ``a`` exceeds (or reaches) the threshold exactly when it exceeds ``t``.  The
    test then needs no float64, which an Apple GPU (MPS) does not have.
    """
    thr, inclusive = overflow_threshold(fmt)
    with np.errstate(over="ignore"):
        t = np.float32(thr)  # round to nearest; inf beyond float32's range
    if float(t) == thr:
        return thr, inclusive
    if float(t) > thr:
        t = np.nextafter(t, np.float32(-np.inf))
    return float(t), False


def _overflow_mask(y: torch.Tensor, r: torch.Tensor, f: FloatFormat) -> torch.Tensor:
    t, inclusive = _float32_threshold(f)
    a = y.float().abs()  # exact; compared in float32 with the float32 value t, on y's device
    over = (a >= t) if inclusive else (a > t)
    # A cast that returns inf/NaN has overflowed whatever the threshold says (e.g. an older torch
    # whose E4M3 cast gives NaN).
    return over | ~torch.isfinite(r)


def _categorize(y: torch.Tensor, f: FloatFormat) -> dict[str, torch.Tensor]:
    """Boolean masks of the four categories for non-zero finite float32 ``y``."""
    r = round_to(y, f)
    over = _overflow_mask(y, r, f)
    zero = (r == 0) & ~over
    sub = (r != 0) & (r.abs() < f.min_normal) & ~over
    normal = ~(over | zero | sub)
    return {"underflow": zero, "subnormal": sub, "normal": normal, "overflow": over}


@dataclass(frozen=True)
class RangeReport:
    """What happens to the non-zero finite elements of ``x * scale`` in format ``fmt``.

    ``total`` counts those elements; ``counts`` maps each of :data:`CATEGORIES` to how many
    became zero (``underflow``), a subnormal (non-zero but below ``min_normal``: precision
    lost), a normal number, or overflowed (inf, or saturated/NaN in FP8 E4M3).  ``zeros`` and
    ``nonfinite`` count the elements of ``x`` left out (exact zeros, inf/NaN).  The fractions
    ``underflow``, ``subnormal``, ``normal``, ``overflow`` are ``counts[...] / total`` (all 0.0
    when ``total`` is 0).
    """

    fmt: str
    scale: float
    total: int
    counts: dict
    zeros: int = 0
    nonfinite: int = 0

    def fraction(self, category: str) -> float:
        if category not in CATEGORIES:
            raise ValueError(f"category={category!r} is not allowed; choose one of: {', '.join(CATEGORIES)}")
        return self.counts[category] / self.total if self.total else 0.0

    @property
    def underflow(self) -> float:
        return self.fraction("underflow")

    @property
    def subnormal(self) -> float:
        return self.fraction("subnormal")

    @property
    def normal(self) -> float:
        return self.fraction("normal")

    @property
    def overflow(self) -> float:
        return self.fraction("overflow")

    @property
    def fractions(self) -> dict[str, float]:
        return {c: self.fraction(c) for c in CATEGORIES}

    def as_dict(self) -> dict:
        return {
            "fmt": self.fmt,
            "scale": self.scale,
            "total": self.total,
            "zeros": self.zeros,
            "nonfinite": self.nonfinite,
            **{f"{c}_count": self.counts[c] for c in CATEGORIES},
            **self.fractions,
        }

    def summary(self, digits: int = 3) -> str:
        """One line: format, scale and the four percentages with ``digits`` decimals."""
        digits = check_int("digits", digits, minimum=0, maximum=12)
        return f"{get_format(self.fmt).label} at scale {scale_str(self.scale)}: " + ", ".join(
            f"{c} {100 * self.fraction(c):.{digits}f}%" for c in CATEGORIES
        )

    def __str__(self) -> str:
        return self.summary(3)


def range_report(x, fmt, scale: float = 1.0) -> RangeReport:
    """Classify the non-zero finite elements of ``x * scale`` rounded to ``fmt``.

    ``x`` is flattened to float32 (see the module docstring for what it may be) and its exact
    zeros and non-finite elements are left out.  The product ``x * scale`` is computed in
    float32, as scaled FP32 gradients would be (exact for a power-of-two scale), then rounded
    with ``formats.round_to(…, fmt)``.  An element *underflows* if it rounds to zero, is
    *subnormal* if it rounds to a non-zero value below ``min_normal``, *overflows* if its
    magnitude is beyond :func:`overflow_threshold` (inf for FP16/BF16/E5M2; saturated to ±448 or
    NaN for E4M3), and is *normal* otherwise.

    ``scale`` must be finite and > 0 (``ValueError`` otherwise); an empty ``x`` gives a report
    with ``total == 0`` and all fractions 0.0.

    >>> range_report(torch.tensor([1e-8, 1e-6, 1.0, 1e5]), "fp16").counts
    {'underflow': 1, 'subnormal': 1, 'normal': 1, 'overflow': 1}
    """
    f = get_format(fmt)
    s = check_scale("scale", scale)
    return report_of(*select_values(flat_float32(x)), f, s)


def _count(mask: torch.Tensor) -> int:
    """The number of True values of a bool mask, as a Python int."""
    return int(torch.count_nonzero(mask))


def select_values(t: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """``(non-zero finite elements, number of exact zeros, number of inf/NaN)`` of flat ``t``."""
    finite = torch.isfinite(t)
    nonzero = t != 0
    # count_nonzero, not .sum(): several times faster on a bool mask of millions of values
    return t[finite & nonzero], _count(finite & ~nonzero), _count(~finite)


def report_of(sel: torch.Tensor, zeros: int, nonfinite: int, f: FloatFormat, s: float) -> RangeReport:
    y = sel * torch.tensor(s, dtype=torch.float32, device=sel.device)
    masks = _categorize(y, f)
    return RangeReport(
        fmt=f.name,
        scale=s,
        total=int(sel.numel()),
        counts={c: _count(m) for c, m in masks.items()},
        zeros=zeros,
        nonfinite=nonfinite,
    )


def per_layer_reports(tensors: Mapping, fmt, scale: float = 1.0) -> dict[str, RangeReport]:
    """``{name: range_report(tensor, fmt, scale)}`` for a dict such as ``record.activation_grads``."""
    if not isinstance(tensors, Mapping):
        raise ArgumentTypeError(f"tensors must be a dict of name -> tensor, got {type(tensors).__name__}")
    f = get_format(fmt)
    s = check_scale("scale", scale)
    return {name: range_report(t, f, s) for name, t in tensors.items()}


# --------------------------------------------------------------------------------------------
# Choosing a scale
# --------------------------------------------------------------------------------------------


def suggest_log2_scale(x, fmt) -> int | None:
    """The largest integer ``k`` such that no element of ``x * 2**k`` overflows ``fmt``, and
    ``2**k`` is a usable loss scale.

    ``k`` may be negative (values already beyond the range must be scaled *down*).  Exact
    zeros and inf/NaN in ``x`` are ignored (inf/NaN overflow at every scale; a scaler skips
    such steps); ``None`` when nothing is left, since then every scale is safe.

    A loss scale is stored in float32, so ``k`` is at most 127 (:data:`MAX_LOG2_SCALE`): for values
    so tiny that a larger power of two would still overflow nothing (``[1e-45]`` in FP16 would allow
    2**164), the result is 127 and a ``UserWarning`` says so.  (Where even 2**-126, the smallest
    usable scale, would overflow, a ``ValueError`` says that no scale fits.)
    """
    f = get_format(fmt)
    t = flat_float32(x)
    t = t[torch.isfinite(t) & (t != 0)]
    if t.numel() == 0:
        return None
    amax = float(t.abs().max())  # a float32 value, exact in float64
    thr, inclusive = overflow_threshold(f)

    def safe(k: int) -> bool:
        # amax * 2**k is exact in float64 here, and in float32 too unless it overflows float32,
        # in which case it is beyond every course format's threshold anyway.
        v = math.ldexp(amax, k)
        return v < thr or (v == thr and not inclusive)

    k = math.floor(math.log2(thr) - math.log2(amax))
    while not safe(k):
        k -= 1
    while safe(k + 1):
        k += 1
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
    """The largest power of two ``S`` such that no element of ``x * S`` overflows ``fmt``.

    The rule of thumb of Micikevicius et al. (2018) — scale so that the largest gradient lands
    just below the format's maximum — made exact.  ``S`` can be below 1.  Zeros and inf/NaN in
    ``x`` are ignored; ``math.inf`` when ``x`` has no non-zero finite element.  ``S`` is always a
    usable loss scale (at most 2**127, see :func:`suggest_log2_scale`), so it can be passed on to
    :func:`range_report` or a loss scaler.
    """
    k = suggest_log2_scale(x, fmt)
    return math.inf if k is None else math.ldexp(1.0, k)


# --------------------------------------------------------------------------------------------
# Histograms
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Log2Histogram:
    """Counts of ``floor(log2|x * scale|)`` over the non-zero finite elements.

    Bin ``i`` holds magnitudes in ``[2**edges[i], 2**edges[i+1])`` (``edges`` are consecutive
    integers, one bin per binade).  ``zeros``/``nonfinite`` count the elements left out, and
    ``outside`` the ones beyond the requested ``[lo, hi)``.
    """

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


def _log2_floor(t: torch.Tensor) -> torch.Tensor:
    """``floor(log2|t|)`` for non-zero finite float32 ``t``, exactly (no log is taken)."""
    _, e = torch.frexp(t)  # |t| = m * 2**e with m in [0.5, 1)
    return e.to(torch.int64) - 1


def log2_histogram(x, *, scale: float = 1.0, lo: int | None = None, hi: int | None = None) -> Log2Histogram:
    """Histogram of ``floor(log2|x * scale|)`` with one bin per binade, from ``lo`` to ``hi``
    (defaults: the data's smallest and largest binade).  ``x * scale`` is formed in float32, as
    in :func:`range_report`; the binning is exact (``frexp``, not a rounded ``log2``)."""
    s = check_scale("scale", scale)
    if lo is not None:
        lo = check_int("lo", lo, minimum=-400, maximum=400)
    if hi is not None:
        hi = check_int("hi", hi, minimum=-399 if lo is None else lo + 1, maximum=401)
    t = flat_float32(x)
    finite = torch.isfinite(t)
    nonzero = t != 0
    prod = t[finite & nonzero] * torch.tensor(s, dtype=torch.float32, device=t.device)
    vanished = prod == 0  # a tiny scale can round float32 products to zero ...
    blown = ~torch.isfinite(prod)  # ... and a huge one overflow float32
    sel = prod[~vanished & ~blown]
    zeros = _count(finite & ~nonzero) + _count(vanished)
    nonfinite = _count(~finite) + _count(blown)
    e = _log2_floor(sel.cpu())  # on the CPU: the counting happens there anyway
    if lo is None:
        lo = int(e.min()) if e.numel() else 0
    if hi is None:
        hi = int(e.max()) + 1 if e.numel() else lo + 1
    lo = check_int("lo", lo, minimum=-400, maximum=400)
    hi = check_int("hi", hi, minimum=lo + 1, maximum=401)
    inside = (e >= lo) & (e < hi)
    counts = torch.bincount(e[inside] - lo, minlength=hi - lo).numpy()
    return Log2Histogram(
        edges=np.arange(lo, hi + 1),
        counts=counts.astype(np.int64),
        zeros=zeros,
        nonfinite=nonfinite,
        outside=_count(~inside),
        scale=s,
    )


def bin_categories(lefts: np.ndarray, f: FloatFormat) -> list[str]:
    """Category of each binade ``[2**k, 2**(k+1))``, judged at its geometric middle with the
    same :func:`_categorize` as :func:`range_report` (a bin straddling a boundary gets one colour;
    the readouts, not the colours, are exact)."""
    mids = torch.tensor(
        [math.ldexp(math.sqrt(2.0), int(k)) for k in lefts], dtype=torch.float64, device="cpu"
    )
    mids = mids.clamp(max=3.0e38).float()  # beyond float32: overflow anyway
    masks = _categorize(mids, f)
    out = []
    for i in range(len(lefts)):
        out.append(next(c for c in CATEGORIES if bool(masks[c][i])))
    return out


# --------------------------------------------------------------------------------------------
# Swamping
# --------------------------------------------------------------------------------------------


def lost_update_fraction(weight, update, fmt="fp16") -> float:
    """Fraction of the non-zero ``update`` elements that change nothing when the weights are
    stored in ``fmt``: ``round(round(w) + round(Δw)) == round(w)``.

    That happens when ``|w| / |Δw|`` exceeds about ``2**(mantissa_bits + 1)`` (2^11 in FP16): the
    update is less than half an ulp of ``w``.  The sum of two ``fmt`` values is formed in float32
    and rounded once more; for every course format float32 has at least ``2p + 2`` bits of
    precision, so this equals the correctly rounded ``fmt`` addition.  (Notebook 03.)
    """
    f = get_format(fmt)
    w = flat_float32(weight, "weight")
    d = flat_float32(update, "update")
    if w.shape != d.shape:
        raise ValueError(
            f"weight and update must have the same number of elements, got {w.numel()} and {d.numel()}"
        )
    keep = (d != 0) & torch.isfinite(d) & torch.isfinite(w)
    if int(keep.sum()) == 0:
        return 0.0
    w, d = w[keep], d[keep]
    w_f = round_to(w, f)
    new = round_to(w_f + round_to(d, f), f)
    # a count over a count, one correctly rounded division: the value a float64 mean of the 0/1
    # values gives on the CPU, with no float64 tensor (an Apple GPU has none)
    return int((new == w_f).sum()) / int(w.numel())


def scale_str(scale: float) -> str:
    m, e = math.frexp(scale)
    if m == 0.5:
        return f"2^{e - 1}"
    return f"{scale:g}"
