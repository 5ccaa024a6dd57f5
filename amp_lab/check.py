"""The exercise engine: a learner's number, tensor, bit pattern or dtype against the expected one, judged in
the precision it lives in.  Arguments other than the answer come from the exercise modules: trusted."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from numbers import Integral

import numpy as np
import torch

from . import formats
from .check_base import CheckResult, Note, body_lines, finish, is_placeholder, no_answer, note, read_dtype
from .device import float64_on_cpu
from .dtypes import dtype_name, dtype_named
from .text import say

__all__ = ["check_value", "check_tensor", "check_bits", "check_dtype", "check_between"]


@dataclass(frozen=True)
class Precision:
    """A precision to judge numbers in: its name and format."""

    name: str
    fmt: formats.FloatFormat

    def round(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` (float64) rounded to this precision, back in float64."""
        d = self.fmt.torch_dtype
        return float64_on_cpu(t.to(d) if d is not None else formats.round_to(t, self.fmt))

    def ulp(self, value: float) -> float:
        return formats.format_ulp(value, self.fmt)


FLOAT64 = Precision("float64", formats.FloatFormat("float64", 11, 52, torch.float64))


def precision(dtype) -> Precision:
    """A precision from a torch dtype, a name (``"fp16"``, ``"tf32"``, ...) or a FloatFormat."""
    if dtype is torch.float64 or (isinstance(dtype, str) and dtype_named(dtype) is torch.float64):
        return FLOAT64
    f = formats.get_format(dtype)  # a ValueError for a dtype that is not a course format
    return Precision(dtype_name(f.torch_dtype) if f.torch_dtype else f.name, f)


def infer_precision(answer, expected, dtype) -> Precision:
    """``dtype``'s precision, else the first course format among ``answer``'s and ``expected``'s, else float64."""
    if dtype is not None:
        return precision(dtype)
    known = {f.torch_dtype for f in formats.FORMATS.values()} | {torch.float64}
    dtypes = [t.dtype for t in (answer, expected) if isinstance(t, torch.Tensor) and t.dtype in known]
    return precision(dtypes[0]) if dtypes else FLOAT64


def num(x: float) -> str:
    """A number as a learner reads it: exact for short binary fractions, 6 significant digits otherwise."""
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == int(x) and abs(x) < 1e16:
        return str(int(x)) if x != 0 or math.copysign(1, x) > 0 else "-0.0"
    return f"{x:.6g}"


def as_float64(x, name: str, *, allow_bool: bool = False) -> tuple[torch.Tensor | None, Note | None]:
    """(``x`` as float64, None), or (None, the :class:`Note` on why it is not a number); bools are not
    numbers unless ``allow_bool``."""
    if isinstance(x, (str, bytes)):
        return None, note("check.text_answer", name=name, text=x)
    if isinstance(x, Integral) and not isinstance(x, bool):
        try:
            return torch.tensor(float(x), dtype=torch.float64, device="cpu"), None
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


def tensor_list(x) -> list | None:
    if isinstance(x, (list, tuple)) and x and all(isinstance(t, torch.Tensor) for t in x):
        return list(x)
    return None


def worst_verdict(verdicts) -> str:
    # a part left unanswered in an answer that has others makes the whole "not yet", not "not attempted"
    order = ("exact", "close", "wrong")
    return max(("wrong" if v == "unanswered" else v for v in verdicts), key=order.index, default="exact")


# the formats a wrong answer may have been rounded to instead
_OTHERS = ("fp16", "bf16", "fp32", "tf32", "fp8_e4m3", "fp8_e5m2")


