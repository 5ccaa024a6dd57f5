"""The exercise engine for answers that are not numbers: choices, sets, orderings, and functions the learner writes.

Strings compare case- and space-insensitively.  A learner's function runs on copies of each case,
beside the exercise's reference; its results are judged by :mod:`amp_lab.check`'s rules, and an
exception it raises is reported, never raised.  Each check returns a
:class:`~amp_lab.check_base.CheckResult`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from numbers import Number

import torch

from ._checks import bounded_list
from .check import check_tensor, check_value
from .check_base import (
    MARK,
    CheckResult,
    Note,
    body_lines,
    finish,
    hashable,
    hint_lines,
    is_placeholder,
    no_answer,
    norm,
    note,
    num,
    power_of_two,
    tensor_list,
    worst_verdict,
)

__all__ = ["check_choice", "check_set", "check_sequence", "check_function", "MAX_ITEMS"]


# The most items of a learner's set or ordering that are read (a longer one is refused before it is read).
MAX_ITEMS = 1_000


def check_choice(
    answer,
    expected,
    *,
    options: Sequence | Mapping | None = None,
    explanations: Mapping | None = None,
    name: str = "answer",
    hint: str | None = None,
    reveal: bool = False,
    show: bool = True,
) -> CheckResult:
    """Check a multiple-choice answer.  ``expected`` is the right option or a set/list of right ones.

    Strings compare case- and space-insensitively (``"B"`` == ``" b"``).  ``options`` (a list, or
    a dict of option -> text) rejects answers that are not options; ``explanations`` maps an
    option to why it is right or wrong, and the learner's option's explanation is shown.
    """
    accepted = expected if isinstance(expected, (set, frozenset, list, tuple)) else [expected]
    accepted_n = {norm(x) for x in accepted}
    expl = {norm(k): v for k, v in (explanations or {}).items()}
    if is_placeholder(answer):
        shown = ""
        if options is not None:
            shown = " (one of " + ", ".join(repr(o) for o in options) + ")"
        return no_answer(name, show, "your choice" + shown)
    if not hashable(answer):
        return finish(
            "wrong",
            f"`{name}` is a {type(answer).__name__}; this exercise wants one option, e.g. 'a'.",
            hint_lines(hint),
            show=show,
        )
    a = norm(answer)
    if options is not None and a not in {norm(o) for o in options}:
        allowed = ", ".join(repr(o) for o in options)
        return finish("wrong", f"`{name}` = {answer!r} is not one of the options: {allowed}.", show=show)
    notes = [expl[a]] if a in expl else []
    if a in accepted_n:
        return finish("exact", f"`{name}` = {answer!r} is right.", notes, show=show)
    if reveal:
        notes.append("right: " + ", ".join(repr(x) for x in accepted))
    if not notes and not hint:
        notes.append(note("check.reread"))
    return finish(
        "wrong", f"`{name}` = {answer!r} is not the right choice.", notes + hint_lines(hint), show=show
    )


def check_set(
    answer,
    expected,
    *,
    options=None,
    explanations: Mapping | None = None,
    name: str = "answer",
    hint: str | None = None,
    reveal: bool = False,
    show: bool = True,
) -> CheckResult:
    """Check an answer that is a set of items ("which of these ...?"), order irrelevant.

    Says how many right items are missing (without naming them unless ``reveal``), names the
    items that do not belong, and shows ``explanations`` for the wrong ones picked.  Strings
    compare case- and space-insensitively; a single string is read as a one-item set.
    """
    exp = {norm(x) for x in expected}
    expl = {norm(k): v for k, v in (explanations or {}).items()}
    if is_placeholder(answer):
        return no_answer(name, show, "a set such as {'a', 'b'}")
    if isinstance(answer, (str, Number)):
        answer = [answer]
    if isinstance(answer, Mapping):  # `{}` is how many write an empty set: a dict's keys are its items
        answer = answer.keys()
    try:
        items = bounded_list(name, answer, MAX_ITEMS, "a set")
    except TypeError:  # ArgumentTypeError: not a collection
        return finish("wrong", f"`{name}` should be a set such as {{'a', 'b'}}.", hint_lines(hint), show=show)
    except ValueError:
        return _too_many(name, len(exp), hint, show)
    odd = [x for x in items if not hashable(x)]
    if odd:
        return finish(
            "wrong",
            f"`{name}` holds {odd[0]!r:.40}, a {type(odd[0]).__name__}; each item should be one option, e.g. {{'a', 'b'}}.",
            hint_lines(hint),
            show=show,
        )
    got = {norm(x) for x in items}
    notes = []
    if options is not None:
        allowed = {norm(o) for o in options}
        unknown = [x for x in items if norm(x) not in allowed]
        if unknown:
            notes.append("not among the options: " + ", ".join(repr(x) for x in unknown))
    if got == exp:
        return finish("exact", f"`{name}` holds exactly the {len(exp)} right items.", show=show)
    extra = [x for x in items if norm(x) not in exp]
    missing = exp - got
    right = len(got & exp)
    head = f"`{name}` has {right} of the {len(exp)} right items"
    head += f" and {len(extra)} that do not belong." if extra else "."
    if extra:
        notes.append("do not belong: " + ", ".join(repr(x) for x in extra))
        notes += [f"{x!r}: {expl[norm(x)]}" for x in extra if norm(x) in expl]
    if missing:
        n = len(missing)
        notes.append(f"{n} right item{'s are' if n > 1 else ' is'} missing.")
        if reveal:
            notes.append("missing: " + ", ".join(repr(x) for x in expected if norm(x) in missing))
    return finish(
        "wrong", head, notes + hint_lines(hint), show=show, details={"missing": len(missing), "extra": extra}
    )


def _too_many(name: str, n_right: int, hint, show: bool) -> CheckResult:
    """The verdict on a learner's collection too long to read (more than :data:`MAX_ITEMS`)."""
    return finish(
        "wrong",
        f"`{name}` holds more than {MAX_ITEMS:,} items; this exercise has {n_right} right one"
        f"{'s' if n_right != 1 else ''}.",
        hint_lines(hint),
        show=show,
    )


