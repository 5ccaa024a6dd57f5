"""Exercises of notebook 03 (underflow and overflow: FP16's range on real gradients); each expected value
is computed from what the notebook measured (``all_grads``, ``logits``, ``activation_grads``)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping

import torch

from ..check import check_between, check_value
from ..check_base import CheckResult, finish
from ..check_items import check_choice
from ..device import float64_on_cpu
from ..formats import FORMATS
from ..range_counts import log2_limits, lost_update_fraction, range_report, suggest_scale
from . import exercise, finite_float, wrong

MAX_ZERO_SHARE = 0.01  # exercise 1: the share of the gradients that may still become zero at a good scale
EX2_WEIGHT, EX2_LR = 0.75, 0.01  # exercise 2: the SGD step
SOFTMAX_ATOL = 2.0**-8  # exercise 3: a few FP16 ulps of 1.0 (FP16's exp, sum and division each round once)
BF16_NEEDS_SCALING = 0.001  # exercise 4: a share of zeros that would make loss scaling worth it


def _gradients(value) -> list[torch.Tensor]:
    """The tensors of the notebook's list or dict of gradient tensors."""
    return list(value.values()) if isinstance(value, Mapping) else list(value)


def scale_window(all_grads) -> tuple[float, float]:
    """``(low, high)``: the loss scales that keep fewer than 1% of ``all_grads`` from becoming zero in FP16
    and overflow none of them."""
    grads = _gradients(all_grads)
    # The smallest k in [-24, 100) whose scale 2**k leaves fewer than 1% of the gradients at zero: the share
    # only falls as the scale grows, so a binary search asks range_report 7 times, not once per k.
    ks, few_zeros = range(-24, 100), lambda k: range_report(grads, "fp16", 2.0**k).underflow < MAX_ZERO_SHARE
    i = bisect.bisect_left(ks, True, key=few_zeros)
    high = suggest_scale(grads, "fp16")
    if i == len(ks) or 2.0 ** ks[i] > high:
        raise ValueError(
            "all_grads: no loss scale keeps fewer than 1% of these gradients from underflowing "
            "without overflowing some of them; the exercise needs the notebook's gradients"
        )
    return 2.0 ** ks[i], high


_EX1 = {
    "k for S": "give S itself (2.0**k), not the exponent k",
    "too small": "1% or more of the gradients still become zero",
    "too large": "the largest gradients overflow FP16",
}


@exercise(1, "Pick a loss scale from a histogram", mistakes=_EX1)
def ex1(answer, all_grads, *, show: bool = True) -> CheckResult:
    """A loss scale ``S`` at which fewer than 1% of ``all_grads`` become zero in FP16 and none overflows."""
    low, high = scale_window(all_grads)
    x = finite_float(answer)
    if x is not None and x.is_integer() and 0 < x <= 40 and x < low:
        # the hint names no scale: 2.0**k might pass, and saying so would hand over an answer
        head = f"`answer` = {x:g} looks like an exponent, not a scale (as a scale it is far too small)."
        hint = f"give S itself (2.0**k), not the exponent k: a scale of {x:g} shifts the gradients by log2({x:g}) binades, not by {x:g}."
        return wrong(head, hint, show=show)
    if x is not None and x <= 0:
        hint = "a loss scale is a positive number that multiplies the loss, a power of two such as 2.0**10"
        return wrong(f"`answer` = {x:g} is not a loss scale.", hint, show=show)
    below = "at this scale 1% or more of the gradients still become zero in FP16: move the low tail of the histogram further up"
    above = "at this scale the largest gradients overflow FP16 and become inf: a loss scale multiplies every gradient, the weight gradients (the largest) included"
    hint = "at scale 2**k a gradient in binade [2^b, 2^(b+1)) moves to [2^(b+k), 2^(b+k+1)); compare both ends of the histogram with FP16's window"
    return check_between(answer, low, high, below=below, above=above, hint=hint, show=show)


def _largest_lost_g(lr: float) -> float:
    """The largest power of two ``g`` whose update ``w - lr * g`` of ``w = 0.75`` is lost in FP16."""
    w = torch.tensor([EX2_WEIGHT])
    lost = [j for j in range(-40, 8) if lost_update_fraction(w, torch.tensor([-lr * 2.0**j]), "fp16") == 1.0]
    return 2.0 ** max(lost)


