"""The widget primitives.  A callback never prints nor opens a figure (CONTRIBUTING.md, "Widgets"): it sets the
``value`` of widgets that exist, an ``HTML`` readout or a :class:`FigurePane`, so outputs are the same in
JupyterLab, ``make notebooks`` and nbval, and tests drive a widget by its ``.value``."""

from __future__ import annotations

import html
import io

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from ._checks import MAX_TABLE_COLUMNS, MAX_TABLE_ROWS, bounded_list, check_int, check_optional_str


class FigurePane:
    """One matplotlib ``Figure`` shown as an ``ipywidgets.Image``: change its artists' data in a callback and
    call :meth:`refresh`, which replaces the image bytes in the page."""

    def __init__(self, figure: Figure | None = None, *, figsize=(6.4, 3.6), dpi: int = 100):
        self.figure = figure if figure is not None else Figure(figsize=figsize, dpi=dpi)
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
    """A small HTML table of escaped text: ``rows`` of cells (at most ``MAX_TABLE_ROWS`` of
    ``MAX_TABLE_COLUMNS``, checked before any is read), ``header`` titles or None, ``caption`` or None."""
    rows = bounded_list("rows", rows, MAX_TABLE_ROWS, "a list of rows (lists of cells)")
    rows = [bounded_list(f"rows[{i}]", r, MAX_TABLE_COLUMNS, "a list of cells") for i, r in enumerate(rows)]
    if header is not None:
        header = bounded_list("header", header, MAX_TABLE_COLUMNS, "a list of cells")
    check_optional_str("caption", caption)
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
    """A table a notebook shows: :func:`table_html` in JupyterLab, aligned columns in ``repr()`` (what nbval
    compares and a terminal prints).  Arguments as :func:`table_html`."""

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
    """The widget check of ``00_setup_check``: move the slider, and ``readout`` shows ``2 ** k`` and its float16
    spacing, computed by torch (the front end and the kernel talking)."""

    def __init__(self, k: int = 3):
        k = check_int("k", k, minimum=0, maximum=15)
        self.slider = widgets.IntSlider(value=k, min=0, max=15, description="k", continuous_update=True)
        self.slider.add_class("amp-smoke-slider")
        self.readout = widgets.HTML()
        self.readout.add_class("amp-smoke-readout")
        self.slider.observe(self._update, names="value")
        self._update()
        self.widget = widgets.VBox([self.slider, self.readout])

    def text(self, k: int) -> str:
        k = check_int("k", k, minimum=0, maximum=15)  # 2**16 is beyond float16's largest value
        x = torch.tensor(2.0**k, dtype=torch.float16)
        up = (x.view(torch.int16) + 1).view(torch.float16)  # the next float16 up
        gap = up.float() - x.float()
        return f"2 ** {k} = {x.item():g} in float16; the next float16 above it is {gap.item():g} further on"

    def _update(self, change=None) -> None:
        self.readout.value = f"<code>{html.escape(self.text(self.slider.value))}</code>"


def smoke_test(k: int = 3) -> SmokeTest:
    """Build the widget smoke test shown in ``00_setup_check``."""
    return SmokeTest(k)
