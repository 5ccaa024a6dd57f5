"""Notebook 11's readouts: the same tensors through every FP8 and block recipe (:func:`recipe_table`), what
transposition does to a block quantization (:func:`transposition`), the verdicts of training with each recipe
(:func:`recipe_verdicts`), torchao's rule for when FP8 pays (:func:`fp8_speed_rule`) and the bytes each
recipe stores per element (:func:`storage_bytes`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import fp8
from ._checks import bounded_list, check_choice, check_float, check_instance, check_int, check_seed
from .gpus import DATASHEETS, datasheet_entry
from .text import Reading
from .widgets import Table

TENSOR_ROWS, TENSOR_COLS = 256, 512
OUTLIER_CHANNELS = 4  # activation channels 64x larger than the rest, as LLM activations have
OUTLIER_GAIN = 64.0
TOKEN_SPREAD = 8  # activation rows (tokens) spread over 2**-8 .. 1 times each other
GRADIENT_SPREAD = 24  # gradient rows spread over 2**-24 .. 1 times each other (tokens differ that much)
FINER = 0.75  # tiles "help" the activations' error when they cut rowwise's by a quarter or more
TRACK_LOSS = 1.25  # a recipe "tracks" FP32 when its loss is within 25% of FP32's (or 0.01 of it)...
TRACK_LOSS_ABS = 0.01
TRACK_ACCURACY = 0.02  # ...and its test accuracy within 2 points
CAST_BYTES = 5  # an eager cast reads bf16 twice (amax, then scale and cast) and writes one FP8 byte
GEMMS_PER_LAYER = 3  # forward, grad_input, grad_weight
CASTS_PER_LAYER = {
    "tensorwise": 3,
    "rowwise": 6,
}  # x, W, dY once, reused transposed; rowwise: again along M/N
MAX_RULE_N = 2**16
BY_MODEL = {e.model: e for e in DATASHEETS}  # the datasheet's own model names ("H100 SXM")


def frontier_tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    """Three seeded float32 tensors of 256 x 512, each shaped like what a linear layer quantizes (notebook 11):
    ``activations`` (normal, each row scaled by 2**-u, u uniform in [0, 8), and 4 outlier channels 64x larger), ``weights`` (normal, std 1/sqrt(512)),
    ``gradients`` (normal times 1e-3, each row scaled by 2**-u, u uniform in [0, 24): tokens differ that much)."""
    gen = torch.Generator().manual_seed(check_seed("seed", seed))
    tokens = torch.exp2(-TOKEN_SPREAD * torch.rand(TENSOR_ROWS, 1, generator=gen))
    acts = torch.randn(TENSOR_ROWS, TENSOR_COLS, generator=gen) * tokens
    channels = torch.randperm(TENSOR_COLS, generator=gen)[:OUTLIER_CHANNELS]
    acts[:, channels] *= OUTLIER_GAIN
    weights = torch.randn(TENSOR_COLS, TENSOR_COLS, generator=gen)[:TENSOR_ROWS] / math.sqrt(TENSOR_COLS)
    spread = torch.exp2(-GRADIENT_SPREAD * torch.rand(TENSOR_ROWS, 1, generator=gen))
    grads = 1e-3 * torch.randn(TENSOR_ROWS, TENSOR_COLS, generator=gen) * spread
    return {"activations": acts, "weights": weights, "gradients": grads}


@dataclass(frozen=True)
class RecipeTable:
    """``stats[tensor][quantizer]``: :class:`amp_lab.fp8.QuantStats` of every tensor under every quantizer."""

    stats: dict[str, dict[str, fp8.QuantStats]]

    def table(self) -> Table:
        names = list(self.stats)
        quantizers = list(self.stats[names[0]])
        rows = []
        for q in quantizers:
            row = [q]
            for t in names:
                s = self.stats[t][q]
                row += [f"{s.underflow:.2%}", f"{s.saturated:.2%}", f"{s.error:.2e}"]
            rows.append(row)
        short = {"activations": "acts", "weights": "wts", "gradients": "grads"}
        header = ["quantizer"] + [f"{short.get(t, t)} {c}" for t in names for c in ("under", "sat", "error")]
        caption = "under: nonzero values that become 0; sat: values beyond their scale's largest; error: relative RMS"
        return Table(rows, header, caption=caption)

    def reading(self) -> Reading:
        """What the table says: rowwise against tensorwise on the activations' outliers; the gradients'
        underflow in tensorwise E4M3, tensorwise E5M2 and E4M3 in 1 x 128 tiles; FLOOR's clipping against RCEIL."""
        a, g = self.stats["activations"], self.stats["gradients"]
        facts = {
            "tensorwise": a["tensorwise_e4m3"].error,
            "rowwise": a["rowwise"].error,
            "tile": a["blockwise_1x128"].error,
            "a_e4m3": a["tensorwise_e4m3"].underflow,
            "a_row": a["rowwise"].underflow,
            "g_e4m3": g["tensorwise_e4m3"].underflow,
            "g_e5m2": g["tensorwise_e5m2"].underflow,
            "g_tile": g["blockwise_1x128"].underflow,
            "floor_sat": max(s["mxfp8_floor"].saturated for s in self.stats.values()),
            "rceil_sat": max(s["mxfp8_rceil"].saturated for s in self.stats.values()),
        }
        # rows help the small values (fewer lost to zero); tiles help the error, which the outliers rule
        finer = facts["a_row"] < facts["a_e4m3"] / 2 and facts["tile"] < FINER * facts["rowwise"]
        reasons = [
            "fp8_recipes.finer_scales_help" if finer else "fp8_recipes.rowwise_no_help",
            "fp8_recipes.no_underflow"
            if max(facts["g_e4m3"], facts["g_e5m2"], facts["g_tile"]) == 0
            else "fp8_recipes.e4m3_in_tiles"
            if facts["g_tile"] < facts["g_e5m2"]
            else "fp8_recipes.e5m2_needed",
        ]
        if facts["floor_sat"] > facts["rceil_sat"]:
            reasons.append("fp8_recipes.floor_clips")
        shown = {
            k: f"{v:.2e}" if k in ("tensorwise", "rowwise", "tile") else f"{v:.2%}" for k, v in facts.items()
        }
        return Reading(reasons[0], tuple(reasons[1:]), {**shown, "numbers": facts})


