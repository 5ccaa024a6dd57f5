"""Predict, then run: the learner commits a prediction before the cell that reveals the result.

Two ways to commit, both read by :func:`reveal`:

* a widget choice: ``guess = predict.choice("Which dtype will softmax give?", ["float32", "bfloat16"])``
  shows the question with one button per option and nothing selected; the learner clicks one;
* a variable: ``my_guess = None  # your prediction, e.g. 2.0**16``, set by hand.

The reveal cell computes the result and calls ``reveal(guess, actual, explain=...)``: it prints
what was predicted, what happened and whether the two agree (sentences from :data:`amp_lab.text.REASONS`),
then the explanation: a readout's :class:`~amp_lab.text.Reading`, composed from the measurement's facts
(or a string).  Nothing committed is said plainly ("no prediction committed") and never raises,
so notebooks execute top to bottom under nbval.  After a reveal the buttons are locked: a
prediction is not changed after seeing the answer (build a new one to predict again).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real

import ipywidgets as widgets
import torch

from ._checks import ArgumentTypeError, bounded_list, check_bool, check_float, check_instance
from .check_base import read_dtype
from .text import Reading, say

__all__ = ["Prediction", "Reveal", "choice", "reveal", "MAX_OPTIONS"]

MAX_OPTIONS = 12


def _label(x) -> str:
    if isinstance(x, torch.dtype):
        return str(x).removeprefix("torch.")
    if isinstance(x, float):
        if x != 0 and math.isfinite(x) and math.log2(abs(x)).is_integer() and abs(math.log2(abs(x))) >= 4:
            return f"{'-' if x < 0 else ''}2**{int(math.log2(abs(x)))}"
        return f"{x:g}"
    return str(x)


class Prediction:
    """A multiple-choice prediction shown as buttons, none selected until the learner clicks one.

    ``value`` is the chosen option (``None`` until chosen).  Options may be strings, numbers,
    booleans or dtypes; the buttons show their names.
    """

    def __init__(self, question: str, options: Sequence):
        check_instance("question", question, str, "a string")
        if not question.strip():
            raise ValueError("question must not be empty")

        options = bounded_list("options", options, MAX_OPTIONS, "a list of 2 to 12 choices")
        if not 2 <= len(options) <= MAX_OPTIONS:
            raise ValueError(f"options must hold 2 to {MAX_OPTIONS} choices, got {len(options)}")
        labels = [_label(o) for o in options]
        if len(set(labels)) != len(labels):
            raise ValueError(f"options must have distinct names, got {labels}")
        self.question = question
        self.options = options
        self.buttons = widgets.ToggleButtons(
            options=list(zip(labels, range(len(options)), strict=True)),
            value=None,
            style={"button_width": "auto"},
        )
        self.widget = widgets.VBox(
            [widgets.HTML(f"<b>Predict:</b> {html.escape(question)}"), self.buttons],
            layout=widgets.Layout(max_width="100%"),
        )
        self.widget.add_class("amp-lab-prediction")

    @property
    def value(self):
        """The option chosen, or None."""
        index = self.buttons.value
        return None if index is None else self.options[index]

    @value.setter
    def value(self, option) -> None:
        for i, o in enumerate(self.options):
            if _same(o, option):
                if self.buttons.disabled:
                    raise ValueError("this prediction was already revealed; build a new one to predict again")
                self.buttons.value = i
                return
        raise ValueError(
            f"value={option!r} is not one of the options: {', '.join(_label(o) for o in self.options)}"
        )

    @property
    def locked(self) -> bool:
        return self.buttons.disabled

    def lock(self) -> None:
        self.buttons.disabled = True

    def _ipython_display_(self):
        from IPython.display import display

        display(self.widget)

    def __repr__(self) -> str:
        return f"Prediction({self.question!r}, value={self.value!r})"


def choice(question: str, options: Sequence) -> Prediction:
    """Show ``question`` with one button per option; returns the :class:`Prediction`."""
    return Prediction(question, options)


@dataclass(frozen=True)
class Reveal:
    """What :func:`reveal` found: ``committed`` (a prediction was made), ``right`` (it matched;
    None when nothing was committed), the prediction, the actual result, the printed message, and the
    explanation's :class:`~amp_lab.text.Reading` when one was passed."""

    committed: bool
    right: bool | None
    predicted: object
    actual: object
    message: str
    reading: Reading | None = None

    @property
    def outcome(self) -> str:
        """``"predict.right"``, ``"predict.wrong"`` or ``"predict.uncommitted"``."""
        if not self.committed:
            return "predict.uncommitted"
        return "predict.right" if self.right else "predict.wrong"

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"Reveal(committed={self.committed}, right={self.right})"