def diagnose(a: torch.Tensor, e: torch.Tensor, prec: Precision, about_format: bool) -> list[Note]:
    """Notes on a wrong answer ``a`` (float64, the shape of ``e``), most specific first; another format is
    named only when the exercise is ``about_format`` (for 255 versus 256 it would mislead)."""
    notes = []
    finite = torch.isfinite(a) & torch.isfinite(e)
    new_bad = ~torch.isfinite(a) & torch.isfinite(e)
    if new_bad.any():
        n = int(new_bad.sum())
        kinds = "NaN" if torch.isnan(a[new_bad]).all() else "inf/NaN"
        where = "" if a.numel() == 1 else f"{n} element{'s' if n > 1 else ''} "
        notes.append(note("check.not_finite", where=where, kinds=kinds, precision=prec.name, count=n))
    zeros = finite & (a == 0) & (e != 0)
    if zeros.any() and not (a == 0).all():
        n = int(zeros.sum())
        notes.append(note("check.some_zeros", count=n, values="values are" if n > 1 else "value is"))
    elif zeros.any():
        notes.append(note("check.all_zeros"))
    both = finite & (e != 0) & (a != 0)
    if both.any() and (bool(both.all()) or not bool(finite.all())):
        ratio = a[both] / e[both]
        r0 = float(ratio.flatten()[0])
        if bool(((ratio - r0).abs() <= 1e-5 * abs(r0)).all()) and abs(r0 - 1.0) > 1e-5:
            k = round(math.log2(abs(r0)))
            if abs(r0 + 1.0) <= 1e-5:
                notes.append(note("check.sign_flipped", ratio=r0))
            elif k != 0 and abs(abs(r0) / 2.0**k - 1.0) <= 1e-5:
                code = "check.exponent_too_large" if k > 0 else "check.exponent_too_small"
                what = "every value of your answer is" if a.numel() > 1 else "your answer is"
                exactly = "exactly" if abs(r0) == 2.0**k else "about"
                facts = dict(what=what, exactly=exactly, sign="-" if r0 < 0 else "", k=k, factor=num(2.0**k))
                notes.append(note(code, off=-k, **facts))
            elif a.numel() > 1:
                notes.append(note("check.constant_factor", ratio=r0))
    if about_format and e.numel() and bool(finite.all()):
        others = [precision(n) for n in _OTHERS]
        if p := next((p for p in others if p.name != prec.name and bool((a == p.round(e)).all())), None):
            notes.append(note("check.rounded_to_other", other=p.name, precision=prec.name))
        elif p := next((p for p in others if bool((p.round(a) == e).all())), None):
            notes.append(note("check.unrounded_in_other", other=p.name))
        elif not bool((a == prec.round(a)).all()):
            notes.append(note("check.not_rounded", precision=prec.name))
    return notes


def _compare(a, e, prec: Precision, rtol, atol, name: str, explicit_tol: bool, about_format: bool):
    """(verdict, headline, notes, details) for float64 tensors ``a`` and ``e`` of equal shape."""
    nan_both = torch.isnan(a) & torch.isnan(e)
    same = (a == e) | nan_both
    scalar = e.numel() == 1
    if bool(same.all()):
        no_error = {"max_abs_error": 0.0}
        if bool(((torch.signbit(a) != torch.signbit(e)) & (a == 0)).any()):
            return "close", note("check.zero_sign", name=name), [note("check.sign_of_zero")], no_error
        code = "check.exact_value" if scalar else "check.exact_tensor"
        return "exact", note(code, name=name, n=e.numel()), [], no_error
    mismatch = (torch.isnan(a) ^ torch.isnan(e)) | ((torch.isinf(a) | torch.isinf(e)) & (a != e))
    diff = torch.where(same, 0.0, (a - e).abs())
    diff = torch.where(mismatch, math.inf, diff)
    worst = int(torch.argmax(diff.flatten().nan_to_num(nan=math.inf)))
    a_w, e_w = float(a.flatten()[worst]), float(e.flatten()[worst])
    max_abs = float(diff.flatten()[worst])
    ulp = prec.ulp(e_w) if math.isfinite(e_w) else math.nan
    ulps = max_abs / ulp if (math.isfinite(max_abs) and ulp > 0) else math.inf
    details = dict(max_abs_error=max_abs, ulps=ulps, elements_off=int((~same).sum()))
    details.update(precision=prec.name, rtol=rtol, atol=atol)
    size = f"{num(max_abs)} off" if math.isfinite(max_abs) else "not finite where the expected value is"
    if math.isfinite(ulps) and ulps < 2**20:
        size += f", {ulps:.3g} ulp{'s' if ulps != 1 else ''} of {prec.name}"
    if not scalar:
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), e.shape))
        details["worst_index"] = idx
        size = f"worst at index {idx}: {num(a_w)}, which is {size}"
    facts = {"name": name, "precision": prec.name, "atol": atol, "rtol": rtol, "size": size}
    if bool(((prec.round(a) == prec.round(e)) | nan_both).all()):
        head = note("check.close_rounded", **facts)
    elif bool(((diff <= atol + rtol * e.abs()) | same).all()):
        head = note("check.close_tolerance" if explicit_tol else "check.close_dtype", **facts)
    else:
        finite = math.isfinite(a_w) and math.isfinite(e_w)
        if scalar and finite and a_w != 0 and e_w != 0 and (a_w > 0) == (e_w > 0):
            ratio = a_w / e_w
            side = "larger" if ratio > 1 else "smaller"
            if 0.5 <= ratio <= 2:
                head = note(f"check.percent_{side}", percent=abs(ratio - 1) * 100, **facts)
            else:
                head = note(f"check.times_{side}", ratio=ratio, inverse=1 / ratio, **facts)
        elif scalar and finite and a_w * e_w < 0:
            head = note("check.wrong_sign", **facts)
        elif scalar:
            head = note("check.value_off", value=num(a_w), **facts)
        else:
            head = note("check.elements_off", count=details["elements_off"], n=e.numel(), **facts)
        return "wrong", head, diagnose(a, e, prec, about_format), details
    return "close", head, [say("check.close_difference", **facts)], details


