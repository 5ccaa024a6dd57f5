"""Notebook 08's readouts (:func:`spread_reading`, :func:`spike_reading`; under block scaling
:func:`gradient_format_reading` and :func:`scale_mode_reading`) and the explorer of current versus delayed
scaling on a sequence with an outlier (:func:`scaling_trajectory`, :func:`scaling_explorer`)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import ipywidgets as widgets
import torch

from . import fp8, mx
from ._checks import (
    MAX_STEPS,
    bounded_list,
    check_bool,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_seed,
)
from .text import Reading
from .widgets import FigurePane, table_html

MAX_SEQUENCE_STEPS = 1000
MAX_SEQUENCE_SIZE = 2**16
MAX_SEQUENCE_ELEMENTS = 2**22  # all steps together: 16 MiB of float32
MX_BLOCK = 32  # the MX spec's block, as fp8.quantization_stats's "mxfp8_*" quantizers use


def _spreads(name: str, value) -> list[float]:
    values = bounded_list(name, value, 1000, "a list of spreads")
    return [check_float(f"{name}[{i}]", v, ge=0) for i, v in enumerate(values)]


def spread_reading(activations, gradients, e4m3_window: float, e5m2_window: float) -> Reading:
    """What the spreads (binades per layer; the gradients' last is the logits') say against the formats'
    windows: ``fp8.standard_recipe`` when activations fit E4M3 and hidden gradients need E5M2."""
    acts, grads = _spreads("activations", activations), _spreads("gradients", gradients)
    if not acts or len(grads) < 2:
        raise ValueError("activations needs a spread per layer, gradients at least two (hidden, logits)")
    w4 = check_float("e4m3_window", e4m3_window, gt=0)
    w5 = check_float("e5m2_window", e5m2_window, gt=0)
    facts = {"narrow": max(acts), "wide": max(grads[:-1]), "logits": grads[-1], "w4": w4, "w5": w5}
    fits = facts["narrow"] < w4 - 4  # four binades of room above the smallest values that matter
    reasons = ["fp8.activations_fit_e4m3" if fits else "fp8.activations_fill_e4m3"]
    wide = "fit_e4m3" if facts["wide"] <= w4 else "need_e5m2" if facts["wide"] < w5 else "beyond_e5m2"
    reasons.append(f"fp8.gradients_{wide}")
    reasons.append("fp8.logits_beyond_e5m2" if facts["logits"] > w5 else "fp8.logits_within_e5m2")
    standard = fits and reasons[1] == "fp8.gradients_need_e5m2"
    return Reading("fp8.standard_recipe" if standard else "fp8.recipe_not_forced", tuple(reasons), facts)


def unscaled_reading(largest: float, fmt: str = "fp8_e4m3") -> Reading:
    """Where a tensor's ``largest`` magnitude sits against ``fmt``'s smallest normal, cast without a scale:
    outcome ``fp8.below_window`` or ``fp8.near_window``."""
    largest = check_float("largest", largest, gt=0)
    spec = fp8.check_format("fmt", fmt, fp8.FP8_FORMATS)
    low = math.log2(torch.finfo(spec.dtype).smallest_normal)
    facts = {"log2_largest": math.floor(math.log2(largest)), "log2_min_normal": low, "label": spec.label}
    return Reading("fp8.below_window" if largest < 2.0**low else "fp8.near_window", (), facts)


def identity_reading(ours, theirs, same_weights: bool) -> Reading:
    """Two runs' losses step by step and whether their weights are equal: outcome ``fp8.losses_identical``,
    ``fp8.losses_close`` or ``fp8.losses_different``."""
    ours = bounded_list("ours", ours, MAX_STEPS, "a list of losses")
    theirs = bounded_list("theirs", theirs, MAX_STEPS, "a list of losses")
    if len(ours) != len(theirs) or not ours:
        raise ValueError(f"ours and theirs must hold as many losses (> 0), got {len(ours)} and {len(theirs)}")
    same_weights = check_bool("same_weights", same_weights)
    equal, total = sum(a == b for a, b in zip(ours, theirs, strict=True)), len(ours)
    outcome = "identical" if equal == total else "close" if equal else "different"
    reason = "fp8.weights_identical" if same_weights else "fp8.weights_differ"
    return Reading(f"fp8.losses_{outcome}", (reason,), {"equal": equal, "total": total})


def _block_tensors(name: str, value, block_size: int) -> list[torch.Tensor]:
    """float32 copies of a tensor or a list of tensors, finite, each a whole number of blocks along its last
    dimension, with at most fp8.MAX_ELEMENTS values in all."""
    items = (
        [value] if isinstance(value, torch.Tensor) else bounded_list(name, value, 1000, "a list of tensors")
    )
    if not items:
        raise ValueError(f"{name} must hold at least one tensor")
    checked = [fp8.check_tensor(f"{name}[{i}]", t, min_dim=1) for i, t in enumerate(items)]
    for i, t in enumerate(checked):
        if t.numel() == 0 or t.shape[-1] % block_size:
            raise ValueError(
                f"{name}[{i}] must be non-empty, its last dimension a multiple of {block_size}: {tuple(t.shape)}"
            )
    if sum(t.numel() for t in checked) > fp8.MAX_ELEMENTS:  # before any copy is made
        raise ValueError(f"{name} holds more than {fp8.MAX_ELEMENTS:,} (2**26) values in all")
    out = [t.detach().to(torch.float32).contiguous() for t in checked]  # FP8 and float64 too
    for i, t in enumerate(out):
        if not bool(torch.isfinite(t).all()):  # a float64 beyond float32's range is inf here
            raise ValueError(
                f"{name}[{i}] holds inf or NaN: a count of values rounded to zero needs finite ones"
            )
    return out


def gradient_format_reading(gradients) -> Reading:
    """The non-zero values of ``gradients`` (a tensor or a list, one per layer) rounded to zero by three choices
    (:func:`~amp_lab.fp8.quantization_stats`): E5M2 and E4M3 with one tensorwise scale per tensor, and E4M3
    in MX blocks of 32 along the last dimension (FLOOR).  Outcome ``fp8.blocks_keep_e4m3`` when the blocks
    lose no more than tensorwise E5M2, else ``fp8.blocks_need_e5m2``: why block recipes use E4M3 for every
    tensor (notebook 08)."""
    tensors = _block_tensors("gradients", gradients, MX_BLOCK)
    nonzero = [int((t != 0).sum()) for t in tensors]
    if not sum(nonzero):
        raise ValueError("gradients hold no non-zero value: there is nothing to round to zero")
    lost = {}
    for key, quantizer in (("tensorwise_e5m2",) * 2, ("tensorwise_e4m3",) * 2, ("mx_e4m3", "mxfp8_floor")):
        shares = [fp8.quantization_stats(t, quantizer).underflow for t in tensors]  # of each tensor's nonzero
        lost[key] = sum(round(share * n) for share, n in zip(shares, nonzero, strict=True))
    facts = {"block_size": MX_BLOCK, "nonzero": sum(nonzero), "tensors": len(tensors)}
    facts |= {f"lost_{k}": n for k, n in lost.items()} | {k: n / sum(nonzero) for k, n in lost.items()}
    keep = lost["mx_e4m3"] <= lost["tensorwise_e5m2"]
    if lost["tensorwise_e4m3"] <= lost["tensorwise_e5m2"]:
        reason = "fp8.tensorwise_e4m3_enough"
    else:
        reason = "fp8.block_scale_follows" if keep else "fp8.blocks_too_wide"
    return Reading("fp8.blocks_keep_e4m3" if keep else "fp8.blocks_need_e5m2", (reason,), facts)


def _relative_error(x: torch.Tensor, xq: torch.Tensor, mask: torch.Tensor) -> float:
    """:func:`~amp_lab.fp8.quantization_error` of the elements ``mask`` selects."""
    return fp8.quantization_error(x[mask], xq[mask])


def _cost(error: float, exact: float) -> float:
    return error / exact if exact > 0 else 1.0 if error == 0 else math.inf


def scale_mode_reading(x: torch.Tensor, block_size: int = 32) -> Reading:
    """What MXFP8's power-of-two scale costs, by rule: E4M3 in MX blocks of ``block_size`` along x's last
    dimension with FLOOR and with RCEIL scales (``mx.mx_quantize(..., scale_mode=...)``), against an exact FP32
    scale per block (``448 / block amax``): the error ratios (``cost_floor``, ``cost_rceil``), the same without
    each block's largest value(s) (``rest_floor``, ``rest_rceil``), and the values each rule clips (that round
    past 448, as :func:`~amp_lab.fp8.saturation_count` counts: ``clipped_floor``, in ``blocks_clipped_floor``
    blocks).  Outcome ``fp8.floor_clips`` or ``fp8.floor_no_clip`` (notebook 08)."""
    block_size = check_choice("block_size", check_int("block_size", block_size, minimum=1), mx.MX_BLOCK_SIZES)
    (x,) = _block_tensors("x", [x], block_size)
    e4m3 = fp8.FP8_FORMATS["fp8_e4m3"]
    blocks = x.reshape(-1, block_size)
    exact = fp8.blockwise_quantize(blocks, (1, block_size))  # an FP32 scale 448 / amax per block
    rest = blocks.abs() < blocks.abs().amax(dim=-1, keepdim=True)  # every value but its block's largest
    facts = {"block_size": block_size, "blocks": blocks.shape[0], "numel": x.numel()}
    facts["error_exact"] = fp8.quantization_error(blocks, exact)
    rest_exact = _relative_error(blocks, exact, rest)
    for mode in ("floor", "rceil"):
        elements, step = mx.mx_parts(x, "fp8_e4m3", block_size, mode)
        q, step = (elements * step).reshape(blocks.shape), step.reshape(blocks.shape)
        clipped = blocks.abs() / step > e4m3.saturation_bound  # E4M3's tie at 464 rounds down, to 448
        facts[f"error_{mode}"] = fp8.quantization_error(blocks, q)
        facts[f"cost_{mode}"] = _cost(facts[f"error_{mode}"], facts["error_exact"])
        facts[f"rest_{mode}"] = _cost(_relative_error(blocks, q, rest), rest_exact)
        facts[f"clipped_{mode}"] = int(clipped.sum())
        facts[f"blocks_clipped_{mode}"] = int(clipped.any(dim=-1).sum())
    reason = "fp8.maxima_carry_the_cost" if facts["rest_rceil"] < 1.05 else "fp8.rest_costs_too"
    return Reading("fp8.floor_clips" if facts["clipped_floor"] else "fp8.floor_no_clip", (reason,), facts)


def make_tensor_sequence(
    num_steps: int = 48,
    *,
    size: int = 1024,
    drift: float = 0.02,
    spike_step: int | None = 24,
    spike_size: float = 100.0,
    seed: int = 0,
) -> list[torch.Tensor]:
    """``num_steps`` seeded Gaussian tensors of ``size`` values whose spread grows by ``2**drift`` a step; at
    ``spike_step`` (None: none) one element becomes an outlier ``spike_size`` times the tensor's amax."""
    num_steps = check_int("num_steps", num_steps, minimum=1, maximum=MAX_SEQUENCE_STEPS)
    size = check_int("size", size, minimum=1, maximum=MAX_SEQUENCE_SIZE)
    drift = check_float("drift", drift, ge=-1.0, le=1.0)
    if spike_step is not None:
        spike_step = check_int("spike_step", spike_step, minimum=0, maximum=num_steps - 1)
    spike_size = check_float("spike_size", spike_size, ge=1.0, le=1e6)
    seed = check_seed("seed", seed)
    if num_steps * size > MAX_SEQUENCE_ELEMENTS:
        raise ValueError(f"num_steps * size = {num_steps * size:,} values; at most {MAX_SEQUENCE_ELEMENTS:,}")
    gen = torch.Generator().manual_seed(seed)
    tensors = []
    for step in range(num_steps):
        t = torch.randn(size, generator=gen) * 2.0 ** (drift * step)
        if step == spike_step:
            where = int(torch.randint(0, size, (1,), generator=gen))
            t[where] = float(t.abs().max()) * spike_size * (1.0 if t[where] >= 0 else -1.0)
        tensors.append(t)
    return tensors


