"""Shared by the per-notebook exercise tests (tests/test_exercises_nbNN.py).

``feed_mistake(ex, name, *args)`` gives exercise ``ex`` the common wrong answer called ``name`` and
asserts the verdict is "not yet" with that mistake's hint.  ``tests/test_exercise_cells.py`` reads the
test files for these calls: every mistake an exercise declares must be fed in one.
"""

from __future__ import annotations

from amp_lab.check_base import CheckResult
from amp_lab.exercises import Exercise


def run_check(ex: Exercise, *args, **kwargs) -> CheckResult:
    result = ex.check(*args, show=False, **kwargs)
    assert isinstance(result, CheckResult), f"{ex!r} returned {type(result).__name__}, not a CheckResult"
    return result


def feed_mistake(ex: Exercise, name: str, *args, **kwargs) -> CheckResult:
    """The common wrong answer ``name`` is "not yet", and its feedback carries the mistake's hint."""
    mistake = ex.mistake(name)
    result = run_check(ex, *args, **kwargs)
    assert result.status == "not yet", f"{name!r} fed to {ex!r} gave {result.status!r}:\n{result.message}"
    assert mistake.hint in result.message, f"{name!r}: hint {mistake.hint!r} not in:\n{result.message}"
    return result


def assert_passes(ex: Exercise, *args, **kwargs) -> CheckResult:
    result = run_check(ex, *args, **kwargs)
    assert result.status == "passed", f"{ex!r} did not pass:\n{result.message}"
    return result


def assert_not_attempted(ex: Exercise, *args, **kwargs) -> CheckResult:
    result = run_check(ex, *args, **kwargs)
    assert result.status == "not attempted", f"{ex!r} gave {result.status!r}:\n{result.message}"
    return result
