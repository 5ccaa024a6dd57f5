"""One small training loop for comparing precisions and loss scalers (notebook 04).

``04_loss_scaling_from_scratch`` trains the same network on the digits data four times —
FP32, FP16 without scaling, FP16 with our :class:`~amp_lab.scaling.DynamicLossScaler`, FP16
with ``torch.amp.GradScaler`` — and compares loss curves, the fraction of gradients that are
exactly zero, and the scale trajectories.  :func:`train_digits` is that loop, written once so
every run differs only in what is being compared.

The default network is the course's plain MLP (:func:`amp_lab.models.make_mlp` ReLU,
PyTorch's default initialisation) made deeper and narrower: 18 Linear layers of width 16.
Each layer shrinks the backward signal (about 0.4x with the default init), and the mean over
a batch of 256 divides the logits' gradient by 256, so the gradients of the lower layers are
around 1e-9 and smaller: below FP16's smallest subnormal (2**-24, about 6e-8).  In FP16
they become exactly zero; FP32 keeps them, and Adam, which divides by the gradient's running
RMS, turns them into real steps.

:func:`scaler_explorer` is the notebook's widget: sliders for the initial scale, the growth
interval and the backoff factor re-run a short training and redraw the scale trajectory.

Every argument is checked before any work starts (``ValueError`` naming it, ``TypeError`` for a
wrong type): step counts are capped (:data:`amp_lab._checks.MAX_STEPS` for :func:`train_digits`,
:data:`MAX_EXPLORER_STEPS` for the widget, which re-runs on every slider move), the network's
memory is checked against the device's with :func:`amp_lab.device.check_fits`, and ``data`` must
match the network: float32 features of ``num_features`` columns, int64 labels below ``num_classes``.
"""

from __future__ import annotations

import html
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
    check_float,
    check_instance,
    check_int,
    check_seed,
)
from .data import load_digits
from .device import check_fits, get_device, torch_threads
from .dtypes import parse_dtype
from .gradients import train_loop
from .models import make_mlp
from .scaling import DynamicLossScaler
from .text import Reading
from .widgets import FigurePane, Table

__all__ = [
    "ScalerExplorer",
    "TrainingRun",
    "cpu_threads",
    "read_static_runs",
    "runs_table",
    "scaler_explorer",
    "train_digits",
]

# The widget re-runs the whole training on every slider move, so it takes fewer steps than
# train_digits allows: five times the largest growth interval its slider offers (100), enough to
# see the scale grow at every setting, and under a minute on a slow CPU.
MAX_EXPLORER_STEPS = 500
# Adam's learning rate: its steps are about lr in size (lr / (1 - beta1**t) at most 10 lr), so far
# beyond 1 the weights only turn inf; far enough beyond, torch's Adam cannot even convert it to float32.
MAX_LR = 1e6
# The network's shape: depth Linear layers (models.make_mlp's depth + 1), each at most MAX_WIDTH wide.
MAX_DEPTH = 64
MAX_WIDTH = 4096
# The settings ScalerExplorer passes to train_digits itself; train_kwargs may hold the others.
_EXPLORER_OWN = ("scaler", "num_steps", "data", "device")


@dataclass
class TrainingRun:
    """What :func:`train_digits` measured, one entry per step.

    ``losses`` are the unscaled training losses; ``zero_fraction`` is the fraction of all
    parameter-gradient elements that were exactly zero (after unscaling); ``scales`` the loss
    scale used at each step (1.0 without a scaler); ``stepped`` whether the optimizer stepped.
    ``test_accuracy`` is measured in FP32 at the end; ``finite`` says whether every parameter
    is still finite.  ``model`` is the trained network.
    """

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
        """Indices of the steps whose optimizer step was skipped."""
        return [i for i, s in enumerate(self.stepped) if not s]

    def recent_loss(self, last: int = 20) -> float:
        """Mean training loss over the ``last`` steps (NaN if there are none or one is NaN)."""
        last = check_int("last", last, minimum=1)
        tail = self.losses[-last:]
        return sum(tail) / len(tail) if tail else math.nan

    def recent_zero_fraction(self, last: int = 20) -> float:
        """Mean fraction of exactly-zero gradient elements over the ``last`` steps."""
        last = check_int("last", last, minimum=1)
        tail = self.zero_fraction[-last:]
        return sum(tail) / len(tail) if tail else math.nan

    @property
    def first_nonfinite_step(self) -> int | None:
        """Index of the first step whose loss is inf or NaN, or None if every loss is finite."""
        return next((i for i, value in enumerate(self.losses) if not math.isfinite(value)), None)

    def summary(self, last: int = 20) -> str:
        """One line: mean loss over the ``last`` steps, zero-gradient fraction, skips, accuracy.

        Its digits depend on the CPU's kernels (summation order), so notebooks print it in cells
        marked volatile and state what it shows as claims (``amp_lab.claims``).
        """
        last = check_int("last", last, minimum=1)
        tail = self.losses[-last:]
        return (
            f"{self.label:<22} loss (last {len(tail)} steps) {self.recent_loss(last):7.4f}   "
            f"zero gradients {100 * self.recent_zero_fraction(last):5.1f}%   skipped {len(self.skipped_steps):3d}   "
            f"test accuracy {100 * self.test_accuracy:5.1f}%"
        )


