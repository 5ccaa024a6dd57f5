"""amp_lab.formats against torch's own dtypes, casts and bit patterns."""

import math
import re
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import format_explorer as FE
from amp_lab import formats as F

TORCH_FORMATS = ["fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"]
INT_VIEW = {8: torch.uint8, 16: torch.int16, 32: torch.int32}


def torch_bits(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The bit patterns of ``x`` cast to ``dtype`` by torch, as non-negative int64."""
    nbits = torch.finfo(dtype).bits
    raw = x.float().to(dtype).view(INT_VIEW[nbits]).long()
    return raw & ((1 << nbits) - 1)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Element-wise: equal float32 bit patterns, or both NaN (NaN payloads/signs are not compared)."""
    a, b = a.float(), b.float()
    both_nan = torch.isnan(a) & torch.isnan(b)
    return both_nan | (a.view(torch.int32) == b.view(torch.int32))


@pytest.mark.parametrize("name", TORCH_FORMATS)
def test_limits_match_torch_finfo(name):
    f = F.FORMATS[name]
    fi = torch.finfo(f.torch_dtype)
    assert f.total_bits == fi.bits
    assert f.max == fi.max
    assert f.min_normal == fi.smallest_normal
    assert f.eps == fi.eps
    # the smallest subnormal is the bit pattern 0...01, decoded by torch
    one = torch.tensor([1], dtype=INT_VIEW[fi.bits]).view(f.torch_dtype).float().item()
    assert f.min_subnormal == one
    # the bias is the exponent field of 1.0
    field = int(torch_bits(torch.tensor([1.0]), f.torch_dtype)) >> f.mantissa_bits
    assert f.bias == field


def test_tf32_limits_from_bit_widths():
    f = F.FORMATS["tf32"]
    assert (f.exponent_bits, f.mantissa_bits, f.bias, f.total_bits) == (8, 10, 127, 19)
    assert f.max == (2 - 2**-10) * 2.0**127
    assert f.min_normal == 2.0**-126 == torch.finfo(torch.float32).smallest_normal
    assert f.min_subnormal == 2.0**-136
    assert f.eps == 2.0**-10 == torch.finfo(torch.float16).eps


def test_fp8_e4m3_overflow_rule_matches_torch():
    f = F.FORMATS["fp8_e4m3"]
    cast = torch.tensor([500.0, 1e30, float("inf"), -float("inf")]).to(torch.float8_e4m3fn).float()
    if f.overflow == "saturate":
        assert cast.tolist() == [448.0, 448.0, 448.0, -448.0]
    else:
        assert f.overflow == "nan" and bool(torch.isnan(cast).all())
    assert F.FORMATS["fp8_e5m2"].overflow == "inf"
    assert F.FORMATS["fp8_e5m2"].max == 57344.0
    assert f.max == 448.0 and f.finite_only


# --------------------------------------------------------------------------------------------
# round_to against torch's casts: >= 10^5 values per format over every range, plus specials
# --------------------------------------------------------------------------------------------


def sample_values(name: str, n: int = 100_000, seed: int = 0) -> torch.Tensor:
    """float32 values covering the format's subnormal, normal and overflow ranges, ties and specials."""
    f = F.FORMATS[name]
    g = torch.Generator().manual_seed(seed)
    lo = math.log2(f.min_subnormal) - 3
    hi = min(math.log2(f.max) + 3, 127.9)
    # log-uniform magnitudes with random low bits, both signs
    mags = torch.exp2(lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)).float()
    signs = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    spread = mags * signs
    # any float32 bit pattern at all (covers NaN payloads, inf, subnormals of fp32)
    raw = torch.randint(-(2**31), 2**31 - 1, (n // 4,), generator=g, dtype=torch.int64).to(torch.int32)
    anybits = raw.view(torch.float32)
    # exact ties: midpoints between neighbouring values of the format, and their neighbours
    ties = torch.empty(0)
    if name != "fp32":
        if f.torch_dtype is not None:
            nb = f.total_bits
            pats = torch.randint(0, 2**nb - 1, (n // 8,), generator=g, dtype=torch.int64)
            vals = torch.tensor([F.from_bits(int(p), f) for p in pats.tolist()])
        else:
            vals = F.round_to(spread[: n // 8], f)
        vals = vals[torch.isfinite(vals)].double()
        ulps = torch.tensor([F.format_ulp(v, f) for v in vals.tolist()], dtype=torch.float64)
        mid = vals + torch.copysign(ulps / 2, vals + 0.0)
        mid = mid.float()
        # only keep midpoints float32 holds exactly
        mid = mid[mid.double() == (vals + torch.copysign(ulps / 2, vals + 0.0))]
        eps32 = torch.nextafter(mid, torch.full_like(mid, math.inf))
        ties = torch.cat([mid, eps32, torch.nextafter(mid, torch.full_like(mid, -math.inf))])
    edges = []
    for v in (f.max, f.min_normal, f.min_subnormal, f.min_subnormal / 2, f.max + f.max * f.eps / 4):
        edges += [v, -v]
    specials = torch.tensor(
        [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 3.4028234663852886e38, *edges]
    )
    return torch.cat([spread, anybits, ties, specials.float()])


@pytest.mark.parametrize("name", TORCH_FORMATS)
def test_round_to_equals_torch_cast_bit_for_bit(name):
    f = F.FORMATS[name]
    x = sample_values(name)
    assert x.numel() >= 100_000
    expected = x.to(f.torch_dtype).float()
    got = F.round_to(x, name)
    assert got.dtype == torch.float32 and got.shape == x.shape
    assert bool(same_bits(got, expected).all())


@pytest.mark.parametrize("name", TORCH_FORMATS)
def test_emulate_round_equals_torch_cast_bit_for_bit(name):
    # an independent implementation from the bit widths only: this is what validates TF32's model
    f = F.FORMATS[name]
    x = sample_values(name, seed=1)
    expected = x.to(f.torch_dtype).float()
    got = F.emulate_round(x, name)
    bad = ~same_bits(got, expected)
    assert not bool(bad.any()), list(
        zip(x[bad][:5].tolist(), got[bad][:5].tolist(), expected[bad][:5].tolist(), strict=True)
    )


def tf32_by_bits(t: torch.Tensor) -> torch.Tensor:
    """An independent TF32 rounder: float32's bit pattern rounded to 10 mantissa bits, ties to even (a carry
    into the exponent is the next binade, or inf); inf and NaN pass through."""
    drop = 23 - 10
    bits = t.contiguous().view(torch.int32)
    rounded = (bits + ((1 << (drop - 1)) - 1) + ((bits >> drop) & 1)) & ~((1 << drop) - 1)
    return torch.where(torch.isfinite(t), rounded.view(torch.float32), t)


def test_round_to_tf32_equals_rounding_the_float32_bits():
    every_binade = sample_values("tf32", seed=2)
    random_bits = torch.randint(-(2**31), 2**31, (200_000,), generator=torch.Generator().manual_seed(3))
    for x in (every_binade, random_bits.to(torch.int32).view(torch.float32)):
        assert bool(same_bits(F.round_to(x, "tf32"), tf32_by_bits(x)).all())


def f32(v: float) -> float:
    return torch.tensor(v, dtype=torch.float32).item()


@pytest.mark.parametrize(
    "x, expected",
    [
        (1.0, 1.0),
        (1 + 2**-10, 1 + 2**-10),  # representable
        (1 + 2**-11, 1.0),  # tie, 1.0 has the even mantissa
        (1 + 3 * 2**-11, 1 + 2**-9),  # tie, rounds up to the even neighbour
        (1 + 2**-11 + 2**-23, 1 + 2**-10),  # just above the tie
        (-(1 + 2**-11), -1.0),  # ties are symmetric
        (2 - 2**-11, 2.0),  # tie with a carry into the exponent
        (2 - 2**-11 - 2**-22, 2 - 2**-10),  # just below that tie
        (2.0**-136, 2.0**-136),  # min subnormal
        (2.0**-137, 0.0),  # tie between 0 and min subnormal: to even (0)
        (3 * 2.0**-137, 2.0**-135),  # subnormal tie, rounds to even mantissa 2
        (2.0**-149, 0.0),  # fp32's min subnormal is below TF32's half-step
        ((1 - 2**-11) * 2.0**-126, 2.0**-126),  # subnormal rounds up into the normal range
        ((2 - 2**-10) * 2.0**127, (2 - 2**-10) * 2.0**127),  # TF32 max
        ((2 - 2**-10 + 2**-12) * 2.0**127, (2 - 2**-10) * 2.0**127),  # below the overflow tie
        ((2 - 2**-11) * 2.0**127, math.inf),  # the overflow tie goes to inf (even)
        (3.4028234663852886e38, math.inf),  # FLT_MAX overflows
        (-3.4028234663852886e38, -math.inf),
        (math.inf, math.inf),
        (-math.inf, -math.inf),
    ],
)
def test_tf32_hand_cases(x, expected):
    assert f32(x) == x  # every input is an exact float32
    got = F.round_to(x, "tf32").item()
    assert got == expected
    assert math.copysign(1, got) == math.copysign(1, expected)


def test_tf32_zero_nan_and_low_bits():
    z = F.round_to([0.0, -0.0, math.nan], "tf32")
    assert z[0].item() == 0 and math.copysign(1, z[0].item()) == 1
    assert z[1].item() == 0 and math.copysign(1, z[1].item()) == -1
    assert math.isnan(z[2].item())
    # a NaN whose payload lives only in the low 13 bits must stay NaN, not become inf
    low_nan = torch.tensor([0x7F800001], dtype=torch.int32).view(torch.float32)
    assert bool(torch.isnan(F.round_to(low_nan, "tf32")).all())
    # the 13 low bits of every result are zero
    x = torch.randn(1000) * 1e3
    assert bool(((F.round_to(x, "tf32").view(torch.int32) & 0x1FFF) == 0).all())


def test_round_to_inputs():
    assert F.round_to(0.1, "fp16").dtype == torch.float32
    assert F.round_to(0.1, "fp16").item() == torch.tensor(0.1).half().float().item()
    assert F.round_to([1.0, 70000.0], "fp16").tolist() == [1.0, math.inf]
    x64 = torch.tensor([0.1, 1e-5, 3.0e38], dtype=torch.float64)
    assert bool(same_bits(F.round_to(x64, "bf16"), torch.tensor([exact_round(v, "bf16") for v in x64.tolist()])).all())
    x = torch.randn(3, 4)
    r = F.round_to(x, "fp32")
    assert torch.equal(r, x) and r.data_ptr() != x.data_ptr()
    with pytest.raises(ValueError, match="x must be"):
        F.round_to("abc", "fp16")


def exact_round(x: float, name: str) -> float:
    """An independent correct rounding of a float64 to a format that does not overflow: in exact rational
    arithmetic, the nearest multiple of the value's quantum, ties to even (``round`` of a Fraction)."""
    f = F.FORMATS[name]
    if x == 0:
        return x
    quantum = Fraction(2) ** (max(math.frexp(abs(x))[1] - 1, f.emin) - f.mantissa_bits)
    return math.copysign(float(round(Fraction(abs(x)) / quantum) * quantum), x)


def test_round_to_rounds_a_float64_once_from_its_value():
    x = 1 + 2**-11 + 2**-40  # just above the tie between 1 and 1 + 2**-10: through float32 it becomes the tie
    assert F.round_to(x, "fp16").item() == 1 + 2**-10 == float(np.float16(x))
    assert F.decompose(x, "fp16").mantissa == 1
    assert F.round_to(torch.tensor([x], dtype=torch.float64), "fp16").item() == 1 + 2**-10


@settings(max_examples=400)
@given(st.floats(min_value=-57_000, max_value=57_000, allow_subnormal=True), st.sampled_from(["fp16", "bf16", "tf32", "fp8_e5m2"]))
def test_round_to_of_a_float64_is_the_correctly_rounded_value(x, name):
    got = F.round_to(torch.tensor([x], dtype=torch.float64), name).item()
    assert got == exact_round(x, name)
    if name == "fp16":
        assert got == float(np.float16(x))  # numpy rounds float64 to float16 once, from the value


@settings(max_examples=300)
@given(st.floats(allow_nan=True, allow_infinity=True, width=32), st.sampled_from(TORCH_FORMATS))
def test_round_to_property(x, name):
    t = torch.tensor([x], dtype=torch.float32)
    assert bool(same_bits(F.round_to(t, name), t.to(F.FORMATS[name].torch_dtype).float()).all())


# --------------------------------------------------------------------------------------------
# formats by name
# --------------------------------------------------------------------------------------------


def test_get_format_accepts_names_aliases_dtypes_and_formats():
    assert F.get_format("fp16") is F.FORMATS["fp16"]
    assert F.get_format(" FP16 ") is F.FORMATS["fp16"]
    assert F.get_format("bfloat16") is F.FORMATS["bf16"]
    assert F.get_format(torch.float8_e5m2) is F.FORMATS["fp8_e5m2"]
    assert F.get_format(F.FORMATS["tf32"]) is F.FORMATS["tf32"]


@pytest.mark.parametrize("bad", ["fp12", "", "int8", None, 16, torch.int8])
def test_bad_format_names(bad):
    with pytest.raises(ValueError) as info:
        F.get_format(bad)
    msg = str(info.value)
    assert "fmt=" in msg
    for name in F.FORMAT_NAMES:
        assert name in msg
    with pytest.raises(ValueError):
        F.round_to(1.0, bad)
    with pytest.raises(ValueError):
        F.decompose(1.0, bad)


# --------------------------------------------------------------------------------------------
# decompose and from_bits
# --------------------------------------------------------------------------------------------


def oracle_bits(value: float, name: str) -> str:
    """The bit string of value cast by torch, or by the float32 view for fp32."""
    f = F.FORMATS[name]
    pattern = int(torch_bits(torch.tensor([value]), f.torch_dtype)[0])
    return format(pattern, f"0{f.total_bits}b")


@pytest.mark.parametrize("name", list(F.FORMATS))
def test_decompose_known_patterns(name):
    f = F.FORMATS[name]
    E, M = f.exponent_bits, f.mantissa_bits
    ones_e = "1" * E

    d = F.decompose(1.0, name)
    assert (d.sign, d.exponent, d.mantissa, d.kind) == (0, f.bias, 0, "normal")
    assert d.bits == "0" + format(f.bias, f"0{E}b") + "0" * M
    assert d.value == 1.0 and d.error == 0.0 and d.ulp == f.eps

    d = F.decompose(f.max, name)
    assert d.value == f.max and d.kind == "normal"
    if f.finite_only:
        assert d.bits == "0" + ones_e + "1" * (M - 1) + "0"
    else:
        assert d.bits == "0" + "1" * (E - 1) + "0" + "1" * M

    d = F.decompose(f.min_subnormal, name)
    assert d.bits == "0" * (E + M) + "1" and d.kind == "subnormal" and d.value == f.min_subnormal
    assert d.ulp == f.min_subnormal

    d = F.decompose(f.min_normal, name)
    assert d.bits == "0" + "0" * (E - 1) + "1" + "0" * M and d.kind == "normal"

    d = F.decompose(-0.0, name)
    assert d.bits == "1" + "0" * (E + M) and d.kind == "zero" and d.sign == 1 and d.error == 0.0

    d = F.decompose(math.nan, name)
    assert d.kind == "nan" and math.isnan(d.value) and math.isnan(d.error)
    assert d.bits[1 : 1 + E] == ones_e and int(d.bits[1 + E :], 2) != 0
    assert math.isnan(F.from_bits(d.bits, name))

    d = F.decompose(-math.inf, name)
    if not f.finite_only:
        assert (
            d.bits == "1" + ones_e + "0" * M and d.kind == "inf" and d.value == -math.inf and d.error == 0.0
        )
    else:
        assert d.value == (-f.max if f.overflow == "saturate" else d.value) and d.error == math.inf

    if f.torch_dtype is not None:
        for v in (1.0, f.max, f.min_subnormal, f.min_normal, -0.0, -math.inf, 0.1, -3.0):
            assert F.decompose(v, name).bits == oracle_bits(v, name), v


def test_decompose_overflow_and_error():
    d = F.decompose(65520.0, "fp16")
    assert d.kind == "inf" and d.error == math.inf
    assert F.decompose(65519.0, "fp16").value == 65504.0
    d = F.decompose(0.1, "fp32")
    assert d.error == abs(f32(0.1) - 0.1) / 0.1 and d.error > 0
    d = F.decompose(1e-6, "fp16")
    assert d.kind == "subnormal" and d.value == torch.tensor(1e-6).half().item()
    assert F.decompose(1e-9, "fp16").kind == "zero" and F.decompose(1e-9, "fp16").error == 1.0
    d = F.decompose(torch.tensor(3.0), "bf16")
    assert d.value == 3.0
    with pytest.raises(ValueError, match="value"):
        F.decompose("x", "fp16")
    with pytest.raises(ValueError, match="single number"):
        F.decompose(torch.ones(2), "fp16")


@settings(max_examples=400)
@given(st.floats(allow_nan=False, allow_infinity=True, width=32), st.sampled_from(TORCH_FORMATS))
def test_decompose_bits_match_torch(x, name):
    d = F.decompose(x, name)
    assert d.bits == oracle_bits(x, name)
    assert F.from_bits(d.bits, name) == d.value or (d.value == 0 and F.from_bits(d.bits, name) == 0)
    assert d.value == F.round_to(x, name).item()


@settings(max_examples=300)
@given(st.floats(allow_nan=False, allow_infinity=False, width=32), st.sampled_from(list(F.FORMATS)))
def test_decompose_fields_rebuild_value_and_ulp(x, name):
    f = F.FORMATS[name]
    d = F.decompose(x, name)
    assert F.from_bits(d.bits, name) == d.value
    pattern = int(d.bits, 2)
    if d.kind in ("normal", "subnormal", "zero") and d.sign == 0 and d.value < f.max:
        # the ulp is the gap to the next representable value up
        assert F.from_bits(pattern + 1, name) - d.value == d.ulp
    if name == "fp32" and d.kind != "inf" and 0 <= d.value < f.max:
        v = torch.tensor(d.value, dtype=torch.float32)
        assert (torch.nextafter(v, torch.tensor(math.inf)) - v).item() == d.ulp


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"])
def test_from_bits_decodes_every_pattern_like_torch(name):
    f = F.FORMATS[name]
    n = f.total_bits
    pats = torch.arange(2**n, dtype=torch.int64)
    if n == 16:
        stored = pats.to(torch.int32).to(torch.int16)  # wraps to the signed view of the same bits
    else:
        stored = pats.to(torch.uint8)
    expected = stored.view(f.torch_dtype).double()
    got = torch.tensor([F.from_bits(int(p), name) for p in pats.tolist()], dtype=torch.float64)
    assert bool(((got == expected) | (torch.isnan(got) & torch.isnan(expected))).all())


def test_from_bits_reads_a_string_with_spaces():
    assert F.from_bits("0 01111 0000000000", "fp16") == 1.0


def test_a_format_of_your_own():
    # FP8 E3M4 is not in torch; it is rounded from its bit widths and decomposes like the others
    e3m4 = F.FloatFormat("fp8_e3m4", 3, 4)
    assert (e3m4.bias, e3m4.max, e3m4.min_subnormal) == (3, 15.5, 2.0**-6)
    assert F.round_to([1 + 2**-5, 1 + 3 * 2**-5, 100.0, 2.0**-7], e3m4).tolist() == [
        1.0,
        1 + 2**-3,
        math.inf,
        0.0,
    ]
    d = F.decompose(1.5, e3m4)
    assert d.bits == "00111000" and d.exponent_bits == "011" and d.mantissa_bits == "1000"
    assert d.formula() == "(-1)^0 × 2^(3-3) × 1.1000b"
    assert F.decompose(10**400, "fp16").kind == "inf"


def test_formats_table_is_computed():
    rows = F.formats_table()
    assert [r["format"] for r in rows] == [F.FORMATS[n].label for n in F.FORMAT_NAMES]
    fp16 = rows[3]
    assert fp16["max"] == torch.finfo(torch.float16).max and fp16["bits"] == 16
    assert rows[1]["torch_dtype"] == "(none)"


# --------------------------------------------------------------------------------------------
# the bit explorer, driven headlessly
# --------------------------------------------------------------------------------------------


def shown_value(html: str) -> str:
    return re.search(r"class='amp-value'>([^<]*)<", html).group(1)


def shown(html: str, cls: str) -> str:
    return re.search(rf"class='{cls}'>([^<]*)<", html).group(1)


def test_bit_explorer_headless():
    ex = FE.bit_explorer(value=0.1)
    assert set(ex.readouts) == set(F.FORMAT_NAMES)
    assert "amp-bit-explorer-value" in ex.value_input._dom_classes
    for name, w in ex.readouts.items():
        assert f"amp-readout-{name}" in w._dom_classes

    ex.value_input.value = "65520"
    fp16 = ex.readouts["fp16"].value
    assert shown_value(fp16) == "inf" and shown(fp16, "amp-kind") == "inf"
    bf16 = ex.readouts["bf16"].value
    assert float(shown_value(bf16)) == torch.tensor(65520.0).bfloat16().item()
    e4 = ex.readouts["fp8_e4m3"].value
    assert float(shown_value(e4)) == torch.tensor(65520.0).to(torch.float8_e4m3fn).float().item()
    for name in F.FORMAT_NAMES:
        d = F.decompose(65520.0, name)
        assert ex.decompositions[name] == d
        html = ex.readouts[name].value
        assert d.bits == "".join(re.findall(r"class='amp-bits-\w+'[^>]*>([01]+)<", html))
        assert shown(html, "amp-kind") == d.kind

    ex.value_input.value = "1e-6"
    fp16 = ex.readouts["fp16"].value
    assert shown(fp16, "amp-kind") == "subnormal"
    assert float(shown_value(fp16)) == pytest.approx(torch.tensor(1e-6).half().item(), rel=1e-6)
    assert float(shown(fp16, "amp-ulp")) == F.FORMATS["fp16"].min_subnormal
    assert float(shown(fp16, "amp-error")) == pytest.approx(F.decompose(1e-6, "fp16").error, rel=1e-3)
    assert ex.slider.value == pytest.approx(1e-6, rel=1e-2)

    before = ex.readouts["fp32"].value
    ex.value_input.value = "not a number"
    assert "not a number" in ex.status.value and ex.readouts["fp32"].value == before

    ex.value_input.value = "-2.5"
    ex.slider.value = 1000.0
    assert ex.value_input.value == "-1000.0"
    assert ex.decompositions["fp16"].value == -1000.0 and ex.decompositions["fp16"].sign == 1

    ex.value_input.value = "nan"
    assert all(d.kind == "nan" for d in ex.decompositions.values())
    ex.value_input.value = "-inf"
    assert ex.decompositions["fp8_e4m3"].kind == (
        "normal" if F.FORMATS["fp8_e4m3"].overflow == "saturate" else "nan"
    )


def test_bit_explorer_ignores_the_pages_snapped_echo():
    # The front end snaps the log slider to its grid (65520 -> 10**4.82) and sends it back;
    # that echo must not replace the value the learner typed.
    explorer = FE.bit_explorer(value=0.1)
    explorer.value_input.value = "65520"
    step = explorer.slider.step
    snapped = 10 ** (round(math.log10(65520) / step) * step)
    explorer.slider.value = snapped
    assert explorer.value_input.value == "65520"
    assert explorer.decompositions["fp16"].kind == "inf"
    # A real move (several steps away) still drives the explorer.
    explorer.slider.value = 100.0
    assert float(explorer.value_input.value) == 100.0


# ---- every bad input gets a clear error (a ValueError; TypeError for a wrong type) ----

import numpy as np  # noqa: E402

BAD_NUMBERS = [
    (True, "bool"),
    (np.bool_(False), "bool"),
    (torch.tensor([True, False]), "bool tensor"),
    ("0.1", "without quotes"),
    (None, "NoneType"),
    ({"a": 1.0}, "dict"),
    (torch.tensor([1 + 2j]), "complex"),
    ([1 + 2j], "complex"),
]


@pytest.mark.parametrize("fn", [F.round_to, F.emulate_round])
@pytest.mark.parametrize("bad,words", BAD_NUMBERS)
def test_round_to_refuses_what_is_not_real_numbers(fn, bad, words):
    with pytest.raises(TypeError, match=words) as info:
        fn(bad, "fp16")
    assert isinstance(info.value, ValueError) and "x" in str(info.value)


@pytest.mark.parametrize("fn", [F.decompose, F.format_ulp])
@pytest.mark.parametrize("bad,words", BAD_NUMBERS)
def test_decompose_and_format_ulp_follow_round_tos_rule(fn, bad, words):
    # one rule for text in round_to and decompose: refused by both (decompose used to parse "0.1")
    with pytest.raises(TypeError, match=words) as info:
        fn(bad, "fp16")
    assert "value" in str(info.value)


@pytest.mark.parametrize("x", [np.float32(0.1), np.float16(3.5), np.int64(7), np.float64(1e-8)])
def test_numpy_scalars_are_numbers(x):
    assert F.round_to(x, "fp16").item() == torch.tensor(float(x)).to(torch.float16).item()
    assert F.decompose(x, "fp16").value == torch.tensor(float(x)).to(torch.float16).item()
    assert F.format_ulp(x, "fp16") == F.format_ulp(float(x), "fp16")


def test_huge_ints_round_to_inf_everywhere():
    assert F.round_to(2**2000, "fp16").item() == math.inf
    assert F.round_to(-(2**2000), "bf16").item() == -math.inf
    assert F.decompose(2**2000, "fp16").kind == "inf"
    # ... but such an int is finite: it overflowed (error inf, as for 65520.0) and its spacing is inf, not NaN
    assert F.decompose(2**2000, "fp16").error == math.inf
    assert F.decompose(-(2**2000), "bf16").error == math.inf
    assert F.format_ulp(2**2000, "fp16") == math.inf
    assert F.round_to(2**70, "fp32").item() == float(torch.tensor(2.0**70))  # beyond int64, within float64


@pytest.mark.parametrize("bits", [np.int64(0x3C00), np.uint16(0x3C00), np.int32(0x3C00)])
def test_from_bits_accepts_numpy_integers(bits):
    assert F.from_bits(bits, "fp16") == torch.tensor([0x3C00], dtype=torch.int16).view(torch.float16).item()


@pytest.mark.parametrize("bad", [None, 16, 1.5, ["fp16"]])
def test_get_format_wrong_type_is_a_type_error(bad):
    with pytest.raises(TypeError, match="fmt="):
        F.get_format(bad)


@pytest.mark.parametrize(
    "fmts,err,words",
    [([], ValueError, "at least one"), (5, TypeError, "fmts"), (["fp12"], ValueError, "fp12")],
)
def test_formats_table_bad_fmts(fmts, err, words):
    with pytest.raises(err, match=words):
        F.formats_table(fmts)


def test_formats_table_takes_one_name():
    assert [r["format"] for r in F.formats_table("fp16")] == ["FP16"]  # not one row per character


def test_plot_range_precision_checks_before_drawing():
    from matplotlib.figure import Figure

    with pytest.raises(TypeError, match="fig"):
        F.plot_range_precision("figure")
    fig = Figure()
    with pytest.raises(ValueError, match="fp12"):
        F.plot_range_precision(fig, ["fp16", "fp12"])
    assert fig.axes == []  # nothing half-drawn


@pytest.mark.parametrize("value", [True, None, [0.1, 0.2], torch.ones(2)])
def test_bit_explorer_refuses_bad_start_values(value):
    with pytest.raises(ValueError, match="value"):
        FE.bit_explorer(value)


# ---- one numeric rule for every function that takes numbers ----


@pytest.mark.parametrize("fn", [F.decompose, F.format_ulp])
def test_one_element_tensors_are_numbers_like_round_tos(fn):
    # one rule across formats: round_to takes tensors, so decompose and format_ulp take a one-element one
    assert fn(torch.tensor(1.0), "fp16") == fn(1.0, "fp16")
    assert fn(torch.tensor([0.1]), "bf16") == fn(float(torch.tensor(0.1)), "bf16")


@pytest.mark.parametrize(
    "value,err,words",
    [
        ("", TypeError, "without quotes"),
        ("junk", TypeError, "without quotes"),
        ("0.1", TypeError, "without quotes"),
        (b"0.1", TypeError, "without quotes"),
    ],
)
def test_bit_explorer_start_value_follows_the_numeric_rule(value, err, words):
    # the text box parses typed text; the start value is a number, as for decompose
    with pytest.raises(err, match=words) as info:
        FE.bit_explorer(value)
    assert "value" in str(info.value)


@pytest.mark.parametrize(
    "value,shown",
    [(2**2000, "inf"), (-(2**2000), "-inf"), (torch.tensor(1.0), "1.0")],
    ids=["2**2000", "-2**2000", "t1"],
)
def test_bit_explorer_start_value_as_decompose_reads_it(value, shown):
    ex = FE.bit_explorer(value)
    assert ex.value_input.value == shown  # the box shows the number read (a huge int is read as ±inf)
    assert ex.decompositions["fp16"].bits == F.decompose(value, "fp16").bits


# notebook 01 says where overflow starts; torch's casts are the oracle
@pytest.mark.parametrize(
    "name, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp8_e5m2", torch.float8_e5m2)]
)
def test_overflow_starts_half_a_step_above_max_as_torch_casts(name, dtype):
    from amp_lab.range_counts import overflow_threshold

    f = F.FORMATS[name]
    thr, tie_overflows = overflow_threshold(name)
    assert thr == f.max + math.ldexp(1.0, f.emax - f.mantissa_bits) / 2
    assert tie_overflows  # IEEE formats: max ends in a 1 bit, so the tie goes up
    t = torch.tensor([thr, -thr])
    below = torch.nextafter(t, torch.zeros(2))
    assert torch.equal(below.to(dtype).float(), torch.tensor([f.max, -f.max]))  # rounds back to max
    assert torch.equal(t.to(dtype).float(), torch.tensor([math.inf, -math.inf]))  # overflows
    assert torch.equal(torch.tensor([f.max + 1e-3 * (thr - f.max)]).to(dtype).float(), torch.tensor([f.max]))


def test_fp16_overflow_threshold_is_65520():
    from amp_lab.range_counts import overflow_threshold

    assert overflow_threshold("fp16") == (65520.0, True)
    x = torch.tensor([65519.0, 65520.0])
    assert x.to(torch.float16).float().tolist() == [65504.0, math.inf]


# --------------------------------------------------------------------------------------------
# Decomposition.rounding: what the rounding did, as codes and numbers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, fmt, stored, below, above, step, tie",
    [
        (257.0, "bf16", 256.0, 256.0, 258.0, 2.0, True),  # BF16: 8 bits, step 2 in [256, 512); 256 is even
        (259.0, "bf16", 260.0, 258.0, 260.0, 2.0, True),  # 260's last mantissa bit is 0, 258's is 1
        (2049.0, "fp16", 2048.0, 2048.0, 2050.0, 2.0, True),
        (1.1, "bf16", 1.1015625, 1.09375, 1.1015625, 2.0**-7, False),
    ],
)
def test_rounding_reads_ties_and_neighbours(x, fmt, stored, below, above, step, tie):
    r = F.decompose(x, fmt).rounding()
    assert r.outcome == "formats.stored_as"
    assert r.reasons == ("formats.step_in_binade", "formats.tie_to_even" if tie else "formats.to_nearest")
    f = r.facts
    assert (f["stored"], f["below"], f["above"], f["step"]) == (stored, below, above, step)
    # oracle: torch's cast stores the same value
    assert torch.tensor(x).to(F.FORMATS[fmt].torch_dtype).item() == stored
    if tie:
        assert f["last_bit"] == "0"


def test_rounding_reads_exact_values_overflow_and_nan():
    assert F.decompose(2.0, "fp16").rounding().outcome == "formats.exact"
    assert F.decompose(math.nan, "fp16").rounding().outcome == "formats.nan_in"
    e5m2 = F.decompose(1e6, "fp8_e5m2").rounding()
    assert e5m2.outcome == "formats.overflows_to_inf" and e5m2.facts["stored"] == math.inf
    e4m3 = F.decompose(1e6, "fp8_e4m3").rounding()
    cast = torch.tensor(1e6).to(torch.float8_e4m3fn).float().item()  # oracle: this torch's cast
    assert e4m3.facts["stored"] == cast or (math.isnan(cast) and math.isnan(e4m3.facts["stored"]))
    assert e4m3.outcome == ("formats.saturates" if cast == 448.0 else "formats.overflows_to_nan")


def test_rounding_below_the_normal_range_reads_subnormal_steps():
    r = F.decompose(1e-6, "fp16").rounding()
    assert r.reasons == ("formats.step_subnormal", "formats.to_nearest")
    assert (
        r.facts["step"] == F.FORMATS["fp16"].min_subnormal and r.facts["high"] == F.FORMATS["fp16"].min_normal
    )
    assert r.facts["stored"] == torch.tensor(1e-6).half().item()  # oracle: torch's cast
