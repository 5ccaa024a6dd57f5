"""The K slider of notebook 02: how the error of FP32 and FP16 accumulation grows with the inner dimension K,
plotted once and explored by moving a marker (``accumulation_explorer``)."""

from __future__ import annotations

import html
import io

import ipywidgets as widgets
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.ticker import FuncFormatter, NullFormatter
from PIL import Image

from . import formats
from ._checks import check_int
from .tensor_cores import MAX_K, AccumulationCurve, accumulation_curve
from .widgets import FigurePane


class AccumulationExplorer:
    """Slide K and compare accumulators (build it with :func:`accumulation_explorer`): ``slider``, ``readout``
    (an HTML table at the current K), ``pane`` (the error curves and a K marker), ``curve`` and ``widget``."""

    def __init__(self, curve: AccumulationCurve, k: int):
        self.curve = curve
        self.slider = widgets.IntSlider(
            value=k,
            min=1,
            max=curve.k_max,
            description="K",
            continuous_update=False,
            layout=widgets.Layout(width="40em"),
        ).add_class("amp-accumulation-k")
        self.readout = widgets.HTML().add_class("amp-accumulation-readout")
        self.pane = FigurePane(figsize=(7.0, 3.8), dpi=80)
        self._ax = ax = self.pane.figure.add_subplot()
        # ~400 log-spaced K values look like all of them on log axes, and keep a redraw fast
        idx = np.unique(np.geomspace(1, curve.k_max, num=min(curve.k_max, 400)).round().astype(int)) - 1
        for name in curve.accumulators:
            f, colour = formats.FORMATS[name], formats.FORMAT_COLOURS[name]
            errors = curve.errors[name].clamp_min(1e-12).numpy()[idx]
            ax.loglog(idx + 1, errors, color=colour, label=f"{f.label} accumulator")
            ax.axhline(f.eps / 2, color=colour, ls=":", lw=1)  # the unit roundoff
        ax.axhline(1e-12, color="0.8", lw=0.5)
        ax.set_xlabel("inner dimension K (terms in each dot product)")
        ax.set_ylabel("median relative error vs float64")
        ax.set_title(f"{formats.FORMATS[curve.inputs].label} inputs, exact products: error grows with K")
        ax.set_ylim(1e-12, 1.0)
        # plain tick labels: the default mathtext ones are slow to lay out on every redraw
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0e}"))
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_formatter(NullFormatter())
        ax.legend(loc="upper left", fontsize=8)
        self._marker = ax.axvline(k, color="0.3", ls="--", lw=1)
        self.pane.figure.tight_layout()
        self._background = None
        self.slider.observe(self._on_k, names="value")
        self.widget = widgets.VBox([self.slider, self.readout, self.pane.image])
        self.widget.add_class("amp-accumulation-explorer")
        self._on_k({"new": k})

    def readout_html(self, k: int) -> str:
        row = self.curve.at(k)
        lines = [("exact (float64)", f"{row['reference']!r}", "")]
        for name in self.curve.accumulators:
            label = f"{formats.FORMATS[name].label} accumulator"
            lines.append((label, f"{row[f'{name}_value']!r}", f"{row[f'{name}_error']:.2e}"))
        cell = "padding:2px 10px;font-family:monospace;text-align:left"
        body = "".join(
            f"<tr><td style='{cell}'>{html.escape(a)}</td><td style='{cell}' class='amp-acc-value'>{html.escape(b)}</td>"
            f"<td style='{cell}' class='amp-acc-error'>{html.escape(c)}</td></tr>"
            for a, b, c in lines
        )
        head = (
            f"<tr><th style='{cell}'>K = {k}</th><th style='{cell}'>dot product #0</th>"
            f"<th style='{cell}'>median rel. error (batch of {self.curve.reference.shape[0]})</th></tr>"
        )
        return f"<table style='border-collapse:collapse'>{head}{body}</table>"

    def _on_k(self, change) -> None:
        """Move the marker and blit it onto the static part, kept as an Agg background after one full render
        (the PNG is the one a full redraw would give)."""
        k = int(change["new"])
        self.readout.value = self.readout_html(k)
        self._marker.set_xdata([k, k])
        fig = self.pane.figure
        if not isinstance(fig.canvas, FigureCanvasAgg):
            FigureCanvasAgg(fig)
        if self._background is None:
            self._marker.set_visible(False)
            fig.canvas.draw()
            self._background = fig.canvas.copy_from_bbox(fig.bbox)
            self._marker.set_visible(True)
        fig.canvas.restore_region(self._background)
        self._ax.draw_artist(self._marker)
        buf = io.BytesIO()
        Image.fromarray(np.asarray(fig.canvas.buffer_rgba())).save(buf, format="png")
        self.pane.image.value = buf.getvalue()
        self.pane.renders += 1


def accumulation_explorer(
    k: int = 256,
    k_max: int = 4096,
    *,
    inputs="fp16",
    accumulators=("fp32", "fp16"),
    batch: int = 32,
    seed: int = 0,
    device=None,
) -> AccumulationExplorer:
    """The K slider of notebook 02: error of FP32 vs FP16 accumulation against float64.  The curve is computed
    once (:func:`~amp_lab.tensor_cores.accumulation_curve`); the slider only moves a marker."""
    k_max = check_int("k_max", k_max, minimum=1, maximum=MAX_K)
    k = check_int("k", k, minimum=1, maximum=k_max)  # before the curve: a wrong k costs nothing
    curve = accumulation_curve(
        k_max, inputs=inputs, accumulators=accumulators, batch=batch, seed=seed, device=device
    )
    return AccumulationExplorer(curve, k)
