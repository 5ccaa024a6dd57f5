"""The mixed-precision training recipe, end to end (taught in ``07_amp_training_recipe``).

Everything the capstone notebook runs, written to be read:

* :func:`choose_amp_dtype` walks a decision flow over ``hardware.describe()``: bfloat16 or
  float16, whether a ``GradScaler`` is needed, and whether AMP should be faster here at all.  The
  answer is the course's one decision (``hardware.machine_verdict``); :func:`example_machines` and
  :func:`choice_rows` show it for other machines.
* :func:`train_step` is one optimizer step of the modern recipe: the forward pass under
  ``torch.autocast``, ``scaler.scale(loss).backward()`` for each micro-batch (gradient
  accumulation), ``scaler.unscale_(opt)`` *before* ``clip_grad_norm_`` so the threshold is in
  true gradient units, then ``scaler.step(opt)`` and ``scaler.update()``.  :func:`compare_clipping`
  measures what clipping *before* ``unscale_`` does, with Adam and with SGD.
* :func:`train` runs steps on data whose batches are a pure function of the step number, so
  a run resumed from :func:`save_checkpoint` / :func:`load_checkpoint` (model, optimizer,
  scaler, scheduler and RNG state) continues bit for bit like the uninterrupted one.  It reads
  nothing back from the device inside a step (each read is a host sync on a GPU): the steps'
  numbers are read in one go, every ``log_every`` steps or at the end; :func:`count_host_reads`
  counts such reads.
* :func:`evaluate` runs inference under autocast in ``torch.inference_mode()``.
* :func:`compare_precisions` trains the same model in FP32 and under AMP and measures time per
  step (with the speed-up's interval, from paired steps, timed without a host sync inside), the bytes
  autograd saves for backward, the peak CUDA memory of one step and test accuracy.
* :func:`read_comparison` turns those numbers and the decision flow's expectation into sentences:
  faster, slower or too close to call; whether that matches the flow, and why (on a GPU whose
  datasheet the course knows, from the step's regime: :func:`step_flops` and :func:`step_bytes`
  against the measured time); memory; accuracy.  The
  notebook prints them rather than asserting an outcome in markdown, so every machine reads a
  true story.

The scaler is a ``torch.amp.GradScaler(device, enabled=...)``: enabled for float16 (whose
narrow range needs loss scaling), disabled for bfloat16 and float32, where all its calls pass
through.  One loop therefore serves all three precisions.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import pickle
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    MAX_STEPS,
    ArgumentTypeError,
    check_float,
    check_instance,
    check_int,
    check_scale,
    check_seed,
)
from .amp import AmpChoice
from .claims import Claim, claim
from .cost import _MAX_SIZE, _mlp_sizes, step_bytes, step_flops
from .data import Dataset, Split
from .device import dtype_name, get_device, parse_dtype, synchronize, torch_threads
from .models import make_mlp as make_model
from .progress import progress
from .timing import (
    Regime,
    SpeedupEstimate,
    format_bytes,
    format_ratio,
    regime_for,
    speedup_estimate,
    timing_context,
)

__all__ = [
    "make_model",
    "make_scaler",
    "micro_batches",
    "StepResult",
    "PendingStep",
    "train_step",
    "History",
    "train",
    "HostReads",
    "count_host_reads",
    "ClippingRun",
    "ClippingComparison",
    "compare_clipping",
    "Evaluation",
    "evaluate",
    "save_checkpoint",
    "load_checkpoint",
    "saved_activation_bytes",
    "PrecisionResult",
    "compare_precisions",
    "comparison_rows",
    "COMPARISON_HEADER",
    "ComparisonReading",
    "read_comparison",
    "dtype_name",
]

_MAX_STEP_NUMBER = 2**53  # a step number (micro_batches' seed arithmetic stays within torch's 64-bit seeds)
_MAX_THREADS = 1024  # device.torch_threads' bound
_MAX_GROWTH_INTERVAL = 2**31 - 1  # GradScaler's update kernel takes it as a C integer
_MAX_ITEMS = MAX_STEPS  # items of a list argument (micro-batches, dtypes, result rows, machines)
# Adam's learning rate, as training.MAX_LR bounds it: far beyond 1 the weights only turn inf, and far
# enough beyond, torch's Adam cannot even convert it to float32 (a RuntimeError from inside torch).
_MAX_LR = 1e6

_PRECISIONS = (torch.float32, torch.bfloat16, torch.float16)


def _precision(dtype, name: str = "dtype") -> torch.dtype:
    if dtype is None:
        return torch.float32
    return parse_dtype(dtype, allowed=_PRECISIONS, name=name)


# --------------------------------------------------------------------------------------------
# 1. Which precision?
# --------------------------------------------------------------------------------------------
















def _sequence(name: str, value, what: str, max_length: int = _MAX_ITEMS) -> list:
    """``value`` as a list, if it is a list, tuple or other iterable that is not a string, bytes or mapping,
    of at most ``max_length`` items: the length is checked before the items are read (``range(10**12)``
    is refused at once), and an iterator without a length is read no further than ``max_length + 1``."""
    if isinstance(value, (str, bytes, Mapping, torch.Tensor)) or not isinstance(value, Iterable):
        raise ArgumentTypeError(f"{name} must be {what}, got {_shown(value)}")
    too_long = f"{name} may hold at most {max_length} items"
    if isinstance(value, Sized):
        try:
            length = len(value)
        except OverflowError:  # a range longer than sys.maxsize
            raise ValueError(f"{too_long}, got {type(value).__name__} of more than {sys.maxsize}") from None
        if length > max_length:
            raise ValueError(f"{too_long}, got {type(value).__name__} of {length}")
    items = list(itertools.islice(value, max_length + 1))
    if len(items) > max_length:
        raise ValueError(f"{too_long}, got more")
    return items


def _shown(value) -> str:
    """A value for an error message: a tensor by its dtype and shape (its digits say nothing there)."""
    if isinstance(value, torch.Tensor):
        return f"a {dtype_name(value.dtype)} tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of {len(value)}: ({', '.join(_shown(v) for v in value[:3])}{', ...' if len(value) > 3 else ''})"
    return f"{type(value).__name__}: {value!r:.80}"


# --------------------------------------------------------------------------------------------
# 2. Model, scaler, batches
# --------------------------------------------------------------------------------------------




def make_scaler(dtype, device=None, *, init_scale: float = 2.0**16, growth_interval: int = 2000):
    """``torch.amp.GradScaler(device)``, enabled only for float16.

    bfloat16 and float32 have FP32's exponent range, so gradients do not underflow and the
    scaler is created disabled: ``scale``, ``unscale_``, ``step`` and ``update`` pass through.
    ``init_scale`` is checked as the float32 it becomes (``_checks.check_scale``); ``growth_interval`` is
    from 1 to 2**31 - 1 (GradScaler's update kernel takes it as a C integer).
    """
    dtype = _precision(dtype)
    init_scale = check_scale("init_scale", init_scale)
    growth_interval = check_int("growth_interval", growth_interval, minimum=1, maximum=_MAX_GROWTH_INTERVAL)
    dev = get_device(device)
    return torch.amp.GradScaler(
        dev.type, init_scale=init_scale, growth_interval=growth_interval, enabled=dtype == torch.float16
    )


def micro_batches(
    split, *, step: int, batch_size: int = 64, accumulation_steps: int = 1, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The micro-batches of optimizer step ``step``: a pure function of ``(seed, step)``.

    Each epoch is a seeded permutation of the split; step ``k`` takes the next
    ``batch_size * accumulation_steps`` examples, cut into ``accumulation_steps`` micro-batches.
    Because nothing depends on state carried between steps, a resumed run sees exactly the
    batches the uninterrupted run would have seen.  ``split`` is a ``data.Split``; ``step`` from 0 to 2**53;
    ``batch_size`` and ``accumulation_steps`` from 1 to 2**53, their product at most ``len(split)``;
    ``seed`` an integer from 0 to ``_checks.MAX_SEED``.
    """
    _check_split("split", split)
    step = check_int("step", step, minimum=0, maximum=_MAX_STEP_NUMBER)
    seed = check_seed("seed", seed)
    n = len(split)
    batch_size, accumulation_steps, per_step = _per_step(batch_size, accumulation_steps, n)
    steps_per_epoch = n // per_step  # the remainder of each epoch is dropped
    epoch, k = divmod(step, steps_per_epoch)
    # The epoch's order is copied to the data's device once per epoch, not once per step: a copy from the
    # host's memory to a GPU waits for the GPU (a host sync), and the end of an epoch is a fine place for one.
    idx = _epoch_order(n, seed, epoch, str(split.X.device))[k * per_step : (k + 1) * per_step]
    return [(split.X[chunk], split.y[chunk]) for chunk in idx.split(batch_size)]


def _per_step(batch_size, accumulation_steps, n: int) -> tuple[int, int, int]:
    """``batch_size``, ``accumulation_steps`` and their product, the examples per optimizer step, checked
    against the ``n`` examples of the split."""
    batch_size = check_int("batch_size", batch_size, minimum=1, maximum=_MAX_SIZE)
    accumulation_steps = check_int("accumulation_steps", accumulation_steps, minimum=1, maximum=_MAX_SIZE)
    per_step = batch_size * accumulation_steps
    if per_step > n:
        raise ValueError(
            f"batch_size * accumulation_steps = {batch_size} * {accumulation_steps} = {per_step} must be <= the "
            f"number of examples ({n})"
        )
    return batch_size, accumulation_steps, per_step


def _check_split(name: str, split) -> Split:
    if not isinstance(split, Split):
        raise ArgumentTypeError(
            f"{name} must be a data.Split (e.g. data.train from data.load_digits(); for tensors, data.Split(X, y)), "
            f"got {_shown(split)}"
        )
    return split


@functools.lru_cache(maxsize=16)
def _epoch_order(n: int, seed: int, epoch: int, device: str = "cpu") -> torch.Tensor:
    """The seeded permutation of epoch ``epoch``, on ``device`` (cached: it is read-only and costs a randperm,
    and off the CPU a copy that waits for the device)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    return order if device == "cpu" else order.to(device)


# --------------------------------------------------------------------------------------------
# Argument checks shared by the step, the loop, evaluation and checkpoints: everything is checked
# before anything changes, and torch's shape and dtype errors never reach the learner.
# --------------------------------------------------------------------------------------------


def _model_params(name: str, model) -> list[torch.Tensor]:
    check_instance(name, model, nn.Module, "a torch.nn.Module (e.g. from recipe.make_model)")
    params = list(model.parameters())
    if not params:
        raise ValueError(f"{name} has no parameters: there is nothing to train, evaluate or restore")
    devices = sorted({str(p.device) for p in params})
    if len(devices) > 1:
        raise ValueError(f"{name}'s parameters are spread over {', '.join(devices)}: move it to one with {name}.to(device)")
    return params


def _check_model(name: str, model, dev: torch.device, *, trainable: bool) -> list[torch.Tensor]:
    """The parameters of ``model``: float32 (the recipe's master weights; autocast makes the 16-bit
    copies), all on ``dev``, and, for training, at least one that requires a gradient."""
    params = _model_params(name, model)
    wrong = next((p for p in params if p.dtype != torch.float32), None)
    if wrong is not None:
        raise ValueError(
            f"{name} has {dtype_name(wrong.dtype)} parameters, but the recipe keeps float32 weights (autocast makes "
            f"the low-precision copies, and GradScaler cannot unscale 16-bit gradients): use {name}.float(), or "
            "build it with recipe.make_model"
        )
    _check_on(name, params[0].device, dev)
    if trainable and not any(p.requires_grad for p in params):
        raise ValueError(f"no parameter of {name} requires a gradient: there is nothing to train")
    return params


def _check_on(name: str, actual: torch.device, dev: torch.device) -> None:
    if actual.type != dev.type or (dev.index is not None and actual.index != dev.index):
        raise ValueError(
            f"{name} is on {actual}, but device={str(dev)!r}: move it with .to(device), or pass device={str(actual)!r}"
        )


def _check_opt(opt, params: list[torch.Tensor]) -> None:
    check_instance("opt", opt, torch.optim.Optimizer, "a torch.optim.Optimizer (e.g. torch.optim.Adam(model.parameters()))")
    own = {id(p) for p in params}
    held = [p for group in opt.param_groups for p in group["params"]]
    if not held:
        raise ValueError("opt holds no parameters: build it from the model's, torch.optim.Adam(model.parameters())")
    if any(id(p) not in own for p in held):
        raise ValueError(
            "opt holds parameters that are not the model's (an optimizer built for another model?): build it from "
            "this model's parameters, e.g. torch.optim.Adam(model.parameters(), lr=...)"
        )


def _check_scaler(scaler, dev: torch.device | None = None) -> None:
    check_instance("scaler", scaler, torch.amp.GradScaler, "a torch.amp.GradScaler (e.g. recipe.make_scaler(dtype, device))")
    made_for = getattr(scaler, "_device", None)
    if dev is not None and scaler.is_enabled() and isinstance(made_for, str) and made_for != dev.type:
        raise ValueError(
            f"scaler was made for {made_for!r}, but device={str(dev)!r}: make it with recipe.make_scaler(dtype, device)"
        )


_SCHEDULERS = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


def _check_scheduler(scheduler, opt, *, stepped_by_train: bool) -> None:
    if scheduler is None:
        return
    check_instance(
        "scheduler", scheduler, _SCHEDULERS, "None or a torch.optim.lr_scheduler scheduler (e.g. CosineAnnealingLR)"
    )
    if getattr(scheduler, "optimizer", None) is not opt:
        raise ValueError(
            "scheduler belongs to another optimizer: build it on opt, e.g. "
            "torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=num_steps)"
        )
    if stepped_by_train and isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise ValueError(
            "scheduler=ReduceLROnPlateau needs a metric in every step(), and train steps its scheduler without one: "
            "use a schedule such as CosineAnnealingLR, or step this one yourself between calls to train"
        )


def _check_max_grad_norm(max_grad_norm) -> float | None:
    """None (no clipping) or a finite number > 0: a negative norm would reverse every update, NaN would
    write NaN into the weights, and 0 would freeze training."""
    if max_grad_norm is None:
        return None
    allowed = "None (no clipping) or a finite number > 0"
    try:
        return check_float("max_grad_norm", max_grad_norm, gt=0)
    except ArgumentTypeError:
        raise ArgumentTypeError(
            f"max_grad_norm must be {allowed}, got {type(max_grad_norm).__name__}: {max_grad_norm!r:.80}"
        ) from None
    except ValueError:
        raise ValueError(f"max_grad_norm must be {allowed}, got {max_grad_norm!r}") from None


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be True or False, got {value!r:.80}")
    return value


def _io_widths(model) -> tuple[int | None, int | None]:
    """The input width and number of outputs of a ``nn.Sequential`` whose first and last layers are
    Linear (as :func:`make_model`'s are), read without running it; None where they cannot be read."""
    if not isinstance(model, nn.Sequential):
        return None, None
    leaves = [m for m in model.modules() if next(m.children(), None) is None]
    if not leaves:
        return None, None
    first, last = leaves[0], leaves[-1]
    return (
        first.in_features if isinstance(first, nn.Linear) else None,
        last.out_features if isinstance(last, nn.Linear) else None,
    )


def _check_examples(xname: str, yname: str, X, y, model, device: torch.device) -> None:
    """One batch (or split) of examples for ``model``, checked by shape, dtype and device alone."""
    check_instance(xname, X, torch.Tensor, "a tensor of features")
    check_instance(yname, y, torch.Tensor, "a tensor of class labels")
    if X.dtype != torch.float32 or X.ndim != 2:
        raise ValueError(
            f"{xname} must be a 2-D float32 tensor (examples, features), got {X.dtype} of shape {tuple(X.shape)}"
        )
    in_features, _ = _io_widths(model)
    if in_features is not None and X.shape[1] != in_features:
        raise ValueError(
            f"{xname} has {X.shape[1]} features per example, but the model's first Linear takes "
            f"in_features={in_features}: build the model with num_features={X.shape[1]}"
        )
    if y.dtype != torch.int64 or y.ndim != 1:
        raise ValueError(
            f"{yname} must be a 1-D int64 tensor of class labels (use y.long()), got {y.dtype} of shape {tuple(y.shape)}"
        )
    if len(X) != len(y):
        raise ValueError(f"{xname} has {len(X)} examples but {yname} has {len(y)} labels: one label per example")
    if len(X) == 0:
        raise ValueError(f"{xname} holds no examples")
    for name, t in ((xname, X), (yname, y)):
        if t.device != device:
            raise ValueError(f"{name} is on {t.device}, but the model is on {device}: move it with .to(device)")


def _check_example_values(pairs, model, where: str) -> None:
    """Labels within the model's outputs and finite features: read once (one host sync), since a label out of
    range fails inside torch (on a GPU, as a device-side assert) and a NaN feature writes NaN into the weights."""
    _, num_classes = _io_widths(model)
    stats = torch.stack(
        [
            torch.stack([y.min() for _, y in pairs]).min(),
            torch.stack([y.max() for _, y in pairs]).max(),
            torch.stack([torch.isfinite(X).all() for X, _ in pairs]).all().long(),
        ]
    ).tolist()
    low, high, finite = stats
    if low < 0 or (num_classes is not None and high >= num_classes):
        allowed = f"0 to {num_classes - 1}" if num_classes is not None else "0 or more"
        raise ValueError(
            f"{where} holds class labels from {low} to {high}, but the model's labels are {allowed}"
            + (f" (its last Linear has {num_classes} outputs)" if num_classes is not None else "")
        )
    if not finite:
        raise ValueError(f"{where} holds NaN or inf features: a step on them would write NaN into the weights")


def _check_batches(batches, model, device: torch.device, *, read_values: bool) -> list:
    pairs = _sequence("batches", batches, "a non-empty list of (X, y) micro-batches (e.g. from recipe.micro_batches)")
    if not pairs:
        raise ValueError("batches is empty: a step needs at least one (X, y) micro-batch (recipe.micro_batches)")
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ArgumentTypeError(f"batches[{i}] must be an (X, y) pair of tensors, got {_shown(pair)}")
        _check_examples(f"batches[{i}] X", f"batches[{i}] y", *pair, model, device)
    if read_values:
        _check_example_values(pairs, model, "batches")
    return pairs


def _check_split_for(name: str, split, model, device: torch.device) -> None:
    _check_split(name, split)
    _check_examples(f"{name}.X", f"{name}.y", split.X, split.y, model, device)
    _check_example_values([(split.X, split.y)], model, name)


# --------------------------------------------------------------------------------------------
# 3. One step of the recipe
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step did: the mean loss, the gradient norm before clipping, the scale
    used, and whether the step was skipped because the gradients held inf or NaN."""

    loss: float
    grad_norm: float
    scale: float
    skipped: bool


@dataclass(frozen=True)
class PendingStep:
    """What one optimizer step did, still on the device (``train_step(..., non_blocking=True)``).

    ``loss`` and ``grad_norm`` are 0-d tensors, ``scale`` the scale the step used and ``scale_after``
    the scale after ``scaler.update()`` (0-d tensors, or ``1.0`` and None when the scaler is
    disabled); ``found_inf`` is GradScaler's own inf/NaN flag for the step (nonzero: it skipped the
    step; None when the scaler is disabled, which never skips).  Turning a GPU tensor into a Python
    number (``float()``, ``.item()``, ``.tolist()``, ``scaler.get_scale()``) makes the host wait until
    the GPU has caught up: a *host sync*.  :meth:`values` gathers the numbers into one tensor without
    waiting, so that a loop can collect many steps and read them all at once; :meth:`result` reads one
    step (one sync).
    """

    loss: torch.Tensor
    grad_norm: torch.Tensor
    scale: torch.Tensor | float
    scale_after: torch.Tensor | None
    found_inf: torch.Tensor | None = None

    def values(self) -> torch.Tensor:
        """``[loss, grad_norm, scale, skipped]`` as one 1-d tensor on the loss's device, without a host sync.

        ``skipped`` is 1 or 0: from ``found_inf`` where it is given, else from the scale (``update()``
        lowers it after a skipped step), else 0.  float64, which holds every float32 exactly (float32
        on Apple GPUs, which have no float64)."""
        check_instance("loss", self.loss, torch.Tensor, "a 0-d tensor")
        dev = self.loss.device
        dtype = torch.float32 if dev.type == "mps" else torch.float64

        def on_device(value) -> torch.Tensor:
            if isinstance(value, torch.Tensor):
                return value.detach().reshape(()).to(device=dev, dtype=dtype)
            return torch.full((), float(value), dtype=dtype, device=dev)  # filled there: a copy could wait

        scale = on_device(self.scale)
        if self.found_inf is not None:
            skipped = on_device(self.found_inf) != 0
        elif self.scale_after is not None:
            skipped = on_device(self.scale_after) < scale
        else:
            skipped = torch.zeros((), dtype=torch.bool, device=dev)
        return torch.stack([on_device(self.loss), on_device(self.grad_norm), scale, skipped.to(dtype)])

    def result(self) -> StepResult:
        """The step as Python numbers: one read from the device (one host sync)."""
        return _step_result(self.values().tolist())


def _step_result(values) -> StepResult:
    """A :class:`StepResult` from :meth:`PendingStep.values` read back as Python floats."""
    loss, grad_norm, scale, skipped = values
    return StepResult(loss, grad_norm, scale, skipped != 0)


def _found_inf(scaler, opt) -> torch.Tensor | None:
    """GradScaler's inf/NaN flag for ``opt``'s step (read it after ``step()``, before ``update()``), still
    on the device; None for a disabled scaler.  Copied: ``update()`` may add into it in place."""
    if not scaler.is_enabled():
        return None
    flags = list(scaler._found_inf_per_device(opt).values())  # one per device the gradients live on
    return torch.stack([f.to(flags[0].device) for f in flags]).sum() if len(flags) > 1 else flags[0].clone()


def _current_scale(scaler) -> torch.Tensor | float:
    """The scaler's scale without a host sync: ``get_scale()`` calls ``.item()``, so copy its scale
    tensor instead (a copy, because ``update()`` changes that tensor in place)."""
    if not scaler.is_enabled():
        return 1.0
    scale = scaler._get_scale_async()  # the tensor get_scale() reads; None before the first scale()
    return scaler.get_scale() if scale is None else scale.detach().clone()


def train_step(
    model, opt, scaler, batches, *, dtype, max_grad_norm: float | None = 1.0, device=None, non_blocking: bool = False
) -> StepResult | PendingStep:
    """One optimizer step of mixed-precision training over ``batches`` (micro-batches).

    The whole recipe, in order: autocast forward, scaled backward per micro-batch (gradients
    accumulate), unscale_ before clipping, step (skipped on inf/NaN), update the scale.
    Returns a :class:`StepResult` of Python numbers, read from the device at the end in one go (one
    host sync); with ``non_blocking=True`` a :class:`PendingStep` of device tensors instead, so the
    step never waits for the GPU (a loop reads many steps at once, a timer after it stops: see
    :func:`train`).  With a non-fused optimizer, ``scaler.step`` of an enabled scaler still reads the
    inf check on the host; ``torch.optim.Adam(..., fused=True)`` does not.
    """
    if not isinstance(non_blocking, bool):
        raise TypeError(f"non_blocking must be True or False, got {non_blocking!r}")
    dev = get_device(device)
    dtype = _precision(dtype)
    amp = dtype != torch.float32
    opt.zero_grad(set_to_none=True)
    total = torch.zeros((), device=dev)
    for X, y in batches:
        with torch.autocast(dev.type, dtype=dtype, enabled=amp):
            logits = model(X)
            # Dividing by the number of micro-batches makes the accumulated gradient the gradient
            # of the mean loss over the whole step, exactly as one big batch would give.
            loss = F.cross_entropy(logits, y) / len(batches)
        scaler.scale(loss).backward()  # backward runs outside autocast, in the forward's dtypes
        total += loss.detach().float()  # stays on the device: float(loss) here would wait for the GPU
    scale = _current_scale(scaler)  # a copy on the device: scaler.get_scale() would wait for the GPU
    scaler.unscale_(opt)  # gradients back to true size, so max_grad_norm means what it says
    if max_grad_norm is not None:
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    else:
        grad_norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters() if p.grad is not None])
        )
    scaler.step(opt)  # skips opt.step() if any gradient is inf or NaN
    found_inf = _found_inf(scaler, opt)  # did it skip? GradScaler's own flag, kept on the device
    scaler.update()  # a skipped step halves the scale; a run of good ones grows it
    after = _current_scale(scaler) if scaler.is_enabled() else None  # a disabled scaler never skips
    pending = PendingStep(total, grad_norm.detach(), scale, after, found_inf)
    return pending if non_blocking else pending.result()  # result() reads the numbers: it waits


# The function above is the recipe, and notebook 07 prints its source (``inspect.getsource`` follows
# ``__wrapped__``); the public ``train_step`` checks its arguments first and then runs it.  ``train`` and
# ``compare_precisions`` check theirs once, up front, and call the recipe itself: the checks read the
# labels' values, a host sync that must not happen inside a timed step.
_recipe_step = train_step


@functools.wraps(_recipe_step)
def train_step(
    model, opt, scaler, batches, *, dtype, max_grad_norm: float | None = 1.0, device=None, non_blocking: bool = False
) -> StepResult | PendingStep:
    _check_bool("non_blocking", non_blocking)
    dev = get_device(device)
    _precision(dtype)
    max_grad_norm = _check_max_grad_norm(max_grad_norm)
    params = _check_model("model", model, dev, trainable=True)
    _check_opt(opt, params)
    _check_scaler(scaler, dev)
    # Reading the labels' values waits for a GPU: skipped there when the caller asked not to wait.
    read = not non_blocking or params[0].device.type == "cpu"
    pairs = _check_batches(batches, model, params[0].device, read_values=read)
    return _recipe_step(model, opt, scaler, pairs, dtype=dtype, max_grad_norm=max_grad_norm, device=dev,
                        non_blocking=non_blocking)  # fmt: skip


train_step.__doc__ = (_recipe_step.__doc__ or "") + """
    Every argument is checked before anything changes (the gradients included): ``model`` a
    ``torch.nn.Module`` with float32 parameters on ``device``, ``opt`` a ``torch.optim.Optimizer`` over
    its parameters, ``scaler`` a ``torch.amp.GradScaler``, ``batches`` a non-empty list of at most
    ``_checks.MAX_STEPS`` ``(X, y)`` pairs (``X`` 2-D float32 with the model's input width, ``y`` 1-D int64 labels within its outputs,
    finite features; the values are not read on a GPU with ``non_blocking=True``), ``max_grad_norm``
    None (no clipping) or a finite number > 0.
    """


# The clock the step timer reads (a module attribute so that a test can see where timing starts and stops).
_clock = time.perf_counter


def _timed_step(model, opt, scaler, batches, *, dtype, max_grad_norm, dev) -> tuple[StepResult, float]:
    """One step of :func:`train_step`, timed with the device synchronised around it and no host sync
    inside: the numbers are read only after the clock stopped (on a GPU a tiny model's step is short
    enough that a ``.item()`` or two inside it would be much of what the timer measures)."""
    synchronize(dev)
    t0 = _clock()
    pending = _recipe_step(model, opt, scaler, batches, dtype=dtype, max_grad_norm=max_grad_norm, device=dev,
                           non_blocking=True)  # fmt: skip
    synchronize(dev)  # the step is done on the device: stop the clock
    seconds = _clock() - t0
    return pending.result(), seconds


@dataclass
class History:
    """Per-step records of a run (lists of equal length)."""

    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def append(self, step: int, result: StepResult, seconds: float) -> None:
        self.steps.append(step)
        self.losses.append(result.loss)
        self.grad_norms.append(result.grad_norm)
        self.scales.append(result.scale)
        self.skipped.append(result.skipped)
        self.seconds.append(seconds)

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped)


def train(
    model,
    opt,
    scaler,
    split,
    *,
    dtype,
    num_steps: int,
    start_step: int = 0,
    batch_size: int = 64,
    accumulation_steps: int = 1,
    max_grad_norm: float | None = 1.0,
    scheduler=None,
    seed: int = 0,
    device=None,
    show_progress: bool = False,
    log_every: int | None = None,
) -> History:
    """Run optimizer steps ``start_step .. start_step + num_steps - 1`` of the recipe on ``split``.

    The loop does not wait for the device inside a step (on a GPU each ``float(loss)``, ``.item()`` or
    ``scaler.get_scale()`` is a host sync, which stalls the queue of kernels): each step's loss, gradient
    norm and scales stay on the device (:meth:`PendingStep.values`), and the host reads them in one go every
    ``log_every`` steps, or once at the end (None, the default).  That is where a sync is acceptable: when
    logging every N steps, at the end of an epoch or a run, before a checkpoint.  ``History.seconds``
    holds each step's share of its window's time (the device synchronised at both ends), so with
    ``log_every=1`` each step is timed by itself.

    ``scheduler`` (an lr scheduler) is stepped only after steps the scaler did not skip: calling
    it after a skipped first step is what triggers PyTorch's "Detected call of
    `lr_scheduler.step()` before `optimizer.step()`" warning.  With an enabled scaler (float16) that
    needs to know after every step whether it was skipped, so such a run reads each step (one host sync
    per step, the one it needs); a disabled scaler never skips, and its scheduler steps without a read.
    With an enabled scaler, ``scaler.step`` of a non-fused optimizer reads the inf check itself (torch's
    ``.item()``); ``torch.optim.Adam(..., fused=True)`` takes it as a tensor.

    Everything is checked before the first step (as :func:`train_step` checks it, the whole split at
    once): ``num_steps`` is from 0 (nothing to do) to ``_checks.MAX_STEPS``, ``start_step + num_steps`` at
    most 2**53 (a step number, as :func:`micro_batches` takes it), ``scheduler`` None or a scheduler of ``opt``
    that steps without a metric, ``seed`` an integer from 0 to ``_checks.MAX_SEED``, ``log_every`` None or
    an integer from 1 to ``_checks.MAX_STEPS``.
    """
    num_steps = check_int("num_steps", num_steps, minimum=0, maximum=MAX_STEPS)
    log_every = None if log_every is None else check_int("log_every", log_every, minimum=1, maximum=MAX_STEPS)
    start_step = check_int("start_step", start_step, minimum=0, maximum=_MAX_STEP_NUMBER - num_steps)
    max_grad_norm = _check_max_grad_norm(max_grad_norm)
    seed = check_seed("seed", seed)
    _check_bool("show_progress", show_progress)
    dev = get_device(device)
    dtype = _precision(dtype)
    params = _check_model("model", model, dev, trainable=True)
    _check_opt(opt, params)
    _check_scaler(scaler, dev)
    _check_scheduler(scheduler, opt, stepped_by_train=True)
    _check_split_for("split", split, model, params[0].device)
    _per_step(batch_size, accumulation_steps, len(split))
    steps_end = start_step + num_steps
    steps = range(start_step, steps_end)
    if show_progress:
        steps = progress(steps, desc=f"training ({dtype_name(dtype)})")
    history = History()
    model.train()
    # A skipped step is known only on the device. The host must read it at once only when something on the
    # host depends on it before the next step: the scheduler, with an enabled scaler (a disabled one never
    # skips). Then every step is read (one sync each, the one this loop needs); otherwise every log_every.
    read_each_step = scheduler is not None and scaler.is_enabled()
    window = 1 if read_each_step else min(log_every or num_steps, max(num_steps, 1))
    # The steps' numbers wait on the device, one row per step, until the window is read in one go.
    rows = None
    pending: list[int] = []
    synchronize(dev)
    t0 = _clock()
    for step in steps:
        batches = micro_batches(
            split, step=step, batch_size=batch_size, accumulation_steps=accumulation_steps, seed=seed
        )
        result = _recipe_step(model, opt, scaler, batches, dtype=dtype, max_grad_norm=max_grad_norm, device=dev,
                              non_blocking=True)  # fmt: skip
        values = result.values()
        if rows is None:
            rows = torch.empty((window, 4), dtype=values.dtype, device=values.device)
        rows[len(pending)].copy_(values)  # a copy on the device: nothing is read yet
        pending.append(step)
        if len(pending) == window or step == steps_end - 1:
            t0 = _read_window(history, rows, pending, t0=t0, dev=dev)
            pending = []
        if scheduler is not None and not (read_each_step and history.skipped[-1]):
            scheduler.step()
    return history


def _read_window(history: History, rows: torch.Tensor, steps: list[int], *, t0: float, dev) -> float:
    """Read the rows of ``steps`` from the device in one go (one host sync) into ``history``; each step's
    time is the window's time over its steps.  Returns the clock's reading, where the next window starts."""
    synchronize(dev)
    now = _clock()
    values = rows[: len(steps)].tolist()  # the one read
    per_step = (now - t0) / len(steps)
    for step, row in zip(steps, values, strict=True):
        history.append(step, _step_result(row), per_step)
    return now


# --------------------------------------------------------------------------------------------
# Host reads, counted
# --------------------------------------------------------------------------------------------

# Every way Python turns a tensor's value into a Python object: on a GPU each one waits for the device.
_HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "numpy")


class HostReads:
    """What :func:`count_host_reads` counted: ``counts`` maps each way of reading (``"item"``,
    ``"tolist"``, ``"__float__"`` for ``float(t)``, ...) to how often it happened; ``total`` sums them."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __repr__(self) -> str:
        return f"HostReads(total={self.total}, counts={self.counts})"


class count_host_reads:  # noqa: N801 (a context manager, used like a function: with count_host_reads() as reads)
    """Count the host reads of tensors inside a ``with`` block (taught in ``07_amp_training_recipe``).

    ``with count_host_reads() as reads: ...`` counts every ``.item()``, ``.tolist()``, ``float(t)``,
    ``int(t)``, ``bool(t)``, ``t.numpy()`` and index use of a tensor that Python code makes, torch's own
    Python code included (``GradScaler.get_scale`` and a non-fused optimizer's inf check in
    ``GradScaler.step`` are ``.item()`` calls).  On a GPU each is a host sync: the host waits until the
    device has finished everything queued before it.  Reads made inside torch's C++ code (a boolean mask,
    ``nonzero``) are not seen.  The counters are torch's own methods, wrapped for the block and restored
    after it.
    """

    def __init__(self) -> None:
        self.reads = HostReads()
        self._saved: dict[str, Callable] = {}

    def __enter__(self) -> HostReads:
        if self._saved:
            raise ValueError("this count_host_reads() is already counting: make a new one for another block")
        counts = self.reads.counts

        def counting(name: str, original: Callable) -> Callable:
            @functools.wraps(original)
            def read(tensor, *args, **kwargs):
                counts[name] = counts.get(name, 0) + 1
                return original(tensor, *args, **kwargs)

            return read

        for name in _HOST_READS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original
            setattr(torch.Tensor, name, counting(name, original))
        return self.reads

    def __exit__(self, *exc) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved = {}


# --------------------------------------------------------------------------------------------
# 3b. Clipping scaled gradients: what goes wrong, measured
# --------------------------------------------------------------------------------------------

_MAX_CLIPPING_STEPS = MAX_STEPS // 4  # compare_clipping trains four runs
_CLIPPING_OPTIMIZERS = ("Adam", "SGD")


@dataclass(frozen=True)
class ClippingRun:
    """One run of :func:`compare_clipping`: ``optimizer`` ("Adam" or "SGD"), and whether
    ``clip_grad_norm_`` saw the ``scaled`` gradients (before ``unscale_``: the mistake) or the true ones.

    Per step: ``seen_norms`` is the norm ``clip_grad_norm_`` measured (``scale`` times the true norm when
    ``scaled``), ``true_norms`` the gradients' true norm, ``clipped`` whether clipping fired (as
    ``clip_grad_norm_`` decides: ``max_norm / (norm + 1e-6) < 1``), ``skipped`` whether ``GradScaler``
    skipped the step, and ``update_norms`` the norm of the change the step made to the parameters.
    """

    optimizer: str
    scaled: bool
    scale: float
    max_norm: float
    seen_norms: tuple[float, ...]
    true_norms: tuple[float, ...]
    clipped: tuple[bool, ...]
    skipped: tuple[bool, ...]
    update_norms: tuple[float, ...]

    @property
    def num_steps(self) -> int:
        return len(self.clipped)

    @property
    def num_clipped(self) -> int:
        return sum(self.clipped)

    @property
    def effective_max_norm(self) -> float:
        """The threshold in true gradient units: ``max_norm / scale`` when the scaled gradients are clipped."""
        return self.max_norm / self.scale if self.scaled else self.max_norm

    @property
    def mean_update_norm(self) -> float:
        return statistics.fmean(self.update_norms) if self.update_norms else math.nan

    @property
    def label(self) -> str:
        where = "before unscale_ (scaled gradients)" if self.scaled else "after unscale_"
        return f"{self.optimizer}, clip {where}"


@dataclass(frozen=True)
class ClippingComparison:
    """What :func:`compare_clipping` measured: ``runs`` holds, for each optimizer, the run that clips after
    ``unscale_`` and the one that clips the scaled gradients.  :meth:`sentences` reads them."""

    runs: tuple[ClippingRun, ...]

    def run(self, optimizer: str, *, scaled: bool) -> ClippingRun:
        """The run of ``optimizer`` ("Adam" or "SGD") that clipped the scaled (True) or true (False) gradients."""
        check_instance("scaled", scaled, bool, "True or False")
        found = [r for r in self.runs if r.optimizer == optimizer and r.scaled == scaled]
        if not found:
            names = sorted({r.optimizer for r in self.runs})
            raise ValueError(f"optimizer={optimizer!r} has no run here; choose one of: {', '.join(map(repr, names))}")
        return found[0]

    def update_ratio(self, optimizer: str) -> float:
        """Mean update size when clipping the scaled gradients over the mean update when clipping the true
        ones (1: the mistake changes nothing; far below 1: the steps shrink)."""
        right, wrong = self.run(optimizer, scaled=False), self.run(optimizer, scaled=True)
        return wrong.mean_update_norm / right.mean_update_norm if right.mean_update_norm > 0 else math.nan

    def sentences(self) -> list[str]:
        """One sentence on when clipping fired, then one per optimizer on what the mistake did to its steps."""
        optimizers = list(dict.fromkeys(r.optimizer for r in self.runs))
        if not optimizers:
            raise ValueError("runs is empty: there is nothing to read (recipe.compare_clipping fills it)")
        first = self.run(optimizers[0], scaled=True)
        fired = "; ".join(
            f"{o}: {self.run(o, scaled=True).num_clipped} of {first.num_steps} steps clipped with the scaled "
            f"gradients, {self.run(o, scaled=False).num_clipped} after unscale_"
            for o in optimizers
        )
        lines = [
            f"Clipping the scaled gradients at max_norm = {first.max_norm:g} clips the true gradients at "
            f"max_norm / scale = {first.max_norm:g} / {first.scale:g} = {first.effective_max_norm:.3g}. {fired}."
        ]
        for o in optimizers:
            ratio = self.update_ratio(o)
            if 0.8 <= ratio <= 1.25:
                size = f"changed little ({format_ratio(ratio)} the correct run's size)"
            elif ratio < 1:
                size = f"shrank to {ratio:.3g}x the correct run's"
            else:
                size = f"grew to {ratio:.3g}x the correct run's"
            why = {
                "Adam": "Adam divides each gradient by its running RMS, so a uniformly smaller gradient gives "
                "nearly the same step (only its eps, added to that RMS, makes tiny gradients take smaller steps)",
                "SGD": "SGD's step is the learning rate times the gradient, so a clipped gradient is a shrunken step",
            }[o]
            lines.append(f"{o}: with the scaled gradients clipped, the updates {size}: {why}.")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.sentences())


