"""Exercises of notebook 08 (FP8 and block scaling): expected values come from :mod:`amp_lab.fp8` and
:mod:`amp_lab.mx`; a common wrong rule is recognised by running it beside the learner's."""

from __future__ import annotations

import contextlib
import functools
import math
from numbers import Real

import torch

from .. import fp8, mx
from ..check_base import CheckResult, finish, is_placeholder, no_answer
from ..dtypes import dtype_name
from . import Mistake, combine, exercise, finite_float, wrong

__all__ = ["ex1", "ex2", "ex3", "ex4", "E4M3", "DELAYED_SCHEDULES", "FP4", "MAX_MARGIN"]

E4M3 = "fp8_e4m3"  # the forward format every exercise uses
MAX_MARGIN = 30  # margins exercise 4 tries (2**30 is far beyond any useful headroom)


def _todo(name: str, show: bool = False) -> CheckResult:
    """Not attempted yet: the learner's code is still the skeleton."""
    text = f"`{name}` is not written yet (it returns None or raises NotImplementedError): fill it in and "
    return finish("unanswered", text + "run this cell again.", show=show, details={"answered": False})


class _Raised(str):
    """What the learner's function raised, as text."""


def _outputs(fn, name: str, cases: list[tuple], show: bool = False) -> CheckResult | list:
    """``fn`` called on clones of each case's tensors: its outputs (a :class:`_Raised` for a call that
    raised), or the verdict when ``fn`` is no function yet or still the skeleton."""
    if is_placeholder(fn):
        return no_answer(name, show, "your function")
    if not callable(fn):
        return finish("wrong", f"`{name}` is a {type(fn).__name__}, not a function.", show=show)
    outs = []
    for args in cases:
        try:
            out = fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
        except NotImplementedError:
            out = None
        except Exception as e:  # the learner's code: reported in the feedback, never raised
            out = _Raised(f"{type(e).__name__}: {e}")
        if is_placeholder(out):
            return _todo(name, show)
        outs.append(out)
    return outs


def _as_float32(value) -> torch.Tensor | None:
    """A scale the learner returned (a number or a one-element tensor) as a float32 scalar, else None."""
    if isinstance(value, bool) or not isinstance(value, (Real, torch.Tensor)):
        return None
    try:
        t = torch.as_tensor(value).detach().to("cpu", torch.float32)
    except (OverflowError, RuntimeError):  # an integer beyond any float
        return torch.tensor(math.inf)
    return t.reshape(()) if t.numel() == 1 else None


def _show(x) -> str:
    if isinstance(x, torch.Tensor):
        x = x.item() if x.numel() == 1 else x
    return f"{x:.7g}" if isinstance(x, float) else repr(x)


# --- Exercise 1: the tensorwise scale and the saturating cast ---

ZERO_CASE = "an all-zero tensor"
# Exercise 1's common wrong answers: name -> hint.
_EX1 = {
    "amax over max": "the scale maps amax onto the format's largest value: amax * scale must land at E4M3's max",
    "no clamp for an all-zero tensor": "an all-zero tensor has amax 0: clamp amax away from zero before dividing",
    "another floor for amax": "clamp amax at torchao's tiny floor (fp8.EPS), not at another small number",
    "amax without abs": "amax is the largest *magnitude*: take the absolute values before the max",
    "E5M2's max for E4M3": "forward tensors go to E4M3: use E4M3's largest value, not E5M2's",
    "dividing by the scale": "quantizing multiplies by the scale (dequantizing divides by it)",
    "no cast to FP8": "the result is an FP8 tensor: cast the scaled values to torch.float8_e4m3fn",
}
_E4M3_MAX, _E5M2_MAX = (float(torch.finfo(d).max) for d in (torch.float8_e4m3fn, torch.float8_e5m2))
# A wrong scale rule a learner writes: recognised when it gives the learner's scales.
_SCALE_SLIPS = {
    "amax over max": lambda x: x.abs().max() / _E4M3_MAX,
    "E5M2's max for E4M3": lambda x: _E5M2_MAX / x.abs().max(),
    "amax without abs": lambda x: _E4M3_MAX / x.max(),
}
_SCALE_HINT = "the scale is E4M3's largest value divided by amax, the tensor's largest magnitude"


