"""The bit explorer of notebook 01: one value, typed or slid, shown bit by bit in every format.

``bit_explorer(value)`` builds it; tests set ``explorer.value_input.value`` and read
``explorer.readouts[...]`` / ``explorer.decompositions[...]``, so they drive exactly the code a learner's
typing drives.
"""

from __future__ import annotations

import html
import math

import ipywidgets as widgets

from ._checks import ArgumentTypeError
from .formats import Decomposition, decompose, format_list, get_format, real_scalar

__all__ = ["bit_explorer", "BitExplorer", "readout_html", "bits_html"]

SIGN_COLOUR = "#d62728"
EXPONENT_COLOUR = "#1f77b4"
MANTISSA_COLOUR = "#2ca02c"


def _fmt_number(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)  # shortest text that reads back as exactly this value


def _fmt_error(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf"
    return "0" if v == 0 else f"{v:.3e}"


def bits_html(d: Decomposition) -> str:
    """The bit pattern of a :class:`Decomposition` as colour-coded HTML spans."""
    return (
        f"<span class='amp-bits-sign' style='color:{SIGN_COLOUR};font-weight:bold'>{d.sign_bits}</span> "
        f"<span class='amp-bits-exponent' style='color:{EXPONENT_COLOUR};font-weight:bold'>{d.exponent_bits}</span> "
        f"<span class='amp-bits-mantissa' style='color:{MANTISSA_COLOUR};font-weight:bold'>{d.mantissa_bits}</span>"
    )


def readout_html(d: Decomposition) -> str:
    """One format's readout: bits, rounded value, relative error, ulp and class.

    The plain rounded value appears as text in an element with class ``amp-value`` (browser
    tests read it); the other fields have ``amp-error``, ``amp-ulp`` and ``amp-kind``.
    """
    f = get_format(d.fmt)
    cell = "padding:1px 8px;font-family:monospace;white-space:nowrap"

    def field_(cls, label, text):
        return f"<span style='{cell}'>{label} <span class='{cls}'>{html.escape(text)}</span></span>"

    return (
        f"<div class='amp-readout' data-format='{f.name}' style='font-family:monospace'>"
        f"<b style='display:inline-block;width:6.5em'>{html.escape(f.label)}</b>"
        f"<span style='display:inline-block;min-width:21em'>{bits_html(d)}</span>"
        + field_("amp-value", "value", _fmt_number(d.value))
        + field_("amp-error", "rel. error", _fmt_error(d.error))
        + field_("amp-ulp", "ulp", _fmt_number(d.ulp))
        + field_("amp-kind", "class", d.kind)
        + "</div>"
    )


class BitExplorer:
    """One value shown in every format.  Build it with :func:`bit_explorer`.

    Attributes: ``value_input`` (a ``Text`` a learner types into: numbers such as ``0.1``,
    ``1e-8``, ``65520``, ``inf``, ``nan``), ``slider`` (a ``FloatLogSlider`` for the magnitude;
    the typed sign is kept), ``readouts`` (dict: format name -> ``HTML``),
    ``status`` (an ``HTML`` line: the value read, or why the text is not a number),
    ``decompositions`` (the latest :class:`Decomposition` per format) and ``widget`` (the layout).
    """

    def __init__(self, value: float, fmts: tuple[str, ...]):
        self.fmts = fmts
        self._syncing = False
        self.value_input = widgets.Text(
            value=repr(value),
            description="value",
            continuous_update=False,
            layout=widgets.Layout(width="22em"),
        )
        self.value_input.add_class("amp-bit-explorer-value")
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
        )
        self.slider.add_class("amp-bit-explorer-slider")
        self.status = widgets.HTML()
        self.status.add_class("amp-bit-explorer-status")
        self.readouts = {}
        for name in self.fmts:
            w = widgets.HTML()
            w.add_class(f"amp-readout-{name}")
            w.add_class("amp-readout")
            self.readouts[name] = w
        self.decompositions: dict[str, Decomposition] = {}
        legend = widgets.HTML(
            f"<span style='font-family:monospace'>bits: <span style='color:{SIGN_COLOUR}'>sign</span> "
            f"<span style='color:{EXPONENT_COLOUR}'>exponent</span> "
            f"<span style='color:{MANTISSA_COLOUR}'>mantissa</span></span>"
        )
        self.value_input.observe(self._on_text, names="value")
        self.slider.observe(self._on_slider, names="value")
        self.widget = widgets.VBox(
            [widgets.HBox([self.value_input, self.status]), self.slider, legend, *self.readouts.values()]
        )
        self.widget.add_class("amp-bit-explorer")
        self._on_text({"new": self.value_input.value})

    # ---- callbacks: they only set values of existing widgets ----
    @staticmethod
    def parse(text: str) -> float:
        """Read a typed value; raises ValueError for text that is not a number."""
        s = text.strip().lower().replace("_", "").replace(" ", "")
        if s in ("", "+", "-"):
            raise ValueError("empty")
        return float(s)

    def show(self, x: float) -> None:
        """Update every readout for value ``x``."""
        self.value = x
        for name in self.fmts:
            d = decompose(self.value, name)
            self.decompositions[name] = d
            self.readouts[name].value = readout_html(d)

    def _on_text(self, change) -> None:
        if self._syncing:
            return
        try:
            x = self.parse(change["new"])
        except ValueError:
            self.status.value = (
                f"<span class='amp-status-error' style='color:{SIGN_COLOUR}'>"
                f"not a number: {html.escape(str(change['new']))!s}</span>"
            )
            return
        self.status.value = f"<span class='amp-status-ok'>showing {html.escape(repr(x))}</span>"
        self.show(x)
        if math.isfinite(x) and x != 0:
            self._syncing = True
            try:
                self.slider.value = min(max(abs(x), 10.0**self.slider.min), 10.0**self.slider.max)
            finally:
                self._syncing = False

    def _on_slider(self, change) -> None:
        if self._syncing:
            return
        # The page snaps the slider to its 0.01-decade grid and sends the snapped value back: a
        # value within half a step of the one shown is that echo, not a learner's move.
        current = abs(getattr(self, "value", 0.0))
        if (
            math.isfinite(current)
            and current > 0
            and change["new"] > 0
            and abs(math.log10(change["new"]) - math.log10(current)) <= self.slider.step / 2 + 1e-9
        ):
            return
        sign = -1.0 if self.value_input.value.strip().startswith("-") else 1.0
        x = float(f"{sign * change['new']:.6g}")
        self._syncing = True
        try:
            self.value_input.value = repr(x)
        finally:
            self._syncing = False
        self.status.value = f"<span class='amp-status-ok'>showing {html.escape(repr(x))}</span>"
        self.show(x)


def bit_explorer(value: float = 0.1, fmts=None) -> BitExplorer:
    """Build the bit explorer of notebook 01: type or slide a value, see it in every format.

    ``value`` (the start) follows :func:`~amp_lab.formats.decompose`'s rule: a real number, no text, no
    bool; what a learner types into the box afterwards may be any text (shown as "not a number" if it is
    not one).  ``fmts``: the formats to show (default all six).  The cell ends with ``explorer.widget``.
    """
    if isinstance(value, (str, bytes)):
        raise ArgumentTypeError(
            f"value must be a number such as 0.1, got the text {value!r:.80}: write the number without quotes "
            "(the explorer's text box reads typed text)"
        )
    start = real_scalar(value, "value")
    return BitExplorer(start, tuple(f.name for f in format_list(fmts)))