@dataclass
class ScalingTrajectory:
    """Per step of one recipe: ``amax``, ``scale``, elements ``saturated`` (clipped to the format's max),
    non-zero elements rounded to zero (``underflow``: at or below half the smallest subnormal), ``error``."""

    recipe: str
    fmt: str
    history_len: int
    margin: int
    algo: str
    amax: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    saturated: list[int] = field(default_factory=list)
    underflow: list[int] = field(default_factory=list)
    error: list[float] = field(default_factory=list)

    @property
    def log2_scale(self) -> list[float]:
        return [math.log2(s) if s > 0 else -math.inf if s == 0 else math.nan for s in self.scale]

    @property
    def saturated_steps(self) -> list[int]:
        return [i for i, n in enumerate(self.saturated) if n > 0]

    def after_spike(self, spike_step: int) -> range:
        """The window after a spike: the ``history_len`` steps a max-history holds it, cut at the last step."""
        return range(spike_step + 1, min(spike_step + 1 + self.history_len, len(self.scale)))

    def mean_error(self, start: int = 0, stop: int | None = None) -> float:
        """Mean relative error over steps ``start`` to ``stop`` (NaN for none)."""
        part = self.error[start:stop]
        return sum(part) / len(part) if part else math.nan


def _check_tensor_list(tensors) -> list[torch.Tensor]:
    if isinstance(tensors, torch.Tensor) and tensors.dim() != 2:
        raise ValueError(f"tensors as one tensor must be 2-D (steps, values), got {tuple(tensors.shape)}")
    tensors = bounded_list("tensors", tensors, MAX_SEQUENCE_STEPS, "a list of tensors, one per step")
    if not tensors:
        raise ValueError("tensors must hold at least one step")
    out = [fp8.check_tensor(f"tensors[{i}]", t) for i, t in enumerate(tensors)]
    for i, t in enumerate(out):
        if not 1 <= t.numel() <= MAX_SEQUENCE_SIZE:
            raise ValueError(f"tensors[{i}] has {t.numel():,} elements; 1 to {MAX_SEQUENCE_SIZE:,} per step")
    if sum(t.numel() for t in out) > MAX_SEQUENCE_ELEMENTS:
        raise ValueError(f"tensors hold more than {MAX_SEQUENCE_ELEMENTS:,} (2**22) values in all")
    return out


