"""Notebook 01's exercises: the solutions pass, unfilled answers are not attempted, every common wrong
answer gets its hint, and bad arguments raise.  Expected values are recomputed here independently
(from torch's casts and the IEEE layout), not read from amp_lab.exercises.nb01."""

from __future__ import annotations

import inspect
import math
import struct

import pytest
import torch

from amp_lab.exercises import nb01
from amp_lab.formats import FORMATS
from tests.exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check

# -6.5 = -1.625 × 2**2 = -(1.101b) × 2**2: independent of amp_lab.formats, from the IEEE layout.
FP16_BITS = "1 " + format(2 + 15, "05b") + " " + "1010000000"
BF16_BITS = "1 " + format(2 + 127, "08b") + " " + "1010000"


def test_the_bits_agree_with_torch():
    fp16 = struct.unpack("<H", struct.pack("<e", -6.5))[0]
    assert format(fp16, "016b") == FP16_BITS.replace(" ", "")
    bf16 = torch.tensor([-6.5], dtype=torch.bfloat16).view(torch.int16).item() & 0xFFFF
    assert format(bf16, "016b") == BF16_BITS.replace(" ", "")


def test_ex1_bits():
    assert_passes(nb01.ex1, FP16_BITS, BF16_BITS)
    assert_passes(nb01.ex1, FP16_BITS.replace(" ", ""), BF16_BITS)
    assert_not_attempted(nb01.ex1, None, None)
    assert_not_attempted(nb01.ex1, ..., None)
    half = run_check(nb01.ex1, FP16_BITS, None)
    assert half.status == "not yet" and "1 of 2 parts passed" in half.message
    # exponent field = the power of two (2) without the bias
    feed_mistake(nb01.ex1, "exponent without the bias", "1 00010 1010000000", BF16_BITS)
    feed_mistake(nb01.ex1, "exponent without the bias", FP16_BITS, "1 00000010 1010000")
    # mantissa = 1.101b written whole, leading 1 included
    feed_mistake(nb01.ex1, "implicit 1 written out", "1 10001 1101000000", BF16_BITS)
    feed_mistake(nb01.ex1, "sign of a negative value", "0 10001 1010000000", "0 10000001 1010000")
    for wrong in ("1 10001 1010000001", "0110", "hello", 3.5, 16):
        r = run_check(nb01.ex1, wrong, BF16_BITS)
        assert r.status == "not yet", (wrong, r.message)


def test_ex1_hints_do_not_state_the_answer():
    for m in nb01.ex1.mistakes:
        assert FP16_BITS.split()[1] not in m.hint and BF16_BITS.split()[1] not in m.hint


def test_ex2_integers_in_bf16():
    # independent: the first integer that does not survive torch's BF16 cast, minus one
    n = next(i for i in range(1, 100_000) if torch.tensor(float(i)).to(torch.bfloat16).item() != i) - 1
    assert n == 2 ** (FORMATS["bf16"].mantissa_bits + 1)
    assert_passes(nb01.ex2, n)
    assert_passes(nb01.ex2, float(n))
    assert_not_attempted(nb01.ex2, None)
    feed_mistake(nb01.ex2, "forgetting the implicit 1", n // 2)
    feed_mistake(nb01.ex2, "forgetting the implicit 1", n // 2 - 1)
    feed_mistake(nb01.ex2, "one below the power of two", n - 1)
    feed_mistake(nb01.ex2, "the first integer lost", n + 1)
    feed_mistake(nb01.ex2, "the number of bits for n", 8)
    for wrong in (1000, "256", True, math.inf):
        assert run_check(nb01.ex2, wrong).status == "not yet"


def test_ex3_ulp_at_1000():
    x = torch.tensor(1000.0, dtype=torch.float16)
    ulp = (torch.nextafter(x, torch.tensor(math.inf, dtype=torch.float16)) - x).item()
    assert ulp == 0.5
    assert_passes(nb01.ex3, ulp)
    assert_passes(nb01.ex3, 2.0**-1)
    assert_not_attempted(nb01.ex3, ...)
    feed_mistake(nb01.ex3, "eps for the ulp", torch.finfo(torch.float16).eps)
    feed_mistake(nb01.ex3, "the power of two above", 2 * ulp)
    feed_mistake(nb01.ex3, "the exponent for the gap", -1)
    feed_mistake(nb01.ex3, "half the gap", ulp / 2)
    assert run_check(nb01.ex3, "0.5").status == "not yet"


def test_ex4_how_far_down():
    kept = {
        n
        for n, f in FORMATS.items()
        if f.torch_dtype is None or torch.tensor(1e-20).to(f.torch_dtype).item() != 0
    }
    assert kept == {"fp32", "tf32", "bf16"}
    assert_passes(nb01.ex4, kept)
    assert_passes(nb01.ex4, sorted(kept))
    assert_not_attempted(nb01.ex4, None)
    feed_mistake(nb01.ex4, "listing an FP8 format", kept | {"fp8_e4m3"})
    feed_mistake(nb01.ex4, "listing an FP8 format", {"fp8_e5m2"})
    feed_mistake(nb01.ex4, "sorting by mantissa bits", {"fp32", "tf32", "fp16"})
    feed_mistake(nb01.ex4, "forgetting TF32", {"fp32", "bf16"})
    for wrong in ({"fp32"}, {"nonsense"}, "fp32", 7):
        assert run_check(nb01.ex4, wrong).status == "not yet"


def test_ex4_a_hint_never_names_the_missing_format():
    """The hint for a set with one right format left out points at the idea, not at the format (it once said
    "TF32 ... keeps FP32's range" to the learner who had left out exactly TF32)."""
    kept = {n for n, f in FORMATS.items() if f.torch_dtype is None or torch.tensor(1e-20).to(f.torch_dtype).item()}
    for missing in kept:
        message = run_check(nb01.ex4, kept - {missing}).message
        hints = " ".join(line for line in message.splitlines() if "hint:" in line)
        assert FORMATS[missing].label.lower() not in hints.lower() and missing not in hints, (missing, hints)


@pytest.mark.parametrize("ex", [nb01.ex1, nb01.ex2, nb01.ex3, nb01.ex4])
def test_show_must_be_a_bool(ex):
    args = (None,) * (len(inspect.signature(ex.check).parameters) - 1)
    with pytest.raises((TypeError, ValueError), match="show"):
        ex.check(*args, show="yes")


def test_every_exercise_has_a_title_and_mistakes():
    for ex in (nb01.ex1, nb01.ex2, nb01.ex3, nb01.ex4):
        assert ex.notebook == "01" and ex.title and ex.mistakes
