"""Exercises of notebook 08 (FP8 and block scaling): the tensorwise scale and saturating cast (1, against
:func:`amp_lab.fp8.tensorwise_scale` and :func:`amp_lab.fp8.quantize`), the delayed-scaling rule (2, beside
:class:`amp_lab.fp8.DelayedScaling`), an MX block size for FP4 (3, :func:`amp_lab.mx.mx_quantize`) and the
margin that absorbs a spike (4).  Expected values come from the package; common wrong answers are recognised
by running the wrong rule beside the learner's."""

from __future__ import annotations

import functools
import math
from numbers import Integral, Real

import torch

from .. import fp8, mx
from .._checks import ArgumentTypeError, bounded_list, check_float, check_int
from ..check_base import CheckResult, finish, is_placeholder
from . import Mistake, combine, exercise

__all__ = ["ex1", "ex2", "ex3", "ex4", "E4M3", "DELAYED_SCHEDULES", "BLOCK_SIZES", "MAX_MARGIN"]

E4M3 = "fp8_e4m3"  # the forward format every exercise uses
MAX_TENSOR_ELEMENTS = 1_000_000  # the activations exercise 3 quantizes (the notebook's are far fewer)
MAX_AMAXES = 1_000  # steps of the amax sequence exercise 4 replays
MAX_MARGIN = 30  # margins exercise 4 tries (2**30 is far beyond any useful headroom)
BLOCK_SIZES = (8, 16, 32, 64, 128, 256)  # the block sizes exercise 3 chooses among


def _todo(text: str, show: bool = False) -> CheckResult:
    """Not attempted yet: the answer is still the skeleton."""
    return finish("unanswered", text, show=show, details={"answered": False})


def _no(text: str, hint: str, show: bool = False) -> CheckResult:
    """A wrong answer and the hint that points at the idea."""
    return finish("wrong", text, [f"hint: {hint}"], show=show)


_NOT_WRITTEN = (
    "is not written yet (it returns None or raises NotImplementedError): fill it in and run this cell again."
)


E4M3_MAX = float(torch.finfo(torch.float8_e4m3fn).max)
E5M2_MAX = float(torch.finfo(torch.float8_e5m2).max)


class _Todo(Exception):
    """The learner's function is still the skeleton (returns None, or raises NotImplementedError)."""


def _call(fn, *args):
    """``fn(*args)``; raises _Todo for a skeleton; any other error comes back as ("error", text)."""
    try:
        out = fn(*args)
    except NotImplementedError as e:
        raise _Todo from e
    except Exception as e:  # the learner's code: reported in the feedback, never raised
        return "error", f"{type(e).__name__}: {e}"
    if is_placeholder(out):
        raise _Todo
    return "ok", out


def _as_float32(value) -> torch.Tensor | None:
    """A scale the learner returned (a number or a one-element tensor) as a float32 scalar, else None."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or not (
            value.dtype.is_floating_point or value.dtype in (torch.int32, torch.int64)
        ):
            return None
        return value.detach().reshape(()).to("cpu", torch.float32)
    if isinstance(value, Real) and not isinstance(value, bool):
        try:
            return torch.tensor(float(value), dtype=torch.float32)
        except OverflowError:
            return torch.tensor(math.inf, dtype=torch.float32)
    return None


def _same32(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(torch.equal(a, b) or (torch.isnan(a) & torch.isnan(b)).item())


def _close32(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Within one float32 ulp of b (a scale computed in float32 rather than float64, then rounded)."""
    if not (torch.isfinite(a) and torch.isfinite(b)):
        return _same32(a, b)
    return abs(a.item() - b.item()) <= torch.finfo(torch.float32).eps * abs(b.item())


def _whole(x) -> int | None:
    """``x`` as an int if it is a whole real number (3 or 3.0, not True), else None."""
    if isinstance(x, bool) or not isinstance(x, Real):
        return None
    return int(x) if isinstance(x, Integral) or (math.isfinite(x) and float(x).is_integer()) else None


