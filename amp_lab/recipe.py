"""The mixed-precision training recipe, one step and the loop (taught in ``07_amp_training_recipe``).

* :func:`train_step` is one optimizer step of the modern recipe on public torch API: the forward pass
  under ``torch.autocast``, ``scaler.scale(loss).backward()`` per micro-batch (gradient accumulation),
  ``scaler.unscale_(opt)`` *before* ``clip_grad_norm_``, then ``scaler.step(opt)`` and ``scaler.update()``.
  Notebook 07 prints it.
* :func:`sync_free_step` is the same step reading nothing back from the device (each read is a host sync
  on a GPU); it needs two of GradScaler's private methods, and says why.
* :func:`train` runs steps on batches that are a pure function of the step number (:func:`micro_batches`),
  so a run resumed from a checkpoint (``amp_lab.checkpoints``) continues bit for bit; it reads the steps'
  numbers in one go, every ``log_every`` steps or at the end.  :func:`count_host_reads` counts such reads.
* :func:`evaluate` runs inference under autocast in ``torch.inference_mode()``.

The scaler is a ``torch.amp.GradScaler(device, enabled=...)``: enabled for float16, disabled for bfloat16
and float32, where all its calls pass through.  One loop therefore serves all three precisions.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    MAX_STEPS,
    check_bool,
    check_instance,
    check_int,
    check_scale,
    check_seed,
)
from .cost import MAX_SIZE
from .data import Split
from .device import get_device, synchronize
from .dtypes import dtype_name
from .progress import progress
from .recipe_checks import (
    check_max_grad_norm,
    check_model,
    check_opt,
    check_per_step,
    check_scaler,
    check_scheduler,
    check_split,
    check_split_for,
    check_step,
    precision,
)
from .text import Reading, say

MAX_STEP_NUMBER = 2**53  # a step number (micro_batches' seed arithmetic stays within torch's 64-bit seeds)
MAX_GROWTH_INTERVAL = 2**31 - 1  # GradScaler's update kernel takes it as a C integer
MAX_LR = 1e6  # far beyond 1 Adam's weights only turn inf; far enough beyond, torch cannot convert it


# --------------------------------------------------------------------------------------------
# The scaler and the batches
# --------------------------------------------------------------------------------------------


def make_scaler(dtype, device=None, *, init_scale: float = 2.0**16, growth_interval: int = 2000):
    """``torch.amp.GradScaler(device)``, enabled only for float16.

    bfloat16 and float32 have FP32's exponent range, so gradients do not underflow and the scaler is
    created disabled: ``scale``, ``unscale_``, ``step`` and ``update`` pass through.  ``init_scale`` is a
    normal float32 (``_checks.check_scale``), ``growth_interval`` from 1 to 2**31 - 1."""
    dtype = precision(dtype)
    init_scale = check_scale("init_scale", init_scale)
    growth_interval = check_int("growth_interval", growth_interval, minimum=1, maximum=MAX_GROWTH_INTERVAL)
    dev = get_device(device)
    return torch.amp.GradScaler(
        dev.type, init_scale=init_scale, growth_interval=growth_interval, enabled=dtype == torch.float16
    )


def micro_batches(
    split, *, step: int, batch_size: int = 64, accumulation_steps: int = 1, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The micro-batches of optimizer step ``step``: a pure function of ``(seed, step)``.

    Each epoch is a seeded permutation of the split; step ``k`` takes the next ``batch_size *
    accumulation_steps`` examples, cut into ``accumulation_steps`` micro-batches.  Nothing depends on
    state carried between steps, so a resumed run sees exactly the batches the uninterrupted run would
    have seen.  ``split`` is a ``data.Split``; ``step`` from 0 to 2**53; ``batch_size * accumulation_steps``
    at most ``len(split)``; ``seed`` from 0 to ``_checks.MAX_SEED``."""
    check_split("split", split)
    step = check_int("step", step, minimum=0, maximum=MAX_STEP_NUMBER)
    seed = check_seed("seed", seed)
    batch_size, _, per_step = check_per_step(batch_size, accumulation_steps, len(split))
    return step_batches(split, step, batch_size, per_step, seed)


