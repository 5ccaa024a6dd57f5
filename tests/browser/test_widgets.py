"""The course's widgets driven in the browser like a person does it: keyboard and mouse on the real
JupyterLab front end, with the readouts in the page compared to what the package computes in
*this* (the test) process.  A widget whose front end, comm or callback is broken fails here.

Each test runs after its notebook's Run All (the page and kernel are shared, see conftest.py).
Notebooks that do not exist yet are skipped with a message.
"""

from __future__ import annotations

import contextlib
import re

import pytest
from labdriver import ARTIFACTS, NOTEBOOKS

# Opening and running a notebook (once per notebook) plus the drive; a hung page fails, not blocks.
pytestmark = pytest.mark.timeout(360)

SMOKE = "00_setup_check.ipynb"
FORMATS_NB = "01_float_formats.ipynb"
RANGES_NB = "03_underflow_and_overflow.ipynb"
RACE_NB = "06_timing_race.ipynb"


def needs(notebook: str, order: int = 1):
    """Mark a test as driving ``notebook`` (after its Run All); skip while the notebook is absent."""

    def mark(fn):
        fn = pytest.mark.notebook(notebook, order=order)(fn)
        return pytest.mark.skipif(
            not (NOTEBOOKS / notebook).exists(), reason=f"notebooks/{notebook} does not exist yet"
        )(fn)

    return mark


# How long a readout must keep its value after it matched (catches late echoes between controls).
SETTLE_MS = 1_000


def expect():
    from playwright.sync_api import expect as _expect

    return _expect


def one(page, selector: str, what: str):
    """The single visible widget matching ``selector``; fails clearly when there is none or several."""
    loc = page.locator(selector)
    count = loc.count()
    assert count == 1, f"expected exactly one {what} ({selector}) in the page, found {count}"
    return loc.first


@contextlib.contextmanager
def widget_shot(nb, selector: str, name: str):
    """Screenshot the output area holding ``selector`` after the block, whether it passed or not."""
    try:
        yield
    finally:
        area = nb.page.locator(".jp-OutputArea-output").filter(has=nb.page.locator(selector))
        try:
            nb.screenshot_element(area.first, ARTIFACTS / name)
        except Exception:  # a missing widget is reported by the test itself
            pass


def slider_value(handle) -> float:
    """The value a (noUiSlider) ipywidgets slider shows, from its ARIA attributes."""
    return float(handle.get_attribute("aria-valuenow"))


# ----------------------------------------------------------------------------------------------
# 00: the smoke slider (the reference implementation for every other drive)
# ----------------------------------------------------------------------------------------------


def drive_smoke_slider(nb, *, timeout_ms: int = 15_000) -> None:
    """Keyboard: focus the slider's handle, press ArrowRight; mouse: click the track's left end.
    After each move the readout must read ``SmokeTest().text(k)`` for the slider's new ``k``."""
    from amp_lab.widgets import SmokeTest

    oracle = SmokeTest()
    page = nb.page
    slider = one(page, ".amp-smoke-slider", "smoke slider")
    handle = slider.locator(".noUi-handle")
    readout = one(page, ".amp-smoke-readout", "smoke readout")
    k = int(slider_value(handle))
    lo, hi = (
        int(float(handle.get_attribute("aria-valuemin"))),
        int(float(handle.get_attribute("aria-valuemax"))),
    )
    # The page agrees with the package before anything moves.
    expect()(readout).to_have_text(oracle.text(k), timeout=timeout_ms)

    # Keyboard: one step (left instead when the slider is already at its right end).
    key, k_new = ("ArrowRight", k + 1) if k < hi else ("ArrowLeft", k - 1)
    handle.focus()
    page.keyboard.press(key)
    expect()(handle).to_have_attribute("aria-valuenow", re.compile(rf"^{k_new}(\.0+)?$"), timeout=timeout_ms)
    expect()(readout).to_have_text(oracle.text(k_new), timeout=timeout_ms)

    # Mouse: click the far left of the track; the handle jumps there (k = min).
    track = slider.locator(".noUi-base")
    box = track.bounding_box()
    page.mouse.click(box["x"] + 1, box["y"] + box["height"] / 2)
    expect()(handle).to_have_attribute("aria-valuenow", re.compile(rf"^{lo}(\.0+)?$"), timeout=timeout_ms)
    expect()(readout).to_have_text(oracle.text(lo), timeout=timeout_ms)
    page.wait_for_timeout(SETTLE_MS)  # and it stays there
    assert readout.text_content().strip() == oracle.text(lo), readout.text_content()


@needs(SMOKE)
def test_smoke_slider_keyboard_and_mouse(runs):
    nb, _ = runs.get_clean(SMOKE)
    with widget_shot(nb, ".amp-smoke-slider", "00_setup_check-smoke.png"):
        drive_smoke_slider(nb)


BREAK_SMOKE_CALLBACK = """
def _broken_update(change):
    raise RuntimeError("deliberately broken callback (browser test)")

smoke.slider.unobserve(smoke._update, names="value")
smoke.slider.observe(_broken_update, names="value")
"""


