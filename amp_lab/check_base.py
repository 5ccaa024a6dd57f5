"""The exercise engine's base: a check's result and its three states (passed, not yet, not attempted),
its notes (reason codes), placeholders, and options and dtypes as answers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .dtypes import dtype_named
from .text import say, wrap

# verdict -> the state a learner reads, and the mark that opens its message
_STATUS = {"exact": "passed", "close": "passed", "wrong": "not yet", "unanswered": "not attempted"}
MARK = {
    "exact": "✓ passed",
    "close": "✓ passed (within the stated tolerance)",
    "wrong": "✗ not yet",
    "unanswered": "○ not attempted",
}


@dataclass
class CheckResult:
    """What a check found (``verdict``: exact, close, wrong or unanswered; true when passed), the numbers
    behind its message, its notes' reason codes and its headline's ``code``."""

    verdict: str
    message: str
    details: dict = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    code: str = ""

    @property
    def status(self) -> str:
        return _STATUS[self.verdict]

    @property
    def ok(self) -> bool:
        return self.status == "passed"

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"CheckResult(verdict={self.verdict!r}, ok={self.ok})"


class Note(str):
    """A sentence from :data:`amp_lab.text.REASONS` that keeps its ``code``."""

    code: str


def note(code: str, **facts) -> Note:
    """The sentence of reason ``code``, filled from ``facts``."""
    n = Note(say(code, **facts))
    n.code = code
    return n


def finish(
    verdict: str, headline: str, notes: Sequence[str] = (), *, show: bool, details=None, reasons=(), hint=None
) -> CheckResult:
    """The result: ``headline`` after the verdict's mark, one indented line per note (``hint`` last, on a
    "wrong" verdict); printed when ``show``.  Its reasons are its notes' codes, then ``reasons``."""
    notes = [*notes, *(hint_lines(hint) if verdict == "wrong" else [])]
    lines = [f"{MARK[verdict]}: {headline}", *(f"  {n}" for n in notes if n)]
    codes = [n.code for n in notes if isinstance(n, Note)] + list(reasons)
    result = CheckResult(verdict, "\n".join(lines), dict(details or {}), tuple(dict.fromkeys(codes)))
    result.code = getattr(headline, "code", "")
    if show:
        print(wrap(result.message))  # printed in lines that fit the output area, broken between words
    return result


def body_lines(result: CheckResult) -> list[str]:
    """The lines of a nested result's message, without its verdict mark."""
    first, *rest = result.message.splitlines()
    return [first.removeprefix(MARK[result.verdict] + ": ")] + [
        line.strip() and "  " + line.strip() for line in rest
    ]


def is_placeholder(answer) -> bool:
    """``None`` or ``...``: the skeleton's value, an answer not written yet."""
    return answer is None or answer is Ellipsis


def no_answer(name: str, show: bool, what: str = "an answer") -> CheckResult:
    """The "not attempted" result: set ``name`` to ``what`` and run the cell again."""
    head = note("check.no_answer", name=name, what=what)
    return finish("unanswered", head, show=show, details={"answered": False})


def hint_lines(hint: str | None) -> list[str]:
    return [f"hint: {hint}"] if hint else []


def read_dtype(x) -> torch.dtype | None:
    """The dtype a learner's answer names (a torch dtype, a tensor's, or a name such as ``"bf16"``)."""
    if isinstance(x, torch.dtype):
        return x
    if isinstance(x, torch.Tensor):
        return x.dtype
    return dtype_named(x) if isinstance(x, str) else None


def norm(x):
    """An option as answers are compared: text case- and space-insensitively, anything else as it is."""
    return " ".join(x.strip().casefold().split()) if isinstance(x, str) else x
