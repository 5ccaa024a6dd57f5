"""Floating-point formats, bit by bit (taught in ``01_float_formats``).

Six formats modern accelerators use, described by their bit widths and rounded exactly as
torch (and the hardware) rounds:

========== ======== ======== ===================================================================
name       exponent mantissa notes
========== ======== ======== ===================================================================
``fp32``   8        23       IEEE binary32, the reference
``tf32``   8        10       Ampere+ Tensor Core input format; no storage dtype, emulated on fp32 bits
``bf16``   8        7        FP32's range, 8 bits of precision
``fp16``   5        10       IEEE binary16: more precision than bf16, far less range
``fp8_e4m3`` 4      3        torch ``float8_e4m3fn``: no infinities, max 448, casts saturate
``fp8_e5m2`` 5      2        torch ``float8_e5m2``: IEEE-like, max 57344, overflow goes to inf
========== ======== ======== ===================================================================

* ``FORMATS`` maps each name to a :class:`FloatFormat` whose limits (``max``, ``min_normal``,
  ``min_subnormal``, ``eps``) are derived from the bit widths (tests check them against
  ``torch.finfo``).
* ``round_to(x, fmt)`` rounds to a format and returns float32; for torch-backed formats it *is*
  ``x.float().to(dtype).float()``.  ``emulate_round(x, fmt)`` is an independent re-implementation
  from the bit widths (round to nearest, ties to even), which tests check against torch's casts
  and which TF32 uses.
* ``decompose(value, fmt)`` gives the sign/exponent/mantissa fields, the class, the ulp and the
  rounding error of a value; ``from_bits(bits, fmt)`` decodes a bit pattern.
* ``Decomposition.rounding()`` reads what the rounding did (exact, nearest, a tie to even, an
  overflow) as a :class:`~amp_lab.text.Reading`; the bit explorer widget is ``format_explorer``'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import torch

from ._checks import ArgumentTypeError, check_instance
from .device import float64_on_cpu
from .text import Reading

__all__ = [
    "FloatFormat",
    "FORMATS",
    "FORMAT_NAMES",
    "get_format",
    "round_to",
    "emulate_round",
    "decompose",
    "Decomposition",
    "from_bits",
    "formats_table",
    "ulp_curve",
    "plot_range_precision",
    "format_ulp",
    "fp8_e4m3_overflow",
]


# --------------------------------------------------------------------------------------------
# Formats
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: 1 sign bit, ``exponent_bits``, ``mantissa_bits``.

    ``finite_only`` formats (FP8 E4M3 "fn") have no infinities: the all-ones exponent is an
    ordinary binade except for the single all-ones pattern, which is NaN.  ``overflow`` says what
    a cast does to values beyond ``max``: ``"inf"`` (IEEE), ``"saturate"`` (clamp to ``±max``)
    or ``"nan"``.  The limits are derived from the widths in ``__post_init__``.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    torch_dtype: torch.dtype | None = None
    finite_only: bool = False
    overflow: str = "inf"
    label: str = ""
    note: str = ""
    bias: int = field(init=False)
    emin: int = field(init=False)
    emax: int = field(init=False)
    max: float = field(init=False)
    min_normal: float = field(init=False)
    min_subnormal: float = field(init=False)
    eps: float = field(init=False)

    def __post_init__(self):
        e, m = self.exponent_bits, self.mantissa_bits
        bias = 2 ** (e - 1) - 1
        if self.finite_only:
            # The top binade is ordinary; only its all-ones mantissa is NaN.
            emax = (2**e - 1) - bias
            max_significand = 2.0 - 2.0 ** (1 - m)
        else:
            emax = (2**e - 2) - bias
            max_significand = 2.0 - 2.0**-m
        set_ = object.__setattr__
        set_(self, "bias", bias)
        set_(self, "emin", 1 - bias)
        set_(self, "emax", emax)
        set_(self, "max", math.ldexp(max_significand, emax))
        set_(self, "min_normal", math.ldexp(1.0, 1 - bias))
        set_(self, "min_subnormal", math.ldexp(1.0, 1 - bias - m))
        set_(self, "eps", math.ldexp(1.0, -m))
        if not self.label:
            set_(self, "label", self.name.upper())

    @property
    def total_bits(self) -> int:
        """Sign + exponent + mantissa bits (TF32 has 19, stored in 32-bit registers)."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def precision(self) -> int:
        """Significand bits including the implicit leading 1."""
        return self.mantissa_bits + 1

    @property
    def has_inf(self) -> bool:
        return not self.finite_only

    def __repr__(self) -> str:
        return (
            f"FloatFormat({self.name!r}, E{self.exponent_bits}M{self.mantissa_bits}, bias={self.bias}, "
            f"max={self.max:g}, min_normal={self.min_normal:g}, min_subnormal={self.min_subnormal:g}, "
            f"eps={self.eps:g})"
        )