def recipe_table(tensors: dict | None = None, quantizers=None) -> RecipeTable:
    """Every tensor of ``tensors`` (default :func:`frontier_tensors`) through every quantizer of ``quantizers``
    (default all of :data:`amp_lab.fp8.QUANTIZERS`), as :func:`amp_lab.fp8.quantization_stats`.  (Notebook 11.)"""
    tensors = frontier_tensors() if tensors is None else tensors
    check_instance("tensors", tensors, dict, "a dict of names to 2-D tensors")
    needed = {"activations", "gradients"}
    if not needed <= set(tensors):
        raise ValueError(f"tensors must name at least {sorted(needed)}, got {sorted(tensors)}")
    what = "a list of quantizer names"
    quantizers = (
        list(fp8.QUANTIZERS) if quantizers is None else bounded_list("quantizers", quantizers, 64, what)
    )
    for i, q in enumerate(quantizers):
        check_choice(f"quantizers[{i}]", q, fp8.QUANTIZERS)
    for q in (
        "tensorwise_e4m3",
        "tensorwise_e5m2",
        "rowwise",
        "blockwise_1x128",
        "mxfp8_floor",
        "mxfp8_rceil",
    ):
        if q not in quantizers:
            raise ValueError(f"quantizers must include {q!r}: the reading compares it")
    stats = {name: {q: fp8.quantization_stats(x, q) for q in quantizers} for name, x in tensors.items()}
    return RecipeTable(stats)


@dataclass(frozen=True)
class Transposition:
    """One tensor quantized in ``block`` tiles along its rows and, transposed, along its columns: ``differ``
    is the fraction of elements whose two quantized values differ, ``max_change`` the largest relative change."""

    block: tuple[int, int]
    differ: float
    max_change: float

    def reading(self) -> Reading:
        facts = {"block": f"{self.block[0]}x{self.block[1]}", "differ": f"{self.differ:.1%}"}
        code = "fp8_recipes.transpose_differs" if self.differ > 0 else "fp8_recipes.transpose_same"
        return Reading(code, facts=facts)


