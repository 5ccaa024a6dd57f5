"""amp_lab.exercises itself: Exercise, Mistake, combine, the registry; and every exercise of the course
fed junk answers (a learner can type anything: the check answers "not yet" or "not attempted", never a
traceback)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch

from amp_lab import exercises
from amp_lab.check import check_value
from amp_lab.exercises import Exercise, Mistake, all_exercises, combine, exercise, exercises_of


def _check(answer, *, show=True):
    """Is it 2?"""
    return check_value(answer, 2.0, show=show, hint="think of 1 + 1")


def test_exercise_keeps_its_check_and_finds_mistakes_by_name():
    ex = Exercise("03", 2, "Two", _check, [Mistake("one for two", "think of")])
    assert ex.check(2.0, show=False).status == "passed"
    assert ex.mistake("one for two").hint == "think of"
    with pytest.raises(TypeError, match="show"):  # the learner-facing boundary, for every exercise
        ex.check(2.0, show="yes")
    assert ex.__doc__ == "Is it 2?" and "check(answer, *, show=True)" in repr(ex)
    with pytest.raises(ValueError, match="has no mistake named 'three'.*'one for two'"):
        ex.mistake("three")


def test_every_exercise_declares_distinct_mistakes_with_hints():
    """The course's exercises, read once here instead of checked at import: a mistake is found by its
    name, so names are distinct, and each has a hint to look for."""
    for ex in all_exercises():
        names = [m.name for m in ex.mistakes]
        assert len(set(names)) == len(names), (ex, names)
        assert all(isinstance(m, Mistake) and m.name.strip() and m.hint.strip() for m in ex.mistakes), ex
        assert 1 <= ex.number <= 20 and ex.notebook == ex.check.__module__.rsplit(".nb", 1)[-1], ex


def test_the_decorator_takes_the_notebook_from_the_module_name():
    ex = exercise(4, "Four", mistakes=[Mistake("m", "h")])(_check)
    assert isinstance(ex, Exercise) and ex.number == 4
    assert ex.notebook == _check.__module__.rsplit(".", 1)[-1]  # this test module is not an nbNN module


def test_combine_reads_as_one_of_three_states():
    yes, no, none = (
        check_value(1, 1, show=False),
        check_value(1, 2, show=False),
        check_value(None, 1, show=False),
    )
    assert combine([yes, yes], show=False).status == "passed"
    assert combine([yes, no], show=False).message.startswith("✗ not yet: 1 of 2 parts passed.")
    assert combine([yes, none], show=False).status == "not yet"  # half answered is not "not attempted"
    assert combine([none, none], show=False).message.startswith("○ not attempted")
    close = check_value(1 + 1e-9, 1, rtol=1e-6, show=False)
    assert combine([yes, close], show=False).message.startswith("✓ passed (within the stated tolerance)")
    assert combine([no, check_value(-2, 2, show=False)], show=False).reasons == (
        "check.exponent_too_small",
        "check.sign_flipped",
    )


def test_registry_lists_every_notebook_in_order():
    assert exercises.NOTEBOOK_MODULES == (
        "nb01",
        "nb02",
        "nb03",
        "nb04",
        "nb05",
        "nb06",
        "nb07",
        "nb08",
        "nb09",
        "nb10",
        "nb11",
    )
    every = all_exercises()
    for name in exercises.NOTEBOOK_MODULES:
        numbers = [ex.number for ex in exercises_of(name)]
        assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 2, (name, numbers)
    assert len(every) == sum(len(exercises_of(n)) for n in exercises.NOTEBOOK_MODULES)


# What a learner may type into an answer cell.
JUNK = [
    None,
    ...,
    0,
    -1,
    2**2000,
    1.5,
    math.nan,
    -math.inf,
    True,
    "",
    "junk",
    "fp16",
    [],
    [1, "a"],
    {},
    {"x": 1},
    set(),
    (1, 2),
    np.float32(0.5),
    torch.tensor([1.0, 2.0]),
    torch.float16,
    object(),
    print,
]


def _answer_only(ex: Exercise) -> bool:
    """Exercises whose every required argument is an answer: they can be fed junk without notebook data."""
    params = [
        p
        for p in inspect.signature(ex.check).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return bool(params) and all(p.name.startswith("answer") for p in params)


@pytest.mark.parametrize("ex", [e for e in all_exercises() if _answer_only(e)], ids=repr)
def test_junk_answers_get_a_verdict_never_a_traceback(ex):
    n = sum(
        1
        for p in inspect.signature(ex.check).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    )
    for junk in JUNK:
        result = ex.check(*([junk] * n), show=False)
        # a function that does nothing (print) may read as an unwritten skeleton: "not attempted" is fine
        expected = (
            ("not attempted",) if junk is None or junk is Ellipsis else ("passed", "not yet", "not attempted")
        )
        assert result.status in expected, f"{ex!r} given {junk!r}: {result.status}\n{result.message}"
