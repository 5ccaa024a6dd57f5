"""Loss scaling from scratch (taught in ``04_loss_scaling_from_scratch``).

FP16 gradients smaller than 2**-24 become zero.  Loss scaling multiplies the loss by a
factor ``S`` before ``backward()``, so every gradient is ``S`` times larger while it passes
through FP16, and divides the FP32 gradients by ``S`` again before the optimizer uses them.

* :class:`StaticLossScaler` is the idea in its barest form: one fixed ``S``.  Too small and
  gradients still vanish; too large and they overflow to inf, and the optimizer writes NaN
  into the weights.
* :class:`DynamicLossScaler` is what ``torch.amp.GradScaler`` does: skip the optimizer step
  when a gradient is inf or NaN and halve ``S``; double ``S`` after ``growth_interval``
  clean steps in a row.  It reproduces ``torch.amp.GradScaler`` bit for bit (the tests
  prove it): the same scale after every ``update()``, the same skipped steps, the same
  parameters, the same ``state_dict``.

:func:`compare_with_grad_scaler` runs any scaler with these methods beside ``torch.amp.GradScaler``
on a fault schedule (steps whose gradients hold an inf or a NaN) and reports the first step where
they differ: the notebook's exercises check the learner's ``MyStaticScaler`` and
``MyDynamicScaler`` with it.

Both have GradScaler's methods: ``scale(loss)``, ``unscale_(optimizer)``,
``step(optimizer)``, ``update()``, ``get_scale()``, ``state_dict()``, ``load_state_dict()``.
The usual loop is::

    scaler.scale(loss).backward()
    scaler.unscale_(opt)                      # optional: only to look at or clip gradients
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)                          # skipped when a gradient is inf/NaN
    scaler.update()

Differences from GradScaler, all deliberate: the scale lives in a Python float rather than a
tensor on the GPU (clearer to read; it costs no extra synchronisation, because ``step()``
must read ``found_inf`` on the host anyway), ``step()`` returns whether the optimizer
stepped, misuse raises ``RuntimeError`` with a readable message where GradScaler uses
``assert``, and fused optimizers get already-unscaled gradients instead of unscaling in
their own kernel.

Every scale is a *normal* float32 (from 2**-126 to float32's max), checked as the float32 it
becomes (``_checks.check_scale``): at a subnormal scale ``1/S`` overflows float32 to inf, and at
0 the scaled loss is 0.  GradScaler checks nothing: given ``init_scale=1e-50`` it stores 0, and
backing off again and again (every step inf/NaN) it walks silently through the subnormals to 0,
after which its ``1/S`` is inf, the unscaled gradients are NaN and the optimizer writes them into
the weights.  Ours matches it bit for bit while the scale stays normal; the one backoff that
would leave the normal range raises :class:`ScaleUnderflowError` instead (nothing changed), and
a scale a learner sets (``init_scale``, ``update(new_scale)``, ``load_state_dict``) outside that
range raises ``ValueError``.  Bad arguments raise ``ValueError`` (``TypeError`` for a wrong type)
naming the argument, before anything is changed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from numbers import Real
from typing import NamedTuple

import numpy as np
import torch

from ._checks import FLOAT32_TINY, ArgumentTypeError, check_float, check_instance, check_int, check_scale
from .device import float64_on_cpu, get_device, seeded

__all__ = [
    "DynamicLossScaler",
    "ScaleRecord",
    "ScaleUnderflowError",
    "StaticLossScaler",
    "check_and_unscale_",
    "compare_with_grad_scaler",
    "ScalerComparison",
    "to_float32",
]

FLOAT32_MAX = torch.finfo(torch.float32).max
# GradScaler counts clean steps in an int32 tensor: a longer interval could never be reached.
MAX_GROWTH_INTERVAL = 2**31 - 1
# Factors for which one step from *some* normal float32 scale stays normal: a backoff below
# FLOAT32_TINY / FLOAT32_MAX (about 2**-254) sends even float32's largest scale below the normal
# range, and a growth above FLOAT32_MAX / FLOAT32_TINY overflows even from the smallest one.
MIN_BACKOFF_FACTOR = FLOAT32_TINY / FLOAT32_MAX
MAX_GROWTH_FACTOR = FLOAT32_MAX / FLOAT32_TINY

# The stages of one optimizer between two update() calls, as in GradScaler.
READY, UNSCALED, STEPPED = "ready", "unscaled", "stepped"


class ScaleRecord(NamedTuple):
    """One iteration in a scaler's ``history``: the scale it used and what happened."""

    step: int  # iteration index (number of update() calls before this one)
    scale: float  # the loss scale used in this iteration
    found_inf: bool  # some gradient was inf or NaN
    skipped: bool  # the optimizer step was skipped


