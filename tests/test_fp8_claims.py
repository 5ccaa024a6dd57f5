"""Notebook 08's two corrected claims (issue 26): E5M2 gradients are the per-tensor recipes' choice, not
block scaling's (``fp8_explorer.gradient_format_reading``); and the cost of MXFP8's power-of-two scale
depends on its rule, FLOOR clipping block maxima that RCEIL keeps (``fp8_explorer.scale_mode_reading``).
Oracles: torch's own FP8 casts, torchao's ``to_mx``, counts by construction."""

from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat
import pytest
import torch

from amp_lab import fp8, fp8_explorer

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
NB08 = Path(__file__).resolve().parent.parent / "notebooks" / "08_fp8_and_block_scaling.ipynb"


def lost_by_torch(t: torch.Tensor, scale: float, dtype) -> int:
    """Non-zero values of t that torch's own cast of t * scale holds as 0 (the oracle of a tensorwise recipe)."""
    return int(((t * scale).to(dtype).to(torch.float32) == 0).logical_and(t != 0).sum())


# --- gradient_format_reading --------------------------------------------------------------------------


def test_blocks_keep_what_one_scale_per_tensor_loses_in_e4m3():
    # two blocks of 32: one near 1, one 2**-20 smaller (and two zeros, which count for nothing)
    x = torch.ones(2, 32)
    x[1] = 2.0**-20
    x[0, :2] = 0.0
    reading = fp8_explorer.gradient_format_reading(x)
    assert reading.codes == ("fp8.blocks_keep_e4m3", "fp8.block_scale_follows")
    f = reading.facts
    # E4M3 at 448 / amax: 2**-20 * 448 is below half E4M3's smallest subnormal (2**-10): all 32 round to 0;
    # E5M2 at 57344 / amax puts them near 2**-4.2; MX gives the second block its own scale
    assert (f["lost_tensorwise_e4m3"], f["lost_tensorwise_e5m2"], f["lost_mx_e4m3"]) == (32, 0, 0)
    assert f["lost_tensorwise_e4m3"] == lost_by_torch(x, 448.0, E4M3)
    assert f["lost_tensorwise_e5m2"] == lost_by_torch(x, 57344.0, E5M2)
    assert (f["nonzero"], f["tensors"], f["block_size"]) == (62, 1, 32)
    assert f["tensorwise_e4m3"] == 32 / 62 and f["tensorwise_e5m2"] == 0.0 == f["mx_e4m3"]


def test_a_block_wider_than_e4m3s_window_needs_e5m2():
    # one block holding 1 and 2**-20: its own scale cannot save the small values in E4M3
    x = torch.full((1, 32), 2.0**-20)
    x[0, 0] = 1.0
    reading = fp8_explorer.gradient_format_reading(x)
    assert reading.codes == ("fp8.blocks_need_e5m2", "fp8.blocks_too_wide")
    f = reading.facts
    assert (f["lost_tensorwise_e4m3"], f["lost_tensorwise_e5m2"], f["lost_mx_e4m3"]) == (31, 0, 31)
    assert f["lost_tensorwise_e5m2"] == lost_by_torch(x, 57344.0, E5M2)


def test_each_tensor_of_a_list_gets_its_own_tensorwise_scale():
    big, small = torch.ones(1, 32), torch.full((1, 32), 2.0**-20)
    apart = fp8_explorer.gradient_format_reading([big, small])
    together = fp8_explorer.gradient_format_reading(torch.cat([big, small]))
    assert apart.codes == ("fp8.blocks_keep_e4m3", "fp8.tensorwise_e4m3_enough")
    assert (apart.facts["lost_tensorwise_e4m3"], apart.facts["tensors"]) == (0, 2)
    assert together.facts["lost_tensorwise_e4m3"] == 32 == lost_by_torch(torch.cat([big, small]), 448.0, E4M3)


def test_gradient_format_reading_refuses_what_it_cannot_count():
    with pytest.raises(ValueError, match="multiple of 32"):
        fp8_explorer.gradient_format_reading(torch.ones(2, 48))
    with pytest.raises(ValueError, match="inf or NaN"):
        fp8_explorer.gradient_format_reading(torch.tensor([[math.nan] * 32]))
    with pytest.raises(ValueError, match="no non-zero"):
        fp8_explorer.gradient_format_reading([torch.zeros(1, 32)])
    with pytest.raises(ValueError, match="at least one"):
        fp8_explorer.gradient_format_reading([])
    with pytest.raises(TypeError):
        fp8_explorer.gradient_format_reading([[1.0] * 32])
    # an FP8 tensor is read as the float32 values it holds
    fp8_input = fp8_explorer.gradient_format_reading(torch.ones(1, 32).to(E4M3))
    assert fp8_input.facts["nonzero"] == 32


