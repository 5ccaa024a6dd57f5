"""Exercises of notebook 07 (the AMP training recipe).

The right order of a step, the L4's precision and the checkpoint's contents are derived here (the
order from the pieces' names, the L4 from :func:`amp_lab.amp.choose_amp_dtype` on its facts, the
reference clip from ``torch.amp.GradScaler`` and ``clip_grad_norm_`` themselves), out of the
notebook.  The common wrong answers are diagnosed before the generic comparison.
"""

from __future__ import annotations

import torch

from .. import hardware
from ..amp import choose_amp_dtype
from ..check import check_dtype
from ..check_base import CheckResult, finish, is_placeholder, read_dtype
from ..check_base import norm as _norm
from ..check_items import check_choice, check_function, check_sequence, check_set
from . import Mistake, combine, exercise

__all__ = ["ex1", "ex2", "ex3", "ex4", "STEP_PIECES", "CHECKPOINT_OPTIONS", "L4"]

# --------------------------------------------------------------------------------------------
# Exercise 1: the order of one optimizer step
# --------------------------------------------------------------------------------------------

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


def _positions(answer) -> dict | None:
    try:
        names = [_norm(x) for x in answer]
    except TypeError:
        return None
    wanted = [_norm(x) for x in _ORDER]
    if sorted(map(str, names)) != sorted(wanted):
        return None
    return {x: names.index(_norm(x)) for x in _ORDER}


@exercise(
    1,
    "The order of a step",
    mistakes=[
        Mistake("clip before unscale_", _CLIP_FIRST_HINT),
        Mistake("update before step", _UPDATE_FIRST_HINT),
        Mistake("zero_grad after the backwards", _ZERO_LATE_HINT),
        Mistake("unscale_ before the backwards", _UNSCALE_EARLY_HINT),
    ],
)
def ex1(answer, *, show: bool = True) -> CheckResult:
    """The items of STEP_PIECES (the notebook's ``pieces``) in the order one optimizer step runs them."""
    hint = _ORDER_HINT
    if not is_placeholder(answer) and not isinstance(answer, str):
        pos = _positions(answer)
        if pos is not None:
            if pos[CLIP] < pos[UNSCALE]:
                hint = _CLIP_FIRST_HINT
            elif pos[UNSCALE] < pos[BACKWARDS]:
                hint = _UNSCALE_EARLY_HINT
            elif pos[ZERO_GRAD] > pos[BACKWARDS]:
                hint = _ZERO_LATE_HINT
            elif pos[UPDATE] < pos[STEP]:
                hint = _UPDATE_FIRST_HINT
    return check_sequence(answer, list(_ORDER), name="answer", hint=hint, show=show)


# --------------------------------------------------------------------------------------------
# Exercise 2: the decision flow on an NVIDIA L4
# --------------------------------------------------------------------------------------------

L4 = {"capability": (8, 9), "gpu_name": "NVIDIA L4"}

_CAPABILITY_HINT = (
    "the datasheet's leading figures are not the decision: does compute capability 8.9 come before or after "
    "Ampere's 8.0, and what do Tensor Cores from 8.0 on multiply as fast as float16? (notebook 02's table)"
)
_SCALER_HINT = "only a dtype with a narrow exponent range needs loss scaling: how many exponent bits does your dtype have?"


def _l4_choice():
    """What the recipe's decision flow chooses on the L4 (an AmpChoice)."""
    return choose_amp_dtype(hardware.report_for("cuda", **L4))


@exercise(
    2,
    "The decision flow on another machine",
    mistakes=[
        Mistake("float16 from the datasheet", _CAPABILITY_HINT),
        Mistake("a GradScaler for bfloat16", _SCALER_HINT),
    ],
)
def ex2(answer_dtype, answer_scaler, *, show: bool = True) -> CheckResult:
    """The autocast dtype (``answer_dtype``) and whether an enabled GradScaler is needed
    (``answer_scaler``, True/False) on an NVIDIA L4."""
    choice = _l4_choice()
    got = read_dtype(answer_dtype)
    dtype_hint = _CAPABILITY_HINT
    if got is not None and got != choice.dtype:
        r_dtype = finish(
            "wrong",
            f"`answer_dtype` is {str(got).removeprefix('torch.')}, not what the flow chooses on the L4.",
            [f"hint: {dtype_hint}"],
            show=False,
        )
    else:
        r_dtype = check_dtype(answer_dtype, choice.dtype, name="answer_dtype", hint=dtype_hint, show=False)
    r_scaler = check_choice(
        answer_scaler,
        choice.use_scaler,
        options=[True, False],
        name="answer_scaler",
        hint=_SCALER_HINT if answer_scaler is not choice.use_scaler else None,
        show=False,
    )
    return combine([r_dtype, r_scaler], show=show)


# --------------------------------------------------------------------------------------------
# Exercise 3: unscale, then clip, in place
# --------------------------------------------------------------------------------------------

_CLIP_SCALED_HINT = "the norm was measured on gradients still multiplied by the scale: divide by the scale first, then measure"
_PER_TENSOR_HINT = "clip_grad_norm_ measures one norm over all gradients together, not one norm per tensor"
_NOT_IN_PLACE_HINT = (
    "modify the tensors in place (g.mul_(...), g.div_(...)); rebinding a name changes nothing outside"
)
_CLIP_GENERIC_HINT = "first divide by the scale, then measure the norm of all gradients together"


