"""Loss scaling from scratch (taught in ``04_loss_scaling_from_scratch``).

FP16 gradients smaller than 2**-24 become zero.  Loss scaling multiplies the loss by a
factor ``S`` before ``backward()``, so every gradient is ``S`` times larger while it passes
through FP16, and divides the FP32 gradients by ``S`` again before the optimizer uses them.

* :class:`StaticLossScaler` is the idea in its barest form: one fixed ``S``.  Too small and
  gradients still vanish; too large and they overflow to inf, and the optimizer writes NaN
  into the weights.
* :class:`DynamicLossScaler` is what ``torch.amp.GradScaler`` does: skip the optimizer step
  when a gradient is inf or NaN and multiply ``S`` by ``backoff_factor``; multiply it by
  ``growth_factor`` after ``growth_interval`` clean steps in a row.  It reproduces GradScaler
  bit for bit (the tests prove it): the same scale after every ``update()``, the same skipped
  steps, the same parameters, the same ``state_dict``.

These are the solutions of notebook 04's exercises, with GradScaler's bookkeeping (``step``
unscales unless you did, ``unscale_`` twice is an error).  Their argument checks live apart, in
:mod:`amp_lab.scaler_checks`: each public method starts with one line that calls them.

:func:`compare_with_grad_scaler` runs any scaler with these methods beside GradScaler on a fault
schedule (steps whose gradients hold an inf or a NaN) and reports the first step where they differ.

Differences from GradScaler, all deliberate: the scale is a Python float (a float32 value) rather
than a tensor on the GPU, ``step()`` returns whether the optimizer stepped, misuse raises
``RuntimeError`` with a readable message, and a backoff that would leave float32's normal range
raises :class:`ScaleUnderflowError` (GradScaler walks silently through the subnormals to 0).
"""

from __future__ import annotations

import math
from collections import defaultdict
from numbers import Real
from typing import NamedTuple

import torch

from . import scaler_checks as checks
from ._checks import (
    FLOAT32_TINY,
    ArgumentTypeError,
    bounded_list,
    check_bool,
    check_float,
    check_instance,
    check_scale,
)
from .device import float64_on_cpu, get_device, seeded
from .text import Reading

__all__ = [
    "DynamicLossScaler",
    "ScaleRecord",
    "ScaleUnderflowError",
    "StaticLossScaler",
    "check_and_unscale_",
    "compare_with_grad_scaler",
    "read_backoff",
    "read_schedule",
    "runs_use",
    "ScalerComparison",
    "to_float32",
]