def compare_clipping(
    data,
    *,
    scale: float = 2.0**16,
    max_norm: float = 1.0,
    num_steps: int = 10,
    batch_size: int = 64,
    hidden: int = 64,
    depth: int = 2,
    lr: float = 1e-2,
    dtype=torch.float16,
    seed: int = 0,
    device=None,
) -> ClippingComparison:
    """Clip after ``unscale_`` (right) and before it (the scaled gradients: wrong), with Adam and with SGD.

    Taught in ``07_amp_training_recipe``.  Four runs of ``num_steps`` steps each from the same seeded
    :func:`make_model` on the same batches of ``data.train``: for Adam and for SGD (both at learning rate
    ``lr``), one run calls ``clip_grad_norm_(params, max_norm)`` after ``scaler.unscale_(opt)`` and one
    before it, on gradients still multiplied by ``scale``.  The scaler is a ``torch.amp.GradScaler``
    enabled at ``scale`` (it never grows; it halves only after a skipped step).  Returns a
    :class:`ClippingComparison`: how often clipping fired and how large each step's update was.

    Clipping the scaled gradients puts the threshold at ``max_norm / scale`` in true units, so it fires
    on almost every step.  What that does to training depends on the optimizer: SGD's steps shrink with
    the gradient, Adam's barely change (it is invariant to the gradient's scale, apart from its eps).

    Everything is checked before anything is built: ``data`` a ``data.Dataset`` on ``device``, ``scale``
    a normal float32 (``_checks.check_scale``), ``max_norm`` and ``lr`` finite and > 0 (``lr`` at most 1e6),
    ``num_steps`` from 1 to ``_checks.MAX_STEPS // 4``, ``batch_size`` at most the training examples,
    ``hidden`` and ``depth`` as :func:`make_model` takes them.
    """
    check_instance("data", data, Dataset, "a data.Dataset (e.g. data.load_digits())")
    scale = check_scale("scale", scale)
    max_norm = check_float("max_norm", max_norm, gt=0)
    num_steps = check_int("num_steps", num_steps, minimum=1, maximum=_MAX_CLIPPING_STEPS)
    lr = check_float("lr", lr, gt=0, le=_MAX_LR)
    dtype = _precision(dtype)
    seed = check_seed("seed", seed)
    dev = get_device(device)
    _mlp_sizes(data.num_features, data.num_classes, hidden, depth)
    _check_split("data.train", data.train)
    _per_step(batch_size, 1, len(data.train))
    model = make_model(data.num_features, data.num_classes, hidden=hidden, depth=depth, seed=seed, device=dev)
    _check_on("data.train", data.train.X.device, dev)
    _check_split_for("data.train", data.train, model, next(model.parameters()).device)
    batches = [micro_batches(data.train, step=k, batch_size=batch_size, seed=seed)[0] for k in range(num_steps)]
    runs = []
    for optimizer in _CLIPPING_OPTIMIZERS:
        for scaled in (False, True):
            runs.append(_clipping_run(optimizer, scaled, batches, data, scale=scale, max_norm=max_norm, hidden=hidden,
                                      depth=depth, lr=lr, dtype=dtype, seed=seed, dev=dev))  # fmt: skip
    return ClippingComparison(tuple(runs))


