"""Argument checks at the learner-facing boundary: each raises ``ValueError`` naming the argument, what it got
and what is allowed (:class:`ArgumentTypeError`, a ``TypeError`` that is also a ``ValueError``, for a wrong
type), and the ``MAX_*`` bounds that keep every call's work bounded (CONTRIBUTING.md, "Bounded work")."""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterable, Mapping
from numbers import Integral, Real

import numpy as np
import torch

MAX_STEPS = 100_000  # training steps, optimizer steps, simulated steps
MAX_REPEATS = 10_000  # timing rounds / samples
MAX_SECONDS = 3600.0  # any time budget
MAX_SAMPLE_S = 10.0  # one timing sample
MAX_SEED = 2**32 - 1  # what NumPy, torch and Python's random all accept
MAX_THREADS = 1024  # torch CPU threads: torch.set_num_threads starts that many on the next parallel op
MAX_CALLS_PER_SAMPLE = 10**6  # calls a timing sample averages (measure's ``number``)
MAX_TABLE_ROWS = 10_000  # a table for a notebook cell, not a data dump
MAX_TABLE_COLUMNS = 1_000

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


_HOLDS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


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
    for sign, bound in ((">", gt), (">=", ge), ("<", lt), ("<=", le)):
        if bound is not None and not _HOLDS[sign](value, bound):
            raise ValueError(f"{name} must be {sign} {bound}, got {value}")
    return value


def check_seed(name: str, value) -> int:
    """A random seed: an integer from 0 to :data:`MAX_SEED`."""
    return check_int(name, value, minimum=0, maximum=MAX_SEED)


def check_scale(name: str, value) -> float:
    """A loss scale as the float32 it becomes: a normal float32, so neither scaling nor unscaling gives 0 or inf."""
    value = check_float(name, value, gt=0)
    if not FLOAT32_TINY <= value <= FLOAT32_MAX:
        raise ValueError(
            f"{name}={value!r} is not a usable float32 scale: a loss scale is stored in float32, so it must lie "
            f"between 2**-126 ({FLOAT32_TINY:.3g}) and float32's max ({FLOAT32_MAX:.4g})"
        )
    return value


def check_instance(name: str, value, types, what: str):
    """Return ``value`` if it is an instance of ``types``, else raise :class:`ArgumentTypeError` wanting ``what``."""
    if not isinstance(value, types):
        raise ArgumentTypeError(f"{name} must be {what}, got {type(value).__name__}: {value!r:.80}")
    return value


def check_numel(name: str, t: torch.Tensor, maximum: int, fix: str) -> torch.Tensor:
    """Return tensor ``t`` if it has at most ``maximum`` elements, counted by ``numel()``: an expanded (stride-0)
    view has a tiny storage, but every copy, cast or loop over it works element by element."""
    if t.numel() > maximum:
        raise ValueError(
            f"{name} has {t.numel():,} elements (shape {tuple(t.shape)}); at most {maximum:,}: {fix}"
        )
    return t


def check_bool(name: str, value) -> bool:
    """Return ``value`` as a bool if it is True or False (a NumPy bool too), never a truthy ``"no"`` or 1."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ArgumentTypeError(f"{name} must be True or False, got {type(value).__name__}: {value!r:.80}")


def check_optional_str(name: str, value, what: str = "a string") -> str | None:
    """Return ``value`` if it is None or a string, else raise :class:`ArgumentTypeError`."""
    if value is not None and not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be {what} or None, got {type(value).__name__}: {value!r:.80}")
    return value


def check_callable(name: str, value, *, optional: bool = False):
    """Return ``value`` if it is callable (or None when ``optional``), else raise :class:`ArgumentTypeError`."""
    if (value is None and optional) or callable(value):
        return value
    raise ArgumentTypeError(
        f"{name} must be a function (a callable){' or None' if optional else ''}, "
        f"got {type(value).__name__}: {value!r:.80}"
    )


def check_int_sequence(
    name: str, value, *, minimum: int | None = None, maximum: int | None = None, max_length: int | None = None
) -> tuple[int, ...]:
    """Return ``value`` (a list, tuple, range or 1-D NumPy array; no set, dict or string) as a non-empty tuple of
    ints, each checked by :func:`check_int` as ``name[i]``."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = list(value)
    if not isinstance(value, (list, tuple, range)):
        raise ArgumentTypeError(
            f"{name} must be a list or tuple of integers such as [64, 128], got {type(value).__name__}: {value!r:.80}"
        )
    if len(value) == 0:
        raise ValueError(f"{name} must hold at least one integer, got an empty {type(value).__name__}")
    if max_length is not None and len(value) > max_length:
        raise ValueError(f"{name} may hold at most {max_length} integers, got {len(value)}")
    return tuple(check_int(f"{name}[{i}]", v, minimum=minimum, maximum=maximum) for i, v in enumerate(value))


def check_axes(name: str, value):
    """Return ``value`` if it is None or a matplotlib ``Axes``, else raise."""
    from matplotlib.axes import Axes

    if value is not None:
        check_instance(name, value, Axes, "a matplotlib Axes (such as plt.subplots()[1]) or None")
    return value


def bounded_list(name: str, value, max_length: int, what: str) -> list:
    """The items of an iterable ``value`` as a list of at most ``max_length``, read no further than the bound (an
    endless generator is refused unread).  Text, a dict, a 0-d tensor or a non-iterable is no ``what``."""
    if (
        isinstance(value, (str, bytes, Mapping))
        or not isinstance(value, Iterable)
        or (isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0)
    ):
        raise ArgumentTypeError(f"{name} must be {what}, got {type(value).__name__}: {value!r:.80}")
    try:
        n = len(value)
    except OverflowError:  # len() of a range beyond sys.maxsize
        n = math.inf
    except TypeError:  # an iterator or generator: read at most one past the bound
        n = None
    if n is not None and n > max_length:
        shown = f"{n:,}" if n != math.inf else "more than 2**63"
        raise ValueError(f"{name} may hold at most {max_length:,} items, got {shown}")
    items = list(itertools.islice(value, max_length + 1))
    if len(items) > max_length:
        raise ValueError(f"{name} may hold at most {max_length:,} items, got more")
    return items
