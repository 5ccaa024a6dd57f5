"""Floating-point formats bit by bit (``01_float_formats``): the six formats, rounding as torch rounds,
an independent rounding from the bit widths, values taken apart into fields, the table and range chart."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real

import numpy as np
import torch

from ._checks import ArgumentTypeError, check_instance, check_numel
from .device import float64_on_cpu
from .dtypes import dtype_named
from .text import Reading


@dataclass(frozen=True)
class FloatFormat:
    """A binary format from its bit widths.  ``finite_only`` (E4M3 "fn"): no infinities, only all-ones is NaN;
    ``overflow``: what a cast does beyond ``max`` (``"inf"``, ``"saturate"`` to ``±max``, or ``"nan"``)."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    torch_dtype: torch.dtype | None = None
    finite_only: bool = False
    overflow: str = "inf"
    label: str = ""
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
        # finite_only: the top binade is ordinary, only its all-ones mantissa is NaN
        emax = (2**e - 1 if self.finite_only else 2**e - 2) - bias
        top = 2.0 - 2.0 ** ((1 if self.finite_only else 0) - m)
        derived = {"bias": bias, "emin": 1 - bias, "emax": emax, "max": math.ldexp(top, emax)}
        derived |= {"min_normal": math.ldexp(1.0, 1 - bias), "min_subnormal": math.ldexp(1.0, 1 - bias - m)}
        derived |= {"eps": math.ldexp(1.0, -m), "label": self.label or self.name.upper()}
        for key, value in derived.items():
            object.__setattr__(self, key, value)

    @property
    def total_bits(self) -> int:
        """Sign + exponent + mantissa bits (TF32 has 19, stored in 32-bit registers)."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def precision(self) -> int:
        """Significand bits including the implicit leading 1."""
        return self.mantissa_bits + 1


def fp8_e4m3_overflow() -> str:
    """What this torch's cast to ``float8_e4m3fn`` does beyond 448, asked of torch: ``"saturate"`` or ``"nan"``."""
    probe = torch.tensor([1e4, float("inf")]).to(torch.float8_e4m3fn).float()
    return "saturate" if bool(torch.all(probe == 448.0)) else "nan"


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("fp32", 8, 23, torch.float32),
        FloatFormat("tf32", 8, 10),  # Tensor Core input for FP32 matmuls (Ampere+): no storage dtype
        FloatFormat("bf16", 8, 7, torch.bfloat16),
        FloatFormat("fp16", 5, 10, torch.float16),
        FloatFormat("fp8_e4m3", 4, 3, torch.float8_e4m3fn, True, fp8_e4m3_overflow(), "FP8 E4M3"),
        FloatFormat("fp8_e5m2", 5, 2, torch.float8_e5m2, label="FP8 E5M2"),
    )
}
FORMAT_NAMES: tuple[str, ...] = tuple(FORMATS)


def get_format(fmt) -> FloatFormat:
    """A :class:`FloatFormat` from a name (``"fp16"``, or a dtype's name such as ``"half"``), a torch dtype or
    a FloatFormat."""
    if isinstance(fmt, FloatFormat):
        return fmt
    choices = ", ".join(repr(n) for n in FORMAT_NAMES)
    if isinstance(fmt, str):
        if fmt.strip().lower() in FORMATS:
            return FORMATS[fmt.strip().lower()]
        dtype = dtype_named(fmt)
    elif isinstance(fmt, torch.dtype):
        dtype = fmt
    else:
        raise ArgumentTypeError(
            f"fmt={fmt!r:.80} is a {type(fmt).__name__}, not a format: use a format name (one of: {choices}), "
            "a torch dtype or a FloatFormat"
        )
    for f in FORMATS.values():
        if dtype is not None and f.torch_dtype == dtype:
            return f
    raise ValueError(f"fmt={fmt!r} is not a course format; choose one of: {choices}")