RUNS_HEADER = (
    "run",
    "loss (last steps)",
    "zero gradients",
    "skipped",
    "test accuracy",
    "weights finite",
    "first NaN loss",
)


def _power_name(scale: float) -> str:
    return f"2^{math.log2(scale):g}"


def _joined(scales) -> str:
    return " and ".join(_power_name(S) for S in scales)


def read_static_runs(runs: dict) -> Reading:
    """04's reveal after the static scales' runs (``{scale: TrainingRun}``): which kept the weights finite
    (``facts["answer"]``, worded as the prediction's options) and when each of the others was lost."""
    if not isinstance(runs, dict) or not 1 <= len(runs) <= 64:
        raise ArgumentTypeError(
            f"runs must be a dict of 1 to 64 {{scale: TrainingRun}}, got {type(runs).__name__}"
        )
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
    facts = {"answer": answer, "survivors": _joined(survivors) or "none", "lost_steps": dict(lost)}
    facts.update({key: _joined(scales) for key, scales in groups.items()})
    outcome = "training.static_some_lost" if lost else "training.static_none_lost"
    return Reading(outcome, reasons, facts)


def runs_table(runs, last: int = 20):
    """The runs of ``04_loss_scaling_from_scratch`` side by side, as a ``widgets.Table`` that fits the page.

    One row per :class:`TrainingRun`: what :meth:`TrainingRun.summary` says, plus whether the weights
    are finite and the step of the first non-finite loss.  Its digits depend on the CPU's kernels, so
    notebooks show it in cells marked volatile (as ``summary``)."""
    last = check_int("last", last, minimum=1)
    runs = bounded_list("runs", runs, 64, "a list of TrainingRun")
    for r in runs:
        check_instance("runs", r, TrainingRun, "a list of TrainingRun (train_digits(...))")
    rows = []
    for r in runs:
        first = r.first_nonfinite_step
        rows.append(
            [
                r.label,
                f"{r.recent_loss(last):.4f} (last {len(r.losses[-last:])})",
                f"{100 * r.recent_zero_fraction(last):.1f}%",
                len(r.skipped_steps),
                f"{100 * r.test_accuracy:.1f}%",
                "yes" if r.finite else "no",
                "none" if first is None else f"step {first}",
            ]
        )
    return Table(rows, list(RUNS_HEADER))


def cpu_threads(num_threads: int | None, device: torch.device):
    """Run the block with ``num_threads`` torch CPU threads (restored afterwards; no-op off CPU or for None).

    ``num_threads`` is None or an integer from 1 to :data:`amp_lab._checks.MAX_THREADS`, checked
    when this is called, before anything changes."""
    num_threads = _check_num_threads(num_threads)
    return torch_threads(num_threads, None if device is None else get_device(device))


def _check_num_threads(num_threads) -> int | None:
    if num_threads is None:
        return None
    return check_int("num_threads", num_threads, minimum=1, maximum=MAX_THREADS)


_SCALER_METHODS = ("scale", "unscale_", "step", "update", "get_scale")


