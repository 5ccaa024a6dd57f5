"""The loss scalers' argument checks, kept apart from the teaching code of :mod:`amp_lab.scaling`.

Every scale is a *normal* float32 (from 2**-126 to float32's max), checked as the float32 it
becomes (``_checks.check_scale``): at a subnormal scale ``1/S`` overflows float32 to inf, and at
0 the scaled loss is 0.  The factors are bounded so that one step from *some* normal scale stays
normal, and the growth interval fits GradScaler's int32 counter.  Bad arguments raise
``ValueError`` (``TypeError`` for a wrong type) naming the argument, before anything is changed.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ._checks import (
    FLOAT32_MAX,
    FLOAT32_TINY,
    ArgumentTypeError,
    check_float,
    check_instance,
    check_int,
    check_scale,
)

# GradScaler counts clean steps in an int32 tensor: a longer interval could never be reached.
MAX_GROWTH_INTERVAL = 2**31 - 1
# A backoff below FLOAT32_TINY / FLOAT32_MAX (about 2**-254) sends even float32's largest scale
# below the normal range, and a growth above FLOAT32_MAX / FLOAT32_TINY overflows even from the smallest.
MIN_BACKOFF_FACTOR = FLOAT32_TINY / FLOAT32_MAX
MAX_GROWTH_FACTOR = FLOAT32_MAX / FLOAT32_TINY
FAULTS = ("clean", "inf", "nan")
MAX_SCHEDULE_STEPS = 1000  # each step runs a tiny model twice: a longer schedule adds nothing


class EmptyStateDictError(RuntimeError, ValueError):
    """An empty state dict: GradScaler raises RuntimeError for it; the course's contract says ValueError."""


def growth_factor(name: str, value) -> float:
    return check_float(name, value, gt=1.0, le=MAX_GROWTH_FACTOR)


def backoff_factor(name: str, value) -> float:
    return check_float(name, value, ge=MIN_BACKOFF_FACTOR, lt=1.0)


def growth_interval(name: str, value) -> int:
    return check_int(name, value, minimum=1, maximum=MAX_GROWTH_INTERVAL)


def optimizer(value) -> torch.optim.Optimizer:
    return check_instance("optimizer", value, torch.optim.Optimizer, "a torch.optim.Optimizer")


def outputs(value) -> None:
    """What ``scale()`` accepts: a floating-point tensor, or a list/tuple of them (nested)."""
    if isinstance(value, (list, tuple)):
        for out in value:
            outputs(out)
        return
    if not isinstance(value, torch.Tensor):
        raise ArgumentTypeError(
            f"outputs must be a tensor or a list/tuple of tensors, got {type(value).__name__}: {value!r:.80}"
        )
    if not value.is_floating_point():
        raise ArgumentTypeError(
            f"outputs must be floating-point tensors (a loss), got one of dtype {value.dtype}"
        )


def new_scale(value) -> float:
    """``update(new_scale)``'s value: a number or a one-element real tensor, as a normal float32."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool or value.is_complex():
            raise ArgumentTypeError(
                f"new_scale must be a real number or tensor, got a tensor of dtype {value.dtype}"
            )
        if value.numel() != 1:
            raise ValueError(
                f"new_scale must be a number or a one-element tensor, got a tensor of shape {tuple(value.shape)}"
            )
        value = value.detach().item()
    return check_scale("new_scale", value)


def interval_above_tracker(value: int, tracker: int) -> int:
    """A new ``growth_interval`` must exceed the clean steps already counted (GradScaler compares with ==)."""
    if tracker >= value:
        raise ValueError(
            f"growth_interval={value} is not above the {tracker} clean steps already counted: "
            f"the scale would never grow again (GradScaler compares the count with ==); choose more than {tracker}"
        )
    return value


def state_dict(owner: str, value, checks: dict) -> dict:
    """Every entry of a scaler's ``state_dict`` checked (exactly the keys of ``checks``), or an error."""
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(f"state_dict must be a dict, got {type(value).__name__}: {value!r:.80}")
    if len(value) == 0:
        raise EmptyStateDictError(
            "state_dict is empty (was it saved from a disabled GradScaler?); "
            f"a {owner} state has the keys: {', '.join(checks)}"
        )
    expected = ", ".join(repr(k) for k in checks)
    unknown = [k for k in value if k not in checks]
    if unknown:
        raise ValueError(
            f"state_dict has unknown key(s) {', '.join(repr(k) for k in unknown)}; "
            f"a {owner} state has exactly the keys {expected}"
        )
    missing = [k for k in checks if k not in value]
    if missing:
        raise ValueError(
            f"state_dict lacks the key(s) {', '.join(repr(k) for k in missing)}; "
            f"a {owner} state has exactly the keys {expected}"
        )
    state = {key: check(f"state_dict[{key!r}]", value[key]) for key, check in checks.items()}
    if "_growth_tracker" in state and state["_growth_tracker"] >= state["growth_interval"]:
        raise ValueError(
            f"state_dict['_growth_tracker']={state['_growth_tracker']} must be below "
            f"state_dict['growth_interval']={state['growth_interval']}: the tracker counts clean steps "
            "since the scale last changed, and GradScaler compares it with ==, so at or past the interval "
            "the scale would never grow again"
        )
    return state


STATIC_STATE = {"scale": check_scale}
# GradScaler's five entries, in the order of its state_dict().
DYNAMIC_STATE = {
    "scale": check_scale,
    "growth_factor": growth_factor,
    "backoff_factor": backoff_factor,
    "growth_interval": growth_interval,
    "_growth_tracker": lambda name, value: check_int(name, value, minimum=0),
}


def schedule(value) -> tuple[str, ...]:
    """A fault schedule of :func:`~amp_lab.scaling.compare_with_grad_scaler`: 1 to 1000 of ``FAULTS``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ArgumentTypeError(
            f"schedule must be a list of {', '.join(repr(f) for f in FAULTS)}, one per step, got "
            f"{type(value).__name__}: {value!r:.60}"
        )
    if not 1 <= len(value) <= MAX_SCHEDULE_STEPS:
        raise ValueError(f"schedule must hold 1 to {MAX_SCHEDULE_STEPS} steps, got {len(value)}")
    for i, fault in enumerate(value):
        if fault not in FAULTS or not isinstance(fault, str):
            raise ValueError(
                f"schedule[{i}]={fault!r:.40} is not a fault; choose one of: {', '.join(FAULTS)}"
            )
    return tuple(value)


def underflow_message(scale: float, factor: float, backed_off: float) -> str:
    return (
        f"update(): backing off from scale {scale!r} by backoff_factor={factor!r} gives "
        f"{backed_off!r} in float32, below float32's smallest normal number 2**-126 ({FLOAT32_TINY:.4g}), "
        "where 1/scale overflows to inf and the scale soon rounds to 0; nothing was changed. Steps that are "
        "skipped again and again at ever smaller scales mean the loss or the forward pass itself is inf or "
        "NaN: look there (torch.amp.GradScaler would carry on silently into subnormal scales and then 0, and "
        "its unscaled gradients would turn into inf/NaN)."
    )
