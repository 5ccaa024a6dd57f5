"""The mixed-precision training recipe, end to end (taught in ``07_amp_training_recipe``).

Everything the capstone notebook runs, written to be read:

* :func:`choose_amp_dtype` walks a decision flow over ``hardware.describe()``: bfloat16 or
  float16, whether a ``GradScaler`` is needed, and whether AMP should be faster here at all.
* :func:`train_step` is one optimizer step of the modern recipe: the forward pass under
  ``torch.autocast``, ``scaler.scale(loss).backward()`` for each micro-batch (gradient
  accumulation), ``scaler.unscale_(opt)`` *before* ``clip_grad_norm_`` so the threshold is in
  true gradient units, then ``scaler.step(opt)`` and ``scaler.update()``.
* :func:`train` runs steps on data whose batches are a pure function of the step number, so
  a run resumed from :func:`save_checkpoint` / :func:`load_checkpoint` (model, optimizer,
  scaler, scheduler and RNG state) continues bit for bit like the uninterrupted one.
* :func:`evaluate` runs inference under autocast in ``torch.inference_mode()``.
* :func:`compare_precisions` trains the same model in FP32 and under AMP and measures time per
  step, the bytes autograd saves for backward, peak CUDA memory and test accuracy.

The scaler is a ``torch.amp.GradScaler(device, enabled=...)``: enabled for float16 (whose
narrow range needs loss scaling), disabled for bfloat16 and float32, where all its calls pass
through.  One loop therefore serves all three precisions.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_float, check_int
from .device import dtype_name, get_device, parse_dtype, synchronize, torch_threads

__all__ = [
    "AmpChoice",
    "choose_amp_dtype",
    "make_model",
    "make_scaler",
    "micro_batches",
    "StepResult",
    "train_step",
    "History",
    "train",
    "Evaluation",
    "evaluate",
    "save_checkpoint",
    "load_checkpoint",
    "saved_activation_bytes",
    "PrecisionResult",
    "compare_precisions",
    "comparison_rows",
    "COMPARISON_HEADER",
    "dtype_name",
]

_PRECISIONS = (torch.float32, torch.bfloat16, torch.float16)


def _precision(dtype, name: str = "dtype") -> torch.dtype:
    if dtype is None:
        return torch.float32
    return parse_dtype(dtype, allowed=_PRECISIONS, name=name)


# --------------------------------------------------------------------------------------------
# 1. Which precision?
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AmpChoice:
    """The outcome of :func:`choose_amp_dtype`.

    ``dtype`` is the autocast dtype, ``use_scaler`` whether a ``GradScaler`` must be enabled,
    ``expect_speedup`` whether AMP should beat FP32 on this hardware (None: unknown, measure
    it), and ``steps`` the questions asked on the way, as ``(question, answer)`` pairs.
    """

    device: str
    dtype: torch.dtype
    use_scaler: bool
    expect_speedup: bool | None
    steps: tuple[tuple[str, str], ...]
    advice: str

    def __str__(self) -> str:
        lines = [f"{i}. {q} {a}" for i, (q, a) in enumerate(self.steps, 1)]
        scaler = "with torch.amp.GradScaler" if self.use_scaler else "no GradScaler needed"
        lines.append(f"=> autocast to {dtype_name(self.dtype)} on {self.device}, {scaler}")
        lines.append(f"   {self.advice}")
        return "\n".join(lines)


def choose_amp_dtype(report=None, *, device=None) -> AmpChoice:
    """Walk the decision flow for this machine (or for ``report``, a ``hardware.MachineReport``).

    * CUDA with Tensor Cores that do bfloat16 (Ampere and later): bfloat16, no scaler.  It keeps
      FP32's exponent range, so gradients do not underflow.
    * CUDA with Tensor Cores but no bfloat16 (Volta, Turing): float16 with a GradScaler.
    * CUDA without Tensor Cores (before Volta): float16 with a GradScaler, for memory; expect
      little or no speed-up.
    * CPU: bfloat16, the dtype CPU autocast is built for, no scaler.  It is fast only with bf16
      instructions (AMX-BF16, AVX512-BF16); without them AMP is slower than FP32, and the
      choice says so.
    """
    if report is None:
        from .hardware import describe

        report = describe(device)
    steps: list[tuple[str, str]] = []
    if report.race_device == "cuda":
        gpu = report.gpu_name or "the GPU"
        steps.append(("Is the course running on a CUDA GPU?", f"yes: {gpu}."))
        tc = report.tensor_cores
        if tc is None or not tc.has_tensor_cores:
            arch = tc.architecture if tc is not None else "this GPU"
            steps.append(("Does it have Tensor Cores?", f"no ({arch})."))
            return AmpChoice(
                "cuda", torch.float16, True, False, tuple(steps),
                "float16 halves activation memory, but without Tensor Cores expect little or no speed-up.",
            )  # fmt: skip
        steps.append(("Does it have Tensor Cores?", f"yes, generation {tc.generation} ({tc.architecture})."))
        bf16 = bool(report.bf16_supported) and "bf16" in tc.precisions
        if bf16:
            steps.append(
                ("Do they multiply bfloat16?", "yes: bfloat16 has FP32's exponent range, so gradients do not underflow.")
            )
            return AmpChoice(
                "cuda", torch.bfloat16, False, True, tuple(steps),
                "Expect a speed-up on large matmuls; the FP32 baseline may already use TF32 on these Tensor Cores.",
            )  # fmt: skip
        steps.append(("Do they multiply bfloat16?", "no: float16, whose small range needs loss scaling."))
        return AmpChoice(
            "cuda", torch.float16, True, True, tuple(steps),
            "Expect a speed-up on large matmuls with dimensions that are multiples of 8.",
        )  # fmt: skip

    steps.append(("Is the course running on a CUDA GPU?", "no: the CPU, where autocast uses bfloat16."))
    flags = report.cpu_flags or {}
    if flags.get("amx_bf16") or flags.get("avx512_bf16"):
        which = "AMX-BF16" if flags.get("amx_bf16") else "AVX512-BF16"
        steps.append(("Does the CPU have bfloat16 instructions?", f"yes: {which}."))
        return AmpChoice(
            "cpu", torch.bfloat16, False, True, tuple(steps),
            "Expect a speed-up once matrices are large enough; bfloat16 needs no GradScaler.",
        )  # fmt: skip
    if all(v is None for v in flags.values()):
        steps.append(("Does the CPU have bfloat16 instructions?", "unknown on this system."))
        return AmpChoice(
            "cpu", torch.bfloat16, False, None, tuple(steps),
            "Measure before you decide: the comparison at the end of this notebook will tell.",
        )  # fmt: skip
    steps.append(("Does the CPU have bfloat16 instructions?", "no (no AMX-BF16, no AVX512-BF16)."))
    return AmpChoice(
        "cpu", torch.bfloat16, False, False, tuple(steps),
        "bfloat16 is emulated here, so AMP is slower than FP32: use it to learn the recipe (or to save "
        "memory), and train in FP32 when speed matters on this machine.",
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# 2. Model, scaler, batches
# --------------------------------------------------------------------------------------------


def make_model(
    num_features: int = 64, num_classes: int = 10, *, hidden: int = 64, depth: int = 2, seed: int = 0, device=None
) -> nn.Sequential:
    """An MLP ``num_features -> hidden (x depth, ReLU) -> num_classes`` with seeded initialisation.

    Its parameters stay float32: autocast casts copies for each op, and the optimizer updates
    the float32 "master" weights.
    """
    num_features = check_int("num_features", num_features, minimum=1)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    hidden = check_int("hidden", hidden, minimum=1)
    depth = check_int("depth", depth, minimum=1)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        layers: list[nn.Module] = []
        width = num_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, num_classes))
        model = nn.Sequential(*layers)
    finally:
        torch.random.set_rng_state(gen_state)
    return model.to(get_device(device))


def make_scaler(dtype, device=None, *, init_scale: float = 2.0**16, growth_interval: int = 2000):
    """``torch.amp.GradScaler(device)``, enabled only for float16.

    bfloat16 and float32 have FP32's exponent range, so gradients do not underflow and the
    scaler is created disabled: ``scale``, ``unscale_``, ``step`` and ``update`` pass through.
    """
    dtype = _precision(dtype)
    init_scale = check_float("init_scale", init_scale, gt=0)
    growth_interval = check_int("growth_interval", growth_interval, minimum=1)
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
    batches the uninterrupted run would have seen.
    """
    step = check_int("step", step, minimum=0)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    accumulation_steps = check_int("accumulation_steps", accumulation_steps, minimum=1)
    n = len(split)
    per_step = batch_size * accumulation_steps
    if per_step > n:
        raise ValueError(f"batch_size * accumulation_steps = {per_step} must be <= the number of examples ({n})")
    steps_per_epoch = n // per_step  # the remainder of each epoch is dropped
    epoch, k = divmod(step, steps_per_epoch)
    idx = _epoch_order(n, seed, epoch)[k * per_step : (k + 1) * per_step].to(split.X.device)
    return [(split.X[chunk], split.y[chunk]) for chunk in idx.split(batch_size)]