_EX2 = {
    "j for g": "give g itself (2.0**j), not the exponent j",
    "the whole spacing": "at most half the spacing",
    "lr left out": "the update is lr * g",
}


@exercise(2, "A lost update", mistakes=_EX2)
def ex2(answer, *, show: bool = True) -> CheckResult:
    """The largest power-of-two gradient ``g`` whose SGD update of ``w = 0.75`` (lr 0.01) is lost in FP16."""
    expected = _largest_lost_g(EX2_LR)
    x = finite_float(answer)
    if x is not None and x.is_integer() and -64 <= x <= 0:
        hint = "give g itself (2.0**j), not the exponent j"  # not 2.0**j for this j: it may be the answer
        return wrong(f"`answer` = {x:g} looks like the exponent j, not the gradient g.", hint, show=show)
    if x is not None and x == 2 * expected:
        head = "`answer` is too large: with this g the update is not lost (0.75 - lr * g rounds to the FP16 number below 0.75)."
        hint = "w - lr * g rounds back to w only while |lr * g| is at most half the spacing of FP16 numbers near w: past the halfway point it rounds to the neighbour."
        return wrong(head, hint, show=show)
    if x is not None and x == _largest_lost_g(1.0):
        head = "`answer` is too small: it is the largest lost *update*, not the largest lost gradient."
        hint = "the update is lr * g, not g: the weight changes by the learning rate times the gradient."
        return wrong(head, hint, show=show)
    hint = "an update is lost when |lr * g| is at most half the spacing of FP16 numbers near 0.75 (notebook 01); g is a power of two"
    # rtol: 2**j written as a decimal with 3 significant digits passes
    return check_value(answer, expected, rtol=5e-3, hint=hint, show=show)


def _bad_rows(p: torch.Tensor) -> torch.Tensor:
    return (~torch.isfinite(p.detach())).any(dim=1).cpu()


_EX3 = {
    "naive exp": "exp overflowed FP16",
    "one shift for the whole batch": "shift each row by a number of its own",
    "normalised over the batch": "each row must sum to 1",
    "left FP16": "keep every step in float16",
}