@needs(SMOKE, order=2)
def test_a_broken_callback_fails_the_drive(runs, lab_server):
    """The drive above can fail.  Swap the live smoke widget's callback in the notebook's kernel
    for one that raises, then drive again: the readout never reaches the value the package
    computes, so the drive must raise AssertionError."""
    nb, _ = runs.get_clean(SMOKE)
    lab_server.kernel_execute(SMOKE, BREAK_SMOKE_CALLBACK)
    with pytest.raises(AssertionError, match="amp-smoke-readout"):
        drive_smoke_slider(nb, timeout_ms=3_000)


# ----------------------------------------------------------------------------------------------
# 01: the bit explorer
# ----------------------------------------------------------------------------------------------


@needs(FORMATS_NB)
def test_bit_explorer_typed_values(runs):
    """Type a value into the explorer's box and press Enter; every format's readout must read as
    ``format_explorer.readout_html(formats.decompose(value, fmt))``."""
    from amp_lab import format_explorer, formats

    nb, _ = runs.get_clean(FORMATS_NB)
    with widget_shot(nb, ".amp-bit-explorer", "01_float_formats-bit-explorer.png"):
        page = nb.page
        box = one(page, ".amp-bit-explorer-value input", "bit explorer value box")
        status = one(page, ".amp-bit-explorer-status", "bit explorer status line")
        present = [name for name in formats.FORMAT_NAMES if page.locator(f".amp-readout-{name}").count()]
        assert "fp16" in present, f"no fp16 readout (.amp-readout-fp16) in the bit explorer; found {present}"

        # 65520 rounds to inf in fp16 (just past its largest finite value), 1e-7 is fp16-subnormal:
        # values whose readouts differ from the explorer's starting state in every format.
        for typed in ("65520", "-1e-07"):
            box.click()
            box.press("Control+A")
            box.press_sequentially(typed)
            box.press("Enter")
            value = float(typed)
            want = {
                name: nb.html_text(format_explorer.readout_html(formats.decompose(value, name))) for name in present
            }
            expect()(status).to_contain_text(repr(value), timeout=15_000)
            for name in present:
                expect()(one(page, f".amp-readout-{name}", f"{name} readout")).to_have_text(
                    want[name], timeout=15_000
                )
            # ... and it stays so: no late echo from another control may replace what the person typed.
            page.wait_for_timeout(SETTLE_MS)
            assert box.input_value() == typed, f"typed {typed!r}, the box now shows {box.input_value()!r}"
            for name in present:
                shown = page.locator(f".amp-readout-{name}").first.text_content()
                assert " ".join(shown.split()) == " ".join(want[name].split()), (
                    f"after typing {typed!r} the {name} readout changed to {shown!r}; expected {want[name]!r}"
                )


# ----------------------------------------------------------------------------------------------
# 03: the loss-scale slider
# ----------------------------------------------------------------------------------------------


_SCALE_LINE = re.compile(r"(underflow|subnormal|normal|overflow): ([0-9.]+)% \((\d+) of (\d+)\)")


def _scale_readout(text: str) -> dict:
    counts = {m.group(1): int(m.group(3)) for m in _SCALE_LINE.finditer(text)}
    totals = {int(m.group(4)) for m in _SCALE_LINE.finditer(text)}
    return {"counts": counts, "totals": totals}


# The explorer's data, saved from the notebook's kernel for the test process to recompute with.
DUMP_SCALE_DATA = """
import torch as _torch
from amp_lab.ranges import ScaleExplorer as _ScaleExplorer

_found = [_v for _v in list(globals().values()) if isinstance(_v, _ScaleExplorer)]
assert len(_found) == 1, f"expected one ScaleExplorer in the notebook, found {{len(_found)}}"
_torch.save({{"values": _found[0]._sel.detach().cpu(), "fmt": _found[0].fmt.name}}, {path!r})
"""


@needs(RANGES_NB)
def test_scale_slider_keyboard(runs, lab_server, tmp_path):
    """Press ArrowRight on the scale slider: before and after, the readout in the page must read
    as ``ranges.readout_html(range_counts.range_report(x, fmt, 2**k), range_counts.suggest_log2_scale(x, fmt))``
    computed here for the explorer's values ``x`` (copied out of the notebook's kernel)."""
    import torch

    from amp_lab import range_counts, ranges

    nb, _ = runs.get_clean(RANGES_NB)
    with widget_shot(nb, ".amp-scale-slider", "03_underflow_and_overflow-scale.png"):
        page = nb.page
        slider = one(page, ".amp-scale-slider", "scale slider")
        handle = slider.locator(".noUi-handle")
        readout = one(page, ".amp-scale-readout", "scale readout")

        dump = tmp_path / "scale_explorer_values.pt"
        lab_server.kernel_execute(RANGES_NB, DUMP_SCALE_DATA.format(path=str(dump)))
        data = torch.load(dump)
        x, fmt = data["values"], data["fmt"]
        suggested = range_counts.suggest_log2_scale(x, fmt)

        def expected(k: int) -> str:
            return nb.html_text(ranges.readout_html(range_counts.range_report(x, fmt, 2.0**k), suggested))

        k = int(slider_value(handle))
        hi = int(float(handle.get_attribute("aria-valuemax")))
        expect()(readout).to_have_text(expected(k), timeout=15_000)
        before = readout.text_content()
        key, k_new = ("ArrowRight", k + 1) if k < hi else ("ArrowLeft", k - 1)
        handle.focus()
        page.keyboard.press(key)
        expect()(handle).to_have_attribute("aria-valuenow", re.compile(rf"^{k_new}(\.0+)?$"), timeout=15_000)
        expect()(readout).to_have_text(expected(k_new), timeout=15_000)
        check_scale_readouts(before, readout.text_content(), k, k_new)


