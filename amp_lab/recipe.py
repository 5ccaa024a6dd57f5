"""The mixed-precision training recipe, end to end (taught in ``07_amp_training_recipe``).

Everything the capstone notebook runs, written to be read:

* :func:`choose_amp_dtype` walks a decision flow over ``hardware.describe()``: bfloat16 or
  float16, whether a ``GradScaler`` is needed, and whether AMP should be faster here at all.  The
  answer is the course's one decision (``hardware.machine_verdict``); :func:`example_machines` and
  :func:`choice_rows` show it for other machines.
* :func:`train_step` is one optimizer step of the modern recipe: the forward pass under
  ``torch.autocast``, ``scaler.scale(loss).backward()`` for each micro-batch (gradient
  accumulation), ``scaler.unscale_(opt)`` *before* ``clip_grad_norm_`` so the threshold is in
  true gradient units, then ``scaler.step(opt)`` and ``scaler.update()``.
* :func:`train` runs steps on data whose batches are a pure function of the step number, so
  a run resumed from :func:`save_checkpoint` / :func:`load_checkpoint` (model, optimizer,
  scaler, scheduler and RNG state) continues bit for bit like the uninterrupted one.
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
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import hardware
from ._checks import check_float, check_int
from .claims import Claim, claim
from .device import dtype_name, get_device, parse_dtype, seeded, synchronize, torch_threads
from .timing import Regime, SpeedupEstimate, format_bytes, format_ratio, speedup_estimate, timing_context

__all__ = [
    "AmpChoice",
    "choose_amp_dtype",
    "make_model",
    "make_scaler",
    "micro_batches",
    "StepResult",
    "PendingStep",
    "train_step",
    "History",
    "train",
    "Evaluation",
    "evaluate",
    "save_checkpoint",
    "load_checkpoint",
    "saved_activation_bytes",
    "step_flops",
    "step_bytes",
    "PrecisionResult",
    "compare_precisions",
    "comparison_rows",
    "COMPARISON_HEADER",
    "ComparisonReading",
    "read_comparison",
    "example_machines",
    "choice_rows",
    "CHOICE_HEADER",
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
    ``expect_speedup`` whether AMP should beat FP32 on large matmuls on this hardware (None:
    unknown, measure it), ``steps`` the questions asked on the way, as ``(question, answer)``
    pairs, and ``advice`` what to do with the answer.  ``basis`` is the hardware fact the
    expectation rests on (a phrase such as "this CPU has no AVX512-BF16 or AMX-BF16"), and
    ``verdict`` the machine's one-line verdict from ``hardware.machine_verdict``.
    """

    device: str
    dtype: torch.dtype
    use_scaler: bool
    expect_speedup: bool | None
    steps: tuple[tuple[str, str], ...]
    advice: str
    basis: str = ""
    verdict: str = ""

    def __str__(self) -> str:
        lines = [f"{i}. {q} {a}" for i, (q, a) in enumerate(self.steps, 1)]
        scaler = "with torch.amp.GradScaler" if self.use_scaler else "no GradScaler needed"
        lines.append(f"=> autocast to {dtype_name(self.dtype)} on {self.device}, {scaler}")
        lines.append(f"   {self.advice}")
        return "\n".join(lines)