def _clipping_run(optimizer, scaled, batches, data, *, scale, max_norm, hidden, depth, lr, dtype, seed, dev):
    model = make_model(data.num_features, data.num_classes, hidden=hidden, depth=depth, seed=seed, device=dev)
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=lr) if optimizer == "Adam" else torch.optim.SGD(params, lr=lr)
    scaler = torch.amp.GradScaler(dev.type, init_scale=scale, growth_interval=_MAX_GROWTH_INTERVAL)
    wide = torch.float32 if dev.type == "mps" else torch.float64  # Apple GPUs have no float64
    rows = []  # per step, on the device: seen norm, true norm, GradScaler's inf flag, update norm
    for X, y in batches:
        before = [p.detach().clone() for p in params]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = F.cross_entropy(model(X), y)
        scaler.scale(loss).backward()
        used = _current_scale(scaler)
        if scaled:
            seen = nn.utils.clip_grad_norm_(params, max_norm)  # the mistake: the gradients are still x scale
            true = seen / used
            scaler.unscale_(opt)
        else:
            scaler.unscale_(opt)
            seen = nn.utils.clip_grad_norm_(params, max_norm)
            true = seen
        scaler.step(opt)
        found_inf = _found_inf(scaler, opt)
        scaler.update()
        update = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.detach() - b)
                                                       for p, b in zip(params, before, strict=True)]))  # fmt: skip
        rows.append(torch.stack([seen, true, found_inf, update]).to(wide))
    values = torch.stack(rows).tolist()  # one read for the whole run
    return ClippingRun(
        optimizer=optimizer,
        scaled=scaled,
        scale=scale,
        max_norm=max_norm,
        seen_norms=tuple(r[0] for r in values),
        true_norms=tuple(r[1] for r in values),
        clipped=tuple(bool(max_norm / (r[0] + 1e-6) < 1) for r in values),
        skipped=tuple(r[2] != 0 for r in values),
        update_norms=tuple(r[3] for r in values),
    )


