"""amp_lab.fp8_recipes (notebook 11's readouts) against hand counts: the recipe table's reading, transposition,
the training verdicts, torchao's speed rule from the datasheet's own numbers, and the bytes each recipe
stores."""

from __future__ import annotations

import math

import pytest
import torch

from amp_lab import fp8, fp8_recipes, gpus
from amp_lab.text import REASONS
from amp_lab.training import TrainingRun


def test_frontier_tensors_are_seeded_and_shaped_as_documented():
    a, b = fp8_recipes.frontier_tensors(0), fp8_recipes.frontier_tensors(0)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["activations"], fp8_recipes.frontier_tensors(1)["activations"])
    acts = a["activations"]
    assert (
        acts.shape == (256, 512) and a["weights"].shape == (256, 512) and a["gradients"].shape == (256, 512)
    )
    # the outlier channels: the 4 columns whose RMS stands far above the others'
    rms = acts.pow(2).mean(0).sqrt().sort(descending=True).values
    assert rms[3] > 20 * rms[4]
    rows = a["gradients"].abs().amax(1)
    assert float(rows.max() / rows.min()) > 2.0**20  # rows spread over about 2**24


def _stats(x, q):
    return fp8.quantization_stats(x, q)


def test_the_reading_follows_the_stats_it_reads():
    table = fp8_recipes.recipe_table()
    reading = table.reading()
    n = reading.facts["numbers"]
    acts, grads = fp8_recipes.frontier_tensors()["activations"], fp8_recipes.frontier_tensors()["gradients"]
    assert n["tensorwise"] == _stats(acts, "tensorwise_e4m3").error
    assert n["rowwise"] == _stats(acts, "rowwise").error
    assert n["g_tile"] == _stats(grads, "blockwise_1x128").underflow
    assert reading.outcome == "fp8_recipes.finer_scales_help"
    assert reading.reasons[0] == "fp8_recipes.e4m3_in_tiles"
    assert n["g_tile"] < n["g_e5m2"] < n["g_e4m3"]
    for code in reading.codes:
        assert code in REASONS


def test_equal_rows_give_rowwise_no_help_and_no_underflow_gives_its_own_code():
    x = torch.linspace(-1, 1, 256).repeat(16, 1)  # every row the same: a scale per row is the tensor's scale
    table = fp8_recipes.recipe_table({"activations": x, "gradients": x.clone()})
    reading = table.reading()
    assert reading.outcome == "fp8_recipes.rowwise_no_help"
    assert reading.reasons[0] == "fp8_recipes.no_underflow"


def test_recipe_table_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="tensors"):
        fp8_recipes.recipe_table({"weights": torch.ones(2, 128)})
    with pytest.raises(ValueError, match="quantizers"):
        fp8_recipes.recipe_table(quantizers=["rowwise"])
    with pytest.raises(ValueError, match=r"quantizers\[0\]"):
        fp8_recipes.recipe_table(quantizers=["bogus"])
    with pytest.raises(TypeError, match="tensors"):
        fp8_recipes.recipe_table([torch.ones(2, 2)])


def test_transposition_by_hand():
    w = torch.ones(128, 256)
    w[0, 0] = 100.0  # the outlier sets the scale of row 0's first tile, and of column 0
    tiles = fp8_recipes.transposition(w, (1, 128))
    forward = fp8.blockwise_quantize(w, (1, 128))
    backward = fp8.blockwise_quantize(w.t().contiguous(), (1, 128)).t()
    assert tiles.differ == float((forward != backward).float().mean())
    assert tiles.differ > 0 and tiles.reading().outcome == "fp8_recipes.transpose_differs"
    blocks = fp8_recipes.transposition(w, (128, 128))
    assert blocks.differ == 0.0 and blocks.reading().outcome == "fp8_recipes.transpose_same"
    assert fp8_recipes.transposition(torch.ones(128, 128), (1, 128)).differ == 0.0  # no outlier: same scales
    with pytest.raises(ValueError, match="w"):
        fp8_recipes.transposition(torch.ones(4, 4, 4))


def _run(label, loss, accuracy):
    run = TrainingRun(label, losses=[loss] * 30)
    run.test_accuracy = accuracy
    return run


