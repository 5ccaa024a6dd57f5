"""Samples and how sure a speedup is: :class:`Timing` (one contestant's per-call seconds) and
:func:`speedup_estimate`, the interval of a speedup from interleaved rounds.  (``06_timing_race``)

The interval
------------
Each round ``i`` gives a ratio ``r_i = baseline_i / contender_i`` (above 1: the contender is faster).  The
speedup is the median of those ratios, and its interval is the distribution-free interval for a median
(the inverted sign test): with the ratios sorted, ``[r_(k), r_(n+1-k)]`` contains the true median ratio
with probability ``1 - 2 P(B <= k-1)``, ``B ~ Binomial(n, 1/2)``, whatever the distribution of the ratios,
as long as the rounds are independent.  ``k`` is the largest that keeps that probability at or above the
confidence asked for.  Order statistics do not care whether the ratios are on a log scale or not, so the
interval is the same for ``log r`` (and swapping the contestants gives exactly ``1/high .. 1/low``).  No
normality is assumed, and a sample slowed down by another program moves the interval by one rank at most
(a t-interval would be dragged by it).  The price: at 95% at least six pairs are needed; with fewer the
interval is ``0 .. inf`` ("too close to call").
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Real

import torch

from ._checks import check_float
from .dtypes import dtype_name
from .text import format_ratio, format_seconds

# The most samples speedup_estimate accepts: measure takes at most MAX_REPEATS rounds, and a longer
# sequence is refused by its length before any of it is read.
MAX_SAMPLES = 100_000


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def jsonable(value):
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, SpeedupEstimate):
        return value.to_dict()
    return str(value)


# ----------------------------------------------------------------------------------------------
# Samples
# ----------------------------------------------------------------------------------------------


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's and torch's default method)."""
    n = len(sorted_values)
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _float_or_inf(x) -> float:
    """``float(x)``, or inf for an int beyond float64's range (which no sample of seconds can be)."""
    try:
        return float(x)
    except OverflowError:
        return math.inf


def _bounded_samples(name: str, value):
    """``value`` with its length checked against :data:`MAX_SAMPLES` before anything is read: a NumPy array
    or a tensor as a list (a 0-d one is left for the caller to refuse), ``range(10**12)`` refused at once."""
    n = getattr(value, "size", None) if type(value).__module__ == "numpy" else None
    if isinstance(value, torch.Tensor):
        n = value.numel()
    elif n is None and isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        try:
            n = len(value)
        except OverflowError:  # range(10**20): longer than len() can say
            raise ValueError(f"{name} may hold at most {MAX_SAMPLES} samples, got far more") from None
    if isinstance(n, int) and n > MAX_SAMPLES:
        raise ValueError(f"{name} may hold at most {MAX_SAMPLES} samples, got {n}")
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # a NumPy array or a tensor
        value = value.tolist()
    return value


@dataclass(frozen=True)
class Timing:
    """Repeated samples of one contestant.  ``samples`` are seconds **per call**, one per sample."""

    label: str
    samples: tuple[float, ...]
    number: int  # calls averaged into each sample
    warmup: int  # untimed calls made before the first sample
    context: dict = field(default_factory=dict, compare=False)

    @property
    def median(self) -> float:
        return _quantile(sorted(self.samples), 0.5)

    @property
    def q1(self) -> float:
        return _quantile(sorted(self.samples), 0.25)

    @property
    def q3(self) -> float:
        return _quantile(sorted(self.samples), 0.75)

    @property
    def iqr(self) -> float:
        """Interquartile range: the spread of the middle half of the samples."""
        return self.q3 - self.q1

    @property
    def rel_iqr(self) -> float:
        return self.iqr / self.median if self.median > 0 else math.inf

    @property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def calls(self) -> int:
        """Every call made: warm-up plus timed."""
        return self.warmup + self.number * len(self.samples)

    def to_measurement(self):
        """The same samples as a ``torch.utils.benchmark.Measurement`` (for ``benchmark.Compare``)."""
        from torch.utils import benchmark

        task = benchmark.TaskSpec(
            stmt=self.label,
            setup="",
            label=self.context.get("race", "amp_lab race"),
            sub_label=self.context.get("size", ""),
            description=self.label,
            num_threads=int(self.context.get("threads", torch.get_num_threads())),
        )
        raw = [s * self.number for s in self.samples]
        return benchmark.Measurement(number_per_run=self.number, raw_times=raw, task_spec=task)

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "median_s": self.median,
            "iqr_s": self.iqr,
            "samples_s": list(self.samples),
            "number": self.number,
            "warmup": self.warmup,
            "context": jsonable(self.context),
        }

    def __str__(self) -> str:
        return (
            f"{self.label}: median {format_seconds(self.median)}, IQR {format_seconds(self.iqr)} "
            f"({100 * self.rel_iqr:.0f}%), {len(self.samples)} samples x {self.number} calls "
            f"after {self.warmup} warm-up calls, {self.context.get('threads', '?')} threads"
        )