def scaling_trajectory(
    tensors,
    *,
    fmt: str = "fp8_e4m3",
    history_len: int = 16,
    margin: int = 0,
    algo: str = "max",
    recipe: str = "delayed",
) -> ScalingTrajectory:
    """Quantize each step's tensor (a list, or a 2-D tensor of steps) with one recipe: ``"current"`` scales
    by its own amax (:func:`~amp_lab.fp8.tensorwise_scale`), ``"delayed"`` by earlier steps' amaxes."""
    tensors = _check_tensor_list(tensors)
    spec = fp8.check_format("fmt", fmt, fp8.FP8_FORMATS)
    fp8.check_name("recipe", recipe, ("delayed", "current"))
    history = fp8.DelayedScaling(spec.name, history_len, margin, algo)  # checks history_len, margin, algo
    traj = ScalingTrajectory(recipe, spec.name, history.history_len, history.margin, history.algo)
    for t in tensors:
        x = t.detach().to(torch.float32)
        amax = float(x.abs().max())
        if recipe == "current":
            scale = fp8.tensorwise_scale(x, spec.name, history.margin)
        else:
            scale = torch.tensor(history.scale, dtype=torch.float32)
            history.update(amax)
        q = fp8.quantize(x, spec.name, scale)
        traj.amax.append(amax)
        traj.scale.append(float(scale))
        traj.saturated.append(fp8.saturation_count(x, spec.name, scale))
        traj.underflow.append(int(((q.to(torch.float32) == 0) & (x != 0)).sum()))
        traj.error.append(fp8.quantization_error(x, fp8.dequantize(q, scale)))
    return traj