@exercise(3, "Fix the overflow in a softmax", mistakes=_EX3)
def ex3(softmax_fp16, logits, *, show: bool = True) -> CheckResult:
    """``softmax_fp16(z)``: the softmax of each row of an FP16 tensor, computed in FP16, with no inf or NaN;
    run on ``logits`` cast to FP16 and compared with the exact softmax."""
    name, z16 = "softmax_fp16", logits.detach().to(torch.float16)
    if softmax_fp16 is None or softmax_fp16 is Ellipsis:
        return finish("unanswered", f"no answer yet: write `{name}` and run this cell again.", show=show)
    if not callable(softmax_fp16):
        hint = "define it with `def softmax_fp16(z): ...`, returning a tensor shaped like z"
        return wrong(f"`{name}` is a {type(softmax_fp16).__name__}, not a function.", hint, show=show)
    try:
        out = softmax_fp16(z16.clone())
    except NotImplementedError:
        out = NotImplementedError  # the skeleton's body
    except Exception as e:  # the learner's code failed: report it, never raise
        hint = "z is a float16 tensor of shape (examples, classes); use torch operations on it"
        return wrong(f"`{name}(z)` raised {type(e).__name__}: {str(e)[:200]}", hint, show=show)
    if out is None or out is NotImplementedError:
        todo = "still raises NotImplementedError; fill in its body"
        if out is None:
            todo = "returns None; make it return the probabilities"
        return finish("unanswered", f"no answer yet: `{name}` {todo} and run this cell again.", show=show)
    rows, head = z16.shape[0], f"`{name}(z)`"
    if not isinstance(out, torch.Tensor):
        text = f"{head} returned a {type(out).__name__}, not a tensor."
        return wrong(text, "return a tensor shaped like z", show=show)
    if out.shape != z16.shape:
        hint = "softmax keeps the shape: one probability per class, per example"
        return wrong(f"{head} has shape {tuple(out.shape)}; z has shape {tuple(z16.shape)}.", hint, show=show)
    if out.dtype != torch.float16:
        hint = "keep every step in float16: the exercise is to make softmax safe *in* FP16, as it must be where autocast leaves it in the low dtype"
        return wrong(
            f"{head} returned {str(out.dtype).removeprefix('torch.')}, not float16.", hint, show=show
        )
    bad = _bad_rows(out)
    if bad.any():  # the rows a softmax shifted by the batch's largest logit, or not at all, breaks
        exps = (torch.exp(z16 - z16.max()), torch.exp(z16))
        batch, naive = (_bad_rows(e / e.sum(dim=1, keepdim=True)) for e in exps)
        if torch.equal(bad, batch) and not torch.equal(bad, naive):
            hint = "subtracting the largest logit of the whole batch keeps exp finite, but a row whose own logits all lie far below it underflows to zeros only, and 0 / 0 is NaN: shift each row by a number of its own."
        else:
            hint = f"exp overflowed FP16: exp(x) is inf once x is above ln(65504) = {math.log(FORMATS['fp16'].max):.2f}, and inf / inf is NaN. The softmax of a row does not change when one number is subtracted from all of its logits: which number keeps every exponent at or below 0?"
        return wrong(f"{int(bad.sum())} of {rows} rows of `{name}(z)` contain inf or NaN.", hint, show=show)
    out64 = float64_on_cpu(out)
    off_rows = int(((out64.sum(dim=1) - 1).abs() > 0.01).sum())
    if off_rows:
        hint = "each row must sum to 1: a row is one example's probabilities over the classes; which dimension did you sum over?"
        return wrong(f"{off_rows} of {rows} rows of `{name}(z)` do not sum to 1.", hint, show=show)
    diff = (out64 - torch.softmax(float64_on_cpu(logits), dim=1)).abs()
    n_off = int((diff > SOFTMAX_ATOL).sum())
    if n_off:
        hint = "softmax(z)_i = exp(z_i) / sum_j exp(z_j), row by row; every step in FP16 rounds, so keep the steps few"
        head = f"{n_off} of {diff.numel()} probabilities are further than 2^-8 from the exact softmax."
        return wrong(head, hint, show=show)
    head = f"`{name}(z)` is float16, finite in all {rows} rows, and every probability is within 2^-8 of the exact softmax."
    note = "that is a pass: FP16 rounds each step, so bit-for-bit equality with float64 is not expected."
    return finish("close", head, [note], show=show)


_EX4 = {
    "the FP16 answer": "where BF16 starts rounding to zero",
    "yes/no for True/False": "answer True or False",
}


@exercise(4, "BF16 instead of FP16", mistakes=_EX4)
def ex4(answer, activation_grads, *, show: bool = True) -> CheckResult:
    """Would ``activation_grads`` need loss scaling in BF16?  ``True`` (scaling needed) or ``False``."""
    grads = _gradients(activation_grads)
    bf16 = range_report(grads, "bf16")
    needed = bf16.underflow > BF16_NEEDS_SCALING
    if isinstance(answer, str) and answer.strip().lower() in ("yes", "no", "true", "false", "y", "n"):
        hint = "answer True or False, the Python values, without quotes"
        return wrong(f"`answer` = {answer!r} is text.", hint, show=show)
    # words, not digits, where the share is below the threshold: the count of a few stray tiny values
    # depends on the CPU's kernels, the verdict does not
    share = f"{bf16.underflow:.1%}" if needed else f"fewer than {BF16_NEEDS_SCALING:.1%}"
    zero_below = f"2^{log2_limits('bf16')['zero_below']:g}"
    why = f"in BF16, {share} of the non-zero activation gradients become zero: BF16 has FP32's 8 exponent "
    why += f"bits and rounds to zero only at or below {zero_below}"
    hint = "compare where BF16 starts rounding to zero (the formats table at the top) with the smallest gradients in the histogram"
    return check_choice(
        answer, needed, options=[True, False], explanations={needed: why}, hint=hint, show=show
    )