# ----------------------------------------------------------------------------------------------
# How sure a speedup is: the interval from interleaved pairs
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeedupEstimate:
    """A speedup (baseline time / contender time) with its confidence interval.  (``06_timing_race``)

    ``ratio`` is the median of the per-round ratios; ``low`` and ``high`` bound the true median ratio with
    probability at least ``confidence`` (see the module docstring); ``pairs`` is how many interleaved
    rounds it rests on.  Above 1 the contender (AMP, in a race) is faster.
    """

    ratio: float
    low: float
    high: float
    confidence: float
    pairs: int

    @property
    def outcome(self) -> str:
        """``"faster"`` (the whole interval above 1), ``"slower"`` (below 1), else ``"too close to call"``."""
        if self.low > 1:
            return "faster"
        if self.high < 1:
            return "slower"
        return "too close to call"

    @property
    def rel_width(self) -> float:
        """The interval's width relative to the speedup: 0.1 means about +-5%; infinite with too few pairs."""
        if not math.isfinite(self.high) or self.ratio <= 0:
            return math.inf
        return (self.high - self.low) / self.ratio

    @property
    def confidence_text(self) -> str:
        return f"{100 * self.confidence:g}%"

    def ends_text(self) -> str:
        """``'1.25x to 1.40x'``, with a third decimal where two would hide which side of 1 an end is on."""
        if not math.isfinite(self.high):
            return "0x to infx"
        for digits in (2, 3, 4):
            ends = [format_ratio(self.low, digits), format_ratio(self.high, digits)]
            one = format_ratio(1.0, digits)
            if not any(
                text == one and value != 1 for text, value in zip(ends, (self.low, self.high), strict=True)
            ):
                break
        return f"{ends[0]} to {ends[1]}"

    def __str__(self) -> str:
        if not math.isfinite(self.high):
            return (
                f"{format_ratio(self.ratio)} ({plural(self.pairs, 'pair')}: too few for a "
                f"{self.confidence_text} interval)"
            )
        return f"{format_ratio(self.ratio)} ({self.confidence_text} interval {self.ends_text()})"

    def to_dict(self) -> dict:
        return {
            "ratio": self.ratio,
            "low": self.low,
            "high": jsonable(self.high),
            "confidence": self.confidence,
            "pairs": self.pairs,
            "outcome": self.outcome,
        }


def min_pairs(confidence: float = 0.95) -> int:
    """The fewest pairs for which :func:`speedup_estimate` can give a finite interval: 6 at 95%, 8 at 99%.
    (``06_timing_race``)"""
    confidence = check_float("confidence", confidence, gt=0, lt=1)
    n = 1
    while _order_statistic(n, confidence) == 0:
        n += 1
    return n


@functools.lru_cache(maxsize=4096)
def _order_statistic(n: int, confidence: float) -> int:
    """The largest ``k`` (1-based, ``k <= n/2`` rounded up) with ``1 - 2 P(B <= k-1) >= confidence``,
    ``B ~ Binomial(n, 1/2)``; 0 when even ``[min, max]`` falls short of ``confidence``."""
    tail = Fraction(1 - Fraction(confidence)) / 2  # exact: the allowed probability in each tail
    total = 2**n
    k, cdf = 0, 0  # cdf = sum_{j < k+1} C(n, j), as an integer count of the 2**n outcomes
    while k < (n + 1) // 2:
        cdf += math.comb(n, k)
        if Fraction(cdf, total) > tail:
            break
        k += 1
    return k


def _per_call_samples(name: str, value) -> tuple[float, ...]:
    if isinstance(value, Timing):
        value = value.samples
    else:
        value = _bounded_samples(name, value)
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(
            f"{name} must be a Timing or a sequence of per-call seconds, got {type(value).__name__}"
        )
    if len(value) == 0:
        raise ValueError(f"{name} must hold at least one sample, got an empty sequence")
    out = []
    for i, x in enumerate(value):
        if (
            isinstance(x, bool)
            or not isinstance(x, Real)
            or not math.isfinite(_float_or_inf(x))
            or float(x) <= 0
        ):
            raise ValueError(f"{name}[{i}] must be a positive, finite number of seconds, got {x!r}")
        out.append(float(x))
    return tuple(out)


def speedup_estimate(baseline, contender, *, confidence: float = 0.95) -> SpeedupEstimate:
    """How much faster ``contender`` is than ``baseline``, with an interval.  (``06_timing_race``)

    ``baseline`` and ``contender`` are :class:`Timing` objects or equal-length sequences of per-call
    seconds taken in interleaved rounds (round ``i`` of each belongs together, as :func:`measure` takes
    them).  The speedup is the median of the per-round ratios ``baseline[i] / contender[i]``; the interval
    is the distribution-free interval for that median (order statistics of the ratios, see the module
    docstring), so it holds whatever shape the timing noise has.  With fewer pairs than
    :func:`min_pairs` the interval is ``0 .. inf``.

    >>> e = speedup_estimate([2.0, 2.1, 1.9, 2.0, 2.2, 2.0], [1.0] * 6)
    >>> str(e), e.outcome
    ('2.00x (95% interval 1.90x to 2.20x)', 'faster')
    """
    b = _per_call_samples("baseline", baseline)
    c = _per_call_samples("contender", contender)
    if len(b) != len(c):
        raise ValueError(
            f"contender has {len(c)} samples but baseline has {len(b)}: the speedup pairs round i of one "
            "with round i of the other, so both need the same number of interleaved rounds"
        )
    confidence = check_float("confidence", confidence, gt=0, lt=1)
    ratios = sorted(x / y for x, y in zip(b, c, strict=True))
    n = len(ratios)
    ratio = statistics.median(ratios)
    k = _order_statistic(n, confidence)
    if k == 0:
        return SpeedupEstimate(ratio=ratio, low=0.0, high=math.inf, confidence=confidence, pairs=n)
    return SpeedupEstimate(ratio=ratio, low=ratios[k - 1], high=ratios[n - k], confidence=confidence, pairs=n)
