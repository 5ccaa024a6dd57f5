"""The race: FP32 against AMP, timed by :func:`amp_lab.timing.measure`.  (``06_timing_race``,
``08_fp8_and_block_scaling``)"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import device as _device
from . import timing as _timing
from ._checks import ArgumentTypeError, bounded_list, check_bool, check_choice, check_instance, check_int
from .cost import (
    ADAM_BYTES_PER_PARAMETER,
    IN_FEATURES,
    MAX_GEMM_DIM,
    NUM_CLASSES,
    call_bytes,
    fp8_matmul_bytes,
    gemm_bytes,
    matmul_bytes,
    mlp_bytes,
    mlp_step_flops,
    num_parameters,
)
from .cpus import CPU_FEATURES, cpu_has_native, cpu_native_labels
from .device import amp_dtype, check_fits, get_device, seeded, torch_threads
from .dtypes import dtype_name, parse_dtype
from .fp8 import FP8_GEMM_MULTIPLE
from .fp8_formats import EPS, FP8_FORMATS, check_name, column_major
from .gpus import Fp8Support, datasheet_entry, fp8_matmul_support, tensor_core_generation
from .hardware import tf32_matmul
from .intervals import SpeedupEstimate, Timing, jsonable, plural, speedup_estimate
from .models import make_mlp
from .race_trainer import Trainer, measure_memory
from .text import Reading, format_bytes, format_seconds
from .timing import (
    Contestant,
    RaceProgress,
    check_budget,
    check_estimate,
    measure,
    op_maker,
    planned_seconds,
    regime_for,
    tf32_text,
)

CONFIDENCE = 0.95
# A race samples until its speedup's interval is about +-5% wide, or this many seconds have passed.
RACE_TARGET_REL_WIDTH = 0.1
RACE_MAX_TIME_S = 20.0
SHORT_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
# race_fp8_matmul's scalings -> the name of their FP8 contestant ("fp8": tensorwise, raced in every FP8 race)
FP8_LANES = {"tensorwise": "fp8", "rowwise": "fp8_rowwise", "blockwise": "fp8_blockwise"}
BLOCK = 128  # DeepSeek-V3's tiles: 1 x 128 of A along K, 128 x 128 blocks of B


@dataclass(frozen=True)
class RaceResult:
    """One race: FP32 against AMP (and TF32 on CUDA, FP8 in :func:`race_fp8_matmul`).  ``speedup``: the median
    per-round FP32 time / AMP time (above 1: AMP is faster), from ``speedup_interval``."""

    kind: str  # "matmul", "mlp", "elementwise" or "fp8_matmul"
    params: dict  # {"n": ...}, {"numel": ...} or {"width", "batch", "in_features", "num_classes"}
    dtype: torch.dtype
    timings: dict  # "fp32", "amp" (and "tf32", or "fp8" with "fp8_rowwise" or "fp8_blockwise") -> Timing
    flops: float  # per call (matmul, elementwise) or per training step (mlp)
    memory: dict | None  # {"fp32": bytes, "amp": bytes, ..., "method": str}
    context: dict
    confidence: float = CONFIDENCE

    fp32 = property(lambda self: self.timings["fp32"])
    amp = property(lambda self: self.timings["amp"])
    tf32 = property(lambda self: self.timings.get("tf32"))  # None without a TF32 contestant
    fp8 = property(lambda self: self.timings.get("fp8"))

    def _estimate(self, baseline: Timing | None, contender: Timing | None) -> SpeedupEstimate | None:
        if baseline is None or contender is None:
            return None
        return speedup_estimate(baseline, contender, confidence=self.confidence)

    speedup_interval = property(lambda self: self._estimate(self.fp32, self.amp))  # from interleaved pairs
    outcome = property(lambda self: self.speedup_interval.outcome)
    speedup = property(lambda self: self.speedup_interval.ratio)
    fp8_speedup_interval = property(lambda self: self._estimate(self.amp, self.fp8))  # above 1: FP8 is faster
    fp8_speedup = property(lambda self: self.fp8 and self.fp8_speedup_interval.ratio)  # None without FP8
    speedup_vs_tf32_interval = property(lambda self: self._estimate(self.tf32, self.amp))
    speedup_vs_tf32 = property(lambda self: self.tf32 and self.speedup_vs_tf32_interval.ratio)

    # Achieved TFLOP/s of each contestant (from its median).
    tflops = property(lambda self: {name: self.flops / t.median / 1e12 for name, t in self.timings.items()})

    def bytes_moved(self, name: str) -> int:
        """At least how many bytes contestant ``name`` moves per call or step (:func:`amp_lab.cost.call_bytes`)."""
        if name.startswith("fp8"):  # E4M3 operands (1 byte) made before the race, a bfloat16 result
            n = self.params["n"]
            return gemm_bytes(n, n, n, 1, 2)
        return call_bytes(self.kind, self.params, self.dtype if name == "amp" else None)

    @property
    def regimes(self) -> dict:
        """Contestant name -> :class:`~amp_lab.timing.Regime` of its median call, from the GPU's datasheet."""
        peak = {"fp32": torch.float32, "tf32": "tf32", "amp": self.dtype, "fp8": "fp8"}
        ctx, unit = self.context, unit_of(self.kind)
        return {
            name: regime_for(
                t.median, self.flops, self.bytes_moved(name), peak.get(name, "fp8"), ctx, unit=unit
            )
            for name, t in self.timings.items()
        }

    def intensity(self, name: str) -> float:
        """Arithmetic intensity of contestant ``name``: FLOPs per byte moved, where a roofline places it."""
        return self.flops / self.bytes_moved(name)

    size = property(lambda self: size_text(self.kind, self.params))

    def lane_speedup(self, lane: str, baseline: str = "amp") -> SpeedupEstimate | None:
        """``baseline``'s time over ``lane``'s from their interleaved rounds (above 1: ``lane`` is faster), or None
        where either did not race: ``lane_speedup("fp8_rowwise", "fp8")`` is rowwise over tensorwise FP8."""
        return self._estimate(self.timings.get(baseline), self.timings.get(lane))

    def lanes(self) -> dict:
        """Each FP8 lane beyond tensorwise: ``{lane}_speedup_interval`` (AMP over it), ``{lane}_vs_tensorwise``."""
        out = {}
        for lane in (k for k in self.timings if k.startswith("fp8_")):
            out.update({f"{lane}_speedup_interval": self.lane_speedup(lane),
                        f"{lane}_vs_tensorwise": self.lane_speedup(lane, "fp8")})  # fmt: skip
        return out

    def to_dict(self) -> dict:
        keys = ("kind", "params", "dtype", "speedup", "speedup_interval", "outcome", "speedup_vs_tf32")
        keys += ("speedup_vs_tf32_interval", "tflops", "flops", "memory", "context")
        if self.fp8 is not None:
            keys += ("fp8_speedup", "fp8_speedup_interval")
        out = {**{k: getattr(self, k) for k in keys}, **self.lanes()}
        return jsonable({**out, "timings": {k: t.to_dict() for k, t in self.timings.items()}})

    def __str__(self) -> str:
        unit, ctx = unit_of(self.kind), self.context
        lines = [f"race {self.kind} {self.size}, AMP dtype {dtype_name(self.dtype)} on {ctx['device']}"]
        for name, t in self.timings.items():
            lines.append(
                f"  {name:>4}: {format_seconds(t.median)}/{unit} (IQR {format_seconds(t.iqr)}), "
                f"{self.tflops[name]:.3g} TFLOP/s"
            )
        lines.append(f"  speedup (FP32 / AMP): {self.speedup_interval}: {self.outcome}")
        if self.tf32 is not None:
            lines.append(f"  speedup (TF32 / AMP): {self.speedup_vs_tf32_interval}")
        if (fp8 := self.fp8_speedup_interval) is not None:
            lines.append(f"  speedup (AMP / FP8): {fp8}: {fp8.outcome}")
        for lane in (k for k in self.timings if k.startswith("fp8_")):
            what = f"FP8 {lane[4:]}"
            lines.append(f"  speedup (AMP / {what}): {self.lane_speedup(lane)}")
            lines.append(f"  speedup (FP8 tensorwise / {what}): {self.lane_speedup(lane, 'fp8')}")
        if self.memory:
            mem = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.memory.items() if k != "method")
            lines.append(f"  memory: {mem} ({self.memory['method']})")
        lines.append(
            f"  {plural(len(self.fp32.samples), 'interleaved round')} after "
            f"{plural(self.fp32.warmup, 'warm-up call')}, {plural(ctx['threads'], 'thread')}, "
            f"TF32 for FP32: {tf32_text(ctx)}, torch {ctx['torch']}"
        )
        return "\n".join(lines)


