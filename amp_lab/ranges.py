"""The range pictures of ``03_underflow_and_overflow``: :func:`plot_log2_histogram` with the formats' ranges
marked and the scale slider :func:`scale_explorer`; the counting is :mod:`amp_lab.range_counts`'."""

from __future__ import annotations

import html
import math

import ipywidgets as widgets
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import Rectangle

from . import range_counts as rc
from ._checks import ArgumentTypeError, check_axes, check_float, check_instance, check_int
from .device import torch_threads
from .formats import format_list, get_format
from .widgets import FigurePane

DEFAULT_FMTS = ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
MAX_SLIDER_LOG2 = 120  # the scale slider's top at most: 2**120
RULER = (("min_subnormal", "min_normal", "#c6dbef"), ("min_normal", "max", "#6baed6"))  # light, dark


def _view_range(hist: rc.Log2Histogram, fmts, tail: float = 1e-3) -> tuple[float, float]:
    """An x-range showing the data without its thinnest tail (below ``tail`` of the total) and the whole range
    of every narrow format (FP16, FP8); BF16's and TF32's huge ranges run off the axes."""
    lo, hi = float(hist.edges[0]), float(hist.edges[-1])
    if hist.counts.sum() > 0:
        lo = float(hist.edges[int(np.argmax(np.cumsum(hist.counts) / hist.counts.sum() >= tail))])
    for f in fmts:
        if f.exponent_bits < 8:
            lim = rc.log2_limits(f)
            lo, hi = min(lo, lim["zero_below"]), max(hi, lim["overflow_from"])
    return lo - 2, hi + 3


def plot_log2_histogram(
    x,
    fmts=DEFAULT_FMTS,
    *,
    scale: float = 1.0,
    ax=None,
    title: str | None = None,
    xlim: tuple[float, float] | None = None,
    rulers: bool = True,
):
    """Draw :func:`~amp_lab.range_counts.log2_histogram` of ``x * scale`` on ``ax`` (a new pyplot figure if
    None), bars coloured by their fate in ``fmts[0]`` and its zero/overflow zones shaded; with ``rulers``,
    each format gets a ruler at the top (light: subnormal range, dark: normal range).  Returns the axes."""
    fmts = format_list(fmts)
    check_axes("ax", ax)
    check_instance("title", title, (str, type(None)), "a string or None")
    check_instance("rulers", rulers, (bool, np.bool_), "True or False")
    if xlim is not None:
        if not isinstance(xlim, (tuple, list)) or len(xlim) != 2:
            raise ArgumentTypeError(f"xlim must be a pair (lo, hi) of log2 values, got {xlim!r:.80}")
        xlim = (check_float("xlim[0]", xlim[0]), check_float("xlim[1]", xlim[1]))
        if not xlim[1] > xlim[0]:
            raise ValueError(f"xlim must be (lo, hi) with hi > lo, got {xlim}")
    hist = rc.log2_histogram(x, scale=scale)  # everything checked before a figure is made
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(7.5, 3.6), layout="constrained")
    primary = fmts[0]
    lo, hi = xlim if xlim is not None else _view_range(hist, fmts)
    if hist.counts.size:
        cats = np.array(rc.bin_categories(hist.lefts, primary))
        for c in rc.CATEGORIES:
            values = np.where(cats == c, hist.counts, 0)
            label = f"{'zero' if c == 'underflow' else c} in {primary.label}" if values.any() else None
            ax.stairs(values, hist.edges.astype(float), fill=True, color=rc.COLORS[c], lw=0, label=label)
        ax.legend(loc="center left", fontsize=8, frameon=False)
    lim = rc.log2_limits(primary)
    ax.axvspan(min(lo, lim["zero_below"]), lim["zero_below"], color=rc.COLORS["underflow"], alpha=0.08, lw=0)
    ax.axvspan(
        lim["overflow_from"], max(hi, lim["overflow_from"]), color=rc.COLORS["overflow"], alpha=0.08, lw=0
    )
    ax.set_xlim(lo, hi)
    peak = max(int(hist.counts.max()) if hist.counts.size else 1, 1)
    row = min(0.07, 0.4 / len(fmts))
    ax.set_ylim(0, peak * 1.08 / (1 - row * len(fmts) - 0.02) if rulers else peak * 1.1)
    if rulers:
        trans = ax.get_xaxis_transform()  # x in data, y in axes fraction
        for i, f in enumerate(fmts):
            lim, y0, h = rc.log2_limits(f), 0.98 - (i + 1) * row, row * 0.8
            for a, b, colour in RULER:
                box = (lim[a], y0), lim[b] - lim[a], h
                ax.add_patch(Rectangle(*box, facecolor=colour, edgecolor="none", transform=trans))
            x0 = max(lim["min_subnormal"], lo) + 0.4
            ax.text(x0, y0 + h / 2, f.label, transform=trans, va="center", fontsize=7)
    ax.set_xlabel("log2 |value|")
    ax.set_ylabel("count")
    if title:
        ax.set_title(title)
    return ax