class ScaleUnderflowError(RuntimeError):
    """A backoff would take the loss scale below float32's normal range (2**-126).

    It happens only after a long run of steps whose gradients were all inf or NaN, at every scale
    tried: the trouble is then not the scale but an inf/NaN in the loss or the forward pass.
    ``torch.amp.GradScaler`` carries on silently into subnormal scales and then 0."""


class _EmptyStateDictError(RuntimeError, ValueError):
    """An empty state dict: GradScaler raises RuntimeError for it; the course's contract says ValueError."""


def to_float32(x: float) -> float:
    """Round a Python float (a double) to the nearest float32, like C++ ``static_cast<float>``.

    Overflow gives ``inf``.  GradScaler keeps its scale in a float32 tensor, so every scale
    we store goes through this function.
    """
    if isinstance(x, bool) or not isinstance(x, Real):
        raise ArgumentTypeError(f"x must be a real number, got {type(x).__name__}: {x!r:.80}")
    try:
        x = float(x)
    except OverflowError:  # an int beyond float64's range
        raise ValueError(f"x is an integer of {x.bit_length()} bits, beyond float64's range") from None
    return torch.tensor(x, dtype=torch.float64, device="cpu").float().item()


def _check_scale(name: str, value) -> float:
    """A loss scale as the float32 it becomes: a normal float32 (``_checks.check_scale``)."""
    return check_scale(name, value)


def _check_growth_factor(name: str, value) -> float:
    return check_float(name, value, gt=1.0, le=MAX_GROWTH_FACTOR)


def _check_backoff_factor(name: str, value) -> float:
    return check_float(name, value, ge=MIN_BACKOFF_FACTOR, lt=1.0)


def _check_growth_interval(name: str, value) -> int:
    return check_int(name, value, minimum=1, maximum=MAX_GROWTH_INTERVAL)


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):  # numpy's bool counts; 1 or "no" do not
        raise ArgumentTypeError(f"{name} must be True or False, got {type(value).__name__}: {value!r:.80}")
    return bool(value)


def _check_optimizer(optimizer) -> torch.optim.Optimizer:
    return check_instance("optimizer", optimizer, torch.optim.Optimizer, "a torch.optim.Optimizer")


def _check_outputs(outputs) -> None:
    """What ``scale()`` accepts: a floating-point tensor, or a list/tuple of them (nested)."""
    if isinstance(outputs, (list, tuple)):
        for out in outputs:
            _check_outputs(out)
        return
    if not isinstance(outputs, torch.Tensor):
        raise ArgumentTypeError(
            f"outputs must be a tensor or a list/tuple of tensors, got {type(outputs).__name__}: {outputs!r:.80}"
        )
    if not outputs.is_floating_point():
        raise ArgumentTypeError(
            f"outputs must be floating-point tensors (a loss), got one of dtype {outputs.dtype}"
        )


def _check_new_scale(new_scale) -> float:
    """``update(new_scale)``'s value: a number or a one-element real tensor, as a normal float32."""
    if isinstance(new_scale, torch.Tensor):
        if new_scale.dtype == torch.bool or new_scale.is_complex():
            raise ArgumentTypeError(
                f"new_scale must be a real number or tensor, got a tensor of dtype {new_scale.dtype}"
            )
        if new_scale.numel() != 1:
            raise ValueError(
                f"new_scale must be a number or a one-element tensor, got a tensor of shape {tuple(new_scale.shape)}"
            )
        new_scale = new_scale.detach().item()
    return _check_scale("new_scale", new_scale)


def _check_unscale_arguments(grads, inv_scale) -> None:
    if not isinstance(grads, (list, tuple)):
        raise ArgumentTypeError(f"grads must be a list or tuple of tensors, got {type(grads).__name__}")
    check_instance("inv_scale", inv_scale, torch.Tensor, "a 0-dim float32 tensor")
    if inv_scale.dtype != torch.float32 or inv_scale.dim() != 0:
        raise ValueError(
            f"inv_scale must be a 0-dim float32 tensor (1/scale, as GradScaler's kernel takes it), "
            f"got dtype {inv_scale.dtype} and shape {tuple(inv_scale.shape)}"
        )
    for i, g in enumerate(grads):
        if not isinstance(g, torch.Tensor) or not g.is_floating_point():
            what = f"dtype {g.dtype}" if isinstance(g, torch.Tensor) else type(g).__name__
            raise ArgumentTypeError(f"grads[{i}] must be a floating-point tensor, got {what}")
        if g.device != inv_scale.device:
            raise ValueError(
                f"grads[{i}] is on {g.device} but inv_scale on {inv_scale.device}: put them on one device"
            )