def size_text(kind: str, params: dict) -> str:
    if kind == "mlp":
        return f"width={params['width']}, batch={params['batch']}"
    return ", ".join(f"{k}={v}" for k, v in params.items())


def unit_of(kind: str) -> str:
    return "step" if kind == "mlp" else "call"


def races_of(name: str, value) -> list[RaceResult]:
    """``value`` (a RaceResult, a SweepResult, or a list or tuple of them) as a flat list."""
    flat, listed = [], isinstance(value, (list, tuple))
    for i, r in enumerate(bounded_list(name, value if listed else [value], 1000, "results")):
        races = getattr(r, "results", (r,))
        if not isinstance(races, tuple) or not all(isinstance(race, RaceResult) for race in races):
            where = f"{name}[{i}]" if listed else name
            raise ArgumentTypeError(f"{where} must be a RaceResult or a SweepResult, got {type(r).__name__}")
        flat.extend(races)
    return flat


def reusable(reuse, kind: str, params: dict, dtype, dev, num_threads) -> RaceResult | None:
    """The first race in ``reuse`` of this configuration (kind, sizes, dtype, device, threads), or None."""
    threads = num_threads or torch.get_num_threads()
    for race in [] if reuse is None else races_of("reuse", reuse):
        ran = (race.kind, race.dtype, race.context.get("device"), race.context.get("threads"))
        if ran == (kind, dtype, str(dev), threads) and race.params.items() >= params.items():
            return race
    return None


