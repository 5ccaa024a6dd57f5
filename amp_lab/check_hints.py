"""What a wrong answer's feedback names: the usual mistakes with numbers, shapes, bit fields and dtypes.

Each hint is a :class:`~amp_lab.check_base.Note`: a sentence from :data:`amp_lab.text.REASONS` (codes
``check.*``) and its code, which :class:`~amp_lab.check_base.CheckResult` keeps in ``reasons``.  Hints
point at the idea, never at the expected value.
"""

from __future__ import annotations

import math

import torch

from .check_base import Note, Precision, note, num, power_of_two, precision
from .dtypes import dtype_name


def diagnose(a: torch.Tensor, e: torch.Tensor, prec: Precision, *, about_format: bool = True) -> list[Note]:
    """Hints for a wrong numeric answer ``a`` (float64, the shape of ``e``), most specific first.

    The notes about rounding to another format are only offered when ``about_format``: the
    exercise names a dtype, or its expected value is itself a low-precision tensor.  For a plain
    number (255 versus 256, 0.0156 versus 2**-6) "rounded to bfloat16 it is right" would mislead.
    """
    notes: list[Note] = []
    new_bad = ~torch.isfinite(a) & torch.isfinite(e)
    if new_bad.any():
        n = int(new_bad.sum())
        kinds = "NaN" if torch.isnan(a[new_bad]).all() else "inf/NaN"
        where = "" if a.numel() == 1 else f"{n} element{'s' if n > 1 else ''} "
        notes.append(note("check.not_finite", where=where, kinds=kinds, precision=prec.name, count=n))
    finite = torch.isfinite(a) & torch.isfinite(e)
    zeros = finite & (a == 0) & (e != 0)
    if zeros.any() and not (a == 0).all():
        n = int(zeros.sum())
        notes.append(note("check.some_zeros", count=n, values="values are" if n > 1 else "value is"))
    elif zeros.any():
        notes.append(note("check.all_zeros"))
    both = finite & (e != 0) & (a != 0)
    if both.any() and bool(both.all() | ~finite.all()):
        ratio = a[both] / e[both]
        r0 = float(ratio.flatten()[0])
        constant = bool(((ratio - r0).abs() <= 1e-5 * abs(r0)).all())
        if constant and abs(r0 - 1.0) > 1e-5:
            k = round(math.log2(abs(r0)))
            facts = {
                "what": "every value of your answer is" if a.numel() > 1 else "your answer is",
                "exactly": "exactly" if power_of_two(abs(r0)) is not None else "about",
                "sign": "-" if r0 < 0 else "",
                "k": k,
                "factor": num(2.0**k),
                "off": -k,
                "ratio": r0,
            }
            if abs(r0 + 1.0) <= 1e-5:
                notes.append(note("check.sign_flipped", ratio=r0))
            elif k != 0 and abs(abs(r0) / 2.0**k - 1.0) <= 1e-5:
                notes.append(
                    note("check.exponent_too_large" if k > 0 else "check.exponent_too_small", **facts)
                )
            elif a.numel() > 1:
                notes.append(note("check.constant_factor", ratio=r0))
    if about_format and e.numel() and bool(finite.all()):
        notes += _format_notes(a, e, prec)
    return notes


def _format_notes(a: torch.Tensor, e: torch.Tensor, prec: Precision) -> list[Note]:
    """The right value in another precision, or not rounded to this one at all."""
    for other in ("fp32", "bf16", "fp16", "tf32", "fp8_e4m3", "fp8_e5m2"):
        p = precision(other)
        if p.name != prec.name and bool((a == p.round(e)).all()) and not bool((a == e).all()):
            return [note("check.rounded_to_other", other=p.name, precision=prec.name)]
    for other in ("fp16", "bf16", "fp32", "tf32", "fp8_e4m3", "fp8_e5m2"):
        p = precision(other)
        if bool((p.round(a) == e).all()):
            return [note("check.unrounded_in_other", other=p.name)]
    if prec.fmt is not None and not bool((a == prec.round(a)).all()):
        return [note("check.not_rounded", precision=prec.name)]
    return []


def shape_notes(a: torch.Tensor, e: torch.Tensor) -> list[Note]:
    """What a wrong shape suggests: a transpose, a reshape, or a reduction over everything."""
    if a.dim() == 2 and a.T.shape == e.shape:
        return [note("check.transposed")]
    if a.numel() == e.numel():
        return [note("check.reshaped")]
    if a.numel() == 1:
        return [note("check.reduced")]
    return []


def bits_notes(fields: dict, fmt) -> list[Note]:
    """One note per wrong field of a bit pattern; ``fields`` maps sign/exponent/mantissa to (yours, right)."""
    notes = []
    if fields["sign"][0] != fields["sign"][1]:
        notes.append(note("check.sign_bit"))
    ne = fmt.exponent_bits
    if fields["exponent"][0] != fields["exponent"][1]:
        m_e, x_e = int(fields["exponent"][0], 2), int(fields["exponent"][1], 2)
        if m_e == 0:
            meaning = "0 (zero or a subnormal)"
        elif m_e == 2**ne - 1 and not fmt.finite_only:
            meaning = "all ones (inf or NaN)"
        else:
            meaning = f"{m_e}, i.e. 2**({m_e} - {fmt.bias}) = 2**{m_e - fmt.bias}"
        direction = "larger" if x_e > m_e else "smaller"
        facts = {"field": fields["exponent"][0], "meaning": meaning, "direction": direction, "bias": fmt.bias}
        notes.append(note("check.exponent_field", **facts))
    mine, right = fields["mantissa"]
    if mine != right:
        n_diff = sum(p != q for p, q in zip(mine, right, strict=True))
        last = fields["exponent"][0] == fields["exponent"][1] and abs(int(mine, 2) - int(right, 2)) == 1
        code = "check.mantissa_last_place" if last else "check.mantissa_bits"
        notes.append(note(code, differ=n_diff, bits=fmt.mantissa_bits))
    return notes


def dtype_facts(d: torch.dtype) -> str:
    """A dtype's layout as a learner reads it: ``"16 bits, 8 exponent and 7 mantissa bits"``."""
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


def dtype_notes(got: torch.dtype, exp: torch.dtype) -> list[Note]:
    """What a wrong dtype is (never the expected one's layout) and which of autocast's rules to think about."""
    notes = [note("check.dtype_layout", dtype=dtype_name(got), layout=dtype_facts(got))]
    low = (torch.float16, torch.bfloat16)
    if {got, exp} == set(low):
        notes.append(note("check.which_16_bit"))
    elif exp == torch.float32 and got in low:
        notes.append(note("check.kept_in_float32"))
    elif got == torch.float32 and exp in low:
        notes.append(note("check.runs_low_precision"))
    return notes