def _show(x) -> str:
    if isinstance(x, torch.Tensor):
        x = x.item() if x.numel() == 1 else x
    return f"{x:.7g}" if isinstance(x, float) else repr(x)


# --- Exercise 1: the tensorwise scale and the saturating cast ---


@functools.lru_cache(maxsize=1)
def _ex1_tensors() -> tuple[tuple[str, torch.Tensor], ...]:
    """The tensors exercise 1 tries, seeded: ordinary values, an outlier, a negative extreme, tiny ones, zeros."""
    g = torch.Generator().manual_seed(8)
    normal = torch.randn(64, 32, generator=g)
    outlier = torch.randn(64, 32, generator=g)
    outlier[3, 5] = 3000.0
    negative = 0.1 * torch.randn(64, 32, generator=g)
    negative[7, 1] = -40.0  # the largest magnitude is negative; the largest value is far smaller
    tiny = 1e-5 * torch.randn(16, 16, generator=g)
    zeros = torch.zeros(16, 16)
    return (
        ("normal values", normal),
        ("one outlier of 3000", outlier),
        ("a negative extreme of -40", negative),
        ("tiny values (about 1e-5)", tiny),
        ("an all-zero tensor", zeros),
    )


NEGATIVE_CASE = "a negative extreme of -40"
ZERO_CASE = "an all-zero tensor"

_INVERTED_HINT = "the scale maps amax onto the format's largest value: amax * scale must land at E4M3's max"
_NO_CLAMP_HINT = "an all-zero tensor has amax 0: clamp amax away from zero before dividing"
_EPS_HINT = "clamp amax at torchao's tiny floor (fp8.EPS), not at another small number"
_NO_ABS_HINT = "amax is the largest *magnitude*: take the absolute values before the max"
_E5M2_HINT = "forward tensors go to E4M3: use E4M3's largest value, not E5M2's"
_DIVIDE_HINT = "quantizing multiplies by the scale (dequantizing divides by it)"
_NO_CAST_HINT = "the result is an FP8 tensor: cast the scaled values to torch.float8_e4m3fn"


def _scale_part(scale_fn, show_name: str = "my_tensorwise_scale") -> CheckResult:
    if is_placeholder(scale_fn):
        return _todo(f"no answer yet: write `{show_name}` above and run this cell again.")
    if not callable(scale_fn):
        return finish("wrong", f"`{show_name}` is a {type(scale_fn).__name__}, not a function.", show=False)
    got, want, errors = {}, {}, {}
    for name, x in _ex1_tensors():
        want[name] = fp8.tensorwise_scale(x, E4M3).detach().reshape(()).to("cpu", torch.float32)
        try:
            kind, out = _call(scale_fn, x.clone())
        except _Todo:
            return _todo(f"`{show_name}` {_NOT_WRITTEN}")
        if kind == "error":
            errors[name] = out
            continue
        value = _as_float32(out)
        if value is None:
            return _no(
                f"`{show_name}` returned {type(out).__name__} {_show(out)[:60]} for {name}; "
                "a scale is one number (a float or a one-element tensor).",
                "return E4M3's largest value divided by the tensor's amax",
                False,
            )
        got[name] = value
    if (
        ZERO_CASE in errors
        and "ZeroDivision" in errors[ZERO_CASE]
        or (ZERO_CASE in got and not torch.isfinite(got[ZERO_CASE]))
    ):
        what = errors.get(ZERO_CASE) or f"returned {_show(got[ZERO_CASE])}"
        return _no(f"`{show_name}` on {ZERO_CASE}: {what}.", _NO_CLAMP_HINT, False)
    if errors:
        name, text = next(iter(errors.items()))
        return _no(
            f"`{show_name}` raised on {name}: {text}",
            "the scale is E4M3's largest value over amax, amax clamped away from zero",
            False,
        )
    wrong = [n for n in got if not (_same32(got[n], want[n]) or _close32(got[n], want[n]))]
    if not wrong:
        exact = all(_same32(got[n], want[n]) for n in got)
        how = "bit for bit" if exact else "within one float32 ulp (a scale computed in float32, not float64)"
        return finish(
            "exact" if exact else "close",
            f"`{show_name}` equals fp8.tensorwise_scale (torchao's tensor_to_scale) on all {len(got)} "
            f"tensors, {how}.",
            show=False,
        )
    nonzero = [n for n in got if n != ZERO_CASE]
    notes = [f"on {n}: yours {_show(got[n])}, fp8.tensorwise_scale {_show(want[n])}" for n in wrong[:2]]

    def all_near(pred) -> bool:
        return all(math.isclose(got[n].item(), pred(n), rel_tol=1e-5) for n in nonzero)

    amax = {n: x.abs().max().item() for n, x in _ex1_tensors()}
    largest = {n: x.max().item() for n, x in _ex1_tensors()}
    if all_near(lambda n: amax[n] / E4M3_MAX):
        hint = _INVERTED_HINT
    elif all_near(lambda n: E5M2_MAX / amax[n]):
        hint = _E5M2_HINT
    elif NEGATIVE_CASE in wrong and math.isclose(
        got[NEGATIVE_CASE].item(), E4M3_MAX / largest[NEGATIVE_CASE], rel_tol=1e-5
    ):
        hint = _NO_ABS_HINT
    elif wrong == [ZERO_CASE]:
        hint = _EPS_HINT
    else:
        hint = "the scale is E4M3's largest value divided by amax, the tensor's largest magnitude"
    return finish(
        "wrong",
        f"`{show_name}` differs from fp8.tensorwise_scale on {len(wrong)} of {len(got)} tensors.",
        [*notes, f"hint: {hint}"],
        show=False,
    )


