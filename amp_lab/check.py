"""Self-check helpers for the exercises at the end of every notebook.

A learner calls one of these on their answer.  Each prints its feedback and returns a
:class:`CheckResult` with ``.ok``, ``.verdict`` (``"exact"``, ``"close"`` or ``"wrong"``) and
``.message``.  The feedback is never just "wrong":

* numbers and tensors are judged **by the precision they live in**: equal bit for bit
  (``"exact"``), within that dtype's tolerance (``"close"``: the same value once rounded to the
  dtype, or within a few of its ulps), or how far off, in ulps of the dtype, with a hint that
  names the usual mistake (a loss scale left in, a sign flipped, values that underflowed to
  zero, the right value in the wrong format, a transposed result, ...);
* bit patterns are compared field by field (sign, exponent, mantissa) and the learner's bits
  are decoded, so an exponent off by one or a truncated mantissa is named as such;
* dtypes, multiple-choice answers and orderings of steps say which part is right.

Every message starts with one of three states: ``✓ passed`` (``"exact"``, or ``"close"``:
within the stated tolerance, which is a pass), ``✗ not yet`` (with a hint) or ``○ not attempted``
(verdict ``"unanswered"``: the answer is ``None`` or ``...``), which never raises, so notebooks execute cleanly before anyone
has answered.  Expected answers are not shown unless the call passes ``reveal=True``.

Used by the ``## Exercises`` sections of notebooks ``01_float_formats`` to
``07_amp_training_recipe``.  Helpers: :func:`check_value`, :func:`check_tensor`,
:func:`check_bits`, :func:`check_dtype`, :func:`check_dtypes`, :func:`check_choice`,
:func:`check_set`, :func:`check_between`, :func:`check_sequence`, :func:`check_function`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Number

import numpy as np
import torch

from . import formats
from ._checks import ArgumentTypeError, check_float, check_instance
from ._checks import check_choice as _check_arg_choice
from .device import dtype_name, float64_on_cpu

__all__ = [
    "CheckResult",
    "check_value",
    "check_tensor",
    "check_bits",
    "check_dtype",
    "check_dtypes",
    "check_choice",
    "check_set",
    "check_between",
    "check_sequence",
    "check_function",
    "VERDICTS",
]

VERDICTS = ("exact", "close", "wrong", "unanswered")
# The three states a learner reads: passed (exactly, or within the stated tolerance: a pass either way),
# not yet (with a hint), not attempted.
STATUSES = ("passed", "not yet", "not attempted")
_STATUS = {"exact": "passed", "close": "passed", "wrong": "not yet", "unanswered": "not attempted"}
_MARK = {
    "exact": "✓ passed",
    "close": "✓ passed (within the stated tolerance)",
    "wrong": "✗ not yet",
    "unanswered": "○ not attempted",
}


# --------------------------------------------------------------------------------------------
# The result
# --------------------------------------------------------------------------------------------


@dataclass
class CheckResult:
    """What a check found: ``verdict`` is ``"exact"``, ``"close"``, ``"wrong"`` or ``"unanswered"``.

    ``status`` is what the learner reads: ``"passed"`` (exact, or close: within the stated
    tolerance, which is a pass), ``"not yet"`` or ``"not attempted"``.  ``ok`` is True when
    passed; ``bool(result)`` is ``ok``, so tests and solutions can ``assert check_value(...)``.
    ``details`` holds the numbers behind the message (errors, ulps, positions).
    """

    verdict: str
    message: str
    details: dict = field(default_factory=dict)

    def __post_init__(self):
        _check_arg_choice("verdict", self.verdict, VERDICTS)

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


def _finish(verdict: str, headline: str, notes: Sequence[str] = (), *, show: bool, details=None) -> CheckResult:
    lines = [f"{_MARK[verdict]}: {headline}"]
    lines += [f"  {n}" for n in notes if n]
    result = CheckResult(verdict, "\n".join(lines), dict(details or {}))
    if show:
        print(result.message)
    return result


def _body(result: CheckResult) -> list[str]:
    """The lines of a nested result's message, without its verdict mark."""
    lines = result.message.splitlines()
    first = lines[0]
    for mark in _MARK.values():
        if first.startswith(mark + ": "):
            first = first[len(mark) + 2 :]
    return [first] + [line.strip() and "  " + line.strip() for line in lines[1:]]


def _is_placeholder(answer) -> bool:
    return answer is None or answer is Ellipsis


def _no_answer(name: str, show: bool, what: str = "an answer") -> CheckResult:
    return _finish(
        "unanswered",
        f"no answer yet: set `{name}` to {what} and run this cell again.",
        show=show,
        details={"answered": False},
    )


def _check_options(name, hint, reveal=False, show=True, **more) -> None:
    """The arguments a notebook's author passes with every check: ``name`` (a string), ``hint`` (a
    string or None), ``reveal`` and ``show`` (True/False); ``more`` are further name arguments."""
    check_instance("name", name, str, "a string (the variable's name in the feedback)")
    for key, value in more.items():
        check_instance(key, value, str, "a string")
    if hint is not None:
        check_instance("hint", hint, str, "a string or None")
    check_instance("reveal", reveal, (bool, np.bool_), "True or False")
    check_instance("show", show, (bool, np.bool_), "True or False")


def _hint_lines(hint: str | None) -> list[str]:
    return [f"hint: {hint}"] if hint else []