class ScalingExplorer:
    """:func:`scaling_explorer`'s widget: sliders, ``readout``, ``pane``, ``widget``, latest trajectories."""

    def __init__(self, *, num_steps, size, history_len, margin, spike_step, spike_size, algo, fmt, seed):
        self.num_steps, self.size, self.fmt, self.seed = num_steps, size, fmt, seed
        style = {"description_width": "initial"}
        common = dict(continuous_update=False, style=style, layout=widgets.Layout(width="420px"))
        slider = widgets.IntSlider
        self.history_len = slider(history_len, 1, 64, description="history length", **common)
        self.margin = slider(margin, 0, 8, description="margin (powers of 2)", **common)
        self.spike_step = slider(spike_step, 0, num_steps - 1, description="spike at step", **common)
        self.spike_size = widgets.FloatLogSlider(
            spike_size, base=10, min=0, max=4, step=0.25, description="spike size (x amax)", **common
        )
        self.algo = widgets.Dropdown(
            options=fp8.ALGOS, value=algo, description="history reduced by", style=style
        )
        controls = [self.history_len, self.margin, self.spike_step, self.spike_size, self.algo]
        names = ("history", "margin", "spike-step", "spike-size", "algo")
        for control, name in zip(controls, names, strict=True):
            control.add_class(f"amp-fp8-{name}")
            control.observe(lambda change: self.update(), names="value")
        self.readout = widgets.HTML().add_class("amp-fp8-readout")
        self.pane = FigurePane(figsize=(7.0, 6.6), dpi=80)
        self.pane.image.add_class("amp-fp8-plot")
        self.widget = widgets.VBox([*controls, self.readout, self.pane.image])
        self.axes = self.pane.figure.subplots(4, 1, sharex=True)
        self._lines = {}
        labels = ("log2(scale)", "saturated", "rounded to 0", "relative error")
        for ax, ylabel in zip(self.axes, labels, strict=True):
            for recipe, color in (("current", "C0"), ("delayed", "C3")):
                (self._lines[ax, recipe],) = ax.step(
                    range(num_steps), [1.0] * num_steps, where="mid", color=color, lw=1.4, label=recipe
                )
            ax.set_ylabel(ylabel, fontsize=9)
            ax.grid(alpha=0.3)
        self.axes[2].set_yscale("symlog", linthresh=1)
        self.axes[3].set(yscale="log", xlabel="step")
        self.axes[0].legend(loc="lower left", fontsize=8)
        self._spike_lines = [ax.axvline(0, color="0.5", ls=":", lw=1) for ax in self.axes]
        self._title = self.axes[0].set_title("", fontsize=10)
        self.pane.figure.subplots_adjust(left=0.12, right=0.97, bottom=0.08, top=0.94, hspace=0.15)
        self.update()

    def update(self) -> tuple[ScalingTrajectory, ScalingTrajectory]:
        """Recompute both recipes with the controls' values; refresh the readout and the figure."""
        spike = int(self.spike_step.value)
        tensors = make_tensor_sequence(
            self.num_steps, size=self.size, spike_step=spike, spike_size=self.spike_size.value, seed=self.seed
        )
        kw = dict(fmt=self.fmt, history_len=self.history_len.value, margin=self.margin.value)
        kw["algo"] = self.algo.value
        self.current = scaling_trajectory(tensors, recipe="current", **kw)
        self.delayed = scaling_trajectory(tensors, recipe="delayed", **kw)
        for recipe, t in (("current", self.current), ("delayed", self.delayed)):
            series = (t.log2_scale, t.saturated, t.underflow, [max(e, 1e-6) for e in t.error])
            for ax, ys in zip(self.axes, series, strict=True):
                self._lines[ax, recipe].set_ydata(ys)
        for ax, line in zip(self.axes, self._spike_lines, strict=True):
            ax.relim()
            ax.autoscale_view()
            line.set_xdata([spike, spike])
        self._title.set_text(f"{fp8.FP8_FORMATS[self.fmt].label}: outlier at step {spike} (dotted)")
        self.readout.value = readout_html(spike_reading(self.current, self.delayed, spike))
        self.pane.refresh()
        return self.current, self.delayed