# --------------------------------------------------------------------------------------------
# 4. Inference under autocast
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    loss: float
    accuracy: float
    num_examples: int


def evaluate(model, split, *, dtype, batch_size: int = 512, device=None) -> Evaluation:
    """Mean cross-entropy and accuracy of ``model`` on ``split``, forward passes under autocast.

    ``torch.inference_mode()`` records no graph, so nothing is kept for backward; autocast
    still runs the matmuls in ``dtype``.  ``model`` and ``split`` are checked as :func:`train` checks them.
    """
    dev = get_device(device)
    dtype = _precision(dtype)
    batch_size = check_int("batch_size", batch_size, minimum=1, maximum=_MAX_SIZE)
    params = _check_model("model", model, dev, trainable=False)
    _check_split("split", split)
    if len(split) == 0:
        raise ValueError("split must hold at least one example, got an empty split")
    _check_split_for("split", split, model, params[0].device)
    was_training = model.training
    model.eval()
    sums, hits = [], []
    try:
        with torch.inference_mode(), torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            for start in range(0, len(split), batch_size):
                X = split.X[start : start + batch_size]
                y = split.y[start : start + batch_size]
                logits = model(X)
                sums.append(F.cross_entropy(logits.float(), y, reduction="sum"))
                hits.append((logits.argmax(dim=1) == y).sum())
    finally:
        model.train(was_training)
    # The per-batch sums are added up in float64 on the host, one after another: Apple GPUs (MPS) have
    # no float64, and a Python float is one.  (Not sum(): since Python 3.12 it compensates rounding.)
    loss_sum = 0.0
    for batch_sum in torch.stack(sums).cpu().double().tolist():
        loss_sum += batch_sum
    correct = int(torch.stack(hits).sum())
    n = len(split)
    return Evaluation(loss_sum / n, correct / n, n)