# --------------------------------------------------------------------------------------------
# Precisions: what "within the dtype's tolerance" means
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Precision:
    """A precision to judge numbers in: its name, epsilon, and how to round to it."""

    name: str
    eps: float
    min_normal: float
    fmt: formats.FloatFormat | None  # None: float64 (no rounding needed)

    def round(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` (float64) rounded to this precision, back in float64."""
        if self.fmt is None:
            return t
        if self.fmt.torch_dtype is not None:
            return float64_on_cpu(t.to(self.fmt.torch_dtype))
        return float64_on_cpu(formats.round_to(t, self.fmt))

    def ulp(self, value: float) -> float:
        if self.fmt is None:
            return math.ulp(max(abs(value), 2.2250738585072014e-308))
        return formats.format_ulp(value, self.fmt)


_FLOAT64 = _Precision("float64", 2.0**-52, 2.0**-1022, None)


def _precision(dtype) -> _Precision:
    """A precision from a torch dtype, a name (``"fp16"``, ``"tf32"``, ...) or a FloatFormat."""
    if isinstance(dtype, str) and dtype.strip().lower().removeprefix("torch.") in ("float64", "double", "fp64"):
        return _FLOAT64
    if dtype is torch.float64:
        return _FLOAT64
    try:
        f = formats.get_format(dtype)
    except ValueError:
        raise ValueError(
            f"dtype={dtype!r} is not allowed; use a floating torch dtype or one of: "
            + ", ".join(repr(n) for n in (*formats.FORMAT_NAMES, "fp64"))
        ) from None
    name = str(f.torch_dtype).removeprefix("torch.") if f.torch_dtype is not None else f.name
    return _Precision(name, f.eps, f.min_normal, f)


def _infer_precision(answer, expected, dtype) -> _Precision:
    if dtype is not None:
        return _precision(dtype)
    for t in (answer, expected):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            try:
                return _precision(t.dtype)
            except ValueError:
                continue
    return _FLOAT64


def _about_format(expected, dtype) -> bool:
    """Is the exercise about a format: a ``dtype`` is given, or ``expected`` is a low-precision tensor?"""
    if dtype is not None:
        return True
    return isinstance(expected, torch.Tensor) and expected.is_floating_point() and expected.dtype != torch.float64


def _tolerances(prec: _Precision, rtol, atol) -> tuple[float, float]:
    rtol = prec.eps if rtol is None else check_float("rtol", rtol, ge=0)
    atol = 0.0 if atol is None else check_float("atol", atol, ge=0)
    return rtol, atol


def _num(x: float) -> str:
    """A number as a learner reads it: exact for short binary fractions, 6 significant digits otherwise."""
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == int(x) and abs(x) < 1e16:
        return str(int(x)) if x != 0 or math.copysign(1, x) > 0 else "-0.0"
    text = f"{x:.6g}"
    return text


def _as_float64(x, name: str, *, allow_bool: bool = False):
    """``x`` as a float64 tensor, or an error string a learner can read.

    Bools (Python, numpy, and bool tensors) are yes/no values, not numbers, unless ``allow_bool``
    (the expected answer is itself a bool tensor, e.g. a "found inf" flag)."""
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            return None, f"`{name}` is a complex tensor; the answer is real"
        if x.dtype == torch.bool and not allow_bool:
            return None, f"`{name}` is a bool tensor (True/False values); this exercise wants numbers"
        return float64_on_cpu(x), None
    if isinstance(x, (str, bytes)):
        return None, f"`{name}` is text ({x!r:.60}); write it as a number, without quotes"
    if isinstance(x, (bool, np.bool_)):
        return None, f"`{name}` is {x}, a yes/no value; this exercise wants a number"
    if isinstance(x, Integral):
        try:
            float(x)
        except OverflowError:
            return None, (
                f"`{name}` is an integer of {int(x).bit_length()} bits, too large for any float "
                "(float64 ends near 1.8e308)"
            )
    try:
        t = torch.as_tensor(x, dtype=torch.float64, device="cpu")
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None, f"`{name}` is a {type(x).__name__}, which is not a number or a tensor"
    if not allow_bool and isinstance(x, (np.ndarray, list, tuple)):
        try:
            if np.asarray(x).dtype == np.bool_:
                return None, f"`{name}` holds True/False values; this exercise wants numbers"
        except (TypeError, ValueError):
            pass
    return t, None


def _is_bool_tensor(x) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype == torch.bool


# --------------------------------------------------------------------------------------------
# Comparing numbers
# --------------------------------------------------------------------------------------------


def _power_of_two(r: float) -> int | None:
    if not math.isfinite(r) or r <= 0:
        return None
    m, e = math.frexp(r)
    return e - 1 if m == 0.5 else None


def _diagnose(
    a: torch.Tensor, e: torch.Tensor, prec: _Precision, rtol: float, atol: float, *, about_format: bool = True
) -> list[str]:
    """Hints for a wrong numeric answer, most specific first.

    The notes about rounding to another format are only offered when ``about_format``: the
    exercise names a dtype, or its expected value is itself a low-precision tensor.  For a plain
    number (255 versus 256, 0.0156 versus 2**-6) "rounded to bfloat16 it is right" would mislead.
    """
    notes: list[str] = []
    a_bad = ~torch.isfinite(a)
    e_bad = ~torch.isfinite(e)
    new_bad = a_bad & ~e_bad
    if new_bad.any():
        n = int(new_bad.sum())
        kinds = "NaN" if torch.isnan(a[new_bad]).all() else "inf/NaN"
        where = "" if a.numel() == 1 else f"{n} element{'s' if n > 1 else ''} "
        notes.append(
            f"{where}{kinds} where the expected answer is finite: did something overflow "
            f"(beyond {prec.name}'s largest value) or divide 0 by 0?"
        )
    finite = torch.isfinite(a) & torch.isfinite(e)
    zeros = finite & (a == 0) & (e != 0)
    if zeros.any() and not (a == 0).all():
        n = int(zeros.sum())
        notes.append(
            f"{n} value{'s are' if n > 1 else ' is'} 0 where the expected is not: "
            "an underflow (too small for the format) or a missing term?"
        )
    elif zeros.any():
        notes.append("your answer is all zeros: did every value underflow, or is the computation not filled in yet?")
    both = finite & (e != 0) & (a != 0)
    if both.any() and bool(both.all() | ~finite.all()):
        ratio = a[both] / e[both]
        r0 = float(ratio.flatten()[0])
        constant = bool(((ratio - r0).abs() <= 1e-5 * abs(r0)).all())
        if constant and abs(r0 - 1.0) > 1e-5:
            k = round(math.log2(abs(r0)))
            exactly = "exactly" if _power_of_two(abs(r0)) is not None else "about"
            sign = "-" if r0 < 0 else ""
            what = "every value of your answer is" if a.numel() > 1 else "your answer is"
            if abs(r0 + 1.0) <= 1e-5:
                notes.append("every value has the right size but the opposite sign: a sign flipped?")
            elif k != 0 and abs(abs(r0) / 2.0**k - 1.0) <= 1e-5:
                if k > 0:
                    notes.append(
                        f"{what} {exactly} {sign}2**{k} = {sign}{_num(2.0**k)} times the expected one: "
                        f"off by a power of two, as if an exponent were {k} too large"
                    )
                else:
                    notes.append(
                        f"{what} {exactly} {sign}2**{k} times the expected one: off by a power of two, as if "
                        f"an exponent were {-k} too small"
                    )
            elif a.numel() > 1:
                notes.append(f"every value is {r0:.4g} times the expected one: a constant factor is off")
    # The right value in another precision (or not rounded at all).
    if about_format and e.numel() and bool(finite.all()):
        for other in ("fp32", "bf16", "fp16", "tf32", "fp8_e4m3", "fp8_e5m2"):
            p = _precision(other)
            if p.name == prec.name:
                continue
            if bool((a == p.round(e)).all()) and not bool((a == e).all()):
                notes.append(
                    f"your answer is the expected value rounded to {p.name}: this exercise is about {prec.name}"
                )
                break
        else:
            for other in ("fp16", "bf16", "fp32", "tf32", "fp8_e4m3", "fp8_e5m2"):
                p = _precision(other)
                if bool((p.round(a) == e).all()):
                    notes.append(
                        f"rounded to {p.name}, your answer becomes the expected value: "
                        f"the exercise asks for the value {p.name} actually stores"
                    )
                    return notes
            if prec.fmt is not None and not bool((a == prec.round(a)).all()):
                notes.append(
                    f"your answer is not a {prec.name} number (it changes when rounded to {prec.name}): "
                    f"round it to {prec.name} first?"
                )
    return notes


def _compare(
    a,
    e,
    prec: _Precision,
    rtol: float,
    atol: float,
    name: str,
    reveal: bool,
    *,
    explicit_tol: bool = False,
    about_format: bool = True,
):
    """(verdict, headline, notes, details) for float64 tensors ``a`` and ``e`` of equal shape.

    ``explicit_tol``: ``rtol``/``atol`` were given by the exercise (not the dtype's defaults), so
    a "close" answer is within *the exercise's* tolerance.  ``about_format``: see :func:`_diagnose`.
    """
    same = (a == e) | (torch.isnan(a) & torch.isnan(e))
    scalar = e.numel() == 1
    if bool(same.all()):
        signs_differ = (torch.signbit(a) != torch.signbit(e)) & (a == 0)
        if bool(signs_differ.any()):
            return (
                "close",
                f"`{name}` equals the expected value, except for the sign of zero (-0.0 versus +0.0).",
                ["+0.0 == -0.0 is True, but their bit patterns differ in the sign bit."],
                {"max_abs_error": 0.0},
            )
        what = "the expected value" if scalar else f"the expected tensor, all {e.numel()} elements"
        return "exact", f"`{name}` equals {what} bit for bit.", [], {"max_abs_error": 0.0}

    nan_mismatch = torch.isnan(a) ^ torch.isnan(e)
    inf_mismatch = (torch.isinf(a) | torch.isinf(e)) & ~(a == e)
    with torch.no_grad():
        diff = (a - e).abs()
        diff = torch.where(same, torch.zeros_like(diff), diff)
        diff = torch.where(nan_mismatch | inf_mismatch, torch.full_like(diff, math.inf), diff)
    worst = int(torch.argmax(diff.flatten().nan_to_num(nan=math.inf)))
    a_w, e_w = float(a.flatten()[worst]), float(e.flatten()[worst])
    max_abs = float(diff.flatten()[worst])
    rel = max_abs / abs(e_w) if e_w != 0 else math.inf
    ulp = prec.ulp(e_w) if math.isfinite(e_w) else math.nan
    ulps = max_abs / ulp if (math.isfinite(max_abs) and ulp > 0) else math.inf
    rounds_same = bool(((prec.round(a) == prec.round(e)) | (torch.isnan(a) & torch.isnan(e))).all())
    within = bool(((diff <= atol + rtol * e.abs()) | same).all())
    n_off = int((~same).sum())
    details = {
        "max_abs_error": max_abs,
        "max_rel_error": rel,
        "ulps": ulps,
        "elements_off": n_off,
        "precision": prec.name,
        "rtol": rtol,
        "atol": atol,
    }
    size = f"{_num(max_abs)} off" if math.isfinite(max_abs) else "not finite where the expected value is"
    if math.isfinite(ulps) and ulps < 2**20:
        size += f", {ulps:.3g} ulp{'s' if ulps != 1 else ''} of {prec.name}"
    worst_text = ""
    if not scalar:
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), e.shape))
        details["worst_index"] = idx
        versus = f" (expected {_num(e_w)})" if reveal else ""
        worst_text = f"worst at index {idx}: {_num(a_w)}{versus}, which is {size}"
    if rounds_same or within:
        bound = f"|error| <= {atol:g} + {rtol:.3g} x |expected|"
        if rounds_same:
            head = f"`{name}` is right to {prec.name} precision: it rounds to the same {prec.name} number as the expected value."
        elif explicit_tol:
            head = f"`{name}` is right within the exercise's tolerance ({bound})."
        else:
            head = f"`{name}` is right to {prec.name} precision: within {prec.name}'s tolerance ({bound})."
        notes = [f"that is a pass; the difference, not bit for bit: {worst_text if not scalar else size}."]
        if reveal:
            notes.append(f"expected: {_show(e)}")
        return "close", head, notes, details
    if scalar:
        if math.isfinite(a_w) and math.isfinite(e_w) and e_w != 0 and (a_w > 0) == (e_w > 0) and a_w != 0:
            ratio = a_w / e_w
            if ratio > 2 or ratio < 0.5:
                how = f"about {ratio:.3g} times the expected value" if ratio > 2 else f"about 1/{1 / ratio:.3g} of it"
                head = f"`{name}` is too {'large' if ratio > 1 else 'small'}: {how} ({size})."
            else:
                head = f"`{name}` is too {'large' if ratio > 1 else 'small'} by {abs(ratio - 1) * 100:.3g}% ({size})."
        elif math.isfinite(a_w) and math.isfinite(e_w) and a_w * e_w < 0:
            head = f"`{name}` has the wrong sign ({size})."
        else:
            head = f"`{name}` = {_num(a_w)} is off ({size})."
    else:
        head = f"{n_off} of {e.numel()} elements of `{name}` are off; {worst_text}."
    notes = _diagnose(a, e, prec, rtol, atol, about_format=about_format)
    if reveal:
        notes.append(f"expected: {_show(e)}")
    return "wrong", head, notes, details


def _show(t: torch.Tensor) -> str:
    if t.numel() == 1:
        return _num(float(t.reshape(())))
    return str(t)


def check_value(
    answer,
    expected,
    *,
    dtype=None,
    rtol: float | None = None,
    atol: float | None = None,
    name: str = "answer",
    hint: str | None = None,
    reveal: bool = False,
    show: bool = True,
) -> CheckResult:
    """Check a number against the expected one, judged in the precision ``dtype``.

    ``dtype`` (a torch dtype or a format name such as ``"fp16"``, ``"tf32"``, ``"fp8_e4m3"``)
    is the precision the answer lives in; default: the dtype of a tensor argument, else float64.
    ``"exact"``: bit for bit.  ``"close"``: the same number once rounded to ``dtype``, or
    ``|answer - expected| <= atol + rtol * |expected|`` with ``rtol`` defaulting to the dtype's
    epsilon and ``atol`` to 0.  Otherwise ``"wrong"``, with how far off (relative, in ulps of
    ``dtype``) and what the mistake probably is.  ``hint`` is added only to a ``"wrong"`` verdict.
    With an explicit ``rtol``/``atol`` a ``"close"`` answer is "within the exercise's tolerance".
    Notes about rounding to another format are offered only when the exercise is about a format
    (``dtype`` given, or ``expected`` a tensor of a dtype other than float64).

    Taught with the exercises of ``01_float_formats`` onwards.
    """
    _check_options(name, hint, reveal, show)
    prec = _infer_precision(answer, expected, dtype)
    rtol_given, atol_given = rtol is not None, atol is not None
    rtol, atol = _tolerances(prec, rtol, atol)
    e, err = _as_float64(expected, "expected")
    if err:
        raise ValueError(f"expected must be a number, but {err.removeprefix('`expected` ')}")
    if _is_placeholder(answer):
        return _no_answer(name, show, "a number")
    if e.numel() != 1:
        raise ValueError(f"expected must be a single number (use check_tensor for tensors), got shape {tuple(e.shape)}")
    a, err = _as_float64(answer, name)
    if err:
        return _finish("wrong", err + ".", _hint_lines(hint), show=show)
    if a.numel() != 1:
        return _finish(
            "wrong",
            f"`{name}` has {a.numel()} numbers (shape {tuple(a.shape)}); this exercise wants a single number.",
            _hint_lines(hint),
            show=show,
        )
    explicit = rtol_given or atol_given
    verdict, head, notes, details = _compare(
        a.reshape(()), e.reshape(()), prec, rtol, atol, name, reveal,
        explicit_tol=explicit, about_format=_about_format(expected, dtype),
    )  # fmt: skip
    if verdict == "wrong":
        notes = notes + _hint_lines(hint)
    return _finish(verdict, head, notes, show=show, details=details)


def _flatten_tensors(x):
    if isinstance(x, (list, tuple)) and x and all(isinstance(t, torch.Tensor) for t in x):
        return list(x)
    return None


def check_tensor(
    answer,
    expected,
    *,
    dtype=None,
    rtol: float | None = None,
    atol: float | None = None,
    name: str = "answer",
    hint: str | None = None,
    reveal: bool = False,
    show: bool = True,
) -> CheckResult:
    """Check a tensor (or a list of tensors, e.g. gradients) against the expected one.

    Tolerances as in :func:`check_value`, per element; ``dtype`` defaults to the answer's
    floating dtype (a bfloat16 answer is judged with bfloat16's epsilon).  A wrong shape is
    reported as such (with "transposed?" when the transpose would fit); a wrong answer says how
    many elements are off, the worst one and its error in ulps, and names the usual mistakes.
    """
    _check_options(name, hint, reveal, show)
    if _is_placeholder(answer):
        return _no_answer(name, show, "a tensor")
    exp_list = _flatten_tensors(expected)
    if exp_list is not None:
        ans_list = _flatten_tensors(answer) if isinstance(answer, (list, tuple)) else None
        if ans_list is None or len(ans_list) != len(exp_list):
            got = f"{len(answer)} items" if isinstance(answer, (list, tuple)) else f"a {type(answer).__name__}"
            return _finish(
                "wrong",
                f"`{name}` should be a list of {len(exp_list)} tensors; got {got}.",
                _hint_lines(hint),
                show=show,
            )
        results = [
            check_tensor(a, e, dtype=dtype, rtol=rtol, atol=atol, name=f"{name}[{i}]", reveal=reveal, show=False)
            for i, (a, e) in enumerate(zip(ans_list, exp_list, strict=True))
        ]
        verdict = _worst(r.verdict for r in results)
        if verdict == "exact":
            return _finish("exact", f"all {len(results)} tensors of `{name}` are right bit for bit.", show=show)
        n_ok = sum(r.ok for r in results)
        head = f"{n_ok} of {len(results)} tensors of `{name}` are right"
        head += "." if verdict == "wrong" else ", within their dtype's tolerance."
        notes = [line for r in results if r.verdict != "exact" for line in _body(r)]
        if verdict == "wrong":
            notes += _hint_lines(hint)
        return _finish(verdict, head, notes, show=show, details={"items": results})

    e, err = _as_float64(expected, "expected", allow_bool=True)
    if err:
        raise ValueError(f"expected must be a tensor or numbers, but {err.removeprefix('`expected` ')}")
    prec = _infer_precision(answer, expected, dtype)
    explicit = rtol is not None or atol is not None
    rtol, atol = _tolerances(prec, rtol, atol)
    a, err = _as_float64(answer, name, allow_bool=_is_bool_tensor(expected))
    if err:
        return _finish("wrong", err + ".", _hint_lines(hint), show=show)
    notes: list[str] = []
    if a.shape != e.shape:
        head = f"`{name}` has shape {tuple(a.shape)}; the expected shape is {tuple(e.shape)}."
        if a.dim() == 2 and a.T.shape == e.shape:
            notes.append("it has the transposed shape: is a matrix transposed, or are A and B swapped in A @ B?")
        elif a.numel() == e.numel():
            notes.append("the same number of elements: a reshape or flatten too many (or too few)?")
        elif a.numel() == 1:
            notes.append("a single number: did a reduction (sum/mean) run over everything?")
        return _finish("wrong", head, notes + _hint_lines(hint), show=show)
    if isinstance(answer, torch.Tensor) and isinstance(expected, torch.Tensor) and answer.dtype != expected.dtype:
        notes.append(
            f"(your tensor is {str(answer.dtype).removeprefix('torch.')}, "
            f"the reference is {str(expected.dtype).removeprefix('torch.')}; values are compared, judged in {prec.name})"
        )
    verdict, head, more, details = _compare(
        a, e, prec, rtol, atol, name, reveal, explicit_tol=explicit, about_format=_about_format(expected, dtype)
    )
    notes = more + (notes if verdict != "exact" else [])
    if verdict == "wrong":
        notes += _hint_lines(hint)
    return _finish(verdict, head, notes, show=show, details=details)


def _worst(verdicts) -> str:
    # a part left unanswered in an answer that has others makes the whole "not yet", not "not attempted"
    order = {"exact": 0, "close": 1, "wrong": 2}
    return max(("wrong" if v == "unanswered" else v for v in verdicts), key=order.__getitem__, default="exact")


def check_between(
    answer,
    low: float,
    high: float,
    *,
    name: str = "answer",
    below: str | None = None,
    above: str | None = None,
    hint: str | None = None,
    show: bool = True,
) -> CheckResult:
    """Check that a number lies in ``[low, high]`` (any value there is right: ``"exact"``).

    For answers with a range of right values, such as "a loss scale that brings the gradients
    into FP16's range without overflow".  ``below`` / ``above`` explain what goes wrong on each
    side (e.g. "gradients still underflow" / "the largest gradient overflows").
    """
    _check_options(name, hint, show=show)
    for key, text in (("below", below), ("above", above)):
        if text is not None:
            check_instance(key, text, str, "a string or None")
    low = check_float("low", low)
    high = check_float("high", high, ge=low)
    if _is_placeholder(answer):
        return _no_answer(name, show, "a number")
    a, err = _as_float64(answer, name)
    if err or a.numel() != 1:
        msg = err or f"`{name}` has {a.numel()} numbers; this exercise wants one"
        return _finish("wrong", msg + ".", _hint_lines(hint), show=show)
    x = float(a.reshape(()))
    if math.isnan(x):
        return _finish("wrong", f"`{name}` is NaN.", _hint_lines(hint), show=show)
    if low <= x <= high:
        return _finish("exact", f"`{name}` = {_num(x)} is in the right range.", show=show, details={"value": x})
    if x < low:
        k = math.log2(low / x) if x > 0 else math.inf
        head = f"`{name}` = {_num(x)} is too small" + (f" (by a factor of about 2**{k:.1f})" if math.isfinite(k) else "")
        notes = [below] if below else []
    else:
        k = math.log2(x / high) if high > 0 else math.inf
        head = f"`{name}` = {_num(x)} is too large" + (f" (by a factor of about 2**{k:.1f})" if math.isfinite(k) else "")
        notes = [above] if above else []
    return _finish("wrong", head + ".", notes + _hint_lines(hint), show=show, details={"value": x})


# --------------------------------------------------------------------------------------------
# Bit patterns
# --------------------------------------------------------------------------------------------


def _clean_bits(answer) -> tuple[str | None, str | None]:
    if isinstance(answer, Integral) and not isinstance(answer, (bool, np.bool_)):  # numpy integers too
        return None, "int"
    if not isinstance(answer, str):
        return None, f"`answer` is a {type(answer).__name__}; write the bits as a string such as '0 01111 0000000000'"
    s = answer.strip()
    if s.lower().startswith("0b"):
        s = s[2:]
    elif s.lower().startswith("0x"):
        try:
            return None, ("hex", int(s, 16))
        except ValueError:
            pass
    s = s.replace(" ", "").replace("_", "").replace("|", "")
    if not s or set(s) - {"0", "1"}:
        return None, f"{answer!r} should contain only 0s and 1s (spaces, '_' and '|' between fields are fine)"
    return s, None


def check_bits(
    answer,
    expected: str | None = None,
    *,
    value=None,
    fmt="fp16",
    name: str = "answer",
    hint: str | None = None,
    reveal: bool = False,
    show: bool = True,
) -> CheckResult:
    """Check a bit pattern (a ``"0 01111 0000000000"``-style string, or an int) in format ``fmt``.

    Give either ``expected`` (the right bits) or ``value`` (the bits are those of ``value``
    rounded to ``fmt``, from :func:`amp_lab.formats.decompose`).  Feedback goes field by field:
    the sign, the exponent (with the power of two the learner's field means), the mantissa (how
    many bits differ; off by one in the last place points at rounding).  Any NaN pattern is
    accepted as ``"close"`` when the expected value is NaN.  Taught in ``01_float_formats``.
    """
    _check_options(name, hint, reveal, show)
    f = formats.get_format(fmt)
    if (expected is None) == (value is None):
        raise ValueError("give exactly one of expected= (a bit string) or value= (a number)")
    if expected is None:
        d = formats.decompose(value, f)
        exp_bits = d.bits
    else:
        exp_bits, problem = _clean_bits(expected)
        if problem or len(exp_bits) != f.total_bits:
            raise ValueError(f"expected={expected!r} must be {f.total_bits} characters of 0/1 for {f.name}")
    if _is_placeholder(answer):
        return _no_answer(name, show, f"a string of {f.total_bits} bits")
    bits, problem = _clean_bits(answer)
    if isinstance(problem, tuple):  # a hex string such as "0x3c00"
        problem, answer = "int", problem[1]
    if problem == "int":
        if not 0 <= answer < 2**f.total_bits:
            return _finish(
                "wrong",
                f"`{name}` = {answer} does not fit in {f.total_bits} bits.",
                _hint_lines(hint),
                show=show,
            )
        bits, problem = f"{int(answer):0{f.total_bits}b}", None
    layout = f"1 sign, {f.exponent_bits} exponent, {f.mantissa_bits} mantissa"
    if problem:
        return _finish("wrong", problem.replace("`answer`", f"`{name}`") + ".", _hint_lines(hint), show=show)
    if len(bits) != f.total_bits:
        return _finish(
            "wrong",
            f"`{name}` has {len(bits)} bits; {f.name} has {f.total_bits} ({layout}).",
            _hint_lines(hint),
            show=show,
            details={"bits": bits},
        )
    if bits == exp_bits:
        return _finish("exact", f"`{name}` is the right {f.name} bit pattern.", show=show, details={"bits": bits})

    mine = formats.from_bits(bits, f)
    target = formats.from_bits(exp_bits, f)
    ne = f.exponent_bits
    fields = {
        "sign": (bits[0], exp_bits[0]),
        "exponent": (bits[1 : 1 + ne], exp_bits[1 : 1 + ne]),
        "mantissa": (bits[1 + ne :], exp_bits[1 + ne :]),
    }
    details = {"bits": bits, "your_value": mine}
    shown = f"{bits[0]} {bits[1:1 + ne]} {bits[1 + ne:]}"
    if math.isnan(mine) and math.isnan(target):
        return _finish(
            "close",
            f"`{name}` is a NaN pattern, as expected, but not the canonical one torch produces.",
            ["every pattern with an all-ones exponent and a non-zero mantissa is NaN in IEEE formats"]
            + ([f"expected: {exp_bits}"] if reveal else []),
            show=show,
            details=details,
        )
    right = [k for k, (m, x) in fields.items() if m == x]
    wrong = [k for k, (m, x) in fields.items() if m != x]
    head = f"`{name}` ({shown}) encodes {_num(mine)} in {f.name}; {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} off"
    if right:
        head += f" ({' and '.join(right)} right)"
    notes = []
    if "sign" in wrong:
        notes.append("sign: 0 means positive, 1 means negative.")
    if "exponent" in wrong:
        m_e, x_e = int(fields["exponent"][0], 2), int(fields["exponent"][1], 2)
        all_ones = 2**ne - 1
        if m_e == 0:
            meaning = "0 (zero or a subnormal)"
        elif m_e == all_ones and not f.finite_only:
            meaning = "all ones (inf or NaN)"
        else:
            meaning = f"{m_e}, i.e. 2**({m_e} - {f.bias}) = 2**{m_e - f.bias}"
        direction = "larger" if x_e > m_e else "smaller"
        notes.append(
            f"exponent: your field {fields['exponent'][0]} is {meaning}; the value needs a {direction} exponent "
            f"(remember the bias, {f.bias}: stored field = power of two + {f.bias})."
        )
    if "mantissa" in wrong:
        m_m, x_m = int(fields["mantissa"][0], 2), int(fields["mantissa"][1], 2)
        n_diff = sum(p != q for p, q in zip(fields["mantissa"][0], fields["mantissa"][1], strict=True))
        text = f"mantissa: {n_diff} of {f.mantissa_bits} bits differ"
        if fields["exponent"][0] == fields["exponent"][1] and abs(m_m - x_m) == 1:
            text += (
                "; off by one in the last place: round to nearest (ties to even) "
                "by looking at the first bit you drop, not truncate"
            )
        notes.append(text + ".")
    if value is not None and math.isfinite(mine) and math.isfinite(target) and mine != 0:
        rel = abs(mine - float(value)) / abs(float(value)) if float(value) != 0 else math.inf
        notes.append(f"the value your bits encode is {rel:.3g} (relative) away from {_num(float(value))}.")
    if reveal:
        notes.append(f"expected: {exp_bits[0]} {exp_bits[1:1 + ne]} {exp_bits[1 + ne:]}")
    return _finish("wrong", head + ".", notes + _hint_lines(hint), show=show, details=details)


# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------

_DTYPE_ALIASES = {
    "fp64": torch.float64, "float64": torch.float64, "double": torch.float64,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn, "float8_e4m3fn": torch.float8_e4m3fn, "e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2, "float8_e5m2": torch.float8_e5m2, "e5m2": torch.float8_e5m2,
    "int64": torch.int64, "long": torch.int64, "int32": torch.int32, "int": torch.int32,
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
}  # fmt: skip


def _parse_dtype(x) -> torch.dtype | None:
    if isinstance(x, torch.dtype):
        return x
    if isinstance(x, torch.Tensor):
        return x.dtype
    if isinstance(x, str):
        return _DTYPE_ALIASES.get(x.strip().lower().removeprefix("torch."))
    return None


def _dtype_facts(d: torch.dtype) -> str:
    if d.is_floating_point:
        fi = torch.finfo(d)
        # the mantissa's width from the spacing at 1 (eps = 2**-mantissa_bits), for every float dtype
        mant = round(-math.log2(fi.eps))
        exp = fi.bits - (0 if fi.min > 0 else 1) - mant  # float8_e8m0fnu has no sign bit
        return f"{fi.bits} bits, {exp} exponent and {mant} mantissa bits"
    if d == torch.bool:
        return "a boolean"
    bits = d.itemsize * 8
    if d.is_complex:
        return f"a complex type of {bits} bits (two floats: real and imaginary part)"
    if d in _INTEGER_DTYPES:
        return f"an integer type of {bits} bits"
    return f"{bits} bits"  # quantized and other special dtypes: torch.iinfo/finfo know nothing of them


_INTEGER_DTYPES = {
    getattr(torch, n)
    for n in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")
    if hasattr(torch, n)
}


def check_dtype(
    answer,
    expected,
    *,
    name: str = "answer",
    hint: str | None = None,
    reveal: bool = False,
    show: bool = True,
) -> CheckResult:
    """Check a predicted dtype: a torch dtype, a name (``"bf16"``, ``"torch.float16"``, ``"half"``) or a tensor.

    A wrong answer is told what the dtype it names is (bits, exponent bits) and which of autocast's
    rules to think about, never what the expected dtype is (unless ``reveal``).  Taught in ``05_autocast_op_lists`` and ``07``.
    """
    _check_options(name, hint, reveal, show)
    exp = _parse_dtype(expected)
    if exp is None:
        raise ValueError(f"expected={expected!r} is not a dtype or a dtype name")
    if _is_placeholder(answer):
        return _no_answer(name, show, "a dtype such as torch.float32 or 'bf16'")
    got = _parse_dtype(answer)
    if got is None:
        return _finish(
            "wrong",
            f"`{name}` = {answer!r} is not a dtype; write e.g. torch.bfloat16, torch.float16, torch.float32 "
            "(or 'bf16', 'fp16', 'fp32').",
            _hint_lines(hint),
            show=show,
        )
    if got == exp:
        return _finish("exact", f"`{name}` is {dtype_name(exp)}.", show=show)
    notes = [f"{dtype_name(got)} has {_dtype_facts(got)}."]  # the expected dtype's layout would give it away
    if {got, exp} == {torch.float16, torch.bfloat16}:
        notes.append(
            "both are 16-bit: which one did this autocast region ask for? (autocast's own default is float16 on CUDA "
            "and bfloat16 on CPU; the course picks bfloat16 on Ampere and later GPUs, see amp_dtype)"
        )
    elif exp == torch.float32 and got in (torch.float16, torch.bfloat16):
        notes.append(
            "is this an op autocast keeps in float32 for accuracy, one that promotes mixed inputs to the widest, "
            "or one outside the autocast region?"
        )
    elif got == torch.float32 and exp in (torch.float16, torch.bfloat16):
        notes.append(
            "inside an autocast region, an op on autocast's lower-precision list (matmul, linear, conv, ...) "
            "runs in the low-precision dtype, and an op on no list (relu, max_pool2d, view, ...) keeps its "
            "input's dtype, so a low-precision input gives a low-precision output."
        )
    if reveal:
        notes.append(f"expected: {dtype_name(exp)}, with {_dtype_facts(exp)}")
    return _finish("wrong", f"`{name}` is {dtype_name(got)}, not the expected dtype.", notes + _hint_lines(hint), show=show)


def check_dtypes(
    answers: Mapping,
    expected: Mapping,
    *,
    name: str = "answers",
    hint: str | None = None,
    reveal: bool = False,
    show: bool = True,
) -> CheckResult:
    """Check a dict of predicted dtypes (e.g. ``{"mm": torch.bfloat16, "softmax": torch.float32}``).

    Every key of ``expected`` is judged; unanswered keys (``None``) are listed separately.
    """
    _check_options(name, hint, reveal, show)
    if not isinstance(expected, Mapping) or not expected:
        raise ValueError("expected must be a non-empty dict of dtypes")
    if _is_placeholder(answers):
        return _no_answer(name, show, "a dict of dtypes")
    if not isinstance(answers, Mapping):
        return _finish("wrong", f"`{name}` should be a dict such as {{'mm': torch.bfloat16, ...}}.", show=show)
    right, wrong, missing = [], [], []
    notes = []
    for key, exp in expected.items():
        ans = answers.get(key)
        if _is_placeholder(ans):
            missing.append(key)
            continue
        r = check_dtype(ans, exp, name=f"{name}[{key!r}]", reveal=reveal, show=False)
        (right if r.ok else wrong).append(key)
        if not r.ok:
            notes.extend(_body(r))
    extra = [k for k in answers if k not in expected]
    details = {"right": right, "wrong": wrong, "missing": missing}
    if not wrong and not missing:
        return _finish("exact", f"all {len(right)} dtypes in `{name}` are right.", show=show, details=details)
    head = f"{len(right)} of {len(expected)} dtypes in `{name}` are right"
    if missing:
        notes.append("not answered yet: " + ", ".join(repr(k) for k in missing))
    if extra:
        notes.append("not asked (ignored): " + ", ".join(repr(k) for k in extra))
    return _finish("wrong", head + ".", notes + _hint_lines(hint), show=show, details=details)


# --------------------------------------------------------------------------------------------
# Choices and orderings
# --------------------------------------------------------------------------------------------


def _norm(x):
    if isinstance(x, str):
        return " ".join(x.strip().casefold().split())
    return x


def _hashable(x) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


# An exercise's options, right items and steps: a list a learner reads, checked before it is read.
MAX_ITEMS = 1_000
MAX_CASES = 1_000  # check_function's cases


def _options_of(name: str, items) -> list:
    """The items of an author's list of options/answers (at most :data:`MAX_ITEMS`), each one
    hashable (a ValueError otherwise); a dict gives its keys."""
    if isinstance(items, Mapping):
        items = items.keys()
    items = formats.bounded_list(name, items, MAX_ITEMS, "a list of options")
    for x in items:
        if not _hashable(x):
            raise ValueError(f"{name} must hold single options (text, numbers), got {x!r:.60}")
    return items


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
    _check_options(name, hint, reveal, show)
    accepted = expected if isinstance(expected, (set, frozenset, list, tuple)) else [expected]
    accepted_n = {_norm(x) for x in _options_of("expected", accepted)}
    if not accepted_n:
        raise ValueError("expected must name at least one right option")
    if options is not None:
        if isinstance(options, (str, bytes)) or not isinstance(options, (Sequence, Mapping, set, frozenset)):
            raise ArgumentTypeError(f"options must be a list (or dict) of options, got {type(options).__name__}")
        options = _options_of("options", options)
    if explanations is not None:
        check_instance("explanations", explanations, Mapping, "a dict of option -> text")
    expl = {_norm(k): v for k, v in (explanations or {}).items()}
    if _is_placeholder(answer):
        shown = ""
        if options is not None:
            shown = " (one of " + ", ".join(repr(o) for o in options) + ")"
        return _no_answer(name, show, "your choice" + shown)
    if not _hashable(answer):
        return _finish(
            "wrong",
            f"`{name}` is a {type(answer).__name__}; this exercise wants one option, e.g. 'a'.",
            _hint_lines(hint),
            show=show,
        )
    a = _norm(answer)
    if options is not None and a not in {_norm(o) for o in options}:
        allowed = ", ".join(repr(o) for o in options)
        return _finish("wrong", f"`{name}` = {answer!r} is not one of the options: {allowed}.", show=show)
    notes = [expl[a]] if a in expl else []
    if a in accepted_n:
        return _finish("exact", f"`{name}` = {answer!r} is right.", notes, show=show)
    if reveal:
        notes.append("right: " + ", ".join(repr(x) for x in accepted))
    if not notes and not hint:
        notes.append("re-read the cell above this exercise: the measured numbers decide it.")
    return _finish("wrong", f"`{name}` = {answer!r} is not the right choice.", notes + _hint_lines(hint), show=show)


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
    _check_options(name, hint, reveal, show)
    if isinstance(expected, (str, bytes)) or not isinstance(expected, (set, frozenset, list, tuple)):
        raise ArgumentTypeError(f"expected must be a set or list of items, got {type(expected).__name__}")
    exp = {_norm(x) for x in _options_of("expected", expected)}
    if not exp:
        raise ValueError("expected must hold at least one item")
    if options is not None:
        options = _options_of("options", options)
    if explanations is not None:
        check_instance("explanations", explanations, Mapping, "a dict of item -> text")
    expl = {_norm(k): v for k, v in (explanations or {}).items()}
    if _is_placeholder(answer):
        return _no_answer(name, show, "a set such as {'a', 'b'}")
    if isinstance(answer, (str, Number)):
        answer = [answer]
    if isinstance(answer, Mapping):  # `{}` is how many write an empty set: a dict's keys are its items
        answer = answer.keys()
    try:
        items = formats.bounded_list(name, answer, MAX_ITEMS, "a set")
    except TypeError:  # ArgumentTypeError: not a collection
        return _finish("wrong", f"`{name}` should be a set such as {{'a', 'b'}}.", _hint_lines(hint), show=show)
    except ValueError:
        return _too_many(name, len(exp), hint, show)
    odd = [x for x in items if not _hashable(x)]
    if odd:
        return _finish(
            "wrong",
            f"`{name}` holds {odd[0]!r:.40}, a {type(odd[0]).__name__}; each item should be one option, e.g. {{'a', 'b'}}.",
            _hint_lines(hint),
            show=show,
        )
    got = {_norm(x) for x in items}
    notes = []
    if options is not None:
        allowed = {_norm(o) for o in options}
        unknown = [x for x in items if _norm(x) not in allowed]
        if unknown:
            notes.append("not among the options: " + ", ".join(repr(x) for x in unknown))
    if got == exp:
        return _finish("exact", f"`{name}` holds exactly the {len(exp)} right items.", show=show)
    extra = [x for x in items if _norm(x) not in exp]
    missing = exp - got
    right = len(got & exp)
    head = f"`{name}` has {right} of the {len(exp)} right items"
    head += f" and {len(extra)} that do not belong." if extra else "."
    if extra:
        notes.append("do not belong: " + ", ".join(repr(x) for x in extra))
        notes += [f"{x!r}: {expl[_norm(x)]}" for x in extra if _norm(x) in expl]
    if missing:
        n = len(missing)
        notes.append(f"{n} right item{'s are' if n > 1 else ' is'} missing.")
        if reveal:
            notes.append("missing: " + ", ".join(repr(x) for x in expected if _norm(x) in missing))
    return _finish("wrong", head, notes + _hint_lines(hint), show=show, details={"missing": len(missing), "extra": extra})


def _too_many(name: str, n_right: int, hint, show: bool) -> CheckResult:
    """The verdict on a learner's collection too long to read (more than :data:`MAX_ITEMS`)."""
    return _finish(
        "wrong",
        f"`{name}` holds more than {MAX_ITEMS:,} items; this exercise has {n_right} right one"
        f"{'s' if n_right != 1 else ''}.",
        _hint_lines(hint),
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
    _check_options(name, hint, reveal, show)
    if isinstance(expected, (str, bytes)) or not isinstance(expected, Sequence):
        raise ArgumentTypeError(f"expected must be a list of items in order, got {type(expected).__name__}")
    expected = formats.bounded_list("expected", expected, MAX_ITEMS, "a list of items in order")
    exp = [_norm(x) for x in expected]
    if not exp:
        raise ValueError("expected must be a non-empty sequence")
    if _is_placeholder(answer):
        return _no_answer(name, show, "a list in the right order")
    if isinstance(answer, str) or not isinstance(answer, Sequence):
        return _finish("wrong", f"`{name}` should be a list, e.g. ['a', 'b', ...].", _hint_lines(hint), show=show)
    try:
        answer = formats.bounded_list(name, answer, MAX_ITEMS, "a list")
    except ValueError:
        return _too_many(name, len(exp), hint, show)
    ans = [_norm(x) for x in answer]
    if ans == exp:
        return _finish("exact", f"`{name}` has all {len(exp)} items in the right order.", show=show)
    missing = [x for x in expected if _norm(x) not in ans]
    extra = [x for x in answer if _norm(x) not in exp]
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
    if not missing and not extra and not dupes:
        first = next(i for i, (p, q) in enumerate(zip(ans, exp, strict=True)) if p != q)
        head = f"`{name}` has the right items, but not in the right order" + (
            f" (the first {first} are right)." if first else "."
        )
        later = exp.index(ans[first]) > first
        notes.append(
            f"position {first + 1}: {answer[first]!r} "
            + ("must come later: something else has to happen first." if later else "must come earlier.")
        )
    if reveal:
        notes.append("right order: " + " -> ".join(str(x) for x in expected))
    return _finish("wrong", head, notes + _hint_lines(hint), show=show)


# --------------------------------------------------------------------------------------------
# Functions the learner writes
# --------------------------------------------------------------------------------------------


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
    _check_options(name, hint, show=show, variable=variable)
    if not callable(reference):
        raise ArgumentTypeError(f"reference must be a function, got {type(reference).__name__}")
    if not isinstance(cases, Sequence) or isinstance(cases, str):
        raise ArgumentTypeError(f"cases must be a non-empty list of argument tuples, got {type(cases).__name__}")
    cases = formats.bounded_list("cases", cases, MAX_CASES, "a non-empty list of argument tuples")
    if not cases:
        raise ValueError("cases must be a non-empty list of argument tuples, got an empty one")
    if _is_placeholder(fn):
        what = "your function" if name in ("your function", variable) else f"your function (`{name}`)"
        return _no_answer(variable, show, what)
    if not callable(fn):
        kind = type(fn).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        return _finish("wrong", f"`{variable}` is {article} {kind}, not a function.", show=show)
    verdicts, notes = [], []
    shown_cases = 0
    for i, case in enumerate(cases, 1):
        args = case if isinstance(case, tuple) else (case,)
        if shown_cases >= _MAX_CASES_SHOWN:  # keep the feedback short: count the rest, do not list them
            label = None
        else:
            label = f"case {i}{_args_text(args)}"
        # The reference and the cases are the author's: a case the reference cannot run (or that cannot
        # be copied) is a mistake in the exercise, reported as cases'; the learner's fn is never blamed.
        try:
            ref_args, my_args = copy.deepcopy(args), copy.deepcopy(args)
            expected = reference(*ref_args)
        except Exception as exc:
            raise ValueError(
                f"cases[{i - 1}] = {case!r:.80} is not a case the reference can run: it raised "
                f"{type(exc).__name__}: {str(exc):.200}; each case must be a tuple of the reference's arguments"
            ) from exc
        try:
            got = fn(*my_args)
        except Exception as exc:  # the learner's code: report, never raise
            verdicts.append("wrong")
            shown_cases += _note_case(notes, label, [f"{name} raised {type(exc).__name__}: {exc}"])
            continue
        if expected is None and got is None:
            # In place (like unscale_): compare each argument after the call.
            parts = [
                _compare_any(m, r_, dtype=dtype, rtol=rtol, atol=atol, name=f"argument {j} after the call")
                for j, (m, r_) in enumerate(zip(my_args, ref_args, strict=True), 1)
            ]
            verdict_i = _worst(p.verdict for p in parts)
            lines = [line for p in parts if p.verdict != "exact" for line in _body(p)]
            r = CheckResult(verdict_i, "\n".join(lines) or "matches")
        elif got is None:
            verdicts.append("wrong")
            shown_cases += _note_case(notes, label, [f"{name} returned None: is a `return` missing?"])
            continue
        elif expected is None:
            verdicts.append("wrong")
            shown_cases += _note_case(notes, label, [
                f"{name} returned a value, but the reference changes its arguments in place and "
                "returns None (a trailing _ in a name, as in unscale_, means in place): modify the tensors, "
                "e.g. with g.mul_(...)"
            ])  # fmt: skip
            continue
        else:
            r = _compare_any(got, expected, dtype=dtype, rtol=rtol, atol=atol, name="result")
        verdicts.append(r.verdict)
        if r.verdict != "exact":
            shown_cases += _note_case(notes, label, _body(r))
    verdict = _worst(verdicts)
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
        notes += _hint_lines(hint)
    return _finish(verdict, head, notes, show=show, details={"verdicts": verdicts})


_MAX_CASES_SHOWN = 5


def _note_case(notes: list[str], label: str | None, lines: Sequence[str]) -> int:
    """Add a case's feedback lines under ``label`` (skipped when ``label`` is None); 1 if added."""
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
            k = _power_of_two(abs(x))
            big = k is not None and abs(k) >= 10
            parts.append(f"{'-' if x < 0 else ''}2.0**{k}" if big else _num(x))
        elif isinstance(x, Number):
            parts.append(repr(x))
        elif isinstance(x, torch.Tensor):
            parts.append(f"a tensor of shape {tuple(x.shape)}" if x.dim() else _num(float(x)))
        elif _flatten_tensors(x):
            parts.append(f"a list of {len(x)} tensors")
        else:
            return ""
    text = ", ".join(parts)
    return f" (arguments {text})" if len(text) <= 80 else ""


def _compare_any(got, expected, *, dtype, rtol, atol, name) -> CheckResult:
    """Compare a result with the reference's: tensors and numbers by :func:`check_tensor` /
    :func:`check_value`, dicts key by key and lists/tuples item by item (recursively), anything
    else with ``==``."""
    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            return CheckResult("wrong", f"{_MARK['wrong']}: `{name}` should be a dict, got a {type(got).__name__}.")
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if missing or extra:
            parts = []
            if missing:
                parts.append("missing keys " + ", ".join(repr(k) for k in missing))
            if extra:
                parts.append("unexpected keys " + ", ".join(repr(k) for k in extra))
            return CheckResult("wrong", f"{_MARK['wrong']}: `{name}` has " + " and ".join(parts) + ".")
        parts = [
            _compare_any(got[k], e, dtype=dtype, rtol=rtol, atol=atol, name=f"{name}[{k!r}]")
            for k, e in expected.items()
        ]
        verdict = _worst(p.verdict for p in parts)
        lines = [line for p in parts if p.verdict != "exact" for line in _body(p)]
        head = f"{_MARK[verdict]}: " + (lines[0] if lines else f"`{name}` matches.")
        return CheckResult(verdict, "\n".join([head, *lines[1:]]))
    if isinstance(expected, (list, tuple)) and not _flatten_tensors(expected):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return CheckResult("wrong", f"{_MARK['wrong']}: `{name}` should have {len(expected)} items.")
        parts = [
            _compare_any(g, e, dtype=dtype, rtol=rtol, atol=atol, name=f"{name}[{k}]")
            for k, (g, e) in enumerate(zip(got, expected, strict=True))
        ]
        verdict = _worst(p.verdict for p in parts)
        lines = [line for p in parts if p.verdict != "exact" for line in _body(p)]
        head = f"{_MARK[verdict]}: " + (lines[0] if lines else f"`{name}` matches.")
        return CheckResult(verdict, "\n".join([head, *lines[1:]]))
    if isinstance(expected, torch.Tensor) or _flatten_tensors(expected):
        return check_tensor(got, expected, dtype=dtype, rtol=rtol, atol=atol, name=name, show=False)
    if isinstance(expected, Number) and not isinstance(expected, bool):
        return check_value(got, expected, dtype=dtype, rtol=rtol, atol=atol, name=name, show=False)
    try:
        same = bool(got == expected)
    except Exception:  # e.g. a tensor or array compared with something else: not equal
        same = False
    if same:
        return CheckResult("exact", f"{_MARK['exact']}: `{name}` matches.")
    return CheckResult("wrong", f"{_MARK['wrong']}: `{name}` = {got!r:.80} differs from the reference.")
