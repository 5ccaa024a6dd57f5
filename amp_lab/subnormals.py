"""CPU subnormals, timed (``09_pitfalls``, section 4): float32 arithmetic on subnormal numbers with
flush-to-zero off and on (:func:`subnormal_slowdown`, timed by :func:`amp_lab.timing.measure`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ._checks import check_choice, check_float, check_int
from .device import check_fits, torch_threads
from .dtypes import dtype_name
from .pitfalls import MAX_NUMEL, Reads
from .text import Reading, format_ratio, format_seconds, wrap
from .timing import Contestant, measure

MAX_TIMING_REPEATS = 100  # subnormal_slowdown's samples per contestant
MAX_TIMING_SAMPLE_S = 1.0  # subnormal_slowdown's seconds per sample
TINY = torch.finfo(torch.float32).smallest_normal / 4  # a float32 subnormal
FTZ_FORMATS = (torch.float32, torch.bfloat16, torch.float16)  # whose subnormals flush-to-zero may zero


def flush_denormal_enabled() -> bool:
    """Whether this thread flushes subnormal float32 numbers to zero now, *measured* (torch has no getter)."""
    return bool((torch.tensor([TINY]) * 1.0).item() == 0.0)


@contextlib.contextmanager
def flush_denormal(enabled: bool):
    """Run a block with ``torch.set_flush_denormal(enabled)`` (this thread's setting), then restore the one
    found before, even when the block raises.  Yields whether this CPU supports the switch."""
    before = flush_denormal_enabled()
    supported = bool(torch.set_flush_denormal(enabled))
    try:
        yield supported
    finally:
        torch.set_flush_denormal(before)


@dataclass(frozen=True)
class SubnormalResult(Reads):
    """Float32 arithmetic on normal and on subnormal inputs, timed with flush-to-zero off and on; ``timings``
    maps a label to an :class:`amp_lab.timing.Timing`."""

    op: str
    numel: int
    flush_supported: bool
    flushes_to_zero: bool  # with flush-to-zero on, op(subnormal) gave only zeros
    restored: bool  # the flush setting after the run equals the one before
    timings: dict
    flushed: tuple[str, ...] = ()  # the formats of FTZ_FORMATS whose subnormal times 1.0 gave 0 with it on

    def __str__(self) -> str:
        lines = [wrap(f"  {t}") for t in self.timings.values()]
        return "\n".join([super().__str__(), *lines])

    @property
    def slowdown(self) -> float:
        """Median time on subnormal inputs / on normal inputs (flush-to-zero off)."""
        return self.timings["subnormal"].median / self.timings["normal"].median

    @property
    def flushed_slowdown(self) -> float | None:
        """The same with flush-to-zero on (None where the CPU does not support it)."""
        t = self.timings.get("subnormal, flush-to-zero")
        return None if t is None else t.median / self.timings["normal"].median

    def reading(self) -> Reading:
        """Outcome: slow (at least 1.2 times as long) or no penalty; then what flush-to-zero did."""
        time = {k: format_seconds(t.median) for k, t in self.timings.items()}
        facts = vars(self) | {"slowdown": self.slowdown, "slowdown_ratio": format_ratio(self.slowdown)}
        facts |= {"normal_time": time["normal"], "subnormal_time": time["subnormal"]}
        outcome = "subnormals.slow" if self.slowdown >= 1.2 else "subnormals.no_penalty"
        if not self.flush_supported:
            return Reading(outcome, ("subnormals.ftz_unsupported",), facts)
        facts["flushed_time"] = time["subnormal, flush-to-zero"]
        facts["flushed_ratio"] = format_ratio(self.flushed_slowdown)
        names = [dtype_name(d) for d in FTZ_FORMATS]
        facts["flushed_formats"] = ", ".join(self.flushed) or "none"
        facts["kept_formats"] = ", ".join(n for n in names if n not in self.flushed) or "none"
        ftz = "subnormals.ftz_zeros" if self.flushes_to_zero else "subnormals.ftz_kept"
        return Reading(outcome, (ftz, "subnormals.ftz_formats"), facts)


_SUBNORMAL_OPS = {
    "div": ("division by 3", lambda x, out: torch.div(x, 3.0, out=out)),
    "mul": ("multiplication by 0.75", lambda x, out: torch.mul(x, 0.75, out=out)),
    "add": ("addition to itself", lambda x, out: torch.add(x, x, out=out)),
}


def subnormal_slowdown(
    numel: int = 1 << 18, *, op: str = "div", repeats: int = 8, min_sample_s: float = 0.005
) -> SubnormalResult:
    """Time ``op`` (``"div"``, ``"mul"`` or ``"add"``) on ``numel`` CPU float32 numbers: normal (1.5),
    subnormal, and subnormal with flush-to-zero on, on **one** thread (the setting is per thread), restored.
    ``repeats`` <= :data:`MAX_TIMING_REPEATS`, ``min_sample_s`` <= :data:`MAX_TIMING_SAMPLE_S`."""
    numel = check_int("numel", numel, minimum=1, maximum=MAX_NUMEL)
    check_choice("op", op, list(_SUBNORMAL_OPS))
    repeats = check_int("repeats", repeats, minimum=1, maximum=MAX_TIMING_REPEATS)
    min_sample_s = check_float("min_sample_s", min_sample_s, gt=0, le=MAX_TIMING_SAMPLE_S)
    check_fits(numel * 4 * 3, "cpu", f"subnormal_slowdown(numel={numel})", "choose a smaller numel")
    name, fn = _SUBNORMAL_OPS[op]
    before = flush_denormal_enabled()
    normal, subnormal, out = torch.full((numel,), 1.5), torch.full((numel,), TINY), torch.empty(numel)
    with torch_threads(1), flush_denormal(True) as supported:
        flushes = bool(supported and (fn(subnormal, out) == 0).all())
        tiny = [torch.tensor(torch.finfo(d).smallest_normal / 4, dtype=d) for d in FTZ_FORMATS]
        flushed = tuple(dtype_name(t.dtype) for t in tiny if supported and float(t * 1.0) == 0)
    fns = {
        "normal": lambda: fn(normal, out),
        "subnormal": Contestant(lambda: fn(subnormal, out), lambda: flush_denormal(False)),
    }
    if supported:
        fns["subnormal, flush-to-zero"] = Contestant(lambda: fn(subnormal, out), lambda: flush_denormal(True))
    with flush_denormal(False):
        timings = measure(
            fns, device="cpu", warmup=2, repeats=repeats, min_sample_s=min_sample_s, num_threads=1
        )
    restored = flush_denormal_enabled() == before
    return SubnormalResult(name, numel, supported, flushes, restored, timings, flushed)
