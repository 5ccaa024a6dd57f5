"""Exercises of notebook 08 (FP8 and block scaling): expected values come from :mod:`amp_lab.fp8` and
:mod:`amp_lab.mx`; a common wrong rule is recognised by running it beside the learner's."""

from __future__ import annotations

import functools
import math
from numbers import Real

import torch

from .. import fp8, mx
from ..check_base import CheckResult, finish, is_placeholder, no_answer
from ..dtypes import dtype_name
from . import Mistake, combine, exercise, finite_float

__all__ = ["ex1", "ex2", "ex3", "ex4", "E4M3", "DELAYED_SCHEDULES", "BLOCK_SIZES", "MAX_MARGIN"]

E4M3 = "fp8_e4m3"  # the forward format every exercise uses
MAX_MARGIN = 30  # margins exercise 4 tries (2**30 is far beyond any useful headroom)
BLOCK_SIZES = (8, 16, 32, 64, 128, 256)  # the block sizes exercise 3 chooses among


def _no(text: str, hint: str, show: bool = False) -> CheckResult:
    """A wrong answer and the hint that points at the idea."""
    return finish("wrong", text, [f"hint: {hint}"], show=show)


def _todo(name: str, show: bool = False) -> CheckResult:
    """Not attempted yet: the learner's code is still the skeleton."""
    text = f"`{name}` is not written yet (it returns None or raises NotImplementedError): fill it in and run "
    text += "this cell again."
    return finish("unanswered", text, show=show, details={"answered": False})


class _Raised(str):
    """What the learner's function raised, as text."""


def _outputs(fn, name: str, cases: list[tuple]) -> CheckResult | list:
    """``fn`` called on clones of each case's tensors: its outputs (a :class:`_Raised` for a call that
    raised), or the verdict when ``fn`` is no function yet or still the skeleton."""
    if is_placeholder(fn):
        return no_answer(name, False, "your function")
    if not callable(fn):
        return finish("wrong", f"`{name}` is a {type(fn).__name__}, not a function.", show=False)
    outs = []
    for args in cases:
        try:
            out = fn(*(a.clone() for a in args))
        except NotImplementedError:
            out = None
        except Exception as e:  # the learner's code: reported in the feedback, never raised
            out = _Raised(f"{type(e).__name__}: {e}")
        if is_placeholder(out):
            return _todo(name)
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


