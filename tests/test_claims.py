"""amp_lab.claims: the checked sentences that notebooks print instead of machine-dependent digits."""

import numpy as np
import pytest
import torch

from amp_lab.claims import Claim, claim


@pytest.mark.parametrize(
    ("holds", "word"),
    [
        (True, "yes"),
        (False, "NO"),
        (np.bool_(True), "yes"),
        (np.float64(0.3) > 0.2, "yes"),
        (np.array(False), "NO"),
        (torch.tensor(True), "yes"),
        (torch.tensor(0.1) > 0.2, "NO"),
        (torch.isfinite(torch.tensor([1.0, 2.0])).all(), "yes"),
    ],
)
def test_bool_like_outcomes_print_yes_or_no(capsys, holds, word):
    c = claim("FP16 zeroes more than a fifth of the gradients", holds)
    assert capsys.readouterr().out == f"FP16 zeroes more than a fifth of the gradients: {word}\n"
    assert isinstance(c, Claim) and isinstance(c.holds, bool)
    assert bool(c) is (word == "yes")
    assert str(c) == f"FP16 zeroes more than a fifth of the gradients: {word}"


def test_show_false_prints_nothing_and_statement_is_stripped(capsys):
    c = claim("  the two scalers agree  ", True, show=False)
    assert capsys.readouterr().out == ""
    assert c.statement == "the two scalers agree" and str(c) == "the two scalers agree: yes"


@pytest.mark.parametrize(
    "holds",
    [
        1,  # an int is not the outcome of a comparison
        0.25,  # nor is a float: its truthiness would print "yes" for any non-zero fraction
        "yes",
        None,
        np.int64(1),
        np.float32(0.5),
        torch.tensor(1.0),  # a number tensor
        torch.tensor([True, False]),  # more than one outcome
        np.array([True]),  # a 1-element array is still not a single bool
    ],
)
def test_non_bool_outcomes_are_rejected(holds, capsys):
    with pytest.raises(TypeError, match="holds must be a bool"):
        claim("a statement", holds)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("statement", ["", "   ", None, 3])
def test_empty_or_non_string_statement_is_rejected(statement):
    with pytest.raises(ValueError, match="statement must be a non-empty string"):
        claim(statement, True)


def test_a_cell_ending_in_a_claim_shows_its_line_once(capsys):
    shown = claim("printed by claim()", True)
    capsys.readouterr()
    shown._ipython_display_()  # what IPython calls for a cell's value: nothing more to show
    assert capsys.readouterr().out == ""
    quiet = claim("kept for later", False, show=False)
    quiet._ipython_display_()
    assert capsys.readouterr().out == "kept for later: NO\n"
    assert shown == Claim("printed by claim()", True)  # printed or not, the same claim


@pytest.mark.parametrize(
    "kwargs, named",
    [({"statement": 5, "holds": True}, "statement"), ({"statement": "x", "holds": 1}, "holds"),
     ({"statement": "x", "holds": True, "show": "yes"}, "show")],
)  # fmt: skip
def test_a_refused_claim_names_the_argument_and_prints_nothing(kwargs, named, capsys):
    with pytest.raises(TypeError, match=named) as info:
        claim(**kwargs)
    assert isinstance(info.value, ValueError)  # ArgumentTypeError: a TypeError that is also a ValueError
    assert capsys.readouterr().out == ""


def test_claim_names_the_shape_of_a_tensor_of_many_bools():
    with pytest.raises(TypeError, match=r"shape \(2,\)"):
        claim("x", torch.tensor([True, False]))