# --------------------------------------------------------------------------------------------
# 5. Checkpoints that resume bit for bit
# --------------------------------------------------------------------------------------------


_CHECKPOINT_KEYS = ("step", "model", "optimizer", "scaler", "scheduler", "rng_cpu", "rng_cuda", "extra")
_EXTRA_DEPTH = 32  # how deeply extra's lists and dicts may nest (a list that holds itself never ends)
_EXTRA_ALLOWED = (
    "None, bool, int, float, str, tensors, and lists, tuples and dicts (with string keys) of those"
)


class _MissingCheckpoint(FileNotFoundError, ValueError):
    """No file at a checkpoint's path: a FileNotFoundError, and a ValueError like every refused argument."""


def _check_path(path) -> Path:
    check_instance("path", path, (str, os.PathLike), "a file path (a str or a pathlib.Path)")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"path={str(path)!r} is a directory, not a checkpoint file: name a file, e.g. 'ckpt.pt'")
    return path


def _checkpoint_value(name: str, value, depth: int = 0):
    """``value`` as what ``torch.load(weights_only=True)`` reads back: plain Python types (numpy scalars
    and subclasses such as IntEnum or namedtuples become plain ints, floats, tuples...) and plain tensors."""
    if depth > _EXTRA_DEPTH:
        shown = name if len(name) <= 60 else name[:60] + "..."
        raise ValueError(f"{shown} nests more than {_EXTRA_DEPTH} levels deep (does a list or dict hold itself?)")
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, Real):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_quantized or value.is_meta:
            raise ValueError(f"{name} is a {value.layout} tensor{' (quantized)' if value.is_quantized else ''}"
                             f"{' on the meta device' if value.is_meta else ''}: save a dense tensor (e.g. .to_dense())")
        return value.detach().as_subclass(torch.Tensor)
    if isinstance(value, (list, tuple)):
        items = [_checkpoint_value(f"{name}[{i}]", v, depth + 1) for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, Mapping):
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise ArgumentTypeError(f"{name} has the key {key!r}: a checkpoint's extra takes string keys only")
            out[str.__str__(key)] = _checkpoint_value(f"{name}[{key!r}]", v, depth + 1)
        return out
    raise ArgumentTypeError(
        f"{name} is a {type(value).__name__} ({value!r:.60}), which a checkpoint loaded with weights_only=True "
        f"cannot read back; allowed: {_EXTRA_ALLOWED}"
    )


def save_checkpoint(path, model, opt, scaler, *, step: int, scheduler=None, extra: dict | None = None) -> Path:
    """Save everything a resumed run needs to continue identically.

    Model and optimizer state (Adam's moments and step counts), the GradScaler's state (its
    current scale and growth tracker: forget it and a resumed float16 run restarts from the
    initial scale, skipping steps the first run already got past), the lr scheduler, the
    step number, and the RNG state (for anything random, e.g. dropout).

    ``extra`` is None or a dict (string keys) of what :func:`load_checkpoint`'s ``weights_only=True``
    can read back: None, bool, int, float, str, tensors, and lists, tuples and dicts of those (numpy
    scalars are saved as Python numbers).  Everything is checked before the file is written, and the
    file is written whole or not at all (to a temporary file, then renamed), so a checkpoint this
    function writes always loads.
    """
    path = _check_path(path)
    step = check_int("step", step, minimum=0, maximum=_MAX_STEP_NUMBER)
    params = _model_params("model", model)
    _check_opt(opt, params)
    _check_scaler(scaler)
    _check_scheduler(scheduler, opt, stepped_by_train=False)
    if extra is not None and not isinstance(extra, Mapping):
        raise ArgumentTypeError(f"extra must be None or a dict, got {type(extra).__name__}: {extra!r:.80}")
    extra = _checkpoint_value("extra", extra or {})
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scaler": scaler.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng_cpu": torch.random.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "extra": extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        torch.save(state, partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _listed(items, limit: int = 4) -> str:
    items = [str(i) for i in items]
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _int_value(value, *, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _check_model_state(saved, model, where: str) -> None:
    if not isinstance(saved, Mapping):
        raise ValueError(f"{where}: its model state is a {type(saved).__name__}, not a state dict")
    own = model.state_dict()
    missing, unknown = [k for k in own if k not in saved], [k for k in saved if k not in own]
    if missing or unknown:
        raise ValueError(
            f"{where} holds the weights of another model: "
            + "; ".join(
                part
                for part in (
                    f"the model has {_listed(missing)}, which the checkpoint lacks" if missing else "",
                    f"the checkpoint has {_listed(unknown)}, which the model lacks" if unknown else "",
                )
                if part
            )
            + ": build the model as the saved run did (same num_features, hidden, depth, num_classes)"
        )
    for key, mine in own.items():
        theirs = saved[key]
        if not isinstance(theirs, torch.Tensor) or tuple(theirs.shape) != tuple(mine.shape):
            shape = tuple(theirs.shape) if isinstance(theirs, torch.Tensor) else type(theirs).__name__
            raise ValueError(
                f"{where} holds the weights of another model: {key} is {shape} there and {tuple(mine.shape)} in the "
                "model: build the model as the saved run did (same num_features, hidden, depth, num_classes)"
            )


# Hyperparameter flags torch's optimizers have gained over versions (each filled with a default when absent),
# and the initial_lr an lr scheduler adds: a group may have or lack them and still load.
_OPTIONAL_GROUP_KEYS = {"foreach", "maximize", "capturable", "differentiable", "fused", "decoupled_weight_decay",
                        "initial_lr"}  # fmt: skip


def _check_optimizer_state(saved, opt, where: str) -> None:
    kind = type(opt).__name__
    if not isinstance(saved, Mapping) or set(saved) != {"state", "param_groups"}:
        raise ValueError(f"{where}: its optimizer state is not an optimizer's state dict (state and param_groups)")
    groups, state = saved["param_groups"], saved["state"]
    if not isinstance(groups, (list, tuple)) or not isinstance(state, Mapping):
        raise ValueError(f"{where}: its optimizer state is not an optimizer's state dict (state and param_groups)")
    if len(groups) != len(opt.param_groups):
        raise ValueError(
            f"{where} holds {len(groups)} optimizer parameter group(s), but opt has {len(opt.param_groups)}"
        )
    ids, params = [], []
    for i, (theirs, mine) in enumerate(zip(groups, opt.param_groups, strict=True)):
        if not isinstance(theirs, Mapping) or not isinstance(theirs.get("params"), (list, tuple)):
            raise ValueError(f"{where}: its optimizer's param_groups[{i}] is not a parameter group")
        if len(theirs["params"]) != len(mine["params"]):
            raise ValueError(
                f"{where}: its optimizer's group {i} holds {len(theirs['params'])} parameters, opt's "
                f"{len(mine['params'])}: build the optimizer as the saved run did, from the same model"
            )
        lacking = set(mine) - set(theirs) - _OPTIONAL_GROUP_KEYS
        foreign = set(theirs) - set(mine) - _OPTIONAL_GROUP_KEYS
        if lacking or foreign:
            raise ValueError(
                f"{where} was saved from another kind of optimizer than opt ({kind}): its hyperparameters "
                + ", ".join(
                    part
                    for part in (
                        f"lack {_listed(sorted(lacking))}" if lacking else "",
                        f"include {_listed(sorted(foreign))}" if foreign else "",
                    )
                    if part
                )
                + "; build opt as the saved run did"
            )
        ids += list(theirs["params"])
        params += list(mine["params"])
    if len(set(map(repr, ids))) != len(ids):
        raise ValueError(f"{where}: its optimizer's param_groups name a parameter twice")
    by_id = dict(zip(ids, params, strict=True))
    for key, entry in state.items():
        if key not in by_id or not isinstance(entry, Mapping):
            raise ValueError(f"{where}: its optimizer state has an entry ({key!r}) for no parameter of its groups")
        shape = tuple(by_id[key].shape)
        for name, value in entry.items():
            if isinstance(value, torch.Tensor) and value.ndim > 0 and tuple(value.shape) != shape:
                raise ValueError(
                    f"{where}: its optimizer state {name!r} has shape {tuple(value.shape)}, but the parameter it "
                    f"belongs to has shape {shape}: build the model and optimizer as the saved run did"
                )


_SCALER_KEYS = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}


def _check_scaler_state(saved, scaler, where: str) -> None:
    if not isinstance(saved, Mapping):
        raise ValueError(f"{where}: its scaler state is a {type(saved).__name__}, not a GradScaler's state dict")
    if not scaler.is_enabled():
        return  # a disabled GradScaler ignores whatever it is given (as torch's load_state_dict does)
    if not saved:
        raise ValueError(
            f"{where} holds no loss-scale state (it was saved with a disabled scaler: a bfloat16 or float32 run), "
            "but scaler is enabled (float16): pass recipe.make_scaler(dtype, device) for the saved run's dtype"
        )
    if set(saved) != _SCALER_KEYS:
        raise ValueError(f"{where}: its scaler state has {_listed(sorted(saved))}, not a GradScaler's {_listed(sorted(_SCALER_KEYS))}")
    scale, growth, backoff = saved["scale"], saved["growth_factor"], saved["backoff_factor"]
    for name, value in (("scale", scale), ("growth_factor", growth), ("backoff_factor", backoff)):
        if isinstance(value, bool) or not isinstance(value, Real) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"{where}: its scaler's {name} is {value!r}, not a finite number > 0")
    if not _int_value(saved["growth_interval"], minimum=1) or not _int_value(saved["_growth_tracker"], minimum=0):
        raise ValueError(
            f"{where}: its scaler's growth_interval ({saved['growth_interval']!r}) or growth tracker "
            f"({saved['_growth_tracker']!r}) is not a count"
        )