def _whole(x) -> int | None:
    """``x`` as an int if it is a whole real number (3 or 3.0, not True), else None."""
    a = finite_float(x)
    return int(a) if a is not None and a.is_integer() else None


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
    return {
        "normal values": normal,
        "one outlier of 3000": outlier,
        "a negative extreme of -40": negative,
        "tiny values (about 1e-5)": tiny,
        ZERO_CASE: torch.zeros(16, 16),
    }


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
        return _no(f"`{name}` on {ZERO_CASE}: {what}.", _EX1["no clamp for an all-zero tensor"])
    if problems:
        case, text = next(iter(problems.items()))
        return _no(f"`{name}` on {case}: {text}.", _SCALE_HINT)
    want = {c: fp8.tensorwise_scale(x, E4M3) for c, x in tensors.items()}
    # exact, or within one float32 ulp: a scale computed in float32 rather than float64
    exact, ulp = {c: torch.equal(got[c], want[c]) for c in got}, torch.finfo(torch.float32).eps
    wrong = [c for c in got if not exact[c] and not abs(got[c] - want[c]) <= ulp * abs(want[c])]
    if not wrong:
        how = "bit for bit" if all(exact.values()) else "within one float32 ulp (a scale computed in float32)"
        text = f"`{name}` equals fp8.tensorwise_scale (torchao's) on all {len(got)} tensors, {how}."
        return finish("exact" if all(exact.values()) else "close", text, show=False)
    nonzero = [c for c in got if c != ZERO_CASE]
    slips = [
        m
        for m, rule in _SCALE_SLIPS.items()
        if all(math.isclose(got[c].item(), rule(tensors[c]).item(), rel_tol=1e-5) for c in nonzero)
    ]
    slip = slips[0] if slips else "another floor for amax" if wrong == [ZERO_CASE] else None
    notes = [f"on {c}: yours {_show(got[c])}, fp8.tensorwise_scale {_show(want[c])}" for c in wrong[:2]]
    head = f"`{name}` differs from fp8.tensorwise_scale on {len(wrong)} of {len(got)} tensors."
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
            return _no(f"`{name}` raised on {case}: {out}", "multiply x by the scale, then cast to FP8")
        if not isinstance(out, torch.Tensor) or out.shape != x.shape:
            what = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            text = f"`{name}` returned {what} for {case}; want a tensor of x's shape {tuple(x.shape)}."
            return _no(text, _EX1["no cast to FP8"])
        if out.dtype != want.dtype:  # wider than a byte: not cast; another one-byte dtype: not E4M3
            text = f"`{name}` returned {dtype_name(out.dtype)} for {case}, not {dtype_name(want.dtype)}."
            return _no(text, _EX1["no cast to FP8" if out.dtype.itemsize > 1 else "E5M2's max for E4M3"])
        mine, ref = (t.detach().to("cpu").float().nan_to_num(nan=1234.5) for t in (out, want))
        if not torch.equal(mine, ref):
            divided = fp8.quantize(x, E4M3, 1.0 / scale.double()).float().nan_to_num(nan=1234.5)
            hint = (
                "multiply x by the scale (in float32), then cast: torch's cast to E4M3 saturates at its max"
            )
            if torch.equal(mine, divided):
                hint = _EX1["dividing by the scale"]
            bad = int((mine != ref).sum())
            return _no(f"`{name}` differs from fp8.quantize on {case}: {bad} of {x.numel()} elements.", hint)
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
        text = (
            f"MyDelayedScaling matches fp8.DelayedScaling on all {len(DELAYED_SCHEDULES)} sequences "
            f"({sum(map(len, want))} scales read): the same float32 scale before every update and after the "
            "last."
        )
        return finish("exact", text, show=show)
    if got[0] == "error":
        _, what, step, call, text = got
        hint = "read the error: update(amax) appends, reduces, rescales"
        if "ZeroDivision" in text:
            hint = _EX2["an inf scale from an all-zero tensor"]
        return _no(f'MyDelayedScaling raised on "{what}" at step {step}, {call}: {text}', hint, show)
    (what, history_len, margin, amaxes), mine, theirs, first = next(
        (schedule, m, t, i)
        for schedule, m, t in zip(DELAYED_SCHEDULES, got, want, strict=True)
        for i, (p, q) in enumerate(zip(m, t, strict=True))
        if repr(p) != repr(q)
    )
    # the first schedule whose scales differ names the slip (the schedules come in the order the slips show)
    high, nan = mine[first] > theirs[first], math.isnan(mine[first])
    slip = {
        "a spike that leaves the history": "using the newest amax only"
        if high
        else "a history that never forgets",
        "a margin of 2": "forgetting the margin",
        "all-zero tensors (amax 0)": "an inf scale from an all-zero tensor",
        "a NaN amax": "a NaN scale" if nan else "skipping the NaN",
    }.get(what, "using the newest amax only")
    head = (
        f'MyDelayedScaling differs from fp8.DelayedScaling on "{what}" (history_len={history_len}, '
        f"margin={margin}) at step {first}: yours {_show(mine[first])}, "
        f"fp8.DelayedScaling {_show(theirs[first])}."
    )
    seen = ", ".join(_show(a) for a in amaxes[:first]) or "(none yet)"
    notes = [
        f"amaxes given so far: {seen}",
        f"hint: {_EX2['starting from another scale' if first == 0 else slip]}",
    ]
    return finish("wrong", head, notes, show=show, details={"schedule": what, "step": first})


# --- Exercise 3: a block size for FP4 that meets an error target ---


def _block_losses(x: torch.Tensor, elem: str) -> dict[int, float]:
    """{block size: the share of ``x``'s non-zero elements ``mx.mx_quantize`` flushes to zero} for the sizes
    dividing x's last dimension."""
    nonzero = x != 0
    count = max(int(nonzero.sum()), 1)
    sizes = [b for b in BLOCK_SIZES if x.shape[-1] % b == 0]
    return {b: int(((mx.mx_quantize(x, elem, b) == 0) & nonzero).sum()) / count for b in sizes}