def _check_scaler(scaler):
    """None, or an object with GradScaler's methods (ours, torch.amp.GradScaler, a hand-written one)."""
    if scaler is None:
        return None
    if isinstance(scaler, type):
        raise ArgumentTypeError(
            f"scaler must be a loss scaler object, got the class {scaler.__name__}: call it, e.g. {scaler.__name__}()"
        )
    missing = [m for m in _SCALER_METHODS if not callable(getattr(scaler, m, None))]
    if missing:
        raise ArgumentTypeError(
            f"scaler must be None or a loss scaler with GradScaler's methods ({', '.join(_SCALER_METHODS)}), "
            f"such as DynamicLossScaler() or torch.amp.GradScaler(device.type); got {type(scaler).__name__} "
            f"without {', '.join(missing)}"
        )
    return scaler


def _check_train_settings(
    *, dtype, num_steps, batch_size, lr, depth, width, max_grad_norm, seed, label, num_threads
) -> tuple:
    """train_digits' settings other than scaler, data and device, checked (shared with the widget);
    returned in the order dtype, num_steps, batch_size, lr, depth, width, max_grad_norm, seed,
    label, num_threads."""
    return (
        None if dtype is None else parse_dtype(dtype),
        check_int("num_steps", num_steps, minimum=1, maximum=MAX_STEPS),
        check_int("batch_size", batch_size, minimum=1),
        check_float("lr", lr, gt=0.0, le=MAX_LR),
        check_int("depth", depth, minimum=2, maximum=MAX_DEPTH),
        check_int("width", width, minimum=1, maximum=MAX_WIDTH),
        None if max_grad_norm is None else check_float("max_grad_norm", max_grad_norm, gt=0.0),
        check_seed("seed", seed),
        None if label is None else check_instance("label", label, str, "a string or None"),
        _check_num_threads(num_threads),
    )


def _check_convert(convert) -> None:
    """train_digits' ``convert``: None or a function from the built model to the model to train."""
    if convert is not None and not callable(convert):
        raise ArgumentTypeError(
            f"convert must be None or a function from the model to the model to train "
            f"(e.g. amp_lab.fp8.convert_to_float8), not {type(convert).__name__}"
        )


def _check_data(data) -> None:
    """``data`` must fit the network train_digits builds from it: checked here, not deep in torch."""
    for attr in ("train", "test", "num_features", "num_classes"):
        if not hasattr(data, attr):
            raise ArgumentTypeError(
                f"data must be an amp_lab.data.Dataset (load_digits()) or None, got {type(data).__name__} "
                f"without .{attr}"
            )
    num_features = check_int("data.num_features", data.num_features, minimum=1)
    num_classes = check_int("data.num_classes", data.num_classes, minimum=2)
    for which in ("train", "test"):
        split = getattr(data, which)
        X, y = getattr(split, "X", None), getattr(split, "y", None)
        check_instance(f"data.{which}.X", X, torch.Tensor, "a tensor")
        check_instance(f"data.{which}.y", y, torch.Tensor, "a tensor")
        if X.dtype != torch.float32:
            raise ArgumentTypeError(
                f"data.{which}.X must be float32 (the network's parameters are float32; autocast chooses "
                f"the low precision), got {X.dtype}: convert it with .float()"
            )
        if y.dtype != torch.int64:
            raise ArgumentTypeError(
                f"data.{which}.y must hold int64 class labels (what cross_entropy takes), got {y.dtype}: "
                "convert it with .long()"
            )
        if X.dim() != 2 or X.shape[1] != num_features:
            raise ValueError(
                f"data.{which}.X must have shape (examples, {num_features}) (data.num_features={num_features}), "
                f"got {tuple(X.shape)}"
            )
        if y.shape != (X.shape[0],):
            raise ValueError(
                f"data.{which}.y must have shape ({X.shape[0]},): one label per row of data.{which}.X, "
                f"got {tuple(y.shape)}"
            )
        if y.numel() > 0:
            low, high = int(y.min()), int(y.max())
            if low < 0 or high >= num_classes:
                raise ValueError(
                    f"data.{which}.y must hold labels from 0 to {num_classes - 1} (data.num_classes={num_classes}), "
                    f"got labels from {low} to {high}"
                )
    if len(data.train.y) == 0:
        raise ValueError("data.train is empty: train_digits needs at least one training example")


