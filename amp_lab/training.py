"""04's training runs (:func:`train_digits`: FP32, FP16 with and without scalers), compared by loss, share
of exactly-zero gradients and scale trajectory; :class:`ScalerExplorer` re-runs one as its sliders move."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ._checks import (
    MAX_STEPS,
    MAX_THREADS,
    ArgumentTypeError,
    bounded_list,
    check_bool,
    check_callable,
    check_float,
    check_instance,
    check_int,
    check_optional_str,
    check_seed,
)
from .data import Dataset, load_digits
from .device import check_fits, get_device, torch_threads
from .dtypes import parse_dtype
from .gradients import random_batches
from .models import make_mlp
from .progress import progress
from .recipe import MAX_LR, train_loop
from .scaling import DynamicLossScaler
from .text import Reading
from .timing import PROGRESS_AFTER_S, training_seconds
from .widgets import FigurePane, Table, table_html

MAX_EXPLORER_STEPS = 500  # the widget re-runs the training on every slider move
EXPLORER_BUDGET_S = 5.0  # a move takes a second or two on a laptop, 5 s under load: estimated once, up front
MAX_DEPTH = 64  # Linear layers
MAX_WIDTH = 4096
_SCALER_METHODS = ("scale", "unscale_", "step", "update", "get_scale")


@dataclass
class TrainingRun:
    """What :func:`train_digits` measured, one entry per step: the unscaled ``losses``, the ``zero_fraction``
    of gradient elements exactly zero (after unscaling), the ``scales`` used (1.0 without a scaler) and
    whether the optimizer ``stepped``; then the FP32 ``test_accuracy``, whether every weight is ``finite``,
    and the trained ``model``."""

    label: str
    losses: list[float] = field(default_factory=list)
    zero_fraction: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    stepped: list[bool] = field(default_factory=list)
    test_accuracy: float = math.nan
    finite: bool = True
    model: nn.Module | None = field(default=None, repr=False)

    @property
    def skipped_steps(self) -> list[int]:
        return [i for i, s in enumerate(self.stepped) if not s]

    def recent_loss(self, last: int = 20) -> float:
        """Mean training loss over the ``last`` steps (NaN if there are none or one is NaN)."""
        return _mean(self.losses[-last:])

    def recent_zero_fraction(self, last: int = 20) -> float:
        return _mean(self.zero_fraction[-last:])

    @property
    def first_nonfinite_step(self) -> int | None:
        return next((i for i, value in enumerate(self.losses) if not math.isfinite(value)), None)

    def summary(self, last: int = 20) -> str:
        """One line: mean loss over the ``last`` steps, zero-gradient share, skips, accuracy (digits that
        depend on the CPU's kernels: notebooks print it in cells marked volatile)."""
        return (
            f"{self.label:<20} loss (last {len(self.losses[-last:])}) {self.recent_loss(last):7.4f}  "
            f"zero gradients {100 * self.recent_zero_fraction(last):5.1f}%  skipped {len(self.skipped_steps):3d}  "
            f"test accuracy {100 * self.test_accuracy:5.1f}%"
        )


def _mean(values) -> float:
    return sum(values) / len(values) if values else math.nan


def _joined(scales) -> str:
    return " and ".join(f"2^{math.log2(S):g}" for S in scales)


def read_static_runs(runs: dict, grew: bool = False) -> Reading:
    """04's reveal after the static scales' runs (``{scale: TrainingRun}``): which kept the weights finite
    (``facts["answer"]``, worded as the prediction's options) and when each of the others was lost; why a
    scale was lost later only where the notebook measured the gradients growing (``grew``)."""
    grew = check_bool("grew", grew)
    if not isinstance(runs, dict) or not 1 <= len(runs) <= 64:
        raise ArgumentTypeError(f"runs must be 1 to 64 {{scale: TrainingRun}}, got {type(runs).__name__}")
    for S, run in runs.items():
        check_float("runs' scales", S, gt=0.0)
        check_instance(f"runs[{S!r}]", run, TrainingRun, "a TrainingRun (from train_digits)")
    survivors = [S for S, run in runs.items() if run.finite]
    lost = {S: run.first_nonfinite_step for S, run in runs.items() if not run.finite}
    answers = {0: "none", len(runs): "all three" if len(runs) == 3 else f"all {len(runs)}"}
    answer = answers.get(len(survivors), ("only " if len(survivors) == 1 else "") + _joined(survivors))
    groups = {
        "lost_early": [S for S, step in lost.items() if step is not None and step < 5],
        "lost_mid": [S for S, step in lost.items() if step is not None and 5 <= step < 10],
        "lost_later": [S for S, step in lost.items() if step is None or step >= 10],
    }
    reasons = tuple(f"training.static_{key}" for key, scales in groups.items() if scales)
    reasons += ("training.static_gradients_grew",) if grew and groups["lost_later"] else ()
    facts = {"answer": answer, "survivors": _joined(survivors) or "none", "lost_steps": dict(lost)}
    facts.update({key: _joined(scales) for key, scales in groups.items()})
    return Reading("training.static_some_lost" if lost else "training.static_none_lost", reasons, facts)


RUNS_HEADER = [
    "run",
    "loss (last steps)",
    "zero gradients",
    "skipped",
    "test accuracy",
    "weights finite",
    "first NaN loss",
]


def runs_table(runs, last: int = 20):
    """04's runs side by side (a ``widgets.Table``): what :meth:`TrainingRun.summary` says, whether the
    weights are finite and the first non-finite loss's step."""
    last = check_int("last", last, minimum=1)
    runs = bounded_list("runs", runs, 64, "a list of TrainingRun")
    for r in runs:
        check_instance("runs", r, TrainingRun, "a list of TrainingRun (train_digits(...))")
    rows = [
        [
            r.label,
            f"{r.recent_loss(last):.4f} (last {len(r.losses[-last:])})",
            f"{100 * r.recent_zero_fraction(last):.1f}%",
            len(r.skipped_steps),
            f"{100 * r.test_accuracy:.1f}%",
            "yes" if r.finite else "no",
            "none" if r.first_nonfinite_step is None else f"step {r.first_nonfinite_step}",
        ]
        for r in runs
    ]
    return Table(rows, RUNS_HEADER)


def cpu_threads(num_threads: int | None, device: torch.device):
    """Run the block with ``num_threads`` torch CPU threads (restored after; no-op off the CPU or for None)."""
    return torch_threads(num_threads, device)


def _check_scaler(scaler):
    """None, or an object with GradScaler's methods (ours, torch.amp.GradScaler, a hand-written one)."""
    has_methods = all(callable(getattr(scaler, m, None)) for m in _SCALER_METHODS)
    if scaler is not None and (isinstance(scaler, type) or not has_methods):
        raise ArgumentTypeError(
            f"scaler must be None or a loss scaler object with GradScaler's methods "
            f"({', '.join(_SCALER_METHODS)}), such as DynamicLossScaler(); got {scaler!r:.60}"
        )
    return scaler


def _check_settings(
    dtype, num_steps, batch_size, lr, depth, width, max_grad_norm, seed, label, num_threads, convert
) -> tuple:
    """train_digits' settings other than scaler, data and device, checked (shared with the widget)."""
    return (
        None if dtype is None else parse_dtype(dtype),
        check_int("num_steps", num_steps, minimum=1, maximum=MAX_STEPS),
        check_int("batch_size", batch_size, minimum=1),
        check_float("lr", lr, gt=0.0, le=MAX_LR),
        check_int("depth", depth, minimum=2, maximum=MAX_DEPTH),
        check_int("width", width, minimum=1, maximum=MAX_WIDTH),
        None if max_grad_norm is None else check_float("max_grad_norm", max_grad_norm, gt=0.0),
        check_seed("seed", seed),
        check_optional_str("label", label),
        None
        if num_threads is None
        else check_int("num_threads", num_threads, minimum=1, maximum=MAX_THREADS),
        check_callable("convert", convert, optional=True),
    )


def _check_data(data) -> None:
    """``data`` must fit the network train_digits builds from it: checked here, not deep in torch."""
    check_instance("data", data, Dataset, "an amp_lab.data.Dataset (load_digits()) or None")
    n_features = check_int("data.num_features", data.num_features, minimum=1)
    n_classes = check_int("data.num_classes", data.num_classes, minimum=2)
    for which, split in (("data.train", data.train), ("data.test", data.test)):
        if split.X.dtype != torch.float32 or split.X.shape[1] != n_features:
            raise ValueError(
                f"{which}.X must be float32 of shape (examples, {n_features}) (data.num_features), "
                f"got {split.X.dtype} {tuple(split.X.shape)}"
            )
        if len(split) and not 0 <= int(split.y.min()) <= int(split.y.max()) < n_classes:
            raise ValueError(f"{which}.y must hold labels from 0 to {n_classes - 1} (data.num_classes)")
    if len(data.train) == 0:
        raise ValueError("data.train is empty: train_digits needs at least one training example")


def train_digits(
    scaler=None,
    *,
    dtype=torch.float16,
    num_steps: int = 150,
    batch_size: int = 256,
    lr: float = 1e-2,
    depth: int = 18,
    width: int = 16,
    max_grad_norm: float | None = None,
    seed: int = 0,
    data=None,
    label: str | None = None,
    num_threads: int | None = 1,
    device=None,
    convert=None,
    budget_s: float | None = None,
) -> TrainingRun:
    """Train :func:`amp_lab.models.make_mlp` (``depth`` Linear layers of ``width``) on the digits with Adam,
    with ``scaler`` None or any object with GradScaler's methods, autocast to ``dtype`` (None: FP32);
    ``convert`` (e.g. ``fp8.convert_to_float8``) replaces the built model.  All is checked before building,
    and a run estimated past ``budget_s`` (default 30 s) refused; one past a few seconds shows progress."""
    scaler = _check_scaler(scaler)
    dtype, num_steps, batch_size, lr, depth, width, max_grad_norm, seed, label, num_threads, convert = (
        _check_settings(
            dtype, num_steps, batch_size, lr, depth, width, max_grad_norm, seed, label, num_threads, convert
        )
    )
    dev = get_device(device)
    if data is None:
        data = load_digits(device=dev)
    else:
        _check_data(data)
    batch = min(batch_size, len(data.train))
    widths = [data.num_features] + [width] * (depth - 1) + [data.num_classes]
    numels = [n for a, b in zip(widths, widths[1:], strict=False) for n in (a * b, b)]
    what = f"train_digits(num_steps={num_steps}, depth={depth}, width={width}, batch_size={batch_size})"
    shapes = [(b, a)[: 2 - i] for a, b in zip(widths, widths[1:], strict=False) for i in (0, 1)]
    planned = training_seconds(what, shapes, batch, num_steps, dev, dtype, budget_s, num_threads)
    check_fits(  # weights, gradients, Adam's two moments; a batch's activations (values and gradients)
        16 * sum(numels) + 12 * batch * sum(widths[1:]),
        dev,
        f"training an MLP of depth {depth} and width {width}",
        "choose a smaller depth or width",
    )
    model = make_mlp(
        data.num_features, data.num_classes, hidden=width, depth=depth - 1, seed=seed, device=dev
    )
    if convert is not None:
        model = convert(model)
        if not isinstance(model, nn.Module) or not any(True for _ in model.parameters()):
            raise TypeError(f"convert must return an nn.Module with parameters, got {type(model).__name__}")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    if label is None:
        label = ("FP32" if dtype is None else str(dtype).removeprefix("torch.")) + (
            "" if scaler is None else f" + {type(scaler).__name__}"
        )
    run = TrainingRun(label=label, model=model)
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    calls = []  # whether the optimizer stepped, whatever the scaler: its step hook sees it
    hook = opt.register_step_post_hook(lambda *_: calls.append(1))
    try:
        with torch_threads(num_threads, dev):
            batches = random_batches(data.train.X.to(dev), data.train.y.to(dev), batch_size, seed)
            settings = dict(dtype=dtype, max_grad_norm=max_grad_norm, sync_free=False)
            steps = progress(range(num_steps), desc=label, disable=planned <= PROGRESS_AFTER_S, leave=False)
            for result in train_loop(model, opt, scaler, batches, steps, **settings):
                run.losses.append(result.loss)
                run.scales.append(float(result.scale))
                run.stepped.append(len(calls) > sum(run.stepped))  # a new call: it stepped
                zeros = sum(p.numel() if p.grad is None else int((p.grad == 0).sum()) for p in params)
                run.zero_fraction.append(zeros / n_params)
            with torch.no_grad():
                logits = model(data.test.X.to(dev))
            run.test_accuracy = float((logits.argmax(1) == data.test.y.to(dev)).float().mean())
    finally:
        hook.remove()
    run.finite = all(bool(torch.isfinite(p).all()) for p in params)
    return run


# -- The widget --


class ScalerExplorer:
    """Sliders for a :class:`~amp_lab.scaling.DynamicLossScaler`'s initial scale (log2, 0 to 32), growth interval
    (1 to 100) and backoff factor (0.05 to 0.95), 04: each move re-runs ``num_steps`` (at most
    :data:`MAX_EXPLORER_STEPS`) of :func:`train_digits` and redraws the scale, skipped steps marked.  Parts:
    ``init_scale``, ``growth_interval``, ``backoff_factor``, ``readout``, ``pane``, ``widget``, ``run``."""

    def __init__(
        self,
        *,
        log2_init_scale=16,
        growth_interval=10,
        backoff_factor=0.5,
        num_steps=60,
        train_kwargs=None,
        device=None,
    ):
        import ipywidgets as widgets

        # Checked before anything is built; the values must lie on the sliders (a slider would clamp them).
        self.num_steps = check_int("num_steps", num_steps, minimum=1, maximum=MAX_EXPLORER_STEPS)
        log2_init_scale = check_int("log2_init_scale", log2_init_scale, minimum=0, maximum=32)
        growth_interval = check_int("growth_interval", growth_interval, minimum=1, maximum=100)
        backoff_factor = check_float("backoff_factor", backoff_factor, ge=0.05, le=0.95)
        self.train_kwargs = _check_train_kwargs(train_kwargs)
        self.device = get_device(device)
        self._data = load_digits(device=self.device)
        self.train_kwargs["budget_s"] = EXPLORER_BUDGET_S  # a run past it is refused by the first update
        layout = widgets.Layout(width="420px")
        common = dict(continuous_update=False, style={"description_width": "initial"}, layout=layout)
        sliders = []
        for kind, value, low, high, step, description, css in [
            (widgets.IntSlider, log2_init_scale, 0, 32, 1, "initial scale 2^", "init-scale"),
            (widgets.IntSlider, growth_interval, 1, 100, 1, "growth interval", "growth-interval"),
            (widgets.FloatSlider, backoff_factor, 0.05, 0.95, 0.05, "backoff factor", "backoff"),
        ]:
            slider = kind(value=value, min=low, max=high, step=step, description=description, **common)
            slider.add_class(f"amp-scaler-{css}")
            slider.observe(lambda change: self.update(), names="value")
            sliders.append(slider)
        self.init_scale, self.growth_interval, self.backoff_factor = sliders
        self.readout = widgets.HTML()
        self.readout.add_class("amp-scaler-readout")
        self.pane = FigurePane(figsize=(7.0, 3.2), dpi=80)
        self.pane.image.add_class("amp-scaler-plot")
        ax = self.ax = self.pane.figure.add_subplot(1, 1, 1)
        (self._line,) = ax.step([], [], where="post", color="C0", lw=1.5, label="scale used")
        (self._skips,) = ax.plot([], [], "x", color="C3", ms=7, mew=2, label="skipped step")
        ax.set(xlim=(-0.5, self.num_steps - 0.5), xlabel="step", ylabel="log2(scale)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
        self._title = ax.set_title("", fontsize=10)
        self.pane.figure.subplots_adjust(left=0.1, right=0.97, bottom=0.16, top=0.9)
        self.widget = widgets.VBox([*sliders, self.readout, self.pane.image])
        self.run: TrainingRun | None = None
        self.update()

    def update(self) -> TrainingRun:
        """Re-run the short training with the controls' values; refresh readout and figure."""
        scaler = DynamicLossScaler(
            init_scale=2.0 ** int(self.init_scale.value),
            growth_interval=int(self.growth_interval.value),
            backoff_factor=float(self.backoff_factor.value),
        )
        run = self.run = train_digits(
            scaler, num_steps=self.num_steps, data=self._data, device=self.device, **self.train_kwargs
        )
        log2_scales = [math.log2(s) for s in run.scales]
        self._line.set_data(range(len(log2_scales)), log2_scales)
        skipped = run.skipped_steps
        self._skips.set_data(skipped, [log2_scales[i] for i in skipped])
        self.ax.set_ylim(min(log2_scales) - 1.5, max(log2_scales) + 1.5)
        final = scaler.get_scale()
        self._title.set_text(
            f"{len(skipped)} of {len(log2_scales)} steps skipped; final scale 2^{math.log2(final):g}"
        )
        self.readout.value = _readout_html(run, final)
        self.pane.refresh()
        return run


_TRAIN_DEFAULTS = {  # what the widget's train_kwargs may set (it passes the rest itself)
    name: p.default
    for name, p in inspect.signature(train_digits).parameters.items()
    if name not in ("scaler", "num_steps", "data", "device", "budget_s")
}


def _check_train_kwargs(train_kwargs) -> dict:
    """The widget's other train_digits settings: a dict of train_digits' own keywords, checked now."""
    if train_kwargs is None:
        return {}
    check_instance("train_kwargs", train_kwargs, dict, "a dict of train_digits settings")
    for key in train_kwargs:
        if key not in _TRAIN_DEFAULTS:
            raise ValueError(f"train_kwargs[{key!r}]: the widget passes on only {', '.join(_TRAIN_DEFAULTS)}")
    _check_settings(**{**_TRAIN_DEFAULTS, **train_kwargs, "num_steps": 1})
    return dict(train_kwargs)


def _readout_html(run: TrainingRun, final_scale: float) -> str:
    rows = [
        ("steps skipped", f"{len(run.skipped_steps)} of {len(run.stepped)}"),
        ("final scale", f"2^{math.log2(final_scale):g} = {final_scale:g}"),
        ("mean loss, last 10 steps", f"{run.recent_loss(10):.4f}"),
        ("zero gradients, last step", f"{100 * run.zero_fraction[-1]:.1f}%"),
    ]
    return table_html(rows)


scaler_explorer = ScalerExplorer  # the name notebook 04 calls
