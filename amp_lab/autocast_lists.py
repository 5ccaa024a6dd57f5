"""What torch *says* autocast does (``05_autocast_op_lists``): the documented op lists and the rules it
registers at the dispatcher.

Policies, with PyTorch's names for them (``at::autocast::CastPolicy`` in ``aten/src/ATen/autocast_mode.h``,
:data:`TORCH_POLICY`):

``"lower"`` (``lower_precision_fp``)
    float32 inputs run in the low dtype (``bfloat16``/``float16``): matmuls, convolutions.
``"fp32"`` (``fp32``, and ``fp32_set_opt_dtype``/``fp32_append_dtype`` for ops with a ``dtype`` argument)
    low-precision inputs are cast *up* to float32 (losses; ``exp``, ``softmax``... on CUDA).
``"promote"`` (``promote``)
    mixed inputs are cast to the widest input type before the op (``cat``, ``stack`` on CPU).
``"unchanged"`` (no autocast kernel registered: the dispatcher falls through the Autocast key)
    the op runs in whatever dtype its inputs have.
``"n/a"``
    the op could not be probed here (see :mod:`amp_lab.autocast_probe`).
"""

from __future__ import annotations

import re

import torch

from ._checks import ArgumentTypeError, check_choice

POLICIES = ("lower", "fp32", "promote", "unchanged", "n/a")

POLICY_MEANING = {
    "lower": "float32 inputs ran in the low dtype",
    "fp32": "forced to float32, even from low-precision inputs",
    "promote": "autocast cast all inputs to the widest input type",
    "unchanged": "no autocast rule: runs in its input dtype",
    "n/a": "could not be probed here",
}

# The course's policy names and PyTorch's (``at::autocast::CastPolicy`` in autocast_mode.h).
TORCH_POLICY = {
    "lower": "lower_precision_fp",
    "fp32": "fp32 (fp32_set_opt_dtype, fp32_append_dtype: fp32 for ops with a dtype argument)",
    "promote": "promote",
    "unchanged": "no autocast kernel registered for the op: it runs in its input dtype",
}

# ---------------------------------------------------------------------------------------
# The documented lists
# ---------------------------------------------------------------------------------------

# Read from PyTorch's AMP page, "Autocast Op Reference" (docs/source/amp.md in the
# pytorch/pytorch repository, the 2.13 development line: the page already carries the
# May-2026 note on AMP with torch.compile).  The names are the docs' own spellings;
# DOC_ALIASES maps the few that differ from the names this module probes under.
_DOC_SOURCE = (
    "PyTorch docs, 'Automatic Mixed Precision package - torch.amp', section 'Autocast Op "
    "Reference' (docs/source/amp.md, pytorch/pytorch, 2.13 development line)"
)

# The docs' headings, in the course's policy names (PyTorch's CastPolicy in brackets): "Ops that can
# autocast to float16" / "to bfloat16" -> lower (lower_precision_fp); "Ops that can autocast to float32"
# -> fp32 (fp32, fp32_set_opt_dtype, fp32_append_dtype); "Ops that promote to the widest input type" ->
# promote (promote); an op on no list -> unchanged (no autocast kernel registered).
_CUDA_LOWER = (
    "__matmul__", "addbmm", "addmm", "addmv", "addr", "baddbmm", "bmm", "multi_dot",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "GRUCell", "linear", "LSTMCell", "matmul", "mm", "mv", "prelu", "RNNCell",
)  # fmt: skip
_CUDA_FP32 = (
    "__pow__", "__rdiv__", "__rpow__", "__rtruediv__", "acos", "asin",
    "binary_cross_entropy_with_logits", "cosh", "cosine_embedding_loss", "cdist",
    "cosine_similarity", "cross_entropy", "cumprod", "cumsum", "dist", "erfinv", "exp",
    "expm1", "group_norm", "hinge_embedding_loss", "kl_div", "l1_loss", "layer_norm", "log",
    "log_softmax", "log10", "log1p", "log2", "margin_ranking_loss", "mse_loss",
    "multilabel_margin_loss", "multi_margin_loss", "nll_loss", "norm", "normalize", "pdist",
    "poisson_nll_loss", "pow", "prod", "reciprocal", "rsqrt", "sinh", "smooth_l1_loss",
    "soft_margin_loss", "softmax", "softmin", "softplus", "sum", "renorm", "tan",
    "triplet_margin_loss",
)  # fmt: skip
_CUDA_PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sample", "index_put",
    "scatter_add", "tensordot",
)  # fmt: skip

