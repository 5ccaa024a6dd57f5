"""Notebook 11's exercises: the learner's rowwise scales, promote-every-N_C dot product, weight gradient under
DeepSeek's tiles and bytes per parameter, beside the package's.

The solutions (as in the solutions notebook) pass; the skeletons are "not attempted"; every common wrong
answer the module declares is written here as the code a learner would write, and is caught with its hint;
no wrong answer's feedback shows the value that would pass.  The oracles: torchao's own config and
``tensor_to_scale``, a loop written here over ``round_accumulator``, tiles quantized here with torch's own
FP8 cast, and the dtypes' element sizes beside Transformer Engine's memory example.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check
from test_exercises_base import JUNK

from amp_lab import fp8
from amp_lab.exercises import nb11

E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max

# --------------------------------------------------------------------------------------------
# Exercise 1: rowwise scales
# --------------------------------------------------------------------------------------------


def my_rowwise_scales(x):  # the solution, as in the solutions notebook
    amax = x.abs().amax(dim=-1, keepdim=True).to(torch.float64)
    scale = (E4M3_MAX / torch.clamp(amax, min=1e-12)).to(torch.float32)
    return torch.exp2(torch.floor(torch.log2(scale)))


def _scales(x, *, dim=-1, keepdim=True, key=torch.abs, floor=1e-12, rounding=torch.floor, invert=False):
    """The solution with one slip, the way a learner would write it."""
    amax = key(x).amax(dim=dim, keepdim=keepdim).to(torch.float64)
    amax = torch.clamp(amax, min=floor) if floor else amax
    scale = (amax / E4M3_MAX if invert else E4M3_MAX / amax).to(torch.float32)
    return scale if rounding is None else torch.exp2(rounding(torch.log2(scale)))


def test_ex1_the_rowwise_recipe_rounds_its_axiswise_e4m3_scales_to_powers_of_two():
    # where the expected rule comes from: torchao's own "rowwise" recipe
    ao = fp8.import_torchao()
    config = ao.float8.config.Float8LinearConfig.from_recipe_name("rowwise")
    axiswise = ao.float8.config.ScalingGranularity.AXISWISE
    assert config.round_scales_to_power_of_2 is True
    for cast in (config.cast_config_input, config.cast_config_weight, config.cast_config_grad_output):
        assert cast.scaling_granularity is axiswise and cast.target_dtype == torch.float8_e4m3fn
    for x in nb11._ex1_cases().values():
        assert torch.equal(nb11.rowwise_scales(x), my_rowwise_scales(x))


def test_ex1_solution_passes_and_unfilled_is_not_attempted():
    assert assert_passes(nb11.ex1, my_rowwise_scales).verdict == "exact"
    assert_passes(nb11.ex1, lambda x: my_rowwise_scales(x).double())  # the same powers of two in float64
    assert_passes(nb11.ex1, lambda x: my_rowwise_scales(x).tolist())  # a list of rows counts too
    in_float32 = lambda x: torch.exp2(torch.floor(torch.log2(E4M3_MAX / x.abs().amax(-1, keepdim=True).clamp(min=1e-12))))  # noqa: E731
    assert_passes(nb11.ex1, in_float32)  # divided in float32: the same powers of two on these rows
    assert_not_attempted(nb11.ex1, None)
    assert_not_attempted(nb11.ex1, lambda x: None)

    def skeleton(x):
        raise NotImplementedError

    assert_not_attempted(nb11.ex1, skeleton)


def test_ex1_mistakes():
    feed_mistake(nb11.ex1, "per column instead of per row", lambda x: _scales(x, dim=0))
    feed_mistake(nb11.ex1, "per column instead of per row", lambda x: _scales(x, dim=0, keepdim=False))
    feed_mistake(nb11.ex1, "scales of shape (M,)", lambda x: _scales(x, keepdim=False))
    feed_mistake(nb11.ex1, "no power-of-two rounding", lambda x: _scales(x, rounding=None))
    feed_mistake(nb11.ex1, "rounding up", lambda x: _scales(x, rounding=torch.ceil))
    feed_mistake(nb11.ex1, "amax floor missing", lambda x: _scales(x, floor=None))
    feed_mistake(nb11.ex1, "amax floor missing", lambda x: E4M3_MAX / x.abs().amax(-1, keepdim=True))
    feed_mistake(nb11.ex1, "another floor for amax", lambda x: _scales(x, floor=1e-6))
    feed_mistake(nb11.ex1, "another floor for amax", lambda x: _scales(x, floor=1e-30))
    feed_mistake(nb11.ex1, "amax without abs", lambda x: _scales(x, key=lambda t: t))
    feed_mistake(nb11.ex1, "scale inverted", lambda x: _scales(x, invert=True))
    feed_mistake(nb11.ex1, "scale inverted", lambda x: _scales(x, invert=True, rounding=None))
    feed_mistake(nb11.ex1, "scale inverted", lambda x: 1.0 / my_rowwise_scales(x))


def test_ex1_other_wrong_answers_get_the_generic_hint_never_a_traceback():
    for fn in (lambda x: 2 * my_rowwise_scales(x), lambda x: 1 / 0, lambda x: "scales", lambda x: x[:2], 42):
        assert run_check(nb11.ex1, fn).status == "not yet"


def test_ex1_no_feedback_gives_the_right_scale():
    wrong = [lambda x: _scales(x, rounding=None), lambda x: _scales(x, rounding=torch.ceil),
             lambda x: _scales(x, key=lambda t: t), lambda x: _scales(x, invert=True),
             lambda x: _scales(x, floor=1e-6), lambda x: 4 * my_rowwise_scales(x)]  # fmt: skip
    cases = nb11._ex1_cases()
    for fn in wrong:
        message = run_check(nb11.ex1, fn).message
        case, row = (
            re.search(r"on (.+): \d+ of \d+ rows", message).group(1),
            int(re.search(r"row (\d+) ", message).group(1)),
        )
        x = cases[case]
        right = my_rowwise_scales(x)[row].item()
        amax = float(x[row].abs().max())
        assert f"{right:.4g}" not in message and (not amax or f"{amax * right:.4g}" not in message), message


# --------------------------------------------------------------------------------------------
# Exercise 2: promote every N_C
# --------------------------------------------------------------------------------------------


def my_promoted_dot(a, b, mantissa_bits, n_c):  # the solution, as in the solutions notebook
    total = torch.zeros((), dtype=torch.float32)  # the FP32 accumulator on the CUDA cores
    partial = torch.zeros((), dtype=torch.float64)  # the Tensor Core's limited running sum
    for i in range(a.shape[0]):
        partial = fp8.round_accumulator(partial + a[i].double() * b[i].double(), mantissa_bits)
        if (i + 1) % n_c == 0:  # every n_c elements: promote and restart
            total = total + partial.float()
            partial = torch.zeros((), dtype=torch.float64)
    return total + partial.float()  # the last, partial chunk


def _dot(**slip):
    """The solution with one slip (the package's own replay, nb11.promoted_dot, is not used here)."""

    def dot(a, b, mantissa_bits, n_c):
        n, first = slip.get("chunk", n_c), slip.get("first", slip.get("chunk", n_c))
        total_dtype = slip.get("total", torch.float32)
        total, partial, count = torch.zeros((), dtype=total_dtype), torch.zeros((), dtype=torch.float64), 0
        for i in range(a.shape[0]):
            p = a[i] * b[i] if slip.get("float32_products") else a[i].double() * b[i].double()
            partial = (
                partial + p if slip.get("unrounded") else fp8.round_accumulator(partial + p, mantissa_bits)
            )
            count += 1
            if not slip.get("never") and count == (first if i < first else n):
                total, count = total + partial.to(total_dtype), 0
                if not slip.get("no_restart"):
                    partial = torch.zeros((), dtype=torch.float64)
        if not slip.get("drop_last") and (count or slip.get("never")):
            total = total + partial.to(total_dtype)
        return float(total.float())

    return dot


def test_ex2_expected_is_the_package_model_and_a_loop_over_round_accumulator():
    for _, a, b, bits, n_c in nb11._ex2_cases():
        want = fp8.limited_accumulation_matmul(a[None, :], b[:, None], bits, promote_every=n_c)
        assert want.shape == (1, 1) and want.dtype == torch.float32
        assert float(my_promoted_dot(a, b, bits, n_c)) == float(want) == _dot()(a, b, bits, n_c)
        assert nb11._summed(a, b, bits, nb11._bounds(len(a), n_c)) == float(
            want
        )  # the check's chunked replay


def test_ex2_the_checks_replays_of_each_slip_are_the_learners_loops():
    loops = {"never promoting": [{"never": True}], "promoting without restarting": [{"no_restart": True}],
             "promoting into float64 not float32": [{"total": torch.float64}],
             "off by one in the chunk": [{"chunk": +1}, {"chunk": -1}, {"first": 1}],
             "the last chunk forgotten": [{"drop_last": True}], "the running sum never rounded": [{"unrounded": True}],
             "products rounded to float32": [{"float32_products": True}]}  # fmt: skip
    assert set(loops) == set(nb11._SLIPS2)
    for _, a, b, bits, n_c in nb11._ex2_cases():
        for name, slips in loops.items():
            mine = [
                _dot(**{k: n_c + v if k == "chunk" else v for k, v in slip.items()})(a, b, bits, n_c)
                for slip in slips
            ]
            assert nb11._SLIPS2[name](a, b, bits, n_c) == mine, name


def test_ex2_solution_passes_and_unfilled_is_not_attempted():
    assert assert_passes(nb11.ex2, my_promoted_dot).verdict == "exact"
    assert_passes(nb11.ex2, lambda *args: float(my_promoted_dot(*args)))  # a Python float counts too
    assert_not_attempted(nb11.ex2, None)
    assert_not_attempted(nb11.ex2, lambda a, b, bits, n_c: None)


def test_ex2_mistakes():
    feed_mistake(nb11.ex2, "never promoting", _dot(never=True))
    feed_mistake(nb11.ex2, "promoting without restarting", _dot(no_restart=True))
    feed_mistake(nb11.ex2, "promoting into float64 not float32", _dot(total=torch.float64))
    feed_mistake(
        nb11.ex2, "off by one in the chunk", _dot(first=1)
    )  # promoted after element 0, then every n_c
    feed_mistake(
        nb11.ex2, "off by one in the chunk", lambda a, b, bits, n_c: _dot(chunk=n_c + 1)(a, b, bits, n_c)
    )
    feed_mistake(
        nb11.ex2, "off by one in the chunk", lambda a, b, bits, n_c: _dot(chunk=n_c - 1)(a, b, bits, n_c)
    )
    feed_mistake(nb11.ex2, "the last chunk forgotten", _dot(drop_last=True))
    feed_mistake(nb11.ex2, "the running sum never rounded", _dot(unrounded=True))
    feed_mistake(nb11.ex2, "products rounded to float32", _dot(float32_products=True))


def test_ex2_other_wrong_answers_get_a_verdict_never_a_traceback():
    for fn in (
        lambda a, b, bits, n_c: float(a @ b),
        lambda *args: 1 / 0,
        lambda *args: "x",
        lambda *args: [1.0, 2.0],
        7,
    ):
        assert run_check(nb11.ex2, fn).status == "not yet"


# --------------------------------------------------------------------------------------------
# Exercise 3: the weight gradient's tiles
# --------------------------------------------------------------------------------------------


def my_weight_grad(x, dy):  # the solution, as in the solutions notebook
    x_q = fp8.blockwise_quantize(x, block=(128, 1))  # tiles along M, the sum of dW = dY^T X
    dy_q = fp8.blockwise_quantize(dy, block=(128, 1))
    return dy_q.T @ x_q


def _along_m(t, fmt=torch.float8_e4m3fn):
    """``t`` quantized and dequantized in 128x1 tiles, by hand: torch's own cast, torchao's scale rule."""
    out = torch.empty_like(t)
    big = torch.finfo(fmt).max
    for start in range(0, t.shape[0], 128):
        tile = t[start : start + 128]
        scale = (big / tile.abs().amax(dim=0, keepdim=True).double().clamp(min=1e-12)).float()
        out[start : start + 128] = (tile * scale).clamp(-big, big).to(fmt).float() / scale
    return out


def test_ex3_expected_is_the_recipes_backward_and_tiles_quantized_by_hand():
    for _, x, dy in nb11._ex3_cases():
        want = nb11.blockwise_weight_grad(x, dy)
        assert want.shape == (dy.shape[1], x.shape[1])
        assert torch.equal(want, _along_m(dy).T @ _along_m(x))


def test_ex3_solution_passes_and_unfilled_is_not_attempted():
    assert assert_passes(nb11.ex3, my_weight_grad).verdict == "exact"
    def transposed(x, dy):  # another summation order
        return (fp8.blockwise_quantize(x, (128, 1)).T @ fp8.blockwise_quantize(dy, (128, 1))).T

    assert assert_passes(nb11.ex3, transposed).status == "passed"  # another summation order passes too
    assert_not_attempted(nb11.ex3, None)
    assert_not_attempted(nb11.ex3, lambda x, dy: None)


def _grad(x_block, dy_block, dy_fmt="fp8_e4m3"):
    return lambda x, dy: fp8.blockwise_quantize(dy, dy_block, dy_fmt).T @ fp8.blockwise_quantize(x, x_block)


def test_ex3_mistakes():
    feed_mistake(nb11.ex3, "the forward's tiles for X", _grad((1, 128), (128, 1)))
    feed_mistake(nb11.ex3, "the input-gradient tiles for dY", _grad((128, 1), (1, 128)))
    feed_mistake(nb11.ex3, "1x128 tiles for both", _grad((1, 128), (1, 128)))
    feed_mistake(nb11.ex3, "128x128 blocks for activations", _grad((128, 128), (128, 128)))
    feed_mistake(nb11.ex3, "no quantization", lambda x, dy: dy.T @ x)
    feed_mistake(nb11.ex3, "E5M2 for the gradient", _grad((128, 1), (128, 1), "fp8_e5m2"))
    feed_mistake(nb11.ex3, "the weight's shape", lambda x, dy: my_weight_grad(x, dy).T)


def test_ex3_every_slip_is_far_beyond_the_tolerance_on_every_shape():
    slips = [_grad((1, 128), (128, 1)), _grad((128, 1), (1, 128)), _grad((128, 128), (128, 128)),
             _grad((128, 1), (128, 1), "fp8_e5m2"), lambda x, dy: dy.T @ x]  # fmt: skip
    for _, x, dy in nb11._ex3_cases():
        want = nb11.blockwise_weight_grad(x, dy)
        for slip in slips:
            assert (slip(x, dy) - want).abs().max() > 100 * nb11._RTOL3 * want.abs().max()


def test_ex3_other_wrong_answers_get_a_verdict_never_a_traceback():
    for fn in (lambda x, dy: my_weight_grad(x, dy) * 1.01, lambda x, dy: 1 / 0, lambda x, dy: "dW", 3.0):
        assert run_check(nb11.ex3, fn).status == "not yet"


# --------------------------------------------------------------------------------------------
# Exercise 4: the bytes a weight takes
# --------------------------------------------------------------------------------------------


def test_ex4_expected_is_transformer_engines_memory_example():
    # TE's example: a 1024 x 1024 BF16 Linear holds 2 MB of weight and 1 MB of FP8 weight after an FP8
    # forward in training; 1 MB of FP8 weight in inference (weights stored directly in FP8)
    n = 1024 * 1024
    bf16, e4m3 = (
        torch.empty(n, dtype=d).untyped_storage().nbytes() for d in (torch.bfloat16, torch.float8_e4m3fn)
    )
    assert (bf16, e4m3) == (2 * 2**20, 2**20)
    assert nb11.weight_bytes() == {"training": (bf16 + e4m3) / n, "inference": e4m3 / n}


def test_ex4_solution_passes_and_unfilled_is_not_attempted():
    assert assert_passes(nb11.ex4, 3, 1).verdict == "exact"
    assert_passes(nb11.ex4, 3.0, np.int64(1))
    assert_not_attempted(nb11.ex4, None, None)
    half = run_check(nb11.ex4, 3, None)
    assert half.status == "not yet" and [p.status for p in half.details["parts"]] == [
        "passed",
        "not attempted",
    ]


def test_ex4_mistakes():
    feed_mistake(nb11.ex4, "FP8 halves the training weights", 1, 1)
    feed_mistake(nb11.ex4, "the FP8 copy forgotten", 2, 1)
    feed_mistake(nb11.ex4, "an FP32 weight in the model", 5, 1)
    feed_mistake(nb11.ex4, "the optimizer counted", 16, 1)
    feed_mistake(nb11.ex4, "the optimizer counted", 17, 1)
    feed_mistake(nb11.ex4, "bits for bytes", 24, 1)
    feed_mistake(nb11.ex4, "bits for bytes", 3, 8)
    feed_mistake(nb11.ex4, "inference keeps a high-precision copy", 3, 2)
    feed_mistake(nb11.ex4, "inference keeps a high-precision copy", 3, 3)
    for answers in ((-1, 1), ("3", 1), (3, 0.5), (True, 1), (4, 1)):
        assert run_check(nb11.ex4, *answers).status == "not yet"


def test_ex4_no_feedback_gives_the_right_count():
    for training, inference in ((2, 2), (5, 8), (17, 2), (24, 0), (4, 2)):
        message = run_check(nb11.ex4, training, inference).message
        assert not re.search(r"(?<![\d.])[31](?![\d.])", message.replace("FP32", "").replace("FP8", "")), (
            message
        )


# --------------------------------------------------------------------------------------------
# All four: junk answers, speed
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ex", [nb11.ex1, nb11.ex2, nb11.ex3, nb11.ex4], ids=repr)
def test_junk_answers_get_a_verdict_never_a_traceback(ex):
    n = 2 if ex is nb11.ex4 else 1
    for junk in JUNK:
        result = run_check(ex, *([junk] * n))
        allowed = ("not attempted",) if junk is None or junk is Ellipsis else ("not yet", "not attempted")
        assert result.status in allowed, f"{ex!r} given {junk!r}: {result.status}\n{result.message}"