# Exercise 3's common wrong answers: name -> hint.
_EX3 = {
    "a block size that misses the target": "that block size flushes more than the target to zero: smaller blocks follow the small values",
    "a smaller block size than needed": "that block size meets the target, but a larger one does too: fewer blocks, fewer scales",
    "answering for E4M3": "the question is about FP4 E2M1: E4M3's much wider window meets the target at any block size",
    "not a block size": "give a block size, one of the sizes in the table above (a number of elements per block)",
}


@exercise(3, "A block size for FP4", mistakes=[Mistake(*m) for m in _EX3.items()])
def ex3(answer, acts, target, *, show: bool = True) -> CheckResult:
    """The largest block size (of BLOCK_SIZES dividing the last dimension) at which FP4 E2M1 MX quantization
    of ``acts`` flushes at most the share ``target`` of its non-zero elements to zero."""
    x = acts.detach().to("cpu", torch.float32)
    fp4 = _block_losses(x, "fp4_e2m1")
    best = max((b for b, lost in fp4.items() if lost <= target), default=None)
    if best is None:
        raise ValueError(f"target={target} is below FP4's share lost to zero at every block size")
    if is_placeholder(answer):
        return no_answer("answer", show, "a block size")
    size = _whole(answer)
    if size not in fp4:
        text = f"`answer` = {answer!r:.40} is not one of the block sizes here: {', '.join(map(str, fp4))}."
        return _no(text, _EX3["not a block size"], show)
    if size == best:
        larger = [b for b in fp4 if b > best]
        beyond = f"; the next larger, {min(larger)}, does not" if larger else " (the largest block size here)"
        return finish("exact", f"block size {best}: FP4 E2M1 meets the target on acts{beyond}.", show=show)
    if fp4[size] <= target:
        text = f"block size {size} meets the target (FP4 loses {fp4[size]:.2%} to zero), but a larger one "
        text += "does too."
        return _no(text, _EX3["a smaller block size than needed"], show)
    e4m3_best = max((b for b, lost in _block_losses(x, "fp8_e4m3").items() if lost <= target), default=None)
    text = f"block size {size}: FP4 E2M1 flushes {fp4[size]:.2%} of acts' non-zero values to zero, above the "
    slip = "answering for E4M3" if size == e4m3_best else "a block size that misses the target"
    return _no(text + f"target {target:.2%}.", _EX3[slip], show)


# --- Exercise 4: the margin that absorbs a spike ---


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


# Exercise 4's common wrong answers: name -> hint.
_EX4 = {
    "a margin that still saturates": "with that margin the spike still lands beyond E4M3's max: the history's amax times 2**margin must reach it",
    "more margin than needed": "that margin saturates nothing, but a smaller one does not either: each binade of margin costs a binade of range at the bottom",
    "2**margin for the margin": "the margin is an exponent: the scale is divided by 2**margin, so give the margin itself",
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
    margin = _whole(answer)
    if margin is None or margin < 0:
        text = f"`answer` = {answer!r:.40} is not a margin: a whole number of binades, 0 or more."
        return _no(text, "the margin m divides the scale by 2**m", show)
    if margin == best:
        text = f"margin {best}: delayed scaling (history {history_len}) saturates at no step"
        if best:
            text += f"; margin {best - 1} at step(s) {_saturated_steps(amaxes, history_len, best - 1)[:5]}"
        return finish("exact", text + ".", show=show)
    if best >= 2 and margin == 2**best:
        return _no(f"`answer` = {margin} = 2**{best}.", _EX4["2**margin for the margin"], show)
    if still := _saturated_steps(amaxes, history_len, min(margin, MAX_MARGIN)):
        text = f"margin {margin}: delayed scaling still saturates at step(s) {still[:5]}."
        return _no(text, _EX4["a margin that still saturates"], show)
    text = f"margin {margin} saturates nothing, but it is not the smallest that does."
    return _no(text, _EX4["more margin than needed"], show)
