"""What torch *says* autocast does (05): the documented op lists, the rules registered at the dispatcher and
the catalogue the probe (:mod:`amp_lab.autocast_ops`) runs.  Policies (``at::autocast::CastPolicy``):
``"lower"`` (``lower_precision_fp``: float32 runs low), ``"fp32"`` (``fp32``: low inputs are cast up),
``"promote"`` (``promote``: mixed inputs go to the widest), ``"unchanged"`` (no rule) and ``"n/a"``."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ._checks import bounded_list, check_choice, check_instance

POLICIES = ("lower", "fp32", "promote", "unchanged", "n/a")
LISTED = ("lower", "fp32", "promote")

# PyTorch's AMP page, "Autocast Op Reference" (docs/source/amp.md, the 2.13 development line), in the docs'
# own spellings; DOC_ALIASES maps the few that differ from the probe's names.
_CUDA_LOWER = (
    "__matmul__", "addbmm", "addmm", "addmv", "addr", "baddbmm", "bmm", "multi_dot", "conv1d", "conv2d",
    "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "GRUCell", "linear", "LSTMCell",
    "matmul", "mm", "mv", "prelu", "RNNCell",
)  # fmt: skip
_CUDA_FP32 = (
    "__pow__", "__rdiv__", "__rpow__", "__rtruediv__", "acos", "asin", "binary_cross_entropy_with_logits",
    "cosh", "cosine_embedding_loss", "cdist", "cosine_similarity", "cross_entropy", "cumprod", "cumsum",
    "dist", "erfinv", "exp", "expm1", "group_norm", "hinge_embedding_loss", "kl_div", "l1_loss", "layer_norm",
    "log", "log_softmax", "log10", "log1p", "log2", "margin_ranking_loss", "mse_loss",
    "multilabel_margin_loss", "multi_margin_loss", "nll_loss", "norm", "normalize", "pdist",
    "poisson_nll_loss", "pow", "prod", "reciprocal", "rsqrt", "sinh", "smooth_l1_loss", "soft_margin_loss",
    "softmax", "softmin", "softplus", "sum", "renorm", "tan", "triplet_margin_loss",
)  # fmt: skip
_CUDA_PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sample", "index_put", "scatter_add",
    "tensordot",
)  # fmt: skip

_CPU_LOWER = (
    "conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "addbmm", "linear",
    "matmul", "_convolution", "conv_tbc", "mkldnn_rnn_layer", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "prelu", "scaled_dot_product_attention", "_native_multi_head_attention",
)  # fmt: skip
_CPU_FP32 = (
    "avg_pool3d", "binary_cross_entropy", "grid_sampler", "grid_sampler_2d", "_grid_sampler_2d_cpu_fallback",
    "grid_sampler_3d", "polar", "prod", "quantile", "nanquantile", "stft", "cdist", "trace",
    "view_as_complex", "cholesky_inverse", "cholesky_solve", "inverse", "lu_solve", "orgqr", "ormqr",
    "pinverse", "max_pool3d", "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d", "reflection_pad1d",
    "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d", "mse_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "poisson_nll_loss",
    "cross_entropy_loss", "l1_loss", "huber_loss", "margin_ranking_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "ctc_loss", "kl_div", "multilabel_margin_loss",
    "binary_cross_entropy_with_logits", "fft_fft", "fft_ifft", "fft_fft2", "fft_ifft2", "fft_fftn",
    "fft_ifftn", "fft_rfft", "fft_irfft", "fft_rfft2", "fft_irfft2", "fft_rfftn", "fft_irfftn", "fft_hfft",
    "fft_ihfft", "linalg_cond", "linalg_matrix_rank", "linalg_solve", "linalg_cholesky", "linalg_svdvals",
    "linalg_eigvals", "linalg_eigvalsh", "linalg_inv", "linalg_householder_product", "linalg_tensorinv",
    "linalg_tensorsolve", "fake_quantize_per_tensor_affine", "geqrf", "_lu_with_info", "qr", "svd",
    "triangular_solve", "fractional_max_pool2d", "fractional_max_pool3d", "adaptive_max_pool3d",
    "multilabel_margin_loss_forward", "linalg_qr", "linalg_cholesky_ex", "linalg_svd", "linalg_eig",
    "linalg_eigh", "linalg_lstsq", "linalg_inv_ex",
)  # fmt: skip
_CPU_PROMOTE = ("cat", "stack", "index_copy")

DOCUMENTED = {
    "torch_version": "2.13",
    "source": "PyTorch docs, 'Automatic Mixed Precision package - torch.amp', section 'Autocast Op Reference' (docs/source/amp.md, pytorch/pytorch, 2.13 development line)",
    # refused: the ops the docs say "raise an error in autocast-enabled regions"
    "cuda": dict(
        lower=_CUDA_LOWER, fp32=_CUDA_FP32, promote=_CUDA_PROMOTE, refused=("binary_cross_entropy",)
    ),
    "cpu": dict(lower=_CPU_LOWER, fp32=_CPU_FP32, promote=_CPU_PROMOTE, refused=()),
}
DOC_ALIASES = {"cross_entropy_loss": "cross_entropy", "grid_sampler": "grid_sample"}
# The dispatch key that holds each device's autocast rules (aten/src/ATen/autocast_mode.cpp).
AUTOCAST_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}
_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_device_type(value) -> str:
    value = check_instance("device_type", value, str, "'cpu' or 'cuda'")
    return check_choice("device_type", value, AUTOCAST_KEYS)


def documented_policy(op: str, device_type: str = "cpu") -> str:
    """The policy PyTorch's docs give ``op`` on ``device_type``: ``"unchanged"`` for an op on no list,
    ``"n/a"`` for one the docs say autocast refuses (``binary_cross_entropy`` on CUDA)."""
    check_instance("op", op, str, "an op name such as 'mm'")
    lists = DOCUMENTED[check_device_type(device_type)]
    for policy in LISTED:
        if op in {DOC_ALIASES.get(name, name) for name in lists[policy]}:
            return policy
    return "n/a" if op in lists["refused"] else "unchanged"


def qualified_op(op) -> str:
    """``op`` ("einsum", "softmax.int", "aten::mm") as the dispatcher's qualified name, or a ValueError."""
    check_instance("op", op, str, "an aten op name such as 'softmax.int'")
    if len(op) > 200:
        raise ValueError(f"op must be an aten op name of at most 200 characters, got {len(op)}")
    base, dot, overload = op.strip().removeprefix("aten::").partition(".")
    if not _OP_NAME.fullmatch(base) or (dot and not _OP_NAME.fullmatch(overload)):
        raise ValueError(f"op={op!r:.80} is not an aten op name such as 'einsum', 'softmax.int', 'aten::mm'")
    overload = "" if overload == "default" else overload
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{base}", overload)
    except Exception:  # "Could not find schema": the dispatcher does not know it
        names = [] if overload else torch._C._dispatch_get_all_op_names()
        others = sorted(n.removeprefix("aten::") for n in names if n.startswith(f"aten::{base}."))
        where = f"in torch {torch.__version__}'s dispatcher"
        why = f"has no default overload {where}; name one of: {', '.join(others[:9])}"
        raise ValueError(f"op={op!r:.80} {why if others else 'is not an operator ' + where}") from None
    return f"aten::{base}" + (f".{overload}" if overload else "")


