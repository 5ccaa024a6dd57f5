"""Where values land in a format's range: underflow, subnormal, normal, overflow.

Taught in ``03_underflow_and_overflow`` (the scale slider) and used by the loss-scaling
notebook.  Micikevicius et al. (2018, Fig. 3) showed that many activation gradients of a real
network lie below FP16's smallest subnormal, 2^-24, and become zero; multiplying the loss by a
scale ``S`` shifts every gradient by log2(S) binades, into range.

* :func:`range_report` classifies the non-zero finite elements of ``x * scale`` after rounding
  with :func:`amp_lab.formats.round_to` (the casts themselves are never re-implemented here).
* :func:`suggest_scale` is the paper's rule of thumb made exact: the largest power of two that
  overflows nothing.
* :func:`log2_histogram` bins ``floor(log2|x|)`` (one bin per binade, exact via ``frexp``);
  :func:`plot_log2_histogram` draws it with the formats' ranges marked.
* :func:`lost_update_fraction` counts weight updates that vanish when ``w + Δw`` is stored in
  a narrow format (swamping: why optimizers keep FP32 master weights).
* :func:`scale_explorer` is the notebook's widget: a log2-scale slider that shifts the
  histogram live, with underflow/overflow readouts.

``x`` may be a tensor, a dict or list of tensors (e.g. ``record.activation_grads`` from
:func:`amp_lab.gradients.collect_gradients`), a :class:`~amp_lab.gradients.GradientRecord`
(its activation gradients) or a list of numbers; everything is flattened to float32.
"""

from __future__ import annotations

import html
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from ._checks import (
    FLOAT32_MAX,
    FLOAT32_TINY,
    ArgumentTypeError,
    check_float,
    check_instance,
    check_int,
    check_scale,
)
from .device import torch_threads
from .formats import FloatFormat, _format_list, _real_tensor, get_format, round_to
from .widgets import FigurePane

__all__ = [
    "CATEGORIES",
    "RangeReport",
    "range_report",
    "per_layer_reports",
    "overflow_threshold",
    "log2_limits",
    "suggest_scale",
    "suggest_log2_scale",
    "Log2Histogram",
    "log2_histogram",
    "plot_log2_histogram",
    "lost_update_fraction",
    "readout_text",
    "readout_html",
    "ScaleExplorer",
    "scale_explorer",
]

CATEGORIES = ("underflow", "subnormal", "normal", "overflow")

# Colours of the four categories, shared by every plot of this module.
COLORS = {"underflow": "#d62728", "subnormal": "#ff7f0e", "normal": "#2ca02c", "overflow": "#9467bd"}


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def _flat_float32(x, name: str = "x") -> torch.Tensor:
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
        parts = [_real_tensor(x, name, what)]
    for i, t in enumerate(parts):
        if not isinstance(t, torch.Tensor):
            raise ArgumentTypeError(f"{name} must contain only tensors, found {type(t).__name__} at item {i}")
        _real_tensor(t, name)  # no bool or complex tensors
    if not parts:
        return torch.empty(0)
    flat = [t.detach().reshape(-1).float() for t in parts]
    return flat[0] if len(flat) == 1 else torch.cat(flat)


