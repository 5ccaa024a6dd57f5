"""The course's exercises, one module per notebook (``nb01`` ... ``nb11``): a check cell is one call,
``nb03.ex2.check(answer, ...)``; the expected values and common wrong answers (:class:`Mistake`) stay here."""

from __future__ import annotations

import functools
import importlib
import inspect
import math
from collections.abc import Callable, Sequence
from numbers import Real
from typing import NamedTuple

from .._checks import check_bool
from ..check_base import CheckResult, finish

NOTEBOOK_MODULES = ("nb01", "nb02", "nb03", "nb04", "nb05", "nb06", "nb07", "nb08", "nb09", "nb10", "nb11")


class Mistake(NamedTuple):
    """A common wrong answer (``name``, short) and ``hint``, a fragment of the feedback it gets."""

    name: str
    hint: str


class Exercise:
    """One exercise of one notebook: ``check(answer, ...)`` prints the verdict and returns it."""

    def __init__(self, notebook: str, number: int, title: str, check: Callable, mistakes=()):
        self.notebook, self.number, self.title = notebook, number, title

        @functools.wraps(check)
        def checked(*args, show: bool = True, **kwargs) -> CheckResult:
            check_bool("show", show)  # the one argument every exercise's check takes besides its answers
            return check(*args, show=show, **kwargs)

        self.check = checked
        self.mistakes = tuple(
            Mistake(*m) for m in (mistakes.items() if isinstance(mistakes, dict) else mistakes)
        )
        self.__doc__ = check.__doc__

    def mistake(self, name: str) -> Mistake:
        """The common wrong answer called ``name``."""
        found = {m.name: m for m in self.mistakes}
        if name not in found:
            known = ", ".join(map(repr, found)) or "none"
            raise ValueError(
                f"exercise {self.notebook}.{self.number} has no mistake named {name!r}; it has: {known}"
            )
        return found[name]

    def hint(self, default: str, *found: bool) -> str:
        """The hint of the first mistake (in declared order) whose flag in ``found`` is true, else ``default``."""
        return next((m.hint for m, hit in zip(self.mistakes, found, strict=False) if hit), default)

    def __repr__(self) -> str:
        return f"<exercise {self.notebook}·{self.number}: {self.title}; check{inspect.signature(self.check)}>"


def exercise(number: int, title: str, *, mistakes=()):
    """Decorator: a check function becomes the :class:`Exercise` ``ex<number>`` of its module's notebook
    (``amp_lab.exercises.nb03`` → ``"03"``); ``mistakes``: a ``{name: hint}`` table or :class:`Mistake` rows."""

    def wrap(fn: Callable) -> Exercise:
        return Exercise(fn.__module__.rsplit(".", 1)[-1].removeprefix("nb"), number, title, fn, mistakes)

    return wrap


def wrong(headline: str, hint: str, *, show: bool) -> CheckResult:
    """A "not yet" whose one note is ``hint``."""
    return finish("wrong", headline, [f"hint: {hint}"], show=show)


def answer_names(answer) -> set[str] | None:
    """An answer that is a set, list or tuple of strings, as a set of them stripped and lower-cased."""
    if isinstance(answer, (set, frozenset, list, tuple)) and all(isinstance(a, str) for a in answer):
        return {a.strip().lower() for a in answer}
    return None


def finite_float(x) -> float | None:
    """An answer ``x`` as a finite float when it is a real number (not a bool) that float64 holds, else None."""
    try:
        value = float(x) if isinstance(x, Real) and not isinstance(x, bool) else math.nan
    except (OverflowError, ValueError, TypeError):
        value = math.nan
    return value if math.isfinite(value) else None


def exercises_of(module: str) -> list[Exercise]:
    """The exercises a notebook module defines, in order of their number."""
    found = [
        v for v in vars(importlib.import_module(f"{__name__}.{module}")).values() if isinstance(v, Exercise)
    ]
    return sorted(found, key=lambda e: e.number)


def all_exercises() -> list[Exercise]:
    """Every exercise of the course, notebook by notebook."""
    return [ex for name in NOTEBOOK_MODULES for ex in exercises_of(name)]


def combine(parts: Sequence[CheckResult], *, show: bool = True) -> CheckResult:
    """One verdict for several answers: not attempted when none is answered, passed when all passed
    (within tolerance if one is only within it), otherwise not yet; the message lists each part's."""
    statuses = [p.status for p in parts]
    if all(s == "not attempted" for s in statuses):
        verdict = "unanswered"
    elif any(s != "passed" for s in statuses):
        verdict = "wrong"
    else:
        verdict = "close" if any(p.verdict == "close" for p in parts) else "exact"
    n = len(parts)
    head = {"unanswered": "no answer yet", "wrong": f"{statuses.count('passed')} of {n} parts passed"}
    head = head.get(verdict, f"all {n} parts passed")
    notes = [line for p in parts for line in p.message.splitlines()]
    reasons = [code for p in parts for code in p.reasons]
    return finish(verdict, f"{head}.", notes, show=show, details={"parts": parts}, reasons=reasons)