def _training_bytes(num_features: int, num_classes: int, depth: int, width: int, batch: int) -> int:
    """About what one run of train_digits allocates: the MLP's weights, their gradients and Adam's two
    moments (4 float32 copies), and the activations of a batch (float32 and FP16, values and gradients)."""
    widths = [num_features] + [width] * (depth - 1) + [num_classes]
    params = sum(a * b + b for a, b in zip(widths[:-1], widths[1:], strict=True))
    activations = batch * sum(widths[1:])
    return 16 * params + 12 * activations


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
) -> TrainingRun:
    """Train :func:`amp_lab.models.make_mlp` (``depth`` Linear layers: ``depth - 1`` hidden) on the digits with Adam; return a :class:`TrainingRun`.

    Parameters
    ----------
    scaler
        ``None`` (plain ``loss.backward(); opt.step()``), or any object with GradScaler's
        methods: :class:`~amp_lab.scaling.StaticLossScaler`,
        :class:`~amp_lab.scaling.DynamicLossScaler` or ``torch.amp.GradScaler(device.type)``.
    dtype
        The autocast dtype of the forward pass (``torch.float16``, ``torch.bfloat16``, or
        "fp16"/"bf16"), or ``None`` for plain FP32.  Parameters and optimizer stay FP32.
    num_steps, batch_size, lr, depth, width, seed
        Training length, mini-batch size, Adam's learning rate, the MLP's shape, and the seed
        of both the initial weights and the sequence of mini-batches (every run with the same
        seed sees the same weights and the same batches).
    max_grad_norm
        If given, ``clip_grad_norm_`` after ``unscale_`` (the modern loop's order).
    data
        A :class:`amp_lab.data.Dataset`; default ``load_digits(device=device)``.
    num_threads
        torch CPU threads during the run (see :func:`cpu_threads`); ``None`` leaves them alone.
    convert
        ``None``, or a function given the freshly built (seeded) model that returns the model to train,
        e.g. :func:`amp_lab.fp8.convert_to_float8` to run its linear layers' matmuls in FP8.  It is applied
        before the optimizer sees the parameters; it must return an ``nn.Module`` with parameters.

    Every argument is checked before anything is built: ``num_steps`` at most
    :data:`amp_lab._checks.MAX_STEPS`, ``lr`` at most :data:`MAX_LR`, ``depth`` at most 64 and
    ``width`` at most 4096, the network's memory against the device's
    (:func:`amp_lab.device.check_fits`), and ``data`` against the network (float32 ``X`` with
    ``num_features`` columns, int64 ``y`` below ``num_classes``).
    """
    scaler = _check_scaler(scaler)
    _check_convert(convert)
    dtype, num_steps, batch_size, lr, depth, width, max_grad_norm, seed, label, num_threads = (
        _check_train_settings(
            dtype=dtype, num_steps=num_steps, batch_size=batch_size, lr=lr, depth=depth, width=width,
            max_grad_norm=max_grad_norm, seed=seed, label=label, num_threads=num_threads,
        )
    )  # fmt: skip
    dev = get_device(device)
    if data is None:
        data = load_digits(device=dev)
    else:
        _check_data(data)
    check_fits(
        _training_bytes(
            data.num_features, data.num_classes, depth, width, min(batch_size, len(data.train.y))
        ),
        dev,
        f"training an MLP of depth {depth} and width {width}",
        "choose a smaller depth or width",
    )
    # depth counts Linear layers here (08 relies on it): depth - 1 hidden layers of width units
    model = make_mlp(
        data.num_features, data.num_classes, hidden=width, depth=depth - 1, seed=seed, device=dev
    )
    if convert is not None:
        model = convert(model)
        if not isinstance(model, nn.Module) or not any(True for _ in model.parameters()):
            raise TypeError(
                f"convert must return the nn.Module to train, with parameters; it returned {type(model).__name__}"
            )
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    if label is None:
        label = ("FP32" if dtype is None else str(dtype).removeprefix("torch.")) + (
            "" if scaler is None else f" + {type(scaler).__name__}"
        )
    run = TrainingRun(label=label, model=model)
    with cpu_threads(num_threads, dev):
        X_train, y_train = data.train.X.to(dev), data.train.y.to(dev)
        run.losses = train_loop(
            model, opt, X_train, y_train, gen, num_steps=num_steps, batch_size=batch_size, dtype=dtype,
            scaler=scaler, max_grad_norm=max_grad_norm, log=run,
        )  # fmt: skip
        with torch.no_grad():
            logits = model(data.test.X.to(dev))
        run.test_accuracy = float((logits.argmax(1) == data.test.y.to(dev)).float().mean())
    run.finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    return run