def _operands(n: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device=dev).manual_seed(0)
    return torch.randn(n, n, device=dev, generator=gen), torch.randn(n, n, device=dev, generator=gen)


def contestant_names(device_type: str, capability=None) -> tuple[str, ...]:
    """Who races: ``("fp32", "amp")``, plus ``"tf32"`` on CUDA GPUs whose Tensor Cores take TF32 (8.0 on)."""
    device_type = check_choice("device_type", device_type, ["cpu", "cuda", "mps"])
    known = device_type == "cuda" and capability is not None
    tf32 = known and "tf32" in tensor_core_generation(capability).precisions
    return ("fp32", "amp", "tf32") if tf32 else ("fp32", "amp")


def device_facts(dev: torch.device) -> tuple[str, tuple[int, int] | None]:
    """(device type, CUDA compute capability or None), apart so a CPU test can hand a race a GPU's facts."""
    return dev.type, (tuple(torch.cuda.get_device_capability(dev)) if dev.type == "cuda" else None)


def tf32_context(device_type: str, enabled: bool):
    """The context a contestant runs in: on CUDA a defined TF32 setting, elsewhere nothing."""
    return (lambda: tf32_matmul(enabled)) if device_type == "cuda" else contextlib.nullcontext


def _contestants(run: dict, device_type: str, capability) -> dict:
    """The contestants :func:`contestant_names` picks from ``run``, each with TF32 on only for ``"tf32"``."""
    return {
        name: Contestant(run[name], tf32_context(device_type, name == "tf32"))
        for name in contestant_names(device_type, capability)
    }


def check_race_args(device, dtype, *budget, races=1, budget_s=None, contestants=None):
    """A race's device, dtype and ``timing.check_budget`` budget, checked before anything runs."""
    dev = get_device(device)
    dtype = amp_dtype(dev) if dtype is None else parse_dtype(dtype)
    n = contestants or len(contestant_names(*device_facts(dev)))
    budget = check_budget(*budget, contestants=n, races=races, budget_s=budget_s)
    if budget["target_rel_width"] is None:  # exactly `repeats` rounds: no time budget to bound them
        budget["max_time_s"] = None
    return dev, dtype, budget


def _fp8_maker(dev, scaling: str = "tensorwise"):
    """``make(m)``: race_fp8_matmul's FP8 contestant of ``scaling`` at m x m (m a multiple of 16; of 128 blockwise)."""

    def make(m):
        if scaling != "tensorwise":
            return _scaled_gemm(*_fp8_operands(*_operands(m, dev), scaling), scaling)
        (a8, inv_a), (b8, inv_b) = (_tensorwise_e4m3(x) for x in _operands(m, dev))
        b8 = b8.t().contiguous().t()
        return lambda: torch._scaled_mm(a8, b8, scale_a=inv_a, scale_b=inv_b, out_dtype=torch.bfloat16)

    make.dtype = torch.float8_e4m3fn
    return make


def calibrated(budget: dict, dev, size: int, dtype=None, cast=False, op="matmul", make=None) -> float:
    """``timing.calibrated_seconds`` of an ``op_maker`` (or ``make``) call, on the race's threads."""
    make = make or op_maker(dev, dtype, cast, op)
    with torch_threads(budget["num_threads"]):
        return _timing.calibrated_seconds(make, size, dev, power=1 if op == "add" else 3)


def race_seconds(budget: dict, call_s) -> float:
    """Seconds a race of contestants taking ``call_s`` seconds a call is planned to take, warm-up included."""
    keys = ("warmup", "repeats", "min_sample_s", "number", "target_rel_width", "max_time_s")
    return planned_seconds(call_s, *(budget[k] for k in keys))[1]


def check_race_time(what: str, fix: str, budget: dict, call_s) -> float:
    """Refuse a race estimated (:func:`race_seconds`) past ``budget["budget_s"]``, before its operands exist."""
    basis = "its calls timed at small sizes, scaled by their work"
    return check_estimate(what, race_seconds(budget, call_s), budget["budget_s"], fix, basis)


