"""One small training loop for comparing precisions and loss scalers (notebook 04).

``04_loss_scaling_from_scratch`` trains the same network on the digits data four times —
FP32, FP16 without scaling, FP16 with our :class:`~amp_lab.scaling.DynamicLossScaler`, FP16
with ``torch.amp.GradScaler`` — and compares loss curves, the fraction of gradients that are
exactly zero, and the scale trajectories.  :func:`train_digits` is that loop, written once so
every run differs only in what is being compared.

The default network is the deep plain MLP of :func:`amp_lab.gradients.make_mlp` (ReLU,
PyTorch's default initialisation) made deeper and narrower: 18 Linear layers of width 16.
Each layer shrinks the backward signal (about 0.4x with the default init), and the mean over
a batch of 256 divides the logits' gradient by 256, so the gradients of the lower layers are
around 1e-9 and smaller: below FP16's smallest subnormal (2**-24, about 6e-8).  In FP16
they become exactly zero; FP32 keeps them, and Adam, which divides by the gradient's running
RMS, turns them into real steps.

:func:`scaler_explorer` is the notebook's widget: sliders for the initial scale, the growth
interval and the backoff factor re-run a short training and redraw the scale trajectory.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ._checks import check_float, check_int
from .device import get_device, parse_dtype, torch_threads

__all__ = [
    "ScalerExplorer",
    "TrainingRun",
    "cpu_threads",
    "gradient_zero_fraction",
    "scaler_explorer",
    "train_digits",
]


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
        tail = self.losses[-last:]
        return (
            f"{self.label:<22} loss (last {len(tail)} steps) {self.recent_loss(last):7.4f}   "
            f"zero gradients {100 * self.recent_zero_fraction(last):5.1f}%   skipped {len(self.skipped_steps):3d}   "
            f"test accuracy {100 * self.test_accuracy:5.1f}%"
        )


def gradient_zero_fraction(parameters) -> float:
    """Fraction of the elements of all ``.grad`` tensors that are exactly zero (None grads count as zero)."""
    zeros, total = 0, 0
    for p in parameters:
        total += p.numel()
        zeros += p.numel() if p.grad is None else int((p.grad == 0).sum())
    return zeros / total if total else 0.0


def cpu_threads(num_threads: int | None, device: torch.device):
    """Run the block with ``num_threads`` torch CPU threads (restored afterwards; no-op off CPU or for None)."""
    return torch_threads(num_threads, device)


def _scale_of(scaler) -> float:
    return 1.0 if scaler is None else float(scaler.get_scale())


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
) -> TrainingRun:
    """Train :func:`amp_lab.gradients.make_mlp` on the digits with Adam; return a :class:`TrainingRun`.

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
    """
    from .data import load_digits
    from .gradients import make_mlp

    num_steps = check_int("num_steps", num_steps, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    lr = check_float("lr", lr, gt=0.0)
    seed = check_int("seed", seed, minimum=0)
    if num_threads is not None:
        num_threads = check_int("num_threads", num_threads, minimum=1)
    if max_grad_norm is not None:
        max_grad_norm = check_float("max_grad_norm", max_grad_norm, gt=0.0)
    if dtype is not None:
        dtype = parse_dtype(dtype)
    dev = get_device(device)
    if data is None:
        data = load_digits(device=dev)
    model = make_mlp(
        num_features=data.num_features,
        num_classes=data.num_classes,
        depth=depth,
        width=width,
        seed=seed,
        device=dev,
    )
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    params = list(model.parameters())
    X_train, y_train = data.train.X.to(dev), data.train.y.to(dev)
    gen = torch.Generator().manual_seed(seed)
    if label is None:
        label = ("FP32" if dtype is None else str(dtype).removeprefix("torch.")) + (
            "" if scaler is None else f" + {type(scaler).__name__}"
        )
    run = TrainingRun(label=label, model=model)
    with cpu_threads(num_threads, dev):
        for _ in range(num_steps):
            idx = torch.randint(0, len(y_train), (min(batch_size, len(y_train)),), generator=gen).to(dev)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                logits = model(X_train[idx])
            loss = nn.functional.cross_entropy(logits.float(), y_train[idx])

            if scaler is None:
                loss.backward()
                run.scales.append(1.0)
                if max_grad_norm is not None:
                    nn.utils.clip_grad_norm_(params, max_grad_norm)
                run.zero_fraction.append(gradient_zero_fraction(params))
                opt.step()  # no scaler, no protection: inf/NaN gradients go into the weights
                run.stepped.append(True)
            else:
                scaler.scale(loss).backward()
                run.scales.append(_scale_of(scaler))
                scaler.unscale_(opt)
                if max_grad_norm is not None:
                    nn.utils.clip_grad_norm_(params, max_grad_norm)
                run.zero_fraction.append(gradient_zero_fraction(params))
                finite = all(bool(torch.isfinite(p.grad).all()) for p in params if p.grad is not None)
                result = scaler.step(opt)
                if isinstance(result, bool):  # our scalers say whether they stepped
                    run.stepped.append(result)
                elif isinstance(scaler, torch.amp.GradScaler):  # skips exactly on inf/NaN
                    run.stepped.append(finite)
                else:  # a scaler without a check (a hand-written static one) always steps
                    run.stepped.append(True)
                scaler.update()
            run.losses.append(float(loss.detach()))

        with torch.no_grad():
            logits = model(data.test.X.to(dev))
        run.test_accuracy = float((logits.argmax(1) == data.test.y.to(dev)).float().mean())
    run.finite = all(bool(torch.isfinite(p).all()) for p in params)
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
    ``amp-scaler-plot``.
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

        from .data import load_digits
        from .widgets import FigurePane

        self.num_steps = check_int("num_steps", num_steps, minimum=1)
        self.train_kwargs = dict(train_kwargs or {})
        self.device = get_device(device)
        self._data = load_digits(device=self.device)
        style = {"description_width": "initial"}
        layout = widgets.Layout(width="420px")
        self.init_scale = widgets.IntSlider(
            value=check_int("log2_init_scale", log2_init_scale, minimum=0, maximum=32),
            min=0,
            max=32,
            description="initial scale 2^",
            continuous_update=False,
            style=style,
            layout=layout,
        )
        self.growth_interval = widgets.IntSlider(
            value=check_int("growth_interval", growth_interval, minimum=1, maximum=100),
            min=1,
            max=100,
            description="growth interval",
            continuous_update=False,
            style=style,
            layout=layout,
        )
        self.backoff_factor = widgets.FloatSlider(
            value=check_float("backoff_factor", backoff_factor, gt=0.0, lt=1.0),
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
        from .scaling import DynamicLossScaler

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
    """
    return ScalerExplorer(
        log2_init_scale=log2_init_scale,
        growth_interval=growth_interval,
        backoff_factor=backoff_factor,
        num_steps=num_steps,
        train_kwargs=train_kwargs,
        device=device,
    )