def _ex1_tensors() -> dict[str, torch.Tensor]:
    """Exercise 1's seeded tensors: ordinary values, an outlier, a negative extreme, tiny ones, zeros."""
    g = torch.Generator().manual_seed(8)
    normal, outlier = torch.randn(64, 32, generator=g), torch.randn(64, 32, generator=g)
    outlier[3, 5] = 3000.0
    negative = 0.1 * torch.randn(64, 32, generator=g)
    negative[7, 1] = -40.0  # the largest magnitude is negative; the largest value is far smaller
    tiny = 1e-5 * torch.randn(16, 16, generator=g)
    cases = {"normal values": normal, "one outlier of 3000": outlier, "a negative extreme of -40": negative}
    return cases | {"tiny values (about 1e-5)": tiny, ZERO_CASE: torch.zeros(16, 16)}


def _scale_part(scale_fn, name: str = "my_tensorwise_scale") -> CheckResult:
    tensors = _ex1_tensors()
    outs = _outputs(scale_fn, name, [(x,) for x in tensors.values()])
    if isinstance(outs, CheckResult):
        return outs
    got, problems = {}, {}
    for c, out in zip(tensors, outs, strict=True):
        got[c] = None if isinstance(out, _Raised) else _as_float32(out)
        if got[c] is None:  # what it raised, or what it returned instead of a number
            what = f"returned {type(out).__name__} {_show(out)[:60]}, not one number"
            problems[c] = out if isinstance(out, _Raised) else what
    zero = got[ZERO_CASE]
    if "ZeroDivision" in problems.get(ZERO_CASE, "") or (zero is not None and not zero.isfinite()):
        what = problems.get(ZERO_CASE) or f"returned {_show(zero)}"
        return wrong(f"`{name}` on {ZERO_CASE}: {what}.", _EX1["no clamp for an all-zero tensor"], show=False)
    if problems:
        case, text = next(iter(problems.items()))
        return wrong(f"`{name}` on {case}: {text}.", _SCALE_HINT, show=False)
    want = {c: fp8.tensorwise_scale(x, E4M3) for c, x in tensors.items()}
    # exact, or within one float32 ulp: a scale computed in float32 rather than float64
    exact, ulp = {c: torch.equal(got[c], want[c]) for c in got}, torch.finfo(torch.float32).eps
    off = [c for c in got if not exact[c] and not abs(got[c] - want[c]) <= ulp * abs(want[c])]
    if not off:
        how = "bit for bit" if all(exact.values()) else "within one float32 ulp (a scale computed in float32)"
        text = f"`{name}` equals fp8.tensorwise_scale (torchao's) on all {len(got)} tensors, {how}."
        return finish("exact" if all(exact.values()) else "close", text, show=False)
    nonzero = [c for c in got if c != ZERO_CASE]
    slips = [
        m
        for m, rule in _SCALE_SLIPS.items()
        if all(math.isclose(got[c].item(), rule(tensors[c]).item(), rel_tol=1e-5) for c in nonzero)
    ]
    slip = slips[0] if slips else "another floor for amax" if off == [ZERO_CASE] else None
    notes = [f"on {c}: yours {_show(got[c])}, fp8.tensorwise_scale {_show(want[c])}" for c in off[:2]]
    head = f"`{name}` differs from fp8.tensorwise_scale on {len(off)} of {len(got)} tensors."
    return finish("wrong", head, [*notes, f"hint: {_EX1.get(slip, _SCALE_HINT)}"], show=False)