def format_list(fmts) -> tuple[FloatFormat, ...]:
    """Formats from ``None`` (all of them), one format, or a non-empty list of them."""
    if fmts is None:
        return tuple(FORMATS.values())
    if isinstance(fmts, (str, FloatFormat, torch.dtype)):
        return (get_format(fmts),)
    if not isinstance(fmts, Iterable) or isinstance(fmts, Mapping):
        raise ArgumentTypeError(f"fmts must be a format name or a list of them, got {type(fmts).__name__}")
    out = tuple(get_format(f) for f in fmts)
    if not out:
        raise ValueError(f"fmts must name at least one format, got an empty {type(fmts).__name__}")
    return out


# The most values a call rounds or counts: an expanded (stride-0) view is sized by its elements, since every
# cast, copy or comparison of it works element by element (2**26 float64 values: half a gigabyte).
MAX_VALUES = 2**26


def real_tensor(x, name: str = "x", what: str | None = None) -> torch.Tensor:
    """``x`` (a tensor, number, numpy array or nested list) as a real tensor, detached, not copied; text,
    bools and complex numbers are refused, a Python int beyond float64 becomes ``±inf``."""
    what = what or f"{name} must be a real number, a list of numbers, a numpy array or a tensor"
    if isinstance(x, (str, bytes)):
        raise ArgumentTypeError(f"{what}, got the text {x!r:.80}: write the number without quotes")
    if isinstance(x, Integral) and not isinstance(x, (bool, np.bool_)):
        x = _int_as_float(x)
    if isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        try:  # the numbers as they are (to see bools and complex), else as float64 (ints beyond int64)
            t = torch.as_tensor(x, device="cpu")
            if t.dtype != torch.bool and not t.is_complex():
                t = torch.as_tensor(x, dtype=torch.float64, device="cpu")
        except (TypeError, ValueError, RuntimeError, OverflowError):
            try:
                t = torch.as_tensor(x, dtype=torch.float64, device="cpu")
            except (TypeError, ValueError, RuntimeError, OverflowError):
                raise ArgumentTypeError(f"{what}, got {type(x).__name__}: {x!r:.80}") from None
    if t.dtype == torch.bool:
        raise ArgumentTypeError(f"{what}, got a bool tensor (True/False values); use x.float()")
    if t.is_complex():
        raise ArgumentTypeError(f"{name} must be real, got a complex {'tensor' if t.dim() else 'number'}")
    return t


def _int_as_float(value: int) -> float:
    try:
        return float(value)
    except OverflowError:  # beyond float64: ±inf, as float32 would store it
        return math.inf if value > 0 else -math.inf


def real_scalar(value, name: str = "value") -> float:
    """One real number (or a one-element tensor) as a float, by :func:`real_tensor`'s rule."""
    if isinstance(value, Real) and not isinstance(value, (bool, np.bool_)):
        return _int_as_float(value) if isinstance(value, Integral) else float(value)
    t = real_tensor(value, name, f"{name} must be a real number (or a one-element tensor)")
    if t.numel() != 1:
        raise ValueError(f"{name} must be a single number, got a tensor of shape {tuple(t.shape)}")
    return float(t.reshape(()).item())


def round_to(x, fmt) -> torch.Tensor:
    """``x`` rounded to ``fmt`` as a float32 tensor: ``x.float().to(dtype).float()`` for torch's formats; TF32
    from its bit widths, ties to even (hardware may round ties away or truncate: the last bit can differ).  A
    Python float or a float64 tensor is rounded once, from its value (torch's own float64 casts may round
    twice)."""
    f = get_format(fmt)
    t = check_numel("x", real_tensor(x), MAX_VALUES, "round a slice of it")  # before any cast or copy
    if t.dtype == torch.float64 and f.torch_dtype not in (torch.float32, torch.float64):
        # Once, from the float64 value: through float32 first would round twice (1 + 2**-11 + 2**-40 in fp16).
        return torch.from_numpy(round_array(t.cpu().numpy(), f)).float().to(t.device)
    t = t.float()
    if f.torch_dtype == torch.float32:
        return t.clone()
    if f.torch_dtype is None:  # TF32 or a format of your own
        return emulate_round(t, f)
    try:
        return t.to(f.torch_dtype).float()
    except (RuntimeError, TypeError):  # a device without this dtype (MPS has no FP8)
        return emulate_round(t, f)