def check_sequence(
    answer,
    expected: Sequence,
    *,
    name: str = "answer",
    hint: str | None = None,
    reveal: bool = False,
    show: bool = True,
) -> CheckResult:
    """Check an ordering (e.g. the steps of a mixed-precision training step).

    Says which items are missing or extra, and the first position where the order goes wrong.
    Strings compare case- and space-insensitively.
    """
    exp = [norm(x) for x in expected]
    if is_placeholder(answer):
        return no_answer(name, show, "a list in the right order")
    if isinstance(answer, str) or not isinstance(answer, Sequence):
        return finish(
            "wrong", f"`{name}` should be a list, e.g. ['a', 'b', ...].", hint_lines(hint), show=show
        )
    try:
        answer = bounded_list(name, answer, MAX_ITEMS, "a list")
    except ValueError:
        return _too_many(name, len(exp), hint, show)
    ans = [norm(x) for x in answer]
    if ans == exp:
        return finish("exact", f"`{name}` has all {len(exp)} items in the right order.", show=show)
    missing = [x for x in expected if norm(x) not in ans]
    extra = [x for x in answer if norm(x) not in exp]
    dupes = []  # a list, not a set: items may be unhashable (lists)
    for x in ans:
        if ans.count(x) > 1 and exp.count(x) < ans.count(x) and x not in dupes:
            dupes.append(x)
    dupes.sort(key=str)
    notes = []
    if missing:
        notes.append("missing: " + ", ".join(repr(x) for x in missing))
    if extra:
        notes.append("not part of the answer: " + ", ".join(repr(x) for x in extra))
    if dupes:
        notes.append("listed more than once: " + ", ".join(repr(x) for x in dupes))
    head = f"`{name}` is not in the right order."
    details = {"missing": missing, "extra": extra, "repeated": dupes, "first_wrong": None}
    if not missing and not extra and not dupes:
        first = next(i for i, (p, q) in enumerate(zip(ans, exp, strict=True)) if p != q)
        details["first_wrong"] = first
        head = f"`{name}` has the right items, but not in the right order" + (
            f" (the first {first} are right)." if first else "."
        )
        # the first misplaced item belongs later (the ones before it are right, so it cannot belong earlier)
        notes.append(note("check.comes_later", position=first + 1, item=answer[first]))
    if reveal:
        notes.append("right order: " + " -> ".join(str(x) for x in expected))
    return finish("wrong", head, notes + hint_lines(hint), show=show, details=details)


