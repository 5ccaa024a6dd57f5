"""Predict, then run: amp_lab.predict, driven as a learner drives it (the buttons' value)."""

from __future__ import annotations

import pytest
import torch

from amp_lab import predict, text
from amp_lab.text import REASONS, Reading


def test_nothing_committed_asks_for_a_prediction_and_shows_neither_result_nor_why():
    p = predict.choice("Which dtype will softmax give?", [torch.float32, torch.bfloat16])
    assert p.value is None
    r = predict.reveal(p, torch.bfloat16, explain="softmax is on the fp32 list", show=False)
    assert not r.committed and r.right is None and r.actual is torch.bfloat16  # kept for the cells below
    assert r.message.startswith("○ ") and "\n" not in r.message
    assert "bfloat16" not in r.message and "fp32 list" not in r.message  # neither the result nor why
    assert not p.locked  # nothing committed, nothing to lock
    number = predict.reveal(..., 2.0**16, name="my_scale", explain="scale(loss) multiplied by 65536", show=False)
    assert "`my_scale`" in number.message and "2**16" not in number.message and "65536" not in number.message


def test_a_prediction_stored_unrendered_is_a_plain_line_not_the_widget_repr():
    """Where widgets do not render (an untrusted notebook, GitHub), the stored text/plain asks for the run:
    the question and the options, never ``VBox(children=...)``."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    p = predict.choice("What does BF16 store for 257?", [256, 257, 258, "inf"])
    published = []
    shell.display_pub.publish = lambda data, **kw: published.append(data)
    try:
        p._ipython_display_()
    finally:
        del shell.display_pub.publish
    (data,) = published
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == p.widget.model_id
    plain = data["text/plain"]
    assert "VBox" not in plain and "ToggleButtons" not in plain
    assert plain.splitlines()[0] == "Predict: What does BF16 store for 257?"
    assert "256 · 257 · 258 · inf" in plain and "run this cell" in plain
    long = predict.choice("Which " + "very " * 40 + "long question?", [f"option number {i}" for i in range(9)])
    published.clear()
    shell.display_pub.publish = lambda data, **kw: published.append(data)
    try:
        long._ipython_display_()
    finally:
        del shell.display_pub.publish
    lines = published[0]["text/plain"].splitlines()
    assert max(map(len, lines)) <= text.WIDTH < len(long.question), lines  # a static view's lines fit 1280 px


def test_a_clicked_button_is_compared_and_then_locked(capsys):
    p = predict.choice("Will FP16 underflow it?", [True, False])
    p.buttons.value = 1  # what a click does: the button's index
    assert p.value is False
    r = predict.reveal(p, True)
    assert r.committed and r.right is False
    assert capsys.readouterr().out.strip() == r.message
    assert p.locked
    with pytest.raises(ValueError, match="already revealed"):
        p.value = True


def test_dtypes_match_by_name_and_numbers_within_rtol():
    p = predict.choice("dtype?", ["float32", "bfloat16"])
    p.value = "bfloat16"
    assert predict.reveal(p, torch.bfloat16, show=False).right is True
    assert predict.reveal(2.0**16, 2.0**16 * (1 + 1e-3), rtol=1e-2, show=False).right is True
    assert predict.reveal(2.0**16, 2.0**17, rtol=1e-2, show=False).right is False
    r = predict.reveal(2.0**15, 2.0**16, match=lambda a, b: abs(a / b - 1) <= 0.5, show=False)
    assert r.right is True and "2**15" in r.message and "2**16" in r.message
    assert "`my_guess`" in predict.reveal(None, 3, name="my_guess", show=False).message
    # True is not 1: a boolean prediction matches a boolean result only
    assert predict.reveal(True, 1, show=False).right is False


@pytest.mark.parametrize(
    ("args", "kwargs", "err", "words"),
    [
        (("", ["a", "b"]), {}, ValueError, "question"),
        (("q", ["a"]), {}, ValueError, "2 to"),
        (("q", "ab"), {}, TypeError, "options"),
        (("q", ["a", "a"]), {}, ValueError, "distinct"),
        ((3, ["a", "b"]), {}, TypeError, "question"),
    ],
)
def test_bad_predictions_name_the_argument(args, kwargs, err, words):
    with pytest.raises(err, match=words):
        predict.choice(*args, **kwargs)


def test_bad_reveal_arguments():
    with pytest.raises(TypeError, match="explain"):
        predict.reveal(1, 1, explain=3)
    with pytest.raises(ValueError, match="rtol"):
        predict.reveal(1, 1, rtol=-1.0)
    with pytest.raises(TypeError, match="match"):
        predict.reveal(1, 1, match=3)
    p = predict.choice("q", ["a", "b"])
    with pytest.raises(ValueError, match="not one of the options"):
        p.value = "c"


def test_a_readout_explains_the_reveal():
    """A readout's Reading is the explanation: its sentences are printed, its facts kept on the Reveal."""
    REASONS["test.halved"] = "the result is {ratio:g} of the prediction"
    try:
        reading = Reading("test.halved", facts={"ratio": 0.5})
        r = predict.reveal(4.0, 2.0, explain=reading, show=False)
        assert r.reading is reading
        assert r.message.splitlines()[-1] == "  why: the result is 0.5 of the prediction"
        assert predict.reveal(4.0, 2.0, explain=Reading("test.unknown"), show=False).message.count("\n") == 0
    finally:
        del REASONS["test.halved"]