def _check_scheduler_state(saved, scheduler, opt, where: str) -> None:
    if scheduler is None:
        if saved is not None:
            raise ValueError(
                f"{where} holds lr-scheduler state, but no scheduler was given: pass scheduler= (built as the saved "
                "run's was), or the resumed run's learning rates differ from the uninterrupted run's"
            )
        return
    if saved is None:
        raise ValueError("scheduler was given, but the checkpoint holds no scheduler state")
    own = scheduler.state_dict()
    if not isinstance(saved, Mapping) or set(saved) != set(own):
        raise ValueError(
            f"{where} holds the state of another kind of lr scheduler than {type(scheduler).__name__}: build the "
            "scheduler as the saved run did"
        )
    lrs = saved.get("base_lrs")
    if lrs is not None and (not isinstance(lrs, (list, tuple)) or len(lrs) != len(opt.param_groups)):
        raise ValueError(f"{where}: its scheduler's base_lrs do not match opt's {len(opt.param_groups)} parameter group(s)")


def _check_rng_states(cpu, cuda, where: str) -> None:
    own = torch.random.get_rng_state()
    if not isinstance(cpu, torch.Tensor) or cpu.dtype != torch.uint8 or tuple(cpu.shape) != tuple(own.shape):
        raise ValueError(f"{where}: its CPU random-generator state is not one (a uint8 tensor of {own.numel()} bytes)")
    if cuda is None:
        return
    if not isinstance(cuda, (list, tuple)) or not all(
        isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.ndim == 1 for t in cuda
    ):
        raise ValueError(f"{where}: its CUDA random-generator states are not a list of uint8 tensors")


def _check_checkpoint(state, where: str, model, opt, scaler, scheduler) -> None:
    """Everything :func:`load_checkpoint` will load, checked against what it will be loaded into."""
    if not isinstance(state, dict):
        raise ValueError(f"{where} holds a {type(state).__name__}, not the dict recipe.save_checkpoint writes")
    missing = [k for k in _CHECKPOINT_KEYS if k not in state]
    unknown = [k for k in state if k not in _CHECKPOINT_KEYS]
    if missing or unknown:
        raise ValueError(
            f"{where} is not a checkpoint recipe.save_checkpoint wrote: "
            + "; ".join(
                part
                for part in (f"it lacks {_listed(missing)}" if missing else "",
                             f"it has unknown entries {_listed(map(repr, unknown))}" if unknown else "")  # fmt: skip
                if part
            )
            + f" (a checkpoint holds {', '.join(_CHECKPOINT_KEYS)})"
        )
    if not _int_value(state["step"], minimum=0):
        raise ValueError(f"{where}: its step is {state['step']!r}, not a step number")
    _check_model_state(state["model"], model, where)
    _check_optimizer_state(state["optimizer"], opt, where)
    _check_scaler_state(state["scaler"], scaler, where)
    _check_scheduler_state(state["scheduler"], scheduler, opt, where)
    _check_rng_states(state["rng_cpu"], state["rng_cuda"], where)
    if not isinstance(state["extra"], dict):
        raise ValueError(f"{where}: its extra is a {type(state['extra']).__name__}, not a dict")


def load_checkpoint(path, model, opt, scaler, *, scheduler=None, device=None) -> int:
    """Restore what :func:`save_checkpoint` saved into existing objects; returns the step to resume at.

    Loaded with ``weights_only=True``: a checkpoint is data, and unpickling arbitrary objects
    from a file can run code.

    Validate, then change: the whole checkpoint is checked first (every entry present and no other,
    the weights' names and shapes against ``model``, the optimizer state against ``opt``, the loss-scale
    state against ``scaler``, scheduler state present exactly when ``scheduler`` is given), and a refused
    load changes nothing: not the weights, the optimizer, the scaler, the scheduler or the RNG.  A file
    that is not a checkpoint (junk, empty, another torch file, a foreign pickle) raises ValueError naming
    the path; a missing file raises FileNotFoundError, which is also a ValueError.
    """
    path = _check_path(path)
    params = _model_params("model", model)
    _check_opt(opt, params)
    _check_scaler(scaler)
    _check_scheduler(scheduler, opt, stepped_by_train=False)
    dev = get_device(device)
    if not path.exists():
        raise _MissingCheckpoint(2, f"no checkpoint file at path={str(path)!r} (recipe.save_checkpoint writes one)")
    if not path.is_file():
        raise ValueError(f"path={str(path)!r} is not a checkpoint file")
    where = f"the checkpoint at path={str(path)!r}"
    try:
        with warnings.catch_warnings():
            # A foreign pickle makes torch warn about its protocol before it refuses the file.
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            state = torch.load(path, map_location=dev, weights_only=True)
    except Exception as err:  # junk, an empty file, a foreign pickle: torch's errors differ for each
        if isinstance(err, EOFError):
            reason = "the file is empty or cut short"
        elif isinstance(err, pickle.UnpicklingError):
            reason = "it holds Python objects that are neither tensors nor plain values (a foreign pickle?)"
        else:
            reason = f"it is not a file torch.save wrote ({type(err).__name__})"
        raise ValueError(
            f"path={str(path)!r} is not a checkpoint recipe.save_checkpoint wrote: torch.load(weights_only=True) "
            f"cannot read it: {reason}"
        ) from None
    _check_checkpoint(state, where, model, opt, scaler, scheduler)

    # Checked above; should torch refuse anyway, put back what was already changed.
    before = (
        {k: v.detach().clone() for k, v in model.state_dict().items()},
        opt.state_dict(),  # load_state_dict replaces the state tensors, never writes into them
        scaler.state_dict(),
        scheduler.state_dict() if scheduler is not None else None,
        torch.random.get_rng_state(),
    )
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        torch.random.set_rng_state(state["rng_cpu"].cpu())
        if state["rng_cuda"] is not None and torch.cuda.is_available():
            # A checkpoint from a machine with more GPUs restores the generators of the GPUs this one has.
            for i, rng in enumerate(state["rng_cuda"][: torch.cuda.device_count()]):
                torch.cuda.set_rng_state(rng.cpu(), i)
    except Exception as err:
        model.load_state_dict(before[0])
        opt.load_state_dict(before[1])
        if scaler.is_enabled() and before[2]:
            scaler.load_state_dict(before[2])
        if scheduler is not None:
            scheduler.load_state_dict(before[3])
        torch.random.set_rng_state(before[4])
        raise ValueError(f"{where} could not be loaded, and nothing was changed: {type(err).__name__}: {err}") from err
    return state["step"]


# --------------------------------------------------------------------------------------------
# 6. FP32 versus AMP, measured
# --------------------------------------------------------------------------------------------