# ------------------------------------------------------------------------------------------
# The widget
# ------------------------------------------------------------------------------------------


class ScalerExplorer:
    """Widget of :func:`scaler_explorer`.

    Controls: ``init_scale`` (log2 of the initial scale), ``growth_interval``,
    ``backoff_factor``.  Readout: ``readout`` (HTML).  Figure: ``pane`` (a
    :class:`~amp_lab.widgets.FigurePane`).  Layout: ``widget``.  ``run`` is the latest
    :class:`TrainingRun`.  CSS classes: ``amp-scaler-init-scale``,
    ``amp-scaler-growth-interval``, ``amp-scaler-backoff``, ``amp-scaler-readout``,
    ``amp-scaler-plot``.  The arguments are bounded as :func:`scaler_explorer` says (the sliders' ranges).
    """

    def __init__(
        self,
        *,
        log2_init_scale: int = 16,
        growth_interval: int = 10,
        backoff_factor: float = 0.5,
        num_steps: int = 60,
        train_kwargs: dict | None = None,
        device=None,
    ):
        import ipywidgets as widgets

        # Everything is checked before the widget is built; the values must lie on the sliders
        # (a slider would silently clamp one outside its range).
        self.num_steps = check_int("num_steps", num_steps, minimum=1, maximum=MAX_EXPLORER_STEPS)
        log2_init_scale = check_int("log2_init_scale", log2_init_scale, minimum=0, maximum=32)
        growth_interval = check_int("growth_interval", growth_interval, minimum=1, maximum=100)
        backoff_factor = check_float("backoff_factor", backoff_factor, ge=0.05, le=0.95)
        self.train_kwargs = _check_train_kwargs(train_kwargs)
        self.device = get_device(device)
        self._data = load_digits(device=self.device)
        style = {"description_width": "initial"}
        layout = widgets.Layout(width="420px")
        self.init_scale = widgets.IntSlider(
            value=log2_init_scale,
            min=0,
            max=32,
            description="initial scale 2^",
            continuous_update=False,
            style=style,
            layout=layout,
        )
        self.growth_interval = widgets.IntSlider(
            value=growth_interval,
            min=1,
            max=100,
            description="growth interval",
            continuous_update=False,
            style=style,
            layout=layout,
        )
        self.backoff_factor = widgets.FloatSlider(
            value=backoff_factor,
            min=0.05,
            max=0.95,
            step=0.05,
            description="backoff factor",
            continuous_update=False,
            style=style,
            layout=layout,
        )
        self.init_scale.add_class("amp-scaler-init-scale")
        self.growth_interval.add_class("amp-scaler-growth-interval")
        self.backoff_factor.add_class("amp-scaler-backoff")
        self.readout = widgets.HTML()
        self.readout.add_class("amp-scaler-readout")
        self.pane = FigurePane(figsize=(7.0, 3.2), dpi=80)
        self.pane.image.add_class("amp-scaler-plot")
        self._build_figure()
        self.widget = widgets.VBox(
            [self.init_scale, self.growth_interval, self.backoff_factor, self.readout, self.pane.image]
        )
        for control in (self.init_scale, self.growth_interval, self.backoff_factor):
            control.observe(self._on_change, names="value")
        self.run: TrainingRun | None = None
        self.update()

    def _build_figure(self) -> None:
        fig = self.pane.figure
        ax = fig.add_subplot(1, 1, 1)
        self.ax = ax
        (self._line,) = ax.step([], [], where="post", color="C0", lw=1.5, label="scale used")
        (self._skips,) = ax.plot([], [], "x", color="C3", ms=7, mew=2, label="skipped step")
        ax.set_xlim(-0.5, self.num_steps - 0.5)
        ax.set_xlabel("step")
        ax.set_ylabel("log2(scale)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
        self._title = ax.set_title("", fontsize=10)
        fig.subplots_adjust(left=0.1, right=0.97, bottom=0.16, top=0.9)

    def _on_change(self, change) -> None:
        self.update()

    def update(self) -> TrainingRun:
        """Re-run the short training with the controls' values; refresh readout and figure."""
        scaler = DynamicLossScaler(
            init_scale=2.0 ** int(self.init_scale.value),
            growth_interval=int(self.growth_interval.value),
            backoff_factor=float(self.backoff_factor.value),
        )
        run = train_digits(
            scaler, num_steps=self.num_steps, data=self._data, device=self.device, **self.train_kwargs
        )
        self.run = run
        steps = list(range(len(run.scales)))
        log2_scales = [math.log2(s) for s in run.scales]
        self._line.set_data(steps, log2_scales)
        skipped = run.skipped_steps
        self._skips.set_data(skipped, [log2_scales[i] for i in skipped])
        lo, hi = min(log2_scales), max(log2_scales)
        self.ax.set_ylim(lo - 1.5, hi + 1.5)
        self._title.set_text(
            f"{len(skipped)} of {len(steps)} steps skipped; final scale 2^{math.log2(scaler.get_scale()):g}"
        )
        self.readout.value = _readout_html(run, scaler.get_scale())
        self.pane.refresh()
        return run


def _check_train_kwargs(train_kwargs) -> dict:
    """The widget's extra train_digits settings: a dict of train_digits' own keywords, checked now."""
    if train_kwargs is None:
        return {}
    if not isinstance(train_kwargs, dict):
        raise ArgumentTypeError(
            f"train_kwargs must be a dict of train_digits settings or None, got {type(train_kwargs).__name__}"
        )
    defaults = {
        name: param.default
        for name, param in inspect.signature(train_digits).parameters.items()
        if name not in _EXPLORER_OWN
    }
    for key in train_kwargs:
        if key in _EXPLORER_OWN:
            raise ValueError(
                f"train_kwargs[{key!r}] is set by the widget itself; "
                + ("pass num_steps= to scaler_explorer" if key == "num_steps" else "leave it out")
            )
        if key not in defaults:
            raise ValueError(
                f"train_kwargs has the unknown key {key!r}; train_digits takes: {', '.join(defaults)}"
            )
    settings = {**defaults, **train_kwargs, "num_steps": 1}  # num_steps: checked by the widget
    _check_convert(settings.pop("convert"))
    _check_train_settings(**settings)
    return dict(train_kwargs)


def _readout_html(run: TrainingRun, final_scale: float) -> str:
    tail = run.losses[-10:]
    rows = [
        ("steps skipped", f"{len(run.skipped_steps)} of {len(run.stepped)}"),
        ("final scale", f"2^{math.log2(final_scale):g} = {final_scale:g}"),
        ("mean loss, last 10 steps", f"{sum(tail) / len(tail):.4f}"),
        ("zero gradients, last step", f"{100 * run.zero_fraction[-1]:.1f}%"),
    ]
    cell = "padding:1px 8px;font-family:monospace"
    body = "".join(
        f"<tr><td style='{cell}'>{html.escape(k)}</td><td style='{cell}'>{html.escape(v)}</td></tr>"
        for k, v in rows
    )
    return f"<table>{body}</table>"


def scaler_explorer(
    *,
    log2_init_scale: int = 16,
    growth_interval: int = 10,
    backoff_factor: float = 0.5,
    num_steps: int = 60,
    train_kwargs: dict | None = None,
    device=None,
) -> ScalerExplorer:
    """Sliders for a :class:`~amp_lab.scaling.DynamicLossScaler`'s initial scale (as a power of
    two), growth interval and backoff factor.  Each change re-runs ``num_steps`` of
    :func:`train_digits` in FP16 and redraws the scale trajectory with the skipped steps
    marked; the readout gives the skips, the final scale, the loss and the zero-gradient
    fraction.  The notebook cell ends with ``explorer.widget``.  (Notebook 04.)

    The values must lie on the sliders (``log2_init_scale`` 0 to 32, ``growth_interval`` 1 to 100,
    ``backoff_factor`` 0.05 to 0.95); ``num_steps`` is at most :data:`MAX_EXPLORER_STEPS`, since
    every slider move re-runs the training; ``train_kwargs`` holds other :func:`train_digits` settings.
    """
    return ScalerExplorer(
        log2_init_scale=log2_init_scale,
        growth_interval=growth_interval,
        backoff_factor=backoff_factor,
        num_steps=num_steps,
        train_kwargs=train_kwargs,
        device=device,
    )