def choose_amp_dtype(report=None, *, device=None) -> AmpChoice:
    """Walk the decision flow for this machine (or for ``report``, a ``hardware.MachineReport``).

    Taught in ``07_amp_training_recipe``.  The dtype, the scaler and the expectation are the
    course's one decision, ``hardware.machine_verdict`` (the same as ``device.amp_dtype`` and the
    machine report's ``race_dtype``); whether a CPU multiplies the dtype in hardware is
    ``hardware.cpu_has_native``'s answer.  This function adds the questions a learner would ask
    on the way, so the decision can be read:

    * CUDA, compute capability 8.0 or later (Ampere, Ada, Hopper, Blackwell): bfloat16, no scaler.
      Its Tensor Cores multiply it, and it keeps FP32's exponent range, so gradients do not underflow.
    * CUDA Volta and Turing (e.g. the T4): float16 with a GradScaler; their Tensor Cores multiply
      only float16.  Before Volta: float16 with a GradScaler, for memory, with little or no speed-up.
    * Apple GPUs (MPS): float16 with a GradScaler.
    * CPU: bfloat16, the dtype CPU autocast is built for, no scaler.  It is fast only where the CPU
      multiplies bfloat16 in hardware (AMX-BF16, AVX512-BF16, ARM BF16); without that, AMP is
      expected to be slower than FP32, and the choice says so.

    The facts are read from ``report`` itself (not from its stored verdict), so a report whose
    hardware facts were replaced (``hardware.report_for``, ``dataclasses.replace``) gets its own flow.
    """
    if report is None:
        report = hardware.describe(device)
    v = hardware.machine_verdict(
        cuda_available=report.cuda_available,
        tensor_cores=report.tensor_cores,
        flags=report.cpu_flags or {},
        device_type=report.race_device,
        system=report.system,
    )
    dtype, name = v.dtype, dtype_name(v.dtype)
    steps: list[tuple[str, str]] = []

    def choice(basis: str, advice: str) -> AmpChoice:
        return AmpChoice(v.device, dtype, v.use_scaler, v.expect_speedup, tuple(steps), advice, basis, v.text)

    if v.device == "cuda":
        gpu = report.gpu_name or "the GPU"
        steps.append(("Is the course running on a CUDA GPU?", f"yes: {gpu}."))
        tc = report.tensor_cores
        if tc is None:
            steps.append(("Does it have Tensor Cores?", "unknown: the GPU's compute capability is not known."))
            return choice(
                "the GPU's compute capability is unknown",
                f"{name} runs on every CUDA GPU and needs a GradScaler; measure whether it is faster here.",
            )
        sm = f"sm_{tc.capability[0]}{tc.capability[1]}"
        if not tc.has_tensor_cores:
            steps.append(("Does it have Tensor Cores?", f"no ({tc.architecture}, {sm})."))
            hope = "a modest speed-up at most" if v.expect_speedup is None else "little or no speed-up"
            return choice(
                f"{tc.architecture} has no Tensor Cores",
                f"{name} halves activation memory, but without Tensor Cores expect {hope}; measure it.",
            )
        steps.append(("Does it have Tensor Cores?", f"yes, generation {tc.generation} ({tc.architecture}, {sm})."))
        question = "Do they multiply bfloat16 (compute capability 8.0 or later)?"
        if dtype == torch.bfloat16:
            steps.append((question, "yes: bfloat16 has FP32's exponent range, so gradients do not underflow."))
            return choice(
                f"{tc.architecture} Tensor Cores multiply bfloat16",
                "Expect a speed-up on large matmuls (small ones gain little); the FP32 baseline may "
                "already use TF32 on these Tensor Cores.",
            )
        steps.append((question, "no: float16, whose small range needs loss scaling."))
        return choice(
            f"{tc.architecture} Tensor Cores multiply float16",
            "Expect a speed-up on large matmuls with dimensions that are multiples of 8; small ones gain little.",
        )

    if v.device == "mps":
        steps.append(("Is the course running on a CUDA GPU?", f"no: an Apple GPU (MPS), where autocast uses {name}."))
        steps.append(("Does it have Tensor Cores?", f"no: {name} mainly halves the bytes moved, and needs loss scaling."))
        return choice(
            "Apple GPUs have no Tensor Cores",
            "Expect a modest speed-up at most, on large models; measure it.",
        )

    steps.append(("Is the course running on a CUDA GPU?", f"no: the CPU, where autocast uses {name}."))
    flags = report.cpu_flags or {}
    native = hardware.cpu_has_native(dtype, flags)
    labels = hardware.cpu_native_labels(dtype, flags)
    question = f"Does the CPU multiply {name} in hardware?"
    if native is None:
        steps.append((question, "unknown on this system."))
        return choice(
            f"this system does not report the CPU's {name} instructions",
            "Measure before you decide: the comparison in section 7 tells.",
        )
    if not native:
        lacking = " or ".join(labels)
        steps.append((question, f"no (no {lacking}): torch converts to FP32 and back around every multiply."))
        return choice(
            f"this CPU has no {lacking}",
            f"{name} is emulated here, so expect AMP to be slower than FP32: use it to learn the recipe "
            "(or to save memory), and train in FP32 when speed matters on this machine.",
        )
    having = " and ".join(labels)
    steps.append((question, f"yes: {having}."))
    if v.expect_speedup is False:  # a Mac: FP32 matmuls run on Apple's matrix units
        steps.append(
            ("Do FP32 matmuls have faster hardware?", "yes: on a Mac they run on Apple's matrix units (Accelerate).")
        )
        return choice(
            f"this CPU has {having}, but its FP32 matmuls run on Apple's matrix units",
            f"Expect AMP to be no faster than FP32 here; {name} still halves activation memory.",
        )
    return choice(
        f"this CPU has {having}",
        f"Expect a speed-up on large matrices; on small ones the casts cost more than the faster multiply "
        f"saves. {name} needs no GradScaler.",
    )