# --- scale_mode_reading --------------------------------------------------------------------------------


def clipping_blocks() -> torch.Tensor:
    """Block 0: amax 1.9, whose FLOOR scale 2**-8 sends 1.9 and 1.85 past 464 (486.4, 473.6) and 1.8 to
    460.8 (which rounds to 448 anyway, no clip); RCEIL's 2**-7 sends 1.9 to 243.2.  Block 1: amax 1.5 (384)."""
    x = torch.full((2, 32), 0.5)
    x[0, :4] = torch.tensor([1.9, -1.85, 1.8, 0.25])
    x[1, 0] = -1.5
    return x


def test_floor_clips_block_maxima_that_rceil_keeps():
    reading = fp8_explorer.scale_mode_reading(clipping_blocks())
    f = reading.facts
    assert reading.outcome == "fp8.floor_clips"
    assert (f["clipped_floor"], f["blocks_clipped_floor"], f["blocks"], f["numel"]) == (2, 1, 2, 64)
    assert (f["clipped_rceil"], f["blocks_clipped_rceil"]) == (0, 0)
    assert f["cost_floor"] > f["cost_rceil"]


def test_the_maxima_carry_a_power_of_twos_cost():
    # besides its maximum 1.9, the block holds powers of two: any power-of-two scale keeps them exactly,
    # 448 / 1.9 does not (0.5 * 235.8 = 117.9 rounds to 120); the exact scale keeps 1.9 itself exactly
    x = torch.full((1, 32), 0.5)
    x[0, 0], x[0, 1] = 1.9, -0.25
    reading = fp8_explorer.scale_mode_reading(x)
    f = reading.facts
    assert reading.codes == ("fp8.floor_clips", "fp8.maxima_carry_the_cost")
    assert f["rest_floor"] == f["rest_rceil"] == 0.0
    assert (f["clipped_floor"], f["clipped_rceil"]) == (1, 0)
    # FLOOR clips 1.9 to 448 * 2**-8 = 1.75; RCEIL rounds 1.9 * 128 = 243.2 to 240, i.e. 1.875
    rest = 30 * 0.5**2 + 0.25**2
    assert f["error_floor"] == pytest.approx(math.sqrt(0.15**2 / (rest + 1.9**2)), rel=1e-6)
    assert f["error_rceil"] == pytest.approx(math.sqrt(0.025**2 / (rest + 1.9**2)), rel=1e-5)


def exact_block_error(x: torch.Tensor, block_size: int) -> float:
    """Relative RMS error of E4M3 with a float32 scale 448 / amax per block, by torch's own cast."""
    blocks = x.reshape(-1, block_size)
    scale = (448.0 / blocks.abs().amax(-1, keepdim=True).double()).float()
    q = (blocks * scale).clamp(-448, 448).to(E4M3).float() / scale
    return math.sqrt(float(((q.double() - blocks.double()) ** 2).sum() / (blocks.double() ** 2).sum()))


@pytest.mark.parametrize("block_size", [32, 16])
def test_scale_mode_errors_match_torchao_and_torch(block_size):
    torchao = fp8.import_torchao()
    mx_tensor = torchao.prototype.mx_formats.mx_tensor
    modes = torchao.prototype.mx_formats.config.ScaleCalculationMode
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=g) * torch.logspace(-3, 3, 64, base=2.0)
    reading = fp8_explorer.scale_mode_reading(x, block_size)
    f = reading.facts
    exact = exact_block_error(x, block_size)
    assert f["error_exact"] == pytest.approx(exact, rel=1e-12)
    for mode, enum in (("floor", modes.FLOOR), ("rceil", modes.RCEIL)):
        scale, data = mx_tensor.to_mx(x, E4M3, block_size, scaling_mode=enum)
        theirs = mx_tensor.to_dtype(data, scale, E4M3, block_size, torch.float32)
        err = fp8.quantization_error(x, theirs)
        assert f[f"error_{mode}"] == pytest.approx(err, rel=1e-12)
        assert f[f"cost_{mode}"] == pytest.approx(err / exact, rel=1e-12)
        # clipped: values torchao's elements hold at +-448 though |x| / scale is past 464
        step = (
            scale.view(torch.uint8).to(torch.int32).sub(127).float().exp2().repeat_interleave(block_size, -1)
        )
        assert f[f"clipped_{mode}"] == int((x.abs() / step > 464).sum())
    assert f["clipped_floor"] > 0 == f["clipped_rceil"]