@functools.lru_cache(maxsize=16)
def _epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The seeded permutation of epoch ``epoch`` (cached: it is read-only and costs a randperm)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


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


def train_step(model, opt, scaler, batches, *, dtype, max_grad_norm: float | None = 1.0, device=None) -> StepResult:
    """One optimizer step of mixed-precision training over ``batches`` (micro-batches).

    The whole recipe, in order: autocast forward, scaled backward per micro-batch (gradients
    accumulate), unscale_ before clipping, step (skipped on inf/NaN), update the scale.
    """
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
        total += loss.detach().float()
    scale = scaler.get_scale()
    scaler.unscale_(opt)  # gradients back to true size, so max_grad_norm means what it says
    if max_grad_norm is not None:
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    else:
        grad_norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters() if p.grad is not None])
        )
    scaler.step(opt)  # skips opt.step() if any gradient is inf or NaN
    scaler.update()  # a skipped step halves the scale, so a smaller scale afterwards means "skipped"
    skipped = scaler.is_enabled() and scaler.get_scale() < scale
    return StepResult(float(total), float(grad_norm), float(scale), bool(skipped))


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
) -> History:
    """Run optimizer steps ``start_step .. start_step + num_steps - 1`` of the recipe on ``split``.

    ``scheduler`` (an lr scheduler) is stepped only after steps the scaler did not skip: calling
    it after a skipped first step is what triggers PyTorch's "Detected call of
    `lr_scheduler.step()` before `optimizer.step()`" warning.
    """
    num_steps = check_int("num_steps", num_steps, minimum=0)
    start_step = check_int("start_step", start_step, minimum=0)
    if max_grad_norm is not None:
        max_grad_norm = check_float("max_grad_norm", max_grad_norm, gt=0)
    dev = get_device(device)
    dtype = _precision(dtype)
    steps = range(start_step, start_step + num_steps)
    if show_progress:
        from .progress import progress

        steps = progress(steps, desc=f"training ({dtype_name(dtype)})")
    history = History()
    model.train()
    for step in steps:
        batches = micro_batches(
            split, step=step, batch_size=batch_size, accumulation_steps=accumulation_steps, seed=seed
        )
        synchronize(dev)
        t0 = time.perf_counter()
        result = train_step(model, opt, scaler, batches, dtype=dtype, max_grad_norm=max_grad_norm, device=dev)
        synchronize(dev)
        history.append(step, result, time.perf_counter() - t0)
        if scheduler is not None and not result.skipped:
            scheduler.step()
    return history


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
    still runs the matmuls in ``dtype``.
    """
    dev = get_device(device)
    dtype = _precision(dtype)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
    correct = 0
    try:
        with torch.inference_mode(), torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
            for start in range(0, len(split), batch_size):
                X = split.X[start : start + batch_size]
                y = split.y[start : start + batch_size]
                logits = model(X)
                loss_sum += F.cross_entropy(logits.float(), y, reduction="sum").double()
                correct += int((logits.argmax(dim=1) == y).sum())
    finally:
        model.train(was_training)
    n = len(split)
    return Evaluation(float(loss_sum) / n, correct / n, n)


# --------------------------------------------------------------------------------------------
# 5. Checkpoints that resume bit for bit
# --------------------------------------------------------------------------------------------


def save_checkpoint(path, model, opt, scaler, *, step: int, scheduler=None, extra: dict | None = None) -> Path:
    """Save everything a resumed run needs to continue identically.

    Model and optimizer state (Adam's moments and step counts), the GradScaler's state (its
    current scale and growth tracker: forget it and a resumed float16 run restarts from the
    initial scale, skipping steps the first run already got past), the lr scheduler, the
    step number, and the RNG state (for anything random, e.g. dropout).
    """
    step = check_int("step", step, minimum=0)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scaler": scaler.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "rng_cpu": torch.random.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "extra": dict(extra or {}),
    }
    torch.save(state, path)
    return path


def load_checkpoint(path, model, opt, scaler, *, scheduler=None, device=None) -> int:
    """Restore what :func:`save_checkpoint` saved into existing objects; returns the step to resume at.

    Loaded with ``weights_only=True``: a checkpoint is data, and unpickling arbitrary objects
    from a file can run code.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path={str(path)!r} is not a checkpoint file")
    dev = get_device(device)
    state = torch.load(path, map_location=dev, weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    if scheduler is not None:
        if state["scheduler"] is None:
            raise ValueError("scheduler was given, but the checkpoint holds no scheduler state")
        scheduler.load_state_dict(state["scheduler"])
    torch.random.set_rng_state(state["rng_cpu"].cpu())
    if state["rng_cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["rng_cuda"]])
    return int(state["step"])


# --------------------------------------------------------------------------------------------
# 6. FP32 versus AMP, measured
# --------------------------------------------------------------------------------------------


def saved_activation_bytes(model, X, y, *, dtype, device=None) -> int:
    """Bytes autograd saves for backward during one forward pass of ``model`` on ``X``.

    Measured with ``torch.autograd.graph.saved_tensors_hooks``: every tensor the forward keeps
    for the backward pass is counted once (by storage).  This is the activation memory AMP
    shrinks; the float32 weights and optimizer state do not shrink.
    """
    dev = get_device(device)
    dtype = _precision(dtype)
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


@dataclass(frozen=True)
class PrecisionResult:
    """One row of :func:`compare_precisions`."""

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

    @property
    def name(self) -> str:
        return dtype_name(self.dtype)


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

    The runs advance in lockstep (step 0 of every dtype, then step 1, ...), so a machine that
    gets busier halfway through slows every dtype alike.  ``seconds_per_step`` is the median
    over steps after ``warmup_steps`` (device synchronised around each step); ``saved_bytes``
    comes from :func:`saved_activation_bytes` on one batch; ``peak_memory_bytes`` is
    ``torch.cuda.max_memory_allocated`` during one extra training step of a fresh model on CUDA,
    and None on the CPU, where no allocator statistic is reliable; accuracy and loss come from
    :func:`evaluate` under the same dtype.

    ``threads`` sets torch's CPU thread count for the comparison (restored afterwards; None keeps
    the current one).  A model this small runs fastest on one thread, and on a machine shared with
    other programs, extra threads mostly measure waiting for each other.
    """
    dev = get_device(device)
    dts = [_precision(d, name="dtypes") for d in dtypes]
    if threads is not None:
        threads = check_int("threads", threads, minimum=1)
        with torch_threads(threads):
            return compare_precisions(
                data, dts, num_steps=num_steps, batch_size=batch_size, accumulation_steps=accumulation_steps,
                hidden=hidden, depth=depth, lr=lr, warmup_steps=warmup_steps, seed=seed, threads=None,
                device=dev, show_progress=show_progress,
            )  # fmt: skip
    if not dts:
        raise ValueError("dtypes must name at least one of: float32, bfloat16, float16")
    warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0)
    num_steps = check_int("num_steps", num_steps, minimum=warmup_steps + 1)
    lr = check_float("lr", lr, gt=0)

    def fresh(dtype):
        model = make_model(data.num_features, data.num_classes, hidden=hidden, depth=depth, seed=seed, device=dev)
        return model, torch.optim.Adam(model.parameters(), lr=lr), make_scaler(dtype, dev)

    batch_kw = dict(batch_size=batch_size, accumulation_steps=accumulation_steps, seed=seed)
    peaks: dict[torch.dtype, int | None] = dict.fromkeys(dts)
    if dev.type == "cuda":
        for dtype in dts:
            model, opt, scaler = fresh(dtype)
            synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            train_step(model, opt, scaler, micro_batches(data.train, step=0, **batch_kw), dtype=dtype, device=dev)
            synchronize(dev)
            peaks[dtype] = int(torch.cuda.max_memory_allocated(dev))
            del model, opt, scaler

    runs = [(dtype, *fresh(dtype), History()) for dtype in dts]
    steps = range(num_steps)
    if show_progress:
        from .progress import progress

        steps = progress(steps, desc="FP32 vs AMP")
    for step in steps:
        for dtype, model, opt, scaler, history in runs:
            one = train(model, opt, scaler, data.train, dtype=dtype, num_steps=1, start_step=step, device=dev, **batch_kw)
            history.append(step, StepResult(one.losses[0], one.grad_norms[0], one.scales[0], one.skipped[0]), one.seconds[0])

    rows = []
    X, y = micro_batches(data.train, step=0, batch_size=batch_size, seed=seed)[0]
    for dtype, model, _opt, _scaler, history in runs:
        ev = evaluate(model, data.test, dtype=dtype, device=dev)
        rows.append(
            PrecisionResult(
                dtype=dtype,
                seconds_per_step=statistics.median(history.seconds[warmup_steps:]),
                saved_bytes=saved_activation_bytes(model, X, y, dtype=dtype, device=dev),
                peak_memory_bytes=peaks[dtype],
                test_accuracy=ev.accuracy,
                test_loss=ev.loss,
                final_train_loss=history.losses[-1],
                num_skipped=history.num_skipped,
                losses=tuple(history.losses),
                threads=torch.get_num_threads(),
            )
        )
    return rows


def comparison_rows(results: Sequence[PrecisionResult]) -> list[list[str]]:
    """Table rows (for ``widgets.table_html``) with ratios against the first result (FP32).

    The speed-up is FP32 time / AMP time: above 1 AMP is faster, below 1 it is slower."""
    base = results[0]
    rows = []
    for r in results:
        speed = base.seconds_per_step / r.seconds_per_step if r.seconds_per_step > 0 else math.nan
        peak = "n/a on CPU" if r.peak_memory_bytes is None else f"{r.peak_memory_bytes / 2**20:.1f} MiB"
        rows.append(
            [
                r.name,
                f"{r.seconds_per_step * 1e3:.2f} ms",
                f"{speed:.2f}x",
                f"{r.saved_bytes / 1024:.0f} KiB ({r.saved_bytes / base.saved_bytes:.2f}x)",
                peak,
                f"{r.test_accuracy:.1%}",
                str(r.num_skipped),
            ]
        )
    return rows


COMPARISON_HEADER = [
    "precision",
    "time per step (median)",
    "speed-up vs FP32",
    "saved for backward (one batch)",
    "peak memory",
    "test accuracy",
    "skipped steps",
]
