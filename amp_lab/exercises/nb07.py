"""Exercises of notebook 07 (the AMP training recipe): the L4's precision comes from
:func:`amp_lab.amp.choose_amp_dtype`, the reference clip from ``GradScaler`` and ``clip_grad_norm_``."""

from __future__ import annotations

import torch

from .. import hardware
from ..amp import choose_amp_dtype
from ..check import check_dtype
from ..check_base import CheckResult, finish, norm, read_dtype
from ..check_items import check_choice, check_function, check_sequence, check_set
from ..dtypes import dtype_name
from . import combine, exercise

__all__ = ["ex1", "ex2", "ex3", "ex4", "STEP_PIECES", "CHECKPOINT_OPTIONS", "L4"]

ZERO_GRAD = "opt.zero_grad()"
BACKWARDS = "for each micro-batch: forward and loss under autocast, then scaler.scale(loss).backward()"
UNSCALE = "scaler.unscale_(opt)"
CLIP = "clip_grad_norm_(model.parameters(), max_norm)"
STEP = "scaler.step(opt)"
UPDATE = "scaler.update()"
_ORDER = (ZERO_GRAD, BACKWARDS, UNSCALE, CLIP, STEP, UPDATE)
# The pieces as the notebook shows them: shuffled, so the list itself does not give the order away.
STEP_PIECES = (STEP, BACKWARDS, CLIP, ZERO_GRAD, UPDATE, UNSCALE)

_ORDER_HINT = "gradients must be complete before they are unscaled, and true-sized before they are clipped"
# the mistake when a piece comes after the one that must follow it: name -> hint, checked in this order
_ORDER_MISTAKES = {
    "clip before unscale_": "clipping must see true-sized gradients: what has to happen to them before they are measured?",
    "unscale_ before the backwards": "unscale_ divides the gradients once: they must be complete (every micro-batch's backward done) first",
    "zero_grad after the backwards": "gradients add up in .grad over the micro-batches: clear them before they start accumulating, not after",
    "update before step": "update() sets the next scale from what step() found (inf/NaN or not), so it cannot run before it",
}
_RULES = ((UNSCALE, CLIP), (BACKWARDS, UNSCALE), (ZERO_GRAD, BACKWARDS), (STEP, UPDATE))  # (first, then)


def _order_hint(answer) -> str:
    """The hint for the first rule an ordering of all the pieces breaks; the generic one otherwise."""
    try:
        names = [norm(x) for x in answer]
        pos = {piece: names.index(norm(piece)) for piece in _ORDER}
    except (TypeError, ValueError):
        return _ORDER_HINT
    if len(names) != len(_ORDER):
        return _ORDER_HINT
    return ex1.hint(_ORDER_HINT, *(pos[then] < pos[first] for first, then in _RULES))


@exercise(1, "The order of a step", mistakes=_ORDER_MISTAKES)
def ex1(answer, *, show: bool = True) -> CheckResult:
    """The items of STEP_PIECES (the notebook's ``pieces``) in the order one optimizer step runs them."""
    return check_sequence(answer, list(_ORDER), hint=_order_hint(answer), show=show)


L4 = {"capability": (8, 9), "gpu_name": "NVIDIA L4"}

_EX2 = {
    "float16 from the datasheet": "the datasheet's leading figures are not the decision: follow section 1's flow with the L4's compute capability, question by question, and see which branch it takes",
    "a GradScaler for bfloat16": "only a dtype with a narrow exponent range needs loss scaling: how many exponent bits does your dtype have?",
}


@exercise(2, "The decision flow on another machine", mistakes=_EX2)
def ex2(answer_dtype, answer_scaler, *, show: bool = True) -> CheckResult:
    """The autocast dtype (``answer_dtype``) and whether an enabled GradScaler is needed
    (``answer_scaler``, True/False) on an NVIDIA L4."""
    (_, capability), (_, scaler_hint) = ex2.mistakes
    choice = choose_amp_dtype(hardware.report_for("cuda", **L4))
    got = read_dtype(answer_dtype)
    if got is not None and got != choice.dtype:  # check_dtype's notes would compare the formats' bits
        head = f"`answer_dtype` is {dtype_name(got)}, not what the flow chooses on the L4."
        r_dtype = finish("wrong", head, [f"hint: {capability}"], show=False)
    else:
        r_dtype = check_dtype(answer_dtype, choice.dtype, name="answer_dtype", hint=capability, show=False)
    opts = dict(options=[True, False], name="answer_scaler", hint=scaler_hint, show=False)
    r_scaler = check_choice(answer_scaler, choice.use_scaler, **opts)
    return combine([r_dtype, r_scaler], show=show)