_CPU_LOWER = (
    "conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "addbmm",
    "linear", "matmul", "_convolution", "conv_tbc", "mkldnn_rnn_layer", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "prelu", "scaled_dot_product_attention",
    "_native_multi_head_attention",
)  # fmt: skip
_CPU_FP32 = (
    "avg_pool3d", "binary_cross_entropy", "grid_sampler", "grid_sampler_2d",
    "_grid_sampler_2d_cpu_fallback", "grid_sampler_3d", "polar", "prod", "quantile",
    "nanquantile", "stft", "cdist", "trace", "view_as_complex", "cholesky_inverse",
    "cholesky_solve", "inverse", "lu_solve", "orgqr", "ormqr", "pinverse", "max_pool3d",
    "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d", "reflection_pad1d",
    "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "mse_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss",
    "poisson_nll_loss", "cross_entropy_loss", "l1_loss", "huber_loss", "margin_ranking_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "ctc_loss", "kl_div",
    "multilabel_margin_loss", "binary_cross_entropy_with_logits", "fft_fft", "fft_ifft",
    "fft_fft2", "fft_ifft2", "fft_fftn", "fft_ifftn", "fft_rfft", "fft_irfft", "fft_rfft2",
    "fft_irfft2", "fft_rfftn", "fft_irfftn", "fft_hfft", "fft_ihfft", "linalg_cond",
    "linalg_matrix_rank", "linalg_solve", "linalg_cholesky", "linalg_svdvals",
    "linalg_eigvals", "linalg_eigvalsh", "linalg_inv", "linalg_householder_product",
    "linalg_tensorinv", "linalg_tensorsolve", "fake_quantize_per_tensor_affine", "geqrf",
    "_lu_with_info", "qr", "svd", "triangular_solve", "fractional_max_pool2d",
    "fractional_max_pool3d", "adaptive_max_pool3d", "multilabel_margin_loss_forward",
    "linalg_qr", "linalg_cholesky_ex", "linalg_svd", "linalg_eig", "linalg_eigh",
    "linalg_lstsq", "linalg_inv_ex",
)  # fmt: skip
_CPU_PROMOTE = ("cat", "stack", "index_copy")

DOCUMENTED = {
    "torch_version": "2.13",
    "source": _DOC_SOURCE,
    "cuda": {
        "dtype": torch.float16,
        "lower": _CUDA_LOWER,
        "fp32": _CUDA_FP32,
        "promote": _CUDA_PROMOTE,
        # "binary_cross_entropy and BCELoss raise an error in autocast-enabled regions"
        "refused": ("binary_cross_entropy",),
    },
    "cpu": {
        "dtype": torch.bfloat16,
        "lower": _CPU_LOWER,
        "fp32": _CPU_FP32,
        "promote": _CPU_PROMOTE,
        "refused": (),
    },
}

# docs spelling -> the key the probe uses
DOC_ALIASES = {"cross_entropy_loss": "cross_entropy", "grid_sampler": "grid_sample"}

_LISTED = ("lower", "fp32", "promote")


def _device_type(value) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"device_type must be 'cpu' or 'cuda', got {type(value).__name__}: {value!r:.80}"
        )
    return check_choice("device_type", value, AUTOCAST_KEYS)


def documented_names(device_type: str, policy: str) -> set[str]:
    """The names on one documented list, spelled as the probe spells them."""
    return {DOC_ALIASES.get(name, name) for name in DOCUMENTED[device_type].get(policy, ())}


def documented_policy(op: str, device_type: str = "cpu") -> str:
    """The policy PyTorch's docs give ``op`` on ``device_type`` (``"cpu"`` or ``"cuda"``).

    Ops on no list are documented as running in their input dtype (``"unchanged"``); an op the docs say
    autocast refuses (``binary_cross_entropy`` on CUDA) is ``"n/a"``.
    """
    if not isinstance(op, str):
        raise ArgumentTypeError(f"op must be an op name such as 'mm', got {type(op).__name__}: {op!r:.80}")
    _device_type(device_type)
    for policy in _LISTED:
        if op in documented_names(device_type, policy):
            return policy
    return "n/a" if op in DOCUMENTED[device_type]["refused"] else "unchanged"


