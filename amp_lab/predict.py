"""Predict, then run: a prediction (``predict.choice(question, options)`` buttons, or a variable) is
committed before ``reveal(guess, actual, explain=...)`` says whether it agrees; a revealed choice is locked."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real

import ipywidgets as widgets
import torch

from ._checks import ArgumentTypeError, bounded_list, check_bool, check_callable, check_float, check_instance
from .check_base import read_dtype
from .text import Reading, say, wrap

__all__ = ["Prediction", "Reveal", "choice", "reveal"]

MAX_OPTIONS = 12


def _label(x) -> str:
    if isinstance(x, torch.dtype):
        return str(x).removeprefix("torch.")
    if isinstance(x, float):
        k = math.log2(abs(x)) if x and math.isfinite(x) else 0.5
        return f"{'-' if x < 0 else ''}2**{int(k)}" if k.is_integer() and abs(k) >= 4 else f"{x:g}"
    return str(x)


class Prediction:
    """A multiple-choice prediction shown as buttons, none selected; ``value`` is the option chosen or None."""

    def __init__(self, question: str, options: Sequence):
        if not check_instance("question", question, str, "a string").strip():
            raise ValueError("question must not be empty")
        options = bounded_list("options", options, MAX_OPTIONS, "a list of 2 to 12 choices")
        if len(options) < 2:
            raise ValueError(f"options must hold 2 to {MAX_OPTIONS} choices, got {len(options)}")
        labels = [_label(o) for o in options]
        if len(set(labels)) != len(labels):
            raise ValueError(f"options must have distinct names, got {labels}")
        self.question, self.options = question, options
        self.buttons = widgets.ToggleButtons(
            options=[(x, i) for i, x in enumerate(labels)], value=None, style={"button_width": "auto"}
        )
        self.widget = widgets.VBox(
            [widgets.HTML(f"<b>Predict:</b> {html.escape(question)}"), self.buttons],
            layout=widgets.Layout(max_width="100%"),
        )
        self.widget.add_class("amp-lab-prediction")

    @property
    def value(self):
        return None if self.buttons.value is None else self.options[self.buttons.value]

    @value.setter
    def value(self, option) -> None:
        index = next((i for i, o in enumerate(self.options) if _same(o, option)), None)
        if index is None:
            raise ValueError(
                f"value={option!r} is not one of the options: {', '.join(map(_label, self.options))}"
            )
        if self.locked:
            raise ValueError("this prediction was already revealed; build a new one to predict again")
        self.buttons.value = index

    @property
    def locked(self) -> bool:
        return self.buttons.disabled

    def _ipython_display_(self):
        """The buttons; where widgets cannot render (an untrusted or static view of the stored notebook) a
        plain line that asks for the run, in place of the widgets' repr."""
        from IPython.display import display

        bundle = self.widget._repr_mimebundle_()
        text = say("predict.run_to_choose", question=self.question, options=self._options())
        bundle["text/plain"] = wrap(text, indent="    ")  # the lines of a static view fit its output area
        display(bundle, raw=True)

    def _options(self) -> str:
        return " · ".join(_label(o) for o in self.options)

    def __repr__(self) -> str:
        return f"Prediction({self.question!r}, value={self.value!r})"


def choice(question: str, options: Sequence) -> Prediction:
    """Show ``question`` with one button per option; returns the :class:`Prediction`."""
    return Prediction(question, options)


@dataclass(frozen=True)
class Reveal:
    """What :func:`reveal` found: ``right`` is None when nothing was committed."""

    committed: bool
    right: bool | None
    predicted: object
    actual: object
    message: str
    reading: Reading | None = None

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
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    try:
        return (a == b) is True  # an array's elementwise answer is not a yes
    except Exception:  # objects that refuse to be compared are not the same
        return False


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
    """Say whether a committed ``prediction`` (a :class:`Prediction` or a value; ``None``/``...``: none yet)
    matches ``actual``: numbers within ``rtol`` if given, else exactly, or by ``match(predicted, actual)``;
    ``explain`` is printed after the verdict. With nothing committed it asks for the prediction and shows
    neither the result nor ``explain`` (the returned :class:`Reveal` still holds ``actual``)."""
    check_bool("show", show)
    check_instance("explain", explain, (str, Reading, type(None)), "a string, a text.Reading or None")
    check_instance("name", name, str, "a string")
    if rtol is not None:
        rtol = check_float("rtol", rtol, ge=0)
    check_callable("match", match, optional=True)
    widget = prediction if isinstance(prediction, Prediction) else None
    predicted = widget.value if widget else prediction
    if predicted is None or predicted is Ellipsis:
        how = "click an option above" if widget else f"set `{name}`"
        lines, right = [say("predict.uncommitted", how=how)], None  # neither the result nor why: not yet
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
        elif rtol is not None and all(
            isinstance(x, Real) and not isinstance(x, bool) for x in (predicted, actual)
        ):
            try:
                right = math.isclose(float(predicted), float(actual), rel_tol=rtol)
            except OverflowError:  # an int beyond float64: only an exact match counts
                right = predicted == actual
        else:
            right = _same(predicted, actual)
        code = "predict.right" if right else "predict.wrong"
        lines = [wrap(say(code, predicted=_label(predicted), actual=_label(actual)), indent="  ")]
        if widget:
            widget.buttons.disabled = True  # locked
    if right is not None and explain is not None and str(explain):  # prose: re-wrapped under its label
        lines.append(wrap("  why: " + " ".join(str(explain).split()), indent="       "))
    reading = explain if isinstance(explain, Reading) else None
    result = Reveal(right is not None, right, predicted, actual, "\n".join(lines), reading)
    if show:
        print(result.message)
    return result