def _clip_reference(grads, scale, max_norm):
    """torch's own: ``GradScaler.unscale_`` then ``clip_grad_norm_`` on parameters holding ``grads``."""
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    scaler.scale(torch.ones(()))  # a GradScaler creates its scale tensor when it first scales
    scaler.unscale_(torch.optim.SGD(params, lr=0.0))
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    for p, g in zip(params, grads, strict=True):
        g.copy_(p.grad)


def _clip_scaled(grads, scale, max_norm):  # the mistake: clip the scaled gradients, then unscale
    coef = max_norm / (torch.nn.utils.get_total_norm(grads) + 1e-6)
    for g in grads:
        if coef < 1:
            g.mul_(coef)
        g.div_(scale)


def _per_tensor(grads, scale, max_norm):  # the mistake: one norm per tensor
    for g in grads:
        g.div_(scale)
        n = torch.linalg.vector_norm(g)
        if n > max_norm:
            g.mul_(max_norm / (n + 1e-6))


# The slips, run beside the learner's function, in the order of _EX3's mistakes; rebinding names does nothing.
_SLIPS = (_clip_scaled, _per_tensor, lambda grads, scale, max_norm: None)
_EX3 = {
    "clip before unscaling": "the norm was measured on gradients still multiplied by the scale: divide by the scale first, then measure",
    "a norm per tensor": "clip_grad_norm_ measures one norm over all gradients together, not one norm per tensor",
    "rebinding instead of in place": "modify the tensors in place (g.mul_(...), g.div_(...)); rebinding a name changes nothing outside",
}


def _clip_cases():
    """The cases exercise 3 runs: gradient lists above and below max_norm (seeded)."""
    gen = torch.Generator().manual_seed(0)
    return [
        ([torch.randn(4, 3, generator=gen) * 2**16, torch.randn(5, generator=gen) * 2**16], 2.0**16, 1.0),
        ([torch.randn(6, generator=gen) * 2**10], 2.0**10, 100.0),  # norm below max_norm: no clipping
    ]


def _acts_like(fn, slip) -> bool:
    """Does the learner's ``fn`` change the gradients as ``slip`` does, on every case?"""
    for grads, scale, max_norm in _clip_cases():
        mine, theirs = [g.clone() for g in grads], [g.clone() for g in grads]
        try:
            fn(mine, scale, max_norm)
            slip(theirs, scale, max_norm)
            if len(mine) != len(theirs) or not all(map(torch.allclose, mine, theirs)):
                return False
        except Exception:  # the learner's code: the generic check reports it
            return False
    return True


@exercise(3, "Write unscale_and_clip_", mistakes=_EX3)
def ex3(answer, *, show: bool = True) -> CheckResult:
    """``answer`` is the learner's ``unscale_and_clip_(grads, scale, max_norm)``; compared with
    GradScaler.unscale_ then clip_grad_norm_."""
    slips = _SLIPS if callable(answer) else ()
    hint = next((m.hint for s, m in zip(slips, ex3.mistakes, strict=False) if _acts_like(answer, s)), None)
    if hint:
        head = "unscale_and_clip_ does not match unscale_ then clip_grad_norm_."
        return finish("wrong", head, [f"hint: {hint}"], show=show)
    hint = "first divide by the scale, then measure the norm of all gradients together"
    opts = dict(name="unscale_and_clip_", rtol=1e-6, hint=hint, show=show)
    return check_function(answer, _clip_reference, _clip_cases(), **opts)


_STATE = ("model weights", "optimizer state", "scaler state", "lr scheduler state", "step number")
CHECKPOINT_OPTIONS = (*_STATE, "autocast state", "last loss")

_EX4 = {
    "forgetting the scaler state": "besides the weights and Adam's moments, what else in a float16 run changes from one step to the next? Compare the three runs of section 6 after the cut",
    "autocast state": "autocast keeps no state between steps: each step enters a fresh autocast region",
}


@exercise(4, "What a checkpoint must hold", mistakes=_EX4)
def ex4(answer, *, show: bool = True) -> CheckResult:
    """A set of items from CHECKPOINT_OPTIONS (the notebook's ``options``)."""
    hint = "think of everything that changes from one step to the next, and what reads it"
    if isinstance(answer, (set, frozenset, list, tuple)):
        got = {norm(x) for x in answer if isinstance(x, str)}
        if "scaler state" not in got and len(got & set(_STATE)) >= 3:
            hint = _EX4["forgetting the scaler state"]
    why = {"autocast state": _EX4["autocast state"]}
    why["last loss"] = "the loss is recomputed from the weights; no later step reads the old one"
    return check_set(
        answer, set(_STATE), options=list(CHECKPOINT_OPTIONS), explanations=why, hint=hint, show=show
    )