# ---------------------------------------------------------------------------------------
# The registered rules, asked of the dispatcher
# ---------------------------------------------------------------------------------------

# The dispatch key that holds each device's autocast rules (torch registers them in C++,
# aten/src/ATen/autocast_mode.cpp, with one kernel per op and policy).
AUTOCAST_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}

# Longest op name has_autocast_rule reads (aten's longest is under 80 characters).
MAX_OP_NAME_LENGTH = 200

_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _qualified_op(name: str, op) -> str:
    """``op`` ("einsum", "softmax.int", "aten::mm") as the dispatcher's qualified name, or a ValueError."""
    if not isinstance(op, str):
        raise ArgumentTypeError(
            f"{name} must be an aten op name such as 'einsum' or 'softmax.int', got {type(op).__name__}: {op!r:.80}"
        )
    if len(op) > MAX_OP_NAME_LENGTH:
        raise ValueError(
            f"{name} must be an aten op name of at most {MAX_OP_NAME_LENGTH} characters, got {len(op)}"
        )
    base, _, overload = op.strip().removeprefix("aten::").partition(".")
    overload = "" if overload == "default" else overload  # torch.ops.aten.mm.default: the default overload
    if (
        not _OP_NAME.fullmatch(base)
        or (overload and not _OP_NAME.fullmatch(overload))
        or op.strip().endswith(".")
    ):
        raise ValueError(
            f"{name}={op!r:.80} is not an aten op name: write it as torch's dispatcher does, e.g. 'einsum', "
            "'softmax.int' (the overload after a dot) or 'aten::mm'"
        )
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{base}", overload)
    except Exception:  # RuntimeError "Could not find schema": the dispatcher does not know it
        prefix = f"aten::{base}."
        others = (
            []
            if overload
            else sorted(
                n.removeprefix("aten::")
                for n in torch._C._dispatch_get_all_op_names()
                if n.startswith(prefix)
            )
        )
        if others:
            raise ValueError(
                f"{name}={op!r} has no default overload in torch {torch.__version__}; name one of: "
                f"{', '.join(others[:12])}{', ...' if len(others) > 12 else ''}"
            ) from None
        raise ValueError(
            f"{name}={op!r:.80} is not an operator torch {torch.__version__}'s dispatcher knows "
            "(an aten name such as 'einsum', 'softmax.int', 'add.Tensor')"
        ) from None
    return f"aten::{base}" + (f".{overload}" if overload else "")


def has_autocast_rule(op: str, device_type: str) -> bool:
    """Whether torch registered an autocast rule of its own for the aten op ``op`` on ``device_type``.

    Asked of the dispatcher, so it works on any build, a CPU-only one included: does the op have a kernel on
    the ``AutocastCPU``/``AutocastCUDA`` dispatch key (:data:`AUTOCAST_KEYS`)?  Every other op falls through
    autocast untouched ("unchanged").  An op without a rule of its own can still run in the low dtype when
    it *decomposes* into ops that have one (``einsum`` into ``bmm`` on the CPU): the probe sees that, the
    dispatcher does not.  The dispatcher does not say *which* policy a rule applies.

    ``op`` is the aten name, with the overload after a dot where the op has no default one: ``"einsum"``,
    ``"softmax.int"``, ``"add.Tensor"``; an ``"aten::"`` prefix is accepted.  An op the dispatcher does not
    know raises ValueError.  ``device_type`` is ``"cpu"`` or ``"cuda"``.
    """
    qualified = _qualified_op("op", op)
    _device_type(device_type)
    key = AUTOCAST_KEYS[device_type]
    if not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key):
        return False
    # A per-op fallthrough would be "registered" yet do nothing (torch 2.13 has none; checked anyway).
    is_fallthrough = getattr(torch._C, "_dispatch_kernel_for_dispatch_key_is_fallthrough", None)
    return not (is_fallthrough is not None and is_fallthrough(qualified, key))