def round_array(x: np.ndarray, f: FloatFormat, residual: np.ndarray | None = None) -> np.ndarray:
    """Round float64 values to ``f`` exactly (ties to even) from the bit widths; ``residual`` (from a TwoSum:
    the exact value is ``x + residual``) decides a tie by its sign, as correct rounding requires."""
    with np.errstate(all="ignore"):
        _, ex = np.frexp(x)  # x = m * 2**ex with 0.5 <= |m| < 1
        q = np.ldexp(1.0, np.maximum(ex - 1, f.emin) - f.mantissa_bits)  # subnormals share emin's quantum
        v = x / q  # exact: scaling by a power of two
        r = np.rint(v)  # half to even
        if residual is not None:
            lo = np.floor(v)
            tie = (v - lo) == 0.5
            r = np.where(tie & (residual > 0), lo + 1, np.where(tie & (residual < 0), lo, r))
        r = r * q
        big = {"inf": np.copysign(np.inf, x), "saturate": np.copysign(f.max, x)}.get(f.overflow, np.nan * x)
        if not f.finite_only:
            big = np.where(np.isinf(x), x, big)  # an infinite input stays infinite
        r = np.where(np.abs(r) > f.max, big, r)
    return np.asarray(r, dtype=np.float64)


def emulate_round(x, fmt) -> torch.Tensor:
    """:func:`round_to` from the bit widths alone (float32 in, float32 out), checked against torch's casts."""
    f = get_format(fmt)
    t = real_tensor(x).float()
    # narrowed to float32 on the CPU, then moved: float64 never reaches the device (MPS has none)
    return torch.from_numpy(round_array(float64_on_cpu(t).numpy(), f)).float().to(t.device)


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
        if self.kind == "nan":
            return "NaN"
        if self.kind == "inf":
            return ("-" if self.sign else "+") + "inf"
        if self.kind in ("zero", "subnormal"):
            return f"(-1)^{self.sign} × 2^({1 - bias}) × 0.{self.mantissa_bits}b"
        return f"(-1)^{self.sign} × 2^({self.exponent}-{bias}) × 1.{self.mantissa_bits}b"

    def rounding(self) -> Reading:
        """What rounding did: ``formats.exact``, ``formats.stored_as`` (with the step and the tie),
        ``formats.saturates``, ``formats.overflows_to_inf``, ``formats.overflows_to_nan`` or ``formats.nan_in``."""
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
        facts |= {"step": step, "low": low, "high": 2 * low if low else f.min_normal, "below": below}
        facts |= {"above": below + step, "last_bit": self.mantissa_bits[-1]}
        reasons = (
            "formats.step_in_binade" if low else "formats.step_subnormal",
            "formats.tie_to_even" if x - below == step / 2 else "formats.to_nearest",
        )
        return Reading("formats.stored_as", reasons, facts)


def format_ulp(value: float, fmt) -> float:
    """Spacing of ``fmt`` at ``value`` (the gap to the next value away from zero; ``emin``'s for zero and
    subnormals); NaN for inf and NaN, but ``inf`` for an integer beyond float64 (finite, yet too big)."""
    f = get_format(fmt)
    v = real_scalar(value, "value")
    if not math.isfinite(v):
        return math.inf if isinstance(value, Integral) and math.isinf(v) else math.nan
    e = f.emin if v == 0 else max(math.frexp(abs(v))[1] - 1, f.emin)
    return math.ldexp(1.0, e - f.mantissa_bits)