def _check_scale(scale) -> float:
    """A loss scale as the float32 it becomes (``x * scale`` is computed in float32): the course's one
    rule for scales, :func:`amp_lab._checks.check_scale` (from 2**-126 to float32's max)."""
    return check_scale("scale", scale)


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
        return f"{get_format(self.fmt).label} at scale {_scale_str(self.scale)}: " + ", ".join(
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
    s = _check_scale(scale)
    return _report(*_select(_flat_float32(x)), f, s)


def _count(mask: torch.Tensor) -> int:
    """The number of True values of a bool mask, as a Python int."""
    return int(torch.count_nonzero(mask))


def _select(t: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """``(non-zero finite elements, number of exact zeros, number of inf/NaN)`` of flat ``t``."""
    finite = torch.isfinite(t)
    nonzero = t != 0
    # count_nonzero, not .sum(): several times faster on a bool mask of millions of values
    return t[finite & nonzero], _count(finite & ~nonzero), _count(~finite)


def _report(sel: torch.Tensor, zeros: int, nonfinite: int, f: FloatFormat, s: float) -> RangeReport:
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
    s = _check_scale(scale)
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
    t = _flat_float32(x)
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
    s = _check_scale(scale)
    if lo is not None:
        lo = check_int("lo", lo, minimum=-400, maximum=400)
    if hi is not None:
        hi = check_int("hi", hi, minimum=-399 if lo is None else lo + 1, maximum=401)
    t = _flat_float32(x)
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


def _bin_categories(lefts: np.ndarray, f: FloatFormat) -> list[str]:
    """Category of each binade ``[2**k, 2**(k+1))``, judged at its geometric middle with the
    same :func:`_categorize` as :func:`range_report` (a bin straddling a boundary gets one colour;
    the readouts, not the colours, are exact)."""
    mids = torch.tensor([math.ldexp(math.sqrt(2.0), int(k)) for k in lefts], dtype=torch.float64, device="cpu")
    mids = mids.clamp(max=3.0e38).float()  # beyond float32: overflow anyway
    masks = _categorize(mids, f)
    out = []
    for i in range(len(lefts)):
        out.append(next(c for c in CATEGORIES if bool(masks[c][i])))
    return out


DEFAULT_FMTS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


def _draw_format_rows(ax, fmts, lo: float, *, top=0.98, row=0.075) -> None:
    """One horizontal ruler per format at the top of ``ax`` (x in data, y in axes fraction):
    light = subnormal range, dark = normal range; rulers are clipped to the axes."""
    trans = ax.get_xaxis_transform()
    for i, fmt in enumerate(fmts):
        f = get_format(fmt)
        lim = log2_limits(f)
        y0 = top - (i + 1) * row
        h = row * 0.8
        ax.add_patch(_rect(lim["min_subnormal"], y0, lim["min_normal"] - lim["min_subnormal"], h, "#c6dbef", trans))
        ax.add_patch(_rect(lim["min_normal"], y0, lim["max"] - lim["min_normal"], h, "#6baed6", trans))
        ax.text(
            max(lim["min_subnormal"], lo) + 0.4, y0 + h / 2, f.label, transform=trans, ha="left", va="center", fontsize=7
        )


def _rect(x, y, w, h, color, transform):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, facecolor=color, edgecolor="none", transform=transform)


def _view_range(hist: Log2Histogram, fmts, tail: float = 1e-3) -> tuple[float, float]:
    """An x-range showing the data without its thinnest tail (below ``tail`` of the total) and
    the whole range of every *narrow* format (FP16, FP8); BF16's and TF32's huge ranges are
    left to run off the axes."""
    counts = hist.counts
    lo, hi = float(hist.edges[0]), float(hist.edges[-1])
    if counts.sum() > 0:
        cum = np.cumsum(counts) / counts.sum()
        lo = float(hist.edges[int(np.argmax(cum >= tail))])
    for f in fmts:
        if f.exponent_bits < 8:
            lim = log2_limits(f)
            lo, hi = min(lo, lim["zero_below"]), max(hi, lim["overflow_from"])
    return lo - 2, hi + 3


def plot_log2_histogram(
    x,
    fmts=DEFAULT_FMTS,
    *,
    scale: float = 1.0,
    ax=None,
    title: str | None = None,
    xlim: tuple[float, float] | None = None,
    rulers: bool = True,
):
    """Draw :func:`log2_histogram` of ``x * scale`` on ``ax`` (a new pyplot figure if None).

    Bars are coloured by what happens to them in ``fmts[0]`` (red: become zero, orange:
    subnormal, green: normal, purple: overflow) and its zero/overflow zones are shaded; with
    ``rulers``, every format of ``fmts`` gets a ruler at the top (light: subnormal range,
    dark: normal range).  Returns the axes.  (Notebook 03.)
    """
    from matplotlib.axes import Axes

    fmts = _format_list(fmts)
    if ax is not None:
        check_instance("ax", ax, Axes, "matplotlib Axes or None")
    if title is not None:
        check_instance("title", title, str, "a string or None")
    check_instance("rulers", rulers, (bool, np.bool_), "True or False")
    if xlim is not None:
        if isinstance(xlim, (str, bytes)) or not isinstance(xlim, (tuple, list)) or len(xlim) != 2:
            raise ArgumentTypeError(f"xlim must be a pair (lo, hi) of log2 values, got {xlim!r:.80}")
        xlim = (check_float("xlim[0]", xlim[0]), check_float("xlim[1]", xlim[1]))
        if not xlim[1] > xlim[0]:
            raise ValueError(f"xlim must be (lo, hi) with hi > lo, got {xlim}")
    # everything is checked, and the histogram made, before a figure is created
    hist = log2_histogram(x, scale=scale)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(7.5, 3.6), layout="constrained")
    primary = fmts[0]
    lo, hi = xlim if xlim is not None else _view_range(hist, fmts)
    if hist.counts.size:
        cats = np.array(_bin_categories(hist.lefts, primary))
        edges = hist.edges.astype(float)
        for c in CATEGORIES:
            values = np.where(cats == c, hist.counts, 0)
            label = f"{'zero' if c == 'underflow' else c} in {primary.label}" if values.any() else None
            ax.stairs(values, edges, fill=True, color=COLORS[c], lw=0, label=label)
        ax.legend(loc="center left", fontsize=8, frameon=False)
    lim = log2_limits(primary)
    ax.axvspan(min(lo, lim["zero_below"]), lim["zero_below"], color=COLORS["underflow"], alpha=0.08, lw=0)
    ax.axvspan(lim["overflow_from"], max(hi, lim["overflow_from"]), color=COLORS["overflow"], alpha=0.08, lw=0)
    ax.set_xlim(lo, hi)
    peak = max(int(hist.counts.max()) if hist.counts.size else 1, 1)
    row = min(0.07, 0.4 / len(fmts))
    ax.set_ylim(0, peak * 1.08 / (1 - row * len(fmts) - 0.02) if rulers else peak * 1.1)
    if rulers:
        _draw_format_rows(ax, fmts, lo, top=0.98, row=row)
    ax.set_xlabel("log2 |value|")
    ax.set_ylabel("count")
    if title:
        ax.set_title(title)
    return ax


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
    w = _flat_float32(weight, "weight")
    d = _flat_float32(update, "update")
    if w.shape != d.shape:
        raise ValueError(f"weight and update must have the same number of elements, got {w.numel()} and {d.numel()}")
    keep = (d != 0) & torch.isfinite(d) & torch.isfinite(w)
    if int(keep.sum()) == 0:
        return 0.0
    w, d = w[keep], d[keep]
    w_f = round_to(w, f)
    new = round_to(w_f + round_to(d, f), f)
    # a count over a count, one correctly rounded division: the value a float64 mean of the 0/1
    # values gives on the CPU, with no float64 tensor (an Apple GPU has none)
    return int((new == w_f).sum()) / int(w.numel())