def fp8_e4m3_overflow() -> str:
    """What this torch's ``x.to(torch.float8_e4m3fn)`` does beyond 448: ``"saturate"`` (torch 2.13, CPU and
    CUDA alike: finite overflow and ±inf become ±448, NaN stays NaN) or ``"nan"``, asked of torch, not assumed,
    so ``FORMATS["fp8_e4m3"]`` always describes the installed torch."""
    probe = torch.tensor([1e4, float("inf")]).to(torch.float8_e4m3fn).float()
    if bool(torch.all(probe == 448.0)):
        return "saturate"
    return "nan"


def _build_formats() -> dict[str, FloatFormat]:
    fmts = [
        FloatFormat("fp32", 8, 23, torch.float32, note="IEEE binary32; the reference"),
        FloatFormat(
            "tf32",
            8,
            10,
            None,
            note="Tensor Core input for FP32 matmuls (Ampere+); FP32 range, FP16 precision",
        ),
        FloatFormat("bf16", 8, 7, torch.bfloat16, note="FP32's range with 8 bits of precision"),
        FloatFormat("fp16", 5, 10, torch.float16, note="IEEE binary16: needs loss scaling"),
        FloatFormat(
            "fp8_e4m3",
            4,
            3,
            torch.float8_e4m3fn,
            finite_only=True,
            overflow=fp8_e4m3_overflow(),
            label="FP8 E4M3",
            note="torch float8_e4m3fn: no inf, forward activations/weights",
        ),
        FloatFormat("fp8_e5m2", 5, 2, torch.float8_e5m2, label="FP8 E5M2", note="IEEE-like: gradients"),
    ]
    return {f.name: f for f in fmts}


FORMATS: dict[str, FloatFormat] = _build_formats()
FORMAT_NAMES: tuple[str, ...] = tuple(FORMATS)

_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8_e4m3fn": "fp8_e4m3",
    "e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
    "e5m2": "fp8_e5m2",
}


def get_format(fmt) -> FloatFormat:
    """A :class:`FloatFormat` from a name (``"fp16"``, ``"bf16"``, ...), a torch dtype or a FloatFormat.

    An unknown name raises ``ValueError`` listing the valid names.
    """
    if isinstance(fmt, FloatFormat):
        return fmt
    if isinstance(fmt, torch.dtype):
        for f in FORMATS.values():
            if f.torch_dtype == fmt:
                return f
        raise ValueError(f"fmt={fmt!r} is not a course format; choose one of: {', '.join(FORMAT_NAMES)}")
    if isinstance(fmt, str):
        key = fmt.strip().lower().removeprefix("torch.")
        key = _ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key]
        raise ValueError(
            f"fmt={fmt!r} is not allowed; choose one of: {', '.join(repr(n) for n in FORMAT_NAMES)}"
        )
    raise ArgumentTypeError(
        f"fmt={fmt!r:.80} is a {type(fmt).__name__}, not a format: use a format name (one of: "
        f"{', '.join(repr(n) for n in FORMAT_NAMES)}), a torch dtype or a FloatFormat"
    )


def format_list(fmts, name: str = "fmts") -> tuple[FloatFormat, ...]:
    """Formats from ``None`` (all of them), one format, or a non-empty list of them."""
    if fmts is None:
        return tuple(FORMATS.values())
    if isinstance(fmts, (str, FloatFormat, torch.dtype)):
        return (get_format(fmts),)
    if not isinstance(fmts, Iterable) or isinstance(fmts, Mapping):
        raise ArgumentTypeError(f"{name} must be a format name or a list of them, got {type(fmts).__name__}")
    out = tuple(get_format(f) for f in fmts)
    if not out:
        raise ValueError(f"{name} must name at least one format, got an empty {type(fmts).__name__}")
    return out