def call_seconds(kind: str, params: dict, dev, dtype, budget: dict) -> list[float]:
    """Each contestant's estimated seconds a call of :func:`race_matmul` or a step of :func:`race_mlp` (its
    matmuls as one square matmul of as many FLOPs, Adam's traffic as adds); TF32 as fast as FP32 at least."""
    size, adam = params.get("n"), 0.0
    if kind == "mlp":
        weights = num_parameters(params["in_features"], params["num_classes"], params["width"], 1)
        adam = calibrated(budget, dev, weights * ADAM_BYTES_PER_PARAMETER // 12, op="add")
        size = max(1, round((mlp_step_flops(**params) / 2) ** (1 / 3)))
    step = {d: adam + calibrated(budget, dev, size, d) for d in (None, dtype)}
    return [step[dtype if name == "amp" else None] for name in contestant_names(*device_facts(dev))]


def run_race(kind, params, dtype, dev, contestants, flops, budget: dict, memory=None, **extra) -> RaceResult:
    """Time ``contestants`` with ``measure`` (``budget`` from :func:`check_race_args`) as a ``RaceResult``."""
    context = {"race": kind, "size": size_text(kind, params), "amp_dtype": dtype_name(dtype), **extra}
    timings = measure(contestants, device=dev, extra_context=context, **budget)
    return RaceResult(kind, params, dtype, timings, flops, memory, timings["fp32"].context)


def race_matmul(
    n: int,
    *,
    device=None,
    dtype=None,
    warmup: int = 3,
    repeats: int = 10,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    callback: Callable[[RaceProgress], None] | None = None,
    target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
    max_time_s: float | None = RACE_MAX_TIME_S,
    reuse=None,
    budget_s: float | None = None,
) -> RaceResult:
    """Race ``C = A @ B`` (n x n, FP32 inputs) without and with autocast in ``dtype`` (default
    ``amp_dtype(device)``); on CUDA with TF32 off, plus ``"tf32"`` from Ampere on.  ``repeats`` rounds, then
    more until the interval is narrower than ``target_rel_width`` (0.1: about +-5%) or ``max_time_s`` ends.
    A race in ``reuse`` of this configuration is returned; one estimated past ``budget_s`` (default 30 s, or
    ``max_time_s``) refused.  (``06_timing_race``)"""
    n = check_int("n", n, minimum=1)
    args = (warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s, callback)
    dev, dtype, budget = check_race_args(device, dtype, *args, budget_s=budget_s)
    if (found := reusable(reuse, "matmul", {"n": n}, dtype, dev, num_threads)) is not None:
        return found
    most = int(math.sqrt(0.9 * (_device.available_bytes(dev) or 0) / matmul_bytes(1, dtype)))
    check_fits(matmul_bytes(n, dtype), dev, what := f"race_matmul(n={n})", f"choose n <= {max(1, most)}")
    check_race_time(what, "choose a smaller n", budget, call_seconds("matmul", {"n": n}, dev, dtype, budget))
    A, B = _operands(n, dev)

    def amp():
        with torch.autocast(dev.type, dtype=dtype):
            return A @ B

    contestants = _contestants({"fp32": lambda: A @ B, "amp": amp, "tf32": lambda: A @ B}, *device_facts(dev))
    return run_race("matmul", {"n": n}, dtype, dev, contestants, 2.0 * n**3, budget)


def race_mlp(
    width: int,
    batch: int,
    *,
    in_features: int = IN_FEATURES,
    num_classes: int = NUM_CLASSES,
    device=None,
    dtype=None,
    warmup: int = 3,
    repeats: int = 10,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    callback: Callable[[RaceProgress], None] | None = None,
    memory: bool = True,
    target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
    max_time_s: float | None = RACE_MAX_TIME_S,
    reuse=None,
    budget_s: float | None = None,
) -> RaceResult:
    """Race training steps of ``make_mlp(in_features, num_classes, hidden=width, depth=1)`` (fused Adam, one
    batch) in FP32 against autocast (GradScaler for float16), each on its own copy of the weights; ``memory``
    adds each one's peak memory per step.  The rest works as in :func:`race_matmul`.  (``06_timing_race``)"""
    width = check_int("width", width, minimum=1)
    batch = check_int("batch", batch, minimum=1)
    in_features = check_int("in_features", in_features, minimum=1)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    memory = check_bool("memory", memory)
    args = (warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s, callback)
    dev, dtype, budget = check_race_args(device, dtype, *args, budget_s=budget_s)
    params = {"width": width, "batch": batch, "in_features": in_features, "num_classes": num_classes}
    found = reusable(reuse, "mlp", params, dtype, dev, num_threads)
    if found is not None and (found.memory is not None or not memory):
        return found
    facts = device_facts(dev)
    n = len(contestant_names(*facts))
    need = mlp_bytes(width, batch, dtype, in_features=in_features, num_classes=num_classes, contestants=n)
    what, smaller = f"race_mlp(width={width}, batch={batch})", "choose a smaller width or batch"
    check_fits(need, dev, what, smaller)
    check_race_time(what, smaller, budget, call_seconds("mlp", params, dev, dtype, budget))
    flops = mlp_step_flops(width, batch, in_features=in_features, num_classes=num_classes)
    with torch_threads(num_threads):
        X, y, model = _mlp_setup(width, batch, in_features, num_classes, dev)
        low = {"fp32": None, "amp": dtype, "tf32": None}
        make = _contestants(
            {k: functools.partial(Trainer, model, X, y, dev, d) for k, d in low.items()}, *facts
        )
        mem = measure_memory(make, dev, [X, y]) if memory else None
        contestants = {name: Contestant(build.fn().step, build.context) for name, build in make.items()}
    return run_race("mlp", params, dtype, dev, contestants, flops, budget, memory=mem)


def _mlp_setup(width, batch, in_features, num_classes, dev):
    model = make_mlp(in_features, num_classes, hidden=width, depth=1)
    with seeded(0):  # without touching the learner's global RNG state
        X, y = torch.randn(batch, in_features), torch.randint(0, num_classes, (batch,))
    return X.to(dev), y.to(dev), model


def check_result(name: str, value) -> RaceResult:
    return check_instance(name, value, RaceResult, "a RaceResult (from race_matmul or race_mlp)")


def cpu_instructions(result: RaceResult, native: bool | None) -> str:
    """The instruction sets for the result's dtype: the recorded CPU's if native, else all that count."""
    flags = result.context.get("cpu_flags")
    labels = cpu_native_labels(result.dtype, flags) if native and flags else ()
    labels = labels or tuple(f.label for f in CPU_FEATURES if f.dtype == result.dtype)
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} or {labels[-1]}"