# --------------------------------------------------------------------------------------------
# The scale slider
# --------------------------------------------------------------------------------------------


def _scale_str(scale: float) -> str:
    m, e = math.frexp(scale)
    if m == 0.5:
        return f"2^{e - 1}"
    return f"{scale:g}"


def readout_text(report: RangeReport) -> list[str]:
    """The readout lines for ``report``, in a stable, parseable form::

        underflow: 12.345% (2018 of 16345)
        subnormal: 40.000% (...)
        normal: 47.655% (...)
        overflow: 0.000% (0 of 16345)

    Percentages are ``f"{100 * fraction:.3f}%"`` of :class:`RangeReport`'s fractions.
    """
    check_instance("report", report, RangeReport, "a RangeReport (from range_report)")
    return [
        f"{c}: {100 * report.fraction(c):.3f}% ({report.counts[c]} of {report.total})" for c in CATEGORIES
    ]


def readout_html(report: RangeReport, suggested_log2: int | None = None) -> str:
    """HTML of :func:`readout_text` with a header naming the format and scale."""
    check_instance("report", report, RangeReport, "a RangeReport (from range_report)")
    if suggested_log2 is not None:
        suggested_log2 = check_int("suggested_log2", suggested_log2)
    head = f"{get_format(report.fmt).label}, scale {_scale_str(report.scale)} = {report.scale:.10g}"
    if suggested_log2 is not None:
        head += f" · suggested scale: 2^{suggested_log2} (largest with no overflow)"
    lines = [f'<div class="amp-scale-head" style="font-weight:bold">{html.escape(head)}</div>']
    for c, text in zip(CATEGORIES, readout_text(report), strict=True):
        lines.append(
            f'<div class="amp-scale-{c}" style="font-family:monospace;color:{COLORS[c]}">{html.escape(text)}</div>'
        )
    return "".join(lines)


