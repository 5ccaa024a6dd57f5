"""Thin widget layer shared by the notebooks.

The course's widget rule (CONTRIBUTING.md, "Widgets"): a callback never prints and never
opens a new figure.  It sets the ``value`` of widgets that already exist: an ``HTML``
readout, or a :class:`FigurePane` that re-renders one matplotlib ``Figure`` into an
``ipywidgets.Image``.  That is what makes a slider feel instant, it lets tests drive a
widget by setting ``.value`` and reading the readouts, and it keeps notebook outputs
identical whether a cell is run by JupyterLab, by ``make notebooks`` or by nbval.
"""

from __future__ import annotations

import html
import io
import math

import ipywidgets as widgets
from matplotlib.figure import Figure

from ._checks import (
    MAX_TABLE_COLUMNS,
    MAX_TABLE_ROWS,
    ArgumentTypeError,
    bounded_list,
    check_float,
    check_instance,
    check_int,
)

# A pane's image is at most this many pixels on a side (a 7-inch figure at 80 dpi has 560).
MAX_PIXELS = 4096


class FigurePane:
    """One matplotlib ``Figure``, shown through an ``ipywidgets.Image`` and redrawn in place.

    Build the figure once, keep references to its artists, change their data in a callback
    and call :meth:`refresh`; the image bytes in the page are replaced, nothing is appended.
    """

    def __init__(self, figure: Figure | None = None, *, figsize=(6.4, 3.6), dpi: int = 100):
        dpi = check_int("dpi", dpi, minimum=1, maximum=MAX_PIXELS)
        if figure is not None:
            check_instance("figure", figure, Figure, "a matplotlib Figure or None")
            size = tuple(float(v) for v in figure.get_size_inches())
        else:
            if (
                isinstance(figsize, (str, bytes))
                or not isinstance(figsize, (tuple, list))
                or len(figsize) != 2
            ):
                raise ArgumentTypeError(
                    f"figsize must be a pair (width, height) in inches, got {figsize!r:.80}"
                )
            size = (check_float("figsize[0]", figsize[0], gt=0), check_float("figsize[1]", figsize[1], gt=0))
        if max(size) * dpi > MAX_PIXELS:
            raise ValueError(
                f"a {size[0]:g}x{size[1]:g} inch figure at dpi={dpi} is {math.ceil(max(size) * dpi)} pixels wide or "
                f"high; a pane is at most {MAX_PIXELS} pixels on a side: choose a smaller figsize or dpi"
            )
        self.figure = figure if figure is not None else Figure(figsize=size, dpi=dpi)
        self.dpi = dpi
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.renders = 0

    def refresh(self) -> bytes:
        """Render the figure to PNG and put the bytes in the widget; returns them."""
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=self.dpi)
        png = buf.getvalue()
        self.image.value = png
        self.renders += 1
        return png


def table_html(rows, header=None, *, caption: str | None = None) -> str:
    """A small HTML table for readouts; every cell is escaped text.

    ``rows`` is a list of rows, each a list (or tuple) of cells; ``header`` a list of column titles
    or None; ``caption`` a string or None.  At most ``_checks.MAX_TABLE_ROWS`` rows and
    ``_checks.MAX_TABLE_COLUMNS`` cells a row, checked before any is read."""

    def _cells(what, row):
        return bounded_list(what, row, MAX_TABLE_COLUMNS, "a list of cells")

    rows = bounded_list("rows", rows, MAX_TABLE_ROWS, "a list of rows (lists of cells)")
    rows = [_cells(f"rows[{i}]", r) for i, r in enumerate(rows)]
    if header is not None:
        header = _cells("header", header)
    if caption is not None:
        check_instance("caption", caption, str, "a string or None")
    parts = ['<table style="border-collapse:collapse;font-family:monospace">']
    if caption:
        parts.append(f"<caption style='text-align:left'>{html.escape(caption)}</caption>")
    # cells wrap between words when the window is narrow, never inside a word
    cell = (
        "padding:2px 8px;border-bottom:1px solid #ddd;text-align:left;overflow-wrap:normal;word-break:normal"
    )
    if header:
        parts.append(
            "<tr>" + "".join(f"<th style='{cell}'>{html.escape(str(h))}</th>" for h in header) + "</tr>"
        )

    def td(c) -> str:
        text = str(c)
        # one word (a number such as 1.17549e-38) is never broken, not even after its hyphen
        nowrap = ";white-space:nowrap" if not any(ch.isspace() for ch in text) else ""
        return f"<td style='{cell}{nowrap}'>{html.escape(text)}</td>"

    for row in rows:
        parts.append("<tr>" + "".join(td(c) for c in row) + "</tr>")
    parts.append("</table>")
    return "".join(parts)


class Table:
    """A table a notebook shows: HTML in JupyterLab, aligned text everywhere else.

    JupyterLab renders ``_repr_html_`` (``table_html``: cells wrap between words, never inside one, so
    a wide table fits a 1280-pixel window); ``repr()`` is the same table as aligned columns, which is
    what nbval compares and what a terminal prints.  Arguments as :func:`table_html`.
    """

    def __init__(self, rows, header=None, *, caption: str | None = None):
        self._html = table_html(rows, header, caption=caption)  # validates everything first
        self.rows = [[str(c) for c in r] for r in rows]
        self.header = None if header is None else [str(h) for h in header]
        self.caption = caption

    def _repr_html_(self) -> str:
        return self._html

    def __repr__(self) -> str:
        lines = [self.header, *self.rows] if self.header else list(self.rows)
        n = max((len(r) for r in lines), default=0)
        widths = [max((len(r[i]) for r in lines if i < len(r)), default=0) for i in range(n)]
        text = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in lines]
        if self.header:
            text.insert(1, "  ".join("-" * w for w in widths))
        if self.caption:
            text.insert(0, self.caption)
        return "\n".join(text)


class SmokeTest:
    """The widget check of ``00_setup_check``: move the slider, the number below must change.

    ``readout`` shows ``2 ** k`` and its float16 spacing for the slider's ``k``, computed by torch,
    so a learner sees the front end and the kernel talking to each other.
    """

    def __init__(self, k: int = 3):
        import torch

        k = check_int("k", k, minimum=0, maximum=15)
        self._torch = torch
        self.slider = widgets.IntSlider(value=k, min=0, max=15, description="k", continuous_update=True)
        self.slider.add_class("amp-smoke-slider")
        self.readout = widgets.HTML()
        self.readout.add_class("amp-smoke-readout")
        self.slider.observe(self._update, names="value")
        self._update()
        self.widget = widgets.VBox([self.slider, self.readout])

    def text(self, k: int) -> str:
        k = check_int("k", k, minimum=0, maximum=15)  # 2**16 is beyond float16's largest value
        x = self._torch.tensor(2.0**k, dtype=self._torch.float16)
        # The next float16 up: add one to the 16-bit pattern (valid for positive finite values).
        up = (x.view(self._torch.int16) + 1).view(self._torch.float16)
        gap = up.float() - x.float()
        return f"2 ** {k} = {x.item():g} in float16; the next float16 above it is {gap.item():g} further on"

    def _update(self, change=None) -> None:
        self.readout.value = f"<code>{html.escape(self.text(self.slider.value))}</code>"


def smoke_test(k: int = 3) -> SmokeTest:
    """Build the widget smoke test shown in ``00_setup_check``."""
    return SmokeTest(k)