# Excerpts of real /proc/cpuinfo text: hardware.cpu_flags reads them as it reads this machine's.
_AVX2_LAPTOP_CPUINFO = (
    "model name\t: Intel(R) Core(TM) i7-10510U CPU @ 1.80GHz\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ht syscall nx pdpe1gb rdtscp lm pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes "
    "xsave avx f16c rdrand lahf_lm abm 3dnowprefetch fsgsbase bmi1 avx2 smep bmi2 erms invpcid adx "
    "clflushopt xsaveopt xsavec xgetbv1 xsaves\n"
)
_SAPPHIRE_RAPIDS_CPUINFO = (
    "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr "
    "sse sse2 ss ht syscall nx pdpe1gb rdtscp lm pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt "
    "aes xsave avx f16c rdrand avx2 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 "
    "avx512vbmi avx512_vnni avx512_bitalg avx512_vpopcntdq avx512_fp16 amx_bf16 amx_tile amx_int8\n"
)
_GRAVITON3_CPUINFO = (
    "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt "
    "fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg "
    "dcpodp svei8mm svebf16 i8mm bf16 dgh rng\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\nCPU revision\t: 1\n"
)


def example_machines(base=None) -> list[tuple[str, hardware.MachineReport]]:
    """``(name, hardware.MachineReport)`` for machines a learner may meet, for 07's table.

    GPUs are described by their compute capability, CPUs by an excerpt of their own
    ``/proc/cpuinfo`` (read by ``hardware.cpu_flags``, as this machine's is), so the table shows
    what :func:`choose_amp_dtype` decides for each, whatever machine runs the notebook.
    ``base`` is the report whose other facts (versions, threads) they share (default: this CPU's).
    """
    if base is None:
        base = hardware.describe("cpu")

    def gpu(name, capability):
        return name, hardware.report_for("cuda", capability=capability, gpu_name=name, base=base, system="Linux")

    def cpu(name, cpuinfo):
        return name, hardware.report_for(
            "cpu", flags=hardware.cpu_flags(cpuinfo), cpu=hardware.cpu_model(cpuinfo), base=base, system="Linux"
        )

    return [
        gpu("NVIDIA H100 (sm_90)", (9, 0)),
        gpu("NVIDIA A100 (sm_80)", (8, 0)),
        gpu("NVIDIA T4 (sm_75)", (7, 5)),
        gpu("NVIDIA V100 (sm_70)", (7, 0)),
        gpu("GeForce GTX 1080 (sm_61)", (6, 1)),
        cpu("Intel Xeon 8480+ (AMX-BF16)", _SAPPHIRE_RAPIDS_CPUINFO),
        cpu("AWS Graviton 3 (ARM BF16)", _GRAVITON3_CPUINFO),
        cpu("laptop with AVX2 only", _AVX2_LAPTOP_CPUINFO),
    ]


def choice_rows(machines) -> list[list[str]]:
    """Table rows (for ``widgets.table_html``, header :data:`CHOICE_HEADER`): the decision flow's
    answer for each ``(name, report)`` of ``machines`` (e.g. :func:`example_machines`)."""
    rows = []
    for name, report in machines:
        c = choose_amp_dtype(report)
        speed = {True: "yes, on large matmuls", False: "no", None: "measure it"}[c.expect_speedup]
        rows.append([name, dtype_name(c.dtype), "yes" if c.use_scaler else "no", speed, c.basis])
    return rows


