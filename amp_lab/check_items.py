"""The exercise engine for choices, sets, orderings (strings compared case- and space-insensitively) and the
learner's functions (whose exceptions are reported, never raised)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from numbers import Number

import torch

from ._checks import bounded_list
from .check import check_tensor, check_value, num, tensor_list, worst_verdict
from .check_base import MARK, CheckResult, body_lines, finish, is_placeholder, no_answer, norm, note

__all__ = ["check_choice", "check_set", "check_sequence", "check_function"]

MAX_ITEMS = 1_000  # the most items of a learner's set or ordering read (a longer one is refused unread)
_MAX_CASES_SHOWN = 5  # check_function lists at most this many failing cases, and counts the rest


def _listed(items) -> str:
    return ", ".join(repr(x) for x in items)


def hashable(x) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def check_choice(
    answer,
    expected,
    *,
    options: Sequence | Mapping | None = None,
    explanations: Mapping | None = None,
    name: str = "answer",
    hint: str | None = None,
    show: bool = True,
) -> CheckResult:
    """Check a multiple-choice answer; ``expected`` is the right option or a set/list of right ones.
    ``options`` refuses answers that are not options; the chosen option's ``explanations`` entry is shown."""
    accepted = expected if isinstance(expected, (set, frozenset, list, tuple)) else [expected]
    expl = {norm(k): v for k, v in (explanations or {}).items()}
    if is_placeholder(answer):
        shown = f" (one of {_listed(options)})" if options is not None else ""
        return no_answer(name, show, "your choice" + shown)
    if not hashable(answer):
        head = note("check.choice_unhashable", name=name, kind=type(answer).__name__)
        return finish("wrong", head, hint=hint, show=show)
    a = norm(answer)
    if options is not None and a not in {norm(o) for o in options}:
        head = note("check.not_an_option", name=name, answer=answer, options=_listed(options))
        return finish("wrong", head, show=show)
    notes = [expl[a]] if a in expl else []
    if a in {norm(x) for x in accepted}:
        return finish("exact", note("check.choice_right", name=name, answer=answer), notes, show=show)
    if not notes and not hint:
        notes.append(note("check.reread"))
    head = note("check.choice_wrong", name=name, answer=answer)
    return finish("wrong", head, notes, hint=hint, show=show)


def _too_many(name: str, n_right: int, hint, show: bool) -> CheckResult:
    head = note("check.too_many_items", name=name, most=MAX_ITEMS, n=n_right, s="s" if n_right != 1 else "")
    return finish("wrong", head, hint=hint, show=show)


def check_set(
    answer,
    expected,
    *,
    options=None,
    explanations: Mapping | None = None,
    name: str = "answer",
    hint: str | None = None,
    show: bool = True,
) -> CheckResult:
    """Check a set of items ("which of these ...?"): how many right ones are missing (unnamed), which do
    not belong (with their ``explanations``).  A single string is a one-item set."""
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
        return finish("wrong", note("check.not_a_set", name=name), hint=hint, show=show)
    except ValueError:
        return _too_many(name, len(exp), hint, show)
    if odd := [x for x in items if not hashable(x)]:
        head = note("check.set_item_unhashable", name=name, item=odd[0], kind=type(odd[0]).__name__)
        return finish("wrong", head, hint=hint, show=show)
    got = {norm(x) for x in items}
    notes = []
    if options is not None and (unknown := [x for x in items if norm(x) not in {norm(o) for o in options}]):
        notes.append("not among the options: " + _listed(unknown))
    if got == exp:
        return finish("exact", note("check.set_right", name=name, n=len(exp)), show=show)
    extra = [x for x in items if norm(x) not in exp]
    missing = len(exp - got)
    facts = {"name": name, "right": len(got & exp), "n": len(exp), "extra": len(extra)}
    head = note("check.set_extra" if extra else "check.set_partly", **facts)
    if extra:
        notes.append("do not belong: " + _listed(extra))
        notes += [f"{x!r}: {expl[norm(x)]}" for x in extra if norm(x) in expl]
    if missing:
        notes.append(f"{missing} right item{'s are' if missing > 1 else ' is'} missing.")
    return finish("wrong", head, notes, hint=hint, show=show, details={"missing": missing, "extra": extra})


def check_sequence(
    answer, expected: Sequence, *, name: str = "answer", hint: str | None = None, show: bool = True
) -> CheckResult:
    """Check an ordering (e.g. the steps of a mixed-precision training step): which items are missing,
    extra or repeated, and the first position where the order goes wrong."""
    exp = [norm(x) for x in expected]
    if is_placeholder(answer):
        return no_answer(name, show, "a list in the right order")
    if isinstance(answer, str) or not isinstance(answer, Sequence):
        return finish("wrong", note("check.not_a_list", name=name), hint=hint, show=show)
    try:
        answer = bounded_list(name, answer, MAX_ITEMS, "a list")
    except ValueError:
        return _too_many(name, len(exp), hint, show)
    ans = [norm(x) for x in answer]
    if ans == exp:
        return finish("exact", note("check.order_right", name=name, n=len(exp)), show=show)
    missing = [x for x in expected if norm(x) not in ans]
    extra = [x for x in answer if norm(x) not in exp]
    # a list, not a set: items may be unhashable (lists)
    dupes = [x for i, x in enumerate(ans) if ans.count(x) > max(exp.count(x), 1) and x not in ans[:i]]
    dupes.sort(key=str)
    labelled = {"missing": missing, "not part of the answer": extra, "listed more than once": dupes}
    notes = [f"{label}: {_listed(items)}" for label, items in labelled.items() if items]
    details = {"missing": missing, "extra": extra, "repeated": dupes, "first_wrong": None}
    head = note("check.order_wrong", name=name)
    if not notes:
        first = next(i for i, (p, q) in enumerate(zip(ans, exp, strict=True)) if p != q)
        details["first_wrong"] = first
        right_so_far = f" (the first {first} are right)" if first else ""
        head = note("check.order_items_right", name=name, first=right_so_far)
        # the first misplaced item belongs later (the ones before it are right, so it cannot belong earlier)
        notes.append(note("check.comes_later", position=first + 1, item=answer[first]))
    return finish("wrong", head, notes, hint=hint, show=show, details=details)


