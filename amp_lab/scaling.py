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
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import NamedTuple

import torch

from ._checks import check_float, check_int

__all__ = ["DynamicLossScaler", "ScaleRecord", "StaticLossScaler", "check_and_unscale_", "to_float32"]

FLOAT32_MAX = torch.finfo(torch.float32).max

# The stages of one optimizer between two update() calls, as in GradScaler.
READY, UNSCALED, STEPPED = "ready", "unscaled", "stepped"


class ScaleRecord(NamedTuple):
    """One iteration in a scaler's ``history``: the scale it used and what happened."""

    step: int  # iteration index (number of update() calls before this one)
    scale: float  # the loss scale used in this iteration
    found_inf: bool  # some gradient was inf or NaN
    skipped: bool  # the optimizer step was skipped


def to_float32(x: float) -> float:
    """Round a Python float (a double) to the nearest float32, like C++ ``static_cast<float>``.

    Overflow gives ``inf``.  GradScaler keeps its scale in a float32 tensor, so every scale
    we store goes through this function.
    """
    return torch.tensor(x, dtype=torch.float64, device="cpu").float().item()


def _check_scale(name: str, value) -> float:
    value = check_float(name, value, gt=0.0)
    if value > FLOAT32_MAX:
        raise ValueError(f"{name} must fit in float32 (<= {FLOAT32_MAX:.6g}), got {value}")
    return value


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
    # The largest |g| of each tensor is inf or NaN exactly when one of its elements is (max
    # propagates NaN); unlike a sum or a 2-norm it cannot overflow on finite values.
    nonempty = [g for g in grads if g.numel() > 0]  # an empty tensor has no max
    if nonempty:
        max_abs = torch.stack(torch._foreach_max(torch._foreach_abs(nonempty)))
        found_inf = ~torch.isfinite(max_abs).all()
    else:
        found_inf = torch.zeros((), dtype=torch.bool, device=inv_scale.device)
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
        self.record_history = bool(record_history)
        self.history: list[ScaleRecord] = []

    # -- the four calls of a training step ---------------------------------------------

    def scale(self, outputs):
        """Return ``outputs * scale`` (a tensor, or a list/tuple of tensors)."""
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(out) for out in outputs)
        if not isinstance(outputs, torch.Tensor):
            raise ValueError(
                f"outputs must be a tensor or a list/tuple of tensors, got {type(outputs).__name__}"
            )
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
        self._init_scale = _check_scale("scale", state_dict["scale"])
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
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not supported by loss scalers.")
        self._require_scale("step")
        state = self._states[id(optimizer)]
        if state["stage"] == STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == READY:
            self.unscale_(optimizer)
        return state

    def _consume_found_inf(self, required: bool = True) -> bool:
        """Any inf/NaN in any optimizer this iteration?  Then reset for the next iteration."""
        self._require_scale("update")
        checked = [s["found_inf"] for s in self._states.values() if s["found_inf"] is not None]
        if required and not checked:
            raise RuntimeError("update() was called before any unscale_() or step() in this iteration.")
        self._states = defaultdict(self._fresh_state)
        return any(checked)

    def _record(self, found_inf: bool, skipped: bool) -> None:
        if self.record_history:
            self.history.append(ScaleRecord(self._num_updates, self._scale, found_inf, skipped))
        self._num_updates += 1


class DynamicLossScaler(StaticLossScaler):
    """GradScaler's algorithm: skip steps with inf/NaN gradients and adapt the scale.

    After an iteration with an inf or NaN gradient, ``update()`` multiplies the scale by
    ``backoff_factor``; after ``growth_interval`` clean iterations in a row it multiplies it
    by ``growth_factor`` (unless that would overflow float32: then it keeps the scale).
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
        super().__init__(_check_scale("init_scale", init_scale), record_history=record_history)
        self.growth_factor = check_float("growth_factor", growth_factor, gt=1.0)
        self.backoff_factor = check_float("backoff_factor", backoff_factor, gt=0.0, lt=1.0)
        self.growth_interval = check_int("growth_interval", growth_interval, minimum=1)
        self._growth_tracker = 0  # clean steps in a row since the last change of scale

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
        found_inf = self._consume_found_inf(required=new_scale is None)
        self._record(found_inf, skipped=found_inf)
        if new_scale is not None:
            # Like GradScaler: the value replaces the scale, the growth tracker is untouched.
            value = new_scale.item() if isinstance(new_scale, torch.Tensor) else new_scale
            self._scale = to_float32(_check_scale("new_scale", value))
        elif found_inf:
            # The product is computed in double and rounded to float32, as in the C++ kernel.
            self._scale = to_float32(self._scale * self.backoff_factor)
            self._growth_tracker = 0
        else:
            successful = self._growth_tracker + 1
            # "==", not ">=": GradScaler's kernel compares for equality.
            if successful == self.growth_interval:
                grown = to_float32(self._scale * self.growth_factor)
                if math.isfinite(grown):  # never grow past float32's range to inf
                    self._scale = grown
                self._growth_tracker = 0
            else:
                self._growth_tracker = successful

    def state_dict(self) -> dict:
        """The same five entries as ``torch.amp.GradScaler.state_dict()`` (each loads into the other)."""
        return {
            "scale": self.get_scale(),
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty (was it saved from a disabled GradScaler?).")
        super().load_state_dict({"scale": state_dict["scale"]})
        self.growth_factor = check_float("growth_factor", state_dict["growth_factor"], gt=1.0)
        self.backoff_factor = check_float("backoff_factor", state_dict["backoff_factor"], gt=0.0, lt=1.0)
        self.growth_interval = check_int("growth_interval", state_dict["growth_interval"], minimum=1)
        self._growth_tracker = check_int("_growth_tracker", state_dict["_growth_tracker"], minimum=0)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(scale={self.get_scale()!r}, growth_factor={self.growth_factor!r}, "
            f"backoff_factor={self.backoff_factor!r}, growth_interval={self.growth_interval!r})"
        )
