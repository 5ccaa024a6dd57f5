"""The exercise engine: a learner's answer against the expected one, in the precision it lives in.

A learner's check (``nb03.ex2.check(answer)``, in :mod:`amp_lab.exercises`) calls one of these; each
prints its feedback and returns a :class:`~amp_lab.check_base.CheckResult` with ``.ok``, ``.status``,
``.verdict`` (``"exact"``, ``"close"``, ``"wrong"`` or ``"unanswered"``), ``.details`` (the numbers)
and ``.reasons`` (codes of the mistakes named).  The feedback is never just "wrong":

* numbers and tensors are judged **by the precision they live in**: equal bit for bit (``"exact"``),
  within that dtype's tolerance (``"close"``: the same value once rounded to the dtype, or within a
  few of its ulps), or how far off, in ulps of the dtype, with a hint naming the usual mistake
  (:mod:`amp_lab.check_hints`: a scale left in, a sign flipped, an underflow, another format, ...);
* bit patterns are compared field by field and the learner's bits decoded;
* dtypes say what the named dtype is, never what the expected one is.

Choices, sets, orderings and functions the learner writes are in :mod:`amp_lab.check_items`.
Expected answers are not shown unless the call passes ``reveal=True``.  The exercise modules are the
callers: arguments other than the learner's answer are trusted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Integral

import numpy as np
import torch

from . import formats
from .check_base import (
    CheckResult,
    Precision,
    about_format,
    as_float64,
    body_lines,
    finish,
    hint_lines,
    infer_precision,
    is_placeholder,
    no_answer,
    note,
    num,
    read_dtype,
    tensor_list,
    tolerances,
    worst_verdict,
)
from .check_hints import bits_notes, diagnose, dtype_facts, dtype_notes, shape_notes
from .dtypes import dtype_name

__all__ = ["check_value", "check_tensor", "check_bits", "check_dtype", "check_dtypes", "check_between"]


def _compare(
    a, e, prec: Precision, rtol, atol, name: str, reveal: bool, *, explicit_tol=False, about_format=True
):
    """(verdict, headline, notes, details) for float64 tensors ``a`` and ``e`` of equal shape.

    ``explicit_tol``: ``rtol``/``atol`` were given by the exercise (not the dtype's defaults), so
    a "close" answer is within *the exercise's* tolerance.  ``about_format``: see :func:`diagnose`.
    """
    same = (a == e) | (torch.isnan(a) & torch.isnan(e))
    scalar = e.numel() == 1
    if bool(same.all()):
        signs_differ = (torch.signbit(a) != torch.signbit(e)) & (a == 0)
        if bool(signs_differ.any()):
            return (
                "close",
                f"`{name}` equals the expected value, except for the sign of zero (-0.0 versus +0.0).",
                [note("check.sign_of_zero")],
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
    size = f"{num(max_abs)} off" if math.isfinite(max_abs) else "not finite where the expected value is"
    if math.isfinite(ulps) and ulps < 2**20:
        size += f", {ulps:.3g} ulp{'s' if ulps != 1 else ''} of {prec.name}"
    worst_text = ""
    if not scalar:
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), e.shape))
        details["worst_index"] = idx
        versus = f" (expected {num(e_w)})" if reveal else ""
        worst_text = f"worst at index {idx}: {num(a_w)}{versus}, which is {size}"
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
            notes.append(f"expected: {_value_text(e)}")
        return "close", head, notes, details
    if scalar:
        if math.isfinite(a_w) and math.isfinite(e_w) and e_w != 0 and (a_w > 0) == (e_w > 0) and a_w != 0:
            ratio = a_w / e_w
            if ratio > 2 or ratio < 0.5:
                how = (
                    f"about {ratio:.3g} times the expected value"
                    if ratio > 2
                    else f"about 1/{1 / ratio:.3g} of it"
                )
                head = f"`{name}` is too {'large' if ratio > 1 else 'small'}: {how} ({size})."
            else:
                head = f"`{name}` is too {'large' if ratio > 1 else 'small'} by {abs(ratio - 1) * 100:.3g}% ({size})."
        elif math.isfinite(a_w) and math.isfinite(e_w) and a_w * e_w < 0:
            head = f"`{name}` has the wrong sign ({size})."
        else:
            head = f"`{name}` = {num(a_w)} is off ({size})."
    else:
        head = f"{n_off} of {e.numel()} elements of `{name}` are off; {worst_text}."
    notes = diagnose(a, e, prec, about_format=about_format)
    if reveal:
        notes.append(f"expected: {_value_text(e)}")
    return "wrong", head, notes, details


def _value_text(t: torch.Tensor) -> str:
    return num(float(t.reshape(()))) if t.numel() == 1 else str(t)


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
    prec = infer_precision(answer, expected, dtype)
    rtol_given, atol_given = rtol is not None, atol is not None
    rtol, atol = tolerances(prec, rtol, atol)
    e, err = as_float64(expected, "expected")
    if err:
        raise ValueError(f"expected must be a number, but {err.removeprefix('`expected` ')}")
    if is_placeholder(answer):
        return no_answer(name, show, "a number")
    if e.numel() != 1:
        raise ValueError(
            f"expected must be a single number (use check_tensor for tensors), got shape {tuple(e.shape)}"
        )
    a, err = as_float64(answer, name)
    if err:
        return finish("wrong", err + ".", hint_lines(hint), show=show, reasons=(err.code,))
    if a.numel() != 1:
        return finish(
            "wrong",
            f"`{name}` has {a.numel()} numbers (shape {tuple(a.shape)}); this exercise wants a single number.",
            hint_lines(hint),
            show=show,
        )
    explicit = rtol_given or atol_given
    verdict, head, notes, details = _compare(
        a.reshape(()), e.reshape(()), prec, rtol, atol, name, reveal,
        explicit_tol=explicit, about_format=about_format(expected, dtype),
    )  # fmt: skip
    if verdict == "wrong":
        notes = notes + hint_lines(hint)
    return finish(verdict, head, notes, show=show, details=details)


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
    if is_placeholder(answer):
        return no_answer(name, show, "a tensor")
    exp_list = tensor_list(expected)
    if exp_list is not None:
        ans_list = tensor_list(answer) if isinstance(answer, (list, tuple)) else None
        if ans_list is None or len(ans_list) != len(exp_list):
            got = (
                f"{len(answer)} items" if isinstance(answer, (list, tuple)) else f"a {type(answer).__name__}"
            )
            return finish(
                "wrong",
                f"`{name}` should be a list of {len(exp_list)} tensors; got {got}.",
                hint_lines(hint),
                show=show,
            )
        results = [
            check_tensor(
                a, e, dtype=dtype, rtol=rtol, atol=atol, name=f"{name}[{i}]", reveal=reveal, show=False
            )
            for i, (a, e) in enumerate(zip(ans_list, exp_list, strict=True))
        ]
        verdict = worst_verdict(r.verdict for r in results)
        if verdict == "exact":
            return finish(
                "exact", f"all {len(results)} tensors of `{name}` are right bit for bit.", show=show
            )
        n_ok = sum(r.ok for r in results)
        head = f"{n_ok} of {len(results)} tensors of `{name}` are right"
        head += "." if verdict == "wrong" else ", within their dtype's tolerance."
        notes = [line for r in results if r.verdict != "exact" for line in body_lines(r)]
        if verdict == "wrong":
            notes += hint_lines(hint)
        reasons = [code for r in results for code in r.reasons]
        return finish(verdict, head, notes, show=show, details={"items": results}, reasons=reasons)

    e, err = as_float64(expected, "expected", allow_bool=True)
    if err:
        raise ValueError(f"expected must be a tensor or numbers, but {err.removeprefix('`expected` ')}")
    prec = infer_precision(answer, expected, dtype)
    explicit = rtol is not None or atol is not None
    rtol, atol = tolerances(prec, rtol, atol)
    a, err = as_float64(
        answer, name, allow_bool=isinstance(expected, torch.Tensor) and expected.dtype == torch.bool
    )
    if err:
        return finish("wrong", err + ".", hint_lines(hint), show=show, reasons=(err.code,))
    if a.shape != e.shape:
        head = f"`{name}` has shape {tuple(a.shape)}; the expected shape is {tuple(e.shape)}."
        return finish("wrong", head, shape_notes(a, e) + hint_lines(hint), show=show)
    notes: list[str] = []
    if (
        isinstance(answer, torch.Tensor)
        and isinstance(expected, torch.Tensor)
        and answer.dtype != expected.dtype
    ):
        notes.append(
            f"(your tensor is {str(answer.dtype).removeprefix('torch.')}, "
            f"the reference is {str(expected.dtype).removeprefix('torch.')}; values are compared, judged in {prec.name})"
        )
    verdict, head, more, details = _compare(
        a,
        e,
        prec,
        rtol,
        atol,
        name,
        reveal,
        explicit_tol=explicit,
        about_format=about_format(expected, dtype),
    )
    notes = more + (notes if verdict != "exact" else [])
    if verdict == "wrong":
        notes += hint_lines(hint)
    return finish(verdict, head, notes, show=show, details=details)


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
    low, high = float(low), float(high)
    if is_placeholder(answer):
        return no_answer(name, show, "a number")
    a, err = as_float64(answer, name)
    if err or a.numel() != 1:
        msg = err or f"`{name}` has {a.numel()} numbers; this exercise wants one"
        return finish("wrong", msg + ".", hint_lines(hint), show=show)
    x = float(a.reshape(()))
    if math.isnan(x):
        return finish("wrong", f"`{name}` is NaN.", hint_lines(hint), show=show)
    if low <= x <= high:
        return finish("exact", f"`{name}` = {num(x)} is in the right range.", show=show, details={"value": x})
    small = x < low
    k = (
        (math.log2(low / x) if x > 0 else math.inf)
        if small
        else (math.log2(x / high) if high > 0 else math.inf)
    )
    head = f"`{name}` = {num(x)} is too {'small' if small else 'large'}"
    head += f" (by a factor of about 2**{k:.1f})" if math.isfinite(k) else ""
    side = below if small else above
    notes = [side] if side else []
    return finish("wrong", head + ".", notes + hint_lines(hint), show=show, details={"value": x})


def _clean_bits(answer) -> tuple[str | None, str | None]:
    if isinstance(answer, Integral) and not isinstance(answer, (bool, np.bool_)):  # numpy integers too
        return None, "int"
    if not isinstance(answer, str):
        return (
            None,
            f"`answer` is a {type(answer).__name__}; write the bits as a string such as '0 01111 0000000000'",
        )
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
    if is_placeholder(answer):
        return no_answer(name, show, f"a string of {f.total_bits} bits")
    bits, problem = _clean_bits(answer)
    if isinstance(problem, tuple):  # a hex string such as "0x3c00"
        problem, answer = "int", problem[1]
    if problem == "int":
        if not 0 <= answer < 2**f.total_bits:
            return finish(
                "wrong",
                f"`{name}` = {answer} does not fit in {f.total_bits} bits.",
                hint_lines(hint),
                show=show,
            )
        bits, problem = f"{int(answer):0{f.total_bits}b}", None
    layout = f"1 sign, {f.exponent_bits} exponent, {f.mantissa_bits} mantissa"
    if problem:
        return finish("wrong", problem.replace("`answer`", f"`{name}`") + ".", hint_lines(hint), show=show)
    if len(bits) != f.total_bits:
        return finish(
            "wrong",
            f"`{name}` has {len(bits)} bits; {f.name} has {f.total_bits} ({layout}).",
            hint_lines(hint),
            show=show,
            details={"bits": bits},
        )
    if bits == exp_bits:
        return finish(
            "exact", f"`{name}` is the right {f.name} bit pattern.", show=show, details={"bits": bits}
        )

    mine = formats.from_bits(bits, f)
    target = formats.from_bits(exp_bits, f)
    ne = f.exponent_bits
    fields = {
        "sign": (bits[0], exp_bits[0]),
        "exponent": (bits[1 : 1 + ne], exp_bits[1 : 1 + ne]),
        "mantissa": (bits[1 + ne :], exp_bits[1 + ne :]),
    }
    details = {"bits": bits, "your_value": mine}
    shown = f"{bits[0]} {bits[1 : 1 + ne]} {bits[1 + ne :]}"
    if math.isnan(mine) and math.isnan(target):
        return finish(
            "close",
            f"`{name}` is a NaN pattern, as expected, but not the canonical one torch produces.",
            [note("check.nan_patterns")] + ([f"expected: {exp_bits}"] if reveal else []),
            show=show,
            details=details,
        )
    right = [k for k, (m, x) in fields.items() if m == x]
    wrong = [k for k, (m, x) in fields.items() if m != x]
    details["wrong_fields"] = wrong
    head = f"`{name}` ({shown}) encodes {num(mine)} in {f.name}; {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} off"
    if right:
        head += f" ({' and '.join(right)} right)"
    notes = bits_notes(fields, f)
    if value is not None and math.isfinite(mine) and math.isfinite(target) and mine != 0:
        rel = abs(mine - float(value)) / abs(float(value)) if float(value) != 0 else math.inf
        notes.append(f"the value your bits encode is {rel:.3g} (relative) away from {num(float(value))}.")
    if reveal:
        notes.append(f"expected: {exp_bits[0]} {exp_bits[1 : 1 + ne]} {exp_bits[1 + ne :]}")
    return finish("wrong", head + ".", notes + hint_lines(hint), show=show, details=details)


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
    exp = read_dtype(expected)
    if exp is None:
        raise ValueError(f"expected={expected!r} is not a dtype or a dtype name")
    if is_placeholder(answer):
        return no_answer(name, show, "a dtype such as torch.float32 or 'bf16'")
    got = read_dtype(answer)
    if got is None:
        return finish(
            "wrong",
            f"`{name}` = {answer!r} is not a dtype; write e.g. torch.bfloat16, torch.float16, torch.float32 "
            "(or 'bf16', 'fp16', 'fp32').",
            hint_lines(hint),
            show=show,
        )
    if got == exp:
        return finish("exact", f"`{name}` is {dtype_name(exp)}.", show=show)
    notes = dtype_notes(got, exp)  # the expected dtype's layout would give it away
    if reveal:
        notes.append(f"expected: {dtype_name(exp)}, with {dtype_facts(exp)}")
    return finish(
        "wrong",
        f"`{name}` is {dtype_name(got)}, not the expected dtype.",
        notes + hint_lines(hint),
        show=show,
    )


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
    if is_placeholder(answers):
        return no_answer(name, show, "a dict of dtypes")
    if not isinstance(answers, Mapping):
        return finish("wrong", f"`{name}` should be a dict such as {{'mm': torch.bfloat16, ...}}.", show=show)
    right, wrong, missing = [], [], []
    notes, reasons = [], []
    for key, exp in expected.items():
        ans = answers.get(key)
        if is_placeholder(ans):
            missing.append(key)
            continue
        r = check_dtype(ans, exp, name=f"{name}[{key!r}]", reveal=reveal, show=False)
        (right if r.ok else wrong).append(key)
        if not r.ok:
            notes.extend(body_lines(r))
            reasons.extend(r.reasons)
    extra = [k for k in answers if k not in expected]
    details = {"right": right, "wrong": wrong, "missing": missing}
    if not wrong and not missing:
        return finish("exact", f"all {len(right)} dtypes in `{name}` are right.", show=show, details=details)
    head = f"{len(right)} of {len(expected)} dtypes in `{name}` are right"
    if missing:
        notes.append("not answered yet: " + ", ".join(repr(k) for k in missing))
    if extra:
        notes.append("not asked (ignored): " + ", ".join(repr(k) for k in extra))
    return finish("wrong", head + ".", notes + hint_lines(hint), show=show, details=details, reasons=reasons)