def test_verdicts_by_hand():
    runs = {
        "FP32": _run("FP32", 0.10, 0.95),
        "close": _run("close", 0.12, 0.94),
        "far": _run("far", 0.20, 0.95),
        "less accurate": _run("less accurate", 0.10, 0.90),
        "stuck": _run("stuck", 1.0, 0.5),
        "nan": _run("nan", math.nan, 0.1),
    }
    v = fp8_recipes.recipe_verdicts(runs)
    assert {k: r.outcome.rpartition(".")[2] for k, r in v.items()} == {
        "close": "tracks",
        "far": "lags",
        "less accurate": "lags",
        "stuck": "fails",
        "nan": "fails",
    }
    assert "FP32" not in v
    with pytest.raises(ValueError, match="baseline"):
        fp8_recipes.recipe_verdicts(runs, baseline="BF16")


def test_speed_rule_from_the_datasheet_by_hand():
    e = next(e for e in gpus.DATASHEETS if e.model == "H100 SXM")
    n = 4096
    bw = e.bandwidth_gbs * 1e9
    bf16 = max(2 * n**3 / (e.bf16_tflops * 1e12), 6 * n * n / bw)
    f8 = max(2 * n**3 / (e.fp8_tflops * 1e12), 4 * n * n / bw)
    cast = 3 * 5 * n * n / bw
    rule = fp8_recipes.fp8_speed_rule(n)
    assert (rule.bf16_s, rule.fp8_s, rule.cast_s) == pytest.approx((bf16, f8, cast), rel=1e-12)
    assert rule.saving_s == pytest.approx(3 * (bf16 - f8) - cast)
    assert rule.reading().outcome == "fp8_recipes.fp8_pays"
    rowwise = fp8_recipes.fp8_speed_rule(n, recipe="rowwise")  # each operand cast along both of its axes
    assert rowwise.cast_s == pytest.approx(2 * cast) and rowwise.bf16_s == rule.bf16_s
    small = fp8_recipes.fp8_speed_rule(256)
    assert small.saving_s < 0 and small.reading().outcome == "fp8_recipes.casts_dominate"
    measured = fp8_recipes.fp8_speed_rule(n, gpu="T4", bf16_s=1e-3, fp8_s=0.6e-3, cast_s=2e-3)
    assert measured.saving_s == pytest.approx(3 * 0.4e-3 - 2e-3) and measured.reading().outcome.endswith(
        "dominate"
    )
    assert "measured" in measured.source
    with pytest.raises(ValueError, match="gpu"):
        fp8_recipes.fp8_speed_rule(n, gpu="T4")  # no FP8 Tensor Cores on its datasheet
    with pytest.raises(ValueError, match="recipe"):
        fp8_recipes.fp8_speed_rule(n, recipe="blockwise")
    with pytest.raises(ValueError, match="bf16_s"):
        fp8_recipes.fp8_speed_rule(n, bf16_s=-1.0)


def test_storage_bytes_by_hand():
    n = 4096 * 4096
    assert fp8_recipes.storage_bytes("nvfp4") == 0.5 + (n // 16 + 4) / n
    assert fp8_recipes.storage_bytes("mxfp8_floor") == 1 + 1 / 32
    assert fp8_recipes.storage_bytes("mxfp4_floor") == 0.5 + 1 / 32
    assert fp8_recipes.storage_bytes("blockwise_1x128") == 1 + 4 / 128
    assert fp8_recipes.storage_bytes("blockwise_128x128") == 1 + 4 / 128**2
    assert fp8_recipes.storage_bytes("rowwise") == 1 + 4 / 4096
    assert fp8_recipes.storage_bytes("tensorwise_e4m3") == 1 + 4 / n
    assert (
        fp8_recipes.storage_bytes("blockwise_128x128", (100, 200)) == 1 + 2 * 4 / 20000
    )  # two partial blocks
    with pytest.raises(ValueError, match="shape"):
        fp8_recipes.storage_bytes("nvfp4", (4, 4, 4))
    with pytest.raises(ValueError, match="quantizer"):
        fp8_recipes.storage_bytes("fp16")