class ScaleExplorer:
    """Widget of :func:`scale_explorer`: ``slider`` (log2 of the scale), ``readout`` (HTML),
    ``pane`` (a :class:`~amp_lab.widgets.FigurePane`), ``widget`` (the layout), ``report`` (the
    current :class:`RangeReport`) and ``suggested_log2``."""

    def __init__(self, x, fmt="fp16", *, log2_scale: int = 0, max_log2: int = 24, title: str | None = None):
        import ipywidgets as widgets


        self.fmt = get_format(fmt)
        max_log2 = check_int("max_log2", max_log2, minimum=1, maximum=120)
        log2_scale = check_int("log2_scale", log2_scale, minimum=0, maximum=max_log2)
        if title is not None:
            check_instance("title", title, str, "a string or None")
        # Select the non-zero finite values once; every slider move then costs one multiply,
        # one round_to and a few comparisons (the same _report that range_report uses).
        self._sel, self._zeros, self._nonfinite = _select(_flat_float32(x))
        self.suggested_log2 = suggest_log2_scale(self._sel, self.fmt)
        self._hist = log2_histogram(self._sel)
        self.report: RangeReport | None = None

        self.slider = widgets.IntSlider(
            value=log2_scale,
            min=0,
            max=max_log2,
            step=1,
            description="log2 scale",
            continuous_update=True,
            style={"description_width": "initial"},
            layout=widgets.Layout(width="460px"),
        )
        self.slider.add_class("amp-scale-slider")
        self.readout = widgets.HTML()
        self.readout.add_class("amp-scale-readout")
        self.pane = FigurePane(figsize=(7.0, 3.4), dpi=80)
        self._build_figure(title)
        self.widget = widgets.VBox([self.slider, self.readout, self.pane.image])
        self.slider.observe(self._on_change, names="value")
        self.update(log2_scale)

    # -- figure, built once ------------------------------------------------------------------
    def _build_figure(self, title):
        """Draw the figure once.  The parts that never change (axes, ticks, labels, shaded zones)
        are then rendered to a pixel buffer that becomes the figure's background image, and
        hidden: each slider move only draws the bars and the title over that image (blitting),
        which keeps a move well under 100 ms on a 2-core CPU."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fig = self.pane.figure
        ax = fig.add_subplot(1, 1, 1)
        self.ax = ax
        lim = log2_limits(self.fmt)
        edges, counts = self._hist.edges, self._hist.counts
        span = int(self.slider.max)
        lo, hi = _view_range(self._hist, (self.fmt,))
        hi = max(hi + 2, float(edges[-1]) + span + 2)
        ax.set_xlim(lo, hi)
        peak = max(int(counts.max()) if counts.size else 1, 1)
        ax.set_ylim(0, peak * 1.35)
        static = [
            ax.axvspan(lo, lim["zero_below"], color=COLORS["underflow"], alpha=0.10, lw=0),
            ax.axvspan(lim["zero_below"], lim["min_normal"], color=COLORS["subnormal"], alpha=0.08, lw=0),
            ax.axvspan(lim["overflow_from"], hi, color=COLORS["overflow"], alpha=0.10, lw=0),
        ]
        trans = ax.get_xaxis_transform()
        for key in ("zero_below", "min_normal", "overflow_from"):
            static.append(ax.axvline(lim[key], color="0.4", lw=0.8, ls=":"))
        zones = (
            ("→ 0", lo, lim["zero_below"]),
            ("subnormal", lim["zero_below"], lim["min_normal"]),
            ("normal", lim["min_normal"], lim["overflow_from"]),
            ("inf", lim["overflow_from"], hi),
        )
        for text, a, b in zones:
            static.append(
                ax.text((a + b) / 2, 0.97, text, transform=trans, fontsize=8, ha="center", va="top", color="0.25")
            )
        # One filled step patch per category (4 artists, not one per bar): moving the slider
        # only changes their data.
        zero = np.zeros(len(counts))
        self._stairs = {c: ax.stairs(zero, edges.astype(float), fill=True, color=COLORS[c], lw=0) for c in CATEGORIES}
        if self.suggested_log2 is not None and counts.size:
            k = self.suggested_log2
            # drawn on every move (one line), so it stays on top of the bars
            ax.stairs(counts, (edges + k).astype(float), color="0.15", lw=1.0, ls="--", zorder=3)
            static.append(
                ax.text(0.01, 0.85, f"- - -  at the suggested scale 2^{k}", transform=ax.transAxes, fontsize=8)
            )
        thr, _ = overflow_threshold(self.fmt)
        ax.set_xlabel(
            f"log2 |value × scale|   ({self.fmt.label}: zero at or below 2^{lim['zero_below']:g}, "
            f"inf from {thr:g})",
            fontsize=9,
        )
        ax.set_ylabel("count")
        self._fixed_title = title
        self._title = ax.set_title("", fontsize=10)
        # Fixed margins, not tight_layout(): a layout engine left on the figure makes every
        # savefig draw it twice.
        fig.subplots_adjust(left=0.13, right=0.97, bottom=0.16, top=0.9)

        # Render the static parts once, then hide them and show their pixels instead.
        dynamic = [*self._stairs.values(), self._title]
        for artist in dynamic:
            artist.set_visible(False)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        background = np.asarray(canvas.buffer_rgba()).copy()
        for artist in dynamic:
            artist.set_visible(True)
        for artist in static:
            artist.set_visible(False)
        ax.patch.set_visible(False)
        ax.xaxis.set_visible(False)
        ax.yaxis.set_visible(False)
        for spine in ax.spines.values():
            spine.set_visible(False)
        fig.figimage(background, xo=0, yo=0, origin="upper", zorder=-10)

    # -- callback: only changes existing artists and widget values ---------------------------
    def _on_change(self, change) -> None:
        self.update(change["new"])

    def update(self, log2_scale: int | None = None) -> RangeReport:
        """Recompute the readout for scale ``2**log2_scale`` (default: the slider's value) and
        redraw the existing figure; returns the new :class:`RangeReport`, which equals
        ``range_report(x, fmt, 2**log2_scale)``.  The slider calls this; to move the widget from
        code, set ``slider.value`` so that slider and readout stay in step."""
        if log2_scale is None:
            k = int(self.slider.value)
        else:  # any usable loss scale 2**k (check_scale's range), checked before anything changes
            k = check_int("log2_scale", log2_scale, minimum=MIN_LOG2_SCALE, maximum=MAX_LOG2_SCALE)
        # A few element-wise passes over ~1e5 values: one thread is plenty, and it never waits
        # for a second core that another process holds (that wait dominated on a busy machine).
        with torch_threads(1, self._sel.device):
            report = _report(self._sel, self._zeros, self._nonfinite, self.fmt, math.ldexp(1.0, k))
        self.report = report
        self.readout.value = readout_html(report, self.suggested_log2)
        edges, counts = self._hist.edges, self._hist.counts
        if counts.size:
            cats = np.array(_bin_categories(edges[:-1] + k, self.fmt))
            shifted = (edges + k).astype(float)
            for c, patch in self._stairs.items():
                patch.set_data(np.where(cats == c, counts, 0), shifted)
        self._title.set_text(
            (f"{self._fixed_title}: " if self._fixed_title else "")
            + f"scale 2^{k}: {100 * report.underflow:.3f}% become zero, {100 * report.overflow:.3f}% overflow"
        )
        self.pane.refresh()
        return report


def scale_explorer(x, fmt="fp16", *, log2_scale: int = 0, max_log2: int = 24, title: str | None = None) -> ScaleExplorer:
    """A log2 loss-scale slider over the values ``x`` (e.g. a GradientRecord's activation
    gradients): moving it to ``k`` multiplies every value by ``2**k``, slides the histogram ``k``
    binades to the right and updates the underflow/subnormal/normal/overflow readouts, which are
    exactly ``range_report(x, fmt, 2**k)`` (format: :func:`readout_text`).  The suggested scale
    (:func:`suggest_log2_scale`) is drawn as a dashed outline and named in the readout.

    Returns a :class:`ScaleExplorer`; the notebook cell ends with ``explorer.widget``.  The slider
    has CSS class ``amp-scale-slider``, the readout ``amp-scale-readout``.  (Notebook 03.)
    """
    return ScaleExplorer(x, fmt, log2_scale=log2_scale, max_log2=max_log2, title=title)
