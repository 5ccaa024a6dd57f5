"""The loss scalers' argument checks, kept apart from the teaching code of :mod:`amp_lab.scaling`: a scale
is a normal float32, one step from some normal scale stays normal, the interval fits an int32."""

from __future__ import annotations

from ._checks import (
    FLOAT32_MAX,
    FLOAT32_TINY,
    bounded_list,
    check_choice,
    check_float,
    check_int,
    check_scale,
)

MAX_GROWTH_INTERVAL = 2**31 - 1
MIN_BACKOFF_FACTOR = FLOAT32_TINY / FLOAT32_MAX
MAX_GROWTH_FACTOR = FLOAT32_MAX / FLOAT32_TINY
FAULTS = ("clean", "inf", "nan")
MAX_SCHEDULE_STEPS = 1000  # each step runs a tiny model twice: a longer schedule adds nothing


def dynamic(init_scale, growth_factor, backoff_factor, growth_interval) -> dict:
    """A dynamic scaler's (and GradScaler's) four arguments, checked, by name."""
    return {
        "init_scale": check_scale("init_scale", init_scale),
        "growth_factor": check_float("growth_factor", growth_factor, gt=1.0, le=MAX_GROWTH_FACTOR),
        "backoff_factor": check_float("backoff_factor", backoff_factor, ge=MIN_BACKOFF_FACTOR, lt=1.0),
        "growth_interval": check_int(
            "growth_interval", growth_interval, minimum=1, maximum=MAX_GROWTH_INTERVAL
        ),
    }


def schedule(value) -> tuple[str, ...]:
    """A fault schedule of :func:`~amp_lab.scaling.compare_with_grad_scaler`: 1 to 1000 of ``FAULTS``."""
    steps = bounded_list(
        "schedule", value, MAX_SCHEDULE_STEPS, f"a list of {', '.join(FAULTS)}, one per step"
    )
    if not steps:
        raise ValueError("schedule must hold at least one step, got none")
    return tuple(check_choice(f"schedule[{i}]", fault, FAULTS) for i, fault in enumerate(steps))