FLOAT32_MAX = torch.finfo(torch.float32).max
MAX_GROWTH_INTERVAL = checks.MAX_GROWTH_INTERVAL
MIN_BACKOFF_FACTOR = checks.MIN_BACKOFF_FACTOR
MAX_GROWTH_FACTOR = checks.MAX_GROWTH_FACTOR

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
    tried: the trouble is then not the scale but an inf/NaN in the loss or the forward pass."""


def to_float32(x: float) -> float:
    """Round a Python number to the nearest float32 (overflow gives inf), as GradScaler stores its scale."""
    return torch.tensor(float(x), dtype=torch.float64, device="cpu").float().item()


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

    Our ``torch._amp_foreach_non_finite_check_and_unscale_``: the check looks at the *scaled*
    gradients, before the multiplication, as the kernel does.  ``grads`` share one device and dtype;
    ``inv_scale`` is a 0-dim float32 tensor there (a BF16 tensor times a float32 tensor computes in
    float32 and rounds once, exactly like the kernel; a Python float would not).
    """
    # The largest |g| is inf or NaN exactly when one element is (max propagates NaN), and it
    # cannot overflow on finite values as a sum or a norm could.
    nonempty = [g for g in grads if g.numel() > 0]
    if nonempty:
        found_inf = ~torch.isfinite(torch.stack(torch._foreach_max(torch._foreach_abs(nonempty)))).all()
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

    _STATE = checks.STATIC_STATE  # the entries of state_dict() and their checks

    def __init__(self, scale: float, *, record_history: bool = True):
        self._init_scale = check_scale("scale", scale)
        self.record_history = check_bool("record_history", record_history)
        self._scale: float | None = None  # float32 value, set on the first scale() call
        self._states: dict[int, dict] = defaultdict(self._fresh_state)
        self._num_updates = 0
        self.history: list[ScaleRecord] = []

    # -- the four calls of a training step ---------------------------------------------

    def scale(self, outputs):
        """Return ``outputs * scale`` (a tensor, or a list/tuple of tensors)."""
        checks.outputs(outputs)
        if self._scale is None:
            self._scale = to_float32(self._init_scale)  # GradScaler stores it as float32
        return self._times_scale(outputs)

    def _times_scale(self, outputs):
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self._times_scale(out) for out in outputs)
        # A float32 0-dim tensor, not a Python float: an FP16/BF16 product is then computed in
        # float32 and rounded once, exactly as GradScaler does it.
        return outputs * torch.full((), self._scale, dtype=torch.float32, device=outputs.device)

    def unscale_(self, optimizer) -> None:
        """Divide the optimizer's gradients by the scale, in place, and look for inf/NaN.

        Call it before anything that reads gradient values (``clip_grad_norm_``); otherwise
        ``step()`` calls it.  At most once per optimizer between two ``update()`` calls.
        """
        checks.optimizer(optimizer)
        self._require_scale("unscale_")
        state = self._states[id(optimizer)]
        if state["stage"] == UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if state["stage"] == STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = to_float32(1.0 / self._scale)  # 1/scale in float64, rounded to float32, as GradScaler
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
        found_inf = self._found_inf()
        self._end_iteration(found_inf, skipped=False)

    # -- inspection and checkpoints ---------------------------------------------------

    def get_scale(self) -> float:
        """The current scale as a Python float."""
        return self._init_scale if self._scale is None else self._scale

    def state_dict(self) -> dict:
        return {"scale": self.get_scale()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a :meth:`state_dict`: exactly its keys, each checked before anything changes."""
        self._load(checks.state_dict(type(self).__name__, state_dict, self._STATE))

    def _load(self, state: dict) -> None:
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
        checks.optimizer(optimizer)
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

    def _end_iteration(self, found_inf: bool, skipped: bool) -> None:
        """Record the iteration in ``history`` and reset every optimizer for the next one."""
        self._states = defaultdict(self._fresh_state)
        if self.record_history:
            self.history.append(ScaleRecord(self._num_updates, self._scale, found_inf, skipped))
        self._num_updates += 1


class DynamicLossScaler(StaticLossScaler):
    """GradScaler's algorithm: skip steps with inf/NaN gradients and adapt the scale.

    After an iteration with an inf or NaN gradient, ``update()`` multiplies the scale by
    ``backoff_factor``; after ``growth_interval`` clean iterations in a row it multiplies it
    by ``growth_factor`` (unless that would overflow float32: then it keeps the scale).
    ``growth_factor`` is in (1, :data:`MAX_GROWTH_FACTOR`], ``backoff_factor`` in
    [:data:`MIN_BACKOFF_FACTOR`, 1), ``growth_interval`` from 1 to :data:`MAX_GROWTH_INTERVAL`;
    each is checked when set.
    """

    _STATE = checks.DYNAMIC_STATE

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        *,
        record_history: bool = True,
    ):
        init_scale = check_scale("init_scale", init_scale)  # every argument checked before anything is set
        growth_factor = checks.growth_factor("growth_factor", growth_factor)
        backoff_factor = checks.backoff_factor("backoff_factor", backoff_factor)
        growth_interval = checks.growth_interval("growth_interval", growth_interval)
        super().__init__(init_scale, record_history=record_history)
        self._growth_tracker = 0  # clean steps in a row since the last change of scale
        self.growth_factor, self.backoff_factor, self.growth_interval = (
            growth_factor,
            backoff_factor,
            growth_interval,
        )

    # The factors and the interval are checked whenever they are set, so update() can trust them.
    growth_factor = property(
        lambda self: self._growth_factor,
        lambda self, v: setattr(self, "_growth_factor", checks.growth_factor("growth_factor", v)),
        doc="The scale is multiplied by it after ``growth_interval`` clean steps (> 1).",
    )
    backoff_factor = property(
        lambda self: self._backoff_factor,
        lambda self, v: setattr(self, "_backoff_factor", checks.backoff_factor("backoff_factor", v)),
        doc="The scale is multiplied by it after a step with an inf/NaN gradient (between 0 and 1).",
    )
    growth_interval = property(
        lambda self: self._growth_interval,
        lambda self, v: setattr(
            self,
            "_growth_interval",
            checks.interval_above_tracker(checks.growth_interval("growth_interval", v), self._growth_tracker),
        ),
        doc="Clean steps in a row after which the scale grows.",
    )

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
            new_scale = checks.new_scale(new_scale)
        found_inf = self._found_inf(required=new_scale is None)
        scale, tracker = self._scale, self._growth_tracker  # the new values, computed before anything changes
        if new_scale is not None:  # like GradScaler: it replaces the scale, the tracker is untouched
            scale = to_float32(new_scale)
        elif found_inf:
            # The product is computed in double and rounded to float32, as in the C++ kernel.
            scale, tracker = to_float32(self._scale * self.backoff_factor), 0
            if scale < FLOAT32_TINY:  # GradScaler would go on into subnormals and 0: we stop
                raise ScaleUnderflowError(checks.underflow_message(self._scale, self.backoff_factor, scale))
        elif self._growth_tracker + 1 == self.growth_interval:  # "==", as GradScaler's kernel compares
            grown = to_float32(self._scale * self.growth_factor)
            scale = grown if math.isfinite(grown) else scale  # never grow past float32's range to inf
            tracker = 0
        else:
            tracker = self._growth_tracker + 1
        self._end_iteration(found_inf, skipped=found_inf)
        self._scale, self._growth_tracker = scale, tracker

    def state_dict(self) -> dict:
        """The same five entries as ``torch.amp.GradScaler.state_dict()`` (each loads into the other)."""
        return {
            "scale": self.get_scale(),
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def _load(self, state: dict) -> None:
        super()._load(state)
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

FAULTS = checks.FAULTS
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
            return (
                f"first difference at {where}: the parameters differ, by up to {self.mine:.2g} of their size"
            )
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


def _as_scale_value(value) -> float | None:
    """A scale a scaler reported, as a Python float (None when it is no number)."""
    if (
        isinstance(value, torch.Tensor)
        and value.numel() == 1
        and not value.is_complex()
        and value.dtype != torch.bool
    ):
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
            raise _Refused(
                f"{name}()", f"is not written yet (NotImplementedError{': ' + str(e) if str(e) else ''})"
            ) from e
        except Exception as e:  # the learner's code: reported, never raised
            raise _Refused(f"{name}()", f"raised {type(e).__name__}: {e}") from e

    opt.zero_grad(set_to_none=True)
    loss = _loss(model, X)
    scaled = call("scale", loss)
    if not isinstance(scaled, torch.Tensor) or scaled.shape != loss.shape or not scaled.requires_grad:
        what = (
            "None (is a `return` missing?)" if scaled is None else f"{type(scaled).__name__}: {scaled!r:.60}"
        )
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
        raise ArgumentTypeError(
            f"make_scaler must be a function that returns a new scaler, got {type(make_scaler).__name__}"
        )
    schedule = checks.schedule(schedule)
    kwargs = {
        "init_scale": check_scale("init_scale", init_scale),
        "growth_factor": checks.growth_factor("growth_factor", growth_factor),
        "backoff_factor": checks.backoff_factor("backoff_factor", backoff_factor),
        "growth_interval": checks.growth_interval("growth_interval", growth_interval),
    }
    rtol = check_float("rtol", rtol, ge=0.0, le=1.0)
    dev = get_device(device)
    theirs = torch.amp.GradScaler(dev.type, **kwargs)
    model_t, X = _setup(dev)
    model_m, _ = _setup(dev)
    opt_t, opt_m = _CountingSGD(model_t.parameters(), LR), _CountingSGD(model_m.parameters(), LR)
    scales, skipped_steps = [], []

    def result(step, fault, what, mine, theirs_value, call=None):
        return ScalerComparison(
            False,
            len(schedule),
            step,
            fault,
            what,
            mine,
            theirs_value,
            call,
            tuple(scales),
            tuple(skipped_steps),
        )

    try:
        mine = make_scaler()
    except Exception as e:  # the learner's constructor
        text = (
            f"is not written yet ({type(e).__name__})"
            if isinstance(e, NotImplementedError)
            else f"raised {type(e).__name__}: {e}"
        )
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
                differs = not (
                    m == t or (math.isnan(m) and math.isnan(t)) or math.isclose(m, t, rel_tol=rtol)
                )
            else:
                differs = m != t
            if differs:
                return result(step, fault, what, m, t)
        for p, q in zip(model_m.parameters(), model_t.parameters(), strict=True):
            same = (
                torch.equal(p, q) if rtol == 0 else torch.allclose(p, q, rtol=rtol, atol=0.0, equal_nan=True)
            )
            if not same:
                worst = ((p - q).abs() / q.abs().clamp_min(FLOAT32_TINY)).max().item()
                return result(step, fault, "parameters", worst, 0.0)
    return ScalerComparison(True, len(schedule), scales=tuple(scales), skipped=tuple(skipped_steps))


def read_schedule(
    found: ScalerComparison, init_scale: float, growth_interval: int, backoff_factor: float = 0.5
) -> Reading:
    """04's reveal after a fault schedule: GradScaler's final scale, its skips and how often it grew."""
    check_instance("found", found, ScalerComparison, "a ScalerComparison (from compare_with_grad_scaler)")
    init_scale = check_scale("init_scale", init_scale)
    growth_interval = checks.growth_interval("growth_interval", growth_interval)
    backoff_factor = checks.backoff_factor("backoff_factor", backoff_factor)
    before = (init_scale, *found.scales[:-1])
    facts = {
        "final": _show_value(found.scales[-1]) if found.scales else "?",
        "final_scale": found.scales[-1] if found.scales else None,
        "num_skipped": len(found.skipped),
        "skipped": list(found.skipped),
        "grew": sum(b > a for a, b in zip(before, found.scales, strict=True)),
        "growth_interval": growth_interval,
        "backoff_factor": backoff_factor,
    }
    return Reading("scaling.schedule_end", ("scaling.schedule_skips", "scaling.schedule_growth"), facts)


def read_backoff(scales: list[float], ours_refused: bool) -> Reading:
    """04's reveal after backing GradScaler off again and again: where its scale ends (``facts["answer"]``,
    worded as the prediction's options), and whether ours refused to leave float32's normal range."""
    scales = [
        check_float(f"scales[{i}]", s, ge=0.0)
        for i, s in enumerate(bounded_list("scales", scales, 10_000, "a list of scales"))
    ]
    ours_refused = check_bool("ours_refused", ours_refused)
    subnormal = next((n for n, s in enumerate(scales, 1) if s < FLOAT32_TINY), None)
    last_normal = scales[subnormal - 2] if subnormal and subnormal > 1 else None
    zero = bool(scales) and scales[-1] == 0
    facts = {
        "answer": "goes on down to exactly 0" if zero else "stops at float32's smallest normal number",
        "num_backoffs": len(scales),
        "first_subnormal": subnormal,
        "last_normal_log2": math.log2(last_normal) if last_normal else None,
        "last_log2": math.log2(scales[-1]) if scales and scales[-1] > 0 else None,
        "to_zero": len(scales) - subnormal if subnormal else None,
    }
    outcome = "scaling.backoff_reaches_zero" if zero else "scaling.backoff_stops"
    return Reading(outcome, ("scaling.ours_refuses" if ours_refused else "scaling.ours_carries_on",), facts)


def runs_use(chosen: type, mine: type) -> Reading:
    """Which scaler class 04's runs use: the learner's ``mine`` once its check passed, else the package's."""
    for name, value in (("chosen", chosen), ("mine", mine)):
        if not isinstance(value, type):
            raise ArgumentTypeError(
                f"{name} must be a scaler class, got {type(value).__name__}: {value!r:.60}"
            )
    yours = chosen is mine
    facts = {"mine": mine.__name__, "package": chosen.__name__, "yours": yours}
    return Reading("scaling.runs_use_yours" if yours else "scaling.runs_use_package", (), facts)
