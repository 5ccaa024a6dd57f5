"""The course's one step-cost model: the FLOPs and bytes of a training step or a GEMM, which the race,
the roofline and notebook 07's comparison all read (``06_timing_race``, ``07_amp_training_recipe``)."""

from __future__ import annotations

from itertools import pairwise

import torch

from ._checks import check_int
from .dtypes import parse_dtype

# Bounds (CONTRIBUTING.md, "Bounded work"), checked before anything is allocated or run:
MAX_DEPTH = 64  # hidden layers of models.make_mlp's MLP
MAX_SIZE = 2**53  # any width or batch size: exact in float64
MAX_GEMM_DIM = 2**31  # a matrix dimension of the intensities
MAX_NUMEL = 2**40
# The race's MLP (notebook 06): Linear(IN_FEATURES -> width) -> ReLU -> Linear(width -> NUM_CLASSES).
IN_FEATURES = 1024
NUM_CLASSES = 10
# Bytes one Adam step moves per float32 parameter: the gradient written (4), the parameter, gradient and
# both moments read (16), the parameter and both moments written (12).
ADAM_BYTES_PER_PARAMETER = 32


def mlp_sizes(num_features, num_classes, hidden, depth) -> tuple[int, int, int, int]:
    return (
        check_int("num_features", num_features, minimum=1, maximum=MAX_SIZE),
        check_int("num_classes", num_classes, minimum=2, maximum=MAX_SIZE),
        check_int("hidden", hidden, minimum=1, maximum=MAX_SIZE),
        check_int("depth", depth, minimum=1, maximum=MAX_DEPTH),
    )


def num_parameters(num_features: int, num_classes: int, hidden: int, depth: int) -> int:
    return sum(a * b + b for a, b in pairwise([num_features] + [hidden] * depth + [num_classes]))


def _mlp_args(num_features, num_classes, hidden, depth, batch_size, accumulation_steps):
    return (
        *mlp_sizes(num_features, num_classes, hidden, depth),
        check_int("batch_size", batch_size, minimum=1, maximum=MAX_SIZE)
        * check_int("accumulation_steps", accumulation_steps, minimum=1, maximum=MAX_SIZE),
    )


def _itemsize(name: str, dtype) -> int:
    return parse_dtype(dtype, allowed=(torch.float32, torch.float16, torch.bfloat16), name=name).itemsize


def step_flops(
    num_features: int = 64,
    num_classes: int = 10,
    *,
    hidden: int = 64,
    depth: int = 2,
    batch_size: int = 64,
    accumulation_steps: int = 1,
) -> float:
    """Matmul FLOPs of one optimizer step of :func:`models.make_mlp`'s MLP (``07_amp_training_recipe``):
    ``2*b*in*out`` per Linear forward, as much for its weight's gradient and for its input's (but the first's),
    over ``b = batch_size * accumulation_steps`` examples.  Elementwise work is :func:`step_bytes`' traffic."""
    num_features, num_classes, hidden, depth, b = _mlp_args(
        num_features, num_classes, hidden, depth, batch_size, accumulation_steps
    )
    return _mlp_matmul_flops([num_features] + [hidden] * depth + [num_classes], b)


def _mlp_matmul_flops(widths: list[int], b: int) -> float:
    """The course's one MLP count for Linear layers of ``widths``: ``2*b*in*out`` per Linear, times 3 (times 2
    for the first, whose input needs no gradient)."""
    shapes = enumerate(pairwise(widths))
    return float(sum(2 * b * n_in * n_out * (2 if i == 0 else 3) for i, (n_in, n_out) in shapes))


def step_bytes(
    num_features: int = 64,
    num_classes: int = 10,
    *,
    hidden: int = 64,
    depth: int = 2,
    batch_size: int = 64,
    accumulation_steps: int = 1,
    dtype=torch.float32,
) -> float:
    """A lower bound on the bytes one optimizer step of :func:`models.make_mlp`'s MLP moves
    (``07_amp_training_recipe``), each counted once: :data:`ADAM_BYTES_PER_PARAMETER` per parameter, the
    float32 inputs read, and each Linear's output written forward and read backward in ``dtype``."""
    num_features, num_classes, hidden, depth, b = _mlp_args(
        num_features, num_classes, hidden, depth, batch_size, accumulation_steps
    )
    itemsize = _itemsize("dtype", dtype)
    params = num_parameters(num_features, num_classes, hidden, depth)
    activations = b * (hidden * depth + num_classes)  # each Linear's output
    return float(ADAM_BYTES_PER_PARAMETER * params + 4 * b * num_features + 2 * itemsize * activations)


# The race's costs (06): a GEMM, an elementwise add, and the race's MLP step


