"""The mixed-precision training recipe (07): :func:`train_step`, :func:`sync_free_step`, the course's one
training loop :func:`train_loop`, :func:`train` (its batches a function of the step), host reads, evaluation."""

from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass, field
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import MAX_STEPS, check_bool, check_instance, check_int, check_scale, check_seed
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
from .timing import PROGRESS_AFTER_S, training_seconds

MAX_STEP_NUMBER = 2**53  # a step number (micro_batches' seed arithmetic stays within torch's 64-bit seeds)
MAX_GROWTH_INTERVAL = 2**31 - 1  # GradScaler's update kernel takes it as a C integer
MAX_LR = 1e6  # far beyond 1 Adam's weights only turn inf; far enough beyond, torch cannot convert it


def make_scaler(dtype, device=None, *, init_scale: float = 2.0**16, growth_interval: int = 2000):
    """``torch.amp.GradScaler(device)``, enabled only for float16 (bfloat16 and float32 have FP32's range:
    a disabled scaler's calls pass through, so one loop serves all three)."""
    dtype = precision(dtype)
    init_scale = check_scale("init_scale", init_scale)
    growth_interval = check_int("growth_interval", growth_interval, minimum=1, maximum=MAX_GROWTH_INTERVAL)
    return torch.amp.GradScaler(
        get_device(device).type,
        init_scale=init_scale,
        growth_interval=growth_interval,
        enabled=dtype == torch.float16,
    )