def test_powers_of_two_amaxes_clip_nothing_and_both_rules_agree():
    x = torch.full((1, 64), 0.3)
    x[0, 0], x[0, 32] = 1.0, -0.5  # amaxes 2**0 and 2**-1: FLOOR and RCEIL both give 2**-8 and 2**-9
    f = fp8_explorer.scale_mode_reading(x).facts
    assert fp8_explorer.scale_mode_reading(x).outcome == "fp8.floor_no_clip"
    assert (
        f["clipped_floor"] == 0
        and f["error_floor"] == f["error_rceil"]
        and f["cost_floor"] == f["cost_rceil"]
    )


def test_rest_costs_too_when_448_over_amax_holds_the_rest_exactly():
    # 416 / 448 times the exact scale 448 is 416 (an E4M3 value); times RCEIL's 256 it is 237.7 (not one)
    x = torch.full((1, 32), 416.0 / 448.0)
    x[0, 0] = 1.0
    reading = fp8_explorer.scale_mode_reading(x)
    assert reading.reasons == ("fp8.rest_costs_too",)
    assert reading.facts["rest_rceil"] > 1.05


def test_scale_mode_reading_refuses_bad_tensors():
    with pytest.raises(ValueError, match="multiple of 32"):
        fp8_explorer.scale_mode_reading(torch.ones(4, 20))
    with pytest.raises(ValueError, match="empty"):
        fp8_explorer.scale_mode_reading(torch.ones(0, 32))
    with pytest.raises(ValueError, match="inf or NaN"):
        fp8_explorer.scale_mode_reading(torch.full((1, 32), math.inf))
    with pytest.raises(TypeError):
        fp8_explorer.scale_mode_reading(torch.ones(1, 32, dtype=torch.int32))


# --- the notebook --------------------------------------------------------------------------------------

PER_TENSOR = re.compile(r"per-tensor|tensorwise|one scale per tensor|\*\*one\*\*\s+scale", re.IGNORECASE)
E5M2_FOR_GRADIENTS = re.compile(r"E5M2 backward|gradients (in|go to) E5M2|backward[^.]*E5M2", re.IGNORECASE)


def cells08():
    return nbformat.read(NB08, as_version=4).cells


def test_08_says_e5m2_gradients_only_for_per_tensor_recipes():
    cells = cells08()
    markdown = [c.source for c in cells if c.cell_type == "markdown"]
    assert not any("Why E4M3 forward and E5M2 backward" in s for s in markdown)
    saying = [s for s in markdown if E5M2_FOR_GRADIENTS.search(s.replace("\n", " "))]
    assert saying, "08 should still teach the per-tensor recipes' E5M2 gradients"
    for s in saying:
        assert PER_TENSOR.search(s.replace("\n", " ")), s[:300]
    # and it says what block-scaled recipes do instead, with the measurement that shows why
    text = " ".join(markdown).replace("\n", " ")
    for name in ("Float8BlockScaling", "MXFP8BlockScaling", "DeepSeek-V3"):
        assert name in text
    assert re.search(r"E4M3 for every tensor", text)
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    assert "fp8_explorer.gradient_format_reading(" in code and "fp8_explorer.scale_mode_reading(" in code
    assert 'scale_mode="floor"' in code and 'scale_mode="rceil"' in code


def test_08s_stored_readings_and_claims_are_the_corrected_ones():
    cells = cells08()

    def output_of(snippet):
        cell = next(c for c in cells if c.cell_type == "code" and snippet in c.source)
        return "".join(o.get("text", "") for o in cell.outputs)

    # the spread reading names its scope; the new claims all hold in the stored run
    assert "per-tensor recipes' reason" in output_of("fp8_explorer.spread_reading(")
    for snippet in ('formats.outcome == "fp8.blocks_keep_e4m3"', 'r.facts["clipped_rceil"] == 0'):
        out = output_of(snippet)
        assert out.count(": yes") >= 2 and ": NO" not in out, out
    # the power-of-two cost is computed, never typed into the text
    markdown = " ".join(c.source for c in cells if c.cell_type == "markdown")
    assert not re.search(r"[x×]\s?1\.\d\d", markdown)