def _quantize_cases():
    cases = []
    for name, x in _ex1_tensors():
        if name != ZERO_CASE:
            cases.append((f"{name}, at its tensorwise scale", x, fp8.tensorwise_scale(x, E4M3)))
    normal = _ex1_tensors()[0][1]
    cases.append(
        (
            "normal values at 8 times their scale (many saturate)",
            normal,
            8 * fp8.tensorwise_scale(normal, E4M3),
        )
    )
    with_nan = normal.clone()
    with_nan[0, 0] = math.nan
    cases.append(("a tensor holding a NaN, scale 1", with_nan, torch.tensor(1.0)))
    cases.append((ZERO_CASE, torch.zeros(16, 16), fp8.tensorwise_scale(torch.zeros(16, 16), E4M3)))
    return cases


def _quantize_part(quantize_fn, show_name: str = "my_quantize") -> CheckResult:
    if is_placeholder(quantize_fn):
        return _todo(f"no answer yet: write `{show_name}` above and run this cell again.")
    if not callable(quantize_fn):
        return finish(
            "wrong", f"`{show_name}` is a {type(quantize_fn).__name__}, not a function.", show=False
        )
    cases = _quantize_cases()
    for name, x, scale in cases:
        want = fp8.quantize(x, E4M3, scale)
        try:
            kind, out = _call(quantize_fn, x.clone(), scale.clone())
        except _Todo:
            return _todo(f"`{show_name}` {_NOT_WRITTEN}")
        if kind == "error":
            return _no(
                f"`{show_name}` raised on {name}: {out}",
                "multiply x by the scale, then cast to torch.float8_e4m3fn",
                False,
            )
        if not isinstance(out, torch.Tensor) or out.shape != x.shape:
            what = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            return _no(
                f"`{show_name}` returned {what} for {name}; want a tensor of x's shape {tuple(x.shape)}.",
                _NO_CAST_HINT,
                False,
            )
        values = out.detach().to("cpu").float()
        if out.dtype != want.dtype:
            if out.dtype in (torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz):
                hint = _E5M2_HINT
            elif torch.equal(values.nan_to_num(), want.float().nan_to_num()):
                hint = _NO_CAST_HINT
            else:
                hint = _NO_CAST_HINT if out.dtype.is_floating_point and out.dtype.itemsize > 1 else _E5M2_HINT
            return _no(
                f"`{show_name}` returned a {str(out.dtype).removeprefix('torch.')} tensor for "
                f"{name}; fp8.quantize returns {str(want.dtype).removeprefix('torch.')}.",
                hint,
                False,
            )
        if not torch.equal(values.nan_to_num(nan=1234.5), want.float().nan_to_num(nan=1234.5)):
            bad = int((values.nan_to_num(nan=1234.5) != want.float().nan_to_num(nan=1234.5)).sum())
            divided = fp8.quantize(x, E4M3, 1.0 / scale.double()).float()
            hint = (
                _DIVIDE_HINT
                if torch.equal(values.nan_to_num(nan=1234.5), divided.nan_to_num(nan=1234.5))
                else "multiply x by the scale (in float32), then cast: torch's cast to E4M3 saturates at its max"
            )
            return _no(
                f"`{show_name}` differs from fp8.quantize on {name}: {bad} of {x.numel()} elements differ.",
                hint,
                False,
            )
    return finish(
        "exact",
        f"`{show_name}` equals fp8.quantize bit for bit on all {len(cases)} cases (an outlier, "
        "saturation beyond E4M3's max, a NaN, an all-zero tensor).",
        show=False,
    )