def _quantize_part(quantize_fn, name: str = "my_quantize") -> CheckResult:
    tensors = _ex1_tensors()
    normal, with_nan = tensors["normal values"], tensors["normal values"].clone()
    with_nan[0, 0] = math.nan
    cases = [(f"{c}, at its tensorwise scale", x, fp8.tensorwise_scale(x, E4M3)) for c, x in tensors.items()]
    many = 8 * fp8.tensorwise_scale(normal, E4M3)
    cases += [("normal values at 8 times their scale (many saturate)", normal, many)]
    cases += [("a tensor holding a NaN, scale 1", with_nan, torch.tensor(1.0))]
    outs = _outputs(quantize_fn, name, [(x, scale) for _, x, scale in cases])
    if isinstance(outs, CheckResult):
        return outs
    for (case, x, scale), out in zip(cases, outs, strict=True):
        want = fp8.quantize(x, E4M3, scale)
        if isinstance(out, _Raised):
            text = f"`{name}` raised on {case}: {out}"
            return wrong(text, "multiply x by the scale, then cast to FP8", show=False)
        if not isinstance(out, torch.Tensor) or out.shape != x.shape:
            what = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            text = f"`{name}` returned {what} for {case}; want a tensor of x's shape {tuple(x.shape)}."
            return wrong(text, _EX1["no cast to FP8"], show=False)
        if out.dtype != want.dtype:  # wider than a byte: not cast; another one-byte dtype: not E4M3
            text = f"`{name}` returned {dtype_name(out.dtype)} for {case}, not {dtype_name(want.dtype)}."
            slip = "no cast to FP8" if out.dtype.itemsize > 1 else "E5M2's max for E4M3"
            return wrong(text, _EX1[slip], show=False)
        mine, ref = (t.detach().to("cpu").float().nan_to_num(nan=1234.5) for t in (out, want))
        if not torch.equal(mine, ref):
            divided = fp8.quantize(x, E4M3, 1.0 / scale.double()).float().nan_to_num(nan=1234.5)
            hint = (
                "multiply x by the scale (in float32), then cast: torch's cast to E4M3 saturates at its max"
            )
            hint = _EX1["dividing by the scale"] if torch.equal(mine, divided) else hint
            text = f"`{name}` differs from fp8.quantize on {case}: {int((mine != ref).sum())} of {x.numel()} "
            return wrong(text + "elements.", hint, show=False)
    text = (
        f"`{name}` equals fp8.quantize bit for bit on all {len(cases)} cases (an outlier, saturation beyond "
    )
    return finish("exact", text + "E4M3's max, a NaN, an all-zero tensor).", show=False)


@exercise(1, "The tensorwise scale and the cast", mistakes=[Mistake(*m) for m in _EX1.items()])
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
# Exercise 2's common wrong answers: name -> hint.
_EX2 = {
    "using the newest amax only": "the scale comes from the largest amax of the last history_len steps, not the newest one alone",
    "forgetting the margin": "divide by 2**margin as well: the margin leaves headroom for an amax that grows",
    "a history that never forgets": "keep only the last history_len amaxes: an old spike must leave the history",
    "a NaN scale": "a NaN amax must never become the scale: while the history holds a NaN, keep the scale",
    "skipping the NaN": "a NaN in the history makes the reduced amax NaN: keep the scale frozen, don't skip it",
    "an inf scale from an all-zero tensor": "an all-zero tensor (amax 0) gives no scale: when the reduced amax is not > 0, keep the scale",
    "starting from another scale": "before any amax is known the scale is 1.0",
}


def _trajectory(cls) -> tuple:
    """Per schedule, the float32 scales an instance of ``cls`` shows before each update and after the last;
    ("todo",) for a skeleton, ("error", what, step, call, text) for the first error its code raises."""
    out = []
    for what, history_len, margin, amaxes in DELAYED_SCHEDULES:
        scales, call = [], "the constructor"
        try:
            obj = cls(history_len, margin)
            for amax in (*amaxes, None):
                call = "reading .scale"
                if (scale := _as_float32(value := obj.scale)) is None:
                    if is_placeholder(value) and not scales:
                        return ("todo",)
                    raise TypeError(f"it is {value!r:.40}, not a number")
                scales.append(scale.item())
                if amax is not None:
                    call = f"update({amax})"
                    obj.update(amax)
        except Exception as e:  # the learner's code: reported, never raised
            if isinstance(e, NotImplementedError) or (
                isinstance(e, AttributeError) and call == "reading .scale" and not scales
            ):
                return ("todo",)  # the skeleton raises, or its __init__ sets nothing yet
            step = len(scales) - call.startswith("update")
            return ("error", what, step, call, f"{type(e).__name__}: {e}")
        out.append(tuple(scales))
    return tuple(out)


