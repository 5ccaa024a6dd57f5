"""The shared widget layer, the argument checks and the course map."""

import math

import pytest
import torch
from matplotlib.figure import Figure

from amp_lab import _checks, course
from amp_lab.hardware import describe
from amp_lab.widgets import FigurePane, smoke_test, table_html


def test_smoke_slider_drives_readout():
    smoke = smoke_test(k=3)
    assert "2 ** 3 = 8 in float16" in smoke.readout.value
    for k in (0, 10, 15):
        smoke.slider.value = k
        # Oracle: float16's spacing at 2**k, from torch.finfo (eps is the spacing at 1).
        gap = torch.finfo(torch.float16).eps * 2.0**k
        assert f"2 ** {k} = {2.0**k:g} in float16" in smoke.readout.value
        assert f"{gap:g} further on" in smoke.readout.value
    assert "amp-smoke-slider" in smoke.slider._dom_classes


def test_figure_pane_redraws_in_place():
    fig = Figure(figsize=(2, 2))
    ax = fig.add_subplot()
    (line,) = ax.plot([0, 1], [0, 1])
    pane = FigurePane(fig, dpi=50)
    first = pane.refresh()
    line.set_ydata([1, 0])
    second = pane.refresh()
    assert first[:8] == b"\x89PNG\r\n\x1a\n" and first != second
    assert pane.image.value == second and pane.renders == 2
    assert len(fig.axes) == 1  # redrawn, not rebuilt


def test_table_html_escapes():
    html = table_html([("<b>", 1)], header=["a&b", "n"])
    assert "&lt;b&gt;" in html and "a&amp;b" in html


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: _checks.check_int("num_steps", 0, minimum=1), "num_steps must be >= 1, got 0"),
        (lambda: _checks.check_int("num_steps", 2.5), "num_steps must be an integer"),
        (lambda: _checks.check_int("num_steps", True), "num_steps must be an integer"),
        (lambda: _checks.check_float("scale", math.nan, gt=0), "scale must be finite"),
        (lambda: _checks.check_float("scale", -1.0, gt=0), "scale must be > 0"),
        (lambda: _checks.check_float("scale", "1"), "scale must be a real number"),
        (lambda: _checks.check_choice("fmt", "fp12", ["fp16", "bf16"]), "choose one of: 'fp16', 'bf16'"),
    ],
)
def test_checks_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        call()


def test_checks_return_clean_values():
    assert _checks.check_int("n", 3, minimum=1) == 3
    assert _checks.check_float("s", 2, gt=0, lt=4) == 2.0
    assert _checks.check_choice("d", "cpu", ["cpu"]) == "cpu"


def test_course_map_covers_every_lesson_and_follows_the_report():
    report = describe("cpu")
    rows = course.course_map(report)
    assert [r[0] for r in rows] == [lesson.file for lesson in course.LESSONS]
    race = dict((r[0], r[2]) for r in rows)["06_timing_race.ipynb"]
    assert report.verdict in race
    assert "needs a CUDA GPU" in dict((r[0], r[2]) for r in rows)["02_tensor_cores.ipynb"]


# ---- every bad input gets a clear error ----


from amp_lab import progress as P  # noqa: E402
from amp_lab import widgets as W  # noqa: E402


@pytest.mark.parametrize(
    "args,kwargs,err,words",
    [
        (("ab",), {}, TypeError, "rows"),
        ((None,), {}, TypeError, "rows"),
        ((["ab"],), {}, TypeError, r"rows\[0\]"),
        (([[1]],), {"header": "ab"}, TypeError, "header"),
        (([[1]],), {"caption": 5}, TypeError, "caption"),
    ],
)
def test_table_html_bad_arguments(args, kwargs, err, words):
    with pytest.raises(err, match=words):
        W.table_html(*args, **kwargs)


def test_table_html_valid_input_unchanged():
    html_text = W.table_html([(1, "<b>")], header=["n", "tag"], caption="c")
    assert "<td style" in html_text and "&lt;b&gt;" in html_text and "<caption" in html_text


@pytest.mark.parametrize("k,err", [(16, ValueError), (-1, ValueError), (True, TypeError), (2.0, TypeError)])
def test_smoke_test_k(k, err):
    with pytest.raises(err, match="k"):
        W.smoke_test(k)
    with pytest.raises(err, match="k"):
        W.smoke_test(3).text(k)


@pytest.mark.parametrize(
    "args,kwargs,err,words",
    [
        ((5,), {}, TypeError, "iterable"),
        ((), {"total": -1}, ValueError, "total"),
        ((), {"total": 1.5}, TypeError, "total"),
        ((), {"desc": 5}, TypeError, "desc"),
        ((), {"leave": "yes"}, TypeError, "leave"),
    ],
)
def test_progress_bad_arguments(args, kwargs, err, words):
    with pytest.raises(err, match=words):
        P.progress(*args, **kwargs)


def test_progress_valid_input_still_counts(monkeypatch):
    monkeypatch.setenv("AMP_LAB_PROGRESS", "0")
    assert list(P.progress(range(3), desc="x", total=3)) == [0, 1, 2]


@pytest.mark.parametrize(
    "kwargs,err,words",
    [
        ({"rows": torch.tensor([1, 2])}, TypeError, r"rows\[0\] must be a list of cells"),
        ({"rows": range(10**12)}, ValueError, "rows may hold at most 10,000"),
        ({"rows": [[1]], "header": range(10**12)}, ValueError, "header may hold at most 1,000"),
        ({"rows": [range(10**12)]}, ValueError, r"rows\[0\] may hold at most 1,000"),
        ({"rows": [[1]], "header": 5}, TypeError, "header"),
    ],
)
def test_table_html_refuses_huge_and_odd_inputs_before_reading(kwargs, err, words):
    with pytest.raises(err, match=words):
        W.table_html(**kwargs)


def test_smoke_test_k_zero_is_the_sliders_minimum():
    assert "2 ** 0 = 1 in float16" in W.smoke_test(0).readout.value


def test_table_shows_html_in_lab_and_aligned_text_to_nbval():
    t = W.Table([("fp16", "0 (zero)"), ("bf16", 3)], ["format", "class"], caption="two formats")
    assert t._repr_html_() == table_html([("fp16", "0 (zero)"), ("bf16", 3)], ["format", "class"], caption="two formats")
    assert "word-break:normal" in t._repr_html_()
    assert repr(t).splitlines() == ["two formats", "format  class", "------  --------", "fp16    0 (zero)", "bf16    3"]
    with pytest.raises(TypeError, match="rows"):
        W.Table(5)