def micro_batches(
    split, *, step: int, batch_size: int = 64, accumulation_steps: int = 1, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The micro-batches of optimizer step ``step``, a pure function of ``(seed, step)`` (a resumed run sees
    the uninterrupted run's batches): the next ``batch_size * accumulation_steps`` of a seeded epoch order."""
    check_split("split", split)
    step = check_int("step", step, minimum=0, maximum=MAX_STEP_NUMBER)
    seed = check_seed("seed", seed)
    batch_size, _, per_step = check_per_step(batch_size, accumulation_steps, len(split))
    return step_batches(split, batch_size, per_step, seed, step)


def step_batches(split: Split, batch_size: int, per_step: int, seed: int, step: int) -> list:
    """Step ``step``'s micro-batches (``batches_of(step)`` for :func:`train_loop`, with the rest bound)."""
    epoch, k = divmod(step, len(split) // per_step)  # the remainder of each epoch is dropped
    idx = _epoch_order(len(split), seed, epoch, str(split.X.device))[k * per_step : (k + 1) * per_step]
    return [(split.X[chunk], split.y[chunk]) for chunk in idx.split(batch_size)]


@functools.lru_cache(maxsize=16)
def _epoch_order(n: int, seed: int, epoch: int, device: str = "cpu") -> torch.Tensor:
    """Epoch ``epoch``'s seeded permutation, copied to ``device`` once per epoch (a copy waits for a GPU)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    return order if device == "cpu" else order.to(device)


# -- One step of the recipe --


@dataclass(frozen=True)
class StepResult:
    """One optimizer step: mean loss, gradient norm before clipping, scale used, whether it was skipped."""

    loss: float
    grad_norm: float
    scale: float
    skipped: bool


def _checked(step, read_values: bool):
    """``step`` with every argument checked before it runs (:func:`~amp_lab.recipe_checks.check_step`)."""

    @functools.wraps(step)
    def checked(model, opt, scaler, batches, *, dtype, max_grad_norm: float | None = 1.0, device=None):
        pairs, dtype, max_grad_norm, dev = check_step(
            model, opt, scaler, batches, dtype, max_grad_norm, device, read_values=read_values
        )
        return step(model, opt, scaler, pairs, dtype=dtype, max_grad_norm=max_grad_norm, device=dev)

    return checked


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
    # An enabled scaler skips exactly when a gradient is inf or NaN (then so is their norm); a disabled one
    # steps anyway.  04's hand-written scalers have no is_enabled and always scale.
    skipped = getattr(scaler, "is_enabled", lambda: True)() and not math.isfinite(norm)
    return StepResult(loss_value, norm, scale, skipped)


train_step = _checked(train_step, read_values=True)  # no decorator: the printed source is the step alone


@dataclass(frozen=True)
class PendingStep:
    """One optimizer step, still on the device (from :func:`sync_free_step`): 0-d tensors ``loss``,
    ``grad_norm``, the ``scale`` used and GradScaler's ``found_inf`` flag (nonzero: the step was skipped)."""

    loss: torch.Tensor
    grad_norm: torch.Tensor
    scale: torch.Tensor
    found_inf: torch.Tensor

    def values(self) -> torch.Tensor:
        """``[loss, grad_norm, scale, skipped]`` in one tensor on the device, without a host sync: float64,
        which holds every float32 exactly (float32 on Apple GPUs, which have no float64)."""
        wide = torch.float32 if self.loss.device.type == "mps" else torch.float64
        parts = (self.loss, self.grad_norm, self.scale, self.found_inf != 0)
        return torch.stack([t.detach().reshape(()).to(self.loss.device, wide) for t in parts])

    def result(self) -> StepResult:
        """The step as Python numbers: one read from the device (one host sync)."""
        return step_result(self.values().tolist())


def step_result(values) -> StepResult:
    loss, grad_norm, scale, skipped = values
    return StepResult(loss, grad_norm, scale, skipped != 0)


def sync_free_step(model, opt, scaler, batches, *, dtype, max_grad_norm: float | None = 1.0, device=None):
    """:func:`train_step`, reading nothing back from the device: returns a :class:`PendingStep`.

    Two numbers of the step are host reads in public torch API: ``scaler.get_scale()`` calls
    ``.item()``, and whether the step was skipped is GradScaler's inf/NaN flag, which only ``step()``
    reads.  Two of GradScaler's private methods hand them over as device tensors: ``_get_scale_async()``
    (the scale tensor ``get_scale()`` reads) and ``_found_inf_per_device(opt)`` (the flags ``step()``
    used).  Private API can change in any torch release; ``tests/test_recipe.py`` checks this step against
    :func:`train_step`.  With a non-fused optimizer ``scaler.step`` still reads the flag itself;
    ``Adam(..., fused=True)`` does not.
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
    # A copy: update() changes the scale in place.  A disabled scaler has none: 1, filled on the device.
    scale = scaler._get_scale_async().detach().clone() if enabled else torch.ones((), device=dev)
    scaler.unscale_(opt)
    if max_grad_norm is not None:
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    else:
        grad_norm = nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    scaler.step(opt)
    found_inf = torch.zeros((), device=dev)  # a disabled scaler never skips
    if enabled:  # one flag per device the gradients live on, copied before update() adds into it
        flags = list(scaler._found_inf_per_device(opt).values())
        found_inf = torch.stack([f.to(flags[0].device) for f in flags]).sum()
    scaler.update()
    return PendingStep(total, grad_norm.detach(), scale, found_inf)


step_on_device = sync_free_step  # the step itself, for callers that check their arguments once
sync_free_step = _checked(sync_free_step, read_values=False)

# The clock the step timer reads (a module attribute, so that a test can see where timing starts and stops).
_clock = time.perf_counter


def timed_step(loop, dev) -> tuple[StepResult, float]:
    """One step of ``loop`` (a :func:`train_loop`) between two device syncs: nothing is read while the clock
    runs, and the step's numbers are read after it stopped."""
    synchronize(dev)
    t0 = _clock()
    pending = next(loop)
    synchronize(dev)
    seconds = _clock() - t0
    return pending.result(), seconds


# -- The loop --


def train_loop(model, opt, scaler, batches_of, steps, *, dtype=None, max_grad_norm=None, sync_free=True):
    """The course's one training loop: per step number in ``steps``, one step on ``batches_of(step)``, yields
    a :func:`sync_free_step`'s :class:`PendingStep` (07, 06) or, not ``sync_free``, a :func:`train_step`'s
    :class:`StepResult` (any object with GradScaler's methods: 03, 04).  ``scaler`` None: a disabled one."""
    dev = next(model.parameters()).device
    scaler = scaler if scaler is not None else torch.amp.GradScaler(dev.type, enabled=False)
    step = step_on_device if sync_free else train_step.__wrapped__
    settings = dict(dtype=dtype or torch.float32, max_grad_norm=max_grad_norm, device=dev)
    for k in steps:
        yield step(model, opt, scaler, batches_of(k), **settings)


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
    budget_s: float | None = None,
) -> History:
    """Run optimizer steps ``start_step .. start_step + num_steps - 1`` of the recipe on ``split``, each a
    :func:`sync_free_step`, read in one go every ``log_every`` steps (None: at the end).  ``scheduler`` steps
    only after steps the scaler did not skip (with an enabled scaler each step is read).  Checked first; a
    run estimated past ``budget_s`` (default 30 s) is refused, one past a few seconds shows progress."""
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
    what = f"recipe.train(num_steps={num_steps}, batch_size={batch_size}, accumulation_steps={accumulation_steps})"
    show_progress |= (
        training_seconds(what, model, per_step, num_steps, dev, dtype, budget_s) > PROGRESS_AFTER_S
    )
    steps = range(start_step, start_step + num_steps)
    steps = progress(steps, desc=f"training ({dtype_name(dtype)})") if show_progress else steps
    history = History()
    model.train()
    # Read a step at once only when the host needs it before the next step: the scheduler, with an enabled
    # scaler. Otherwise every log_every steps.
    read_each_step = scheduler is not None and scaler.is_enabled()
    window = 1 if read_each_step else log_every or num_steps  # and the last step ends a window
    batches_of = functools.partial(step_batches, split, batch_size, per_step, seed)
    loop = train_loop(model, opt, scaler, batches_of, steps, dtype=dtype, max_grad_norm=max_grad_norm)
    pending = []  # the steps' numbers, waiting on the device
    synchronize(dev)
    t0 = _clock()
    for step, result in zip(range(start_step, start_step + num_steps), loop, strict=True):
        pending.append(result.values())
        if len(pending) == window or step == start_step + num_steps - 1:
            synchronize(dev)
            now = _clock()
            first = step - len(pending) + 1
            for k, row in enumerate(torch.stack(pending).tolist(), start=first):  # the one read
                history.append(k, step_result(row), (now - t0) / len(pending))
            t0, pending = now, []
        if scheduler is not None and not (read_each_step and history.skipped[-1]):
            scheduler.step()
    return history


# -- What the scaler did, read from the numbers --

SCALE_PATHS = (
    "recipe.scale_grew",
    "recipe.scale_kept",
    "recipe.scale_halved_once",
    "recipe.scale_halved_each_step",
)
SCALE_PATH_CHOICES = [say(code) for code in SCALE_PATHS]  # the options of notebook 07's prediction


def read_scale_path(history: History, scaler) -> Reading:
    """What GradScaler did to its scale over a run (``history`` from :func:`train`): outcome one of
    :data:`SCALE_PATHS`, reason ``"recipe.scale_backoff"``; facts ``num_skipped``, ``num_steps``,
    ``first_log2`` and ``last_log2`` (the scale after the run; ``-inf`` at 0)."""
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
    """Why the scaled gradients' norm is ``scale`` times the true one: ``"recipe.scaled_norm"``, facts
    ``scale`` and ``log2``."""
    scale = check_scale("scale", scale)
    return Reading("recipe.scaled_norm", (), dict(scale=scale, log2=math.log2(scale)))


# -- Host reads, counted --

# Every way Python turns a tensor's value into a Python object: on a GPU each one waits for the device.
_HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "numpy")


class HostReads(dict):
    """What :func:`count_host_reads` counted: how often each way of reading (``"item"``, ``"tolist"``,
    ``"__float__"`` for ``float(t)``, ...) happened; ``total`` sums them."""

    @property
    def total(self) -> int:
        return sum(self.values())


@contextlib.contextmanager
def count_host_reads():
    """Count the host reads of tensors inside a ``with`` block (``with count_host_reads() as reads``): every
    ``.item()``, ``.tolist()``, ``float(t)``, ``int(t)``, ``bool(t)``, ``t.numpy()`` and index use that Python
    code makes, torch's own included (``GradScaler.get_scale``); on a GPU each is a host sync.  Reads inside
    torch's C++ code are not seen."""
    reads = HostReads()

    def counting(name: str, original):
        @functools.wraps(original)
        def read(tensor, *args, **kwargs):
            reads[name] = reads.get(name, 0) + 1
            return original(tensor, *args, **kwargs)

        return read

    with contextlib.ExitStack() as patches:  # each patch restores torch's own method on the way out
        for name in _HOST_READS:
            patches.enter_context(
                mock.patch.object(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
            )
        yield reads


# -- Inference under autocast --


@dataclass(frozen=True)
class Evaluation:
    loss: float
    accuracy: float


def evaluate(model, split, *, dtype, batch_size: int = 512, device=None) -> Evaluation:
    """Mean cross-entropy and accuracy of ``model`` on ``split``, forward passes under autocast in
    ``torch.inference_mode()`` (no graph is recorded).  Arguments are checked as :func:`train` checks them."""
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
    # Added in float64 on the host, one after another (Apple GPUs have no float64; sum() compensates rounding).
    loss_sum = 0.0
    for batch_sum in torch.stack(sums).cpu().double().tolist():
        loss_sum += batch_sum
    correct = int(torch.stack(hits).sum())
    return Evaluation(loss_sum / len(split), correct / len(split))
