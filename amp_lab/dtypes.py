"""The course's one dtype table: the names a learner may type for a torch dtype, and how a dtype prints."""

from __future__ import annotations

import torch

from ._checks import ArgumentTypeError

# Every name a learner may type for a dtype (case and a "torch." prefix aside).  A function that takes only
# some dtypes says which with ``parse_dtype(..., allowed=...)``.
DTYPE_NAMES = {
    "fp64": torch.float64, "float64": torch.float64, "double": torch.float64,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "fp8_e4m3": torch.float8_e4m3fn, "float8_e4m3fn": torch.float8_e4m3fn, "e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2, "float8_e5m2": torch.float8_e5m2, "e5m2": torch.float8_e5m2,
    "int64": torch.int64, "long": torch.int64, "int32": torch.int32, "int": torch.int32,
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
}  # fmt: skip


def dtype_named(name: str) -> torch.dtype | None:
    """The dtype ``name`` names (``"bf16"``, ``"torch.float16"``, ``"half"``), or None."""
    return DTYPE_NAMES.get(name.strip().lower().removeprefix("torch."))


def dtype_name(dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: how the course prints a dtype."""
    return str(dtype).removeprefix("torch.")


def parse_dtype(dtype, *, allowed=(torch.float16, torch.bfloat16), name: str = "dtype") -> torch.dtype:
    """Accept a torch dtype or a short name (``"bf16"``, ``"fp16"``, ...) from ``allowed``, the dtypes a caller
    takes; a ValueError (TypeError for no dtype at all) names ``name`` and lists them."""
    shown = ", ".join(dtype_name(a) for a in allowed)
    if not isinstance(dtype, (str, torch.dtype)):
        raise ArgumentTypeError(
            f"{name} must be a torch dtype or its name, one of: {shown}; got {type(dtype).__name__}: {dtype!r:.80}"
        )
    found = dtype_named(dtype) if isinstance(dtype, str) else dtype
    if found not in allowed:  # the message shows what the learner typed
        raise ValueError(f"{name}={dtype!r} is not allowed; choose one of: {shown}")
    return found
