"""Exercises of notebook 11 (FP8 as the frontier trains it): the expected values are torchao's rowwise scales
(``tensor_to_scale``), :func:`amp_lab.fp8.limited_accumulation_matmul`, the weight gradient of
``Float8Linear(recipe="blockwise")`` and the dtypes' own element sizes; a common wrong rule is recognised by
running it beside the learner's."""

from __future__ import annotations

import torch

from .. import fp8
from ..check_base import CheckResult, finish, is_placeholder, no_answer
from ..device import seeded
from . import Mistake, combine, exercise, finite_float, wrong

__all__ = ["ex1", "ex2", "ex3", "ex4", "HIGH", "LOW"]

E4M3 = torch.float8_e4m3fn
_E4M3_MAX = float(torch.finfo(E4M3).max)


def _tensor(out) -> torch.Tensor | None:
    """What the learner returned as a float32 CPU tensor (numbers and lists of them too), else None."""
    if isinstance(out, (str, bool, BaseException)) or out is None:
        return None
    try:
        t = torch.as_tensor(out).detach().to("cpu")
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None
    return t.to(torch.float32) if t.is_floating_point() or t.dtype in (torch.int32, torch.int64) else None


def _outputs(fn, name: str, cases: list[tuple], hint: str, show: bool) -> CheckResult | list[torch.Tensor]:
    """``fn`` called on clones of each case's arguments, its results as float32 tensors; or the verdict when
    ``fn`` is no function (yet), still the skeleton, raises, or returns something that is no tensor."""
    if is_placeholder(fn):
        return no_answer(name, show, "your function")
    if not callable(fn):
        return finish("wrong", f"`{name}` is a {type(fn).__name__}, not a function.", show=show)
    outs = []
    for what, *args in cases:
        try:
            out = fn(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
        except NotImplementedError:
            out = None
        except Exception as e:  # the learner's code: reported in the feedback, never raised
            out = e
        if is_placeholder(out):
            text = f"`{name}` is not written yet (it returns None or raises NotImplementedError): fill it in and "
            return finish("unanswered", text + "run this cell again.", show=show, details={"answered": False})
        if (t := _tensor(out)) is None:
            got = f"{type(out).__name__}: {out}" if isinstance(out, Exception) else f"a {type(out).__name__}"
            return wrong(f"`{name}` on {what} gave {got:.120}, not a tensor of numbers.", hint, show=show)
        outs.append(t)
    return outs


def _first(slips: dict, matches) -> str | None:
    """The first slip (in declared order) whose rule ``matches``."""
    return next((name for name, rule in slips.items() if matches(rule)), None)


# --- Exercise 1: torchao's rowwise scales ---

ZERO_ROW, _ZERO_INDEX = "a zero row", 3


def _ex1_cases() -> dict[str, torch.Tensor]:
    """Seeded activations (never square, so a scale per column shows): ordinary values, an outlier channel, a
    zero row, tiny rows, a negative extreme in every row, and row amaxes whose scales are powers of two."""
    g = torch.Generator().manual_seed(11)
    ordinary, outlier = torch.randn(32, 96, generator=g), torch.randn(48, 64, generator=g)
    outlier[:, 5] *= 200.0  # one channel far larger than the rest, in every row
    zero = torch.randn(16, 40, generator=g)
    zero[_ZERO_INDEX] = 0.0
    tiny = torch.randn(8, 24, generator=g) * torch.tensor([1e-6] * 4 + [1e-20] * 4)[:, None]
    negative = 0.1 * torch.randn(24, 32, generator=g)
    negative[:, 2] = -30.0 - torch.rand(24, generator=g)  # each row's largest magnitude is negative
    powers = torch.linspace(0.1, 1.0, 20).repeat(4, 1) * torch.tensor([[3.5], [7.0], [0.4375], [448.0]])
    return {
        "ordinary activations": ordinary,
        "an outlier channel (column 5, 200 times the rest)": outlier,
        ZERO_ROW: zero,
        "tiny rows (about 1e-6 and 1e-20)": tiny,
        "a negative extreme in every row": negative,
        "row amaxes 3.5, 7, 0.4375 and 448": powers,
    }


def rowwise_scales(x: torch.Tensor) -> torch.Tensor:
    """torchao's rowwise E4M3 scales of a 2-D ``x``, float32 of shape (M, 1): ``tensor_to_scale`` along the
    last dimension, rounded down to powers of two (its rowwise recipe's ``round_scales_to_power_of_2``)."""
    ao = fp8.import_torchao()
    axiswise = ao.float8.config.ScalingGranularity.AXISWISE
    return ao.float8.float8_utils.tensor_to_scale(
        x, E4M3, scaling_granularity=axiswise, axiswise_dim=-1, round_scales_to_power_of_2=True
    )


def _rule(x, *, key=torch.abs, rounding=torch.floor, invert=False):
    """A per-row scale rule a learner may write: torchao's, or one with a slip."""
    amax = key(x).amax(dim=-1, keepdim=True).double().clamp(min=fp8.EPS)
    s = (amax / _E4M3_MAX if invert else _E4M3_MAX / amax).float()
    return s if rounding is None else torch.exp2(rounding(torch.log2(s)))


_EX1 = {
    "per column instead of per row": "rowwise scaling gives each row of x (each token) its own scale: reduce "
    "along the dimension a row's values run along",
    "scales of shape (M,)": "keep the reduced dimension (keepdim=True): a (M, 1) column of scales multiplies x "
    "row by row; a (M,) vector broadcasts along the columns",
    "no power-of-two rounding": "torchao's rowwise recipe rounds each scale down to a power of two "
    "(round_scales_to_power_of_2)",
    "rounding up": "round the scale *down* to a power of two: rounded up, amax * scale lands beyond E4M3's "
    "largest value",
    "amax floor missing": "an all-zero row has amax 0: clamp amax at torchao's floor fp8.EPS before dividing",
    "another floor for amax": "clamp amax at torchao's floor (fp8.EPS), not at another small number",
    "amax without abs": "a row's amax is its largest *magnitude*: take absolute values before the max",
    "scale inverted": "the scale maps a row's amax onto E4M3's largest value: the smaller the row, the larger "
    "its scale",
}
_SLIPS1 = {  # a wrong rule, recognised when one of its variants gives the learner's scales
    "no power-of-two rounding": [lambda x: _rule(x, rounding=None)],
    "rounding up": [lambda x: _rule(x, rounding=torch.ceil)],
    "amax without abs": [lambda x: _rule(x, key=lambda t: t)],
    "scale inverted": [
        lambda x, r=r: _rule(x, invert=True, rounding=r) for r in (None, torch.floor, torch.ceil)
    ],
}
_EX1_HINT = (
    "a row's scale is E4M3's largest value over the row's amax (clamped at fp8.EPS), divided in float64, "
    "rounded to float32, then rounded down to a power of two"
)


@exercise(1, "Rowwise scales", mistakes=[Mistake(*m) for m in _EX1.items()])
def ex1(answer, *, show: bool = True) -> CheckResult:
    """``my_rowwise_scales(x)``: one E4M3 scale per row of a 2-D ``x``, shape (M, 1), against torchao's
    ``tensor_to_scale`` (axiswise along the last dim, rounded down to powers of two) on six seeded tensors."""
    name, cases = "my_rowwise_scales", _ex1_cases()
    outs = _outputs(answer, name, list(cases.items()), _EX1_HINT, show)
    if isinstance(outs, CheckResult):
        return outs
    for (case, x), mine in zip(cases.items(), outs, strict=True):
        (m, k), slip = x.shape, None
        if mine.numel() == k:
            slip, text = (
                "per column instead of per row",
                f"gave {k} scales for {case} ({m} rows, {k} columns)",
            )
        elif mine.numel() != m:
            text = f"gave {mine.numel()} scale(s) for {case}, not one per row ({m} rows)"
        elif tuple(mine.shape) != (m, 1):
            slip, text = (
                "scales of shape (M,)",
                f"returned shape {tuple(mine.shape)} for {case}, not ({m}, 1)",
            )
        else:
            continue
        return wrong(f"`{name}` {text}.", _EX1.get(slip, _EX1_HINT), show=show)
    got = dict(zip(cases, outs, strict=True))
    want = {case: rowwise_scales(x) for case, x in cases.items()}
    if all(torch.equal(got[c], want[c]) for c in cases):
        rows = sum(x.shape[0] for x in cases.values())
        text = f"`{name}` equals torchao's rowwise scales on all {len(cases)} tensors ({rows} rows), bit for bit."
        return finish("exact", text, show=show)
    if not got[ZERO_ROW].isfinite().all():
        return wrong(
            f"`{name}` gave a scale that is not finite on {ZERO_ROW}.", _EX1["amax floor missing"], show=show
        )
    others = [c for c in cases if c != ZERO_ROW]
    slip = _first(
        _SLIPS1, lambda rules: any(all(torch.allclose(got[c], r(cases[c])) for c in others) for r in rules)
    )
    if slip is None and not torch.equal(got[ZERO_ROW][_ZERO_INDEX], want[ZERO_ROW][_ZERO_INDEX]):
        slip = "another floor for amax"
    case = next(c for c in cases if not torch.equal(got[c], want[c]))
    bad = (got[case] != want[case]).flatten()
    row, mine = int(bad.nonzero()[0]), float(got[case].flatten()[int(bad.nonzero()[0])])
    amax = float(cases[case][row].abs().max())
    note = f"row {row} (amax {amax:.4g}): yours puts amax * scale at {amax * mine:.4g}"
    notes = [note if amax else f"row {row} is all zeros: yours gives it the scale {mine:.4g}"]
    head = (
        f"`{name}` differs from torchao's rowwise scales on {case}: {int(bad.sum())} of {bad.numel()} rows."
    )
    return finish("wrong", head, [*notes, f"hint: {_EX1.get(slip, _EX1_HINT)}"], show=show)


# --- Exercise 2: promote the partial sum every N_C elements ---


def _ex2_cases() -> list[tuple]:
    """(what, a, b, mantissa_bits, n_c): seeded positive vectors (the running sum grows, as in DeepSeek's
    K = 4096 measurement) with K a multiple of N_C and not; signed values; and a float32-wide accumulator on
    products that cancel, where a float32 total's roundings (and a product's) show in the result."""
    g = torch.Generator().manual_seed(2)
    r, s = torch.randn(128, generator=g), torch.randn(128, generator=g)

    def pair(k, draw=torch.rand):
        return draw(k, generator=g), draw(k, generator=g)

    return [
        ("K = 1000, 13 bits, N_C = 128", *pair(1000), 13, 128),
        ("K = 300, 10 bits, N_C = 64", *pair(300), 10, 64),
        ("K = 512, 8 bits, N_C = 32", *pair(512), 8, 32),
        ("K = 384, 12 bits, N_C = 128, signed values", *pair(384, torch.randn), 12, 128),
        ("K = 256, 23 bits, N_C = 8, products that cancel", torch.cat([r, r]), torch.cat([s, -s]), 23, 8),
    ]


def _summed(a, b, bits: int, bounds, *, total=torch.float32, prefix=False, products=None) -> float:
    """The dot product of 1-D ``a`` and ``b`` as a learner's loop may promote it: the running sum of each chunk
    ``[bounds[i], bounds[i + 1])`` (of each prefix ``[0, bounds[i + 1])``, when it is never restarted) added in
    order into a ``total`` of that dtype.  One :func:`fp8.limited_accumulation_matmul` gives every chunk's sum:
    a row per chunk, the other elements zeroed (adding zero leaves a truncated running sum as it is).
    ``products``: the dtype the products are rounded to first."""
    if products is not None:
        a, b = (a * b).to(products), torch.ones_like(b)
    k = torch.arange(a.shape[0])
    rows = torch.stack(
        [(k >= (0 if prefix else lo)) & (k < hi) for lo, hi in zip(bounds, bounds[1:], strict=False)]
    )
    tot = torch.zeros((), dtype=total)
    for part in fp8.limited_accumulation_matmul(rows * a, b[:, None], bits)[:, 0]:
        tot = tot + part.to(total)
    return float(tot.to(torch.float32))


def _bounds(k: int, n: int, first: int | None = None, last: bool = True) -> list[int]:
    """Chunk bounds of ``k`` elements: every ``n`` (after a ``first`` chunk of that size), the last kept."""
    starts = [0, *range(first, k, n)] if first else list(range(0, k, n))
    return [*starts, k] if last or k % n == 0 else starts


_EX2 = {
    "never promoting": "the running sum keeps only mantissa_bits bits all the way: every n_c elements, add it "
    "into the float32 total and start it again from zero",
    "promoting without restarting": "after adding the running sum into the total, set it back to zero, or "
    "each chunk is counted again at every later promotion",
    "promoting into float64 not float32": "the total the partial sums are promoted into is float32 (the CUDA "
    "cores' registers), not float64",
    "off by one in the chunk": "promote after exactly n_c additions: elements 0 .. n_c - 1 make the first chunk",
    "the last chunk forgotten": "when K is not a multiple of n_c the running sum still holds the last elements "
    "after the loop: add it into the total too",
    "the running sum never rounded": "round the running sum with round_accumulator after every addition: that "
    "rounding is the limited accumulator",
    "products rounded to float32": "the products are exact: multiply in float64 (the product of two float32 "
    "values has up to 48 bits)",
}
_SLIPS2 = {  # name -> (a, b, bits, n_c) -> the results of the ways a learner's loop makes that slip
    "never promoting": lambda a, b, bits, n: [_summed(a, b, bits, [0, len(a)])],
    "promoting without restarting": lambda a, b, bits, n: [
        _summed(a, b, bits, _bounds(len(a), n), prefix=True)
    ],
    "promoting into float64 not float32": lambda a, b, bits, n: [
        _summed(a, b, bits, _bounds(len(a), n), total=torch.float64)
    ],
    "off by one in the chunk": lambda a, b, bits, n: [
        _summed(a, b, bits, _bounds(len(a), size, first))
        for size, first in ((n + 1, None), (n - 1 or 1, None), (n, 1))
    ],
    "the last chunk forgotten": lambda a, b, bits, n: [_summed(a, b, bits, _bounds(len(a), n, last=False))],
    "the running sum never rounded": lambda a, b, bits, n: [_summed(a, b, 52, _bounds(len(a), n))],
    "products rounded to float32": lambda a, b, bits, n: [
        _summed(a, b, bits, _bounds(len(a), n), products=torch.float32)
    ],
}
_EX2_HINT = (
    "a running sum rounded with round_accumulator after every addition (products exact); every n_c elements it "
    "is added into a float32 total and restarted at zero; what is left at the end is added too"
)


@exercise(2, "Promote every N_C", mistakes=[Mistake(*m) for m in _EX2.items()])
def ex2(answer, *, show: bool = True) -> CheckResult:
    """``my_promoted_dot(a, b, mantissa_bits, n_c)``: the dot product of 1-D ``a`` and ``b`` with a running sum
    of ``mantissa_bits`` bits (``fp8.round_accumulator``) promoted into a float32 total every ``n_c`` elements,
    against ``fp8.limited_accumulation_matmul(a[None, :], b[:, None], mantissa_bits, promote_every=n_c)``."""
    name, cases = "my_promoted_dot", _ex2_cases()
    outs = _outputs(answer, name, cases, _EX2_HINT, show)
    if isinstance(outs, CheckResult):
        return outs
    if bad := [c[0] for c, t in zip(cases, outs, strict=True) if t.numel() != 1]:
        return wrong(
            f"`{name}` on {bad[0]} gave several numbers, not the one dot product.", _EX2_HINT, show=show
        )
    got = [repr(float(t.reshape(()))) for t in outs]  # float32 values as text: exact, NaN equal to NaN
    want = [
        fp8.limited_accumulation_matmul(a[None, :], b[:, None], bits, n)[0, 0] for _, a, b, bits, n in cases
    ]
    bad = [i for i, w in enumerate(want) if got[i] != repr(float(w))]
    if not bad:
        text = f"`{name}` equals fp8.limited_accumulation_matmul on all {len(cases)} cases, bit for bit."
        return finish("exact", text, show=show)
    slip = _first(_SLIPS2, lambda rule: all(got[i] in map(repr, rule(*cases[i][1:])) for i in bad))
    head = f"`{name}` differs from fp8.limited_accumulation_matmul on {len(bad)} of {len(cases)} cases."
    return finish(
        "wrong", head, [f"first on {cases[bad[0]][0]}", f"hint: {_EX2.get(slip, _EX2_HINT)}"], show=show
    )


# --- Exercise 3: the weight gradient under DeepSeek's tiles ---


def _ex3_cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(what, X of shape (M, K), dY of shape (M, N)): seeded, never square, an outlier channel and token, M
    over two tiles of 128 or a partial one, and K beyond one tile."""
    g = torch.Generator().manual_seed(3)
    x1, dy1 = torch.randn(256, 64, generator=g), 1e-3 * torch.randn(256, 48, generator=g)
    x1[:, 7] *= 50.0  # an outlier channel of X
    x2, dy2 = torch.randn(300, 96, generator=g), 1e-4 * torch.randn(300, 32, generator=g)
    dy2[17] *= 100.0  # an outlier token of dY
    x3, dy3 = torch.randn(128, 160, generator=g), torch.randn(128, 40, generator=g)
    return [
        ("M = 256, K = 64, N = 48, an outlier channel in X", x1, dy1),
        ("M = 300 (a partial tile), K = 96, N = 32, an outlier token in dY", x2, dy2),
        ("M = 128, K = 160 (beyond one tile), N = 40", x3, dy3),
    ]


def blockwise_weight_grad(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The weight gradient (N, K) that ``Float8Linear(recipe="blockwise")``'s backward computes for input
    ``x`` and output gradient ``dy`` (the layer's weight does not enter it)."""
    with seeded(0):  # the layer's own initial weight, drawn without touching the learner's generators
        layer = fp8.Float8Linear(x.shape[1], dy.shape[1], bias=False, recipe="blockwise")
    layer(x.clone()).backward(dy)
    return layer.weight.grad.detach().float()


def _tiled(x_block, dy_block, dy_fmt="fp8_e4m3"):
    return lambda x, dy: fp8.blockwise_quantize(dy, dy_block, dy_fmt).T @ fp8.blockwise_quantize(x, x_block)


_EX3 = {
    "the forward's tiles for X": "the forward quantized X in 1x128 tiles along K; the sum of dW = dY^T X runs "
    "over M, so X is quantized again, along M",
    "the input-gradient tiles for dY": "dY's 1x128 tiles along N serve the input gradient dY W, which sums over "
    "N; dW sums over M, so dY is quantized again, along M",
    "1x128 tiles for both": "a tile must lie along the GEMM's reduction dimension, so that its scale factors out "
    "of each partial sum; in dW = dY^T X that is M, the tokens",
    "128x128 blocks for activations": "DeepSeek keeps 128x128 blocks for weights only: activations and "
    "gradients vary token by token and get thin tiles along the reduction dimension",
    "no quantization": "this GEMM runs in FP8 too: quantize both operands with fp8.blockwise_quantize first",
    "E5M2 for the gradient": "DeepSeek's recipe uses E4M3 for every tensor, gradients too: with a scale per tile "
    "E4M3's precision wins over E5M2's range",
    "the weight's shape": "the weight gradient has the weight's shape (N, K): dW = dY^T X",
}
_SLIPS3 = {
    "the forward's tiles for X": _tiled((1, 128), (128, 1)),
    "the input-gradient tiles for dY": _tiled((128, 1), (1, 128)),
    "1x128 tiles for both": _tiled((1, 128), (1, 128)),
    "128x128 blocks for activations": _tiled((128, 128), (128, 128)),
    "no quantization": lambda x, dy: dy.T @ x,
    "E5M2 for the gradient": _tiled((128, 1), (128, 1), "fp8_e5m2"),
}
_EX3_HINT = (
    "quantize each operand in E4M3 tiles along the reduction dimension of dW = dY^T X (M, the tokens), then "
    "multiply the dequantized operands in float32"
)
_RTOL3 = 1e-5  # of the largest |dW|: float32 sums in another order, never another quantization


def _near(mine: torch.Tensor, ref: torch.Tensor) -> bool:
    return bool((mine - ref).abs().max() <= _RTOL3 * ref.abs().max())


@exercise(3, "The weight gradient's tiles", mistakes=[Mistake(*m) for m in _EX3.items()])
def ex3(answer, *, show: bool = True) -> CheckResult:
    """``my_weight_grad(x, dy)``: dW = dY^T X with both operands quantized as DeepSeek-V3's recipe quantizes
    them for this GEMM (``fp8.blockwise_quantize``), against the weight gradient of
    ``Float8Linear(recipe="blockwise")`` on three seeded shapes, within float32 summation order."""
    name, cases = "my_weight_grad", _ex3_cases()
    outs = _outputs(answer, name, cases, _EX3_HINT, show)
    if isinstance(outs, CheckResult):
        return outs
    for (case, x, dy), mine in zip(cases, outs, strict=True):
        if tuple(mine.shape) != (dy.shape[1], x.shape[1]):
            text = f"`{name}` returned shape {tuple(mine.shape)} on {case}, not the weight's {(dy.shape[1], x.shape[1])}."
            return wrong(text, _EX3["the weight's shape"], show=show)
    want = [blockwise_weight_grad(x, dy) for _, x, dy in cases]
    text = f"`{name}` equals the blockwise recipe's weight gradient on all {len(cases)} shapes"
    if all(map(torch.equal, outs, want)):
        return finish("exact", text + ", bit for bit.", show=show)
    if all(map(_near, outs, want)):
        return finish("close", text + ", within float32 summation order.", show=show)
    slip = _first(
        _SLIPS3, lambda rule: all(_near(m, rule(x, dy)) for m, (_, x, dy) in zip(outs, cases, strict=True))
    )
    bad = [c[0] for c, m, w in zip(cases, outs, want, strict=True) if not _near(m, w)]
    head = (
        f"`{name}` differs from the blockwise recipe's weight gradient on {len(bad)} of {len(cases)} shapes."
    )
    return finish("wrong", head, [f"first on {bad[0]}", f"hint: {_EX3.get(slip, _EX3_HINT)}"], show=show)


# --- Exercise 4: the bytes a weight takes ---

HIGH, LOW = torch.bfloat16, torch.float8_e4m3fn  # the model's weights, and what each GEMM reads


def weight_bytes() -> dict[str, int]:
    """Bytes per parameter a Linear's weights take after an FP8 forward pass, as Transformer Engine counts
    them, from the dtypes' element sizes: training keeps the BF16 weights and a quantized FP8 copy; inference
    stores the FP8 weights alone."""
    return {"training": HIGH.itemsize + LOW.itemsize, "inference": LOW.itemsize}


_EX4 = {
    "FP8 halves the training weights": "in training the model keeps its BF16 weights (the optimizer updates "
    "them, and every forward quantizes them anew): the FP8 copy comes on top",
    "the FP8 copy forgotten": "the quantized copy is a tensor of its own, held from the forward pass until the "
    "backward pass has used it",
    "an FP32 weight in the model": "these weights are BF16 in the model: the FP32 master copy lives in the "
    "optimizer, outside this count",
    "the optimizer counted": "count the weights only: gradients and the optimizer's state come on top, the same "
    "in BF16 and in FP8 training",
    "bits for bytes": "count bytes, not bits: eight bits make a byte",
    "inference keeps a high-precision copy": "inference updates no weight, so nothing needs a high-precision "
    "copy: the weights are stored in FP8 alone",
}


def _bytes_part(answer, name: str, expected: int, slips: dict[float, str]) -> CheckResult:
    if is_placeholder(answer):
        return no_answer(name, False, "a number of bytes per parameter")
    if (a := finite_float(answer)) is None or a < 0:
        text = f"`{name}` = {answer!r:.40} is not a number of bytes per parameter."
        return wrong(text, "count the bytes of every copy of a weight the model holds", show=False)
    if a == expected:
        return finish(
            "exact",
            f"`{name}` = {answer!r}, as Transformer Engine counts the bytes per parameter.",
            show=False,
        )
    hint = _EX4.get(slips.get(a, ""), "list the copies of a weight the model holds, and each one's dtype")
    return wrong(f"`{name}` = {answer!r} is not the count yet.", hint, show=False)


@exercise(4, "The bytes a weight takes", mistakes=[Mistake(*m) for m in _EX4.items()])
def ex4(answer_training, answer_inference, *, show: bool = True) -> CheckResult:
    """Bytes per parameter a Linear's weights take after an FP8 forward pass (Transformer Engine's accounting):
    in training with BF16 weights quantized to FP8 before each GEMM, and in inference with FP8 weights."""
    want, hi, lo, fp32 = weight_bytes(), HIGH.itemsize, LOW.itemsize, torch.float32.itemsize
    rest = hi + 3 * fp32  # BF16 gradients, FP32 master weights and Adam's two FP32 moments
    training = {lo: "FP8 halves the training weights", hi: "the FP8 copy forgotten"}
    training |= {fp32 + lo: "an FP32 weight in the model", hi + rest: "the optimizer counted"}
    training |= {hi + lo + rest: "the optimizer counted", 8 * want["training"]: "bits for bytes"}
    inference = {
        hi: "inference keeps a high-precision copy",
        hi + lo: "inference keeps a high-precision copy",
    }
    inference[8 * want["inference"]] = "bits for bytes"
    parts = [
        _bytes_part(answer_training, "answer_training", want["training"], training),
        _bytes_part(answer_inference, "answer_inference", want["inference"], inference),
    ]
    return combine(parts, show=show)