def check_value(
    answer,
    expected,
    *,
    dtype=None,
    rtol: float | None = None,
    atol: float | None = None,
    name: str = "answer",
    hint: str | None = None,
    show: bool = True,
) -> CheckResult:
    """Check a number, judged in ``dtype`` (a torch dtype or a name such as ``"tf32"``; default: a tensor's
    dtype, else float64): bit for bit, equal once rounded, or within ``atol + rtol * |expected|`` (``rtol``
    defaults to the dtype's epsilon); otherwise how far off and the probable mistake."""
    return _check_numbers(answer, expected, dtype, rtol, atol, name, hint, show, scalar=True)


def check_tensor(
    answer,
    expected,
    *,
    dtype=None,
    rtol: float | None = None,
    atol: float | None = None,
    name: str = "answer",
    hint: str | None = None,
    show: bool = True,
) -> CheckResult:
    """Check a tensor (or a list of them, e.g. gradients) element by element as :func:`check_value` does."""
    if is_placeholder(answer):
        return no_answer(name, show, "a tensor")
    exp_list = tensor_list(expected)
    if exp_list is None:
        return _check_numbers(answer, expected, dtype, rtol, atol, name, hint, show, scalar=False)
    ans_list = tensor_list(answer)
    if ans_list is None or len(ans_list) != len(exp_list):
        got = f"{len(answer)} items" if isinstance(answer, (list, tuple)) else f"a {type(answer).__name__}"
        head = note("check.not_tensors", name=name, n=len(exp_list), got=got)
        return finish("wrong", head, hint=hint, show=show)
    results = [
        check_tensor(a, e, dtype=dtype, rtol=rtol, atol=atol, name=f"{name}[{i}]", show=False)
        for i, (a, e) in enumerate(zip(ans_list, exp_list, strict=True))
    ]
    verdict = worst_verdict(r.verdict for r in results)
    facts = {"name": name, "n": len(results), "right": sum(r.ok for r in results)}
    notes = [line for r in results if r.verdict != "exact" for line in body_lines(r)]
    reasons = [code for r in results for code in r.reasons]
    head = note(f"check.tensors_{verdict}", **facts)
    return finish(verdict, head, notes, hint=hint, show=show, details={"items": results}, reasons=reasons)


def _check_numbers(answer, expected, dtype, rtol, atol, name, hint, show, *, scalar: bool) -> CheckResult:
    """check_value (``scalar``) and check_tensor on one answer."""
    e = as_float64(expected, "expected", allow_bool=True)[0]  # the exercise's own value: trusted
    if is_placeholder(answer):
        return no_answer(name, show, "a number" if scalar else "a tensor")
    prec = infer_precision(answer, expected, dtype)
    explicit = rtol is not None or atol is not None
    rtol = prec.fmt.eps if rtol is None else float(rtol)
    atol = 0.0 if atol is None else float(atol)
    bool_expected = isinstance(expected, torch.Tensor) and expected.dtype == torch.bool
    a, wrong = _read_answer(answer, name, hint, show, one=scalar, allow_bool=bool_expected and not scalar)
    if wrong is not None:
        return wrong
    e = e.reshape(()) if scalar else e
    if a.shape != e.shape:
        head = note("check.shape", name=name, shape=tuple(a.shape), expected=tuple(e.shape))
        notes = []  # a transpose, a reshape, or a reduction over everything
        if a.dim() == 2 and a.T.shape == e.shape:
            notes = [note("check.transposed")]
        elif a.numel() == e.numel():
            notes = [note("check.reshaped")]
        elif a.numel() == 1:
            notes = [note("check.reduced")]
        return finish("wrong", head, notes, hint=hint, show=show)
    # the exercise is about a format when it names a dtype or expects a low-precision tensor
    t = expected if isinstance(expected, torch.Tensor) else None
    about = dtype is not None or (t is not None and t.is_floating_point() and t.dtype != torch.float64)
    verdict, head, notes, details = _compare(a, e, prec, rtol, atol, name, explicit, about)
    both = not scalar and isinstance(answer, torch.Tensor) and isinstance(expected, torch.Tensor)
    if verdict != "exact" and both and answer.dtype != expected.dtype:
        mine, ref = dtype_name(answer.dtype), dtype_name(expected.dtype)
        notes.append(
            f"(your tensor is {mine}, the reference is {ref}; values are compared, judged in {prec.name})"
        )
    return finish(verdict, head, notes, hint=hint, show=show, details=details)


