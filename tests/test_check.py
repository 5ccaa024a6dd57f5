"""The exercise engine (check_base, check, check_items): every helper accepts right answers
and rejects the typical wrong ones, naming the mistake by its reason code.

Oracles: torch's own casts (``x.to(dtype)``), the bit patterns torch stores (``view`` as an
integer), ``torch.finfo``, autocast itself, and ``torch.amp.GradScaler`` for the in-place function check.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import check, text
from amp_lab.check import check_between, check_bits, check_dtype, check_tensor, check_value
from amp_lab.check_base import CheckResult
from amp_lab.check_items import check_choice, check_function, check_sequence, check_set

FP16_BITS = {
    torch.float16: (torch.int16, 16),
    torch.bfloat16: (torch.int16, 16),
    torch.float32: (torch.int32, 32),
}


def torch_bits(value: float, dtype: torch.dtype) -> str:
    """The bit pattern torch stores for ``value`` cast to ``dtype`` (the oracle for check_bits)."""
    int_dtype, n = FP16_BITS[dtype]
    pattern = int(torch.tensor(value, dtype=torch.float64).to(dtype).view(int_dtype).item()) & (2**n - 1)
    return f"{pattern:0{n}b}"


def next_up(x: float, dtype: torch.dtype) -> float:
    """The next representable value above positive ``x`` in ``dtype``, from its stored bits."""
    int_dtype, _ = FP16_BITS[dtype]
    t = torch.tensor(x, dtype=dtype)
    return float((t.view(int_dtype) + 1).view(dtype).item())


# --------------------------------------------------------------------------------------------
# The result object and printing
# --------------------------------------------------------------------------------------------


def test_result_prints_its_message_and_is_truthy_when_ok(capsys):
    r = check_value(1.5, 1.5)
    out = capsys.readouterr().out
    assert isinstance(r, CheckResult)
    assert r.ok and bool(r) and r.verdict == "exact"
    assert out.strip() == r.message
    assert r.message.startswith("✓ passed") and r.status == "passed"
    assert repr(r) == "CheckResult(verdict='exact', ok=True)"


def test_show_false_prints_nothing(capsys):
    r = check_value(2.0, 1.0, show=False)
    assert capsys.readouterr().out == ""
    assert r.verdict == "wrong" and not r


@pytest.mark.parametrize(
    "helper, args",
    [
        (check_value, (1.0,)),
        (check_tensor, (torch.ones(2),)),
        (check_bits, ()),
        (check_dtype, (torch.float32,)),
        (check_choice, ("a",)),
        (check_between, (1.0, 2.0)),
        (check_sequence, (["a", "b"],)),
        (check_set, ({"a", "b"},)),
    ],
)
@pytest.mark.parametrize("placeholder", [None, ...])
def test_unanswered_exercise_never_raises(helper, args, placeholder, capsys):
    kwargs = {"value": 1.0} if helper is check_bits else {}
    r = helper(placeholder, *args, **kwargs)
    assert r.verdict == "unanswered" and r.status == "not attempted" and not r.ok
    assert r.message.startswith("○ not attempted")
    assert r.details == {"answered": False} and r.code == "check.no_answer"
    assert capsys.readouterr().out.strip() == text.wrap(r.message)  # printed in lines that fit


def test_every_verdict_reads_as_one_of_three_states():
    """passed (exact or within tolerance), not yet, not attempted: the first words say which."""
    exact = check_value(1.0, 1.0, show=False)
    close = check_value(1.0 + 1e-9, 1.0, rtol=1e-6, show=False)
    wrong = check_value(2.0, 1.0, show=False)
    none = check_value(None, 1.0, show=False)
    assert [r.status for r in (exact, close, wrong, none)] == ["passed", "passed", "not yet", "not attempted"]
    assert close.message.startswith("✓ passed (within the stated tolerance)")
    assert exact.message.startswith("✓ passed: ") and wrong.message.startswith("✗ not yet: ")
    assert (exact.code, close.code, wrong.code) == (
        "check.exact_value",
        "check.close_tolerance",
        "check.percent_larger",
    )


def test_unanswered_function_names_the_variable_the_learner_sets():
    # the variable the learner sets is named (in backticks), not the function's name
    r = check_function(None, abs, [(1.0,)], name="unscale_and_clip_", show=False)
    assert r.code == "check.no_answer" and "`answer`" in r.message and "`unscale_and_clip_`" in r.message
    r = check_function(3, abs, [(1.0,)], show=False)
    assert r.status == "not yet" and r.code == "check.not_a_function"


# --------------------------------------------------------------------------------------------
# check_value: judged in the answer's precision
# --------------------------------------------------------------------------------------------


@settings(max_examples=200)
@given(
    x=st.floats(min_value=-6e4, max_value=6e4, allow_nan=False, allow_infinity=False),
    dtype=st.sampled_from([torch.float16, torch.bfloat16]),
)
def test_value_rounded_by_torch_is_exact_and_the_unrounded_input_is_close(x, dtype):
    stored = torch.tensor(x, dtype=torch.float64).to(dtype).item()
    assert check_value(stored, stored, dtype=dtype, show=False).verdict == "exact"
    # The unrounded input is the right dtype value, just not written exactly: "close".
    r = check_value(x, stored, dtype=dtype, show=False)
    assert r.verdict == ("exact" if x == stored else "close")
    assert r.ok


@settings(max_examples=200)
@given(
    x=st.floats(min_value=1e-3, max_value=1e4),
    dtype=st.sampled_from([torch.float16, torch.bfloat16]),
    ulps=st.integers(min_value=3, max_value=1000),
)
def test_value_several_ulps_away_is_wrong_with_the_distance_in_ulps(x, dtype, ulps):
    stored = torch.tensor(x, dtype=torch.float64).to(dtype).item()
    if stored == 0:
        return
    off = stored
    for _ in range(ulps):
        off = next_up(off, dtype)
    if not math.isfinite(off):
        return
    r = check_value(off, stored, dtype=dtype, show=False)
    assert r.verdict == "wrong"
    # One ulp of the dtype at the expected value, from torch's own spacing at that binade.
    assert r.details["ulps"] >= ulps - 1e-9


def test_value_one_ulp_away_is_close_within_eps():
    # float16 eps = 2**-10, so one ulp above 1.0 is within rtol = eps * |expected|.
    up = next_up(1.0, torch.float16)
    r = check_value(up, 1.0, dtype=torch.float16, show=False)
    assert r.verdict == "close" and r.code == "check.close_dtype"
    assert r.details["ulps"] == 1.0
    assert check_value(next_up(up, torch.float16), 1.0, dtype="fp16", show=False).verdict == "wrong"


def test_value_tolerance_comes_from_the_dtype():
    # 1 + 2**-9 is 2 float16 ulps away (wrong) but far less than a bfloat16 ulp (close).
    x = 1.0 + 2.0**-9
    assert torch.finfo(torch.bfloat16).eps > 2.0**-9 > torch.finfo(torch.float16).eps
    assert check_value(x, 1.0, dtype=torch.float16, show=False).verdict == "wrong"
    assert check_value(x, 1.0, dtype=torch.bfloat16, show=False).verdict == "close"


def test_fp16_max_written_roughly_is_close_because_it_rounds_to_it():
    r = check_value(65500, torch.finfo(torch.float16).max, dtype="fp16", show=False)
    assert r.verdict == "close" and r.details["max_abs_error"] == 4 and r.details["precision"] == "float16"
    assert r.code == "check.close_rounded"
    assert check_value(65000, torch.finfo(torch.float16).max, dtype="fp16", show=False).verdict == "wrong"


@pytest.mark.parametrize(
    "answer, expected, reasons",
    [
        (-0.25, 0.25, ("check.sign_flipped",)),
        (0.25 * 2**16, 0.25, ("check.exponent_too_large",)),
        (0.25 / 8, 0.25, ("check.exponent_too_small",)),
        (math.inf, 0.25, ("check.not_finite",)),
        (math.nan, 0.25, ("check.not_finite",)),
        (0.0, 0.25, ("check.all_zeros",)),
        ("0.25", 0.25, ("check.text_answer",)),
        (True, 1.0, ("check.bool_answer",)),
    ],
)
def test_value_names_the_typical_mistake(answer, expected, reasons):
    r = check_value(answer, expected, show=False)
    assert r.verdict == "wrong"
    assert r.reasons == reasons


@pytest.mark.parametrize(
    "answer, expected, code",
    [
        (3.0, 1.0, "check.times_larger"),
        (0.25, 1.0, "check.times_smaller"),
        (1.5, 1.0, "check.percent_larger"),
        (0.75, 1.0, "check.percent_smaller"),
        (-2.0, 1.0, "check.wrong_sign"),
        (math.inf, 1.0, "check.value_off"),
        ([0.25, 0.25], 0.25, "check.not_one_number"),  # two numbers where one is asked
    ],
)
def test_value_headline_says_how_far_off(answer, expected, code):
    assert check_value(answer, expected, show=False).code == code


def test_power_of_two_notes_name_the_idea_but_not_how_far_off():
    """A loss scale left in (2**16) and a value 8 times too small are diagnosed as a power of two, larger or
    smaller, without the exponent: with it, answer / 2**k would be a passing value (issue 24)."""
    for answer, expected, code in (
        (0.25 * 2**16, 0.25, "check.exponent_too_large"),
        (0.25 / 8, 0.25, "check.exponent_too_small"),
    ):
        r = check_value(answer, expected, show=False)
        assert r.verdict == "wrong" and code in r.reasons
        assert not any(s in r.message for s in ("16", "65536", "3 too", "8 times", "0.125", "2**")), r.message


@pytest.mark.parametrize("answer", [0.3, 0.26, 7.0, -0.25, 1e-3])
def test_a_wrong_number_is_not_told_the_distance_to_the_answer(answer):
    """Feedback on a wrong number says which way it is off, never by how much (a percentage, a ratio or a
    difference would let the learner compute the expected 0.25 from their own answer)."""
    r = check_value(answer, 0.25, show=False)
    assert r.verdict == "wrong"
    assert "0.25" not in r.message and "%" not in r.message and " off" not in r.message, r.message
    assert not any(
        ch.isdigit() for ch in r.message.replace(str(answer), "").replace("2.", "").replace(" 2", "")
    ), r.message


def test_value_in_the_wrong_format_is_named():
    x = 0.1
    fp16 = torch.tensor(x).half().item()
    bf16 = torch.tensor(x).bfloat16().item()
    r = check_value(bf16, fp16, dtype="fp16", show=False)
    assert r.verdict == "wrong" and r.reasons == ("check.rounded_to_other",)
    # The unrounded input, in an exercise about formats: the note says to round to the stored value.
    r = check_value(x, fp16, dtype=torch.float64, show=False)
    assert r.verdict == "wrong" and r.reasons == ("check.unrounded_in_other",)
    r = check_value(x, torch.tensor(fp16, dtype=torch.float32), show=False)  # the expected value's own dtype
    assert r.verdict == "wrong" and r.reasons == ("check.unrounded_in_other",)


@pytest.mark.parametrize(
    "answer, expected", [(255, 256), (0.0156, 2.0**-6), (0.1, torch.tensor(0.1).half().item())]
)
def test_value_plain_numbers_get_no_format_notes(answer, expected):
    # Rounded to bfloat16 (or fp8) these answers become the expected value, but a plain number
    # exercise is not about a format: saying so would mislead.
    low = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)
    assert any(torch.tensor(float(answer)).to(d).item() == expected for d in low)
    r = check_value(answer, expected, show=False)
    assert r.verdict == "wrong"
    assert not {"check.rounded_to_other", "check.unrounded_in_other", "check.not_rounded"} & set(r.reasons)


def test_value_format_notes_when_the_exercise_names_a_dtype():
    assert torch.tensor(0.0156).bfloat16().item() == 2.0**-6
    r = check_value(0.0156, 2.0**-6, dtype="fp16", show=False)
    assert r.verdict == "wrong" and r.reasons == ("check.unrounded_in_other",) and "to bfloat16" in r.message
    r = check_tensor([0.0156], torch.tensor([2.0**-6], dtype=torch.float16), show=False)
    assert r.verdict == "wrong" and r.reasons == ("check.unrounded_in_other",)
    r = check_tensor([0.0156], [2.0**-6], show=False)
    assert r.verdict == "wrong" and r.reasons == ()


def test_value_signed_zero_is_close_not_exact():
    r = check_value(-0.0, 0.0, show=False)
    assert r.verdict == "close" and r.reasons == ("check.sign_of_zero",)


def test_value_nan_equals_nan():
    assert check_value(math.nan, math.nan, show=False).verdict == "exact"


def test_a_hint_shows_under_a_wrong_verdict_only(g):
    x = torch.randn(8, generator=torch.Generator().manual_seed(2))
    results = {
        "wrong": [
            check_value(3.0, 2.0, hint="h", show=False),
            check_tensor([g * 2], [g], hint="h", show=False),
            check_function(lambda t: t * 2, lambda t: t, [(x,)], hint="h", show=False),
        ],
        "exact": [check_value(2.0, 2.0, hint="h", show=False)],
        "close": [
            check_value(1.0 + 2.0**-11, 1.0, dtype="fp16", hint="h", show=False),
            check_value(1.0005, 1.0, rtol=1e-3, hint="h", show=False),
            check_tensor(g.bfloat16(), g, hint="h", show=False),
            check_tensor([g.bfloat16()], [g], hint="h", show=False),
            check_function(lambda t: t.bfloat16(), lambda t: t, [(x,)], hint="h", show=False),
        ],
    }
    for verdict, rs in results.items():
        for r in rs:
            assert r.verdict == verdict and r.message.endswith("\n  hint: h") == (verdict == "wrong")
    assert "expected" not in results["wrong"][0].message


def test_explicit_tolerance_is_the_exercises_not_float64s():
    r = check_value(1.0005, 1.0, rtol=1e-3, show=False)
    assert r.verdict == "close" and (r.details["rtol"], r.details["atol"]) == (1e-3, 0.0)
    assert r.code == "check.close_tolerance"
    r = check_value(1.0 + 2.0**-52, 1.0, show=False)  # 1 ulp: within float64's own tolerance
    assert r.verdict == "close" and r.details["rtol"] == torch.finfo(torch.float64).eps
    assert r.code == "check.close_dtype"
    r = check_tensor(torch.ones(3) + 1e-4, torch.ones(3), atol=1e-3, show=False)
    assert r.verdict == "close" and r.details["atol"] == 1e-3


def test_value_accepts_tf32_and_fp8_precisions():
    # TF32 keeps 10 mantissa bits: 1 + 2**-11 rounds to 1.0 (ties to even) -> close.
    assert check_value(1.0 + 2.0**-11, 1.0, dtype="tf32", show=False).verdict == "close"
    # float8_e4m3fn: 448 is the max; 440 rounds to 448.
    e4m3 = torch.tensor(440.0).to(torch.float8_e4m3fn).float().item()
    assert e4m3 == 448.0
    assert check_value(440.0, 448.0, dtype="fp8_e4m3", show=False).verdict == "close"


# --------------------------------------------------------------------------------------------
# check_tensor
# --------------------------------------------------------------------------------------------


@pytest.fixture
def g():
    return torch.randn(4, 5, generator=torch.Generator().manual_seed(0))


def test_tensor_exact_and_low_precision_answer_close(g):
    assert check_tensor(g.clone(), g, show=False).code == "check.exact_tensor"
    for dtype in (torch.float16, torch.bfloat16):
        r = check_tensor(g.to(dtype), g, show=False)
        assert r.verdict == "close", r.message
        assert r.details["precision"] == str(dtype).removeprefix("torch.")


def test_tensor_bf16_answer_judged_in_fp16_is_wrong(g):
    r = check_tensor(g.bfloat16(), g, dtype=torch.float16, show=False)
    assert r.verdict == "wrong"
    assert r.reasons == ("check.rounded_to_other",)


def test_tensor_loss_scale_left_in(g):
    r = check_tensor(g * 2.0**16, g, show=False)
    assert r.verdict == "wrong"
    assert r.reasons == ("check.exponent_too_large",)
    assert r.details["elements_off"] == g.numel()


def test_tensor_shape_mistakes(g):
    r = check_tensor(g.T, g, show=False)
    assert r.verdict == "wrong" and r.reasons == ("check.transposed",) and r.code == "check.shape"
    assert check_tensor(g.flatten(), g, show=False).reasons == ("check.reshaped",)
    assert check_tensor(g.sum(), g, show=False).reasons == ("check.reduced",)
    assert check_tensor(g[:2], g, show=False).reasons == ()


def test_tensor_underflowed_elements_and_worst_index(g):
    a = g.clone()
    a[2, 3] = 0.0
    r = check_tensor(a, g, show=False)
    assert r.verdict == "wrong"
    assert r.details["worst_index"] == (2, 3)
    assert r.details["elements_off"] == 1 and r.code == "check.elements_off"
    assert r.reasons == ("check.some_zeros",)


def test_tensor_overflow_to_inf(g):
    a = g.clone()
    a[0, 0] = math.inf
    r = check_tensor(a, g, show=False)
    assert r.verdict == "wrong" and r.reasons == ("check.not_finite",) and r.details["worst_index"] == (0, 0)


def test_tensor_lists_of_gradients(g):
    grads = [g, g[:2]]
    assert check_tensor([t.clone() for t in grads], grads, show=False).code == "check.tensors_exact"
    r = check_tensor([g.clone(), g[:2] * 2], grads, show=False)
    assert r.verdict == "wrong" and [x.verdict for x in r.details["items"]] == ["exact", "wrong"]
    assert r.reasons == ("check.exponent_too_large",) and r.code == "check.tensors_wrong"
    assert check_tensor([g], grads, show=False).code == "check.not_tensors"


def test_tensor_explicit_tolerances(g):
    noisy = g + 1e-3
    assert check_tensor(noisy, g, show=False).verdict == "wrong"
    assert check_tensor(noisy, g, atol=2e-3, show=False).verdict == "close"


def test_tensor_answer_as_nested_list(g):
    assert check_tensor(g.tolist(), g, show=False).verdict == "exact"


# --------------------------------------------------------------------------------------------
# check_between
# --------------------------------------------------------------------------------------------


def test_between_accepts_the_range_and_explains_each_side():
    assert check_between(2**14, 2**12, 2**20, show=False).code == "check.in_range"
    assert check_between(2**12, 2**12, 2**20, show=False).ok
    low = check_between(2**10, 2**12, 2**20, below="gradients still underflow", show=False)
    assert low.verdict == "wrong" and low.details["value"] == 2**10 and low.code == "check.below_range"
    assert low.message.endswith("gradients still underflow")  # the exercise's own words for that side
    high = check_between(2**24, 2**12, 2**20, above="the largest gradient overflows", show=False)
    assert high.code == "check.above_range" and high.message.endswith("the largest gradient overflows")
    assert "2**" not in high.message and "factor" not in high.message  # how far out would give the range away


# --------------------------------------------------------------------------------------------
# check_bits, against the bits torch stores
# --------------------------------------------------------------------------------------------


@settings(max_examples=200)
@given(
    x=st.floats(min_value=-6e4, max_value=6e4, allow_nan=False),
    dtype=st.sampled_from([torch.float16, torch.bfloat16]),
)
def test_bits_torch_pattern_is_exact(x, dtype):
    bits = torch_bits(x, dtype)
    fmt = "fp16" if dtype == torch.float16 else "bf16"
    assert check_bits(bits, value=x, fmt=fmt, show=False).verdict == "exact"
    # Spaced between the fields, as learners write them.
    ne = 5 if dtype == torch.float16 else 8
    spaced = f"{bits[0]} {bits[1 : 1 + ne]} {bits[1 + ne :]}"
    assert check_bits(spaced, value=x, fmt=fmt, show=False).verdict == "exact"
    assert check_bits(int(bits, 2), value=x, fmt=fmt, show=False).verdict == "exact"


@settings(max_examples=100)
@given(
    x=st.floats(min_value=1e-4, max_value=6e4, allow_nan=False),
    position=st.integers(min_value=0, max_value=15),
)
def test_bits_any_flipped_bit_is_wrong_and_the_field_is_named(x, position):
    bits = torch_bits(x, torch.float16)
    flipped = bits[:position] + ("1" if bits[position] == "0" else "0") + bits[position + 1 :]
    r = check_bits(flipped, value=x, fmt="fp16", show=False)
    field = "sign" if position == 0 else ("exponent" if position <= 5 else "mantissa")
    if r.verdict == "close":  # two NaN patterns
        assert math.isnan(x)
        return
    assert r.verdict == "wrong"
    assert r.details["wrong_fields"] == [field]


def test_bits_typical_mistakes():
    # 1.0 in fp16 is 0 01111 0000000000 (bias 15).
    assert torch_bits(1.0, torch.float16) == "0011110000000000"
    r = check_bits("0 01110 0000000000", value=1.0, show=False)
    assert r.details["wrong_fields"] == ["exponent"] and r.reasons == ("check.exponent_field",)
    assert r.details["your_value"] == 0.5 and "2**-1" in r.message  # field 14 - bias 15, by hand
    r = check_bits("0 1111 0000000000", value=1.0, show=False)
    assert r.code == "check.bits_length" and len(r.details["bits"]) == 15
    r = check_bits("0 01111 000000000a", value=1.0, show=False)
    assert r.code == "check.bits_not_binary" and r.details == {}
    # Off by one in the last place: a rounding mistake.
    r = check_bits("0 01111 0000000001", value=1.0, show=False)
    assert r.reasons == ("check.mantissa_last_place",)
    r = check_bits("1 01111 0000000011", value=1.0, show=False)
    assert r.reasons == ("check.sign_bit", "check.mantissa_bits")
    # Hex strings are read as integers.
    assert check_bits("0x3c00", value=1.0, show=False).verdict == "exact"
    assert check_bits(2**16, value=1.0, show=False).code == "check.bits_too_big"
    assert check_bits(1.0, value=1.0, show=False).code == "check.bits_not_text"


def test_bits_truncation_instead_of_rounding_is_caught():
    # 0.1 in bfloat16: the dropped bits of float32(0.1) round up, so truncating is one ulp low.
    f32 = int(torch.tensor(0.1, dtype=torch.float32).view(torch.int32).item())
    truncated = f"{f32 >> 16:016b}"
    assert truncated != torch_bits(0.1, torch.bfloat16)
    r = check_bits(truncated, value=0.1, fmt="bf16", show=False)
    assert r.verdict == "wrong" and r.reasons == ("check.mantissa_last_place",)


def test_bits_any_nan_pattern_is_close():
    r = check_bits("0 11111 1111111111", value=math.nan, show=False)
    assert r.verdict == "close" and r.ok and r.reasons == ("check.nan_patterns",)


# --------------------------------------------------------------------------------------------
# check_dtype, against autocast itself
# --------------------------------------------------------------------------------------------


def test_dtype_names_and_tensors_accepted():
    for answer in (
        torch.bfloat16,
        "bf16",
        "torch.bfloat16",
        " BFloat16 ",
        torch.ones(1, dtype=torch.bfloat16),
    ):
        assert check_dtype(answer, torch.bfloat16, show=False).verdict == "exact"


def test_dtype_wrong_answers_explain_the_difference():
    r = check_dtype(torch.float16, torch.bfloat16, show=False)
    assert r.verdict == "wrong" and r.reasons == ("check.dtype_layout", "check.which_16_bit")
    assert "bfloat16" not in r.message.replace("and bfloat16 on CPU", "").replace(
        "picks bfloat16", ""
    )  # not told
    r = check_dtype("banana", torch.float32, show=False)
    assert r.code == "check.not_a_dtype" and r.reasons == ()
    # A float32 guess for a low-precision result, and the other way round
    assert check_dtype(torch.float32, torch.bfloat16, show=False).reasons[1] == "check.runs_low_precision"
    assert check_dtype(torch.bfloat16, torch.float32, show=False).reasons[1] == "check.kept_in_float32"


def test_dtypes_against_cpu_autocast():
    a = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        truth = {"mm": (a @ a).dtype, "softmax": torch.softmax(a, -1).dtype, "add": (a + a).dtype}
    for op, dtype in truth.items():
        assert check_dtype(dtype, dtype, show=False).code == "check.dtype_right", op
        assert check_dtype(str(dtype), dtype, show=False).ok, op
    assert check_dtype(torch.bfloat16, truth["mm"], show=False).ok
    assert check_dtype(torch.float32, truth["mm"], show=False).reasons[1] == "check.runs_low_precision"


# --------------------------------------------------------------------------------------------
# check_choice / check_sequence
# --------------------------------------------------------------------------------------------


def test_choice():
    assert check_choice(" B ", "b", show=False).verdict == "exact"
    assert check_choice("c", {"b", "c"}, show=False).ok
    r = check_choice("a", "b", explanations={"a": "the CPU has no bf16 hardware"}, show=False)
    assert r.verdict == "wrong" and "no bf16 hardware" in r.message
    r = check_choice("e", "b", options=["a", "b", "c"], show=False)
    assert r.verdict == "wrong" and r.code == "check.not_an_option"
    assert check_choice(2, 2, show=False).code == "check.choice_right"
    assert check_choice(3, 2, show=False).code == "check.choice_wrong"
    assert check_choice("a", "b", show=False).reasons == ("check.reread",)  # no explanation, no hint


def test_set():
    right = {"fp32", "tf32", "bf16"}
    assert check_set({"BF16", "fp32", "tf32"}, right, show=False).code == "check.set_right"
    assert check_set(["bf16", "tf32", "fp32"], right, show=False).verdict == "exact"
    r = check_set({"fp32", "bf16"}, right, show=False)
    assert (
        r.code == "check.set_partly" and r.details == {"missing": 1, "extra": []} and "tf32" not in r.message
    )
    r = check_set(
        {"fp32", "bf16", "tf32", "fp16"}, right, explanations={"fp16": "5 exponent bits"}, show=False
    )
    assert r.details == {"missing": 0, "extra": ["fp16"]} and "5 exponent bits" in r.message
    assert r.code == "check.set_extra"
    r = check_set({"fp12"}, right, options=["fp32", "bf16"], show=False)
    assert r.verdict == "wrong" and r.details["extra"] == ["fp12"]
    assert check_set("fp32", {"fp32"}, show=False).ok
    assert check_set(object(), right, show=False).code == "check.not_a_set"


RECIPE = ["autocast forward", "scale(loss).backward()", "unscale_", "clip_grad_norm_", "step", "update"]


def test_sequence():
    assert check_sequence(list(RECIPE), RECIPE, show=False).code == "check.order_right"
    swapped = [RECIPE[0], RECIPE[1], RECIPE[3], RECIPE[2], RECIPE[4], RECIPE[5]]
    r = check_sequence(swapped, RECIPE, show=False)
    assert (
        r.code == "check.order_items_right"
        and r.details["first_wrong"] == 2
        and r.reasons == ("check.comes_later",)
    )
    r = check_sequence([s for s in RECIPE if s != "unscale_"], RECIPE, show=False)
    assert r.details["missing"] == ["unscale_"] and r.details["extra"] == []
    r = check_sequence([*RECIPE, "zero_grad"], RECIPE, show=False)
    assert r.details["extra"] == ["zero_grad"] and r.details["missing"] == []
    r = check_sequence([*RECIPE, "step"], RECIPE, show=False)
    assert r.details["repeated"] == ["step"] and r.code == "check.order_wrong"
    assert check_sequence("abc", RECIPE, show=False).code == "check.not_a_list"


# --------------------------------------------------------------------------------------------
# check_function: a learner's unscale_ against torch.amp.GradScaler
# --------------------------------------------------------------------------------------------


def gradscaler_unscale_(grads: list[torch.Tensor], scale: float) -> None:
    """The oracle: GradScaler.unscale_ on parameters holding ``grads``."""
    params = [torch.nn.Parameter(torch.zeros_like(t)) for t in grads]
    for p, t in zip(params, grads, strict=True):
        p.grad = t.clone()
    opt = torch.optim.SGD(params, lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    scaler.scale(torch.ones(()))  # creates the scale tensor, as scaling a loss does
    scaler.unscale_(opt)
    for p, t in zip(params, grads, strict=True):
        t.copy_(p.grad)


def make_cases():
    gen = torch.Generator().manual_seed(1)
    return [
        ([torch.randn(3, generator=gen) * 2**10, torch.randn(2, 2, generator=gen)], 1024.0),
        ([torch.randn(5, generator=gen) * 2**16], 2.0**16),
    ]


def test_function_right_unscale_is_exact():
    def unscale_(grads, scale):
        inv = 1.0 / scale
        for t in grads:
            t.mul_(inv)

    assert (
        check_function(unscale_, gradscaler_unscale_, make_cases(), show=False).code == "check.function_exact"
    )


def test_function_typical_mistakes():
    def multiplies(grads, scale):
        for t in grads:
            t.mul_(scale)

    r = check_function(multiplies, gradscaler_unscale_, make_cases(), name="unscale_", show=False)
    assert r.code == "check.function_wrong" and r.details["verdicts"] == ["wrong", "wrong"]
    assert r.reasons == ("check.exponent_too_large",)  # multiplied by the scale squared: a power of two

    def not_in_place(grads, scale):
        return [t / scale for t in grads]

    r = check_function(not_in_place, gradscaler_unscale_, make_cases(), show=False)
    assert r.reasons == ("check.not_in_place",)

    def unfinished(grads, scale):
        raise NotImplementedError("write me")

    r = check_function(unfinished, gradscaler_unscale_, make_cases(), show=False)
    assert r.reasons == ("check.raised",) and "NotImplementedError: write me" in r.message

    def no_return(x):
        x * 2

    r = check_function(no_return, lambda x: x * 2, [torch.ones(2)], show=False)
    assert r.reasons == ("check.no_return",)
    assert check_function(3, abs, [(1,)], show=False).verdict == "wrong"


def test_function_names_each_failing_case_and_lists_at_most_five():
    cases = [(2.0**k, k, k % 2 == 0) for k in range(12, 20)]

    def reference(scale, tracker, flag):
        return scale / 2, tracker

    def no_return(scale, tracker, flag):
        scale / 2

    r = check_function(no_return, reference, cases, show=False)
    assert (
        r.verdict == "wrong" and r.details["verdicts"] == ["wrong"] * 8 and r.reasons == ("check.no_return",)
    )
    assert "case 1 (arguments 2.0**12, 12, True): " in r.message
    assert "case 5 (arguments 2.0**16, 16, True)" in r.message and "case 6" not in r.message
    assert "... and 3 more cases not shown." in r.message

    def one_off(scale, tracker, flag):
        return (scale / 2, tracker + (tracker == 15))

    r = check_function(one_off, reference, cases, show=False)
    assert r.details["verdicts"].count("wrong") == 1 and "case 4 (arguments 2.0**15, 15, False)" in r.message
    assert "not shown" not in r.message


def test_function_compares_returned_values_in_their_precision():
    x = torch.randn(8, generator=torch.Generator().manual_seed(2))
    r = check_function(lambda t: t.bfloat16(), lambda t: t, [(x,)], show=False)
    assert r.verdict == "close" and r.code == "check.function_close"
    r = check_function(lambda t: t.bfloat16(), lambda t: t, [(x,)], dtype="fp16", show=False)
    assert r.verdict == "wrong"


# ---- every bad answer gets clear feedback; the learner's mistakes never raise ----

_C = check


def test_check_value_huge_ints():
    r = _C.check_value(2**2000, 1.0, show=False)
    assert r.verdict == "wrong" and r.reasons == ("check.huge_int_answer",) and "2001 bits" in r.message


@pytest.mark.parametrize("answer", [np.bool_(True), torch.tensor(True), torch.tensor([True, False]), [True]])
def test_bools_are_not_numbers(answer):
    r = (
        _C.check_value(answer, 1.0, show=False)
        if not isinstance(answer, list)
        else _C.check_tensor(answer, torch.ones(1), show=False)
    )
    assert r.verdict == "wrong" and r.reasons == ("check.bool_answer",)


def test_bool_tensors_compare_with_bool_expectations():
    assert _C.check_tensor(torch.tensor([True]), torch.tensor([True]), show=False).verdict == "exact"
    assert _C.check_tensor(torch.tensor([False]), torch.tensor([True]), show=False).verdict == "wrong"


@pytest.mark.parametrize("answer", [np.float32(0.5), np.float64(0.5), np.int64(1) / 2])
def test_numpy_scalars_are_numbers_in_checks(answer):
    assert _C.check_value(answer, 0.5, show=False).verdict == "exact"


def test_check_function_compares_other_results_with_eq():
    assert check_function(lambda: "fp16", lambda: "fp16", [()], show=False).verdict == "exact"
    assert check_function(lambda: None, lambda: None, [()], show=False).verdict == "exact"  # nothing changed
    r = check_function(lambda: {"w": 1}, lambda: {"w": 2}, [()], show=False)
    assert r.verdict == "wrong" and "result" in r.message


def test_check_bits_accepts_numpy_integers():
    assert _C.check_bits(np.int64(0x3C00), value=1.0, fmt="fp16", show=False).verdict == "exact"
    assert _C.check_bits(np.uint16(0x3C01), value=1.0, fmt="fp16", show=False).verdict == "wrong"


@pytest.mark.parametrize(
    "call",
    [
        lambda: check_choice(["a"], "a", show=False),
        lambda: check_set([["a"]], ["a"], show=False),
        lambda: check_sequence([["a"], ["a"]], ["a"], show=False),
    ],
)
def test_unhashable_answers_get_feedback_not_a_crash(call):
    assert call().verdict == "wrong"


@pytest.mark.parametrize(
    "answer,expected,words",
    [
        (torch.complex128, torch.float16, "complex type of 128 bits"),
        (torch.complex64, torch.float16, "complex type of 64 bits"),
        (torch.qint8, torch.float16, "qint8 has an integer type of 8 bits"),
        (torch.int16, torch.float16, "integer type of 16 bits"),
        (torch.float8_e4m3fn, torch.float16, "4 exponent and 3 mantissa bits"),
    ],
)
def test_check_dtype_describes_every_dtype(answer, expected, words):
    r = check.check_dtype(answer, expected, show=False)
    assert r.verdict == "wrong" and words in r.message


@pytest.mark.parametrize(
    "call",
    [
        lambda: check_set(range(10**12), {"a"}, show=False),
        lambda: check_set(iter(int, 1), {"a"}, show=False),  # endless: read no further than the bound
        lambda: check_sequence(range(10**12), ["a"], show=False),
    ],
)
def test_a_learners_huge_answer_is_a_verdict(call):
    r = call()
    assert r.verdict == "wrong" and r.code == "check.too_many_items"


def test_check_set_reads_an_empty_dict_as_an_empty_set():
    r = check_set({}, {"a"}, show=False)
    assert r.verdict == "wrong" and r.details == {"missing": 1, "extra": []}


def test_check_function_still_reports_the_learners_errors():
    r = check_function(lambda x: x.nope(), torch.sin, [torch.ones(2)], show=False)
    assert r.verdict == "wrong" and r.reasons == ("check.raised",) and "AttributeError" in r.message