def saved_activation_bytes(model, X, y, *, dtype, device=None) -> int:
    """Bytes autograd saves for backward during one forward pass of ``model`` on ``X``.

    Measured with ``torch.autograd.graph.saved_tensors_hooks``: every tensor the forward keeps
    for the backward pass is counted once (by storage).  This is the activation memory AMP
    shrinks; the float32 weights and optimizer state do not shrink.  ``X`` and ``y`` are one batch,
    checked as :func:`train_step` checks a micro-batch.
    """
    dev = get_device(device)
    dtype = _precision(dtype)
    params = _check_model("model", model, dev, trainable=False)
    _check_examples("X", "y", X, y, model, params[0].device)
    _check_example_values([(X, y)], model, "y and X")
    seen: dict[tuple[int, int], int] = {}

    def pack(t):
        storage = t.untyped_storage()
        seen[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = F.cross_entropy(model(X), y)
    del loss
    return sum(seen.values())
















def _adam(params, *, lr: float, device: torch.device) -> torch.optim.Adam:
    """Adam for the comparison: fused on CUDA, the default elsewhere.

    On CUDA the fused kernel is one launch for all parameters, and with an enabled GradScaler it takes
    the inf check as a tensor: a non-fused optimizer makes ``scaler.step`` call ``found_inf.item()``, a
    host sync in every float16 step.  The CPU has a fused Adam too, but it rounds differently in the
    last bit (so every stored CPU loss would change), and a CPU ``.item()`` waits for nothing.
    """
    return torch.optim.Adam(params, lr=lr, fused=device.type == "cuda")


@dataclass(frozen=True)
class _MemoryCounters:
    """The allocator statistics :func:`_step_memory` reads (CUDA's, or a test's fakes)."""

    synchronize: Callable[[], None]
    allocated: Callable[[], int]
    reset_peak: Callable[[], None]
    peak: Callable[[], int]


def _memory_counters(dev: torch.device) -> _MemoryCounters | None:
    """CUDA's allocator counters for ``dev``; None elsewhere, where no allocator statistic is reliable."""
    if dev.type != "cuda":
        return None
    return _MemoryCounters(
        synchronize=lambda: torch.cuda.synchronize(dev),
        allocated=lambda: torch.cuda.memory_allocated(dev),
        reset_peak=lambda: torch.cuda.reset_peak_memory_stats(dev),
        peak=lambda: torch.cuda.max_memory_allocated(dev),
    )


def _numbered_step(model, opt, scaler, split, step: int, *, dtype, dev, **batch_kw) -> PendingStep:
    """Optimizer step ``step`` of a run on ``split`` (untimed, and without reading anything back)."""
    batches = micro_batches(split, step=step, **batch_kw)
    return _recipe_step(model, opt, scaler, batches, dtype=dtype, device=dev, non_blocking=True)


def _step_memory(step: Callable[[int], object], counters: _MemoryCounters) -> int:
    """Peak bytes one training step allocates above what was already allocated before it.

    ``step(k)`` runs optimizer step ``k`` of a fresh model.  Step 0 is a warm-up, not measured: first
    steps create cuBLAS workspaces, the gradients and Adam's state, which then stay.  The baseline
    taken after it holds everything alive (the dataset, the model, its gradients, Adam's state), so the
    difference is what a step itself needs on top: activations kept for backward, autocast's copies,
    temporaries (as ``race._measure_memory`` measures a race's contestants).
    """
    step(0)
    counters.synchronize()
    base = int(counters.allocated())
    counters.reset_peak()
    step(1)
    counters.synchronize()
    return int(counters.peak()) - base


@dataclass(frozen=True)
class PrecisionResult:
    """One row of :func:`compare_precisions`.

    ``step_seconds`` are the timed steps (after the warm-up), in the lockstep rounds all dtypes took
    together, so round ``i`` of every row belongs together; ``speedup`` is this row's
    ``timing.SpeedupEstimate`` against the first row (FP32) from those rounds (None for the first
    row); ``context`` is ``timing.timing_context`` at the time (device, threads, CPU instructions).
    ``peak_memory_bytes`` is what one training step allocated on the GPU above what was already
    allocated (None off CUDA); ``step_flops`` and ``step_bytes`` are :func:`step_flops` and the lower
    bound :func:`step_bytes` for one step, from which :attr:`regime` reads what limited the step.
    """

    dtype: torch.dtype
    seconds_per_step: float
    saved_bytes: int
    peak_memory_bytes: int | None
    test_accuracy: float
    test_loss: float
    final_train_loss: float
    num_skipped: int
    losses: tuple[float, ...] = ()
    threads: int = 0
    step_seconds: tuple[float, ...] = ()
    speedup: SpeedupEstimate | None = None
    context: dict = field(default_factory=dict, compare=False)
    step_flops: float | None = None
    step_bytes: float | None = None

    @property
    def name(self) -> str:
        return dtype_name(self.dtype)

    @property
    def regime(self) -> Regime | None:
        """What limited this row's median step on its device (``race.regime_for``: launch-bound,
        memory-bound, compute-bound, or unknown where the device's datasheet is not known, as on a
        CPU); None when the row carries no FLOP and byte counts."""
        if self.step_flops is None or self.step_bytes is None or self.seconds_per_step <= 0:
            return None


        dtype = self.dtype
        ctx = self.context or {}
        if dtype == torch.float32 and ctx.get("tf32_matmul") and tuple(ctx.get("capability") or (0, 0)) >= (8, 0):
            dtype = "tf32"  # with TF32 on, the "FP32" baseline's matmuls run at the TF32 Tensor Core rate
        return regime_for(self.seconds_per_step, self.step_flops, self.step_bytes, dtype, ctx, unit=f"{self.name} step")


def compare_precisions(
    data,
    dtypes: Sequence = (torch.float32, torch.bfloat16),
    *,
    num_steps: int = 30,
    batch_size: int = 64,
    accumulation_steps: int = 1,
    hidden: int = 64,
    depth: int = 2,
    lr: float = 1e-2,
    warmup_steps: int = 3,
    seed: int = 0,
    threads: int | None = None,
    device=None,
    show_progress: bool = False,
) -> list[PrecisionResult]:
    """Train the same seeded model once per dtype, on the same batches, and measure what AMP changes.

    Taught in ``07_amp_training_recipe``.  The runs advance in lockstep (step 0 of every dtype,
    then step 1, ...), and the order within a step flips every step, so a machine that gets busier
    halfway through slows every dtype alike and no dtype always goes first.  Each step is timed
    with the device synchronised around it and no host sync inside (the loss, gradient norm and scale
    are read after the clock stops; on CUDA Adam is fused, so a float16 step does not read its inf
    check on the host either); ``seconds_per_step`` is the median over the steps after
    ``warmup_steps``, and ``speedup`` (every row after the first) is ``timing.speedup_estimate`` of
    the first dtype's step times against this one's, paired step by step: a speed-up with a
    confidence interval, which says "too close to call" when the interval straddles 1.
    ``saved_bytes`` comes from :func:`saved_activation_bytes` on one batch;
    ``peak_memory_bytes`` is the peak memory of one training step on CUDA: a fresh model takes an
    untimed warm-up step (which creates cuBLAS workspaces, gradients and Adam's state), then one
    more step, and the row reports ``torch.cuda.max_memory_allocated`` during that step minus
    ``torch.cuda.memory_allocated`` just before it.  Without the subtraction the number would be
    mostly the dataset, the weights and Adam's state, which every dtype shares, and FP32 and AMP
    would look alike.  Elsewhere it is None: no allocator statistic is reliable there.  Accuracy and
    loss come from :func:`evaluate` under the same dtype; ``step_flops`` and ``step_bytes`` from
    :func:`step_flops` and :func:`step_bytes`, so that ``PrecisionResult.regime`` can say what
    limited a step.

    ``threads`` sets torch's CPU thread count for the comparison (restored afterwards; None keeps
    the current one).  A model this small runs fastest on one thread, and on a machine shared with
    other programs, extra threads mostly measure waiting for each other.

    Everything is checked before the first model is built: ``data`` a ``data.Dataset`` on ``device``,
    ``num_steps`` times the number of dtypes at most ``_checks.MAX_STEPS`` steps in all, ``hidden`` and
    ``depth`` as :func:`make_model` takes them, ``lr`` at most 1e6 (``training.MAX_LR``), ``threads`` from 1
    to 1024.
    """
    check_instance("data", data, Dataset, "a data.Dataset (e.g. data.load_digits())")
    dev = get_device(device)
    if isinstance(dtypes, (torch.dtype, str)):
        raise ArgumentTypeError(f"dtypes must be a sequence of dtypes, e.g. (torch.float32, 'bf16'), got {dtypes!r}")
    dts = [_precision(d, name="dtypes") for d in _sequence("dtypes", dtypes, "a sequence of dtypes")]
    if threads is not None:
        threads = check_int("threads", threads, minimum=1, maximum=_MAX_THREADS)
        with torch_threads(threads):
            return compare_precisions(
                data, dts, num_steps=num_steps, batch_size=batch_size, accumulation_steps=accumulation_steps,
                hidden=hidden, depth=depth, lr=lr, warmup_steps=warmup_steps, seed=seed, threads=None,
                device=dev, show_progress=show_progress,
            )  # fmt: skip
    if not dts:
        raise ValueError("dtypes must name at least one of: float32, bfloat16, float16")
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0, maximum=MAX_STEPS - 1)
    num_steps = check_int("num_steps", num_steps, minimum=warmup_steps + 1, maximum=MAX_STEPS)
    if num_steps * len(dts) > MAX_STEPS:
        raise ValueError(
            f"num_steps={num_steps} for {len(dts)} dtypes is {num_steps * len(dts)} training steps, more than the "
            f"{MAX_STEPS} allowed in all (_checks.MAX_STEPS): choose num_steps <= {MAX_STEPS // len(dts)}"
        )
    lr = check_float("lr", lr, gt=0, le=_MAX_LR)
    _mlp_sizes(data.num_features, data.num_classes, hidden, depth)
    seed = check_seed("seed", seed)
    _check_bool("show_progress", show_progress)
    _per_step(batch_size, accumulation_steps, len(data.train))
    for which, split in (("data.train", data.train), ("data.test", data.test)):
        if len(split) == 0:
            raise ValueError(f"{which} holds no examples")
        _check_on(which, split.X.device, dev)
        labels = split.y
        low, high = torch.stack([labels.min(), labels.max()]).tolist()
        if low < 0 or high >= data.num_classes:
            raise ValueError(
                f"{which} holds class labels from {low} to {high}, but data.num_classes={data.num_classes} allows "
                f"0 to {data.num_classes - 1}"
            )

    def fresh(dtype):
        model = make_model(data.num_features, data.num_classes, hidden=hidden, depth=depth, seed=seed, device=dev)
        return model, _adam(model.parameters(), lr=lr, device=dev), make_scaler(dtype, dev)

    batch_kw = dict(batch_size=batch_size, accumulation_steps=accumulation_steps, seed=seed)
    peaks: dict[torch.dtype, int | None] = dict.fromkeys(dts)
    counters = _memory_counters(dev)
    if counters is not None:
        for dtype in dts:
            model, opt, scaler = fresh(dtype)
            step = functools.partial(_numbered_step, model, opt, scaler, data.train, dtype=dtype, dev=dev, **batch_kw)
            peaks[dtype] = _step_memory(step, counters)
            del model, opt, scaler, step

    context = timing_context(dev)
    runs = [(dtype, *fresh(dtype), History()) for dtype in dts]
    steps = range(num_steps)
    if show_progress:
        steps = progress(steps, desc="FP32 vs AMP")
    for step in steps:
        batches = micro_batches(data.train, step=step, **batch_kw)
        # Flip the order every step: whoever runs second may find caches warm (or the CPU clocked
        # down), and that should not always favour the same dtype.
        for dtype, model, opt, scaler, history in runs if step % 2 == 0 else runs[::-1]:
            result, seconds = _timed_step(model, opt, scaler, batches, dtype=dtype, max_grad_norm=1.0, dev=dev)
            history.append(step, result, seconds)

    flops = step_flops(data.num_features, data.num_classes, hidden=hidden, depth=depth, batch_size=batch_size,
                       accumulation_steps=accumulation_steps)  # fmt: skip
    rows = []
    X, y = micro_batches(data.train, step=0, batch_size=batch_size, seed=seed)[0]
    base_seconds = tuple(runs[0][4].seconds[warmup_steps:])
    for i, (dtype, model, _opt, _scaler, history) in enumerate(runs):
        ev = evaluate(model, data.test, dtype=dtype, device=dev)
        timed = tuple(history.seconds[warmup_steps:])
        rows.append(
            PrecisionResult(
                dtype=dtype,
                seconds_per_step=statistics.median(timed),
                saved_bytes=saved_activation_bytes(model, X, y, dtype=dtype, device=dev),
                peak_memory_bytes=peaks[dtype],
                test_accuracy=ev.accuracy,
                test_loss=ev.loss,
                final_train_loss=history.losses[-1],
                num_skipped=history.num_skipped,
                losses=tuple(history.losses),
                threads=torch.get_num_threads(),
                step_seconds=timed,
                speedup=speedup_estimate(base_seconds, timed) if i > 0 else None,
                context=context,
                step_flops=flops,
                step_bytes=step_bytes(data.num_features, data.num_classes, hidden=hidden, depth=depth,
                                      batch_size=batch_size, accumulation_steps=accumulation_steps, dtype=dtype),
            )  # fmt: skip
        )
    return rows