def result_tensor_cores(result: RaceResult):
    cap = result.context.get("capability")
    return tensor_core_generation(tuple(cap)) if cap else None


def native_arithmetic(result: RaceResult) -> bool | None:
    """Whether the hardware that ran ``result`` multiplies its AMP dtype natively (True, False, None:
    unknown), from the recorded CPU flags or compute capability.  (``06_timing_race``, exercise 4)"""
    check_result("result", result)
    dev = str(result.context.get("device", ""))
    if dev.startswith("cuda"):
        tc = result_tensor_cores(result)
        return None if tc is None else tc.has_tensor_cores and SHORT_NAMES[result.dtype] in tc.precisions
    flags = result.context.get("cpu_flags")
    return cpu_has_native(result.dtype, flags=flags) if dev.startswith("cpu") else None


def _tensorwise_e4m3(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` in E4M3 with torchao's tensorwise scale (``448 / amax``, saturating), and the scale's inverse."""
    q, inv = _e4m3_tiles(x, *x.shape)  # one tile: no cap on its size, as quantize's checks have
    return q, inv.reshape(())


def _e4m3_tiles(x: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (2-D, each dim a multiple of its tile's) in E4M3 with torchao's scale per ``rows x cols`` tile (448 /
    amax, in float64 then float32; saturating cast), and the dequantization multipliers, one per tile."""
    (m, k), e4m3 = x.shape, FP8_FORMATS["fp8_e4m3"]
    tiles = x.reshape(m // rows, rows, k // cols, cols)
    scale = (e4m3.max / tiles.abs().amax(dim=(1, 3), keepdim=True).double().clamp(min=EPS)).float()
    q = (tiles.float() * scale).clamp(-e4m3.max, e4m3.max).to(e4m3.dtype)
    return q.reshape(m, k), scale.reciprocal().reshape(m // rows, k // cols)


def _fp8_operands(A: torch.Tensor, B: torch.Tensor, scaling: str) -> tuple:
    """(a8, b8, scale_a, scale_b) of ``A @ B`` as the scaled GEMM takes them: a8 row-major, b8 column-major, the
    multipliers laid out as torch's CUDA checks ask: rowwise (m, 1) and (1, n); blockwise A's 1 x 128 tiles
    (m, k/128) and B's 128 x 128 blocks (k/128 rounded up to 4, n/128), both column-major."""
    row = scaling == "rowwise"
    a8, sa = _e4m3_tiles(A, 1, A.shape[1] if row else BLOCK)
    bt8, sb = _e4m3_tiles(B.t().contiguous(), *((1, B.shape[0]) if row else (BLOCK, BLOCK)))  # B's columns
    if row:
        return a8, bt8.t(), sa, sb.reshape(1, -1)
    padded = sb.new_ones(sb.shape[0], -(-sb.shape[1] // 4) * 4)  # cuBLASLt reads K's blocks in fours
    padded[:, : sb.shape[1]] = sb
    return a8, bt8.t(), column_major(sa), padded.t()


def _blockwise_mm(a8, b8, scale_a, scale_b) -> torch.Tensor:
    """DeepSeek-V3's FP8 GEMM: 1 x 128 tiles of ``a8``, 128 x 128 blocks of ``b8``, FP32 scales, bfloat16 out."""
    F = torch.nn.functional
    kinds = (F.ScalingType.BlockWise1x128, F.ScalingType.BlockWise128x128)
    return F.scaled_mm(a8, b8, scale_a, kinds[0], scale_b, kinds[1], output_dtype=torch.bfloat16)


def _scaled_gemm(a8, b8, scale_a, scale_b, scaling: str) -> Callable[[], torch.Tensor]:
    if scaling == "blockwise":
        return lambda: _blockwise_mm(a8, b8, scale_a, scale_b)
    # rowwise: bfloat16, the one output every CUDA rowwise kernel (CUTLASS's, cuBLASLt's) writes on every FP8 GPU
    return lambda: torch._scaled_mm(a8, b8, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)


def fp8_blockwise_support(capability, arch_list=None, cuda_version=None) -> Fp8Support:
    """Whether a CUDA GPU of ``capability`` runs DeepSeek-style blockwise FP8 GEMMs under this torch
    (``torch.nn.functional.scaled_mm``, ``BlockWise1x128`` by ``BlockWise128x128``), and why: FP8 GEMMs there
    (:func:`fp8_matmul_support`), torch's API, a Hopper GPU (torch's kernel refuses any compute capability but
    9.x) and CUDA 12.9 or later (cuBLASLt 12.9 brought the scales; ``cuda_version`` None: unchecked)."""
    support = fp8_matmul_support(capability, arch_list)
    facts, code = {**support.facts, "cuda": cuda_version, "torch": torch.__version__}, "blockwise_runs"
    if not support:
        return support
    if not hasattr(getattr(torch.nn.functional, "ScalingType", None), "BlockWise128x128"):
        code = "blockwise_no_api"
    elif tuple(capability)[0] != 9:
        code = "blockwise_hopper_only"
    elif cuda_version is not None and tuple(int(p) for p in str(cuda_version).split(".")[:2]) < (12, 9):
        code = "blockwise_old_cuda"
    return Fp8Support(code == "blockwise_runs", f"fp8_recipes_race.{code}", facts)


def _fp8_race_checks(what: str, n: int, scaling: str, allowed, dev):
    """``n`` and ``scaling`` checked, the device's type where FP8 GEMMs of ``scaling`` run (else ValueError), the fix."""
    scaling = check_name("scaling", scaling, allowed)
    multiple = BLOCK if scaling == "blockwise" else FP8_GEMM_MULTIPLE
    n = check_int("n", n, minimum=multiple, maximum=MAX_GEMM_DIM)
    if n % multiple:
        lower = n - n % multiple
        raise ValueError(
            f"n={n} is not a multiple of {multiple}: {scaling} FP8 GEMMs (torch._scaled_mm on CUDA) need every "
            f"dimension a multiple of {multiple}; choose n={lower or multiple} or n={lower + multiple}"
        )
    device_type, capability = device_facts(dev)
    cuda = device_type == "cuda"
    if device_type == "mps":
        raise ValueError(f"{what} cannot race on {dev}: FP8 GEMMs run on NVIDIA GPUs of compute capability 8.9 and later, and emulated on the CPU; choose device='cpu' or a CUDA GPU")  # fmt: skip
    if cuda and not (support := fp8_matmul_support(capability, _cuda_arch_list())):
        raise ValueError(f"{what} cannot race on {dev}: {support.reason}")
    if scaling == "blockwise":
        support = fp8_blockwise_support(capability, _cuda_arch_list(), _cuda_version()) if cuda else None
        if not support:
            why = support.reason if cuda else "torch has no CPU kernel for them: they run on Hopper GPUs"
            raise ValueError(f"{what}(scaling='blockwise') cannot race on {dev}: {why}")
    return n, scaling, device_type, f"choose a smaller n (a multiple of {multiple})"


def race_fp8_matmul(
    n: int,
    *,
    scaling: str = "tensorwise",
    device=None,
    dtype=None,
    warmup: int = 3,
    repeats: int = 10,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    callback: Callable[[RaceProgress], None] | None = None,
    target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
    max_time_s: float | None = RACE_MAX_TIME_S,
    reuse=None,
    budget_s: float | None = None,
) -> RaceResult:
    """Race one n x n GEMM in FP32, the AMP dtype and FP8 (``torch._scaled_mm`` of tensorwise-scaled E4M3,
    writing bfloat16), inputs already cast; ``n`` a multiple of 16, on CUDA where :func:`fp8_matmul_support`
    allows.  ``scaling="rowwise"`` adds ``"fp8_rowwise"`` (a scale per row of A and per column of B),
    ``"blockwise"`` adds ``"fp8_blockwise"`` (DeepSeek-V3's 1 x 128 tiles of A, 128 x 128 blocks of B; n a multiple
    of 128, where :func:`fp8_blockwise_support` allows).  The rest works as in :func:`race_matmul`.
    (``08_fp8_and_block_scaling``, ``11_fp8_recipes``)"""
    dev = get_device(device)
    n, scaling, device_type, smaller = _fp8_race_checks("race_fp8_matmul", n, scaling, FP8_LANES, dev)
    lane = FP8_LANES[scaling] if scaling != "tensorwise" else None
    args = (warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s, callback)
    dev, dtype, budget = check_race_args(dev, dtype, *args, budget_s=budget_s, contestants=4 if lane else 3)
    params = {"n": n, "scaling": scaling} if lane else {"n": n}
    if (found := reusable(reuse, "fp8_matmul", params, dtype, dev, num_threads)) is not None:
        return found
    what = f"race_fp8_matmul({size_text('', params)})"
    check_fits(
        fp8_matmul_bytes(n, dtype) + (4 * n * n if lane else 0), dev, what, smaller
    )  # + E4M3 A, B, a result
    makers = [_fp8_maker(dev, s) for s in dict.fromkeys(("tensorwise", scaling))]
    call_s = [calibrated(budget, dev, n), calibrated(budget, dev, n, dtype, True)]
    call_s.append(calibrated(budget, dev, n, make=makers[0]))
    with torch_threads(budget["num_threads"]):  # a lane calibrates from 128 x 128 up: one block of blockwise
        call_s += [_timing.calibrated_seconds(m, n, dev, start=BLOCK) for m in makers[1:]]
    check_race_time(what, smaller, budget, call_s)
    A, B = _operands(n, dev)
    A_low, B_low = A.to(dtype), B.to(dtype)
    fns = {"fp32": lambda: A @ B, "amp": lambda: A_low @ B_low, "fp8": makers[0](n)}  # FP8: the same operands
    fns.update({lane: makers[1](n)} if lane else {})
    contestants = {name: Contestant(fn, tf32_context(device_type, False)) for name, fn in fns.items()}
    how = {FP8_LANES[s]: f"float8_e4m3fn, {s} scales made before timing, bfloat16 output" for s in (scaling, "tensorwise")}  # fmt: skip
    return run_race("fp8_matmul", params, dtype, dev, contestants, 2.0 * n**3, budget, **how)


@dataclass(frozen=True)
class CastOverhead:
    """:func:`fp8_cast_overhead`'s rounds: the AMP dtype's n x n GEMM (``"amp"``), the FP8 GEMM of ``scaling`` on
    operands cast before (``"fp8"``) and the cast of one n x n operand from the AMP dtype to E4M3 (``"cast"``: amax,
    scale, saturating cast), interleaved.  ``seconds``: the cast's median; ``seconds_interval`` its interval (the
    sign test's, as a speedup's: the cast's seconds over one second)."""

    n: int
    scaling: str
    dtype: torch.dtype
    timings: dict
    context: dict
    confidence: float = CONFIDENCE

    seconds = property(lambda self: self.timings["cast"].median)
    seconds_interval = property(lambda self: speedup_estimate(self.timings["cast"], [1.0] * len(self.timings["cast"].samples), confidence=self.confidence))  # fmt: skip
    savings_s = property(lambda self: self.timings["amp"].median - self.timings["fp8"].median)  # per GEMM
    overhead_s = property(lambda self: 2 * self.seconds)  # a GEMM's two operands cast

    @property
    def rule(self) -> SpeedupEstimate:
        """torchao's rule measured: per round, the AMP GEMM's time over the FP8 GEMM's plus two casts (its
        operands'); above 1 (outcome ``"faster"``) the time FP8 saves exceeds what its casts cost."""
        fp8, cast = self.timings["fp8"].samples, self.timings["cast"].samples
        return speedup_estimate(self.timings["amp"], [f + 2 * c for f, c in zip(fp8, cast, strict=True)],
                                confidence=self.confidence)  # fmt: skip

    def to_dict(self) -> dict:
        iv, rule = self.seconds_interval, self.rule
        out = {"kind": "fp8_cast_overhead", "params": {"n": self.n, "scaling": self.scaling}, "dtype": self.dtype,
               "cast_s": self.seconds, "cast_interval_s": [iv.low, iv.high], "savings_s": self.savings_s,
               "overhead_s": self.overhead_s, "rule": rule, "rule_outcome": rule.outcome, "context": self.context}  # fmt: skip
        return jsonable({**out, "timings": {k: t.to_dict() for k, t in self.timings.items()}})

    def __str__(self) -> str:
        iv, rule, t, low, f = self.seconds_interval, self.rule, self.timings, dtype_name(self.dtype), format_seconds  # fmt: skip
        ends = f"{f(iv.low)} to {f(iv.high)}" if math.isfinite(iv.high) else "too few rounds for an interval"
        return "\n".join([
            f"cast {low} -> E4M3 ({self.scaling}), n={self.n} on {self.context['device']}: {f(self.seconds)} an "
            f"operand ({iv.confidence_text} interval {ends})",
            f"  {low} GEMM {f(t['amp'].median)}, FP8 GEMM {f(t['fp8'].median)}: saves {f(self.savings_s)} a GEMM; "
            f"its two casts cost {f(self.overhead_s)}",
            f"  torchao's rule, {low} GEMM / (FP8 GEMM + two casts): {rule}: {rule.outcome}",
        ])  # fmt: skip


def fp8_cast_overhead(
    n: int,
    *,
    scaling: str = "tensorwise",
    device=None,
    dtype=None,
    warmup: int = 3,
    repeats: int = 10,
    min_sample_s: float = 0.01,
    num_threads: int | None = None,
    callback: Callable[[RaceProgress], None] | None = None,
    target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
    max_time_s: float | None = RACE_MAX_TIME_S,
    budget_s: float | None = None,
) -> CastOverhead:
    """Time the cast dynamic FP8 scaling adds to every GEMM: one n x n operand from the AMP dtype (default
    ``amp_dtype(device)``) to E4M3 with ``scaling`` ("tensorwise" or "rowwise", torchao's scales), interleaved
    with that dtype's GEMM and the FP8 GEMM, so :attr:`CastOverhead.rule` tests torchao's rule: FP8 pays where
    (GEMM time - FP8 GEMM time) exceeds the casts.  Bounded and refused as :func:`race_fp8_matmul`; runs on the
    CPU too.  (``11_fp8_recipes``)"""
    dev = get_device(device)
    allowed = ("tensorwise", "rowwise")
    n, scaling, device_type, smaller = _fp8_race_checks("fp8_cast_overhead", n, scaling, allowed, dev)
    args = (warmup, repeats, min_sample_s, num_threads, target_rel_width, max_time_s, callback)
    dev, dtype, budget = check_race_args(dev, dtype, *args, budget_s=budget_s, contestants=3)
    what = f"fp8_cast_overhead(n={n}, scaling={scaling!r})"
    check_fits(fp8_matmul_bytes(n, dtype), dev, what, smaller)

    def cast_maker(m):
        x = torch.randn(m, m, device=dev, generator=torch.Generator(device=dev).manual_seed(1)).to(dtype)
        return lambda: _e4m3_tiles(x, m if scaling == "tensorwise" else 1, m)

    call_s = [calibrated(budget, dev, n, dtype, True), calibrated(budget, dev, n, make=_fp8_maker(dev, scaling))]  # fmt: skip
    with torch_threads(budget["num_threads"]):
        call_s.append(_timing.calibrated_seconds(cast_maker, n, dev, power=2))
    check_race_time(what, smaller, budget, call_s)
    A, B = _operands(n, dev)
    A_low, B_low = A.to(dtype), B.to(dtype)
    fns = {"amp": lambda: A_low @ B_low, "fp8": _fp8_maker(dev, scaling)(n)}
    fns["cast"] = lambda: _e4m3_tiles(A_low, n if scaling == "tensorwise" else 1, n)
    contestants = {k: Contestant(fn, tf32_context(device_type, False)) for k, fn in fns.items()}
    context = {
        "race": "fp8_cast_overhead",
        "size": f"n={n}, scaling={scaling}",
        "amp_dtype": dtype_name(dtype),
    }
    timings = measure(contestants, device=dev, extra_context=context, **budget)
    return CastOverhead(n, scaling, dtype, timings, timings["amp"].context)


def fp8_summary(result: RaceResult) -> Reading:
    """What an FP8 race says: FP8 over the AMP dtype and FP32 with intervals, the TFLOP/s, and why (no FP8
    units on a CPU; a GPU's support and datasheet FP8 / BF16 ratio).  (``08_fp8_and_block_scaling``)"""
    check_result("result", result)
    if result.fp8 is None:
        raise ValueError(
            f"result must be an FP8 race (race_fp8_matmul), got a {result.kind!r} race without an 'fp8' timing"
        )
    est = result.fp8_speedup_interval
    vs32 = speedup_estimate(result.fp32, result.fp8, confidence=result.confidence)
    dev = str(result.context.get("device", ""))
    facts = {"low": dtype_name(result.dtype), "size": result.size, "device": dev or "?", "vs_amp": str(est),
             "vs_amp_outcome": est.outcome, "vs_fp32": str(vs32), "vs_fp32_outcome": vs32.outcome,
             **{f"tflops_{k}": v for k, v in result.tflops.items()}}  # fmt: skip
    if not dev.startswith("cuda"):
        slowest = max(result.timings, key=lambda name: result.timings[name].median)
        emulated = native_arithmetic(result) is False and slowest == "amp"
        facts["insn"] = cpu_instructions(result, False)
        codes = ("race.fp8_head", "race.fp8_no_units", *(("race.fp8_amp_emulated",) if emulated else ()))
        return Reading(est.outcome, codes, facts)
    cap = result.context.get("capability")
    entry = datasheet_entry(result.context.get("device_name"))
    ratio = None if entry is None else entry.fp8_over_bf16
    facts["support"] = fp8_matmul_support(tuple(cap) if cap else None).reason
    if ratio is None:
        return Reading(est.outcome, ("race.fp8_head", "race.fp8_support", "race.fp8_no_datasheet"), facts)
    facts.update(model=entry.model, sheet_ratio=ratio, measured=est.ratio, share=est.ratio / ratio)
    return Reading(est.outcome, ("race.fp8_head", "race.fp8_support", "race.fp8_datasheet"), facts)


def _cuda_arch_list() -> tuple[str, ...]:
    """``torch.cuda.get_arch_list()``, apart so a CPU test can hand a race a GPU build's list."""
    return tuple(torch.cuda.get_arch_list())


def _cuda_version() -> str | None:
    """``torch.version.cuda``, apart so a CPU test can hand a race a CUDA build's version."""
    return torch.version.cuda
