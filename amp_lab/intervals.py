"""Samples and how sure a speedup is (``06_timing_race``): :class:`Timing` and :func:`speedup_estimate`, the
median of the per-round ratios with the distribution-free interval of a median (the inverted sign test),
valid whatever the noise while rounds are independent.  At 95% it needs six pairs."""

from __future__ import annotations

import functools
import math
import statistics
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Real

import torch

from ._checks import MAX_REPEATS, bounded_list, check_float
from .dtypes import dtype_name
from .text import format_ratio, format_seconds


def plural(count, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def jsonable(value):
    """``value`` with dtypes, devices, non-finite floats and estimates made JSON-safe."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, SpeedupEstimate):
        return jsonable({**vars(value), "outcome": value.outcome})
    finite = isinstance(value, float) and math.isfinite(value)
    return value if finite or value is None or isinstance(value, (bool, int, str)) else str(value)


@dataclass(frozen=True)
class Timing:
    """Repeated samples of one contestant.  ``samples`` are seconds **per call**, one per sample."""

    label: str
    samples: tuple[float, ...]
    number: int  # calls averaged into each sample
    warmup: int  # untimed calls made before the first sample
    context: dict = field(default_factory=dict, compare=False)

    median = property(lambda self: statistics.median(self.samples))

    @property
    def iqr(self) -> float:
        """Interquartile range: the spread of the middle half of the samples."""
        if len(self.samples) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4, method="inclusive")  # numpy's and torch's default
        return q3 - q1

    rel_iqr = property(lambda self: self.iqr / self.median if self.median > 0 else math.inf)

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
        out = {"label": self.label, "median_s": self.median, "iqr_s": self.iqr}
        out.update(samples_s=list(self.samples), number=self.number, warmup=self.warmup)
        return {**out, "context": jsonable(self.context)}

    def __str__(self) -> str:
        return (
            f"{self.label}: median {format_seconds(self.median)}, IQR {format_seconds(self.iqr)} "
            f"({100 * self.rel_iqr:.0f}%), {len(self.samples)} samples x {self.number} calls "
            f"after {self.warmup} warm-up calls, {plural(self.context.get('threads', '?'), 'thread')}"
        )


@dataclass(frozen=True)
class SpeedupEstimate:
    """A speedup (baseline time / contender time, the median of the per-round ratios; above 1 the contender
    is faster) whose interval ``low .. high`` holds the true median with probability ``confidence``."""

    ratio: float
    low: float
    high: float
    confidence: float
    pairs: int

    @property
    def outcome(self) -> str:
        """``"faster"`` (the whole interval above 1), ``"slower"`` (below 1), else ``"too close to call"``."""
        return "faster" if self.low > 1 else "slower" if self.high < 1 else "too close to call"

    @property
    def rel_width(self) -> float:
        """The interval's width relative to the speedup: 0.1 means about +-5%; infinite with too few pairs."""
        return (
            (self.high - self.low) / self.ratio if math.isfinite(self.high) and self.ratio > 0 else math.inf
        )

    confidence_text = property(lambda self: f"{100 * self.confidence:g}%")

    def ends_text(self) -> str:
        """``'1.25x to 1.40x'``, with a third decimal where two would hide which side of 1 an end is on."""
        if not math.isfinite(self.high):
            return "0x to infx"
        ends = (self.low, self.high)
        for digits in (2, 3, 4):
            if not any(format_ratio(v, digits) == format_ratio(1.0, digits) and v != 1 for v in ends):
                break
        return f"{format_ratio(self.low, digits)} to {format_ratio(self.high, digits)}"

    def interval_text(self) -> str:
        """``'95% interval 1.25x to 1.40x'``, or ``'5 pairs: too few for a 95% interval'``."""
        if not math.isfinite(self.high):
            return f"{plural(self.pairs, 'pair')}: too few for a {self.confidence_text} interval"
        return f"{self.confidence_text} interval {self.ends_text()}"

    def __str__(self) -> str:
        return f"{format_ratio(self.ratio)} ({self.interval_text()})"


def min_pairs(confidence: float = 0.95) -> int:
    """The fewest pairs giving :func:`speedup_estimate` a finite interval: 6 at 95%.  (``06_timing_race``)"""
    confidence = check_float("confidence", confidence, gt=0, lt=1)
    n = 1
    while _order_statistic(n, confidence) == 0:
        n += 1
    return n


@functools.lru_cache(maxsize=4096)
def _order_statistic(n: int, confidence: float) -> int:
    """The largest ``k <= ceil(n/2)`` with ``1 - 2 P(B <= k-1) >= confidence``, ``B ~ Binomial(n, 1/2)``."""
    tail = (1 - Fraction(confidence)) / 2  # exact: the allowed probability in each tail
    k, cdf = 0, 0  # cdf counts the 2**n outcomes with B <= k
    while k < (n + 1) // 2:
        cdf += math.comb(n, k)
        if Fraction(cdf, 2**n) > tail:
            break
        k += 1
    return k


def _per_call_samples(name: str, value) -> tuple[float, ...]:
    if isinstance(value, Timing):
        return value.samples
    items = bounded_list(name, value, MAX_REPEATS, "a Timing or a sequence of per-call seconds")
    if isinstance(value, torch.Tensor):
        items = value.tolist()
    if not items:
        raise ValueError(f"{name} must hold at least one sample, got an empty sequence")
    for i, x in enumerate(items):
        if isinstance(x, bool) or not isinstance(x, Real) or not 0 < x <= sys.float_info.max:
            raise ValueError(f"{name}[{i}] must be a positive, finite number of seconds, got {x!r:.80}")
    return tuple(float(x) for x in items)


def speedup_estimate(baseline, contender, *, confidence: float = 0.95) -> SpeedupEstimate:
    """How much faster ``contender`` is than ``baseline`` (Timings, or per-call seconds of interleaved
    rounds), with an interval.  (``06_timing_race``)

    >>> e = speedup_estimate([2.0, 2.1, 1.9, 2.0, 2.2, 2.0], [1.0] * 6)
    >>> str(e), e.outcome
    ('2.00x (95% interval 1.90x to 2.20x)', 'faster')"""
    b = _per_call_samples("baseline", baseline)
    c = _per_call_samples("contender", contender)
    if len(b) != len(c):
        raise ValueError(
            f"contender has {len(c)} samples but baseline has {len(b)}: the speedup pairs round i of one "
            "with round i of the other, so both need the same number of interleaved rounds"
        )
    confidence = check_float("confidence", confidence, gt=0, lt=1)
    ratios = sorted(x / y for x, y in zip(b, c, strict=True))
    n, k = len(ratios), _order_statistic(len(ratios), confidence)
    low, high = (0.0, math.inf) if k == 0 else (ratios[k - 1], ratios[n - k])
    return SpeedupEstimate(statistics.median(ratios), low, high, confidence, n)