def has_autocast_rule(op: str, device_type: str) -> bool:
    """Whether torch registered an autocast kernel for the aten op ``op`` (``"einsum"``, ``"softmax.int"``)
    on ``device_type``'s dispatch key, asked of the dispatcher (so the CUDA answer is live on any build)."""
    qualified, key = qualified_op(op), AUTOCAST_KEYS[check_device_type(device_type)]
    registered = torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)
    return registered and not torch._C._dispatch_kernel_for_dispatch_key_is_fallthrough(qualified, key)


FAMILIES = ("matmul", "convolution", "rnn cell", "activation", "softmax", "normalization", "loss")
FAMILIES += ("reduction", "pointwise", "pooling/padding", "cat/index", "fft")
MAX_OP_NAMES = 1000  # the catalogue has about a hundred ops: a longer list can only repeat them


@dataclass(frozen=True)
class Op:
    name: str
    family: str
    shapes: tuple[tuple[int, ...], ...]  # shapes of the floating-point inputs
    call: Callable[..., object]  # takes exactly those inputs


def _rows(x: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """``n`` fixed int64 labels in ``[0, k)`` on ``x``'s device (no random state)."""
    return torch.arange(n, device=x.device) % k


def _signs(x: torch.Tensor) -> torch.Tensor:
    """A +1/-1 target with ``x``'s shape, dtype and device."""
    s = torch.ones_like(x)
    s.view(-1)[1::2] = -1
    return s


@functools.cache
def catalogue() -> tuple[Op, ...]:
    o = Op
    return (
        # matmul family ------------------------------------------------------------
        o("mm", "matmul", ((4, 4), (4, 4)), torch.mm),
        o("bmm", "matmul", ((2, 4, 4), (2, 4, 4)), torch.bmm),
        o("matmul", "matmul", ((4, 4), (4, 4)), torch.matmul),
        o("__matmul__", "matmul", ((4, 4), (4, 4)), lambda a, b: a @ b),
        o("addmm", "matmul", ((4, 4), (4, 4), (4, 4)), torch.addmm),
        o("addbmm", "matmul", ((4, 4), (2, 4, 4), (2, 4, 4)), torch.addbmm),
        o("baddbmm", "matmul", ((2, 4, 4), (2, 4, 4), (2, 4, 4)), torch.baddbmm),
        o("addmv", "matmul", ((4,), (4, 4), (4,)), torch.addmv),
        o("addr", "matmul", ((4, 4), (4,), (4,)), torch.addr),
        o("mv", "matmul", ((4, 4), (4,)), torch.mv),
        o("dot", "matmul", ((4,), (4,)), torch.dot),
        o("linear", "matmul", ((2, 4), (3, 4), (3,)), F.linear),
        o("bilinear", "matmul", ((2, 3), (2, 3), (4, 3, 3), (4,)), F.bilinear),
        o("multi_dot", "matmul", ((3, 4), (4, 4), (4, 2)), lambda a, b, c: torch.linalg.multi_dot([a, b, c])),
        o("einsum", "matmul", ((3, 4), (4, 2)), lambda a, b: torch.einsum("ij,jk->ik", a, b)),
        o("tensordot", "matmul", ((3, 4), (4, 2)), lambda a, b: torch.tensordot(a, b, dims=1)),
        o("linalg_vecdot", "matmul", ((3, 4), (3, 4)), torch.linalg.vecdot),
        o("scaled_dot_product_attention", "matmul", ((1, 2, 4, 8),) * 3, F.scaled_dot_product_attention),
        # convolutions -------------------------------------------------------------
        o("conv1d", "convolution", ((1, 2, 5), (3, 2, 3)), F.conv1d),
        o("conv2d", "convolution", ((1, 2, 5, 5), (3, 2, 3, 3)), F.conv2d),
        o("conv3d", "convolution", ((1, 2, 3, 3, 3), (3, 2, 2, 2, 2)), F.conv3d),
        o("conv_transpose1d", "convolution", ((1, 2, 5), (2, 3, 3)), F.conv_transpose1d),
        o("conv_transpose2d", "convolution", ((1, 2, 4, 4), (2, 3, 3, 3)), F.conv_transpose2d),
        o("conv_transpose3d", "convolution", ((1, 2, 3, 3, 3), (2, 3, 2, 2, 2)), F.conv_transpose3d),
        # recurrent cells (the docs name the nn modules) ------------------------------
        o("LSTMCell", "rnn cell", ((2, 3), (2, 4), (2, 4), (16, 3), (16, 4), (16,), (16,)),
          lambda x, h, c, wi, wh, bi, bh: torch.lstm_cell(x, (h, c), wi, wh, bi, bh)[0]),
        o("GRUCell", "rnn cell", ((2, 3), (2, 4), (12, 3), (12, 4), (12,), (12,)), torch.gru_cell),
        o("RNNCell", "rnn cell", ((2, 3), (2, 4), (4, 3), (4, 4), (4,), (4,)), torch.rnn_tanh_cell),
        # activations --------------------------------------------------------------
        o("relu", "activation", ((2, 4),), F.relu),
        o("gelu", "activation", ((2, 4),), F.gelu),
        o("silu", "activation", ((2, 4),), F.silu),
        o("sigmoid", "activation", ((2, 4),), torch.sigmoid),
        o("tanh", "activation", ((2, 4),), torch.tanh),
        o("softplus", "activation", ((2, 4),), F.softplus),
        o("prelu", "activation", ((2, 4), (1,)), F.prelu),
        # softmax --------------------------------------------------------------------
        o("softmax", "softmax", ((2, 4),), lambda x: torch.softmax(x, dim=-1)),
        o("log_softmax", "softmax", ((2, 4),), lambda x: torch.log_softmax(x, dim=-1)),
        o("softmin", "softmax", ((2, 4),), lambda x: F.softmin(x, dim=-1)),
        # normalisations -------------------------------------------------------------
        o("layer_norm", "normalization", ((2, 4), (4,), (4,)), lambda x, w, b: F.layer_norm(x, (4,), w, b)),
        o("group_norm", "normalization", ((1, 4, 3), (4,), (4,)), lambda x, w, b: F.group_norm(x, 2, w, b)),
        o("batch_norm", "normalization", ((3, 4), (4,), (4,)),
          lambda x, w, b: F.batch_norm(x, torch.zeros_like(w), torch.ones_like(w), w, b, training=False)),
        o("rms_norm", "normalization", ((2, 4), (4,)), lambda x, w: F.rms_norm(x, (4,), w)),
        o("normalize", "normalization", ((2, 4),), lambda x: F.normalize(x, dim=-1)),
        # losses -------------------------------------------------------------------
        o("mse_loss", "loss", ((2, 4), (2, 4)), F.mse_loss),
        o("l1_loss", "loss", ((2, 4), (2, 4)), F.l1_loss),
        o("smooth_l1_loss", "loss", ((2, 4), (2, 4)), F.smooth_l1_loss),
        o("huber_loss", "loss", ((2, 4), (2, 4)), F.huber_loss),
        o("cross_entropy", "loss", ((3, 4),), lambda x: F.cross_entropy(x, _rows(x, 3, 4))),
        o("nll_loss", "loss", ((3, 4),), lambda x: F.nll_loss(x, _rows(x, 3, 4))),
        o("kl_div", "loss", ((2, 4), (2, 4)), lambda x, y: F.kl_div(x, y, reduction="batchmean")),
        o("binary_cross_entropy", "loss", ((2, 4), (2, 4)), F.binary_cross_entropy),
        o("binary_cross_entropy_with_logits", "loss", ((2, 4), (2, 4)), F.binary_cross_entropy_with_logits),
        o("cosine_embedding_loss", "loss", ((2, 4), (2, 4)),
          lambda a, b: F.cosine_embedding_loss(a, b, _signs(a[:, 0]))),
        o("margin_ranking_loss", "loss", ((4,), (4,)), lambda a, b: F.margin_ranking_loss(a, b, _signs(a))),
        o("soft_margin_loss", "loss", ((2, 4),), lambda x: F.soft_margin_loss(x, _signs(x))),
        o("hinge_embedding_loss", "loss", ((2, 4),), lambda x: F.hinge_embedding_loss(x, _signs(x))),
        o("poisson_nll_loss", "loss", ((2, 4), (2, 4)), F.poisson_nll_loss),
        o("triplet_margin_loss", "loss", ((2, 4), (2, 4), (2, 4)), F.triplet_margin_loss),
        o("multi_margin_loss", "loss", ((3, 4),), lambda x: F.multi_margin_loss(x, _rows(x, 3, 4))),
        o("multilabel_margin_loss", "loss", ((3, 4),),
          lambda x: F.multilabel_margin_loss(x, _rows(x, 12, 4).view(3, 4))),
        # reductions and distances ---------------------------------------------------
        o("sum", "reduction", ((2, 4),), torch.sum),
        o("mean", "reduction", ((2, 4),), torch.mean),
        o("prod", "reduction", ((2, 4),), torch.prod),
        o("cumsum", "reduction", ((2, 4),), lambda x: torch.cumsum(x, dim=-1)),
        o("cumprod", "reduction", ((2, 4),), lambda x: torch.cumprod(x, dim=-1)),
        o("norm", "reduction", ((2, 4),), torch.norm),
        o("logsumexp", "reduction", ((2, 4),), lambda x: torch.logsumexp(x, dim=-1)),
        o("trace", "reduction", ((4, 4),), torch.trace),
        o("dist", "reduction", ((2, 4), (2, 4)), torch.dist),
        o("cdist", "reduction", ((3, 2), (4, 2)), torch.cdist),
        o("pdist", "reduction", ((4, 3),), F.pdist),
        o("cosine_similarity", "reduction", ((2, 4), (2, 4)), F.cosine_similarity),
        # pointwise math -------------------------------------------------------------
        *(o(n, "pointwise", ((2, 4),), getattr(torch, n))
          for n in ("exp", "expm1", "log", "log2", "log10", "log1p")),
        o("pow", "pointwise", ((2, 4),), lambda x: torch.pow(x, 2)),
        *(o(n, "pointwise", ((2, 4),), getattr(torch, n))
          for n in ("reciprocal", "rsqrt", "sqrt", "sin", "sinh", "cosh", "tan", "acos", "asin", "erfinv")),
        o("add", "pointwise", ((2, 4), (2, 4)), torch.add),
        o("mul", "pointwise", ((2, 4), (2, 4)), torch.mul),
        o("addcmul", "pointwise", ((2, 4), (2, 4), (2, 4)), torch.addcmul),
        o("addcdiv", "pointwise", ((2, 4), (2, 4), (2, 4)), torch.addcdiv),
        o("atan2", "pointwise", ((2, 4), (2, 4)), torch.atan2),
        # pooling and padding --------------------------------------------------------
        o("max_pool2d", "pooling/padding", ((1, 1, 4, 4),), lambda x: F.max_pool2d(x, 2)),
        o("avg_pool2d", "pooling/padding", ((1, 1, 4, 4),), lambda x: F.avg_pool2d(x, 2)),
        o("max_pool3d", "pooling/padding", ((1, 1, 2, 2, 2),), lambda x: F.max_pool3d(x, 2)),
        o("avg_pool3d", "pooling/padding", ((1, 1, 2, 2, 2),), lambda x: F.avg_pool3d(x, 2)),
        o("adaptive_avg_pool3d", "pooling/padding", ((1, 1, 2, 2, 2),), lambda x: F.adaptive_avg_pool3d(x, 1)),
        o("reflection_pad2d", "pooling/padding", ((1, 1, 3, 3),), lambda x: F.pad(x, (1, 1, 1, 1), mode="reflect")),
        o("replication_pad2d", "pooling/padding", ((1, 1, 3, 3),),
          lambda x: F.pad(x, (1, 1, 1, 1), mode="replicate")),
        # cat, stack and index ops ----------------------------------------------------
        o("cat", "cat/index", ((2, 3), (2, 3)), lambda a, b: torch.cat([a, b])),
        o("stack", "cat/index", ((2, 3), (2, 3)), lambda a, b: torch.stack([a, b])),
        o("index_copy", "cat/index", ((4, 3), (2, 3)), lambda x, s: x.index_copy(0, _rows(x, 2, 4) * 2, s)),
        o("index_put", "cat/index", ((4, 3), (2, 3)), lambda x, v: x.index_put((_rows(x, 2, 4) * 2,), v)),
        o("scatter_add", "cat/index", ((4, 3), (2, 3)),
          lambda x, s: x.scatter_add(0, _rows(x, 6, 4).view(2, 3), s)),
        o("index_select", "cat/index", ((4, 3),), lambda x: x.index_select(0, _rows(x, 2, 4))),
        o("gather", "cat/index", ((4, 3),), lambda x: x.gather(0, _rows(x, 6, 4).view(2, 3))),
        o("cross", "cat/index", ((2, 3), (2, 3)), lambda a, b: torch.cross(a, b, dim=1)),
        o("grid_sample", "cat/index", ((1, 1, 3, 3), (1, 2, 2, 2)),
          lambda x, g: F.grid_sample(x, g, align_corners=False)),
        # FFT (complex outputs are classified by their real part's dtype) ---------------
        o("fft_fft", "fft", ((8,),), torch.fft.fft),
        o("fft_rfft", "fft", ((8,),), torch.fft.rfft),
    )  # fmt: skip


def op_names(family: str | None = None) -> list[str]:
    """Names of the ops :func:`probe` runs (optionally only one ``family``)."""
    if family is not None:
        check_choice("family", family, FAMILIES)
    return [op.name for op in catalogue() if family is None or op.family == family]


def op_list(name: str, ops) -> list[str]:
    """``ops`` as a list of catalogue names (a string is one name, not its letters)."""
    ops = bounded_list(name, ops, MAX_OP_NAMES, "a list of op names such as ['mm', 'softmax']")
    known = op_names()
    for i, op in enumerate(ops):
        item = f"{name}[{i}]"
        check_choice(item, check_instance(item, op, str, "an op name such as 'mm'"), known)
    return ops


# Catalogue name (the docs' spelling) -> the aten op its call reaches first, where the two differ.
ATEN_OPS = {
    "__matmul__": "matmul", "multi_dot": "linalg_multi_dot", "conv_transpose2d": "conv_transpose2d.input",
    "conv_transpose3d": "conv_transpose3d.input", "LSTMCell": "lstm_cell", "GRUCell": "gru_cell",
    "RNNCell": "rnn_tanh_cell", "softmax": "softmax.int", "log_softmax": "log_softmax.int",
    "softmin": "softmax.int", "normalize": "linalg_vector_norm", "norm": "linalg_vector_norm",
    "cross_entropy": "cross_entropy_loss", "pow": "pow.Tensor_Scalar", "add": "add.Tensor",
    "mul": "mul.Tensor", "grid_sample": "grid_sampler",
}  # fmt: skip


def aten_op(name: str) -> str:
    """The aten op (``"softmax.int"``) behind a catalogue name (``"softmax"``)."""
    check_instance("name", name, str, "a catalogue op name such as 'softmax'")
    return ATEN_OPS.get(check_choice("name", name, op_names()), name)