def check_function(
    fn: Callable,
    reference: Callable,
    cases: Sequence,
    *,
    dtype=None,
    rtol: float | None = None,
    atol: float | None = None,
    name: str = "your function",
    hint: str | None = None,
    show: bool = True,
) -> CheckResult:
    """Run the learner's ``fn`` (the variable ``answer``) and ``reference`` on deep copies of each case
    (an argument tuple, or one argument) and compare the results as :func:`check_tensor` does; when both
    return ``None`` (in place, like ``unscale_``) the arguments after the call are compared."""
    if is_placeholder(fn):
        what = "your function" if name == "your function" else f"your function (`{name}`)"
        return no_answer("answer", show, what)
    if not callable(fn):
        kind = type(fn).__name__
        a_kind = f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"
        return finish("wrong", note("check.not_a_function", name="answer", kind=a_kind), show=show)
    tol = {"dtype": dtype, "rtol": rtol, "atol": atol}
    verdicts, notes, reasons = [], [], []
    for i, case in enumerate(cases, 1):
        args = case if isinstance(case, tuple) else (case,)
        ref_args, my_args = copy.deepcopy(args), copy.deepcopy(args)
        expected = reference(*ref_args)
        parts, verdict = None, "wrong"  # parts: the comparisons made (None: the call failed its contract)
        try:
            got = fn(*my_args)
        except Exception as exc:  # the learner's code: report, never raise
            lines = [note("check.raised", function=name, error=type(exc).__name__, text=exc)]
        else:
            if expected is None and got is None:  # in place: compare each argument after the call
                pairs = enumerate(zip(my_args, ref_args, strict=True), 1)
                parts = [
                    _compare_any(m, r, name=f"argument {j} after the call", **tol) for j, (m, r) in pairs
                ]
            elif got is None or expected is None:
                lines = [note("check.no_return" if got is None else "check.not_in_place", function=name)]
            else:
                parts = [_compare_any(got, expected, name="result", **tol)]
        if parts is not None:
            verdict = worst_verdict(p.verdict for p in parts)
            lines = [line for p in parts if p.verdict != "exact" for line in body_lines(p)]
        verdicts.append(verdict)
        if verdict == "exact":
            continue
        reasons += [c for p in parts for c in p.reasons] if parts is not None else [lines[0].code]
        if sum(v != "exact" for v in verdicts) <= _MAX_CASES_SHOWN:
            label = f"case {i}{_args_text(args)}"
            notes += [f"{label}: {line}" if j == 0 else f"  {line}" for j, line in enumerate(lines)]
    n_hidden = sum(v != "exact" for v in verdicts) - _MAX_CASES_SHOWN
    if n_hidden > 0:
        notes.append(f"... and {n_hidden} more case{'s' if n_hidden > 1 else ''} not shown.")
    verdict = worst_verdict(verdicts)
    right = sum(v != "wrong" for v in verdicts)
    head = note(f"check.function_{verdict}", name=name, n=len(cases), right=right)
    return finish(verdict, head, notes, hint=hint, show=show, details={"verdicts": verdicts}, reasons=reasons)


def _args_text(args: tuple) -> str:
    """`` (arguments 1024, 2, False)`` for short arguments, so the learner can rerun the failing case."""
    parts = []
    for x in args:
        if isinstance(x, float):  # a power of two as the learner writes it (2.0**12), to rerun the case
            k = math.log2(abs(x)) if x and math.isfinite(x) else 0.5
            power = k.is_integer() and abs(k) >= 10
            parts.append(f"{'-' if x < 0 else ''}2.0**{int(k)}" if power else num(x))
        elif isinstance(x, Number) or x is None:
            parts.append(repr(x))
        elif isinstance(x, torch.Tensor):
            parts.append(f"a tensor of shape {tuple(x.shape)}" if x.dim() else num(float(x)))
        elif tensor_list(x):
            parts.append(f"a list of {len(x)} tensors")
        else:
            return ""
    text = ", ".join(parts)
    return f" (arguments {text})" if len(text) <= 80 else ""


def _compare_any(got, expected, *, name, **tol) -> CheckResult:
    """A result against the reference's: tensors and numbers as check_tensor / check_value do, else ``==``."""
    if isinstance(expected, torch.Tensor) or tensor_list(expected):
        return check_tensor(got, expected, name=name, show=False, **tol)
    if isinstance(expected, Number) and not isinstance(expected, bool):
        return check_value(got, expected, name=name, show=False, **tol)
    try:
        same = bool(got == expected)
    except Exception:  # e.g. a tensor compared with something else: not equal
        same = False
    if same:
        return CheckResult("exact", f"{MARK['exact']}: `{name}` matches.")
    return CheckResult("wrong", f"{MARK['wrong']}: `{name}` = {got!r:.80} differs from the reference.")