def step_batches(split: Split, step: int, batch_size: int, per_step: int, seed: int) -> list:
    epoch, k = divmod(step, len(split) // per_step)  # the remainder of each epoch is dropped
    idx = _epoch_order(len(split), seed, epoch, str(split.X.device))[k * per_step : (k + 1) * per_step]
    return [(split.X[chunk], split.y[chunk]) for chunk in idx.split(batch_size)]


@functools.lru_cache(maxsize=16)
def _epoch_order(n: int, seed: int, epoch: int, device: str = "cpu") -> torch.Tensor:
    """The seeded permutation of epoch ``epoch``, on ``device``: copied there once per epoch, not once per
    step (a copy from the host to a GPU waits for the GPU, and the end of an epoch is a fine place for it)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    return order if device == "cpu" else order.to(device)


# --------------------------------------------------------------------------------------------
# One step of the recipe
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step did: the mean loss, the gradient norm before clipping, the scale used, and
    whether GradScaler skipped the step because the gradients held inf or NaN."""

    loss: float
    grad_norm: float
    scale: float
    skipped: bool


def train_step(
    model, opt, scaler, batches, *, dtype, max_grad_norm: float | None = 1.0, device=None
) -> StepResult:
    """One optimizer step of mixed-precision training over ``batches`` (micro-batches).

    Autocast forward, scaled backward per micro-batch (the gradients accumulate), unscale_ before
    clipping, step (skipped on inf/NaN), update the scale.  Public torch API only; it reads its numbers
    back at the end (``get_scale()`` and the final ``tolist()`` wait for a GPU: host syncs).
    """
    dev = get_device(device)
    opt.zero_grad(set_to_none=True)
    total = torch.zeros((), device=dev)
    for X, y in batches:
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            # Divided by the number of micro-batches, the accumulated gradient is the gradient of the
            # mean loss over the whole step, exactly as one big batch would give.
            loss = F.cross_entropy(model(X), y) / len(batches)
        scaler.scale(loss).backward()  # backward runs outside autocast, in the forward's dtypes
        total += loss.detach().float()
    scale = scaler.get_scale()  # the scale this step used (1.0 for a disabled scaler)
    scaler.unscale_(opt)  # gradients back to true size, so max_grad_norm means what it says
    if max_grad_norm is not None:
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    else:
        grad_norm = nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    scaler.step(opt)  # skips opt.step() if any gradient is inf or NaN
    scaler.update()  # a skipped step halves the scale; a run of good ones grows it
    loss_value, norm = torch.stack([total, grad_norm.float()]).tolist()  # one read for both
    # An enabled scaler skips exactly when a gradient is inf or NaN, and then their norm is too.
    return StepResult(loss_value, norm, scale, scaler.is_enabled() and not math.isfinite(norm))


def _checked(step, *, read_values: bool, note: str):
    """``step`` with every argument checked first (:func:`~amp_lab.recipe_checks.check_step`), its docstring
    extended by ``note``.  ``functools.wraps`` keeps the step's own source what ``inspect.getsource`` shows
    (notebook 07 prints it)."""

    @functools.wraps(step)
    def checked(model, opt, scaler, batches, *, dtype, max_grad_norm: float | None = 1.0, device=None):
        pairs, dtype, max_grad_norm, dev = check_step(
            model, opt, scaler, batches, dtype, max_grad_norm, device, read_values=read_values
        )
        return step(model, opt, scaler, pairs, dtype=dtype, max_grad_norm=max_grad_norm, device=dev)

    checked.__doc__ = (step.__doc__ or "") + note
    return checked


train_step = _checked(
    train_step,
    read_values=True,
    note="""
    Every argument is checked before anything changes: ``model`` a ``torch.nn.Module`` with float32
    parameters on ``device``, ``opt`` an optimizer over them, ``scaler`` a ``torch.amp.GradScaler``,
    ``batches`` a non-empty list of ``(X, y)`` pairs (``X`` 2-D float32 of the model's input width, ``y``
    1-D int64 labels within its outputs, finite features), ``max_grad_norm`` None or a finite number > 0.
    """,
)


@dataclass(frozen=True)
class PendingStep:
    """What one optimizer step did, still on the device (from :func:`sync_free_step`).

    ``loss`` and ``grad_norm`` are 0-d tensors; ``scale`` the scale the step used (a 0-d tensor, or ``1.0``
    for a disabled scaler); ``found_inf`` GradScaler's inf/NaN flag (nonzero: it skipped the step; None for
    a disabled scaler, which never skips).  :meth:`values` gathers them into one tensor without waiting, so
    a loop can collect many steps and read them at once; :meth:`result` reads one step (one host sync)."""

    loss: torch.Tensor
    grad_norm: torch.Tensor
    scale: torch.Tensor | float
    found_inf: torch.Tensor | None = None

    def values(self) -> torch.Tensor:
        """``[loss, grad_norm, scale, skipped]`` as one 1-d tensor on the loss's device, without a host sync:
        float64, which holds every float32 exactly (float32 on Apple GPUs, which have no float64)."""
        dev = self.loss.device
        dtype = torch.float32 if dev.type == "mps" else torch.float64

        def on_device(value) -> torch.Tensor:
            if isinstance(value, torch.Tensor):
                return value.detach().reshape(()).to(device=dev, dtype=dtype)
            return torch.full((), float(value), dtype=dtype, device=dev)  # filled there: a copy could wait

        skipped = on_device(0.0 if self.found_inf is None else self.found_inf) != 0
        return torch.stack(
            [on_device(self.loss), on_device(self.grad_norm), on_device(self.scale), skipped.to(dtype)]
        )

    def result(self) -> StepResult:
        """The step as Python numbers: one read from the device (one host sync)."""
        return step_result(self.values().tolist())


def step_result(values) -> StepResult:
    """A :class:`StepResult` from :meth:`PendingStep.values` read back as Python floats."""
    loss, grad_norm, scale, skipped = values
    return StepResult(loss, grad_norm, scale, skipped != 0)


def sync_free_step(model, opt, scaler, batches, *, dtype, max_grad_norm: float | None = 1.0, device=None):
    """:func:`train_step`, reading nothing back from the device: returns a :class:`PendingStep`.

    Two numbers of the step are host reads in public torch API: ``scaler.get_scale()`` calls ``.item()``,
    and whether the step was skipped is GradScaler's inf/NaN flag, which only ``step()`` reads.  Two of
    GradScaler's private methods hand them over as device tensors: ``_get_scale_async()`` (the scale tensor
    ``get_scale()`` reads) and ``_found_inf_per_device(opt)`` (the flags ``step()`` used).  Private API can
    change in any torch release; ``tests/test_recipe.py`` checks this step against :func:`train_step`.
    With a non-fused optimizer ``scaler.step`` still reads the flag itself; ``Adam(..., fused=True)`` does not.
    """
    dev = get_device(device)
    opt.zero_grad(set_to_none=True)
    total = torch.zeros((), device=dev)
    for X, y in batches:
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = F.cross_entropy(model(X), y) / len(batches)
        scaler.scale(loss).backward()
        total += loss.detach().float()  # stays on the device: float(loss) here would wait for the GPU
    enabled = scaler.is_enabled()
    scale = scaler._get_scale_async().detach().clone() if enabled else 1.0  # a copy: update() changes it
    scaler.unscale_(opt)
    if max_grad_norm is not None:
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    else:
        grad_norm = nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    scaler.step(opt)
    found_inf = None
    if enabled:  # one flag per device the gradients live on, copied before update() adds into it
        flags = list(scaler._found_inf_per_device(opt).values())
        found_inf = torch.stack([f.to(flags[0].device) for f in flags]).sum()
    scaler.update()
    return PendingStep(total, grad_norm.detach(), scale, found_inf)


step_on_device = (
    sync_free_step  # the step itself: train and the comparison check their arguments once, up front
)
sync_free_step = _checked(
    step_on_device,
    read_values=False,
    note="""
    Its arguments are checked as :func:`train_step` checks them, except that on a GPU the labels' values
    are not read (that read would be a host sync).
    """,
)


# The clock the step timer reads (a module attribute, so that a test can see where timing starts and stops).
_clock = time.perf_counter


def timed_step(model, opt, scaler, batches, *, dtype, max_grad_norm, dev) -> tuple[StepResult, float]:
    """One :func:`sync_free_step`, timed with the device synchronised around it and no host sync inside:
    the numbers are read only after the clock stopped."""
    synchronize(dev)
    t0 = _clock()
    pending = step_on_device(
        model, opt, scaler, batches, dtype=dtype, max_grad_norm=max_grad_norm, device=dev
    )
    synchronize(dev)
    seconds = _clock() - t0
    return pending.result(), seconds


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


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

    Each step is a :func:`sync_free_step`: its loss, gradient norm, scale and skip flag stay on the device,
    and the host reads them in one go every ``log_every`` steps, or once at the end (None).  That is where
    a sync is acceptable.  ``History.seconds`` holds each step's share of its window's time (the device
    synchronised at both ends), so with ``log_every=1`` each step is timed by itself.

    ``scheduler`` is stepped only after steps the scaler did not skip (stepping it after a skipped first
    step triggers PyTorch's "Detected call of `lr_scheduler.step()` before `optimizer.step()`" warning).
    With an enabled scaler that needs each step's skip flag before the next step, so such a run reads every
    step (the one sync it needs); a disabled scaler never skips.

    Everything is checked before the first step (as :func:`train_step` checks it, the whole split at once):
    ``num_steps`` from 0 to ``_checks.MAX_STEPS``, ``start_step + num_steps`` at most 2**53, ``scheduler``
    None or a scheduler of ``opt`` that steps without a metric, ``log_every`` None or from 1 to ``MAX_STEPS``.
    """
    num_steps = check_int("num_steps", num_steps, minimum=0, maximum=MAX_STEPS)
    log_every = None if log_every is None else check_int("log_every", log_every, minimum=1, maximum=MAX_STEPS)
    start_step = check_int("start_step", start_step, minimum=0, maximum=MAX_STEP_NUMBER - num_steps)
    max_grad_norm = check_max_grad_norm(max_grad_norm)
    seed = check_seed("seed", seed)
    check_bool("show_progress", show_progress)
    dev = get_device(device)
    dtype = precision(dtype)
    params = check_model("model", model, dev, trainable=True)
    check_opt(opt, params)
    check_scaler(scaler, dev)
    check_scheduler(scheduler, opt, stepped_by_train=True)
    check_split_for("split", split, model, params[0].device)
    batch_size, _, per_step = check_per_step(batch_size, accumulation_steps, len(split))
    steps_end = start_step + num_steps
    steps = range(start_step, steps_end)
    if show_progress:
        steps = progress(steps, desc=f"training ({dtype_name(dtype)})")
    history = History()
    model.train()
    # The host must read a step at once only when something on the host depends on it before the next step:
    # the scheduler, with an enabled scaler. Then every step is read; otherwise every log_every.
    read_each_step = scheduler is not None and scaler.is_enabled()
    window = 1 if read_each_step else min(log_every or num_steps, max(num_steps, 1))
    rows, pending = None, []  # the steps' numbers wait on the device, one row per step
    synchronize(dev)
    t0 = _clock()
    for step in steps:
        batches = step_batches(split, step, batch_size, per_step, seed)
        values = step_on_device(
            model, opt, scaler, batches, dtype=dtype, max_grad_norm=max_grad_norm, device=dev
        ).values()
        if rows is None:
            rows = torch.empty((window, 4), dtype=values.dtype, device=values.device)
        rows[len(pending)].copy_(values)  # a copy on the device: nothing is read yet
        pending.append(step)
        if len(pending) == window or step == steps_end - 1:
            synchronize(dev)
            now = _clock()
            for k, row in zip(pending, rows[: len(pending)].tolist(), strict=True):  # the one read
                history.append(k, step_result(row), (now - t0) / len(pending))
            t0, pending = now, []
        if scheduler is not None and not (read_each_step and history.skipped[-1]):
            scheduler.step()
    return history


# --------------------------------------------------------------------------------------------
# What the scaler did, read from the numbers
# --------------------------------------------------------------------------------------------

SCALE_PATHS = (
    "recipe.scale_grew",
    "recipe.scale_kept",
    "recipe.scale_halved_once",
    "recipe.scale_halved_each_step",
)
SCALE_PATH_CHOICES = [say(code) for code in SCALE_PATHS]  # the options of notebook 07's prediction


def read_scale_path(history: History, scaler) -> Reading:
    """What GradScaler did to its scale over a run (``history`` from :func:`train`, ``scaler`` the run's):
    outcome one of :data:`SCALE_PATHS` (grew, kept, halved once then held, halved at every step), reason
    ``"recipe.scale_backoff"``; facts ``num_skipped``, ``num_steps``, ``first_log2`` and ``last_log2`` (the
    scale after the run; ``-inf`` at 0)."""
    check_instance("history", history, History, "a recipe.History (from recipe.train)")
    check_scaler(scaler)
    scales = history.scales
    if not scales:
        raise ValueError("history holds no steps: train at least one")
    halvings = sum(b == a / 2 for a, b in zip(scales, scales[1:], strict=False))
    if halvings == len(scales) - 1:
        outcome = "recipe.scale_halved_each_step"
    elif scales[-1] > scales[0]:
        outcome = "recipe.scale_grew"
    else:
        outcome = "recipe.scale_kept" if halvings == 0 else "recipe.scale_halved_once"
    final = scaler.get_scale()
    facts = dict(num_skipped=history.num_skipped, num_steps=len(history), first_log2=math.log2(scales[0]))
    facts["last_log2"] = math.log2(final) if final > 0 else -math.inf
    return Reading(outcome, ("recipe.scale_backoff",), facts)


def read_scaled_norm(scale) -> Reading:
    """Why the scaled gradients' norm is ``scale`` times the true one: outcome ``"recipe.scaled_norm"``, facts
    ``scale`` (a normal float32) and ``log2``."""
    scale = check_scale("scale", scale)
    return Reading("recipe.scaled_norm", (), dict(scale=scale, log2=math.log2(scale)))


# --------------------------------------------------------------------------------------------
# Host reads, counted
# --------------------------------------------------------------------------------------------

# Every way Python turns a tensor's value into a Python object: on a GPU each one waits for the device.
_HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "numpy")


class HostReads:
    """What :func:`count_host_reads` counted: ``counts`` maps each way of reading (``"item"``, ``"tolist"``,
    ``"__float__"`` for ``float(t)``, ...) to how often it happened; ``total`` sums them."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __repr__(self) -> str:
        return f"HostReads(total={self.total}, counts={self.counts})"


class count_host_reads:  # noqa: N801 (a context manager, used like a function: with count_host_reads() as reads)
    """Count the host reads of tensors inside a ``with`` block (taught in ``07_amp_training_recipe``).

    Counts every ``.item()``, ``.tolist()``, ``float(t)``, ``int(t)``, ``bool(t)``, ``t.numpy()`` and index
    use of a tensor that Python code makes, torch's own Python code included (``GradScaler.get_scale`` and
    a non-fused optimizer's inf check in ``GradScaler.step`` are ``.item()`` calls).  On a GPU each is a host
    sync.  Reads inside torch's C++ code (a boolean mask, ``nonzero``) are not seen.  The counters are
    torch's own methods, wrapped for the block and restored after it.
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
            self._saved[name] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, counting(name, self._saved[name]))
        return self.reads

    def __exit__(self, *exc) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved = {}


# --------------------------------------------------------------------------------------------
# Inference under autocast
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    loss: float
    accuracy: float
    num_examples: int


def evaluate(model, split, *, dtype, batch_size: int = 512, device=None) -> Evaluation:
    """Mean cross-entropy and accuracy of ``model`` on ``split``, forward passes under autocast.

    ``torch.inference_mode()`` records no graph, so nothing is kept for backward; autocast still runs the
    matmuls in ``dtype``.  ``model`` and ``split`` are checked as :func:`train` checks them."""
    dev = get_device(device)
    dtype = precision(dtype)
    batch_size = check_int("batch_size", batch_size, minimum=1, maximum=MAX_SIZE)
    params = check_model("model", model, dev, trainable=False)
    check_split_for("split", split, model, params[0].device)
    was_training = model.training
    model.eval()
    sums, hits = [], []
    try:
        with torch.inference_mode(), torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            for start in range(0, len(split), batch_size):
                X, y = split.X[start : start + batch_size], split.y[start : start + batch_size]
                logits = model(X)
                sums.append(F.cross_entropy(logits.float(), y, reduction="sum"))
                hits.append((logits.argmax(dim=1) == y).sum())
    finally:
        model.train(was_training)
    # The per-batch sums are added in float64 on the host, one after another: Apple GPUs have no float64,
    # and a Python float is one.  (Not sum(): since Python 3.12 it compensates rounding.)
    loss_sum = 0.0
    for batch_sum in torch.stack(sums).cpu().double().tolist():
        loss_sum += batch_sum
    correct = int(torch.stack(hits).sum())
    return Evaluation(loss_sum / len(split), correct / len(split), len(split))
