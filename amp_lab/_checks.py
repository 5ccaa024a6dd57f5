"""Argument checks shared by every module.

Each helper raises ``ValueError`` whose message names the argument, what it got,
and what is allowed, so a learner never sees a stack trace from deep inside torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real


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
        raise ValueError(f"{name} must be an integer, got {value!r}")
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
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
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
