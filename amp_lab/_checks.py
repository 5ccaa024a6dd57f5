"""Argument checks shared by every module.

Each helper raises ``ValueError`` whose message names the argument, what it got,
and what is allowed, so a learner never sees a stack trace from deep inside torch.  A value of the
wrong *type* raises :class:`ArgumentTypeError`, which is both a ``TypeError`` and a ``ValueError``:
the contract says TypeError, and code written against the older ValueError keeps working.

Bounds on work (CONTRIBUTING.md, "Bounded work"): every loop count, repeat count and time budget a
learner can pass is capped by one of the constants below, so no call runs for hours by accident.
Sizes are checked against free memory with ``amp_lab.device.check_fits`` before anything is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real

# Upper bounds on work a learner can ask for (each documented where it is used).
MAX_STEPS = 100_000  # training steps, optimizer steps, simulated steps
MAX_REPEATS = 10_000  # timing rounds / samples
MAX_SECONDS = 3600.0  # any time budget
MAX_SAMPLE_S = 10.0  # one timing sample
MAX_SEED = 2**32 - 1  # what NumPy, torch and Python's random all accept

# float32's range: a loss scale is stored as a float32 tensor (as torch.amp.GradScaler's is).
FLOAT32_TINY = 2.0**-126  # the smallest normal float32
FLOAT32_MAX = 3.4028234663852886e38


class ArgumentTypeError(TypeError, ValueError):
    """A public function got an argument of the wrong type (a TypeError that is also a ValueError)."""


def check_choice(name: str, value, allowed: Iterable):
    """Return ``value`` if it is one of ``allowed``, else raise ValueError listing them."""
    allowed = list(allowed)
    if value not in allowed:
        shown = ", ".join(repr(a) for a in allowed)
        raise ValueError(f"{name}={value!r} is not allowed; choose one of: {shown}")
    return value


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as int if it is an integer within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ArgumentTypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_float(
    name: str,
    value,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
) -> float:
    """Return ``value`` as a finite float obeying the given bounds."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ArgumentTypeError(f"{name} must be a real number, got {value!r}")
    try:
        value = float(value)
    except OverflowError:  # an int beyond float64's range
        raise ValueError(f"{name} must be finite, got an integer of {value.bit_length()} bits") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if gt is not None and not value > gt:
        raise ValueError(f"{name} must be > {gt}, got {value}")
    if ge is not None and not value >= ge:
        raise ValueError(f"{name} must be >= {ge}, got {value}")
    if lt is not None and not value < lt:
        raise ValueError(f"{name} must be < {lt}, got {value}")
    if le is not None and not value <= le:
        raise ValueError(f"{name} must be <= {le}, got {value}")
    return value


def check_seed(name: str, value) -> int:
    """A random seed: an integer from 0 to :data:`MAX_SEED` (``torch.manual_seed`` would raise from inside
    torch on a float or a string, and NumPy refuses seeds of 2**32 and more)."""
    return check_int(name, value, minimum=0, maximum=MAX_SEED)


def check_scale(name: str, value) -> float:
    """A loss scale as the float32 it becomes: finite, and a normal float32 (at least 2**-126, at most
    float32's max), so neither scaling nor unscaling turns it into 0 or inf."""
    value = check_float(name, value, gt=0)
    if not FLOAT32_TINY <= value <= FLOAT32_MAX:
        raise ValueError(
            f"{name}={value!r} is not a usable float32 scale: a loss scale is stored in float32, so it must lie "
            f"between 2**-126 ({FLOAT32_TINY:.3g}) and float32's max ({FLOAT32_MAX:.4g})"
        )
    return value


def check_instance(name: str, value, types, what: str):
    """Return ``value`` if it is an instance of ``types``, else raise :class:`ArgumentTypeError`
    naming ``what`` was expected (e.g. "a torch.optim.Optimizer")."""
    if not isinstance(value, types):
        raise ArgumentTypeError(f"{name} must be {what}, got {type(value).__name__}: {value!r:.80}")
    return value