# --------------------------------------------------------------------------------------------
# Rounding
# --------------------------------------------------------------------------------------------


def real_tensor(x, name: str = "x", what: str | None = None) -> torch.Tensor:
    """``x`` (a tensor, a number, a numpy array or a (nested) list of numbers) as a real, non-bool tensor.

    The one rule every function that takes numbers follows: text is refused (write ``0.1``, not
    ``"0.1"``: parsing text is the bit explorer's job), and so are booleans (``True`` is not the
    number 1 here) and complex numbers (a format holds real numbers).  A Python int beyond float64
    becomes ``±inf``, as it would in float32 anyway.  Tensors are returned detached, not copied.
    """
    what = what or f"{name} must be a real number, a list of numbers, a numpy array or a tensor"
    if isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        if isinstance(x, (str, bytes)):
            raise ArgumentTypeError(f"{what}, got the text {x!r:.80}: write the number without quotes")
        if isinstance(x, (bool, np.bool_)):
            raise ArgumentTypeError(f"{what}, got the bool {x!r}")
        if isinstance(x, Integral):
            try:
                float(x)
            except OverflowError:  # a Python int beyond float64's range: ±inf, as float32 would store it
                x = math.inf if x > 0 else -math.inf
        try:
            probe = torch.as_tensor(x, device="cpu")  # only to see what kind of numbers x holds
        except (TypeError, ValueError, RuntimeError, OverflowError):
            probe = None  # e.g. a list with an int beyond int64: float64 may still hold it
        if probe is not None and (probe.dtype == torch.bool or probe.is_complex()):
            t = probe
        else:
            try:
                t = torch.as_tensor(x, dtype=torch.float64, device="cpu")
            except (TypeError, ValueError, RuntimeError, OverflowError):
                raise ArgumentTypeError(f"{what}, got {type(x).__name__}: {x!r:.80}") from None
    if t.dtype == torch.bool:
        raise ArgumentTypeError(
            f"{name} must hold numbers, got a bool tensor (True/False values); use x.float()"
        )
    if t.is_complex():
        raise ArgumentTypeError(f"{name} must be real, got a complex {'tensor' if t.dim() else 'number'}")
    return t


def _as_float32(x, name: str = "x") -> torch.Tensor:
    return real_tensor(x, name).float()


def real_scalar(value, name: str = "value") -> float:
    """One real number (a Python or numpy number, or a one-element tensor) as a float, by the rule
    of :func:`real_tensor` (no text, no bools, no complex; huge ints become ±inf)."""
    if isinstance(value, float):
        return value
    if isinstance(value, Real) and not isinstance(value, (bool, np.bool_)):
        try:
            return float(value)  # Python and numpy numbers, Fractions
        except OverflowError:  # an int beyond float64's range
            return math.inf if value > 0 else -math.inf
    t = real_tensor(value, name, f"{name} must be a real number (or a one-element tensor)")
    if t.numel() != 1:
        raise ValueError(f"{name} must be a single number, got a tensor of shape {tuple(t.shape)}")
    return float(t.reshape(()).item())


def _is_huge_int(value) -> bool:
    """True for an integer beyond float64's range (which the rule above reads as ``±inf``)."""
    if not isinstance(value, Integral) or isinstance(value, (bool, np.bool_)):
        return False
    try:
        float(value)
    except OverflowError:
        return True
    return False


def _round_tf32_bits(t: torch.Tensor) -> torch.Tensor:
    """Round float32 to 10 mantissa bits, ties to even, on the integer bit pattern."""
    drop = 23 - 10
    bits = t.contiguous().view(torch.int32)
    lsb = (bits >> drop) & 1
    # Adding half an ulp minus one plus the kept lsb, then truncating, is round-half-even; a
    # carry out of the mantissa increments the exponent (and FLT_MAX-ish values become inf).
    rounded = (bits + ((1 << (drop - 1)) - 1) + lsb) & ~((1 << drop) - 1)
    out = rounded.view(torch.float32)
    return torch.where(torch.isfinite(t), out, t)