def check_scale_readouts(before: str, after: str, k: int, k_new: int) -> None:
    """Invariants any correct readout obeys: the same values are counted at both scales, and
    doubling the scale never makes more of them underflow nor fewer overflow."""
    b, a = _scale_readout(before), _scale_readout(after)
    assert set(a["counts"]) == {"underflow", "subnormal", "normal", "overflow"}, after
    assert len(a["totals"]) == 1 and a["totals"] == b["totals"], (before, after)
    assert sum(a["counts"].values()) == a["totals"].pop(), after
    up = k_new > k
    lo_, hi_ = (b, a) if up else (a, b)
    assert hi_["counts"]["underflow"] <= lo_["counts"]["underflow"], (before, after)
    assert hi_["counts"]["overflow"] >= lo_["counts"]["overflow"], (before, after)


# ----------------------------------------------------------------------------------------------
# 06: the race button
# ----------------------------------------------------------------------------------------------


@needs(RACE_NB)
def test_race_button_smallest_settings(runs):
    """Choose the smallest width and batch in the dropdowns, press Race: the card must first read
    the MFLOP count ``cost.mlp_step_flops`` gives, then show a finished race for those settings: a
    speedup, its interval, and an outcome consistent with that interval."""
    from amp_lab import cost

    nb, _ = runs.get_clean(RACE_NB)
    with widget_shot(nb, ".amp-race-button", "06_timing_race-race.png"):
        page = nb.page
        button = one(page, ".amp-race-button", "race button")
        card = one(page, ".amp-race-result", "race result card")
        # The race widget's own output area holds its width and batch dropdowns (in that order).
        widget = page.locator(".jp-OutputArea-output").filter(has=page.locator(".amp-race-button"))
        selects = widget.locator("select")
        assert selects.count() >= 2, "the race widget has no width/batch dropdowns"
        width_select, batch_select = selects.nth(0), selects.nth(1)
        width_options = sorted(int(v) for v in width_select.locator("option").all_inner_texts())
        batch_options = sorted(int(v) for v in batch_select.locator("option").all_inner_texts())
        width, batch = width_options[0], batch_options[0]

        def ready_text(w: int, b: int) -> str:
            return f"width {w}, batch {b}"

        def mflop(w: int, b: int) -> str:
            return f"{cost.mlp_step_flops(w, b) / 1e6:,.1f} MFLOP"

        # Change a setting and back (the cards must follow), ending on the smallest settings.
        if len(batch_options) > 1:
            batch_select.select_option(label=str(batch_options[1]))
            expect()(card).to_contain_text(ready_text(width, batch_options[1]), timeout=15_000)
            expect()(card).to_contain_text(mflop(width, batch_options[1]))
        width_select.select_option(label=str(width))
        batch_select.select_option(label=str(batch))
        expect()(card.locator("[data-race-state='ready']")).to_contain_text(
            ready_text(width, batch), timeout=15_000
        )
        expect()(card).to_contain_text(mflop(width, batch))

        button.click()
        done = card.locator("[data-race-state='done']")
        expect()(done).to_be_visible(timeout=90_000)
        expect()(done).to_contain_text(f"width={width}, batch={batch}")
        expect()(done.locator(".amp-race-speedup")).to_have_text(re.compile(r"^\d+\.\d+x$"))
        # The outcome follows from the interval shown next to it (the package's rule, recomputed here).
        interval = done.locator(".amp-race-interval").text_content()
        outcome = done.locator(".amp-race-outcome").get_attribute("data-outcome")
        assert outcome in ("faster", "slower", "too close to call"), outcome
        ends = re.fullmatch(r"95% interval (\d+\.\d+)x to (\d+\.\d+)x", interval)
        if ends is None:
            assert interval == "too few pairs for a 95% interval" and outcome == "too close to call", interval
        else:
            low, high = float(ends.group(1)), float(ends.group(2))
            assert low <= high
            want = "faster" if low > 1 else ("slower" if high < 1 else "too close to call")
            assert outcome == want, (interval, outcome)
        expect()(done).to_contain_text(outcome)
        expect()(button).to_be_enabled()