def decompose(value, fmt) -> Decomposition:
    """Round ``value`` to ``fmt`` (as :func:`round_to` does) and take the result apart; ``error`` is
    ``|value - input| / |input|`` (``inf`` after overflow, also for an integer beyond float64)."""
    f = get_format(fmt)
    x = real_scalar(value, "value")
    r = float(round_to(x, f).item())
    e_all = 2**f.exponent_bits - 1
    sign = 1 if math.copysign(1.0, r) < 0 else 0
    if math.isnan(r):
        kind, sign, exponent = "nan", 0, e_all
        mantissa = 2**f.mantissa_bits - 1 if f.finite_only else 1 << (f.mantissa_bits - 1)
    elif math.isinf(r):
        kind, exponent, mantissa = "inf", e_all, 0
    elif r == 0:
        kind, exponent, mantissa = "zero", 0, 0
    elif abs(r) < f.min_normal:
        kind, exponent, mantissa = "subnormal", 0, int(abs(r) / f.min_subnormal)
    else:
        e = math.frexp(abs(r))[1] - 1
        kind, exponent = "normal", e + f.bias
        mantissa = int((math.ldexp(abs(r), -e) - 1.0) * 2**f.mantissa_bits)
    if math.isnan(x):
        error = math.nan
    elif r == x and not (isinstance(value, Integral) and math.isinf(x)):
        error = 0.0
    elif math.isinf(x) or math.isinf(r) or math.isnan(r):
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
        bits=f"{sign}{exponent:0{f.exponent_bits}b}{mantissa:0{f.mantissa_bits}b}",
        kind=kind,
        ulp=format_ulp(r, f),
        error=error,
        exponent_width=f.exponent_bits,
    )


def from_bits(bits, fmt) -> float:
    """The value of a bit pattern of ``fmt`` (an int, or a 0/1 string, spaces allowed), from the fields alone."""
    f = get_format(fmt)
    pattern = int(bits.replace(" ", "").replace("_", ""), 2) if isinstance(bits, str) else int(bits)
    sign = -1.0 if pattern >> (f.total_bits - 1) else 1.0
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
    return [
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
        for f in format_list(fmts)
    ]


FORMAT_COLOURS = {
    "fp32": "#1f77b4",
    "tf32": "#17becf",
    "bf16": "#ff7f0e",
    "fp16": "#d62728",
    "fp8_e4m3": "#9467bd",
    "fp8_e5m2": "#8c564b",
}


def plot_range_precision(fig=None, fmts=None):
    """Notebook 01's chart: ulp against magnitude (left) and relative spacing ``ulp/|x|`` (right), log-log,
    one staircase per format with its min subnormal (o), min normal (^) and max (s)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    fs = format_list(fmts)
    unknown = [f.name for f in fs if f.name not in FORMATS]
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
    for f in fs:
        colour = FORMAT_COLOURS[f.name]
        xs = [f.min_subnormal, *(math.ldexp(1.0, e) for e in range(f.emin, f.emax + 1)), f.max]
        ys = [f.min_subnormal, *(math.ldexp(1.0, e - f.mantissa_bits) for e in range(f.emin, f.emax + 1))]
        ys.append(ys[-1])
        ax_ulp.step(xs, ys, where="post", color=colour, label=f.label, lw=1.4)
        # relative spacing: 1 down to eps through the subnormals, then between eps/2 and eps in every binade
        edges, rel = (f.min_subnormal, f.min_normal, f.max), (1.0, f.eps, f.eps)
        ax_rel.plot(edges, rel, color=colour, label=f.label, lw=1.4)
        ax_rel.plot([f.min_normal, f.max], [f.eps / 2, f.eps / 2], color=colour, lw=0.6, alpha=0.6)
        ulp_marks = (f.min_subnormal, f.min_subnormal * 2**f.mantissa_bits, ys[-1])
        for ax, yv in ((ax_ulp, ulp_marks), (ax_rel, rel)):
            for x, y, marker, ms in zip(edges, yv, "o^s", (5, 6, 5), strict=True):
                ax.plot([x], [y], marker, color=colour, ms=ms)
    for ax in (ax_ulp, ax_rel):
        ax.set_xscale("log", base=10)
        ax.set_yscale("log", base=10)
        for axis in (ax.xaxis, ax.yaxis):  # plain "1e-8" labels and no minor ticks: quick to draw
            axis.set_major_locator(LogLocator(base=10, numticks=8))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"1e{round(math.log10(v))}" if v > 0 else ""))
            axis.set_minor_locator(NullLocator())
        ax.set_xlabel("magnitude |x|")
        ax.grid(True, which="major", alpha=0.3)
    ax_ulp.set_ylabel("ulp: gap to the next value")
    ax_ulp.set_title("Range: where each format starts (o, ^) and ends (s)")
    ax_rel.set_ylabel("relative spacing ulp / |x|")
    ax_rel.set_title("Precision: between eps/2 and eps in the normal range")
    ax_ulp.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