def round_to(x, fmt) -> torch.Tensor:
    """``x`` rounded to ``fmt``, returned as a float32 tensor (same shape and device as ``x``).

    ``x`` may be a tensor, a Python number or a list; it is first stored as float32, exactly as
    ``torch.tensor(x)`` would, then rounded.  For formats torch stores (fp32, bf16, fp16, both
    FP8) the result *is* ``x.float().to(fmt.torch_dtype).float()``: round to nearest, ties to
    even, subnormals kept, and overflow as torch casts it: ``inf`` for fp16/bf16/fp8_e5m2,
    ``±448`` for fp8_e4m3 (torch 2.13 saturates finite overflow *and* ±inf; NaN stays NaN; see
    :func:`fp8_e4m3_overflow` for older torch).  TF32 has no storage dtype: it is emulated on the
    float32 bits (round to nearest even at 10 mantissa bits; overflow to inf).  Note that
    hardware conversions differ at ties: PTX ``cvt.rna.tf32.f32`` rounds ties away from zero and
    Tensor Cores given raw FP32 in TF32 mode may simply ignore the low 13 bits, so real TF32
    results can differ from this model in the last TF32 bit.
    """
    f = get_format(fmt)
    t = _as_float32(x)
    if f.torch_dtype == torch.float32:
        return t.clone()
    if f.torch_dtype is None:
        if (f.exponent_bits, f.mantissa_bits, f.finite_only) == (8, 10, False):
            return _round_tf32_bits(t)
        return emulate_round(t, f)  # a format of your own, from its bit widths
    try:
        return t.to(f.torch_dtype).float()
    except (RuntimeError, TypeError):  # pragma: no cover - a device without this dtype (e.g. MPS fp8)
        return emulate_round(t, f)


def round_array(x: np.ndarray, f: FloatFormat, residual: np.ndarray | None = None) -> np.ndarray:
    """Round float64 values to ``f`` exactly (ties to even); returns float64.

    The one implementation of rounding from the bit widths, used by :func:`emulate_round` and by
    the Tensor Core emulation.  ``residual`` (optional) is the part of the exact value float64
    could not hold, as from a TwoSum: the exact value is ``x + residual``.  It only matters when
    ``x`` sits exactly on a tie of ``f``; then its sign decides, as correct rounding requires.
    """
    with np.errstate(all="ignore"):
        _, ex = np.frexp(x)  # x = m * 2**ex with 0.5 <= |m| < 1 (ex = 0 for 0, inf, nan)
        e = np.maximum(ex - 1, f.emin)  # binade exponent; subnormals share emin's quantum
        q = np.ldexp(1.0, e - f.mantissa_bits)
        v = x / q  # exact: scaling by a power of two
        r = np.rint(v)  # half to even
        if residual is not None and np.any(residual != 0):
            lo = np.floor(v)
            tie = (v - lo) == 0.5
            r = np.where(tie & (residual > 0), lo + 1, np.where(tie & (residual < 0), lo, r))
        r = r * q
        over = np.abs(r) > f.max  # finite overflow, and infinite input
        if np.any(over):
            if f.overflow == "inf":
                big = np.copysign(np.inf, x)
            elif f.overflow == "saturate":
                big = np.copysign(f.max, x)
            else:
                big = np.full_like(x, np.nan)
            if f.has_inf:  # an infinite input stays infinite
                big = np.where(np.isinf(x), x, big)
            r = np.where(over, big, r)
    return np.asarray(r, dtype=np.float64)  # 0-d input gives a numpy scalar above


