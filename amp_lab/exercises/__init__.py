"""The course's exercises, one module per notebook: ``nb01`` ... ``nb09``.

A notebook's check cell is one call into its module, and nothing else::

    from amp_lab.exercises import nb03
    result = nb03.ex2.check(answer)

so the expected values, how they are computed and the rubric stay here, out of sight of the
learner (``tests/test_exercise_cells.py`` parses every notebook and fails on a check cell that
does more).  Each exercise is an :class:`Exercise`: its number, title, the ``check`` function
(built on the comparison engine, :mod:`amp_lab.check` and :mod:`amp_lab.check_items`, whose public
names are the API an exercise module uses, so every check ends in one state:
``✓ passed``, ``✗ not yet`` with a hint, or ``○ not attempted``) and the common wrong answers it
diagnoses (:class:`Mistake`), which the package tests feed it one by one.

Arguments a check takes besides the answer are what the notebook measured (``all_grads``, the
race ``result``): the right answer is computed from the learner's own data, never typed in.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real

from .._checks import check_bool
from ..check_base import MARK, CheckResult

__all__ = [
    "Exercise",
    "Mistake",
    "exercise",
    "exercises_of",
    "all_exercises",
    "combine",
    "finite_float",
    "NOTEBOOK_MODULES",
]

# The notebooks with exercises, one module each (amp_lab/exercises/nbNN.py).
NOTEBOOK_MODULES = ("nb01", "nb02", "nb03", "nb04", "nb05", "nb06", "nb07", "nb08", "nb09")


@dataclass(frozen=True)
class Mistake:
    """A common wrong answer and the words its feedback must contain.

    ``name`` is short ("j for g", "float32 for a promote op"); ``hint`` is a fragment of the
    feedback that answer gets, which points at the idea without stating the answer.
    """

    name: str
    hint: str


class Exercise:
    """One exercise of one notebook: ``check(answer, ...)`` prints the verdict and returns it.

    Built with :func:`exercise` around the function that does the checking; ``check`` refuses a ``show``
    that is not True or False (a TypeError naming it), for every exercise.
    """

    def __init__(
        self, notebook: str, number: int, title: str, check: Callable, mistakes: Sequence[Mistake] = ()
    ):
        self.notebook = notebook
        self.number = number
        self.title = title

        @functools.wraps(check)
        def checked(*args, show: bool = True, **kwargs) -> CheckResult:
            check_bool("show", show)  # the one argument every exercise's check takes besides its answers
            return check(*args, show=show, **kwargs)

        self.check = checked
        self.mistakes = tuple(mistakes)
        self.__doc__ = check.__doc__

    def mistake(self, name: str) -> Mistake:
        """The common wrong answer called ``name``."""
        for m in self.mistakes:
            if m.name == name:
                return m
        known = ", ".join(repr(m.name) for m in self.mistakes) or "none"
        raise ValueError(
            f"exercise {self.notebook}.{self.number} has no mistake named {name!r}; it has: {known}"
        )

    @property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.check)

    def __repr__(self) -> str:
        return f"<exercise {self.notebook}·{self.number}: {self.title}; check{self.signature}>"


def exercise(number: int, title: str, *, mistakes: Sequence[Mistake] = ()):
    """Decorator: turn a module-level check function into the :class:`Exercise` ``ex<number>``.

    The notebook is taken from the module's name (``amp_lab.exercises.nb03`` → ``"03"``).
    """

    def wrap(fn: Callable) -> Exercise:
        module = fn.__module__.rsplit(".", 1)[-1]
        notebook = module.removeprefix("nb") if module.startswith("nb") else module
        return Exercise(notebook, number, title, fn, mistakes)

    return wrap


def finite_float(x) -> float | None:
    """An answer ``x`` as a finite float when it is a real number (not a bool) that float64 holds, else None."""
    if not isinstance(x, Real) or isinstance(x, bool):
        return None
    try:
        value = float(x)
    except (OverflowError, ValueError, TypeError):
        return None
    return value if math.isfinite(value) else None


def exercises_of(module) -> list[Exercise]:
    """The exercises a notebook module defines, in order of their number."""
    if isinstance(module, str):
        module = importlib.import_module(f"{__name__}.{module}")
    found = [v for v in vars(module).values() if isinstance(v, Exercise)]
    return sorted(found, key=lambda e: e.number)


def all_exercises() -> list[Exercise]:
    """Every exercise of the course, notebook by notebook."""
    return [ex for name in NOTEBOOK_MODULES for ex in exercises_of(name)]


def combine(parts: Sequence[CheckResult], *, show: bool = True) -> CheckResult:
    """One verdict for an exercise with several answers (``answer_fp16`` and ``answer_bf16``).

    Not attempted when no part is answered; passed when every part passed (within tolerance if
    any part is only within tolerance); otherwise not yet.  The message lists every part's own.
    """
    statuses = [p.status for p in parts]
    if all(s == "not attempted" for s in statuses):
        verdict = "unanswered"
    elif any(s != "passed" for s in statuses):
        verdict = "wrong"
    else:
        verdict = "close" if any(p.verdict == "close" for p in parts) else "exact"
    n_passed = statuses.count("passed")
    head = {
        "unanswered": "no answer yet",
        "wrong": f"{n_passed} of {len(parts)} parts passed",
        "close": f"all {len(parts)} parts passed",
        "exact": f"all {len(parts)} parts passed",
    }[verdict]
    body = [f"  {line}" for p in parts for line in p.message.splitlines()]
    reasons = tuple(dict.fromkeys(code for p in parts for code in p.reasons))
    result = CheckResult(verdict, "\n".join([f"{MARK[verdict]}: {head}.", *body]), {"parts": parts}, reasons)
    if show:
        print(result.message)
    return result