def spike_reading(current: ScalingTrajectory, delayed: ScalingTrajectory, spike_step: int) -> Reading:
    """What the outlier at ``spike_step`` cost each recipe, at the spike, in the window after it
    (``delayed.after_spike``) and over the run: outcome ``fp8.delayed_saturates`` or ``fp8.delayed_holds``;
    facts per recipe (``saturated_current``, ``underflow_delayed``, ``after_underflow_current``, ...)."""
    for name, traj in (("current", current), ("delayed", delayed)):
        check_instance(name, traj, ScalingTrajectory, "a ScalingTrajectory (fp8_explorer.scaling_trajectory)")
    if len(current.scale) != len(delayed.scale):
        raise ValueError(f"current and delayed cover {len(current.scale)} and {len(delayed.scale)} steps")
    spike = check_int("spike_step", spike_step, minimum=0, maximum=len(current.scale) - 1)
    after = delayed.after_spike(spike)  # one window for both recipes: the outlier's time in the history
    facts = {"spike": spike, "steps": len(current.scale), "n_after": len(after)}
    facts["max"] = fp8.FP8_FORMATS[delayed.fmt].max
    facts["amax_ratio"] = delayed.amax[spike] / max(delayed.amax[:spike], default=math.nan)
    for name, t in (("current", current), ("delayed", delayed)):
        facts |= {
            f"saturated_{name}": t.saturated[spike],
            f"underflow_{name}": t.underflow[spike],
            f"error_{name}": t.error[spike],
            f"after_{name}": t.mean_error(after.start, after.stop),
            f"after_underflow_{name}": sum(t.underflow[after.start : after.stop]),
            f"underflow_run_{name}": sum(t.underflow),
            f"saturated_steps_{name}": len(t.saturated_steps),
            f"log2_scale_{name}": t.log2_scale[spike],
        }
    outcome = "fp8.delayed_saturates" if facts["saturated_delayed"] else "fp8.delayed_holds"
    reasons = ["fp8.current_rescales"]
    if facts["underflow_current"]:
        reasons.append("fp8.error_hides_underflow")
    if after:
        reasons.append("fp8.delayed_rounds_after")
    return Reading(outcome, tuple(reasons), facts)