@exercise(
    1,
    "The tensorwise scale and the cast",
    mistakes=[
        Mistake("amax over max", _INVERTED_HINT),
        Mistake("no clamp for an all-zero tensor", _NO_CLAMP_HINT),
        Mistake("another floor for amax", _EPS_HINT),
        Mistake("amax without abs", _NO_ABS_HINT),
        Mistake("E5M2's max for E4M3", _E5M2_HINT),
        Mistake("dividing by the scale", _DIVIDE_HINT),
        Mistake("no cast to FP8", _NO_CAST_HINT),
    ],
)
def ex1(scale_fn, quantize_fn, *, show: bool = True) -> CheckResult:
    """``my_tensorwise_scale(x)`` against fp8.tensorwise_scale on five tensors (an outlier, a negative
    extreme, tiny values, all zeros) and ``my_quantize(x, scale)`` against fp8.quantize (saturation, NaN)."""
    return combine([_scale_part(scale_fn), _quantize_part(quantize_fn)], show=show)


# --- Exercise 2: MyDelayedScaling ---

# (what it tests, history_len, margin, the amax of each step)
DELAYED_SCHEDULES = (
    ("a growing amax", 4, 0, (1.0, 2.0, 3.0, 5.0, 8.0, 13.0)),
    ("a spike that leaves the history", 3, 0, (2.0, 2.0, 200.0, 2.0, 2.0, 2.0, 2.0)),
    ("a margin of 2", 4, 2, (3.0, 5.0, 7.0, 6.0, 1.0)),
    ("all-zero tensors (amax 0)", 2, 0, (0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 1.0)),
    ("a NaN amax", 3, 0, (2.0, 4.0, 1.0, math.nan, 1.0, 1.0, 1.0, 1.0)),
)

_NEWEST_HINT = "the scale comes from the largest amax of the last history_len steps, not the newest one alone"
_MARGIN_HINT = "divide by 2**margin as well: the margin leaves headroom for an amax that grows"
_UNBOUNDED_HINT = "keep only the last history_len amaxes: an old spike must leave the history"
_NAN_SCALE_HINT = "a NaN amax must never become the scale: while the history holds a NaN, keep the scale"
_NAN_IGNORED_HINT = "a NaN in the history makes the reduced amax NaN: keep the scale frozen, don't skip it"
_ZERO_HINT = "an all-zero tensor (amax 0) gives no scale: when the reduced amax is not > 0, keep the scale"
_START_HINT = "before any amax is known the scale is 1.0"