@exercise(2, "Write the delayed-scaling rule", mistakes=[Mistake(*m) for m in _EX2.items()])
def ex2(answer, *, show: bool = True) -> CheckResult:
    """``MyDelayedScaling(history_len, margin)`` beside fp8.DelayedScaling (E4M3, algo "max") on five amax
    sequences: ``.scale`` is read before every ``update(amax)`` and after the last, compared in float32."""
    if is_placeholder(answer):
        return no_answer("MyDelayedScaling", show, "your class")
    if not callable(answer):
        text = f"`MyDelayedScaling` is a {type(answer).__name__}, not a class: pass the class itself."
        return finish("wrong", text, show=show)
    got, want = _trajectory(answer), _trajectory(functools.partial(fp8.DelayedScaling, E4M3))
    if got == ("todo",):
        return _todo("MyDelayedScaling", show)
    if repr(got) == repr(want):  # repr round-trips a float exactly, NaN equal to NaN
        text = f"MyDelayedScaling matches fp8.DelayedScaling on all {len(DELAYED_SCHEDULES)} sequences "
        text += f"({sum(map(len, want))} scales read): the same float32 scale before every update and after "
        return finish("exact", text + "the last.", show=show)
    if got[0] == "error":
        _, what, step, call, text = got
        hint = "read the error: update(amax) appends, reduces, rescales"
        if "ZeroDivision" in text:
            hint = _EX2["an inf scale from an all-zero tensor"]
        return wrong(f'MyDelayedScaling raised on "{what}" at step {step}, {call}: {text}', hint, show=show)
    (what, history_len, margin, amaxes), mine, theirs, first = next(
        (schedule, m, t, i)
        for schedule, m, t in zip(DELAYED_SCHEDULES, got, want, strict=True)
        for i, (p, q) in enumerate(zip(m, t, strict=True))
        if repr(p) != repr(q)
    )
    # the first schedule whose scales differ names the slip (the schedules come in the order the slips show)
    spike = "using the newest amax only" if mine[first] > theirs[first] else "a history that never forgets"
    slip = {
        "a spike that leaves the history": spike,
        "a margin of 2": "forgetting the margin",
        "all-zero tensors (amax 0)": "an inf scale from an all-zero tensor",
        "a NaN amax": "a NaN scale" if math.isnan(mine[first]) else "skipping the NaN",
    }.get(what, "using the newest amax only")
    head = f'MyDelayedScaling differs from fp8.DelayedScaling on "{what}" (history_len={history_len}, '
    head += f"margin={margin}) at step {first}: yours {_show(mine[first])}, "
    head += f"fp8.DelayedScaling {_show(theirs[first])}."
    seen = ", ".join(_show(a) for a in amaxes[:first]) or "(none yet)"
    notes = [
        f"amaxes given so far: {seen}",
        f"hint: {_EX2['starting from another scale' if first == 0 else slip]}",
    ]
    return finish("wrong", head, notes, show=show, details={"schedule": what, "step": first})


# --- Exercise 3: the MX block scale for FP4 ---

FP4 = "fp4_e2m1"  # the element format exercise 3 scales for (MXFP4)


def _ex3_cases() -> list[tuple[str, torch.Tensor, int]]:
    """Exercise 3's seeded tensors and block sizes (no block all zeros): ordinary values, an outlier, negative
    extremes, tiny values, amaxes exactly at powers of two, and a 3-D tensor."""
    g = torch.Generator().manual_seed(3)
    outlier, negative = torch.randn(8, 64, generator=g), 0.1 * torch.randn(8, 64, generator=g)
    outlier[2, 40] = 500.0
    negative[::2, 5] = -40.0  # a block's largest magnitude is negative: its largest value is far smaller
    powers = torch.linspace(0.1, 1.0, 32).repeat(4, 1) * torch.tensor([[4.0], [8.0], [0.75], [6.0]])
    return [
        ("normal values", torch.randn(8, 64, generator=g), 32),
        ("one outlier of 500", outlier, 32),
        ("negative extremes of -40", negative, 16),
        ("tiny values (about 1e-5)", 1e-5 * torch.randn(4, 64, generator=g), 32),
        ("block amaxes 4, 8, 0.75 and 6", powers, 32),
        ("a 3-D tensor (2, 4, 64)", torch.randn(2, 4, 64, generator=g), 16),
    ]