def transposition(w: torch.Tensor | None = None, block=(1, 128)) -> Transposition:
    """``w`` (default :func:`frontier_tensors`'s weights) quantized for the forward GEMM, in ``block`` tiles
    along K (its rows), against ``w.T`` quantized for grad_input, in the same tiles along N, transposed back:
    1 x 128 tiles differ, 128 x 128 blocks do not.  (Notebook 11.)"""
    w = frontier_tensors()["weights"] if w is None else fp8.check_tensor("w", w)
    if w.dim() != 2:
        raise ValueError(f"w must be a 2-D weight matrix, got shape {tuple(w.shape)}")
    forward = fp8.blockwise_quantize(w, block)
    backward = fp8.blockwise_quantize(w.t().contiguous(), block).t()
    differ = forward != backward
    change = ((forward - backward).abs() / w.abs().clamp_min(torch.finfo(torch.float32).tiny)).max()
    return Transposition(tuple(block), float(differ.float().mean()), float(change))


def recipe_verdicts(runs: dict, baseline: str = "FP32") -> dict[str, Reading]:
    """Each run of ``runs`` (label -> :class:`amp_lab.training.TrainingRun`) against ``runs[baseline]``: it
    "tracks" (loss within 25%, or 0.01, and test accuracy within 2 points), "lags" (it learns, but further off) or
    "fails" (a non-finite loss, or it ends above a tenth of chance, ln(10) / 10).  (Notebook 11.)"""
    check_instance("runs", runs, dict, "a dict of labels to TrainingRun")
    check_instance("baseline", baseline, str, "the label of one of the runs")
    if baseline not in runs:
        raise ValueError(f"baseline {baseline!r} is not one of the runs {sorted(runs)}")
    base_loss, base_acc = runs[baseline].recent_loss(), runs[baseline].test_accuracy
    verdicts = {}
    for label, run in runs.items():
        if label == baseline:
            continue
        loss, acc = run.recent_loss(), run.test_accuracy
        facts = {
            "label": label,
            "baseline": baseline,
            "loss": f"{loss:.3g}",
            "base_loss": f"{base_loss:.3g}",
            "accuracy": f"{acc:.1%}",
            "base_accuracy": f"{base_acc:.1%}",
            "numbers": {"loss": loss, "accuracy": acc},
        }
        if not (math.isfinite(loss) and run.finite and loss < math.log(10) / 10):
            code = "fp8_recipes.fails"
        elif (
            loss <= max(TRACK_LOSS * base_loss, base_loss + TRACK_LOSS_ABS)
            and abs(acc - base_acc) <= TRACK_ACCURACY
        ):
            code = "fp8_recipes.tracks"
        else:
            code = "fp8_recipes.lags"
        verdicts[label] = Reading(code, facts=facts)
    return verdicts


def hadamard_reading(plain_error: float, transformed_error: float) -> Reading:
    """What a random Hadamard transform did to a weight-gradient GEMM's error in NVFP4: the relative errors
    without and with it (each from :func:`amp_lab.fp8.quantization_error`).  (Notebook 11.)"""
    plain_error = check_float("plain_error", plain_error, ge=0)
    transformed_error = check_float("transformed_error", transformed_error, ge=0)
    facts = {"plain": f"{plain_error:.3f}", "transformed": f"{transformed_error:.3f}"}
    code = "fp8_recipes.hadamard_helps" if transformed_error < plain_error else "fp8_recipes.hadamard_no_help"
    return Reading(code, facts=facts)


@dataclass(frozen=True)
class SpeedRule:
    """torchao's rule for one n x n x n linear layer's training step: its three GEMMs in BF16 and in FP8
    (``bf16_s``, ``fp8_s``, each of the three) and the casts to FP8 (``cast_s``, all of them); ``source`` says
    whether the times were measured here or modelled from a datasheet."""

    n: int
    bf16_s: float
    fp8_s: float
    cast_s: float
    source: str
    recipe: str = "tensorwise"

    @property
    def saving_s(self) -> float:
        return GEMMS_PER_LAYER * (self.bf16_s - self.fp8_s) - self.cast_s

    def reading(self) -> Reading:
        facts = {
            "n": self.n,
            "gain": f"{GEMMS_PER_LAYER * (self.bf16_s - self.fp8_s) * 1e6:.1f} us",
            "cast": f"{self.cast_s * 1e6:.1f} us",
            "source": self.source,
            "recipe": self.recipe,
        }
        code = "fp8_recipes.fp8_pays" if self.saving_s > 0 else "fp8_recipes.casts_dominate"
        return Reading(code, ("fp8_recipes.compile_fuses",), facts)