def _grads_by_device_and_dtype(optimizer) -> dict:
    """The optimizer's gradients, grouped by (device, dtype) so each group is one foreach call."""
    groups = defaultdict(list)
    for group in optimizer.param_groups:
        for param in group["params"]:
            grad = param.grad
            if grad is None:
                continue
            if grad.dtype == torch.float16:
                raise ValueError(
                    "Attempting to unscale FP16 gradients: the optimizer would update FP16 weights, "
                    "and small updates would be lost to rounding. Keep the parameters in FP32 and run "
                    "the forward pass under torch.autocast instead of calling model.half()."
                )
            if grad.is_sparse:
                grad = grad._values()  # the stored non-zeros; the rest are zero anyway
            groups[(grad.device, grad.dtype)].append(grad)
    return groups


def check_and_unscale_(grads: list[torch.Tensor], inv_scale: torch.Tensor) -> torch.Tensor:
    """Multiply ``grads`` by ``inv_scale`` in place; return a bool tensor: was any element inf/NaN?

    Our version of ``torch._amp_foreach_non_finite_check_and_unscale_``, with three foreach
    calls (each one call for all tensors) where the kernel fuses everything into one pass.
    The check looks at the *scaled* gradients, before the multiplication, as the kernel does.  All ``grads`` share one device and dtype; ``inv_scale`` is a 0-dim float32
    tensor on that device (multiplying a BF16 tensor by a float32 tensor computes in float32
    and rounds once, exactly like the kernel; a Python float would not).
    """
    _check_unscale_arguments(grads, inv_scale)  # a bad argument is refused before any gradient changes
    # The largest |g| of each tensor is inf or NaN exactly when one of its elements is (max
    # propagates NaN); unlike a sum or a 2-norm it cannot overflow on finite values.
    nonempty = [g for g in grads if g.numel() > 0]  # an empty tensor has no max
    if nonempty:
        max_abs = torch.stack(torch._foreach_max(torch._foreach_abs(nonempty)))
        found_inf = ~torch.isfinite(max_abs).all()
    else:
        found_inf = torch.zeros((), dtype=torch.bool, device=inv_scale.device)
    if grads:  # foreach ops refuse an empty list
        torch._foreach_mul_(grads, inv_scale)
    return found_inf


