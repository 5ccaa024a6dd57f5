"""The course's one step-cost model: the FLOPs and bytes of a training step or a GEMM, which the race,
the roofline and notebook 07's comparison all read (``06_timing_race``, ``07_amp_training_recipe``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._checks import check_int
from .dtypes import parse_dtype

# Bounds (CONTRIBUTING.md, "Bounded work"), each checked before anything is allocated or run:
MAX_DEPTH = 64  # hidden layers of make_model's MLP: far deeper than plain MLPs train well without normalisation



_MAX_SIZE = 2**53  # any width or batch size: an integer float64 holds exactly (step_flops stays a finite float)



def _linear_shapes(num_features: int, num_classes: int, hidden: int, depth: int) -> list[tuple[int, int]]:
    """``(in, out)`` of each Linear of :func:`make_model`'s MLP, in order."""
    widths = [num_features] + [hidden] * depth + [num_classes]
    return list(zip(widths[:-1], widths[1:], strict=True))



def _mlp_sizes(num_features, num_classes, hidden, depth) -> tuple[int, int, int, int]:
    return (
        check_int("num_features", num_features, minimum=1, maximum=_MAX_SIZE),
        check_int("num_classes", num_classes, minimum=2, maximum=_MAX_SIZE),
        check_int("hidden", hidden, minimum=1, maximum=_MAX_SIZE),
        check_int("depth", depth, minimum=1, maximum=MAX_DEPTH),
    )



def _num_parameters(num_features: int, num_classes: int, hidden: int, depth: int) -> int:
    return sum(n_in * n_out + n_out for n_in, n_out in _linear_shapes(num_features, num_classes, hidden, depth))



def _mlp_args(num_features, num_classes, hidden, depth, batch_size, accumulation_steps):
    return (
        *_mlp_sizes(num_features, num_classes, hidden, depth),
        check_int("batch_size", batch_size, minimum=1, maximum=_MAX_SIZE)
        * check_int("accumulation_steps", accumulation_steps, minimum=1, maximum=_MAX_SIZE),
    )



def step_flops(
    num_features: int = 64,
    num_classes: int = 10,
    *,
    hidden: int = 64,
    depth: int = 2,
    batch_size: int = 64,
    accumulation_steps: int = 1,
) -> float:
    """Matmul FLOPs of one optimizer step of :func:`make_model`'s MLP (``07_amp_training_recipe``).

    A Linear with ``in`` inputs and ``out`` outputs on ``b`` examples costs ``2*b*in*out`` FLOPs
    forward (a multiply and an add per weight and example), as much again backward for its weight's
    gradient, and as much again for its input's gradient, except the first Linear, whose input (the
    data) needs no gradient.  ``b`` is every example of the step, ``batch_size * accumulation_steps``.
    Bias additions, ReLU, the loss and Adam are elementwise and left out: they are memory traffic,
    which :func:`step_bytes` counts.
    """
    num_features, num_classes, hidden, depth, b = _mlp_args(
        num_features, num_classes, hidden, depth, batch_size, accumulation_steps
    )
    return _mlp_matmul_flops([num_features] + [hidden] * depth + [num_classes], b)



def _mlp_matmul_flops(widths: Sequence[int], b: int) -> float:
    """Matmul FLOPs of one training step of an MLP of Linear layers whose widths are ``widths`` (the input's
    first, checked by the caller) on ``b`` examples: the course's one MLP cost model (:func:`step_flops`;
    the race's one-hidden-layer model is the same count).  Each Linear costs ``2*b*in*out`` forward, as
    much for its weight's gradient, and as much for its input's, except the first Linear's input."""
    total = 0
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        total += 2 * b * n_in * n_out * (2 if i == 0 else 3)
    return float(total)



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
    """A lower bound on the bytes one optimizer step of :func:`make_model`'s MLP moves to and from memory
    (``07_amp_training_recipe``).

    Counted once each: the float32 parameters and their gradients, each read once and written once
    (16 bytes per parameter), Adam's two float32 moments, read once and written once (16 more); the
    float32 inputs, read once; and each Linear's output, written in the forward pass and read once in
    the backward pass, in ``dtype`` (2 bytes under bfloat16 or float16 autocast, 4 in float32).
    Real kernels move more (autocast's 16-bit copies of the weights, the loss, extra passes over
    the gradients for clipping and the inf check), so a step can only be slower than these bytes at
    the peak bandwidth: that makes it a lower bound, not an estimate.
    """
    num_features, num_classes, hidden, depth, b = _mlp_args(
        num_features, num_classes, hidden, depth, batch_size, accumulation_steps
    )
    itemsize = parse_dtype(dtype, allowed=(torch.float32, torch.bfloat16, torch.float16)).itemsize
    shapes = _linear_shapes(num_features, num_classes, hidden, depth)
    params = _num_parameters(num_features, num_classes, hidden, depth)
    activations = sum(b * n_out for _, n_out in shapes)
    return float(32 * params + 4 * b * num_features + 2 * itemsize * activations)