def fp8_speed_rule(
    n: int, *, recipe: str = "tensorwise", gpu: str = "H100 SXM", bf16_s=None, fp8_s=None, cast_s=None
) -> SpeedRule:
    """torchao's rule (FP8 pays where the BF16 GEMM time minus the FP8 GEMM time exceeds the casting overhead)
    for an n x n x n linear layer of ``recipe``: tensorwise casts x, W and dY once each and reuses each cast
    transposed; rowwise casts each twice, once along each GEMM's reduction dimension.  Times given (measured: ``bf16_s`` and ``fp8_s`` one GEMM, ``cast_s`` all
    the casts) are used; the rest come from the datasheet of ``gpu`` (a model, "H100 SXM", or a device name), each GEMM at its roofline time and each cast
    reading bf16 twice and writing FP8 once at full bandwidth (eager torch, casts unfused).  (Notebook 11.)"""
    n = check_int("n", n, minimum=16, maximum=MAX_RULE_N)
    recipe = check_choice("recipe", recipe, CASTS_PER_LAYER)
    given = {"bf16_s": bf16_s, "fp8_s": fp8_s, "cast_s": cast_s}
    for name, value in given.items():
        if value is not None:
            given[name] = check_float(name, value, gt=0, le=3600.0)
    measured = [k for k, v in given.items() if v is not None]
    if len(measured) == len(given):
        return SpeedRule(n, *given.values(), "measured here", recipe)
    entry = (BY_MODEL.get(gpu) or datasheet_entry(gpu)) if isinstance(gpu, str) else None
    if entry is None or entry.fp8_tflops is None or entry.bf16_tflops is None:
        examples = [e.model for e in DATASHEETS if e.fp8_tflops][:3]
        raise ValueError(f"gpu must name a datasheet GPU with FP8 Tensor Cores, e.g. {examples}, got {gpu!r}")
    bandwidth = entry.bandwidth_gbs * 1e9
    flops = 2.0 * n**3

    def roofline(tflops: float, element_bytes: int) -> float:  # operands in, bf16 result out
        return max(flops / (tflops * 1e12), (2 * element_bytes + 2) * n * n / bandwidth)

    model = {
        "bf16_s": roofline(entry.bf16_tflops, 2),
        "fp8_s": roofline(entry.fp8_tflops, 1),
        "cast_s": CASTS_PER_LAYER[recipe] * CAST_BYTES * n * n / bandwidth,
    }
    source = f"measured here ({', '.join(measured)})" if measured else f"{entry.model} datasheet"
    times = {k: model[k] if v is None else v for k, v in given.items()}
    return SpeedRule(n, times["bf16_s"], times["fp8_s"], times["cast_s"], source, recipe)


STORAGE = {  # quantizer -> (element bits, bytes per scale, the tile one scale covers; None: the whole axis)
    "tensorwise_e4m3": (8, 4, (None, None)),
    "rowwise": (8, 4, (1, None)),
    "blockwise_1x128": (8, 4, (1, 128)),
    "blockwise_128x128": (8, 4, (128, 128)),
    "mxfp8_floor": (8, 1, (1, 32)),
    "mxfp4_floor": (4, 1, (1, 32)),
    "nvfp4": (4, 1, (1, 16)),
}


def storage_bytes(quantizer: str, shape=(4096, 4096)) -> float:
    """Bytes per element that ``quantizer`` stores for a tensor of ``shape`` (rows, columns): the element
    bits plus the scales (FP32 for FP8 recipes, E8M0 for MX, E4M3 for NVFP4, whose per-tensor FP32 scale is
    counted too).  (Notebook 11.)"""
    check_choice("quantizer", quantizer, STORAGE)
    check_instance("shape", shape, (tuple, list), "a (rows, columns) pair")
    if len(shape) != 2:
        raise ValueError(f"shape must be a (rows, columns) pair, got {shape!r}")
    rows, cols = (check_int(f"shape[{i}]", v, minimum=1, maximum=2**20) for i, v in enumerate(shape))
    bits, scale_bytes, (r, c) = STORAGE[quantizer]
    scales = math.ceil(rows / (r or rows)) * math.ceil(cols / (c or cols))
    extra = 4 if quantizer == "nvfp4" else 0
    return bits / 8 + (scales * scale_bytes + extra) / (rows * cols)