def readout_html(report: rc.RangeReport, suggested_log2: int | None = None) -> str:
    """One line per category (``underflow: 12.345% (2018 of 16345)``) under a header naming the format, the
    scale and the suggested one."""
    head = f"{get_format(report.fmt).label}, scale {rc.scale_str(report.scale)} = {report.scale:.10g}"
    if suggested_log2 is not None:
        head += f" · suggested scale: 2^{suggested_log2} (largest with no overflow)"
    lines = [f'<div class="amp-scale-head" style="font-weight:bold">{html.escape(head)}</div>']
    for c in rc.CATEGORIES:
        text = f"{c}: {100 * report.fraction(c):.3f}% ({report.counts[c]} of {report.total})"
        lines.append(
            f'<div class="amp-scale-{c}" style="font-family:monospace;color:{rc.COLORS[c]}">{html.escape(text)}</div>'
        )
    return "".join(lines)


class ScaleExplorer:
    """Widget of :func:`scale_explorer`: ``slider`` (log2 of the scale), ``readout``, ``pane``, ``widget``,
    ``report`` (the current :class:`~amp_lab.range_counts.RangeReport`) and ``suggested_log2``."""

    def __init__(
        self, x, fmt="fp16", *, log2_scale: int = 0, max_log2: int | None = None, title: str | None = None
    ):
        self.fmt = get_format(fmt)
        if max_log2 is not None:
            max_log2 = check_int("max_log2", max_log2, minimum=1, maximum=MAX_SLIDER_LOG2)
        log2_scale = check_int("log2_scale", log2_scale, minimum=0, maximum=max_log2 or MAX_SLIDER_LOG2)
        check_instance("title", title, (str, type(None)), "a string or None")
        # the values selected once: a slider move costs one multiply, one round_to and a few comparisons
        self._sel, self._zeros, self._nonfinite = rc.select_values(rc.flat_float32(x))
        self.suggested_log2 = rc.suggest_log2_scale(self._sel, self.fmt)
        if max_log2 is None:  # up to the scale at which most of the values overflow: real overflow, not a few
            max_log2 = max(log2_scale, self.top_log2())
        self._hist = rc.log2_histogram(self._sel)
        self.report: rc.RangeReport | None = None
        self.slider = widgets.IntSlider(
            value=log2_scale,
            min=0,
            max=max_log2,
            description="log2 scale",
            continuous_update=True,
            style={"description_width": "initial"},
            layout=widgets.Layout(width="460px"),
        ).add_class("amp-scale-slider")
        self.readout = widgets.HTML().add_class("amp-scale-readout")
        self.pane = FigurePane(figsize=(7.0, 3.4), dpi=80)
        self._build_figure(title)
        self.widget = widgets.VBox([self.slider, self.readout, self.pane.image])
        self.slider.observe(lambda change: self.update(change["new"]), names="value")
        self.update(log2_scale)

    def top_log2(self) -> int:
        """The first ``k`` (1 to MAX_SLIDER_LOG2) where most values overflow: their lower median; 24 for none."""
        if self._sel.numel() == 0:
            return 24
        median = float(self._sel.abs().median())  # the lower median: more than half of the values are >= it
        return min(max(rc.largest_safe_log2(median, self.fmt) + 1, 1), MAX_SLIDER_LOG2)

    def _build_figure(self, title):
        """Draw the figure once; the parts that never change are rendered to a background image and hidden, so
        a slider move draws only the bars and the title over it (well under 100 ms on a 2-core CPU)."""
        fig = self.pane.figure
        self.ax = ax = fig.add_subplot(1, 1, 1)
        lim = rc.log2_limits(self.fmt)
        edges, counts = self._hist.edges, self._hist.counts
        lo, hi = _view_range(self._hist, (self.fmt,))
        hi = max(hi + 2, float(edges[-1]) + int(self.slider.max) + 2)
        ax.set_xlim(lo, hi)
        ax.set_ylim(0, max(int(counts.max()) if counts.size else 1, 1) * 1.35)
        static = [
            ax.axvspan(lo, lim["zero_below"], color=rc.COLORS["underflow"], alpha=0.10, lw=0),
            ax.axvspan(lim["zero_below"], lim["min_normal"], color=rc.COLORS["subnormal"], alpha=0.08, lw=0),
            ax.axvspan(lim["overflow_from"], hi, color=rc.COLORS["overflow"], alpha=0.10, lw=0),
        ]
        static += [
            ax.axvline(lim[key], color="0.4", lw=0.8, ls=":")
            for key in ("zero_below", "min_normal", "overflow_from")
        ]
        zones = (
            ("→ 0", lo, lim["zero_below"]),
            ("subnormal", lim["zero_below"], lim["min_normal"]),
            ("normal", lim["min_normal"], lim["overflow_from"]),
            ("inf", lim["overflow_from"], hi),
        )
        style = {"transform": ax.get_xaxis_transform(), "ha": "center", "va": "top", "color": "0.25"}
        static += [ax.text((a + b) / 2, 0.97, text, fontsize=8, **style) for text, a, b in zones]
        # one filled step patch per category (4 artists, not one per bar): a move only changes their data
        zero = np.zeros(len(counts))
        self._stairs = {
            c: ax.stairs(zero, edges.astype(float), fill=True, color=rc.COLORS[c], lw=0)
            for c in rc.CATEGORIES
        }
        if self.suggested_log2 is not None and counts.size:
            k = self.suggested_log2
            ax.stairs(counts, (edges + k).astype(float), color="0.15", lw=1.0, ls="--", zorder=3)  # on top
            note = f"- - -  at the suggested scale 2^{k}"
            static.append(ax.text(0.01, 0.85, note, transform=ax.transAxes, fontsize=8))
        ax.set_xlabel(
            f"log2 |value × scale|   ({self.fmt.label}: zero at or below 2^{lim['zero_below']:g}, "
            f"inf from {rc.overflow_threshold(self.fmt)[0]:g})",
            fontsize=9,
        )
        ax.set_ylabel("count")
        self._fixed_title = title
        self._title = ax.set_title("", fontsize=10)
        fig.subplots_adjust(left=0.13, right=0.97, bottom=0.16, top=0.9)  # no layout engine: it draws twice

        dynamic = [*self._stairs.values(), self._title]
        for artist in dynamic:
            artist.set_visible(False)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        background = np.asarray(canvas.buffer_rgba()).copy()
        for artist in dynamic:
            artist.set_visible(True)
        for artist in [*static, ax.patch, ax.xaxis, ax.yaxis, *ax.spines.values()]:
            artist.set_visible(False)
        fig.figimage(background, xo=0, yo=0, origin="upper", zorder=-10)

    def update(self, log2_scale: int | None = None) -> rc.RangeReport:
        """Show scale ``2**log2_scale`` (default: the slider's); returns the new report, which equals
        ``range_report(x, fmt, 2**log2_scale)``.  To move the widget from code, set ``slider.value``."""
        if log2_scale is None:
            k = int(self.slider.value)
        else:  # any usable loss scale 2**k, checked before anything changes
            k = check_int("log2_scale", log2_scale, minimum=rc.MIN_LOG2_SCALE, maximum=rc.MAX_LOG2_SCALE)
        # one thread: it never waits for a second core that another process holds
        with torch_threads(1, self._sel.device):
            report = rc.report_of(self._sel, self._zeros, self._nonfinite, self.fmt, math.ldexp(1.0, k))
        self.report = report
        self.readout.value = readout_html(report, self.suggested_log2)
        edges, counts = self._hist.edges, self._hist.counts
        if counts.size:
            cats = np.array(rc.bin_categories(edges[:-1] + k, self.fmt))
            for c, patch in self._stairs.items():
                patch.set_data(np.where(cats == c, counts, 0), (edges + k).astype(float))
        self._title.set_text(
            (f"{self._fixed_title}: " if self._fixed_title else "")
            + f"scale 2^{k}: {100 * report.underflow:.3f}% become zero, {100 * report.overflow:.3f}% overflow"
        )
        self.pane.refresh()
        return report


def scale_explorer(
    x, fmt="fp16", *, log2_scale: int = 0, max_log2: int | None = None, title: str | None = None
) -> ScaleExplorer:
    """A log2 loss-scale slider over the values ``x`` (e.g. activation gradients): moving it to ``k`` slides the
    histogram ``k`` binades right and updates the readouts, which are ``range_report(x, fmt, 2**k)``; the
    suggested scale is drawn dashed.  The slider ends at ``max_log2`` (None: where most values overflow,
    :meth:`ScaleExplorer.top_log2`).  End the cell with ``explorer.widget``."""
    return ScaleExplorer(x, fmt, log2_scale=log2_scale, max_log2=max_log2, title=title)