def comparison_rows(results: Sequence[PrecisionResult]) -> list[list[str]]:
    """Table rows (for ``widgets.table_html``, header :data:`COMPARISON_HEADER`), against the first
    result (FP32).

    The speed-up is FP32 time / AMP time, with its 95% interval from the paired steps: above 1 AMP
    is faster, below 1 it is slower.  ``results`` is :func:`compare_precisions`' non-empty list."""
    results = _results("results", results, minimum=1)
    base = results[0]
    rows = []
    for i, r in enumerate(results):
        if i == 0:
            speed = "1 (baseline)"
        else:
            est = r.speedup if r.speedup is not None else _speedup_of(base, r)
            speed = f"{format_ratio(est.ratio)} ({est.ends_text()})" if est is not None else "n/a"
        peak = "n/a" if r.peak_memory_bytes is None else format_bytes(r.peak_memory_bytes)
        rows.append(
            [
                r.name,
                f"{r.seconds_per_step * 1e3:.2f} ms",
                speed,
                f"{r.saved_bytes / 1024:.0f} KiB"
                + (f" ({r.saved_bytes / base.saved_bytes:.2f}x)" if base.saved_bytes > 0 else ""),
                peak,
                f"{r.test_accuracy:.1%}",
                str(r.num_skipped),
            ]
        )
    return rows


COMPARISON_HEADER = [
    "precision",
    "time per step (median)",
    "speed-up vs FP32 (95% interval)",
    "saved for backward (one batch)",
    "peak CUDA memory per step",
    "test accuracy",
    "skipped steps",
]


def _results(name: str, results, *, minimum: int) -> list[PrecisionResult]:
    what = "compare_precisions' list of PrecisionResult rows (the float32 baseline first)"
    results = _sequence(name, results, what)
    for i, r in enumerate(results):
        check_instance(f"{name}[{i}]", r, PrecisionResult, "a PrecisionResult (a row of recipe.compare_precisions)")
    if len(results) < minimum:
        need = "at least one row" if minimum == 1 else "the float32 baseline, then at least one AMP row"
        raise ValueError(f"{name} must be {what}: {need}, got {len(results)} row(s)")
    return results


def _speedup_of(base: PrecisionResult, r: PrecisionResult) -> SpeedupEstimate | None:
    if not base.step_seconds or len(base.step_seconds) != len(r.step_seconds):
        return None
    return speedup_estimate(base.step_seconds, r.step_seconds)


# --------------------------------------------------------------------------------------------
# 7. What the comparison says, read from the numbers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComparisonReading:
    """What :func:`read_comparison` concludes, one sentence (or claim) per topic.

    ``speed`` says whether AMP was faster, slower or too close to call, with the interval;
    ``expectation`` whether that matches the decision flow's expectation, and what to do if not (with
    the AMP step's regime as the reason, where the GPU's datasheet is known: ``PrecisionResult.regime``);
    ``memory`` reads the saved-for-backward (and, on CUDA, peak) memory ratios; ``accuracy`` is a
    ``claims.Claim`` that AMP's test accuracy is within the tolerance of FP32's.  ``outcome`` is the
    speed-up's ``"faster"``, ``"slower"`` or ``"too close to call"``; ``matches_expectation`` is True or
    False, or None where the flow made no prediction or the measurement cannot decide.

    The speed sentences rest on timings and belong in a cell marked volatile; the memory sentence
    rests on tensor sizes and the accuracy claim on a tolerance, so those hold on every machine.
    """

    speed: str
    expectation: str
    memory: str
    accuracy: Claim
    outcome: str
    matches_expectation: bool | None

    def __str__(self) -> str:
        return "\n".join([self.speed, self.expectation, self.memory, str(self.accuracy)])


def _small_model_reason(device: str, regime: Regime | None = None) -> str:
    """Why a small model's speed-up is not a large matmul's: the measured regime where the device's
    datasheet is known, else what is typical of ``device``."""
    if regime is not None and regime.name != "unknown":
        return f"{regime.text[:1].upper()}{regime.text[1:]}."
    if device == "cuda":
        return (
            "A model this small is bound by kernel launches and Python, not by arithmetic, so faster matmuls "
            "change little while autocast's casts still cost time."
        )
    if device == "cpu":
        return (
            "Matrices this small keep the CPU's 16-bit units busy only briefly, so the casts autocast adds "
            "cost about as much as the faster multiply saves."
        )
    return "A model this small is bound by per-op overhead, not by arithmetic."


def _expectation_sentence(choice: AmpChoice, outcome: str, regime: Regime | None = None) -> tuple[str, bool | None]:
    """The sentence comparing ``outcome`` with ``choice.expect_speedup``, and whether they agree.

    ``regime`` is what limited the AMP step (``PrecisionResult.regime``): where it is known, it is
    the explanation, composed from the measured step time and the datasheet's rates."""
    basis = f" ({choice.basis})" if choice.basis else ""
    small = _small_model_reason(choice.device, regime)
    known = regime is not None and regime.name != "unknown"
    # Without a regime, "noise" is all the course can say; with one, the interval is what straddles 1.
    noise = "within the interval of the paired steps" if known else "within the noise"
    race = "Notebook 06's race, at larger sizes, shows where AMP starts to pay on this machine."
    expect = choice.expect_speedup
    if expect is None:
        then = {
            "faster": "AMP pays here at this size.",
            "slower": "For speed at this size, train in FP32 here; AMP still saves memory.",
            "too close to call": f"At this size the difference is {noise}: decide by memory, not speed. "
            + (f"{small} {race}" if known else race),
        }[outcome]
        return f"The decision flow could not predict the speed here{basis}: this measurement is the answer. {then}", None
    if expect:
        if outcome == "faster":
            return f"That matches the decision flow, which expected AMP to pay here{basis}.", True
        if outcome == "slower":
            return (
                f"The decision flow expected AMP to pay here{basis}, on large matmuls, and this model is small: "
                f"the measurement does not match. {small} What to do: trust the measurement for this model "
                f"(train it in FP32, or keep AMP for the memory it saves), and race larger sizes. {race}",
                False,
            )
        return (
            f"The decision flow expected AMP to pay here{basis}, on large matmuls; at this size the "
            f"measurement cannot tell, so it neither confirms nor contradicts the flow. {small} {race}",
            None,
        )
    if outcome == "slower":
        return (
            f"That matches the decision flow, which expected no speed-up here{basis}. For speed on this "
            "machine train in FP32; use AMP to learn the recipe or to save memory.",
            True,
        )
    if outcome == "faster":
        return (
            f"The decision flow expected no speed-up here{basis}, yet AMP was faster: the measurement does "
            "not match. What to do: run the comparison again; if AMP stays faster, trust the measurement "
            "(the flow's facts about this machine may be incomplete) and confirm it at larger sizes in "
            "notebook 06.",
            False,
        )
    return (
        f"The decision flow expected no speed-up here{basis}; at this size the difference is {noise}, "
        f"so the measurement neither confirms nor contradicts the flow. {small} {race}",
        None,
    )


def _memory_sentence(base: PrecisionResult, amp: PrecisionResult) -> str:
    ratio = amp.saved_bytes / base.saved_bytes
    name = amp.name
    if ratio <= 0.6:
        what = "about half: most of the tensors kept for backward are 16-bit now"
    elif ratio < 0.95:
        what = "less, but not half: some of the tensors kept for backward stayed float32"
    elif ratio <= 1.05:
        what = "about the same: the tensors kept for backward stayed float32"
    else:
        what = "more: autocast kept 16-bit copies next to float32 tensors"
    text = (
        f"Under {name}, autograd saved {ratio:.2f}x the bytes FP32 saved for backward "
        f"({amp.saved_bytes / 1024:.0f} KiB against {base.saved_bytes / 1024:.0f} KiB for one batch), {what}. "
        "The float32 weights, their gradients and the optimizer state do not shrink."
    )
    if base.peak_memory_bytes and amp.peak_memory_bytes:
        peak = amp.peak_memory_bytes / base.peak_memory_bytes
        text += (
            f" Peak CUDA memory per step (what one training step allocated on top of the data, weights, "
            f"gradients and Adam's state already allocated): {format_bytes(amp.peak_memory_bytes)} under {name} "
            f"against {format_bytes(base.peak_memory_bytes)} in FP32 ({peak:.2f}x)."
        )
    return text


def read_comparison(
    results: Sequence[PrecisionResult], choice: AmpChoice, *, accuracy_tolerance: float = 0.03
) -> ComparisonReading:
    """Read :func:`compare_precisions`' ``results`` for the machine ``choice`` describes.

    Taught in ``07_amp_training_recipe``.  Returns a :class:`ComparisonReading`: every sentence is
    composed from the measured numbers and the decision flow's expectation
    (``choice.expect_speedup``), so an AVX2 laptop, a bf16 CPU and a GPU each read a true story.
    ``results[0]`` must be the float32 baseline; the AMP row read is the one in ``choice.dtype``.
    ``accuracy_tolerance`` is the largest difference in test accuracy (a fraction: 0.03 is 3 points)
    that counts as "the same accuracy".
    """
    check_instance("choice", choice, AmpChoice, "an AmpChoice (from recipe.choose_amp_dtype)")
    results = _results("results", results, minimum=2)
    base = results[0]
    if base.dtype != torch.float32:
        raise ValueError(f"results[0] must be the float32 baseline, got {base.name}")
    if not base.saved_bytes > 0:
        raise ValueError(f"results[0].saved_bytes must be > 0 (the baseline's memory), got {base.saved_bytes!r}")
    amp = next((r for r in results[1:] if r.dtype == choice.dtype), None)
    if amp is None:
        raise ValueError(
            f"results holds no {dtype_name(choice.dtype)} row (choice.dtype); it holds: "
            + ", ".join(r.name for r in results)
        )
    accuracy_tolerance = check_float("accuracy_tolerance", accuracy_tolerance, ge=0, lt=1)
    est = amp.speedup if amp.speedup is not None else _speedup_of(base, amp)
    if est is None:
        raise ValueError("results carry no paired step times (step_seconds): run compare_precisions to get them")

    name = amp.name
    rounds = f"from {est.pairs} pairs of FP32 and {name} steps taken in turn"
    if est.outcome == "faster":
        speed = f"AMP ({name}) was faster than FP32 here: speed-up {est}, {rounds}."
    elif est.outcome == "slower":
        speed = (
            f"AMP ({name}) was slower than FP32 here: speed-up {est}, {rounds}; a {name} step took "
            f"{1 / est.ratio:.2f}x as long as an FP32 step."
        )
    else:
        speed = f"AMP ({name}) and FP32 were too close to call here: speed-up {est}, {rounds}."
    expectation, matches = _expectation_sentence(choice, est.outcome, amp.regime)
    points = round(accuracy_tolerance * 100, 6)
    accuracy = claim(
        f"test accuracy under {name} is within {points:g} points of FP32's",
        # 1e-12: a difference of exactly the tolerance counts as within it, whatever the float rounding.
        abs(amp.test_accuracy - base.test_accuracy) <= accuracy_tolerance + 1e-12,
        show=False,
    )
    return ComparisonReading(speed, expectation, _memory_sentence(base, amp), accuracy, est.outcome, matches)