class StaticLossScaler:
    """Multiply the loss by a fixed ``scale``; divide the gradients by it before the step.

    The simplest loss scaler, and a cautionary one: ``step()`` always steps, so an inf or
    NaN gradient (scale too large) goes straight into the weights.  ``found_inf`` is still
    measured and kept in ``history`` so you can see when it happened.
    """

    def __init__(self, scale: float, *, record_history: bool = True):
        self._init_scale = _check_scale("scale", scale)
        self._scale: float | None = None  # float32 value, set on the first scale() call
        self._states: dict[int, dict] = defaultdict(self._fresh_state)
        self._num_updates = 0
        self.record_history = _check_bool("record_history", record_history)
        self.history: list[ScaleRecord] = []

    # -- the four calls of a training step ---------------------------------------------

    def scale(self, outputs):
        """Return ``outputs * scale`` (a tensor, or a list/tuple of tensors)."""
        _check_outputs(outputs)  # the whole structure, before anything is scaled
        return self._scale_checked(outputs)

    def _scale_checked(self, outputs):
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self._scale_checked(out) for out in outputs)
        if self._scale is None:
            self._scale = to_float32(self._init_scale)  # GradScaler stores it as float32
        # A float32 0-dim tensor, not a Python float: for FP16/BF16 outputs the product is
        # then computed in float32 and rounded once, exactly as GradScaler does it.
        return outputs * torch.full((), self._scale, dtype=torch.float32, device=outputs.device)

    def unscale_(self, optimizer) -> None:
        """Divide the optimizer's gradients by the scale, in place, and look for inf/NaN.

        Call it before anything that reads gradient values (``clip_grad_norm_``); otherwise
        ``step()`` calls it.  At most once per optimizer between two ``update()`` calls.
        """
        _check_optimizer(optimizer)
        self._require_scale("unscale_")
        state = self._states[id(optimizer)]
        if state["stage"] == UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if state["stage"] == STEPPED:
            raise RuntimeError("unscale_() is being called after step().")

        # 1/scale in float64, rounded to float32, as GradScaler computes it.
        inv_scale = to_float32(1.0 / self._scale)
        found_inf = False
        for (device, _dtype), grads in _grads_by_device_and_dtype(optimizer).items():
            inv = torch.full((), inv_scale, dtype=torch.float32, device=device)
            found_inf |= bool(check_and_unscale_(grads, inv))  # bool(): one host sync per group
        state["found_inf"] = found_inf
        state["stage"] = UNSCALED

    def step(self, optimizer, *args, **kwargs) -> bool:
        """Unscale (unless already done) and call ``optimizer.step()``; return whether it stepped."""
        state = self._begin_step(optimizer, kwargs)
        optimizer.step(*args, **kwargs)
        state["stage"] = STEPPED
        return True

    def update(self) -> None:
        """End the iteration: record it in ``history`` and get ready for the next one."""
        found_inf = self._consume_found_inf()
        self._record(found_inf, skipped=False)

    # -- inspection and checkpoints ---------------------------------------------------

    def get_scale(self) -> float:
        """The current scale as a Python float."""
        return self._init_scale if self._scale is None else self._scale

    def state_dict(self) -> dict:
        return {"scale": self.get_scale()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a :meth:`state_dict`: exactly its keys, each checked before anything changes."""
        self._load_checked(self._check_state_dict(state_dict))

    # The entries of a state dict and their checks, in state_dict()'s order.
    _STATE_CHECKS = {"scale": _check_scale}

    def _check_state_dict(self, state_dict) -> dict:
        """Every entry of ``state_dict`` checked (the keys exactly :attr:`_STATE_CHECKS`'s), or an error."""
        if not isinstance(state_dict, Mapping):
            raise ArgumentTypeError(
                f"state_dict must be a dict, got {type(state_dict).__name__}: {state_dict!r:.80}"
            )
        if len(state_dict) == 0:
            raise _EmptyStateDictError(
                "state_dict is empty (was it saved from a disabled GradScaler?); "
                f"a {type(self).__name__} state has the keys: {', '.join(self._STATE_CHECKS)}"
            )
        expected = ", ".join(repr(k) for k in self._STATE_CHECKS)
        unknown = [k for k in state_dict if k not in self._STATE_CHECKS]
        if unknown:
            raise ValueError(
                f"state_dict has unknown key(s) {', '.join(repr(k) for k in unknown)}; "
                f"a {type(self).__name__} state has exactly the keys {expected}"
            )
        missing = [k for k in self._STATE_CHECKS if k not in state_dict]
        if missing:
            raise ValueError(
                f"state_dict lacks the key(s) {', '.join(repr(k) for k in missing)}; "
                f"a {type(self).__name__} state has exactly the keys {expected}"
            )
        return {
            key: check(f"state_dict[{key!r}]", state_dict[key]) for key, check in self._STATE_CHECKS.items()
        }

    def _load_checked(self, state: dict) -> None:
        self._init_scale = state["scale"]
        if self._scale is not None:
            self._scale = to_float32(self._init_scale)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scale={self.get_scale()!r})"

    # -- bookkeeping shared with DynamicLossScaler ------------------------------------

    @staticmethod
    def _fresh_state() -> dict:
        return {"stage": READY, "found_inf": None}

    def _require_scale(self, funcname: str) -> None:
        if self._scale is None:
            raise RuntimeError(
                f"{funcname}() was called before scale(): call scaler.scale(loss).backward() first."
            )

    def _begin_step(self, optimizer, kwargs) -> dict:
        _check_optimizer(optimizer)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not supported by loss scalers.")
        self._require_scale("step")
        state = self._states[id(optimizer)]
        if state["stage"] == STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == READY:
            self.unscale_(optimizer)
        return state

    def _found_inf(self, required: bool = True) -> bool:
        """Any inf/NaN in any optimizer this iteration?  (Changes nothing.)"""
        self._require_scale("update")
        checked = [s["found_inf"] for s in self._states.values() if s["found_inf"] is not None]
        if required and not checked:
            raise RuntimeError("update() was called before any unscale_() or step() in this iteration.")
        return any(checked)

    def _consume_found_inf(self, required: bool = True) -> bool:
        """Any inf/NaN in any optimizer this iteration?  Then reset for the next iteration."""
        found_inf = self._found_inf(required)
        self._states = defaultdict(self._fresh_state)
        return found_inf

    def _end_iteration(self, found_inf: bool, skipped: bool) -> None:
        """Record the iteration in ``history`` and reset every optimizer for the next one."""
        self._states = defaultdict(self._fresh_state)
        self._record(found_inf, skipped)

    def _record(self, found_inf: bool, skipped: bool) -> None:
        if self.record_history:
            self.history.append(ScaleRecord(self._num_updates, self._scale, found_inf, skipped))
        self._num_updates += 1


class DynamicLossScaler(StaticLossScaler):
    """GradScaler's algorithm: skip steps with inf/NaN gradients and adapt the scale.

    After an iteration with an inf or NaN gradient, ``update()`` multiplies the scale by
    ``backoff_factor``; after ``growth_interval`` clean iterations in a row it multiplies it
    by ``growth_factor`` (unless that would overflow float32: then it keeps the scale).  A
    backoff that would fall below float32's normal range raises :class:`ScaleUnderflowError`
    (GradScaler goes on silently into subnormals and 0).  ``growth_factor`` is in
    (1, :data:`MAX_GROWTH_FACTOR`], ``backoff_factor`` in [:data:`MIN_BACKOFF_FACTOR`, 1),
    ``growth_interval`` from 1 to :data:`MAX_GROWTH_INTERVAL`; each is checked when set.
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        *,
        record_history: bool = True,
    ):
        # Every argument is checked before the scaler is built.
        init_scale = _check_scale("init_scale", init_scale)
        growth_factor = _check_growth_factor("growth_factor", growth_factor)
        backoff_factor = _check_backoff_factor("backoff_factor", backoff_factor)
        growth_interval = _check_growth_interval("growth_interval", growth_interval)
        super().__init__(init_scale, record_history=record_history)
        self._growth_tracker = 0  # clean steps in a row since the last change of scale
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval

    # The factors and the interval are checked whenever they are set, so update() can trust them.

    @property
    def growth_factor(self) -> float:
        """The scale is multiplied by it after ``growth_interval`` clean steps (> 1)."""
        return self._growth_factor

    @growth_factor.setter
    def growth_factor(self, value) -> None:
        self._growth_factor = _check_growth_factor("growth_factor", value)

    @property
    def backoff_factor(self) -> float:
        """The scale is multiplied by it after a step with an inf/NaN gradient (between 0 and 1)."""
        return self._backoff_factor

    @backoff_factor.setter
    def backoff_factor(self, value) -> None:
        self._backoff_factor = _check_backoff_factor("backoff_factor", value)

    @property
    def growth_interval(self) -> int:
        """Clean steps in a row after which the scale grows."""
        return self._growth_interval

    @growth_interval.setter
    def growth_interval(self, value) -> None:
        value = _check_growth_interval("growth_interval", value)
        if self._growth_tracker >= value:
            raise ValueError(
                f"growth_interval={value} is not above the {self._growth_tracker} clean steps already counted: "
                f"the scale would never grow again (GradScaler compares the count with ==); choose more than "
                f"{self._growth_tracker}"
            )
        self._growth_interval = value

    def step(self, optimizer, *args, **kwargs) -> bool:
        """Unscale (unless already done); call ``optimizer.step()`` only if all gradients are finite."""
        state = self._begin_step(optimizer, kwargs)
        stepped = not state["found_inf"]
        if stepped:
            optimizer.step(*args, **kwargs)
        state["stage"] = STEPPED
        return stepped

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Back off after inf/NaN, grow after ``growth_interval`` clean steps; or set ``new_scale``."""
        if new_scale is not None:
            new_scale = _check_new_scale(new_scale)  # a bad value is refused before anything else
        found_inf = self._found_inf(required=new_scale is None)
        scale, tracker = self._scale, self._growth_tracker  # the new values, computed before anything changes
        if new_scale is not None:
            # Like GradScaler: the value replaces the scale, the growth tracker is untouched.
            scale = to_float32(new_scale)
        elif found_inf:
            # The product is computed in double and rounded to float32, as in the C++ kernel.
            scale, tracker = to_float32(self._scale * self.backoff_factor), 0
            if scale < FLOAT32_TINY:  # GradScaler would go on into subnormals and 0: we stop
                raise ScaleUnderflowError(self._underflow_message(scale))
        else:
            successful = self._growth_tracker + 1
            # "==", not ">=": GradScaler's kernel compares for equality.
            if successful == self.growth_interval:
                grown = to_float32(self._scale * self.growth_factor)
                if math.isfinite(grown):  # never grow past float32's range to inf
                    scale = grown
                tracker = 0
            else:
                tracker = successful
        self._end_iteration(found_inf, skipped=found_inf)
        self._scale, self._growth_tracker = scale, tracker

    def _underflow_message(self, backed_off: float) -> str:
        return (
            f"update(): backing off from scale {self._scale!r} by backoff_factor={self.backoff_factor!r} gives "
            f"{backed_off!r} in float32, below float32's smallest normal number 2**-126 ({FLOAT32_TINY:.4g}), "
            "where 1/scale overflows to inf and the scale soon rounds to 0; nothing was changed. Steps that are "
            "skipped again and again at ever smaller scales mean the loss or the forward pass itself is inf or "
            "NaN: look there (torch.amp.GradScaler would carry on silently into subnormal scales and then 0, and "
            "its unscaled gradients would turn into inf/NaN)."
        )

    def state_dict(self) -> dict:
        """The same five entries as ``torch.amp.GradScaler.state_dict()`` (each loads into the other)."""
        return {
            "scale": self.get_scale(),
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    # GradScaler's five entries, in the order of its state_dict(); "_growth_tracker" is checked
    # against the interval in _check_state_dict.
    _STATE_CHECKS = {
        "scale": _check_scale,
        "growth_factor": _check_growth_factor,
        "backoff_factor": _check_backoff_factor,
        "growth_interval": _check_growth_interval,
        "_growth_tracker": lambda name, value: check_int(name, value, minimum=0),
    }

    def _check_state_dict(self, state_dict) -> dict:
        state = super()._check_state_dict(state_dict)
        if state["_growth_tracker"] >= state["growth_interval"]:
            raise ValueError(
                f"state_dict['_growth_tracker']={state['_growth_tracker']} must be below "
                f"state_dict['growth_interval']={state['growth_interval']}: the tracker counts clean steps "
                "since the scale last changed, and GradScaler compares it with ==, so at or past the interval "
                "the scale would never grow again"
            )
        return state

    def _load_checked(self, state: dict) -> None:
        super()._load_checked(state)
        self._growth_factor = state["growth_factor"]
        self._backoff_factor = state["backoff_factor"]
        self._growth_interval = state["growth_interval"]
        self._growth_tracker = state["_growth_tracker"]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(scale={self.get_scale()!r}, growth_factor={self.growth_factor!r}, "
            f"backoff_factor={self.backoff_factor!r}, growth_interval={self.growth_interval!r})"
        )


# --------------------------------------------------------------------------------------------
# A scaler beside torch.amp.GradScaler, step by step (notebook 04's exercises)
# --------------------------------------------------------------------------------------------

FAULTS = ("clean", "inf", "nan")
MAX_SCHEDULE_STEPS = 1000  # each step runs a tiny model twice: a longer schedule adds nothing
# The comparison's loss is multiplied by LOSS_FACTOR so that even a scale near float32's max
# (2**127) gives finite scaled gradients: every inf or NaN in a run is one the schedule injected.
# LR makes up for it, so a step still moves the parameters by about 0.01 of their size.
LOSS_FACTOR = 2.0**-40
LR = 2.0**33


class ScalerComparison(NamedTuple):
    """What :func:`compare_with_grad_scaler` found.

    ``same``: the scaler matched GradScaler at every step.  Otherwise ``step`` is the first step
    where they differ, ``fault`` what the schedule did to that step's gradients, ``what`` what
    differed (``"scaled loss"``, ``"skipped"``, ``"scale"``, ``"parameters"``, or ``"error"`` when
    the scaler raised or returned something unusable), ``mine`` and ``theirs`` the two values
    (for ``"error"``, ``mine`` is the error text), and ``call`` the method where it happened.
    ``scales``/``skipped`` are GradScaler's scale after each update and the steps it skipped, up
    to the step compared last.
    """

    same: bool
    steps: int
    step: int | None = None
    fault: str | None = None
    what: str | None = None
    mine: object = None
    theirs: object = None
    call: str | None = None
    scales: tuple = ()
    skipped: tuple = ()

    def describe(self) -> str:
        """One line in words: identical, or the first difference."""
        if self.same:
            return f"identical to GradScaler on all {self.steps} steps (first difference: none)"
        where = f"step {self.step} (gradients {self.fault})"
        if self.what == "error":
            return f"first difference at {where}: {self.call} {self.mine}"
        if self.what == "parameters":
            return f"first difference at {where}: the parameters differ, by up to {self.mine:.2g} of their size"
        show = _show_value
        return f"first difference at {where}: {self.what}: yours {show(self.mine)}, GradScaler's {show(self.theirs)}"

    def __str__(self) -> str:
        return self.describe()


def _show_value(x) -> str:
    if isinstance(x, bool):
        return "skipped" if x else "stepped"
    if isinstance(x, float):
        if x != 0 and math.isfinite(x) and math.log2(abs(x)).is_integer():
            return f"2**{int(math.log2(abs(x)))}" if x > 0 else f"-2**{int(math.log2(-x))}"
        return repr(x)
    return f"{x!r:.80}"


class _CountingSGD(torch.optim.SGD):
    """Plain SGD that counts its steps: a skipped step is one ``step()`` was not called for."""

    def __init__(self, params, lr):
        super().__init__(params, lr=lr)
        self.num_steps = 0

    def step(self, closure=None):
        self.num_steps += 1
        return super().step(closure)


def _check_schedule(schedule) -> tuple[str, ...]:
    if isinstance(schedule, (str, bytes)) or not isinstance(schedule, (list, tuple)):
        raise ArgumentTypeError(
            f"schedule must be a list of {', '.join(repr(f) for f in FAULTS)}, one per step, got "
            f"{type(schedule).__name__}: {schedule!r:.60}"
        )
    if not 1 <= len(schedule) <= MAX_SCHEDULE_STEPS:
        raise ValueError(f"schedule must hold 1 to {MAX_SCHEDULE_STEPS} steps, got {len(schedule)}")
    for i, fault in enumerate(schedule):
        if fault not in FAULTS or not isinstance(fault, str):
            raise ValueError(f"schedule[{i}]={fault!r:.40} is not a fault; choose one of: {', '.join(FAULTS)}")
    return tuple(schedule)


def _as_scale_value(value) -> float | None:
    """A scale a scaler reported, as a Python float (None when it is no number)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex() and value.dtype != torch.bool:
        return float64_on_cpu(value).item()
    if isinstance(value, Real) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return math.inf
    return None


def _setup(device: torch.device):
    with seeded(0):
        model = torch.nn.Linear(4, 3).to(device)
        X = torch.randn(8, 4).to(device)
    return model, X


def _loss(model, X) -> torch.Tensor:
    return model(X).square().mean() * LOSS_FACTOR


def _inject(model, fault: str) -> None:
    if fault != "clean":
        with torch.no_grad():
            model.weight.grad.view(-1)[0] = math.inf if fault == "inf" else math.nan


class _Refused(Exception):
    """The learner's scaler raised or returned something unusable: (call, text)."""


def _run_step(scaler, model, opt, X, fault):
    """One iteration with ``scaler``: (scaled loss, skipped, scale after update).  Raises _Refused."""

    def call(name, *args):
        method = getattr(scaler, name, None)
        if not callable(method):
            raise _Refused(f"{name}()", "is missing: the scaler has no such method")
        try:
            return method(*args)
        except NotImplementedError as e:
            raise _Refused(f"{name}()", f"is not written yet (NotImplementedError{': ' + str(e) if str(e) else ''})") from e
        except Exception as e:  # the learner's code: reported, never raised
            raise _Refused(f"{name}()", f"raised {type(e).__name__}: {e}") from e

    opt.zero_grad(set_to_none=True)
    loss = _loss(model, X)
    scaled = call("scale", loss)
    if not isinstance(scaled, torch.Tensor) or scaled.shape != loss.shape or not scaled.requires_grad:
        what = "None (is a `return` missing?)" if scaled is None else f"{type(scaled).__name__}: {scaled!r:.60}"
        raise _Refused("scale()", f"returned {what}, not the loss times the scale")
    scaled_value = float64_on_cpu(scaled).item()
    try:
        scaled.backward()
    except Exception as e:
        raise _Refused("scale()", f"returned a tensor whose backward() raised {type(e).__name__}: {e}") from e
    _inject(model, fault)
    call("unscale_", opt)
    before = opt.num_steps
    call("step", opt)
    skipped = opt.num_steps == before
    call("update")
    raw = call("get_scale")
    scale = _as_scale_value(raw)
    if scale is None:
        what = "None (is a `return` missing?)" if raw is None else f"{type(raw).__name__}: {raw!r:.60}"
        raise _Refused("get_scale()", f"returned {what}, not a number")
    return scaled_value, skipped, scale


def compare_with_grad_scaler(
    make_scaler,
    schedule,
    *,
    init_scale: float = 2.0**16,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
    rtol: float = 0.0,
    device=None,
) -> ScalerComparison:
    """Run a scaler beside ``torch.amp.GradScaler`` on a fault ``schedule``; report the first difference.

    ``make_scaler()`` builds the scaler to test (called once, with no arguments); GradScaler is
    built with ``init_scale``, ``growth_factor``, ``backoff_factor`` and ``growth_interval``.
    ``schedule`` has one entry per step: ``"clean"``, or ``"inf"``/``"nan"`` to set one
    gradient element to inf/NaN after ``backward()``.  Each step runs, with each scaler on its own
    copy of a tiny seeded model and plain SGD::

        scaler.scale(loss).backward(); <fault>; scaler.unscale_(opt); scaler.step(opt); scaler.update()

    and compares, in this order: the scaled loss, whether the step was skipped, ``get_scale()``
    after ``update()`` (exactly: GradScaler's is a float32) and the parameters (bit for bit, or
    within ``rtol``).  The first mismatch, or an exception from the scaler (never raised: it is the
    difference), ends the comparison.  Taught in notebook 04, whose exercises use it.
    """
    if not callable(make_scaler):
        raise ArgumentTypeError(f"make_scaler must be a function that returns a new scaler, got {type(make_scaler).__name__}")
    schedule = _check_schedule(schedule)
    kwargs = {
        "init_scale": _check_scale("init_scale", init_scale),
        "growth_factor": _check_growth_factor("growth_factor", growth_factor),
        "backoff_factor": _check_backoff_factor("backoff_factor", backoff_factor),
        "growth_interval": _check_growth_interval("growth_interval", growth_interval),
    }
    rtol = check_float("rtol", rtol, ge=0.0, le=1.0)
    dev = get_device(device)
    theirs = torch.amp.GradScaler(dev.type, **kwargs)
    model_t, X = _setup(dev)
    model_m, _ = _setup(dev)
    opt_t, opt_m = _CountingSGD(model_t.parameters(), LR), _CountingSGD(model_m.parameters(), LR)
    scales, skipped_steps = [], []

    def result(step, fault, what, mine, theirs_value, call=None):
        return ScalerComparison(False, len(schedule), step, fault, what, mine, theirs_value, call,
                                tuple(scales), tuple(skipped_steps))

    try:
        mine = make_scaler()
    except Exception as e:  # the learner's constructor
        text = f"is not written yet ({type(e).__name__})" if isinstance(e, NotImplementedError) else f"raised {type(e).__name__}: {e}"
        return result(0, schedule[0], "error", text, None, "the constructor")
    if mine is None:
        return result(0, schedule[0], "error", "returned None, not a scaler", None, "make_scaler()")
    for step, fault in enumerate(schedule):
        want = _run_step(theirs, model_t, opt_t, X, fault)
        scales.append(want[2])
        if want[1]:
            skipped_steps.append(step)
        try:
            got = _run_step(mine, model_m, opt_m, X, fault)
        except _Refused as e:
            return result(step, fault, "error", e.args[1], None, e.args[0])
        for what, m, t in zip(("scaled loss", "skipped", "scale"), got, want, strict=True):
            if what == "scaled loss":
                differs = not (m == t or (math.isnan(m) and math.isnan(t)) or math.isclose(m, t, rel_tol=rtol))
            else:
                differs = m != t
            if differs:
                return result(step, fault, what, m, t)
        for p, q in zip(model_m.parameters(), model_t.parameters(), strict=True):
            same = torch.equal(p, q) if rtol == 0 else torch.allclose(p, q, rtol=rtol, atol=0.0, equal_nan=True)
            if not same:
                worst = ((p - q).abs() / q.abs().clamp_min(FLOAT32_TINY)).max().item()
                return result(step, fault, "parameters", worst, 0.0)
    return ScalerComparison(True, len(schedule), scales=tuple(scales), skipped=tuple(skipped_steps))