def readout_html(reading: Reading) -> str:
    """The explorer's readout: the spike reading's numbers as a table, then its sentences."""
    f = reading.facts
    rows = {
        "saturated at the spike step": "saturated",
        "rounded to zero at the spike step": "underflow",
        "relative error at the spike step": "error",
        f"mean relative error, the {f['n_after']} steps after it": "after",
        f"rounded to zero, the {f['n_after']} steps after it": "after_underflow",
        "steps with saturation": "saturated_steps",
        f"rounded to zero, all {f['steps']} steps": "underflow_run",
    }
    cells = []
    for label, k in rows.items():
        values = (f[f"{k}_current"], f[f"{k}_delayed"])
        cells.append([label, *(str(v) if isinstance(v, int) else f"{v:.3g}" for v in values)])
    return table_html(cells, ["", "current", "delayed"]) + f"<p>{html.escape(str(reading))}</p>"


def scaling_explorer(
    *,
    num_steps: int = 48,
    size: int = 1024,
    history_len: int = 16,
    margin: int = 0,
    spike_step: int = 24,
    spike_size: float = 100.0,
    algo: str = "max",
    fmt: str = "fp8_e4m3",
    seed: int = 0,
) -> ScalingExplorer:
    """Sliders for current versus delayed scaling (notebook 08: ``explorer.widget``): history length, margin,
    the outlier's step and size, the history's reduction; ``num_steps`` up to 200, ``size`` up to 4096."""
    num_steps = check_int("num_steps", num_steps, minimum=2, maximum=200)
    return ScalingExplorer(
        num_steps=num_steps,
        size=check_int("size", size, minimum=1, maximum=4096),
        history_len=check_int("history_len", history_len, minimum=1, maximum=64),
        margin=check_int("margin", margin, minimum=0, maximum=8),
        spike_step=check_int("spike_step", spike_step, minimum=0, maximum=num_steps - 1),
        spike_size=check_float("spike_size", spike_size, ge=1.0, le=1e4),
        algo=fp8.check_name("algo", algo, fp8.ALGOS),
        fmt=fp8.check_format("fmt", fmt, fp8.FP8_FORMATS).name,
        seed=check_seed("seed", seed),
    )
