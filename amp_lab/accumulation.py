"""The K sliders: notebook 02's, how the error of FP32 and FP16 accumulation grows with the inner dimension K,
plotted once and explored by moving a marker (``accumulation_explorer``); notebook 11's, an accumulator of a
few bits promoted to FP32 every N_C terms (``limited_accumulation_explorer``)."""

from __future__ import annotations

import html
import io

import ipywidgets as widgets
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.ticker import FuncFormatter, NullFormatter
from PIL import Image

from . import formats
from ._checks import check_choice, check_int
from .tensor_cores import MAX_K, AccumulationCurve, accumulation_curve, limited_accumulation_curve
from .widgets import FigurePane


def _plain_log_ticks(ax) -> None:
    """Plain tick labels on log axes: the default mathtext ones are slow to lay out on every redraw."""
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0e}"))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_formatter(NullFormatter())


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
        _plain_log_ticks(ax)
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


# ------------------------------------------------------------------------------------------------------------
# Notebook 11: an accumulator of a few bits, promoted to FP32 every N_C terms
# ------------------------------------------------------------------------------------------------------------

LIMITED_KS = tuple(2**p for p in range(7, 15))  # K = 128 .. 16384
PROMOTIONS = (0, 32, 64, 128, 256, 512, 1024)  # 0: never promote


class LimitedAccumulationExplorer:
    """Bits, N_C and K of a limited accumulator (build it with :func:`limited_accumulation_explorer`):
    ``bits``, ``promote`` and ``k`` (the controls), ``readout`` (the errors at this K), ``pane`` (error
    against K, with and without promotion) and ``widget``.  Curves are cached by (bits, N_C)."""

    def __init__(self, mantissa_bits: int, promote_every: int, k: int, size: int):
        self.size = size
        self._curves: dict[tuple[int, int], list[float]] = {}
        style = {"description_width": "9em"}
        self.bits = widgets.IntSlider(
            value=mantissa_bits,
            min=8,
            max=23,
            description="mantissa bits",
            style=style,
            continuous_update=False,
        ).add_class("amp-limited-bits")
        self.promote = widgets.Dropdown(
            options=[("never", 0)] + [(str(n), n) for n in PROMOTIONS[1:]],
            value=promote_every,
            description="promote every",
            style=style,
        ).add_class("amp-limited-promote")
        self.k = widgets.SelectionSlider(
            options=LIMITED_KS, value=k, description="K", style=style, continuous_update=False
        ).add_class("amp-limited-k")
        self.readout = widgets.HTML().add_class("amp-limited-readout")
        self.pane = FigurePane(figsize=(7.0, 3.4), dpi=80)
        ax = self._ax = self.pane.figure.add_subplot()
        (self._plain,) = ax.loglog(
            LIMITED_KS, [1.0] * len(LIMITED_KS), "o-", color="C3", label="never promoted"
        )
        (self._promoted,) = ax.loglog(LIMITED_KS, [1.0] * len(LIMITED_KS), "o-", color="C0", label="promoted")
        (self._fp32,) = ax.loglog(
            LIMITED_KS, [1.0] * len(LIMITED_KS), ":", color="0.4", label="FP32 accumulator"
        )
        self._marker = ax.axvline(k, color="0.3", ls="--", lw=1)
        ax.set_xlabel("K (products added into one dot product)")
        ax.set_ylabel("largest relative error")
        ax.set_ylim(1e-8, 1.0)
        ax.set_title(
            f"a {mantissa_bits}-bit accumulator, FP8 E4M3 inputs in [0, 1)"
        )  # laid out with the rest
        _plain_log_ticks(ax)
        ax.legend(loc="upper left", fontsize=8)
        self.pane.figure.tight_layout()
        for control in (self.bits, self.promote, self.k):
            control.observe(self.update, names="value")
        self.widget = widgets.VBox([self.bits, self.promote, self.k, self.readout, self.pane.image])
        self.widget.add_class("amp-limited-explorer")
        self.update()

    def curve(self, bits: int, promote_every: int) -> list[float]:
        key = (bits, promote_every)
        if key not in self._curves:
            self._curves[key] = limited_accumulation_curve(
                LIMITED_KS, bits, promote_every or None, size=self.size
            )
        return self._curves[key]

    def errors(self) -> dict[str, float]:
        """The three errors at the current K: never promoted, promoted (equal when N_C is "never"), FP32."""
        i = LIMITED_KS.index(self.k.value)
        bits, nc = self.bits.value, self.promote.value
        return {
            "plain": self.curve(bits, 0)[i],
            "promoted": self.curve(bits, nc)[i],
            "fp32": self.curve(23, 0)[i],
        }

    def update(self, change=None) -> None:
        bits, nc, k = self.bits.value, self.promote.value, self.k.value
        e = self.errors()
        cell = "padding:2px 10px;font-family:monospace;text-align:left"
        rows = [
            (f"{bits} bits, never promoted", e["plain"]),
            (
                f"{bits} bits, promoted every {nc}" if nc else f"{bits} bits (choose N_C to promote)",
                e["promoted"],
            ),
            ("FP32 accumulator (23 bits)", e["fp32"]),
        ]
        body = "".join(
            f"<tr><td style='{cell}'>{html.escape(a)}</td><td style='{cell}' class='amp-limited-error'>{v:.3%}</td></tr>"
            for a, v in rows
        )
        head = f"<tr><th style='{cell}'>K = {k}</th><th style='{cell}'>largest relative error</th></tr>"
        self.readout.value = f"<table style='border-collapse:collapse'>{head}{body}</table>"
        floor = 1e-9  # an exact result plots at the axis' floor
        self._plain.set_ydata([max(v, floor) for v in self.curve(bits, 0)])
        self._promoted.set_ydata([max(v, floor) for v in self.curve(bits, nc)])
        self._promoted.set_label(f"promoted every {nc}" if nc else "promoted (choose N_C)")
        self._fp32.set_ydata([max(v, floor) for v in self.curve(23, 0)])
        self._marker.set_xdata([k, k])
        self._ax.set_title(f"a {bits}-bit accumulator, FP8 E4M3 inputs in [0, 1)")
        self._ax.legend(loc="upper left", fontsize=8)
        self.pane.refresh()


def limited_accumulation_explorer(
    mantissa_bits: int = 14, promote_every: int = 128, k: int = 4096, *, size: int = 16
) -> LimitedAccumulationExplorer:
    """Notebook 11's accumulator widget: the largest relative error of ``size x k`` by ``k x size`` products
    of E4M3 values through an accumulator of ``mantissa_bits`` fraction bits (8 to 23), promoted to FP32
    every ``promote_every`` terms (0: never; one of 32 to 1024), at K = 128 to 16384
    (:func:`amp_lab.tensor_cores.limited_accumulation_curve`)."""
    mantissa_bits = check_int("mantissa_bits", mantissa_bits, minimum=8, maximum=23)
    promote_every = check_choice(
        "promote_every", check_int("promote_every", promote_every, minimum=0), PROMOTIONS
    )
    k = check_choice("k", check_int("k", k, minimum=1), LIMITED_KS)
    size = check_int("size", size, minimum=1, maximum=32)
    return LimitedAccumulationExplorer(mantissa_bits, promote_every, k, size)