def _read_answer(answer, name: str, hint, show: bool, *, one: bool, allow_bool: bool = False):
    """(the answer as float64, None), or (None, the "wrong" result on why it is not a number, or not one)."""
    a, err = as_float64(answer, name, allow_bool=allow_bool)
    if err:
        return None, finish("wrong", err + ".", hint=hint, show=show, reasons=(err.code,))
    if one and a.numel() != 1:
        head = note("check.not_one_number", name=name, n=a.numel(), shape=tuple(a.shape))
        return None, finish("wrong", head, hint=hint, show=show)
    return (a.reshape(()) if one else a), None


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
    """Check that a number lies in ``[low, high]``; ``below`` / ``above`` say what goes wrong on each side."""
    if is_placeholder(answer):
        return no_answer(name, show, "a number")
    a, wrong = _read_answer(answer, name, hint, show, one=True)
    if wrong is not None:
        return wrong
    x = float(a)
    if math.isnan(x):
        return finish("wrong", note("check.nan_answer", name=name), hint=hint, show=show)
    if low <= x <= high:
        return finish(
            "exact", note("check.in_range", name=name, value=num(x)), show=show, details={"value": x}
        )
    small = x < low  # how far out is not said: it would give the range away
    head = note("check.below_range" if small else "check.above_range", name=name, value=num(x))
    side = below if small else above
    return finish("wrong", head, [side] if side else [], hint=hint, show=show, details={"value": x})