def _clip_reference(grads, scale, max_norm):
    """torch's own: ``GradScaler.unscale_`` then ``clip_grad_norm_`` on parameters holding ``grads``."""
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    opt = torch.optim.SGD(params, lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    scaler.scale(torch.ones(()))  # a GradScaler creates its scale tensor when it first scales
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    for p, g in zip(params, grads, strict=True):
        g.copy_(p.grad)


def _clip_scaled(grads, scale, max_norm):  # the mistake: clip the scaled gradients, then unscale
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = max_norm / (total + 1e-6)
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


def _clip_cases():
    """The cases exercise 3 runs: gradient lists above and below max_norm (seeded)."""
    gen = torch.Generator().manual_seed(0)
    return [
        ([torch.randn(4, 3, generator=gen) * 2**16, torch.randn(5, generator=gen) * 2**16], 2.0**16, 1.0),
        ([torch.randn(6, generator=gen) * 2**10], 2.0**10, 100.0),  # norm below max_norm: no clipping
    ]


def _same_as(fn, wrong) -> bool:
    """Does the learner's ``fn`` do what the known mistake ``wrong`` does (and not the reference) on every case?"""
    for grads, scale, max_norm in _clip_cases():
        mine, theirs, ref = ([g.clone() for g in grads] for _ in range(3))
        try:
            if fn(mine, scale, max_norm) is not None:
                return False
        except Exception:  # the learner's code: the generic check reports it
            return False
        wrong(theirs, scale, max_norm)
        _clip_reference(ref, scale, max_norm)
        if not all(torch.allclose(a, b, rtol=1e-5, atol=0) for a, b in zip(mine, theirs, strict=True)):
            return False
    return True


def _unchanged(fn) -> bool:
    """Does ``fn`` leave the gradients as they were (a skeleton, or one that rebinds names)?"""
    grads, scale, max_norm = _clip_cases()[0]
    mine = [g.clone() for g in grads]
    try:
        fn(mine, scale, max_norm)
    except Exception:
        return False
    return all(torch.equal(a, b) for a, b in zip(mine, grads, strict=True))


@exercise(
    3,
    "Write unscale_and_clip_",
    mistakes=[
        Mistake("clip before unscaling", _CLIP_SCALED_HINT),
        Mistake("a norm per tensor", _PER_TENSOR_HINT),
    ],
)
def ex3(answer, *, show: bool = True) -> CheckResult:
    """``answer`` is the learner's ``unscale_and_clip_(grads, scale, max_norm)``; compared with
    GradScaler.unscale_ then clip_grad_norm_."""
    if callable(answer):
        if _same_as(answer, _clip_scaled):
            return finish(
                "wrong",
                "unscale_and_clip_ does not match unscale_ then clip_grad_norm_.",
                [f"hint: {_CLIP_SCALED_HINT}"],
                show=show,
            )
        if _same_as(answer, _per_tensor):
            return finish(
                "wrong",
                "unscale_and_clip_ does not match unscale_ then clip_grad_norm_.",
                [f"hint: {_PER_TENSOR_HINT}"],
                show=show,
            )
        if _unchanged(answer):
            return finish(
                "wrong",
                "unscale_and_clip_ left the gradients unchanged.",
                [f"hint: {_NOT_IN_PLACE_HINT}"],
                show=show,
            )
    return check_function(
        answer,
        _clip_reference,
        _clip_cases(),
        name="unscale_and_clip_",
        rtol=1e-6,
        hint=_CLIP_GENERIC_HINT,
        show=show,
    )


# --------------------------------------------------------------------------------------------
# Exercise 4: what a checkpoint must hold
# --------------------------------------------------------------------------------------------

_STATE = ("model weights", "optimizer state", "scaler state", "lr scheduler state", "step number")
CHECKPOINT_OPTIONS = (
    "model weights",
    "optimizer state",
    "scaler state",
    "lr scheduler state",
    "step number",
    "autocast state",
    "last loss",
)

_SCALER_STATE_HINT = (
    "the loss scale and its growth tracker change from step to step: section 6's run that forgot them took "
    "another path after the cut"
)
_SET_HINT = "think of everything that changes from one step to the next, and what reads it"


@exercise(
    4,
    "What a checkpoint must hold",
    mistakes=[
        Mistake("forgetting the scaler state", _SCALER_STATE_HINT),
        Mistake(
            "autocast state",
            "autocast keeps no state between steps: each step enters a fresh autocast region",
        ),
    ],
)
def ex4(answer, *, show: bool = True) -> CheckResult:
    """A set of items from CHECKPOINT_OPTIONS (the notebook's ``options``)."""
    hint = _SET_HINT
    if not is_placeholder(answer) and isinstance(answer, (set, frozenset, list, tuple)):
        try:
            got = {_norm(x) for x in answer}
        except TypeError:
            got = set()
        if "scaler state" not in got and len(got & set(_STATE)) >= 3:
            hint = _SCALER_STATE_HINT
    return check_set(
        answer,
        set(_STATE),
        options=list(CHECKPOINT_OPTIONS),
        explanations={
            "autocast state": "autocast keeps no state between steps: each step enters a fresh autocast region",
            "last loss": "the loss is recomputed from the weights; no later step reads the old one",
        },
        name="answer",
        hint=hint,
        show=show,
    )