def _round_float64(x: torch.Tensor, f: FloatFormat, residual: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`round_array` for a tensor's values, computed in float64 on the CPU; returns a float64
    tensor on the CPU (an Apple GPU has no float64, so the result cannot go back as it is)."""
    res = None if residual is None else float64_on_cpu(residual).numpy()
    return torch.from_numpy(round_array(float64_on_cpu(x).numpy(), f, res))


def emulate_round(x, fmt) -> torch.Tensor:
    """``round_to`` re-implemented from the bit widths alone (float32 in, float32 out).

    Round to nearest, ties to even, gradual underflow, and the format's overflow rule.  Tests
    check it against torch's casts for every torch-backed format; for TF32 it agrees with
    ``round_to``'s bit-level emulation.
    """
    f = get_format(fmt)
    t = _as_float32(x)
    # narrowed to float32 on the CPU, then moved: float64 never reaches the device (MPS has none)
    return _round_float64(t, f).float().to(t.device)


# --------------------------------------------------------------------------------------------
# Fields of a value
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decomposition:
    """The fields of a value rounded to a format (see :func:`decompose`)."""

    fmt: str
    input: float
    value: float
    sign: int
    exponent: int
    mantissa: int
    bits: str
    kind: str
    ulp: float
    error: float
    exponent_width: int = field(default=0, repr=False)

    @property
    def sign_bits(self) -> str:
        return self.bits[0]

    @property
    def exponent_bits(self) -> str:
        return self.bits[1 : 1 + self.exponent_width]

    @property
    def mantissa_bits(self) -> str:
        return self.bits[1 + self.exponent_width :]

    def formula(self) -> str:
        """How the fields make the value, e.g. ``(-1)^0 × 2^(15-15) × 1.0000000000b``."""
        bias = 2 ** (self.exponent_width - 1) - 1
        if self.kind in ("nan", "inf"):
            return {"nan": "NaN", "inf": ("-" if self.sign else "+") + "inf"}[self.kind]
        if self.kind in ("zero", "subnormal"):
            return f"(-1)^{self.sign} × 2^({1 - bias}) × 0.{self.mantissa_bits}b"
        return f"(-1)^{self.sign} × 2^({self.exponent}-{bias}) × 1.{self.mantissa_bits}b"

    def rounding(self) -> Reading:
        """What rounding ``input`` to the format did, as facts: outcome ``formats.exact``,
        ``formats.stored_as`` (with ``formats.step_in_binade`` or ``formats.step_subnormal``, and ``formats.tie_to_even`` or
        ``formats.to_nearest``), ``formats.saturates``, ``formats.overflows_to_inf``,
        ``formats.overflows_to_nan`` or ``formats.nan_in``."""
        f = get_format(self.fmt)
        x, stored = self.input, self.value
        facts = {"label": f.label, "x": x, "stored": stored, "max": f.max, "precision": f.precision}
        if math.isnan(x):
            return Reading("formats.nan_in", (), facts)
        if abs(x) > f.max or math.isinf(stored):
            outcome = {"inf": "formats.overflows_to_inf", "saturate": "formats.saturates"}.get(f.overflow)
            return Reading(outcome or "formats.overflows_to_nan", (), facts)
        if stored == x:
            return Reading("formats.exact", (), facts)
        step = format_ulp(x, f)
        low = math.ldexp(1.0, math.frexp(abs(x))[1] - 1) if abs(x) >= f.min_normal else 0.0
        below = math.floor(x / step) * step
        facts |= {
            "step": step,
            "low": low,
            "high": 2 * low if low else f.min_normal,
            "below": below,
            "above": below + step,
            "last_bit": self.mantissa_bits[-1],
        }
        tie = x - below == step / 2
        return Reading(
            "formats.stored_as",
            (
                "formats.step_in_binade" if low else "formats.step_subnormal",
                "formats.tie_to_even" if tie else "formats.to_nearest",
            ),
            facts,
        )


def format_ulp(value: float, fmt) -> float:
    """Spacing of ``fmt`` at ``value``: ``2**(e - mantissa_bits)`` with ``e`` = the binade of ``|value|``
    (``emin`` for zero and subnormals).  It is the gap to the next value *away from zero*; NaN for
    non-finite values.  An integer beyond float64's range is finite: its spacing is exact where
    float64 can hold it and ``inf`` where it cannot (never NaN)."""
    f = get_format(fmt)
    v = real_scalar(value, "value")
    if _is_huge_int(value):
        # finite, but beyond float64: its spacing 2**(e - mantissa_bits), exact while float64 holds it
        e = abs(int(value)).bit_length() - 1
        try:
            return math.ldexp(1.0, e - f.mantissa_bits)
        except OverflowError:
            return math.inf
    if not math.isfinite(v):
        return math.nan
    e = f.emin if v == 0 else max(math.frexp(abs(v))[1] - 1, f.emin)
    return math.ldexp(1.0, e - f.mantissa_bits)


def _kind(value: float, f: FloatFormat) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "zero"
    return "subnormal" if abs(value) < f.min_normal else "normal"


def decompose(value, fmt) -> Decomposition:
    """Round ``value`` to ``fmt`` (as :func:`round_to` does) and take the result apart.

    Returns a :class:`Decomposition` with ``sign`` (0/1), ``exponent`` (the raw biased field),
    ``mantissa`` (the raw field), ``bits`` (the pattern as a 0/1 string: sign, exponent,
    mantissa), ``value`` (the rounded value), ``kind`` (``"zero"``, ``"subnormal"``,
    ``"normal"``, ``"inf"``, ``"nan"``), ``ulp`` (see :func:`format_ulp`) and ``error``, the
    relative rounding error ``|value - input| / |input|`` against the input as given (a Python
    float is float64, so even FP32 shows the error of storing ``0.1``).  ``error`` is 0 for exact
    results (zeros and infinities kept), ``inf`` when a finite input overflowed to inf or an
    infinite one saturated, and NaN for NaN input.  NaN is shown with its canonical pattern.
    An integer beyond float64's range is read as ``±inf`` (:func:`round_to`'s rule; ``input`` is
    ``±inf``), but it was finite, so its ``error`` is ``inf``.  ``value`` may also be a
    one-element tensor, as for :func:`round_to`.
    """
    f = get_format(fmt)
    x = real_scalar(value, "value")  # the same rule as round_to's: no text, no bools, huge ints are ±inf
    r = float(round_to(x, f).item())
    kind = _kind(r, f)
    e_all = 2**f.exponent_bits - 1
    sign = 1 if math.copysign(1.0, r) < 0 else 0
    if kind == "nan":
        sign = 0
        exponent = e_all
        mantissa = 2**f.mantissa_bits - 1 if f.finite_only else 1 << (f.mantissa_bits - 1)
    elif kind == "inf":
        exponent, mantissa = e_all, 0
    elif kind == "zero":
        exponent, mantissa = 0, 0
    elif kind == "subnormal":
        exponent = 0
        mantissa = int(abs(r) / f.min_subnormal)
    else:
        e = math.frexp(abs(r))[1] - 1
        exponent = e + f.bias
        mantissa = int((math.ldexp(abs(r), -e) - 1.0) * 2**f.mantissa_bits)
    bits = f"{sign}{exponent:0{f.exponent_bits}b}{mantissa:0{f.mantissa_bits}b}"
    if math.isnan(x) or math.isnan(r):
        error = math.nan if math.isnan(x) else math.inf
    elif _is_huge_int(value):  # finite, though read as ±inf: it overflowed
        error = math.inf
    elif r == x:
        error = 0.0
    elif math.isinf(x) or math.isinf(r):
        error = math.inf
    else:
        error = abs(r - x) / abs(x)
    return Decomposition(
        fmt=f.name,
        input=x,
        value=r,
        sign=sign,
        exponent=exponent,
        mantissa=mantissa,
        bits=bits,
        kind=kind,
        ulp=format_ulp(r, f),
        error=error,
        exponent_width=f.exponent_bits,
    )


def from_bits(bits, fmt) -> float:
    """The value of a bit pattern of ``fmt`` (an int, or a 0/1 string, spaces allowed).

    Decodes from the fields alone (not via torch), so tests can check it against torch's
    ``view`` of every FP16, BF16 and FP8 pattern.
    """
    f = get_format(fmt)
    n = f.total_bits
    pattern = int(bits.replace(" ", "").replace("_", ""), 2) if isinstance(bits, str) else int(bits)
    sign = -1.0 if pattern >> (n - 1) else 1.0
    exponent = (pattern >> f.mantissa_bits) & (2**f.exponent_bits - 1)
    mantissa = pattern & (2**f.mantissa_bits - 1)
    e_all = 2**f.exponent_bits - 1
    if f.finite_only:
        if exponent == e_all and mantissa == 2**f.mantissa_bits - 1:
            return math.nan
    elif exponent == e_all:
        return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:
        return sign * math.ldexp(mantissa, f.emin - f.mantissa_bits)
    return sign * math.ldexp(2**f.mantissa_bits + mantissa, exponent - f.bias - f.mantissa_bits)


def formats_table(fmts=None) -> list[dict]:
    """One row per format: bit widths, bias, limits and decimal digits, computed from the formats."""
    rows = []
    for f in format_list(fmts):
        rows.append(
            {
                "format": f.label,
                "bits": f.total_bits,
                "exponent": f.exponent_bits,
                "mantissa": f.mantissa_bits,
                "bias": f.bias,
                "max": f.max,
                "min_normal": f.min_normal,
                "min_subnormal": f.min_subnormal,
                "eps": f.eps,
                "decimal_digits": round(math.log10(2.0**f.precision), 1),
                "decades": round(math.log10(f.max / f.min_subnormal), 1),
                "torch_dtype": str(f.torch_dtype).removeprefix("torch.") if f.torch_dtype else "(none)",
                "overflow": f.overflow,
            }
        )
    return rows


FORMAT_COLOURS = {
    "fp32": "#1f77b4",
    "tf32": "#17becf",
    "bf16": "#ff7f0e",
    "fp16": "#d62728",
    "fp8_e4m3": "#9467bd",
    "fp8_e5m2": "#8c564b",
}


def ulp_curve(fmt) -> tuple[list[float], list[float]]:
    """Points of the staircase ``ulp(|x|)`` from ``min_subnormal`` to ``max`` (for log-log plots)."""
    f = get_format(fmt)
    xs = [f.min_subnormal]
    ys = [f.min_subnormal]
    for e in range(f.emin, f.emax + 1):
        xs.append(math.ldexp(1.0, e))
        ys.append(math.ldexp(1.0, e - f.mantissa_bits))
    xs.append(f.max)
    ys.append(ys[-1])
    return xs, ys


def plot_range_precision(fig=None, fmts=None):
    """Notebook 01's chart: ulp against magnitude (left) and relative spacing ``ulp/|x|`` (right),
    log-log, one staircase per format with its min subnormal (o), min normal (^) and max (s)."""
    from matplotlib.figure import Figure

    names = [f.name for f in format_list(fmts)]
    unknown = [n for n in names if n not in FORMATS]
    if unknown:
        raise ValueError(
            f"fmts may name only the course's formats ({', '.join(FORMAT_NAMES)}), got {unknown[0]!r}"
        )
    if fig is None:
        fig = Figure(figsize=(11, 4.2))
    else:
        check_instance("fig", fig, Figure, "a matplotlib Figure or None")
        if fig.axes:
            raise ValueError("fig must be an empty Figure (this chart adds its own two axes); pass a new one")
    ax_ulp, ax_rel = fig.subplots(1, 2)
    for name in names:
        f = FORMATS[name]
        colour = FORMAT_COLOURS.get(name)
        xs, ys = ulp_curve(f)
        ax_ulp.step(xs, ys, where="post", color=colour, label=f.label, lw=1.4)
        # relative spacing: min_subnormal/|x| through the subnormals (1 at the bottom, eps at
        # min_normal), then between eps/2 and eps in every binade up to max
        ax_rel.plot(
            [f.min_subnormal, f.min_normal, f.max], [1.0, f.eps, f.eps], color=colour, label=f.label, lw=1.4
        )
        ax_rel.plot([f.min_normal, f.max], [f.eps / 2, f.eps / 2], color=colour, lw=0.6, alpha=0.6)
        for ax, yv in (
            (ax_ulp, (f.min_subnormal, f.min_subnormal * 2**f.mantissa_bits, ys[-1])),
            (ax_rel, (1.0, f.eps, f.eps)),
        ):
            ax.plot([f.min_subnormal], [yv[0]], "o", color=colour, ms=5)
            ax.plot([f.min_normal], [yv[1]], "^", color=colour, ms=6)
            ax.plot([f.max], [yv[2]], "s", color=colour, ms=5)
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    def power_of_ten(v, _):
        return f"1e{round(math.log10(v))}" if v > 0 else ""

    for ax in (ax_ulp, ax_rel):
        ax.set_xscale("log", base=10)
        ax.set_yscale("log", base=10)
        # plain "1e-8" labels: quicker to lay out than the default mathtext ones
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10, numticks=8))
            axis.set_major_formatter(FuncFormatter(power_of_ten))
            axis.set_minor_locator(NullLocator())  # 90 decades of minor ticks are slow to draw
        ax.set_xlabel("magnitude |x|")
        ax.grid(True, which="major", alpha=0.3)
    ax_ulp.set_ylabel("ulp: gap to the next value")
    ax_ulp.set_title("Range: where each format starts (o, ^) and ends (s)")
    ax_rel.set_ylabel("relative spacing ulp / |x|")
    ax_rel.set_title("Precision: between eps/2 and eps in the normal range")
    ax_ulp.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