class _Wrong:
    """The right rule with one mistake switched on (the mistakes exercise 2 recognises)."""

    mistake = ""

    def __init__(self, history_len, margin):
        self.history_len, self.margin, self.history, self.scale = history_len, margin, [], 1.0

    def reduce(self):
        t = torch.tensor(self.history, dtype=torch.float64)
        if self.mistake == "newest":
            return t[-1].item()
        if self.mistake == "nan ignored":
            finite = t[~torch.isnan(t)]
            return finite.max().item() if finite.numel() else math.nan
        return t.max().item()  # NaN if any entry is NaN

    def update(self, amax):
        self.history.append(float(amax))
        if self.mistake != "unbounded":
            self.history = self.history[-self.history_len :]
        r = self.reduce()
        margin = 0 if self.mistake == "no margin" else self.margin
        if self.mistake == "nan scale" and math.isnan(r):
            self.scale = math.nan
        elif self.mistake == "zero" and r == 0:
            self.scale = math.inf
        elif math.isfinite(r) and r > 0:
            self.scale = E4M3_MAX / r / 2.0**margin


def _wrong(kind: str):
    return type(f"_Wrong_{kind.replace(' ', '_')}", (_Wrong,), {"mistake": kind})


_KNOWN_DELAYED_MISTAKES = (
    ("newest", _NEWEST_HINT),
    ("no margin", _MARGIN_HINT),
    ("unbounded", _UNBOUNDED_HINT),
    ("nan scale", _NAN_SCALE_HINT),
    ("nan ignored", _NAN_IGNORED_HINT),
    ("zero", _ZERO_HINT),
)


def _trajectory(cls) -> tuple:
    """Per schedule, the scale (as float32) before each update and after the last; or ("todo",) / ("error", ...)."""
    out = []
    for what, history_len, margin, amaxes in DELAYED_SCHEDULES:
        try:
            obj = cls(history_len, margin)
        except NotImplementedError:
            return ("todo",)
        except Exception as e:  # the learner's code: reported, never raised
            return ("error", what, 0, "the constructor", f"{type(e).__name__}: {e}")
        scales = []
        for step in range(len(amaxes) + 1):
            try:
                value = obj.scale
            except NotImplementedError:
                return ("todo",)
            except AttributeError as e:  # the skeleton's __init__ sets nothing yet
                if step == 0:
                    return ("todo",)
                return ("error", what, step, "reading .scale", f"{type(e).__name__}: {e}")
            except Exception as e:
                return ("error", what, step, "reading .scale", f"{type(e).__name__}: {e}")
            if is_placeholder(value):
                return ("todo",) if step == 0 else ("error", what, step, "reading .scale", "it is None")
            value32 = _as_float32(value)
            if value32 is None:
                return (
                    "error",
                    what,
                    step,
                    "reading .scale",
                    f"it is a {type(value).__name__}, not a number",
                )
            scales.append(value32.item())
            if step == len(amaxes):
                break
            try:
                obj.update(amaxes[step])
            except NotImplementedError:
                return ("todo",)
            except Exception as e:
                return ("error", what, step, f"update({amaxes[step]})", f"{type(e).__name__}: {e}")
        out.append(tuple(scales))
    return tuple(out)


def _same(p: float, q: float) -> bool:
    return p == q or (math.isnan(p) and math.isnan(q))


def _same_trajectory(a, b) -> bool:
    if len(a) != len(b) or (a and isinstance(a[0], str)) or (b and isinstance(b[0], str)):
        return a == b
    return all(len(x) == len(y) and all(map(_same, x, y)) for x, y in zip(a, b, strict=True))


def _first_difference(got: tuple, want: tuple):
    """(schedule, yours, the package's, first differing step) of the first schedule that differs."""
    for sched, mine, theirs in zip(DELAYED_SCHEDULES, got, want, strict=True):
        first = next((i for i, (p, q) in enumerate(zip(mine, theirs, strict=True)) if not _same(p, q)), None)
        if first is not None:
            return sched, mine, theirs, first
    raise AssertionError("the trajectories are the same")


