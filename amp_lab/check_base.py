"""The exercise engine's base: a check's result and its three states, and how a learner's answer is read.

Every check ends ``✓ passed`` (verdict ``"exact"``, or ``"close"``: within the stated tolerance),
``✗ not yet`` (``"wrong"``, with a hint) or ``○ not attempted`` (``"unanswered"``: the answer is ``None``
or ``...``; never raises, so notebooks execute before anyone has answered).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Integral

import numpy as np
import torch

from . import formats
from .device import float64_on_cpu
from .dtypes import dtype_named
from .text import say

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
    """What a check found: ``verdict`` is ``"exact"``, ``"close"``, ``"wrong"`` or ``"unanswered"``.

    ``bool(result)`` is ``ok`` (passed).  ``details`` holds the numbers behind the message, ``reasons`` the
    codes of the usual mistakes its notes name, ``code`` its headline's code (:data:`amp_lab.text.REASONS`).
    """

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
    verdict: str, headline: str, notes: Sequence[str] = (), *, show: bool, details=None, reasons=()
) -> CheckResult:
    """The result of a check: ``headline`` after the verdict's mark, then one indented line per note;
    printed when ``show``.  Its reasons are its notes' codes, then ``reasons`` (a nested check's); a
    headline that is a :class:`Note` gives the result its ``code``."""
    lines = [f"{MARK[verdict]}: {headline}", *(f"  {n}" for n in notes if n)]
    codes = [n.code for n in notes if isinstance(n, Note)] + list(reasons)
    result = CheckResult(verdict, "\n".join(lines), dict(details or {}), tuple(dict.fromkeys(codes)))
    result.code = getattr(headline, "code", "")
    if show:
        print(result.message)
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
    return finish(
        "unanswered", note("check.no_answer", name=name, what=what), show=show, details={"answered": False}
    )


def hint_lines(hint: str | None) -> list[str]:
    return [f"hint: {hint}"] if hint else []


@dataclass(frozen=True)
class Precision:
    """A precision to judge numbers in: its name, epsilon, and how to round to it (``fmt`` None: float64)."""

    name: str
    eps: float
    fmt: formats.FloatFormat | None = None

    def round(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` (float64) rounded to this precision, back in float64."""
        if self.fmt is None:
            return t
        if self.fmt.torch_dtype is not None:
            return float64_on_cpu(t.to(self.fmt.torch_dtype))
        return float64_on_cpu(formats.round_to(t, self.fmt))

    def ulp(self, value: float) -> float:
        if self.fmt is None:
            return math.ulp(max(abs(value), 2.0**-1022))
        return formats.format_ulp(value, self.fmt)


FLOAT64 = Precision("float64", 2.0**-52)


def precision(dtype) -> Precision:
    """A precision from a torch dtype, a name (``"fp16"``, ``"tf32"``, ...) or a FloatFormat."""
    if dtype is torch.float64 or (isinstance(dtype, str) and dtype_named(dtype) is torch.float64):
        return FLOAT64
    try:
        f = formats.get_format(dtype)
    except ValueError:
        raise ValueError(
            f"dtype={dtype!r} is not allowed; use a floating torch dtype or one of: "
            + ", ".join(repr(n) for n in (*formats.FORMAT_NAMES, "fp64"))
        ) from None
    return Precision(str(f.torch_dtype).removeprefix("torch.") if f.torch_dtype else f.name, f.eps, f)


def infer_precision(answer, expected, dtype) -> Precision:
    """``dtype``'s precision, else the first floating tensor's among ``answer`` and ``expected``, else float64."""
    if dtype is not None:
        return precision(dtype)
    for t in (answer, expected):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            try:
                return precision(t.dtype)
            except ValueError:
                continue
    return FLOAT64


def num(x: float) -> str:
    """A number as a learner reads it: exact for short binary fractions, 6 significant digits otherwise."""
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == int(x) and abs(x) < 1e16:
        return str(int(x)) if x != 0 or math.copysign(1, x) > 0 else "-0.0"
    return f"{x:.6g}"


def as_float64(x, name: str, *, allow_bool: bool = False) -> tuple[torch.Tensor | None, Note | None]:
    """``x`` as a float64 tensor, or the :class:`Note` on why it is not a number.  Bools are yes/no
    values, not numbers, unless ``allow_bool`` (the expected answer is itself a bool tensor)."""
    if isinstance(x, (str, bytes)):
        return None, note("check.text_answer", name=name, text=x)
    if isinstance(x, Integral) and not isinstance(x, bool):
        try:
            return torch.tensor(float(x), dtype=torch.float64), None
        except OverflowError:
            return None, note("check.huge_int_answer", name=name, bits=int(x).bit_length())
    try:
        t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None, note("check.not_a_number", name=name, kind=type(x).__name__)
    if t.is_complex():
        return None, note("check.complex_answer", name=name)
    if t.dtype == torch.bool and not allow_bool:
        return None, note("check.bool_answer", name=name)
    return float64_on_cpu(t), None


def power_of_two(r: float) -> int | None:
    """``k`` when ``r`` is exactly ``2**k``, else None."""
    if not math.isfinite(r) or r <= 0:
        return None
    m, e = math.frexp(r)
    return e - 1 if m == 0.5 else None


def tensor_list(x) -> list | None:
    if isinstance(x, (list, tuple)) and x and all(isinstance(t, torch.Tensor) for t in x):
        return list(x)
    return None


def worst_verdict(verdicts) -> str:
    # a part left unanswered in an answer that has others makes the whole "not yet", not "not attempted"
    order = ("exact", "close", "wrong")
    return max(("wrong" if v == "unanswered" else v for v in verdicts), key=order.index, default="exact")


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


def hashable(x) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True