CHOICE_HEADER = ["machine", "autocast dtype", "GradScaler", "faster than FP32?", "because"]


# --------------------------------------------------------------------------------------------
# 2. Model, scaler, batches
# --------------------------------------------------------------------------------------------


def make_model(
    num_features: int = 64, num_classes: int = 10, *, hidden: int = 64, depth: int = 2, seed: int = 0, device=None
) -> nn.Sequential:
    """An MLP ``num_features -> hidden (x depth, ReLU) -> num_classes`` with seeded initialisation.

    The weights are those ``torch.manual_seed(seed)`` followed by the construction gives, but the
    learner's generators (CPU and CUDA) are left as they were (``device.seeded``).  Its parameters
    stay float32: autocast casts copies for each op, and the optimizer updates the float32 "master"
    weights.
    """
    num_features = check_int("num_features", num_features, minimum=1)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    hidden = check_int("hidden", hidden, minimum=1)
    depth = check_int("depth", depth, minimum=1)
    dev = get_device(device)
    # seeded() forks the CPU's generator *and* every CUDA device's: a bare torch.manual_seed would
    # reseed a learner's GPU generators as a side effect of building a model.
    with seeded(seed):
        layers: list[nn.Module] = []
        width = num_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, num_classes))
        model = nn.Sequential(*layers)
    return model.to(dev)


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


@dataclass(frozen=True)
class PendingStep:
    """What one optimizer step did, still on the device (``train_step(..., non_blocking=True)``).

    ``loss`` and ``grad_norm`` are 0-d tensors, ``scale`` the scale the step used and ``scale_after``
    the scale after ``scaler.update()`` (0-d tensors, or ``1.0`` and None when the scaler is
    disabled).  Turning a GPU tensor into a Python number (``float()``, ``.item()``,
    ``scaler.get_scale()``) makes the host wait until the GPU has caught up, so :meth:`result` does it
    once, after the timer has stopped.
    """

    loss: torch.Tensor
    grad_norm: torch.Tensor
    scale: torch.Tensor | float
    scale_after: torch.Tensor | None

    def result(self) -> StepResult:
        """The step as Python numbers (this waits for the device)."""
        scale = float(self.scale)
        # update() halves the scale after a step with inf/NaN gradients: a smaller scale means "skipped".
        skipped = self.scale_after is not None and float(self.scale_after) < scale
        return StepResult(float(self.loss), float(self.grad_norm), scale, bool(skipped))


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
    Returns a :class:`StepResult` of Python numbers; with ``non_blocking=True`` a
    :class:`PendingStep` of device tensors instead, so the step never waits for the GPU (a timer
    reads it after it stops).  With a non-fused optimizer, ``scaler.step`` of an enabled scaler
    still reads the inf check on the host; ``torch.optim.Adam(..., fused=True)`` does not.
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
    scaler.update()  # a skipped step halves the scale, so a smaller scale afterwards means "skipped"
    after = _current_scale(scaler) if scaler.is_enabled() else None  # a disabled scaler never skips
    pending = PendingStep(total, grad_norm.detach(), scale, after)
    return pending if non_blocking else pending.result()  # result() reads the numbers: it waits


# The clock the step timer reads (a module attribute so that a test can see where timing starts and stops).
_clock = time.perf_counter