@functools.lru_cache(maxsize=16)
def _known(kind: str) -> tuple:
    right = functools.partial(fp8.DelayedScaling, E4M3)  # (history_len, margin): the oracle
    return _trajectory(right if kind == "right" else _wrong(kind))


@exercise(
    2,
    "Write the delayed-scaling rule",
    mistakes=[
        Mistake("using the newest amax only", _NEWEST_HINT),
        Mistake("forgetting the margin", _MARGIN_HINT),
        Mistake("a history that never forgets", _UNBOUNDED_HINT),
        Mistake("a NaN scale", _NAN_SCALE_HINT),
        Mistake("skipping the NaN", _NAN_IGNORED_HINT),
        Mistake("an inf scale from an all-zero tensor", _ZERO_HINT),
        Mistake("starting from another scale", _START_HINT),
    ],
)
def ex2(answer, *, show: bool = True) -> CheckResult:
    """``MyDelayedScaling(history_len, margin)`` beside fp8.DelayedScaling (E4M3, algo "max") on five amax
    sequences: ``.scale`` is read before every ``update(amax)`` and after the last, and compared in float32."""
    if is_placeholder(answer):
        return _todo("no answer yet: write the class `MyDelayedScaling` above and run this cell again.", show)
    if not callable(answer):
        return finish(
            "wrong",
            f"`MyDelayedScaling` is a {type(answer).__name__}, not a class: pass the class itself.",
            show=show,
        )
    got, want = _trajectory(answer), _known("right")
    if got == ("todo",):
        return _todo(
            "MyDelayedScaling is not written yet (a method returns None or raises "
            "NotImplementedError): fill in the TODOs and run this cell again.",
            show,
        )
    steps = sum(len(s) for s in want)
    if _same_trajectory(got, want):
        return finish(
            "exact",
            f"MyDelayedScaling matches fp8.DelayedScaling on all {len(DELAYED_SCHEDULES)} sequences "
            f"({steps} scales read): the same float32 scale before every update and after the last.",
            show=show,
        )
    if got and got[0] == "error":
        _, what, step, call, text = got
        hint = (
            _ZERO_HINT
            if "ZeroDivision" in text
            else "read the error: update(amax) appends, reduces, rescales"
        )
        return _no(f'MyDelayedScaling raised on "{what}" at step {step}, {call}: {text}', hint, show)
    (what, history_len, margin, amaxes), mine, theirs, first = _first_difference(got, want)
    hint = next((h for kind, h in _KNOWN_DELAYED_MISTAKES if _same_trajectory(got, _known(kind))), None)
    if hint is None:
        if first == 0:
            hint = _START_HINT
        elif what == "a NaN amax":
            hint = _NAN_SCALE_HINT if math.isnan(mine[first]) else _NAN_IGNORED_HINT
        elif what.startswith("all-zero"):
            hint = _ZERO_HINT
        elif what == "a margin of 2":
            hint = _MARGIN_HINT
        elif what == "a spike that leaves the history":
            hint = _UNBOUNDED_HINT
        else:
            hint = _NEWEST_HINT
    seen = ", ".join(_show(a) for a in amaxes[:first])
    return finish(
        "wrong",
        f'MyDelayedScaling differs from fp8.DelayedScaling on "{what}" (history_len={history_len}, '
        f"margin={margin}) at step {first}: yours {_show(mine[first])}, fp8.DelayedScaling "
        f"{_show(theirs[first])}.",
        [f"amaxes given so far: {seen or '(none yet)'}", f"hint: {hint}"],
        show=show,
        details={"schedule": what, "step": first},
    )


# --- Exercise 3: a block size for FP4 that meets an error target ---


