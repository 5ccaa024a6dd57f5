"""The bit explorer of notebook 01: one value, typed or slid, shown bit by bit in every format."""

from __future__ import annotations

import html
import math

import ipywidgets as widgets

from .formats import Decomposition, decompose, format_list, get_format, real_scalar

COLOURS = {"sign": "#d62728", "exponent": "#1f77b4", "mantissa": "#2ca02c"}


def _number(v: float) -> str:
    """The shortest text that reads back as exactly ``v`` (``inf``, ``-inf``, ``nan`` as such)."""
    return repr(v) if math.isfinite(v) else str(v)


def readout_html(d: Decomposition) -> str:
    """One format's readout: colour-coded bits, then value, relative error, ulp and class, in elements of class
    ``amp-value``, ``amp-error``, ``amp-ulp`` and ``amp-kind`` (browser tests read them)."""
    f = get_format(d.fmt)
    cell = "padding:1px 8px;font-family:monospace;white-space:nowrap"
    bits = " ".join(
        f"<span class='amp-bits-{part}' style='color:{COLOURS[part]};font-weight:bold'>{getattr(d, part + '_bits')}</span>"
        for part in COLOURS
    )
    error = "0" if d.error == 0 else f"{d.error:.3e}" if math.isfinite(d.error) else str(d.error)
    fields = (("amp-value", "value", _number(d.value)), ("amp-error", "rel. error", error))
    fields += (("amp-ulp", "ulp", _number(d.ulp)), ("amp-kind", "class", d.kind))
    return (
        f"<div class='amp-readout' data-format='{f.name}' style='font-family:monospace'>"
        f"<b style='display:inline-block;width:6.5em'>{html.escape(f.label)}</b>"
        f"<span style='display:inline-block;min-width:21em'>{bits}</span>"
        + "".join(
            f"<span style='{cell}'>{label} <span class='{cls}'>{html.escape(text)}</span></span>"
            for cls, label, text in fields
        )
        + "</div>"
    )


class BitExplorer:
    """One value shown in every format (build it with :func:`bit_explorer`): ``value_input`` (typed text),
    ``slider`` (the magnitude; the typed sign is kept), ``readouts`` (format -> ``HTML``), ``status``,
    ``decompositions`` (the latest per format) and ``widget``."""

    def __init__(self, value: float, fmts: tuple[str, ...]):
        self.fmts = fmts
        self._syncing = False
        self.value_input = widgets.Text(
            value=repr(value),
            description="value",
            continuous_update=False,
            layout=widgets.Layout(width="22em"),
        ).add_class("amp-bit-explorer-value")
        self.slider = widgets.FloatLogSlider(
            value=1.0,
            base=10,
            min=-45,
            max=39,
            step=0.01,
            description="|value|",
            readout_format=".3g",
            continuous_update=True,
            layout=widgets.Layout(width="36em"),
        ).add_class("amp-bit-explorer-slider")
        self.status = widgets.HTML().add_class("amp-bit-explorer-status")
        self.readouts = {
            name: widgets.HTML().add_class(f"amp-readout-{name}").add_class("amp-readout") for name in fmts
        }
        self.decompositions: dict[str, Decomposition] = {}
        legend = widgets.HTML(
            "<span style='font-family:monospace'>bits: "
            + " ".join(f"<span style='color:{c}'>{part}</span>" for part, c in COLOURS.items())
            + "</span>"
        )
        self.value_input.observe(self._on_text, names="value")
        self.slider.observe(self._on_slider, names="value")
        self.widget = widgets.VBox(
            [widgets.HBox([self.value_input, self.status]), self.slider, legend, *self.readouts.values()]
        ).add_class("amp-bit-explorer")
        self._on_text({"new": self.value_input.value})

    def show(self, x: float) -> None:
        """Update the status line and every readout for value ``x``."""
        self.value = x
        self.status.value = f"<span class='amp-status-ok'>showing {html.escape(repr(x))}</span>"
        for name in self.fmts:
            self.decompositions[name] = d = decompose(x, name)
            self.readouts[name].value = readout_html(d)

    def _set(self, widget, value) -> None:
        """Set another widget's value without its callback answering."""
        self._syncing = True
        try:
            widget.value = value
        finally:
            self._syncing = False

    def _on_text(self, change) -> None:
        if self._syncing:
            return
        text = change["new"].strip().lower().replace("_", "").replace(" ", "")
        try:
            x = float(text) if text not in ("", "+", "-") else None
        except ValueError:
            x = None
        if x is None:
            self.status.value = (
                f"<span class='amp-status-error' style='color:{COLOURS['sign']}'>"
                f"not a number: {html.escape(str(change['new']))}</span>"
            )
            return
        self.show(x)
        if math.isfinite(x) and x != 0:
            self._set(self.slider, min(max(abs(x), 10.0**self.slider.min), 10.0**self.slider.max))

    def _on_slider(self, change) -> None:
        if self._syncing:
            return
        # The page snaps the slider to its 0.01-decade grid and echoes the snapped value back: a value within
        # half a step of the one shown is that echo, not a learner's move.
        current = abs(self.value)
        gap = abs(math.log10(change["new"]) - math.log10(current)) if 0 < current < math.inf else math.inf
        if gap <= self.slider.step / 2 + 1e-9:
            return
        sign = -1.0 if self.value_input.value.strip().startswith("-") else 1.0
        x = float(f"{sign * change['new']:.6g}")
        self._set(self.value_input, repr(x))
        self.show(x)


def bit_explorer(value: float = 0.1, fmts=None) -> BitExplorer:
    """Build the bit explorer of notebook 01 starting at ``value`` (a real number, by
    :func:`~amp_lab.formats.decompose`'s rule), in ``fmts`` (default all six); end the cell with ``.widget``."""
    return BitExplorer(real_scalar(value, "value"), tuple(f.name for f in format_list(fmts)))