def _timed_step(model, opt, scaler, batches, *, dtype, max_grad_norm, dev) -> tuple[StepResult, float]:
    """One step of :func:`train_step`, timed with the device synchronised around it and no host sync
    inside: the numbers are read only after the clock stopped (on a GPU a tiny model's step is short
    enough that a ``.item()`` or two inside it would be much of what the timer measures)."""
    synchronize(dev)
    t0 = _clock()
    pending = train_step(model, opt, scaler, batches, dtype=dtype, max_grad_norm=max_grad_norm, device=dev,
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
        result, seconds = _timed_step(model, opt, scaler, batches, dtype=dtype, max_grad_norm=max_grad_norm, dev=dev)
        history.append(step, result, seconds)
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
    if len(split) == 0:
        raise ValueError("split must hold at least one example, got an empty split")
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


def _linear_shapes(num_features: int, num_classes: int, hidden: int, depth: int) -> list[tuple[int, int]]:
    """``(in, out)`` of each Linear of :func:`make_model`'s MLP, in order."""
    widths = [num_features] + [hidden] * depth + [num_classes]
    return list(zip(widths[:-1], widths[1:], strict=True))


def _mlp_args(num_features, num_classes, hidden, depth, batch_size, accumulation_steps):
    return (
        check_int("num_features", num_features, minimum=1),
        check_int("num_classes", num_classes, minimum=2),
        check_int("hidden", hidden, minimum=1),
        check_int("depth", depth, minimum=1),
        check_int("batch_size", batch_size, minimum=1) * check_int("accumulation_steps", accumulation_steps, minimum=1),
    )


def step_flops(
    num_features: int = 64,
    num_classes: int = 10,
    *,
    hidden: int = 64,
    depth: int = 2,
    batch_size: int = 64,
    accumulation_steps: int = 1,
) -> float:
    """Matmul FLOPs of one optimizer step of :func:`make_model`'s MLP (``07_amp_training_recipe``).

    A Linear with ``in`` inputs and ``out`` outputs on ``b`` examples costs ``2*b*in*out`` FLOPs
    forward (a multiply and an add per weight and example), as much again backward for its weight's
    gradient, and as much again for its input's gradient, except the first Linear, whose input (the
    data) needs no gradient.  ``b`` is every example of the step, ``batch_size * accumulation_steps``.
    Bias additions, ReLU, the loss and Adam are elementwise and left out: they are memory traffic,
    which :func:`step_bytes` counts.
    """
    num_features, num_classes, hidden, depth, b = _mlp_args(
        num_features, num_classes, hidden, depth, batch_size, accumulation_steps
    )
    total = 0
    for i, (n_in, n_out) in enumerate(_linear_shapes(num_features, num_classes, hidden, depth)):
        total += 2 * b * n_in * n_out * (2 if i == 0 else 3)
    return float(total)


def step_bytes(
    num_features: int = 64,
    num_classes: int = 10,
    *,
    hidden: int = 64,
    depth: int = 2,
    batch_size: int = 64,
    accumulation_steps: int = 1,
    dtype=torch.float32,
) -> float:
    """A lower bound on the bytes one optimizer step of :func:`make_model`'s MLP moves to and from memory
    (``07_amp_training_recipe``).

    Counted once each: the float32 parameters and their gradients, each read once and written once
    (16 bytes per parameter), Adam's two float32 moments, read once and written once (16 more); the
    float32 inputs, read once; and each Linear's output, written in the forward pass and read once in
    the backward pass, in ``dtype`` (2 bytes under bfloat16 or float16 autocast, 4 in float32).
    Real kernels move more (autocast's 16-bit copies of the weights, the loss, extra passes over
    the gradients for clipping and the inf check), so a step can only be slower than these bytes at
    the peak bandwidth: that makes it a lower bound, not an estimate.
    """
    num_features, num_classes, hidden, depth, b = _mlp_args(
        num_features, num_classes, hidden, depth, batch_size, accumulation_steps
    )
    itemsize = _precision(dtype).itemsize
    shapes = _linear_shapes(num_features, num_classes, hidden, depth)
    params = sum(n_in * n_out + n_out for n_in, n_out in shapes)
    activations = sum(b * n_out for _, n_out in shapes)
    return float(32 * params + 4 * b * num_features + 2 * itemsize * activations)


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
    return train_step(model, opt, scaler, batches, dtype=dtype, device=dev, non_blocking=True)


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
        from .race import regime_for

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
        from .progress import progress

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
    is faster, below 1 it is slower."""
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
    "speed-up vs FP32 (95% interval)",
    "saved for backward (one batch)",
    "peak CUDA memory per step",
    "test accuracy",
    "skipped steps",
]


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
    if not isinstance(choice, AmpChoice):
        raise TypeError(f"choice must be an AmpChoice (from recipe.choose_amp_dtype), got {type(choice).__name__}")
    results = list(results)
    if len(results) < 2 or not all(isinstance(r, PrecisionResult) for r in results):
        raise ValueError("results must be compare_precisions' list: the float32 baseline, then at least one AMP row")
    base = results[0]
    if base.dtype != torch.float32:
        raise ValueError(f"results[0] must be the float32 baseline, got {base.name}")
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