def _floor_rule(x: torch.Tensor, block_size: int, emax: int, rounding=torch.floor, key=torch.abs):
    """A scale rule ``2**(rounding(log2(amax)) - emax)`` per block: the MX rule and a learner's variants."""
    amax = key(x.reshape(*x.shape[:-1], -1, block_size)).amax(dim=-1)
    return 2.0 ** (rounding(torch.log2(amax)) - emax)


# Exercise 3's common wrong answers: name -> hint.
_EX3 = {
    "E4M3's offset for FP4": "that is E4M3's rule: it puts a block's amax in E4M3's top binade, far beyond FP4 E2M1's largest value 6; use E2M1's own exponent",
    "an exact scale, not a power of two": "an E8M0 scale is a bare power of two (8 exponent bits, no mantissa): round log2(amax) to a whole exponent",
    "rounding log2(amax) up": "the MX rule rounds log2(amax) down (torchao's FLOOR): amax / scale lands in the top binade, not the one below",
    "the inverse scale": "the scale multiplies the elements back (x = scale * element): it grows with the block's amax",
    "amax without abs": "a block's amax is its largest *magnitude*: take absolute values before the max",
    "one scale for all": "one scale per block of block_size consecutive values along the last dimension",
}
_SLIPS3 = {  # a wrong rule a learner writes, recognised when it gives the learner's scales on every case
    "E4M3's offset for FP4": lambda x, b: _floor_rule(x, b, fp8.ELEMENT_FORMATS[E4M3].emax),
    "an exact scale, not a power of two": lambda x, b: x.reshape(*x.shape[:-1], -1, b).abs().amax(-1) / 6.0,
    "rounding log2(amax) up": lambda x, b: _floor_rule(x, b, 2, rounding=torch.ceil),
    "the inverse scale": lambda x, b: 1.0 / _floor_rule(x, b, 2),
    "amax without abs": lambda x, b: _floor_rule(x, b, 2, key=lambda t: t),
}
_EX3_HINT = (
    "where does your scale put a block's amax (amax / scale)? The MX rule puts it in FP4 E2M1's top binade"
)


@exercise(3, "An MX block scale for FP4", mistakes=[Mistake(*m) for m in _EX3.items()])
def ex3(scales_fn, *, show: bool = True) -> CheckResult:
    """``my_mx_scales(x, block_size)``: every block's E8M0 scale for FP4 E2M1 elements, along the last
    dimension, against the scales ``mx.mx_quantize`` uses (torchao's FLOOR rule) on six seeded tensors."""
    cases, got = _ex3_cases(), []
    outs = _outputs(scales_fn, "my_mx_scales", [(x, b) for _, x, b in cases], show)
    if isinstance(outs, CheckResult):
        return outs
    want = [mx.e8m0_scales(x.reshape(-1, b), 2).reshape(*x.shape[:-1], -1) for _, x, b in cases]  # emax 2
    for (case, _, b), out, w in zip(cases, outs, want, strict=True):
        mine = None  # what it raised (a str), or what no tensor holds
        with contextlib.suppress(TypeError, ValueError, RuntimeError):
            mine = None if isinstance(out, str) else torch.as_tensor(out).detach().to("cpu", torch.float32)
        if mine is None:
            text = f"`my_mx_scales` on {case}: {out!s:.80}, not a tensor of scales."
            return wrong(text, _EX3_HINT, show=show)
        if mine.numel() != w.numel():
            text = f"`my_mx_scales` gave {mine.numel()} scale(s) for {case} (block size {b}): "
            return wrong(text + "not one per block.", _EX3["one scale for all"], show=show)
        got.append(mine.reshape(w.shape))
    if all(map(torch.equal, got, want)):
        text = f"on all {len(got)} tensors ({sum(w.numel() for w in want)} blocks), bit for bit."
        return finish("exact", "`my_mx_scales` equals mx.mx_quantize's E8M0 scales " + text, show=show)
    slips = [n for n, r in _SLIPS3.items() if all(map(_close, got, (r(x, b) for _, x, b in cases)))]
    i = next(i for i, (m, w) in enumerate(zip(got, want, strict=True)) if not torch.equal(m, w))
    (case, x, b), bad = cases[i], (got[i] != want[i]).flatten()
    k = int(bad.nonzero()[0])
    amax, scale = float(x.reshape(-1, b).abs().amax(-1)[k]), float(got[i].flatten()[k])
    ratio = f"{amax / scale:.4g}" if scale else "inf"
    notes = [f"block {k} (amax {amax:.4g}): yours {_show(scale)} puts it at amax / scale = {ratio}"]
    head = f"`my_mx_scales` differs from the MX rule on {case} (block size {b}): {int(bad.sum())} of "
    notes.append(f"hint: {_EX3[slips[0]] if slips else _EX3_HINT}")
    return finish("wrong", head + f"{bad.numel()} blocks.", notes, show=show)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-6, equal_nan=True)