def check_function(
    fn: Callable,
    reference: Callable,
    cases: Sequence,
    *,
    dtype=None,
    rtol: float | None = None,
    atol: float | None = None,
    name: str = "your function",
    variable: str = "answer",
    hint: str | None = None,
    show: bool = True,
) -> CheckResult:
    """Run the learner's ``fn`` and ``reference`` on each case and compare the results.

    ``cases`` is a list of argument tuples (a single non-tuple argument is wrapped).  Each call
    gets its own deep copy of the arguments.  When both functions return ``None`` they are
    in-place (like ``unscale_``): then the arguments after the call are compared instead.
    Exceptions from ``fn`` are reported, not raised.  Results are compared with
    :func:`check_tensor` / :func:`check_value` rules (``dtype``, ``rtol``, ``atol``).
    ``name`` is the function's name in the feedback; ``variable`` is the variable the learner sets
    to their function (``answer = my_function``), named when it is unset or not a function.
    ``hint`` is added only to a ``"wrong"`` verdict.
    """
    if is_placeholder(fn):
        what = "your function" if name in ("your function", variable) else f"your function (`{name}`)"
        return no_answer(variable, show, what)
    if not callable(fn):
        kind = type(fn).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        return finish("wrong", f"`{variable}` is {article} {kind}, not a function.", show=show)
    verdicts, notes, reasons = [], [], []
    shown_cases = 0
    for i, case in enumerate(cases, 1):
        args = case if isinstance(case, tuple) else (case,)
        if shown_cases >= _MAX_CASES_SHOWN:  # keep the feedback short: count the rest, do not list them
            label = None
        else:
            label = f"case {i}{_args_text(args)}"
        ref_args, my_args = copy.deepcopy(args), copy.deepcopy(args)
        expected = reference(*ref_args)
        try:
            got = fn(*my_args)
        except Exception as exc:  # the learner's code: report, never raise
            verdicts.append("wrong")
            failed = note("check.raised", function=name, error=type(exc).__name__, text=exc)
            shown_cases += _note_case(notes, reasons, label, [failed])
            continue
        if expected is None and got is None:
            # In place (like unscale_): compare each argument after the call.
            parts = [
                _compare_any(m, r_, dtype=dtype, rtol=rtol, atol=atol, name=f"argument {j} after the call")
                for j, (m, r_) in enumerate(zip(my_args, ref_args, strict=True), 1)
            ]
            verdict_i = worst_verdict(p.verdict for p in parts)
            lines = [line for p in parts if p.verdict != "exact" for line in body_lines(p)]
            r = CheckResult(
                verdict_i, "\n".join(lines) or "matches", reasons=tuple(c for p in parts for c in p.reasons)
            )
        elif got is None:
            verdicts.append("wrong")
            shown_cases += _note_case(notes, reasons, label, [note("check.no_return", function=name)])
            continue
        elif expected is None:
            verdicts.append("wrong")
            shown_cases += _note_case(notes, reasons, label, [note("check.not_in_place", function=name)])
            continue
        else:
            r = _compare_any(got, expected, dtype=dtype, rtol=rtol, atol=atol, name="result")
        verdicts.append(r.verdict)
        if r.verdict != "exact":
            reasons.extend(r.reasons)
            shown_cases += _note_case(notes, reasons, label, body_lines(r))
    verdict = worst_verdict(verdicts)
    n_hidden = sum(v != "exact" for v in verdicts) - shown_cases
    if n_hidden > 0:
        notes.append(f"... and {n_hidden} more case{'s' if n_hidden > 1 else ''} not shown.")
    n_ok = sum(v != "wrong" for v in verdicts)
    if verdict == "exact":
        head = f"{name} matches the reference bit for bit on all {len(cases)} cases."
    elif verdict == "close":
        head = f"{name} matches the reference within tolerance on all {len(cases)} cases."
    else:
        head = f"{name} matches the reference on {n_ok} of {len(cases)} cases."
    if verdict == "wrong":
        notes += hint_lines(hint)
    return finish(verdict, head, notes, show=show, details={"verdicts": verdicts}, reasons=reasons)