def _same(a, b) -> bool:
    if isinstance(a, torch.dtype) or isinstance(b, torch.dtype):
        return read_dtype(a) is not None and read_dtype(a) == read_dtype(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and torch.equal(a, b)
        )
    try:
        same = a == b
    except Exception:  # objects that refuse to be compared are not the same
        return False
    return same if isinstance(same, bool) else False


def _real(x) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def reveal(
    prediction,
    actual,
    *,
    explain: str | Reading | None = None,
    name: str = "prediction",
    rtol: float | None = None,
    match: Callable[[object, object], bool] | None = None,
    show: bool = True,
) -> Reveal:
    """Compare a committed prediction with the ``actual`` result and say so in words.

    ``prediction`` is a :class:`Prediction` (its chosen option) or a plain value (a variable the
    learner set; ``None`` or ``...`` means not committed).  Numbers match within ``rtol`` when it
    is given, exactly otherwise; ``match(predicted, actual)`` replaces the comparison (e.g. "within
    a factor of 2").  ``explain`` is printed after the verdict: a readout's :class:`~amp_lab.text.Reading`
    (its sentences, from the measurement's facts) or a string.
    """
    check_bool("show", show)
    if explain is not None:
        check_instance("explain", explain, (str, Reading), "a string, a text.Reading or None")
    reading = explain if isinstance(explain, Reading) else None
    check_instance("name", name, str, "a string")
    if rtol is not None:
        rtol = check_float("rtol", rtol, ge=0)
    if match is not None and not callable(match):
        raise ArgumentTypeError(
            f"match must be a function (predicted, actual) -> bool or None, got {type(match).__name__}"
        )
    widget = prediction if isinstance(prediction, Prediction) else None
    predicted = widget.value if widget else prediction
    shown_actual = _label(actual)
    if predicted is None or predicted is Ellipsis:
        how = "click an option above" if widget else f"set `{name}`"
        lines = [say("predict.uncommitted", how=how, actual=shown_actual)]
        right = None
    else:
        if match is not None:
            try:
                right = match(predicted, actual)
            except Exception as e:  # the comparison a notebook passed failed on this prediction
                raise ValueError(
                    f"match({predicted!r:.40}, {actual!r:.40}) raised {type(e).__name__}: {e}"
                ) from e
            if not isinstance(right, bool):
                raise ArgumentTypeError(f"match must return True or False, got {type(right).__name__}")
        elif rtol is not None and _real(predicted) and _real(actual):
            try:
                right = math.isclose(float(predicted), float(actual), rel_tol=rtol)
            except OverflowError:  # an int beyond float64: only an exact match counts
                right = predicted == actual
        else:
            right = _same(predicted, actual)
        code = "predict.right" if right else "predict.wrong"
        lines = [say(code, predicted=_label(predicted), actual=shown_actual)]
        if widget:
            widget.lock()
    if explain is not None and str(explain):
        lines.append(f"  why: {explain}")
    result = Reveal(right is not None, right, predicted, actual, "\n".join(lines), reading)
    if show:
        print(result.message)
    return result
