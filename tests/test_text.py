"""amp_lab.text: a Reading's sentences come from the one table, REASONS (amp_lab/reasons.json)."""

import json
from pathlib import Path

import pytest

from amp_lab import text
from amp_lab.text import REASONS, Reading


def test_the_table_is_reasons_json_with_no_code_twice():
    sections = json.loads((Path(text.__file__).parent / "reasons.json").read_text(encoding="utf-8"))
    codes = [code for section in sections.values() for code in section]
    assert len(codes) == len(set(codes)) == len(REASONS)
    assert all(REASONS[code] for code in codes)


def test_an_outcome_code_speaks_first_and_a_plain_label_stays_silent():
    facts = {"labels": "AVX512-BF16"}
    as_code = Reading("verdict.cpu_bf16", ("why.cpu_bf16",), facts)
    assert as_code.sentences() == [
        REASONS["verdict.cpu_bf16"].format(**facts),
        REASONS["why.cpu_bf16"].format(**facts),
    ]
    as_label = Reading("faster", ("why.cpu_bf16",), facts)
    assert as_label.sentences() == [REASONS["why.cpu_bf16"].format(**facts)]
    assert str(Reading("faster")) == ""


def test_a_reason_without_a_sentence_is_a_bug_not_silence():
    with pytest.raises(KeyError):
        Reading("faster", ("no.such.code",)).sentences()


def test_printed_prose_wraps_between_words_at_the_width_an_output_area_holds():
    from amp_lab.claims import claim
    from amp_lab.text import WIDTH, wrap

    words = " ".join(["Adam", "7.296e+04", "bfloat16-autocast"] * 20)
    wrapped = wrap(words + "\nshort", indent="  ")
    lines = wrapped.split("\n")
    assert max(map(len, lines)) <= WIDTH and lines[-1] == "short"
    assert wrapped.split() == (words + " short").split()  # no word broken, none lost, none hyphen-split
    assert all(ln.startswith("  ") for ln in lines[1:-1])
    REASONS["test.long"] = words
    try:
        reading = Reading("test.long")
        assert reading.text == words and str(reading) == wrap(words)
    finally:
        del REASONS["test.long"]
    c = claim(words, True, show=False)
    assert max(map(len, str(c).split("\n"))) <= WIDTH and str(c).split() == (words + ": yes").split()