_MAX_CASES_SHOWN = 5


def _note_case(notes: list[str], reasons: list[str], label: str | None, lines: Sequence[str]) -> int:
    """Add a case's feedback lines under ``label`` (skipped when ``label`` is None); 1 if added."""
    reasons.extend(line.code for line in lines if isinstance(line, Note))
    if label is None:
        return 0
    notes.extend(f"{label}: {line}" if j == 0 else f"  {line}" for j, line in enumerate(lines))
    return 1


def _args_text(args: tuple) -> str:
    """`` (args 1024, 2, False)`` for short arguments, so the learner can rerun the failing case."""
    parts = []
    for x in args:
        if isinstance(x, bool) or x is None:
            parts.append(repr(x))
        elif isinstance(x, float):
            k = power_of_two(abs(x))
            big = k is not None and abs(k) >= 10
            parts.append(f"{'-' if x < 0 else ''}2.0**{k}" if big else num(x))
        elif isinstance(x, Number):
            parts.append(repr(x))
        elif isinstance(x, torch.Tensor):
            parts.append(f"a tensor of shape {tuple(x.shape)}" if x.dim() else num(float(x)))
        elif tensor_list(x):
            parts.append(f"a list of {len(x)} tensors")
        else:
            return ""
    text = ", ".join(parts)
    return f" (arguments {text})" if len(text) <= 80 else ""


def _compare_any(got, expected, *, dtype, rtol, atol, name) -> CheckResult:
    """Compare a result with the reference's: tensors and numbers by :func:`check_tensor` /
    :func:`check_value`, dicts key by key and lists/tuples item by item (recursively), anything
    else with ``==``."""

    def wrong(text: str) -> CheckResult:
        return CheckResult("wrong", f"{MARK['wrong']}: `{name}` {text}.")

    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            return wrong(f"should be a dict, got a {type(got).__name__}")
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if missing or extra:
            parts = [
                f"{what} keys " + ", ".join(map(repr, keys))
                for what, keys in (("missing", missing), ("unexpected", extra))
                if keys
            ]
            return wrong("has " + " and ".join(parts))
        pairs = [(f"{name}[{k!r}]", got[k], e) for k, e in expected.items()]
    elif isinstance(expected, (list, tuple)) and not tensor_list(expected):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return wrong(f"should have {len(expected)} items")
        pairs = [(f"{name}[{k}]", g, e) for k, (g, e) in enumerate(zip(got, expected, strict=True))]
    elif isinstance(expected, torch.Tensor) or tensor_list(expected):
        return check_tensor(got, expected, dtype=dtype, rtol=rtol, atol=atol, name=name, show=False)
    elif isinstance(expected, Number) and not isinstance(expected, bool):
        return check_value(got, expected, dtype=dtype, rtol=rtol, atol=atol, name=name, show=False)
    else:
        try:
            same = bool(got == expected)
        except Exception:  # e.g. a tensor or array compared with something else: not equal
            same = False
        if same:
            return CheckResult("exact", f"{MARK['exact']}: `{name}` matches.")
        return wrong(f"= {got!r:.80} differs from the reference")
    parts = [_compare_any(g, e, dtype=dtype, rtol=rtol, atol=atol, name=n) for n, g, e in pairs]
    verdict = worst_verdict(p.verdict for p in parts)
    lines = [line for p in parts if p.verdict != "exact" for line in body_lines(p)]
    head = f"{MARK[verdict]}: " + (lines[0] if lines else f"`{name}` matches.")
    reasons = tuple(dict.fromkeys(c for p in parts for c in p.reasons))
    return CheckResult(verdict, "\n".join([head, *lines[1:]]), reasons=reasons)