def _check_tensor(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        raise ArgumentTypeError(
            f"{name} must be a floating-point tensor (the notebook's activations), got {type(x).__name__}"
        )
    if x.dim() < 1 or x.numel() == 0 or x.numel() > MAX_TENSOR_ELEMENTS:
        raise ValueError(f"{name} must hold 1 to {MAX_TENSOR_ELEMENTS} elements, got shape {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite (activations to quantize), but it holds inf or NaN")
    return x.detach().to("cpu", torch.float32).contiguous()


def _lost_to_zero(x: torch.Tensor, xq: torch.Tensor) -> float:
    """The share of ``x``'s non-zero elements that ``xq`` (its quantized copy) holds as exactly zero."""
    nonzero = x != 0
    count = int(nonzero.sum())
    return int(((xq == 0) & nonzero).sum()) / count if count else 0.0


def _block_losses(x: torch.Tensor, elem: str) -> dict[int, float]:
    """{block size: _lost_to_zero(x, mx.mx_quantize(x, elem, block size))} for the sizes dividing x's last dim."""
    return {b: _lost_to_zero(x, mx.mx_quantize(x, elem, b)) for b in BLOCK_SIZES if x.shape[-1] % b == 0}


_MISSES_HINT = "that block size flushes more than the target to zero: smaller blocks follow the small values"
_TOO_SMALL_HINT = "that block size meets the target, but a larger one does too: fewer blocks, fewer scales"
_E4M3_HINT = "the question is about FP4 E2M1: E4M3's much wider window meets the target at any block size"
_NOT_A_SIZE_HINT = "give a block size, one of the sizes in the table above (a number of elements per block)"


@exercise(
    3,
    "A block size for FP4",
    mistakes=[
        Mistake("a block size that misses the target", _MISSES_HINT),
        Mistake("a smaller block size than needed", _TOO_SMALL_HINT),
        Mistake("answering for E4M3", _E4M3_HINT),
        Mistake("not a block size", _NOT_A_SIZE_HINT),
    ],
)
def ex3(answer, acts, target, *, show: bool = True) -> CheckResult:
    """The largest block size (of BLOCK_SIZES dividing the last dimension) at which FP4 E2M1 MX quantization
    of ``acts`` flushes at most the share ``target`` of its non-zero elements to zero."""
    x = _check_tensor("acts", acts)
    target = check_float("target", target, gt=0, lt=1)
    fp4 = _block_losses(x, "fp4_e2m1")
    if not fp4:
        raise ValueError(f"acts' last dimension ({x.shape[-1]}) must be divisible by one of {BLOCK_SIZES}")
    meeting = [b for b, e in fp4.items() if e <= target]
    if not meeting:
        raise ValueError(
            f"target={target} is below FP4's share lost to zero at every block size "
            f"({min(fp4.values()):.3g} at best): "
            "choose a larger target"
        )
    best = max(meeting)
    if is_placeholder(answer):
        return _todo("no answer yet: set `answer` to a block size and run this cell again.", show)
    if _whole(answer) not in fp4:
        sizes = ", ".join(str(b) for b in fp4)
        return _no(
            f"`answer` = {answer!r:.40} is not one of the block sizes here: {sizes}.", _NOT_A_SIZE_HINT, show
        )
    answer = _whole(answer)
    if answer == best:
        larger = [b for b in fp4 if b > best]
        beyond = f"; the next larger, {min(larger)}, does not" if larger else " (the largest block size here)"
        return finish("exact", f"block size {best}: FP4 E2M1 meets the target on acts{beyond}.", show=show)
    if fp4[answer] > target:
        e4m3 = _block_losses(x, "fp8_e4m3")
        e4m3_best = max((b for b, e in e4m3.items() if e <= target), default=None)
        hint = _E4M3_HINT if answer == e4m3_best else _MISSES_HINT
        return _no(
            f"block size {answer}: FP4 E2M1 flushes {fp4[answer]:.2%} of acts' non-zero values to "
            f"zero, above the target {target:.2%}.",
            hint,
            show,
        )
    return _no(
        f"block size {answer} meets the target (FP4 E2M1 flushes {fp4[answer]:.2%} to zero), but it "
        "is not the largest that does.",
        _TOO_SMALL_HINT,
        show,
    )


# --- Exercise 4: the margin that absorbs a spike ---


def _check_amaxes(amaxes) -> tuple[float, ...]:
    if isinstance(amaxes, torch.Tensor):
        amaxes = amaxes.detach().cpu().flatten().tolist()
    amaxes = bounded_list("amaxes", amaxes, MAX_AMAXES, "a list of positive numbers (one amax per step)")
    if not amaxes:
        raise ValueError("amaxes must hold at least one step")
    return tuple(check_float("amaxes", a, gt=0) for a in amaxes)


def _saturated_steps(amaxes, history_len: int, margin: int) -> list[int]:
    """The steps at which delayed scaling (fp8.DelayedScaling, E4M3) saturates: the step's amax times the
    scale in use rounds past E4M3's max (fp8.saturation_count), so quantize clips it."""
    rule = fp8.DelayedScaling(E4M3, history_len=history_len, margin=margin)
    out = []
    for step, amax in enumerate(amaxes):
        if fp8.saturation_count(torch.tensor([amax], dtype=torch.float32), E4M3, rule.scale) > 0:
            out.append(step)
        rule.update(amax)
    return out


_STILL_HINT = "with that margin the spike still lands beyond E4M3's max: the history's amax times 2**margin must reach it"
_MORE_HINT = "that margin saturates nothing, but a smaller one does not either: each binade of margin costs a binade of range at the bottom"
_POWER_HINT = "the margin is an exponent: the scale is divided by 2**margin, so give the margin itself"


@exercise(
    4,
    "A margin for a spike",
    mistakes=[
        Mistake("a margin that still saturates", _STILL_HINT),
        Mistake("more margin than needed", _MORE_HINT),
        Mistake("2**margin for the margin", _POWER_HINT),
    ],
)
def ex4(answer, amaxes, history_len, *, show: bool = True) -> CheckResult:
    """The smallest margin (an integer 0..MAX_MARGIN) for which delayed scaling with ``history_len`` saturates
    at no step of ``amaxes``."""
    amaxes = _check_amaxes(amaxes)
    history_len = check_int("history_len", history_len, minimum=1, maximum=1024)
    best = next((m for m in range(MAX_MARGIN + 1) if not _saturated_steps(amaxes, history_len, m)), None)
    if best is None:
        raise ValueError(
            f"no margin up to {MAX_MARGIN} avoids saturation on these amaxes: choose a smaller spike"
        )
    if is_placeholder(answer):
        return _todo("no answer yet: set `answer` to a margin (an integer) and run this cell again.", show)
    if _whole(answer) is None or not 0 <= _whole(answer) <= 2**MAX_MARGIN:
        return _no(
            f"`answer` = {answer!r:.40} is not a margin: a whole number of binades, 0 or more.",
            "the margin m divides the scale by 2**m",
            show,
        )
    answer = int(answer)
    if answer == best:
        return finish(
            "exact",
            f"margin {best}: delayed scaling (history {history_len}) saturates at no step; margin "
            f"{best - 1} saturates at step(s) {_saturated_steps(amaxes, history_len, best - 1)[:5]}."
            if best > 0
            else "margin 0: delayed scaling saturates at no step.",
            show=show,
        )
    if best >= 2 and answer == 2**best:
        return _no(f"`answer` = {answer} = 2**{best}.", _POWER_HINT, show)
    if answer > MAX_MARGIN:
        return _no(
            f"`answer` = {answer} is far beyond any useful margin (at most {MAX_MARGIN} here).",
            _MORE_HINT,
            show,
        )
    still = _saturated_steps(amaxes, history_len, answer)
    if still:
        return _no(
            f"margin {answer}: delayed scaling still saturates at step(s) {still[:5]}.", _STILL_HINT, show
        )
    return _no(f"margin {answer} saturates nothing, but it is not the smallest that does.", _MORE_HINT, show)
