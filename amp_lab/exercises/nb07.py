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
from . import Mistake, combine, exercise

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

_CLIP_FIRST_HINT = (
    "clipping must see true-sized gradients: what has to happen to them before they are measured?"
)
_UPDATE_FIRST_HINT = (
    "update() sets the next scale from what step() found (inf/NaN or not), so it cannot run before it"
)
_ZERO_LATE_HINT = (
    "gradients add up in .grad over the micro-batches: clear them before they start accumulating, not after"
)
_UNSCALE_EARLY_HINT = (
    "unscale_ divides the gradients once: they must be complete (every micro-batch's backward done) first"
)
_ORDER_HINT = "gradients must be complete before they are unscaled, and true-sized before they are clipped"
# (a piece, the piece that must come after it, the mistake when it does not), checked in this order
_RULES = (
    (UNSCALE, CLIP, Mistake("clip before unscale_", _CLIP_FIRST_HINT)),
    (BACKWARDS, UNSCALE, Mistake("unscale_ before the backwards", _UNSCALE_EARLY_HINT)),
    (ZERO_GRAD, BACKWARDS, Mistake("zero_grad after the backwards", _ZERO_LATE_HINT)),
    (STEP, UPDATE, Mistake("update before step", _UPDATE_FIRST_HINT)),
)


def _order_hint(answer) -> str:
    """The hint for the first rule an ordering of all the pieces breaks; the generic one otherwise."""
    try:
        names = [norm(x) for x in answer]
        pos = {piece: names.index(norm(piece)) for piece in _ORDER}
    except (TypeError, ValueError):
        return _ORDER_HINT
    if len(names) != len(_ORDER):
        return _ORDER_HINT
    return next((m.hint for first, then, m in _RULES if pos[then] < pos[first]), _ORDER_HINT)


@exercise(1, "The order of a step", mistakes=[m for *_, m in _RULES])
def ex1(answer, *, show: bool = True) -> CheckResult:
    """The items of STEP_PIECES (the notebook's ``pieces``) in the order one optimizer step runs them."""
    return check_sequence(answer, list(_ORDER), hint=_order_hint(answer), show=show)


L4 = {"capability": (8, 9), "gpu_name": "NVIDIA L4"}

_CAPABILITY = Mistake(
    "float16 from the datasheet",
    "the datasheet's leading figures are not the decision: follow section 1's flow with the L4's compute "
    "capability, question by question, and see which branch it takes",
)
_SCALER = Mistake(
    "a GradScaler for bfloat16",
    "only a dtype with a narrow exponent range needs loss scaling: how many exponent bits does your dtype have?",
)


@exercise(2, "The decision flow on another machine", mistakes=[_CAPABILITY, _SCALER])
def ex2(answer_dtype, answer_scaler, *, show: bool = True) -> CheckResult:
    """The autocast dtype (``answer_dtype``) and whether an enabled GradScaler is needed
    (``answer_scaler``, True/False) on an NVIDIA L4."""
    choice = choose_amp_dtype(hardware.report_for("cuda", **L4))
    got = read_dtype(answer_dtype)
    if got is not None and got != choice.dtype:  # check_dtype's notes would compare the formats' bits
        head = f"`answer_dtype` is {dtype_name(got)}, not what the flow chooses on the L4."
        r_dtype = finish("wrong", head, [f"hint: {_CAPABILITY.hint}"], show=False)
    else:
        hint = _CAPABILITY.hint
        r_dtype = check_dtype(answer_dtype, choice.dtype, name="answer_dtype", hint=hint, show=False)
    scaler, hint = choice.use_scaler, _SCALER.hint
    r_scaler = check_choice(
        answer_scaler, scaler, options=[True, False], name="answer_scaler", hint=hint, show=False
    )
    return combine([r_dtype, r_scaler], show=show)


_CLIP_SCALED_HINT = "the norm was measured on gradients still multiplied by the scale: divide by the scale first, then measure"
_PER_TENSOR_HINT = "clip_grad_norm_ measures one norm over all gradients together, not one norm per tensor"
_NOT_IN_PLACE_HINT = (
    "modify the tensors in place (g.mul_(...), g.div_(...)); rebinding a name changes nothing outside"
)


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


# A slip, run beside the learner's function, and its mistake; rebinding names instead does nothing.
_SLIPS = (
    (_clip_scaled, Mistake("clip before unscaling", _CLIP_SCALED_HINT)),
    (_per_tensor, Mistake("a norm per tensor", _PER_TENSOR_HINT)),
    (lambda grads, scale, max_norm: None, Mistake("rebinding instead of in place", _NOT_IN_PLACE_HINT)),
)


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


@exercise(3, "Write unscale_and_clip_", mistakes=[m for _, m in _SLIPS])
def ex3(answer, *, show: bool = True) -> CheckResult:
    """``answer`` is the learner's ``unscale_and_clip_(grads, scale, max_norm)``; compared with
    GradScaler.unscale_ then clip_grad_norm_."""
    slips = _SLIPS if callable(answer) else ()
    hint = next((m.hint for slip, m in slips if _acts_like(answer, slip)), None)
    if hint:
        head = "unscale_and_clip_ does not match unscale_ then clip_grad_norm_."
        return finish("wrong", head, [f"hint: {hint}"], show=show)
    hint, name = (
        "first divide by the scale, then measure the norm of all gradients together",
        "unscale_and_clip_",
    )
    return check_function(answer, _clip_reference, _clip_cases(), name=name, rtol=1e-6, hint=hint, show=show)


_STATE = ("model weights", "optimizer state", "scaler state", "lr scheduler state", "step number")
CHECKPOINT_OPTIONS = (*_STATE, "autocast state", "last loss")

_SCALER_STATE = Mistake(
    "forgetting the scaler state",
    "besides the weights and Adam's moments, what else in a float16 run changes from one step to the next? "
    "Compare the three runs of section 6 after the cut",
)
_AUTOCAST_STATE = Mistake(
    "autocast state",
    "autocast keeps no state between steps: each step enters a fresh autocast region",
)


@exercise(4, "What a checkpoint must hold", mistakes=[_SCALER_STATE, _AUTOCAST_STATE])
def ex4(answer, *, show: bool = True) -> CheckResult:
    """A set of items from CHECKPOINT_OPTIONS (the notebook's ``options``)."""
    hint = "think of everything that changes from one step to the next, and what reads it"
    if isinstance(answer, (set, frozenset, list, tuple)):
        got = {norm(x) for x in answer if isinstance(x, str)}
        if "scaler state" not in got and len(got & set(_STATE)) >= 3:
            hint = _SCALER_STATE.hint
    explanations = {
        "autocast state": _AUTOCAST_STATE.hint,
        "last loss": "the loss is recomputed from the weights; no later step reads the old one",
    }
    options = list(CHECKPOINT_OPTIONS)
    return check_set(answer, set(_STATE), options=options, explanations=explanations, hint=hint, show=show)