# --- Exercise 4: the margin that absorbs a spike ---


def _saturated_steps(amaxes, history_len: int, margin: int) -> list[int]:
    """The steps at which delayed scaling (fp8.DelayedScaling, E4M3) saturates: the step's amax times the
    scale in use rounds past E4M3's max (fp8.saturation_count), so quantize clips it."""
    rule, out = fp8.DelayedScaling(E4M3, history_len=history_len, margin=margin), []
    for step, amax in enumerate(amaxes):
        if fp8.saturation_count(torch.tensor([amax], dtype=torch.float32), E4M3, rule.scale) > 0:
            out.append(step)
        rule.update(amax)
    return out


# Exercise 4's common wrong answers: name -> hint.
_EX4 = {
    "a margin that still saturates": "with that margin the spike still lands beyond E4M3's max: the history's amax times 2**margin must reach it",
    "more margin than needed": "that margin saturates nothing, but a smaller one does not either: each binade of margin costs a binade of range at the bottom",
    "2**margin for the margin": "is that a factor? The margin is an exponent, a number of binades: the scale is divided by 2**margin",
}


@exercise(4, "A margin for a spike", mistakes=[Mistake(*m) for m in _EX4.items()])
def ex4(answer, amaxes, history_len, *, show: bool = True) -> CheckResult:
    """The smallest margin (an integer 0..MAX_MARGIN) for which delayed scaling with ``history_len`` saturates
    at no step of ``amaxes``."""
    best = next((m for m in range(MAX_MARGIN + 1) if not _saturated_steps(amaxes, history_len, m)), None)
    if best is None:
        text = f"no margin up to {MAX_MARGIN} avoids saturation on these amaxes: choose a smaller spike"
        raise ValueError(text)
    if is_placeholder(answer):
        return no_answer("answer", show, "a margin (an integer)")
    a = finite_float(answer)  # 3 or 3.0 is a margin, True is not
    margin = int(a) if a is not None and a.is_integer() else None
    if margin is None or margin < 0:
        text = f"`answer` = {answer!r:.40} is not a margin: a whole number of binades, 0 or more."
        return wrong(text, "the margin m divides the scale by 2**m", show=show)
    if margin == best:
        text = f"margin {best}: delayed scaling (history {history_len}) saturates at no step"
        if best:
            text += f"; margin {best - 1} at step(s) {_saturated_steps(amaxes, history_len, best - 1)[:5]}"
        return finish("exact", text + ".", show=show)
    if still := _saturated_steps(amaxes, history_len, min(margin, MAX_MARGIN)):
        text = f"margin {margin}: delayed scaling still saturates at step(s) {still[:5]}."
        return wrong(text, _EX4["a margin that still saturates"], show=show)
    text = f"margin {margin} saturates nothing, but it is not the smallest that does."
    # any power of two from 8 up reads as a factor: the hint never singles out the one that is 2**best
    factor = margin >= 8 and margin & (margin - 1) == 0
    return wrong(text, _EX4["2**margin for the margin" if factor else "more margin than needed"], show=show)