def check_bits(
    answer, *, value, fmt="fp16", name: str = "answer", hint: str | None = None, show: bool = True
) -> CheckResult:
    """Check a bit pattern (``"0 01111 0000000000"``, ``"0x3c00"`` or an int) against ``value`` rounded to
    ``fmt``, field by field (sign, exponent, mantissa).  Any NaN pattern is ``"close"`` to NaN."""
    f = formats.get_format(fmt)
    exp_bits = formats.decompose(value, f).bits
    if is_placeholder(answer):
        return no_answer(name, show, f"a string of {f.total_bits} bits")
    if isinstance(answer, str) and re.fullmatch(r"\s*0[xX][0-9a-fA-F]+\s*", answer):
        answer = int(answer, 16)
    if isinstance(answer, Integral) and not isinstance(answer, (bool, np.bool_)):  # numpy integers too
        if not 0 <= answer < 2**f.total_bits:
            head = note("check.bits_too_big", name=name, value=answer, bits=f.total_bits)
            return finish("wrong", head, hint=hint, show=show)
        answer = f"{int(answer):0{f.total_bits}b}"
    if not isinstance(answer, str):
        head = note("check.bits_not_text", name=name, kind=type(answer).__name__)
        return finish("wrong", head, hint=hint, show=show)
    bits = re.sub(r"[\s_|]", "", answer.strip().removeprefix("0b").removeprefix("0B"))
    if not bits or set(bits) - {"0", "1"}:
        return finish("wrong", note("check.bits_not_binary", answer=answer), hint=hint, show=show)
    ne = f.exponent_bits
    facts = dict(name=name, format=f.name, bits=f.total_bits, exponent=ne, mantissa=f.mantissa_bits)
    if len(bits) != f.total_bits:
        head = note("check.bits_length", count=len(bits), **facts)
        return finish("wrong", head, hint=hint, show=show, details={"bits": bits})
    if bits == exp_bits:
        return finish("exact", note("check.bits_right", **facts), show=show, details={"bits": bits})
    mine, target = formats.from_bits(bits, f), formats.from_bits(exp_bits, f)
    details = {"bits": bits, "your_value": mine}
    if math.isnan(mine) and math.isnan(target):
        head = note("check.bits_nan", **facts)
        return finish("close", head, [note("check.nan_patterns")], show=show, details=details)
    cuts = {"sign": slice(0, 1), "exponent": slice(1, 1 + ne), "mantissa": slice(1 + ne, None)}
    fields = {k: (bits[c], exp_bits[c]) for k, c in cuts.items()}
    right = [k for k, (m, x) in fields.items() if m == x]
    wrong = [k for k, (m, x) in fields.items() if m != x]
    details["wrong_fields"] = wrong
    shown = " ".join(bits[c] for c in cuts.values())
    off = f"{', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} off"
    off += f" ({' and '.join(right)} right)" if right else ""
    head = note("check.bits_off", shown=shown, value=num(mine), off=off, **facts)
    (mine_e, right_e), (mine_m, right_m) = fields["exponent"], fields["mantissa"]
    notes = [note("check.sign_bit")] if "sign" in wrong else []
    if mine_e != right_e:
        k = int(mine_e, 2)
        if k == 0:
            meaning = "0 (zero or a subnormal)"
        elif k == 2**ne - 1 and not f.finite_only:
            meaning = "all ones (inf or NaN)"
        else:
            meaning = f"{k}, i.e. 2**({k} - {f.bias}) = 2**{k - f.bias}"
        direction = "larger" if int(right_e, 2) > k else "smaller"
        notes.append(
            note("check.exponent_field", field=mine_e, meaning=meaning, direction=direction, bias=f.bias)
        )
    if mine_m != right_m:
        last = mine_e == right_e and abs(int(mine_m, 2) - int(right_m, 2)) == 1
        differ = sum(p != q for p, q in zip(mine_m, right_m, strict=True))
        code = "check.mantissa_last_place" if last else "check.mantissa_bits"
        notes.append(note(code, differ=differ, bits=f.mantissa_bits))
    if math.isfinite(mine) and math.isfinite(target) and mine != 0:
        rel = abs(mine - float(value)) / abs(float(value)) if float(value) != 0 else math.inf
        notes.append(f"the value your bits encode is {rel:.3g} (relative) away from {num(float(value))}.")
    return finish("wrong", head, notes, hint=hint, show=show, details=details)


def dtype_facts(d: torch.dtype) -> str:
    """A dtype's layout as a learner reads it: ``"16 bits, 8 exponent and 7 mantissa bits"``."""
    if not d.is_floating_point:
        kind = "a boolean" if d == torch.bool else "a complex" if d.is_complex else "an integer"
        return f"{kind} type of {d.itemsize * 8} bits"
    fi = torch.finfo(d)
    mant = round(-math.log2(fi.eps))  # eps = 2**-mantissa_bits, for every float dtype
    exp = fi.bits - (0 if fi.min > 0 else 1) - mant  # float8_e8m0fnu has no sign bit
    return f"{fi.bits} bits, {exp} exponent and {mant} mantissa bits"


def check_dtype(
    answer, expected, *, name: str = "answer", hint: str | None = None, show: bool = True
) -> CheckResult:
    """Check a predicted dtype (a torch dtype, a name such as ``"bf16"``, or a tensor); a wrong one is told
    what its dtype is and which autocast rule to think about, never the expected dtype."""
    exp = read_dtype(expected)
    if is_placeholder(answer):
        return no_answer(name, show, "a dtype such as torch.float32 or 'bf16'")
    got = read_dtype(answer)
    if got is None:
        return finish("wrong", note("check.not_a_dtype", name=name, answer=answer), hint=hint, show=show)
    if got == exp:
        return finish("exact", note("check.dtype_right", name=name, dtype=dtype_name(exp)), show=show)
    notes = [note("check.dtype_layout", dtype=dtype_name(got), layout=dtype_facts(got))]
    low = (torch.float16, torch.bfloat16)
    if {got, exp} == set(low):
        notes.append(note("check.which_16_bit"))
    elif exp == torch.float32 and got in low:
        notes.append(note("check.kept_in_float32"))
    elif got == torch.float32 and exp in low:
        notes.append(note("check.runs_low_precision"))
    head = note("check.dtype_wrong", name=name, dtype=dtype_name(got))
    return finish("wrong", head, notes, hint=hint, show=show)
