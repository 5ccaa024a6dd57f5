"""What notebook 08's measurements say, and the scaling explorer: :func:`spread_reading` (which format
each tensor needs) and current versus delayed scaling on a sequence with an outlier.

:func:`make_tensor_sequence` stands in for one layer's activations over training, :func:`scaling_trajectory`
quantizes each step with one recipe (:func:`amp_lab.fp8.tensorwise_scale` or
:class:`amp_lab.fp8.DelayedScaling`), :func:`spike_reading` says what the outlier cost each recipe, and
:func:`scaling_explorer` puts sliders on all of it.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import ipywidgets as widgets
import torch

from ._checks import (
    MAX_STEPS,
    ArgumentTypeError,
    bounded_list,
    check_bool,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_seed,
)
from .fp8 import (
    ALGOS,
    FP8_FORMATS,
    DelayedScaling,
    check_format,
    check_tensor,
    dequantize,
    quantization_error,
    quantize,
    saturation_count,
    tensorwise_scale,
)
from .text import Reading
from .widgets import FigurePane, table_html

__all__ = [
    "RECIPES",
    "ScalingExplorer",
    "ScalingTrajectory",
    "make_tensor_sequence",
    "scaling_explorer",
    "scaling_trajectory",
    "identity_reading",
    "spike_reading",
    "spread_reading",
    "unscaled_reading",
]

RECIPES = ("delayed", "current")

# ------------------------------------------------------------------------------------------
# Section 1: which format each tensor needs
# ------------------------------------------------------------------------------------------


def spread_reading(activations, gradients, e4m3_window: float, e5m2_window: float) -> Reading:
    """What the tensors' spreads (binades from a small quantile up to the largest magnitude, one per layer)
    say about the formats, whose windows are ``e4m3_window`` and ``e5m2_window`` binades wide.

    ``activations``: one spread per layer; ``gradients``: one per layer, the last the output layer's (the
    logits').  Outcome ``fp8.standard_recipe`` when the activations fit E4M3 and the hidden layers'
    gradients need E5M2, else ``fp8.recipe_not_forced``; ``facts``: ``narrow`` (the widest activation
    spread), ``wide`` (the widest hidden-layer gradient spread), ``logits`` and the windows.  (Notebook 08.)
    """
    acts = [
        check_float(f"activations[{i}]", v, ge=0)
        for i, v in enumerate(bounded_list("activations", activations, 1000, "a list of spreads"))
    ]
    grads = [
        check_float(f"gradients[{i}]", v, ge=0)
        for i, v in enumerate(bounded_list("gradients", gradients, 1000, "a list of spreads"))
    ]
    if not acts or len(grads) < 2:
        raise ValueError(
            "activations needs a spread per layer and gradients at least two (hidden layers, then the logits)"
        )
    w4 = check_float("e4m3_window", e4m3_window, gt=0)
    w5 = check_float("e5m2_window", e5m2_window, gt=0)
    facts = {"narrow": max(acts), "wide": max(grads[:-1]), "logits": grads[-1], "w4": w4, "w5": w5}
    fits = facts["narrow"] < w4 - 4  # four binades of room above the smallest values that matter
    reasons = ["fp8.activations_fit_e4m3" if fits else "fp8.activations_fill_e4m3"]
    if facts["wide"] <= w4:
        reasons.append("fp8.gradients_fit_e4m3")
    else:
        reasons.append("fp8.gradients_need_e5m2" if facts["wide"] < w5 else "fp8.gradients_beyond_e5m2")
    reasons.append("fp8.logits_beyond_e5m2" if facts["logits"] > w5 else "fp8.logits_within_e5m2")
    standard = fits and reasons[1] == "fp8.gradients_need_e5m2"
    return Reading("fp8.standard_recipe" if standard else "fp8.recipe_not_forced", tuple(reasons), facts)


def unscaled_reading(largest: float, fmt: str = "fp8_e4m3") -> Reading:
    """Where a tensor's ``largest`` magnitude sits against ``fmt``'s smallest normal, cast without a scale.

    Outcome ``fp8.below_window`` (below it: almost the whole histogram is under the window) or
    ``fp8.near_window``; ``facts``: ``log2_largest`` (rounded down), ``log2_min_normal`` and ``label``.
    (Notebook 08.)"""
    largest = check_float("largest", largest, gt=0)
    spec = check_format("fmt", fmt, FP8_FORMATS)
    log2_min_normal = math.log2(torch.finfo(spec.dtype).smallest_normal)
    facts = {
        "log2_largest": math.floor(math.log2(largest)),
        "log2_min_normal": log2_min_normal,
        "label": spec.label,
    }
    below = largest < 2.0**log2_min_normal
    return Reading("fp8.below_window" if below else "fp8.near_window", (), facts)


def identity_reading(ours, theirs, same_weights: bool) -> Reading:
    """Two training runs' losses (``ours``, ``theirs``: lists of floats, step by step) and whether their
    trained weights are equal: outcome ``fp8.losses_identical``, ``fp8.losses_close`` (some steps differ)
    or ``fp8.losses_different`` (none equal); reason ``fp8.weights_identical`` or ``fp8.weights_differ``;
    ``facts``: ``equal`` and ``total`` steps.  (Notebook 08: ours against torchao's Float8Linear.)"""
    ours = bounded_list("ours", ours, MAX_STEPS, "a list of losses")
    theirs = bounded_list("theirs", theirs, MAX_STEPS, "a list of losses")
    if len(ours) != len(theirs) or not ours:
        raise ValueError(
            f"ours and theirs must hold the same number of losses (at least one), got {len(ours)} and {len(theirs)}"
        )
    same_weights = check_bool("same_weights", same_weights)
    equal = sum(a == b for a, b in zip(ours, theirs, strict=True))
    total = len(ours)
    outcome = (
        "fp8.losses_identical" if equal == total else "fp8.losses_close" if equal else "fp8.losses_different"
    )
    return Reading(
        outcome,
        ("fp8.weights_identical" if same_weights else "fp8.weights_differ",),
        {"equal": equal, "total": total},
    )


# ------------------------------------------------------------------------------------------
# Section 2: current versus delayed scaling
# ------------------------------------------------------------------------------------------

# The widget recomputes on every slider move: sequences are short and tensors small.
MAX_SEQUENCE_STEPS = 1000
MAX_SEQUENCE_SIZE = 2**16
MAX_SEQUENCE_ELEMENTS = 2**22  # all steps together: 16 MiB of float32
MAX_EXPLORER_SIZE = 4096  # the widget recomputes on every slider move
MAX_SPIKE = 1e6
MAX_DRIFT = 1.0


def make_tensor_sequence(
    num_steps: int = 48,
    *,
    size: int = 1024,
    drift: float = 0.02,
    spike_step: int | None = 24,
    spike_size: float = 100.0,
    seed: int = 0,
) -> list[torch.Tensor]:
    """A seeded sequence of ``num_steps`` float32 tensors of ``size`` Gaussian values, standing in for one
    layer's activations over training: the spread grows by ``2**drift`` per step (amax drifts up), and at
    ``spike_step`` (None: no spike) one element becomes an outlier ``spike_size`` times the tensor's own
    amax.  (Notebook 08: the input of :func:`scaling_trajectory`.)"""
    num_steps = check_int("num_steps", num_steps, minimum=1, maximum=MAX_SEQUENCE_STEPS)
    size = check_int("size", size, minimum=1, maximum=MAX_SEQUENCE_SIZE)
    drift = check_float("drift", drift, ge=-MAX_DRIFT, le=MAX_DRIFT)
    if spike_step is not None:
        spike_step = check_int("spike_step", spike_step, minimum=0, maximum=num_steps - 1)
    spike_size = check_float("spike_size", spike_size, ge=1.0, le=MAX_SPIKE)
    seed = check_seed("seed", seed)
    if num_steps * size > MAX_SEQUENCE_ELEMENTS:
        raise ValueError(
            f"num_steps * size = {num_steps * size:,} values; at most {MAX_SEQUENCE_ELEMENTS:,} (2**22) are "
            "allowed: choose fewer steps or a smaller size"
        )
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
    """Per-step results of one scaling recipe over a sequence of tensors (:func:`scaling_trajectory`).

    ``amax[i]``: step i's tensor's amax; ``scale[i]``: the scale used at step i; ``saturated[i]``: its
    elements clipped to ±max (:func:`saturation_count`); ``flushed[i]``: its nonzero elements that the
    cast turned into 0 (what a scale too small for the tensor costs at the other end); ``error[i]``: the
    relative RMS error of the quantize-dequantize round trip (:func:`quantization_error`).
    """

    recipe: str
    fmt: str
    history_len: int
    margin: int
    algo: str
    amax: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    saturated: list[int] = field(default_factory=list)
    flushed: list[int] = field(default_factory=list)
    error: list[float] = field(default_factory=list)

    @property
    def num_steps(self) -> int:
        return len(self.scale)

    @property
    def log2_scale(self) -> list[float]:
        """log2 of each step's scale (the widget's y axis)."""
        return [math.log2(s) if s > 0 else (-math.inf if s == 0 else math.nan) for s in self.scale]

    @property
    def saturated_steps(self) -> list[int]:
        """The steps at which at least one element saturated."""
        return [i for i, n in enumerate(self.saturated) if n > 0]

    def mean_error(self, start: int = 0, stop: int | None = None) -> float:
        """Mean relative error over steps ``start`` to ``stop`` (exclusive; default: to the end; NaN for none)."""
        part = self.error[start:stop]
        return sum(part) / len(part) if part else math.nan


def _check_tensor_list(tensors) -> list[torch.Tensor]:
    if isinstance(tensors, torch.Tensor):
        if tensors.dim() != 2:
            raise ValueError(
                f"tensors as one tensor must be 2-D (steps, values), got shape {tuple(tensors.shape)}"
            )
        tensors = list(tensors)
    if not isinstance(tensors, (list, tuple)):
        raise ArgumentTypeError(
            "tensors must be a list of tensors (one per step, e.g. make_tensor_sequence()), "
            f"got {type(tensors).__name__}"
        )
    if not tensors:
        raise ValueError("tensors must hold at least one tensor")
    if len(tensors) > MAX_SEQUENCE_STEPS:
        raise ValueError(f"tensors may hold at most {MAX_SEQUENCE_STEPS} steps, got {len(tensors)}")
    out = [check_tensor(f"tensors[{i}]", t) for i, t in enumerate(tensors)]
    for i, t in enumerate(out):
        if t.numel() == 0:
            raise ValueError(f"tensors[{i}] is empty")
        if t.numel() > MAX_SEQUENCE_SIZE:
            raise ValueError(
                f"tensors[{i}] has {t.numel():,} elements; at most {MAX_SEQUENCE_SIZE:,} per step"
            )
    total = sum(t.numel() for t in out)
    if total > MAX_SEQUENCE_ELEMENTS:
        raise ValueError(f"tensors hold {total:,} values in all; at most {MAX_SEQUENCE_ELEMENTS:,} (2**22)")
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
    """Quantize each step's tensor with one recipe and record scale, saturation and error per step.

    ``recipe="current"`` scales each tensor by its own amax (:func:`tensorwise_scale`: it never
    saturates, but one outlier squeezes every other value towards the subnormals).  ``"delayed"`` uses a
    :class:`DelayedScaling` (``history_len``, ``margin``, ``algo``): the scale comes from earlier steps,
    so a step whose amax jumps saturates, and with ``algo="max"`` an outlier keeps the scale low for the
    next ``history_len`` steps.  ``tensors``: a list of float tensors, one per step (e.g.
    :func:`make_tensor_sequence`), or a 2-D tensor (steps, values).  (Notebook 08.)
    """
    tensors = _check_tensor_list(tensors)
    spec = check_format("fmt", fmt, FP8_FORMATS)
    if not isinstance(recipe, str):
        raise ArgumentTypeError(
            f"recipe must be one of {RECIPES}, got {type(recipe).__name__}: {recipe!r:.80}"
        )
    check_choice("recipe", recipe, RECIPES)
    history = DelayedScaling(spec.name, history_len, margin, algo)  # checks history_len, margin, algo
    margin = history.margin
    traj = ScalingTrajectory(recipe, spec.name, history.history_len, margin, history.algo)
    for t in tensors:
        x = t.detach().to(torch.float32)
        amax = float(x.abs().max())
        if recipe == "current":
            scale = tensorwise_scale(x, spec.name, margin)
        else:
            scale = torch.tensor(history.scale, dtype=torch.float32)
            history.update(amax)
        q = quantize(x, spec.name, scale)
        xq = dequantize(q, scale)
        traj.amax.append(amax)
        traj.scale.append(float(scale))
        traj.saturated.append(saturation_count(x, spec.name, scale))
        traj.flushed.append(int(((q.to(torch.float32) == 0) & (x != 0)).sum()))
        traj.error.append(quantization_error(x, xq))
    return traj


class ScalingExplorer:
    """Widget of :func:`scaling_explorer`: current versus delayed scaling on a sequence with an outlier.

    Controls: ``history_len``, ``margin``, ``spike_step``, ``spike_size`` (a log slider), ``algo``.
    Readout: ``readout`` (HTML).  Figure: ``pane`` (:class:`~amp_lab.widgets.FigurePane`, three panels:
    log2 scale, saturated elements, relative error; both recipes).  Layout: ``widget``.  ``current`` and
    ``delayed`` are the latest :class:`ScalingTrajectory` of each recipe.  CSS classes:
    ``amp-fp8-history``, ``amp-fp8-margin``, ``amp-fp8-spike-step``, ``amp-fp8-spike-size``,
    ``amp-fp8-algo``, ``amp-fp8-readout``, ``amp-fp8-plot``.
    """

    def __init__(
        self,
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
    ):
        # Everything is checked before the widget is built, and must lie on the sliders.
        self.num_steps = check_int("num_steps", num_steps, minimum=2, maximum=200)
        self.size = check_int("size", size, minimum=1, maximum=MAX_EXPLORER_SIZE)
        history_len = check_int("history_len", history_len, minimum=1, maximum=64)
        margin = check_int("margin", margin, minimum=0, maximum=8)
        spike_step = check_int("spike_step", spike_step, minimum=0, maximum=self.num_steps - 1)
        spike_size = check_float("spike_size", spike_size, ge=1.0, le=1e4)
        if not isinstance(algo, str):
            raise ArgumentTypeError(f"algo must be one of {ALGOS}, got {type(algo).__name__}")
        algo = check_choice("algo", algo, ALGOS)
        self.fmt = check_format("fmt", fmt, FP8_FORMATS).name
        self.seed = check_seed("seed", seed)
        style = {"description_width": "initial"}
        layout = widgets.Layout(width="420px")
        self.history_len = widgets.IntSlider(
            value=history_len, min=1, max=64, description="history length",
            continuous_update=False, style=style, layout=layout,
        )  # fmt: skip
        self.margin = widgets.IntSlider(
            value=margin, min=0, max=8, description="margin (powers of 2)",
            continuous_update=False, style=style, layout=layout,
        )  # fmt: skip
        self.spike_step = widgets.IntSlider(
            value=spike_step, min=0, max=self.num_steps - 1, description="spike at step",
            continuous_update=False, style=style, layout=layout,
        )  # fmt: skip
        self.spike_size = widgets.FloatLogSlider(
            value=spike_size, base=10, min=0, max=4, step=0.25, description="spike size (x amax)",
            continuous_update=False, style=style, layout=layout,
        )  # fmt: skip
        self.algo = widgets.Dropdown(
            options=list(ALGOS), value=algo, description="history reduced by", style=style
        )
        for control, css in (
            (self.history_len, "amp-fp8-history"),
            (self.margin, "amp-fp8-margin"),
            (self.spike_step, "amp-fp8-spike-step"),
            (self.spike_size, "amp-fp8-spike-size"),
            (self.algo, "amp-fp8-algo"),
        ):
            control.add_class(css)
            control.observe(self._on_change, names="value")
        self.readout = widgets.HTML()
        self.readout.add_class("amp-fp8-readout")
        self.pane = FigurePane(figsize=(7.0, 5.4), dpi=80)
        self.pane.image.add_class("amp-fp8-plot")
        self._build_figure()
        self.widget = widgets.VBox(
            [
                self.history_len,
                self.margin,
                self.spike_step,
                self.spike_size,
                self.algo,
                self.readout,
                self.pane.image,
            ]
        )
        self.current: ScalingTrajectory | None = None
        self.delayed: ScalingTrajectory | None = None
        self.update()

    def _build_figure(self) -> None:
        fig = self.pane.figure
        axes = fig.subplots(3, 1, sharex=True)
        self.axes = axes
        steps = list(range(self.num_steps))
        self._lines = {}
        for ax, key, ylabel in zip(
            axes,
            ("log2_scale", "saturated", "error"),
            ("log2(scale)", "saturated", "relative error"),
            strict=True,
        ):
            for recipe, color in (("current", "C0"), ("delayed", "C3")):
                (line,) = ax.step(steps, [1.0] * len(steps), where="mid", color=color, lw=1.4, label=recipe)
                self._lines[(key, recipe)] = line
            ax.set_ylabel(ylabel, fontsize=9)
            ax.grid(alpha=0.3)
        axes[2].set_yscale("log")
        axes[2].set_xlabel("step")
        axes[0].legend(loc="lower left", fontsize=8)
        self._spike_lines = [ax.axvline(0, color="0.5", ls=":", lw=1) for ax in axes]
        self._title = axes[0].set_title("", fontsize=10)
        fig.subplots_adjust(left=0.12, right=0.97, bottom=0.09, top=0.93, hspace=0.15)

    def _on_change(self, change) -> None:
        self.update()

    def update(self) -> tuple[ScalingTrajectory, ScalingTrajectory]:
        """Recompute both recipes with the controls' values; refresh the readout and the figure."""
        spike = int(self.spike_step.value)
        tensors = make_tensor_sequence(
            self.num_steps,
            size=self.size,
            spike_step=spike,
            spike_size=float(self.spike_size.value),
            seed=self.seed,
        )
        kwargs = dict(
            fmt=self.fmt,
            history_len=int(self.history_len.value),
            margin=int(self.margin.value),
            algo=self.algo.value,
        )
        self.current = scaling_trajectory(tensors, recipe="current", **kwargs)
        self.delayed = scaling_trajectory(tensors, recipe="delayed", **kwargs)
        for recipe, traj in (("current", self.current), ("delayed", self.delayed)):
            self._lines[("log2_scale", recipe)].set_ydata(traj.log2_scale)
            self._lines[("saturated", recipe)].set_ydata(traj.saturated)
            self._lines[("error", recipe)].set_ydata([max(e, 1e-6) for e in traj.error])
        for ax in self.axes:
            ax.relim()
            ax.autoscale_view()
        for line in self._spike_lines:
            line.set_xdata([spike, spike])
        self._title.set_text(f"{FP8_FORMATS[self.fmt].label}: outlier at step {spike} (dotted)")
        self.readout.value = readout_html(spike_reading(self.current, self.delayed, spike))
        self.pane.refresh()
        return self.current, self.delayed


def spike_reading(current: ScalingTrajectory, delayed: ScalingTrajectory, spike_step: int) -> Reading:
    """What the outlier at ``spike_step`` cost each recipe (notebook 08's reveal and the explorer's readout).

    Outcome ``fp8.delayed_saturates`` (delayed scaling clipped elements at the spike) or
    ``fp8.delayed_holds``; reason ``fp8.current_rescales``.  ``facts``: per recipe (``_current``,
    ``_delayed``) the elements ``saturated`` and ``flushed`` at the spike, the ``error`` there, the mean
    error ``after`` it (over ``n_after`` steps; NaN for none), the ``saturated_steps`` count and the
    ``log2_scale`` used at the spike; ``amax_ratio`` (the spike's amax over the largest before it) and
    ``max`` (the format's largest value).
    """
    for name, traj in (("current", current), ("delayed", delayed)):
        check_instance(name, traj, ScalingTrajectory, "a ScalingTrajectory (fp8_explorer.scaling_trajectory)")
    if current.num_steps != delayed.num_steps:
        raise ValueError(
            f"current and delayed must cover the same steps, got {current.num_steps} and {delayed.num_steps}"
        )
    spike = check_int("spike_step", spike_step, minimum=0, maximum=current.num_steps - 1)
    facts = {
        "spike": spike,
        "n_after": current.num_steps - spike - 1,
        "max": FP8_FORMATS[delayed.fmt].max,
        "amax_ratio": delayed.amax[spike] / max(delayed.amax[:spike], default=math.nan),
    }
    for name, t in (("current", current), ("delayed", delayed)):
        facts |= {
            f"saturated_{name}": t.saturated[spike],
            f"flushed_{name}": t.flushed[spike],
            f"error_{name}": t.error[spike],
            f"after_{name}": t.mean_error(spike + 1),
            f"saturated_steps_{name}": len(t.saturated_steps),
            f"log2_scale_{name}": t.log2_scale[spike],
        }
    outcome = "fp8.delayed_saturates" if facts["saturated_delayed"] else "fp8.delayed_holds"
    return Reading(outcome, ("fp8.current_rescales",), facts)


def readout_html(reading: Reading) -> str:
    """The explorer's readout: the spike reading's numbers as a table, then its sentences."""
    f = reading.facts
    rows = [
        ("saturated at the spike step", "saturated"),
        ("flushed to zero at the spike step", "flushed"),
        ("relative error at the spike step", "error"),
        (f"mean relative error, {f['n_after']} steps after it", "after"),
        ("steps with saturation", "saturated_steps"),
    ]

    def cell(v) -> str:
        return str(v) if isinstance(v, int) else f"{v:.3g}"

    cells = [(label, *(cell(f[f"{key}_{r}"]) for r in ("current", "delayed"))) for label, key in rows]
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
    """Sliders for current versus delayed scaling (notebook 08): history length (1 to 64), margin (0 to 8),
    the outlier's step and size (1 to 10**4 times the tensor's amax) and the history's reduction; every
    change recomputes :func:`scaling_trajectory` for both recipes on :func:`make_tensor_sequence`
    (``num_steps`` at most 200, tensors of ``size`` values, at most 4096) and redraws scale, saturation
    and error.  The notebook cell ends with ``explorer.widget``."""
    return ScalingExplorer(
        num_steps=num_steps,
        size=size,
        history_len=history_len,
        margin=margin,
        spike_step=spike_step,
        spike_size=spike_size,
        algo=algo,
        fmt=fmt,
        seed=seed,
    )