def gemm_bytes(m: int, n: int, k: int, in_bytes: int, out_bytes: int) -> int:
    """The least traffic of ``C = A @ B``: A (m x k) and B (k x n) read once, C (m x n) written once."""
    return (m * k + k * n) * in_bytes + m * n * out_bytes


def matmul_intensity(m: int, n: int, k: int, dtype=torch.float32, *, out_dtype=None) -> float:
    """Arithmetic intensity of ``C = A @ B`` (A m x k, B k x n, in ``dtype``; C in ``out_dtype``, default
    ``dtype``): ``2mnk`` FLOPs over the bytes of A, B and C, each moved once.  (``06_timing_race``)

    >>> round(matmul_intensity(1024, 1024, 1024, torch.float32), 2)  # 2 * 1024**3 / (3 * 1024**2 * 4)
    170.67
    """
    m = check_int("m", m, minimum=1, maximum=MAX_GEMM_DIM)
    n = check_int("n", n, minimum=1, maximum=MAX_GEMM_DIM)
    k = check_int("k", k, minimum=1, maximum=MAX_GEMM_DIM)
    a = _itemsize("dtype", dtype)
    c = a if out_dtype is None else _itemsize("out_dtype", out_dtype)
    return 2 * m * n * k / gemm_bytes(m, n, k, a, c)


def elementwise_intensity(dtype=torch.float32) -> float:
    """Arithmetic intensity of ``torch.add(a, b)`` in ``dtype``: ``1 / (3 * itemsize)`` FLOP per byte, memory-bound
    on every machine.  (``06_timing_race``)"""
    return 1 / (3 * _itemsize("dtype", dtype))


def matmul_bytes(n: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes ``race_matmul(n)`` keeps alive at its peak: A, B and C in FP32, plus A, B and C in
    the low-precision ``dtype`` (autocast's casts of the inputs and its result)."""
    return n * n * (3 * 4 + 3 * dtype.itemsize)


def elementwise_bytes(numel: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes ``race_elementwise(numel)`` keeps alive: two inputs and an output in FP32 and the same three
    in the low-precision ``dtype``."""
    return 3 * numel * (4 + dtype.itemsize)


def fp8_matmul_bytes(n: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes ``race_fp8_matmul(n)`` keeps alive at its peak: :func:`matmul_bytes`, two E4M3 operands, a bfloat16
    result, and three FP32 temporaries while B's transpose is scaled."""
    return matmul_bytes(n, dtype) + n * n * (2 * 1 + 2 + 3 * 4)


def mlp_bytes(width, batch, dtype=torch.bfloat16, *, in_features=IN_FEATURES, num_classes=NUM_CLASSES,
              contestants=2) -> int:  # fmt: skip
    """A generous estimate of what ``race_mlp`` needs: per contestant the parameters, gradients
    and Adam's two moments (FP32), autocast's low-precision weight copies, and activations."""
    low = dtype.itemsize
    params = num_parameters(in_features, num_classes, width, 1)
    activations = batch * (in_features + 3 * width + 3 * num_classes)
    per_contestant = 16 * params + low * params + 4 * activations + low * batch * in_features
    return contestants * per_contestant + 4 * batch * in_features


def mlp_step_flops(
    width: int, batch: int, *, in_features: int = IN_FEATURES, num_classes: int = NUM_CLASSES
) -> float:
    """Matmul FLOPs of one training step of the race's MLP (one hidden layer of ``width``)."""
    return _mlp_matmul_flops([in_features, width, num_classes], batch)


def call_bytes(kind: str, params: dict, dtype: torch.dtype | None) -> int:
    """A lower bound on the bytes one call of a race (``kind``: matmul, fp8_matmul, elementwise, mlp) moves:
    ``dtype`` None is the FP32 contestant, a 16-bit dtype the AMP one, its casts included (a matmul's; an
    fp8_matmul's and an elementwise race's inputs are already in their dtype).  (``06_timing_race``)"""
    low = 4 if dtype is None else dtype.itemsize
    if kind in ("matmul", "fp8_matmul"):
        n = params["n"]
        if kind == "fp8_matmul" or dtype is None:
            return gemm_bytes(n, n, n, low, low)
        return 8 * n * n + 2 * low * n * n + gemm_bytes(n, n, n, low, low)  # casts: read FP32, write 16-bit
    if kind == "elementwise":
        return 3 * low * params["numel"]
    i, c = params.get("in_features", IN_FEATURES), params.get("num_classes", NUM_CLASSES)
    w, b = params["width"], params["batch"]
    n_params = num_parameters(i, c, w, 1)
    weights = 8 * n_params if dtype is None else 4 * n_params + 3 * low * n_params
    activations = b * (i + 2 * w + c)  # input, pre- and post-ReLU hidden, logits
    return ADAM_BYTES_PER_PARAMETER * n_params + weights + 4 * low * activations
