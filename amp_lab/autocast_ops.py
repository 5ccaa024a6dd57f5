"""Autocast's op lists, asked of autocast itself (taught in ``05_autocast_op_lists``).

Inside ``torch.autocast(device_type, dtype)`` every eligible op follows one of a few
policies.  PyTorch documents lists of them, but the real lists are C++ registrations that
differ by device and by version and are wider than the docs.  So this module *probes*:
it runs a catalogue of ops on tiny tensors under autocast and reports what really happened.

Policies (the values of ``OpResult.policy``), with PyTorch's names for them (the
``at::autocast::CastPolicy`` of ``aten/src/ATen/autocast_mode.h``, :data:`TORCH_POLICY`):

``"lower"`` (PyTorch: ``lower_precision_fp``)
    float32 inputs ran in the low dtype (``bfloat16``/``float16``): autocast cast them down
    before the op, or before the matmuls inside it (an LSTM cell), (matmuls, convolutions).
``"fp32"`` (PyTorch: ``fp32``, and ``fp32_set_opt_dtype``/``fp32_append_dtype``, the same
policy for ops that take a ``dtype`` argument, such as ``softmax``, ``sum`` and ``norm``)
    low-precision inputs came out in float32, while the same call without autocast stays
    low: autocast cast them *up* (losses on both devices; ``exp``, ``softmax``... on CUDA).
``"promote"`` (PyTorch: ``promote``)
    with mixed inputs (one low, the others float32) autocast itself cast the low ones up to
    the widest type before the op ran (``cat``, ``stack``, ``index_copy`` on CPU).
``"unchanged"`` (PyTorch has no name: no autocast kernel is registered for the op, so the
dispatcher falls through the Autocast key)
    no autocast rule: the op ran in whatever dtype its inputs had.
``"n/a"``
    the op could not be probed here (not in this torch, no kernel for the low dtype on this
    device, or refused by autocast); ``OpResult.reason`` says which.

Telling the policies apart is the lesson:

* **"unchanged" versus "fp32".**  Fed float32 inputs, both give float32 out, so float32
  inputs prove nothing.  Feed *low-precision* inputs: an fp32-policy op upcasts them and
  returns float32, an op without a rule returns the low dtype.  (A kernel that returns
  float32 from low inputs on its own would fool that test, so the probe also runs the call
  without autocast: only a change caused by autocast counts.)
* **"promote" versus ordinary type promotion.**  ``torch.add(bf16, fp32)`` gives float32
  with or without autocast: the kernel promotes by itself (``torch.result_type``).  Output
  dtypes alone cannot separate that from autocast's promote rule, so the probe records the
  operator calls at the dispatcher (a ``TorchDispatchMode``, see :func:`dispatch_trace`):
  under a promote rule, autocast issues its own casts (``aten._to_copy``) *before* the op,
  and those casts are absent when the same call runs without autocast.  With ordinary
  promotion the op receives the mixed dtypes and no extra cast appears.

``DOCUMENTED`` holds the lists from PyTorch's AMP documentation and :func:`compare` sets a
probe beside them.  :func:`has_autocast_rule` asks the dispatcher whether torch registered a
rule for an aten op on CPU or CUDA (live, on any build), and :func:`rule_comparison` sets
docs, registered rules of both devices and a probe side by side; :func:`classify` runs the same procedure on any function of yours.
:func:`dtype_quiz` builds the notebook's "predict the output dtype, then reveal" widget.
"""

from __future__ import annotations

import html
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from numbers import Integral

import torch
import torch.nn.functional as F

from ._checks import (
    ArgumentTypeError,
    check_bool,
    check_callable,
    check_choice,
    check_instance,
    check_int,
    checkbounded_list,
)
from .device import check_fits, get_device, parse_dtype
from .gpus import bf16_hardware

__all__ = [
    "POLICIES",
    "POLICY_MEANING",
    "FAMILIES",
    "DOCUMENTED",
    "OpResult",
    "ProbeTable",
    "TraceCall",
    "Difference",
    "Comparison",
    "QuizItem",
    "DtypeQuiz",
    "QUIZ_LINES",
    "op_names",
    "autocast_dtype",
    "probe",
    "classify",
    "dispatch_trace",
    "documented_policy",
    "compare",
    "format_table",
    "format_groups",
    "AUTOCAST_KEYS",
    "TORCH_POLICY",
    "RuleRow",
    "has_autocast_rule",
    "aten_op",
    "rule_comparison",
    "rule_groups",
    "format_rules",
    "quiz_items",
    "dtype_quiz",
]

POLICIES = ("lower", "fp32", "promote", "unchanged", "n/a")

POLICY_MEANING = {
    "lower": "float32 inputs ran in the low dtype",
    "fp32": "forced to float32, even from low-precision inputs",
    "promote": "autocast cast all inputs to the widest input type",
    "unchanged": "no autocast rule: runs in its input dtype",
    "n/a": "could not be probed here",
}

FAMILIES = (
    "matmul",
    "convolution",
    "rnn cell",
    "activation",
    "softmax",
    "normalization",
    "loss",
    "reduction",
    "pointwise",
    "pooling/padding",
    "cat/index",
    "fft",
)


# ---------------------------------------------------------------------------------------
# The documented lists
# ---------------------------------------------------------------------------------------

# Read from PyTorch's AMP page, "Autocast Op Reference" (docs/source/amp.md in the
# pytorch/pytorch repository, the 2.13 development line: the page already carries the
# May-2026 note on AMP with torch.compile).  The names are the docs' own spellings;
# _DOC_ALIASES maps the few that differ from the names this module probes under.
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

# docs spelling -> the key this module probes under
_DOC_ALIASES = {"cross_entropy_loss": "cross_entropy", "grid_sampler": "grid_sample"}


def documented_policy(op: str, device_type: str = "cpu", documented: dict | None = None) -> str:
    """The policy PyTorch's docs give ``op`` on ``device_type``.

    Ops on no list are documented as running in their input dtype (``"unchanged"``); an op
    the docs say autocast refuses (``binary_cross_entropy`` on CUDA) is ``"n/a"``.
    """
    if not isinstance(op, str):
        raise ArgumentTypeError(f"op must be an op name such as 'mm', got {type(op).__name__}: {op!r:.80}")
    lists = _device_lists(documented, device_type)
    for policy in ("lower", "fp32", "promote"):
        if op in {_DOC_ALIASES.get(name, name) for name in lists[policy]}:
            return policy
    if op in lists.get("refused", ()):
        return "n/a"
    return "unchanged"


_LIST_KEYS = ("lower", "fp32", "promote")


def _device_lists(documented: dict | None, device_type: str) -> dict:
    documented = DOCUMENTED if documented is None else documented
    if not isinstance(documented, dict):
        raise ArgumentTypeError(
            f"documented must be a dict like DOCUMENTED (or one device's entry of it), got "
            f"{type(documented).__name__}: {documented!r:.80}"
        )
    if any(key in documented for key in _LIST_KEYS):  # already one device's lists
        lists = documented
    else:
        devices = [k for k in documented if isinstance(documented[k], dict)]
        if not devices:
            raise ValueError(
                "documented must be DOCUMENTED-like ({'cpu': {...}, 'cuda': {...}}) or one device's lists "
                f"({{'lower': [...], 'fp32': [...], 'promote': [...]}}), got keys {list(documented)!r:.120}"
            )
        if not isinstance(device_type, str):
            raise ArgumentTypeError(f"device_type must be a string such as 'cpu', got {type(device_type).__name__}")
        check_choice("device_type", device_type, devices)
        lists = documented[device_type]
    missing = [key for key in _LIST_KEYS if key not in lists]
    if missing:
        raise ValueError(
            f"documented lists must give {', '.join(map(repr, _LIST_KEYS))} (and may give 'refused'), each a list of "
            f"op names; missing {', '.join(map(repr, missing))}"
        )
    for key in (*_LIST_KEYS, "refused"):
        names = lists.get(key, ())
        if isinstance(names, str) or not isinstance(names, (list, tuple, set, frozenset)) or not all(
            isinstance(n, str) for n in names
        ):
            raise ArgumentTypeError(f"documented[{key!r}] must be a list of op names (strings), got {names!r:.80}")
    return lists


# ---------------------------------------------------------------------------------------
# The catalogue: tiny inputs, one callable per op
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Op:
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


def _catalogue() -> tuple[_Op, ...]:
    o = _Op
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
        o("exp", "pointwise", ((2, 4),), torch.exp),
        o("expm1", "pointwise", ((2, 4),), torch.expm1),
        o("log", "pointwise", ((2, 4),), torch.log),
        o("log2", "pointwise", ((2, 4),), torch.log2),
        o("log10", "pointwise", ((2, 4),), torch.log10),
        o("log1p", "pointwise", ((2, 4),), torch.log1p),
        o("pow", "pointwise", ((2, 4),), lambda x: torch.pow(x, 2)),
        o("reciprocal", "pointwise", ((2, 4),), torch.reciprocal),
        o("rsqrt", "pointwise", ((2, 4),), torch.rsqrt),
        o("sqrt", "pointwise", ((2, 4),), torch.sqrt),
        o("sin", "pointwise", ((2, 4),), torch.sin),
        o("sinh", "pointwise", ((2, 4),), torch.sinh),
        o("cosh", "pointwise", ((2, 4),), torch.cosh),
        o("tan", "pointwise", ((2, 4),), torch.tan),
        o("acos", "pointwise", ((2, 4),), torch.acos),
        o("asin", "pointwise", ((2, 4),), torch.asin),
        o("erfinv", "pointwise", ((2, 4),), torch.erfinv),
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


_CATALOGUE: tuple[_Op, ...] | None = None


def _ops() -> tuple[_Op, ...]:
    global _CATALOGUE
    if _CATALOGUE is None:
        _CATALOGUE = _catalogue()
    return _CATALOGUE


def op_names(family: str | None = None) -> list[str]:
    """Names of the ops :func:`probe` runs (optionally only one ``family``)."""
    if family is not None:
        check_choice("family", family, FAMILIES)
    return [op.name for op in _ops() if family is None or op.family == family]


# ---------------------------------------------------------------------------------------
# Watching the dispatcher
# ---------------------------------------------------------------------------------------

# Ops that only relabel memory; they run "in" whatever dtype they receive and say nothing
# about where the arithmetic happened.
_VIEWS = {
    "t", "view", "_unsafe_view", "reshape", "permute", "transpose", "expand", "unsqueeze",
    "squeeze", "slice", "select", "detach", "alias", "as_strided", "clone", "contiguous",
    "lift_fresh", "_to_copy", "empty_like", "zeros_like", "ones_like", "fill_", "copy_",
    "split", "split_with_sizes", "unbind", "_reshape_alias", "view_as_real", "index_put_",
    "empty", "zeros", "ones", "new_empty", "new_zeros", "arange", "_local_scalar_dense",
}  # fmt: skip


@dataclass(frozen=True)
class TraceCall:
    """One operator call seen by the dispatcher: ``op`` (e.g. ``"aten.mm.default"``), the
    dtypes of its tensor inputs and outputs, and for a cast (``aten._to_copy``) the dtype
    it cast to."""

    op: str
    inputs: tuple[torch.dtype, ...]
    outputs: tuple[torch.dtype, ...]
    to: torch.dtype | None = None

    @property
    def name(self) -> str:
        """The short op name: ``"mm"`` for ``aten.mm.default``."""
        parts = self.op.split(".")
        return parts[1] if len(parts) > 1 else parts[0]

    @property
    def is_cast(self) -> bool:
        return self.name == "_to_copy" and self.to is not None and self.inputs[:1] != (self.to,)

    @property
    def is_view(self) -> bool:
        """A call that only relabels or allocates memory (``t``, ``view``, ...), no arithmetic."""
        return self.name in _VIEWS and not self.is_cast

    def __str__(self) -> str:
        ins = ", ".join(_short(d) for d in self.inputs)
        outs = ", ".join(_short(d) for d in self.outputs)
        if self.is_cast:
            return f"cast  {ins} -> {_short(self.to)}"
        return f"{self.name}({ins}) -> {outs}"


def _tensors(tree) -> list[torch.Tensor]:
    return [a for a in torch.utils._pytree.tree_leaves(tree) if isinstance(a, torch.Tensor)]


_RECORDER_CLASS = None


def _recorder():
    """A fresh TorchDispatchMode that records every call; the class is built once."""
    global _RECORDER_CLASS
    if _RECORDER_CLASS is None:
        _RECORDER_CLASS = _make_recorder_class()
    return _RECORDER_CLASS()


def _make_recorder_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Recorder(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps a mode's __torch_dispatch__ so that torch.compile skips it, which
            # imports torch._dynamo (seconds) on first use; nothing here is compiled.
            return False

        def __init__(self):
            super().__init__()
            self.calls: list[TraceCall] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            to = kwargs.get("dtype") if "_to_copy" in str(func) else None
            self.calls.append(
                TraceCall(
                    str(func),
                    tuple(t.dtype for t in _tensors((args, kwargs))),
                    tuple(t.dtype for t in _tensors(out)),
                    to,
                )
            )
            return out

    return _Recorder


def _run(fn, args, device_type, dtype, enabled, cache_enabled=None):
    """Call ``fn(*args)`` under autocast (or not) and record the dispatcher's calls."""
    rec = _recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled), rec:
            out = fn(*args)
    return out, rec.calls


def dispatch_trace(
    fn: Callable, *args, device=None, dtype=None, enabled: bool = True, cache_enabled: bool | None = None
):
    """Run ``fn(*args)`` under ``torch.autocast`` and return ``(output, calls)``.

    ``calls`` is the list of :class:`TraceCall` the dispatcher saw, *after* autocast: the
    casts autocast inserted appear as ``aten._to_copy`` calls in front of the op they feed.
    ``enabled=False`` runs the same call without autocast, for comparison;
    ``cache_enabled=False`` turns off autocast's weight-cast cache.  Used in
    ``05_autocast_op_lists`` to show casts at op boundaries and the weight-cast cache.
    """
    check_callable("fn", fn)
    enabled = check_bool("enabled", enabled)
    if cache_enabled is not None:
        cache_enabled = check_bool("cache_enabled", cache_enabled)
    dev = get_device(device)
    low = autocast_dtype(dev, dtype)
    return _run(fn, args, dev.type, low, enabled, cache_enabled)


# ---------------------------------------------------------------------------------------
# Probing
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpResult:
    """What autocast did to one op.

    ``dtype`` is the output dtype for float32 inputs; ``low_dtype`` for low-precision
    inputs; ``mixed_dtype`` for the first input low and the rest float32 (``None`` when
    not run).  ``casts`` counts the casts autocast inserted in the run that decided the
    policy, ``kernels`` names the ops that then ran in the chosen dtype, and ``reason``
    says in words how the policy was decided (or why the op is ``"n/a"``).
    """

    op: str
    family: str
    policy: str
    dtype: torch.dtype | None
    low_dtype: torch.dtype | None = None
    mixed_dtype: torch.dtype | None = None
    casts: int = 0
    kernels: tuple[str, ...] = ()
    reason: str = ""


class ProbeTable(dict):
    """``{op name: OpResult}`` plus where it was probed: ``device_type``, ``dtype`` (the
    low-precision dtype autocast used) and ``torch_version``."""

    def __init__(self, results: Iterable[OpResult], *, device_type: str, dtype: torch.dtype):
        # Checked before anything is stored, so a learner's mistake is named here, not as an
        # AttributeError from inside dict (and range(10**12) is refused by its length, not read).
        results = checkbounded_list(
            "results", results, max_length=MAX_OP_NAMES, what="a list of OpResult (as probe() builds)"
        )
        for i, r in enumerate(results):
            check_instance(f"results[{i}]", r, OpResult, "an OpResult (as probe() builds)")
        check_choice("device_type", device_type, ["cpu", "cuda", "mps"])
        check_instance("dtype", dtype, torch.dtype, "a torch dtype such as torch.bfloat16")
        super().__init__((r.op, r) for r in results)
        self.device_type = device_type
        self.dtype = dtype
        self.torch_version = torch.__version__

    def policy(self, op: str) -> str:
        """The policy probed for ``op`` (a ValueError naming the probed ops when it was not probed)."""
        return _probed(self, op, "op").policy

    def by_policy(self) -> dict[str, list[str]]:
        """Op names grouped by policy, in the order of :data:`POLICIES`."""
        groups: dict[str, list[str]] = {p: [] for p in POLICIES}
        for r in self.values():
            groups[r.policy].append(r.op)
        return groups

    def as_records(self) -> list[dict]:
        """Plain ``dict`` rows (dtypes as strings), ready for ``json.dump``."""
        return [
            {
                "op": r.op,
                "family": r.family,
                "policy": r.policy,
                "dtype": _short(r.dtype),
                "low_dtype": _short(r.low_dtype),
                "mixed_dtype": _short(r.mixed_dtype),
                "casts": r.casts,
                "kernels": list(r.kernels),
                "reason": r.reason,
                "device_type": self.device_type,
                "autocast_dtype": _short(self.dtype),
                "torch_version": self.torch_version,
            }
            for r in self.values()
        ]

    def __repr__(self) -> str:
        counts = ", ".join(f"{p}: {len(ops)}" for p, ops in self.by_policy().items() if ops)
        return f"ProbeTable({self.device_type}, {_short(self.dtype)}, {len(self)} ops; {counts})"


def autocast_dtype(device=None, dtype=None) -> torch.dtype:
    """The low-precision dtype autocast will use on ``device``.

    ``dtype=None`` is the device's autocast default (``torch.get_autocast_dtype``: float16
    on CUDA, bfloat16 on CPU).  A dtype autocast does not support there raises ValueError.
    """
    dev = get_device(device)
    allowed = [torch.bfloat16, torch.float16]
    # bf16 Tensor Cores on this very GPU (torch.cuda.is_bf16_supported() counts emulation and asks about
    # the current device, not ``dev``): before Ampere the course does not race or probe bfloat16 on CUDA.
    if dev.type == "cuda" and not bf16_hardware(torch.cuda.get_device_capability(dev)):
        allowed = [torch.float16]
    if dtype is None:
        dtype = torch.get_autocast_dtype(dev.type)
    return parse_dtype(dtype, allowed=tuple(allowed), name="dtype")


def _first_float(out) -> torch.dtype | None:
    for t in _tensors(out):
        if t.is_complex():
            return t.real.dtype if t.dtype != torch.complex32 else torch.float16
        if t.is_floating_point():
            return t.dtype
    return None


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    return f"{type(exc).__name__}: {first[:160]}"


def _inputs(op: _Op, index: int, device: torch.device) -> list[torch.Tensor]:
    # Values in (0.1, 0.9): inside the domain of log, acos, erfinv, BCE's probabilities...
    gen = torch.Generator().manual_seed(1000 + index)
    return [(0.1 + 0.8 * torch.rand(s, generator=gen)).to(device) for s in op.shapes]


def _kernels(calls: list[TraceCall], dtype: torch.dtype) -> tuple[str, ...]:
    names: list[str] = []
    for c in calls:
        if c.name not in _VIEWS and dtype in c.inputs and c.name not in names:
            names.append(c.name)
    return tuple(names)


def _listing(names: tuple[str, ...], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (", ..." if len(names) > limit else "") if names else "the op"


def _casts(calls: list[TraceCall]) -> Counter:
    return Counter((c.inputs[0], c.to) for c in calls if c.is_cast)


def _probe_one(op: _Op, index: int, dev: torch.device, low: torch.dtype) -> OpResult:
    f32 = torch.float32
    lo = _short(low)
    try:
        x32 = _inputs(op, index, dev)
    except Exception as exc:  # pragma: no cover - shapes are fixed
        return OpResult(op.name, op.family, "n/a", None, reason=_message(exc))

    def na(reason, **kw):
        return OpResult(op.name, op.family, "n/a", kw.pop("dtype", None), reason=reason, **kw)

    # 1. float32 inputs under autocast: does the op run lower?
    try:
        out, calls = _run(op.call, x32, dev.type, low, True)
    except Exception as exc:
        try:
            _run(op.call, x32, dev.type, low, False)
        except Exception:
            return na(f"not available on {dev.type} in torch {torch.__version__}: {_message(exc)}")
        return na(f"refused by {dev.type} autocast: {_message(exc)}")
    d32 = _first_float(out)
    down = sum(n for (src, to), n in _casts(calls).items() if to == low)
    if d32 == low or down:
        # A composite op (an LSTM cell, say) may run its matmuls in the low dtype and still
        # return float32, because a later op without a rule meets a float32 tensor.
        tail = "" if d32 == low else f" (output {_short(d32)}: a later step promoted it back)"
        return OpResult(
            op.name, op.family, "lower", d32,
            casts=down, kernels=_kernels(calls, low),
            reason=f"float32 inputs: autocast cast {down} tensor(s) to {lo} and ran "
            f"{_listing(_kernels(calls, low))} in {lo}{tail}",
        )  # fmt: skip

    # 2. low-precision inputs under autocast: forced back to float32, or left alone?
    xlo = [t.to(low) for t in x32]
    try:
        out, calls = _run(op.call, xlo, dev.type, low, True)
    except Exception as exc:
        return na(
            f"float32 inputs run, but {lo} inputs fail and autocast has no rule that upcasts "
            f"them: {_message(exc)}",
            dtype=d32,
        )
    dlo = _first_float(out)
    if dlo == f32 and d32 == f32:
        # Some kernels return float32 from low-precision inputs by themselves; only call it
        # autocast's fp32 policy when the same call without autocast stays low.
        try:
            plain_out, _ = _run(op.call, xlo, dev.type, low, False)
            plain = _first_float(plain_out)
        except Exception as exc:
            plain, why_plain = None, f"without autocast {lo} inputs raise ({_message(exc)})"
        else:
            why_plain = f"without autocast the same call returns {_short(plain)}"
        if plain != f32:
            up = sum(n for (src, to), n in _casts(calls).items() if to == f32)
            return OpResult(
                op.name, op.family, "fp32", d32, dlo,
                casts=up, kernels=_kernels(calls, f32),
                reason=f"{lo} inputs -> float32: autocast cast {up} tensor(s) up to float32 first; "
                f"{why_plain}",
            )  # fmt: skip
        return OpResult(
            op.name, op.family, "unchanged", d32, dlo,
            reason=f"returns float32 from {lo} inputs with or without autocast: the kernel's own choice",
        )  # fmt: skip
    if len(x32) < 2:
        return OpResult(
            op.name, op.family, "unchanged", d32, dlo,
            reason=f"ran in its input dtype (float32 -> {_short(d32)}, {lo} -> {_short(dlo)})",
        )  # fmt: skip

    # 3. mixed inputs: does *autocast* cast them to the widest type, or does the kernel
    #    promote by itself (or refuse)?  Compare the casts with and without autocast.
    xmix = [xlo[0], *x32[1:]]
    try:
        out, calls = _run(op.call, xmix, dev.type, low, True)
        dmix = _first_float(out)
    except Exception as exc:
        return OpResult(
            op.name, op.family, "unchanged", d32, dlo,
            reason=f"ran in its input dtype; mixed {lo}+float32 inputs raise even under autocast "
            f"({_message(exc)})",
        )  # fmt: skip
    try:
        _, plain = _run(op.call, xmix, dev.type, low, False)
        plain_casts = _casts(plain)
        plain_note = "the same call without autocast casts nothing extra"
    except Exception as exc:
        plain_casts = Counter()
        plain_note = f"without autocast the same call raises ({_message(exc)})"
    extra = _casts(calls) - plain_casts
    upcasts = sum(n for (src, to), n in extra.items() if to == dmix)
    if dmix == f32 and upcasts:
        return OpResult(
            op.name, op.family, "promote", d32, dlo, dmix,
            casts=upcasts, kernels=_kernels(calls, f32),
            reason=f"mixed {lo}+float32 inputs: autocast cast {upcasts} input(s) to float32 "
            f"before the op; {plain_note}",
        )  # fmt: skip
    return OpResult(
        op.name, op.family, "unchanged", d32, dlo, dmix,
        reason=f"ran in its input dtype; mixed inputs -> {_short(dmix)} by the kernel's own "
        "type promotion (autocast inserted no cast)",
    )  # fmt: skip


# The most op names a list of ops (or results) may hold: the catalogue has about a hundred, so a longer
# list can only repeat them; checked by length before the list is read.
MAX_OP_NAMES = 1000

# The most elements classify's inputs may hold together: the probe reads dtypes, so tiny tensors suffice.
MAX_CLASSIFY_ELEMENTS = 2**20


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _probed(probed: ProbeTable, op, name: str) -> OpResult:
    """``probed[op]``, or a ValueError naming what was probed."""
    if not isinstance(op, str):
        raise ArgumentTypeError(f"{name} must be an op name such as 'mm', got {type(op).__name__}: {op!r:.80}")
    if op not in probed:
        shown = ", ".join(list(probed)[:12]) + (", ..." if len(probed) > 12 else "")
        raise ValueError(f"{name}={op!r} was not probed; this table holds {len(probed)} ops: {shown}")
    return probed[op]


def _check_probe_table(name: str, value) -> ProbeTable:
    return check_instance(name, value, ProbeTable, "the ProbeTable that probe() returns")


def _op_list(name: str, ops) -> list[str]:
    """``ops`` as a list of at most :data:`MAX_OP_NAMES` op names: a string is one name, not its letters."""
    if isinstance(ops, str):
        raise ArgumentTypeError(f"{name} must be a list of op names such as ['mm', 'softmax'], got {ops!r:.80}")
    return checkbounded_list(name, ops, max_length=MAX_OP_NAMES, what="a list of op names such as ['mm', 'softmax']")


def classify(fn: Callable, shapes, *, name: str = "custom", device=None, dtype=None) -> OpResult:
    """Classify any callable the way :func:`probe` classifies its catalogue.

    ``fn`` takes one floating-point tensor per entry of ``shapes`` (each a tuple of positive
    ints); integer arguments such as class labels go inside ``fn``.  For example
    ``classify(F.pairwise_distance, [(3, 4), (3, 4)])``.

    The probe needs tiny tensors only: all inputs together may hold at most
    :data:`MAX_CLASSIFY_ELEMENTS` elements (about a million), and they must fit in the device's
    free memory (``device.check_fits``), checked before anything is allocated.
    """
    if not isinstance(shapes, (list, tuple)):
        raise ArgumentTypeError(f"shapes must be a non-empty list of shapes such as [(3, 4)], got {shapes!r:.80}")
    if not shapes:
        raise ValueError("shapes must be a non-empty list of shapes such as [(3, 4)], got an empty list")
    clean = []
    for i, shape in enumerate(shapes):
        shape = (shape,) if isinstance(shape, Integral) and not isinstance(shape, bool) else shape
        if not isinstance(shape, (list, tuple)):
            raise ArgumentTypeError(f"shapes[{i}] must be a tuple of positive ints such as (3, 4), got {shape!r:.80}")
        clean.append(tuple(check_int(f"shapes[{i}][{j}]", n, minimum=1) for j, n in enumerate(shape)))
    check_callable("fn", fn)
    if not isinstance(name, str):
        raise ArgumentTypeError(f"name must be a string, got {type(name).__name__}: {name!r:.80}")
    elements = sum(_numel(s) for s in clean)
    if elements > MAX_CLASSIFY_ELEMENTS:
        raise ValueError(
            f"shapes={clean!r:.120} hold {elements:,} elements in all; classify needs tiny tensors and allows at most "
            f"{MAX_CLASSIFY_ELEMENTS:,} (the probe only looks at dtypes): choose shapes such as [(3, 4)]"
        )
    dev = get_device(device)
    # float32 inputs, their low-precision copies and outputs: a generous 16 bytes per element.
    check_fits(16 * elements, dev, f"classify(shapes={clean!r:.80})", "choose smaller shapes such as [(3, 4)]")
    low = autocast_dtype(dev, dtype)
    return _probe_one(_Op(str(name), "custom", tuple(clean), fn), 999, dev, low)


def probe(device=None, dtype=None, *, ops: Iterable[str] | None = None) -> ProbeTable:
    """Run the catalogue under ``torch.autocast(device.type, dtype)`` and classify each op.

    Returns a :class:`ProbeTable` keyed by the op names PyTorch's AMP docs use (``"mm"``,
    ``"softmax"``, ``"cross_entropy"``, ...); each :class:`OpResult` carries ``policy`` and
    the output ``dtype``.  ``dtype=None`` is the device's autocast default; a dtype autocast
    does not support on the device (float32, float64, ...) raises ValueError.  ``ops``
    restricts the probe to some names (see :func:`op_names`).  Every tensor is tiny, so the
    whole catalogue takes about a second even where low-precision math is slow (a CPU
    without bf16 instructions).  An op that cannot run here comes back ``"n/a"`` with the
    reason, never as an exception.
    """
    dev = get_device(device)
    low = autocast_dtype(dev, dtype)
    catalogue = _ops()
    if ops is not None:
        wanted = _op_list("ops", ops)
        known = [op.name for op in catalogue]
        for name in wanted:
            check_choice("ops", name, known)
        catalogue = tuple(op for op in catalogue if op.name in set(wanted))
    results = []
    index = {op.name: i for i, op in enumerate(_ops())}
    for op in catalogue:
        results.append(_probe_one(op, index[op.name], dev, low))
    return ProbeTable(results, device_type=dev.type, dtype=low)


# ---------------------------------------------------------------------------------------
# Comparing with the docs
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    op: str
    probed: str
    documented: str
    note: str = ""


@dataclass(frozen=True)
class Comparison:
    """A probe set beside the documented lists of the same device type."""

    device_type: str
    probed_torch: str
    documented_torch: str
    agree: tuple[str, ...]
    differ: tuple[Difference, ...]
    not_probed: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        lines = [
            f"{self.device_type}: probed on torch {self.probed_torch}, docs of torch {self.documented_torch}",
            f"agree: {len(self.agree)} ops; differ: {len(self.differ)} ops",
        ]
        for d in self.differ:
            lines.append(f"  {d.op:<34} probed {d.probed:<9} documented {d.documented:<9} {d.note}")
        return "\n".join(lines)


def _difference_note(result: OpResult, documented: str) -> str:
    if result.policy == "n/a":
        return result.reason
    if documented == "unchanged" and result.policy == "lower":
        return f"not on the docs' lists, yet autocast ran {_listing(result.kernels)} in the low dtype"
    if documented == "unchanged" and result.policy in ("fp32", "promote"):
        return f"not on the docs' lists, yet autocast ran {_listing(result.kernels)} in float32"
    if result.policy == "unchanged":
        return "on the docs' list, but no autocast cast happened here"
    return ""


def compare(probed: ProbeTable, documented: dict | None = None) -> Comparison:
    """Agreements and differences between a probe and the documented lists.

    ``documented`` is :data:`DOCUMENTED` (default; the lists of ``probed.device_type`` are
    used) or one device's entry of it.  An op on no documented list counts as documented
    ``"unchanged"`` (the docs: "ops not listed below do not go through autocasting").
    """
    _check_probe_table("probed", probed)
    full = DOCUMENTED if documented is None else documented
    lists = _device_lists(full, probed.device_type)
    version = str(full.get("torch_version", DOCUMENTED["torch_version"]))  # full is a dict: lists were checked
    agree, differ = [], []
    for name, result in probed.items():
        doc = documented_policy(name, probed.device_type, lists)
        if doc == result.policy:
            agree.append(name)
        else:
            differ.append(Difference(name, result.policy, doc, _difference_note(result, doc)))
    listed = [
        _DOC_ALIASES.get(n, n) for p in ("lower", "fp32", "promote", "refused") for n in lists.get(p, ())
    ]
    not_probed = tuple(dict.fromkeys(n for n in listed if n not in probed))
    return Comparison(
        probed.device_type, probed.torch_version, version, tuple(agree), tuple(differ), not_probed
    )


# ---------------------------------------------------------------------------------------
# Asking the dispatcher: which ops have an autocast rule of their own
# ---------------------------------------------------------------------------------------

# The dispatch key that holds each device's autocast rules (torch registers them in C++,
# aten/src/ATen/autocast_mode.cpp, with one kernel per op and policy).
AUTOCAST_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}

# The course's policy names and PyTorch's (``at::autocast::CastPolicy`` in autocast_mode.h).
TORCH_POLICY = {
    "lower": "lower_precision_fp",
    "fp32": "fp32 (fp32_set_opt_dtype, fp32_append_dtype: fp32 for ops with a dtype argument)",
    "promote": "promote",
    "unchanged": "no autocast kernel registered for the op: it runs in its input dtype",
}

# Longest op name has_autocast_rule reads (aten's longest is under 80 characters).
MAX_OP_NAME_LENGTH = 200

# Catalogue name (the docs' spelling) -> the aten operator the catalogue's call reaches first,
# where the two differ.  Python-level ops resolve to the aten op they call: ``a @ b`` is
# aten::matmul, F.softmin(x) is softmax(-x), F.normalize and torch.norm(x) call
# linalg_vector_norm, F.cross_entropy is aten::cross_entropy_loss, the nn cells are the
# aten cell functions.
_ATEN_OPS = {
    "__matmul__": "matmul",
    "multi_dot": "linalg_multi_dot",
    "conv_transpose2d": "conv_transpose2d.input",
    "conv_transpose3d": "conv_transpose3d.input",
    "LSTMCell": "lstm_cell",
    "GRUCell": "gru_cell",
    "RNNCell": "rnn_tanh_cell",
    "softmax": "softmax.int",
    "log_softmax": "log_softmax.int",
    "softmin": "softmax.int",
    "normalize": "linalg_vector_norm",
    "norm": "linalg_vector_norm",
    "cross_entropy": "cross_entropy_loss",
    "pow": "pow.Tensor_Scalar",
    "add": "add.Tensor",
    "mul": "mul.Tensor",
    "grid_sample": "grid_sampler",
}

_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _aten_overloads(base: str) -> list[str]:
    prefix = f"aten::{base}."
    return sorted(n.removeprefix("aten::") for n in torch._C._dispatch_get_all_op_names() if n.startswith(prefix))


def _qualified_op(name: str, op) -> str:
    """``op`` ("einsum", "softmax.int", "aten::mm") as the dispatcher's qualified name, or a ValueError."""
    if not isinstance(op, str):
        raise ArgumentTypeError(
            f"{name} must be an aten op name such as 'einsum' or 'softmax.int', got {type(op).__name__}: {op!r:.80}"
        )
    if len(op) > MAX_OP_NAME_LENGTH:
        raise ValueError(f"{name} must be an aten op name of at most {MAX_OP_NAME_LENGTH} characters, got {len(op)}")
    base, _, overload = op.strip().removeprefix("aten::").partition(".")
    overload = "" if overload == "default" else overload  # torch.ops.aten.mm.default: the default overload
    if not _OP_NAME.fullmatch(base) or (overload and not _OP_NAME.fullmatch(overload)) or op.strip().endswith("."):
        raise ValueError(
            f"{name}={op!r:.80} is not an aten op name: write it as torch's dispatcher does, e.g. 'einsum', "
            "'softmax.int' (the overload after a dot) or 'aten::mm'"
        )
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{base}", overload)
    except Exception:  # RuntimeError "Could not find schema": the dispatcher does not know it
        others = _aten_overloads(base) if not overload else []
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

    Asked of the dispatcher, so it works on any build, a CPU-only one included: does the op have a
    kernel on the ``AutocastCPU``/``AutocastCUDA`` dispatch key (:data:`AUTOCAST_KEYS`)?  Every other
    op falls through autocast untouched (torch registers a fallthrough for the whole key; it is not
    counted): "unchanged" in the course's words (:data:`TORCH_POLICY`).  An op without a rule of its
    own can still run in the low dtype when it *decomposes* into ops that have one (``einsum`` into
    ``bmm`` on the CPU): :func:`probe` sees that, the dispatcher does not.  The dispatcher does not
    say *which* policy a rule applies.

    ``op`` is the aten name, with the overload after a dot where the op has no default one:
    ``"einsum"``, ``"softmax.int"``, ``"add.Tensor"``; an ``"aten::"`` prefix is accepted.  An op
    the dispatcher does not know raises ValueError.  ``device_type`` is ``"cpu"`` or ``"cuda"``.
    Taught in ``05_autocast_op_lists``.
    """
    qualified = _qualified_op("op", op)
    if not isinstance(device_type, str):
        raise ArgumentTypeError(f"device_type must be 'cpu' or 'cuda', got {type(device_type).__name__}: {device_type!r:.80}")
    check_choice("device_type", device_type, AUTOCAST_KEYS)
    key = AUTOCAST_KEYS[device_type]
    if not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key):
        return False
    # A per-op fallthrough would be "registered" yet do nothing (torch 2.13 has none; checked anyway).
    is_fallthrough = getattr(torch._C, "_dispatch_kernel_for_dispatch_key_is_fallthrough", None)
    return not (is_fallthrough is not None and is_fallthrough(qualified, key))


def aten_op(name: str) -> str:
    """The aten op (``"softmax.int"``) behind a catalogue name (``"softmax"``, see :func:`op_names`)."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"name must be a catalogue op name such as 'softmax', got {type(name).__name__}: {name!r:.80}")
    check_choice("name", name, op_names())
    return _ATEN_OPS.get(name, name)


@dataclass(frozen=True)
class RuleRow:
    """One op in three sources (``05_autocast_op_lists``): ``documented`` policy per device
    (``{"cpu": ..., "cuda": ...}``, from :data:`DOCUMENTED`, under the op's name or its aten name), ``rule`` registered per device
    (``{"cpu": bool, "cuda": bool}``, live from the dispatcher, :func:`has_autocast_rule` of
    ``aten``), and the ``probed`` policy on ``probed_device`` (None when no probe was given)."""

    op: str
    aten: str
    documented: dict
    rule: dict
    probed: str | None = None
    probed_device: str | None = None


def rule_comparison(probed: ProbeTable | None = None, *, ops: Iterable[str] | None = None) -> list[RuleRow]:
    """The docs, torch's registered rules on both devices, and a probe, one :class:`RuleRow` per op.

    ``ops`` are catalogue names (default: the probe's ops, or the whole catalogue); ``probed`` is a
    :class:`ProbeTable` from :func:`probe` on this device (optional).  The registered rules come
    from the dispatcher for CPU *and* CUDA, so the CUDA column is live even without a GPU.
    """
    if probed is not None:
        _check_probe_table("probed", probed)
    if ops is None:
        names = list(probed) if probed is not None else op_names()
    else:
        names = _op_list("ops", ops)
        known = op_names()
        for i, name in enumerate(names):
            if not isinstance(name, str):
                raise ArgumentTypeError(f"ops[{i}] must be an op name such as 'mm', got {type(name).__name__}: {name!r:.80}")
            check_choice(f"ops[{i}]", name, known)
            if probed is not None:
                _probed(probed, name, f"ops[{i}]")
    rows = []
    for name in names:
        aten = _ATEN_OPS.get(name, name)
        rows.append(
            RuleRow(
                name,
                aten,
                {d: _documented_either(name, aten, d) for d in AUTOCAST_KEYS},
                {d: has_autocast_rule(aten, d) for d in AUTOCAST_KEYS},
                probed[name].policy if probed is not None and name in probed else None,
                probed.device_type if probed is not None else None,
            )
        )
    return rows


def _documented_either(name: str, aten: str, device_type: str) -> str:
    """The docs' policy for ``name``, or for its aten op where the docs list that spelling instead
    (the CPU list names ``matmul``, which ``a @ b`` calls, not ``__matmul__``)."""
    policy = documented_policy(name, device_type)
    base = aten.partition(".")[0]
    return documented_policy(base, device_type) if policy == "unchanged" and base != name else policy


def _check_rows(rows) -> list[RuleRow]:
    rows = checkbounded_list("rows", rows, max_length=MAX_OP_NAMES, what="the list rule_comparison() returns")
    for i, r in enumerate(rows):
        check_instance(f"rows[{i}]", r, RuleRow, "a RuleRow (rule_comparison() builds them)")
    return rows


def rule_groups(rows: Iterable[RuleRow]) -> dict[str, list[str]]:
    """What the rows say, as ``{statement: [ops]}``, every statement computed from the rows.

    Where the registered rules of the two devices differ, where a device's registrations and its
    documented list disagree, and (with a probe) which ops the probe saw lowered or forced to
    float32 without a rule of their own on the probed device: ops that decompose into ops that have
    one.  Empty groups are left out.
    """
    rows = _check_rows(rows)
    listed = ("lower", "fp32", "promote")
    groups: dict[str, list[str]] = {
        "a rule on CUDA, none on CPU": [r.op for r in rows if r.rule["cuda"] and not r.rule["cpu"]],
        "a rule on CPU, none on CUDA": [r.op for r in rows if r.rule["cpu"] and not r.rule["cuda"]],
    }
    for d, label in (("cpu", "CPU"), ("cuda", "CUDA")):
        groups[f"{label}: a rule registered, on no documented {label} list"] = [
            r.op for r in rows if r.rule[d] and r.documented[d] == "unchanged"
        ]
        groups[f"{label}: on a documented {label} list, no rule of its own"] = [
            r.op for r in rows if not r.rule[d] and r.documented[d] in listed
        ]
    for r in rows:
        if r.probed_device in AUTOCAST_KEYS and r.probed in listed and not r.rule[r.probed_device]:
            key = f"probed '{r.probed}' on {r.probed_device} without a {r.probed_device} rule of its own"
            groups.setdefault(key, []).append(r.op)
    return {k: v for k, v in groups.items() if v}


def _mark(rule: bool) -> str:
    return "yes" if rule else "-"


def format_rules(rows: Iterable[RuleRow], *, ops: Iterable[str] | None = None) -> str:
    """A narrow text table of :func:`rule_comparison`'s rows (``ops``: only those, in that order)."""
    rows = _check_rows(rows)
    by_name = {r.op: r for r in rows}
    if ops is not None:
        wanted = _op_list("ops", ops)
        for i, name in enumerate(wanted):
            if not isinstance(name, str):
                raise ArgumentTypeError(f"ops[{i}] must be an op name such as 'mm', got {type(name).__name__}: {name!r:.80}")
            check_choice(f"ops[{i}]", name, by_name)
        rows = [by_name[n] for n in wanted]
    devices = {r.probed_device for r in rows if r.probed_device is not None}
    probe_head = f"probed {devices.pop()}" if len(devices) == 1 else "probed"
    width = max([len("op (aten)")] + [len(f"{r.op} ({r.aten})") if r.aten != r.op else len(r.op) for r in rows])
    head = f"{'op (aten)':<{width}}  {'docs cpu':<9} {'docs cuda':<10} {'rule cpu':<9} {'rule cuda':<10} {probe_head}"
    lines = [head, "-" * len(head)]
    for r in rows:
        name = f"{r.op} ({r.aten})" if r.aten != r.op else r.op
        lines.append(
            f"{name:<{width}}  {r.documented['cpu']:<9} {r.documented['cuda']:<10} {_mark(r.rule['cpu']):<9} "
            f"{_mark(r.rule['cuda']):<10} {r.probed or '-'}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Text tables for the notebook
# ---------------------------------------------------------------------------------------


def _short(dtype) -> str:
    if dtype is None:
        return "-"
    return str(dtype).removeprefix("torch.")


def format_table(
    probed: ProbeTable, *, ops: Iterable[str] | None = None, documented: dict | None = None
) -> str:
    """One line per op: policy, output dtypes for float32 / low / mixed inputs, and the
    documented policy of the same device type."""
    _check_probe_table("probed", probed)
    lo = _short(probed.dtype)
    names = list(probed) if ops is None else _op_list("ops", ops)
    for i, name in enumerate(names):
        _probed(probed, name, f"ops[{i}]")
    full = DOCUMENTED if documented is None else documented
    if not isinstance(full, dict):
        raise ArgumentTypeError(f"documented must be a dict like DOCUMENTED or None, got {type(full).__name__}")
    header = f"{'op':<34}{'family':<16}{'policy':<11}{'fp32 in':<10}{lo + ' in':<12}{'mixed in':<10}docs"
    lines = [header, "-" * len(header)]
    has_docs = "lower" in full or probed.device_type in full
    lists = _device_lists(full, probed.device_type) if has_docs else None
    for name in names:
        r = probed[name]
        doc = documented_policy(name, probed.device_type, lists) if has_docs else "(none)"
        lines.append(
            f"{name:<34}{r.family:<16}{r.policy:<11}{_short(r.dtype):<10}{_short(r.low_dtype):<12}"
            f"{_short(r.mixed_dtype):<10}{doc}"
        )
    return "\n".join(lines)


def format_groups(probed: ProbeTable, *, width: int = 100) -> str:
    """The probe as one paragraph per policy: ``policy (n): op, op, ...``."""
    import textwrap

    _check_probe_table("probed", probed)
    width = check_int("width", width, minimum=20, maximum=10_000)
    out = []
    for policy, names in probed.by_policy().items():
        if not names:
            continue
        head = f"{policy} ({len(names)}) - {POLICY_MEANING[policy]}:"
        body = textwrap.fill(", ".join(names), width=width, initial_indent="    ", subsequent_indent="    ")
        out.append(head + "\n" + body)
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# The quiz: predict the output dtype of each line, then reveal
# ---------------------------------------------------------------------------------------

# (code, op the line is about or None, a hint that holds on every device)
QUIZ_LINES: tuple[tuple[str, str | None, str], ...] = (
    ("torch.mm(a, b)", "mm", "matmuls are autocast's main target"),
    ("a + b", "add", "float32 + float32, and add has no autocast rule"),
    ("torch.mm(a, b) + a", "add", "the mm result meets a float32 tensor in an op without a rule: "
     "ordinary type promotion picks the wider type"),
    ("torch.mm(a.double(), b.double())", None, "float64 tensors are not eligible for autocast"),
    ("torch.softmax(h, dim=-1)", "softmax", "h is already low precision; does softmax have a rule on this device?"),
    ("torch.softmax(h, dim=-1, dtype=torch.float64)", None, "an explicit dtype= argument opts the call out"),
    ("F.mse_loss(h, h)", "mse_loss", "losses are usually forced to float32"),
    ("torch.cat([h, a])", "cat", "mixed inputs: is that autocast's promote rule or cat's own promotion?"),
    ("torch.dot(h[0], a[0])", "dot", "dot's kernel refuses mixed dtypes unless autocast casts them"),
)  # fmt: skip

QUIZ_CHOICES = ("?", "float32", "bfloat16", "float16", "float64", "error")


@dataclass(frozen=True)
class QuizItem:
    code: str
    answer: str  # a dtype name ("float32", ...) or "error"
    explanation: str


def _quiz_namespace(dev: torch.device, low: torch.dtype) -> dict:
    gen = torch.Generator().manual_seed(5)
    a = torch.rand(4, 4, generator=gen).to(dev)
    b = torch.rand(4, 4, generator=gen).to(dev)
    h = torch.rand(4, 4, generator=gen).to(dev, low)
    return {"torch": torch, "F": F, "a": a, "b": b, "h": h}


def _quiz_lines(lines) -> tuple:
    if isinstance(lines, (str, dict)) or not isinstance(lines, (list, tuple)):
        raise ArgumentTypeError(f"lines must be a list of (code, op, hint) triples like QUIZ_LINES, got {lines!r:.80}")
    known = op_names()
    for i, line in enumerate(lines):
        if not isinstance(line, (list, tuple)) or len(line) != 3:
            raise ValueError(f"lines[{i}] must be a (code, op, hint) triple, got {line!r:.80}")
        code, op, hint = line
        if not isinstance(code, str) or not isinstance(hint, str) or not (op is None or isinstance(op, str)):
            raise ArgumentTypeError(
                f"lines[{i}] must be (code: str, op: str or None, hint: str), got {line!r:.80}"
            )
        if op is not None:
            check_choice(f"lines[{i}]'s op", op, known)
    return tuple(tuple(line) for line in lines)


def quiz_items(device=None, dtype=None, lines=None) -> list[QuizItem]:
    """Run each quiz line under ``torch.autocast`` and record the dtype it produced.

    ``a`` and ``b`` are float32 4x4 tensors, ``h`` is a 4x4 tensor in the low dtype; each
    line is evaluated as written (the code shown is the code run).  ``lines`` defaults to
    :data:`QUIZ_LINES` (``(code, op, hint)`` triples).
    """
    dev = get_device(device)
    low = autocast_dtype(dev, dtype)
    lines = QUIZ_LINES if lines is None else _quiz_lines(lines)
    ops = [op for _, op, _ in lines if op is not None]
    policies = probe(dev, low, ops=list(dict.fromkeys(ops))) if ops else {}
    items = []
    for code, op, hint in lines:
        ns = _quiz_namespace(dev, low)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with torch.autocast(dev.type, dtype=low):
                    out = eval(compile(code, "<quiz>", "eval"), ns)  # noqa: S307 - our own constants
                answer = _short(out.dtype)
            except Exception as exc:
                answer = "error"
                hint = f"{hint} ({_message(exc)})"
        if op is not None:
            r = policies[op]
            why = f"{op} is '{r.policy}' under {dev.type} autocast ({POLICY_MEANING[r.policy]}); {hint}"
        else:
            why = hint
        items.append(QuizItem(code, answer, why))
    return items


class DtypeQuiz:
    """The "predict the output dtype, then reveal" widget (``05_autocast_op_lists``).

    Attributes: ``items`` (the :class:`QuizItem` answers, computed by running autocast),
    ``predictions`` (one Dropdown per line), ``reveal`` (a ToggleButton), ``answers`` (one
    HTML readout per line), ``score`` (HTML) and ``widget`` (the layout).  Callbacks only
    set the readouts' ``value``.
    """

    def __init__(self, items: list[QuizItem], device_type: str, dtype: torch.dtype):
        import ipywidgets as widgets

        if not isinstance(items, (list, tuple)) or not items:
            raise ArgumentTypeError(f"items must be a non-empty list of QuizItem (quiz_items()), got {items!r:.80}")
        for i, item in enumerate(items):
            check_instance(f"items[{i}]", item, QuizItem, "a QuizItem (quiz_items())")
        check_choice("device_type", device_type, ["cpu", "cuda", "mps"])
        dtype = parse_dtype(dtype)
        self.items = list(items)
        self.device_type = device_type
        self.dtype = dtype
        header = widgets.HTML(
            f"<b>Inside <code>torch.autocast('{device_type}', dtype=torch.{_short(dtype)})</code></b>: "
            f"<code>a</code>, <code>b</code> are float32, <code>h</code> is {_short(dtype)}. "
            "Predict each output dtype, then press Reveal."
        )
        self.predictions = []
        self.answers = []
        rows = []
        for item in self.items:
            # fixed-width columns, so the dropdowns line up whatever the answers say
            code = widgets.HTML(
                f"<code style='white-space:nowrap'>{html.escape(item.code)}</code>",
                layout=widgets.Layout(width="380px", flex="0 0 380px"),
            )
            code.add_class("amp-quiz-code")
            pick = widgets.Dropdown(
                options=QUIZ_CHOICES, value="?", layout=widgets.Layout(width="110px", flex="0 0 110px")
            )
            pick.add_class("amp-quiz-prediction")
            answer = widgets.HTML(layout=widgets.Layout(flex="1 1 auto", margin="0 0 0 8px"))
            answer.add_class("amp-quiz-answer")
            self.predictions.append(pick)
            self.answers.append(answer)
            row = widgets.HBox([code, pick, answer], layout=widgets.Layout(align_items="flex-start"))
            row.add_class("amp-quiz-line")
            rows.append(row)
        self.reveal = widgets.ToggleButton(value=False, description="Reveal", icon="eye")
        self.reveal.add_class("amp-quiz-reveal")
        self.score = widgets.HTML()
        self.score.add_class("amp-quiz-score")
        self.widget = widgets.VBox([header, *rows, widgets.HBox([self.reveal, self.score])])
        self.widget.add_class("amp-quiz")
        for pick in self.predictions:
            pick.observe(self._refresh, names="value")
        self.reveal.observe(self._refresh, names="value")
        self._refresh()

    def correct(self) -> list[bool]:
        """Whether each prediction matches the answer (``"?"`` is never correct)."""
        return [p.value == item.answer for p, item in zip(self.predictions, self.items, strict=True)]

    def _refresh(self, change=None) -> None:
        if not self.reveal.value:
            for answer in self.answers:
                answer.value = "<span class='amp-quiz-hidden'>?</span>"
            made = sum(p.value != "?" for p in self.predictions)
            self.score.value = f"<span>{made} of {len(self.items)} predicted</span>"
            return
        for item, answer, ok in zip(self.items, self.answers, self.correct(), strict=True):
            cls, mark, color = (
                ("amp-quiz-correct", "&#10004;", "#1a7f37")
                if ok
                else ("amp-quiz-wrong", "&#10008;", "#c62828")
            )
            answer.value = (
                f"<div style='line-height:1.3'><span class='{cls}' style='color:{color}'>{mark} <b>{html.escape(item.answer)}</b></span>"
                f"<br><span class='amp-quiz-why' style='color:#555;font-size:90%'>"
                f"{html.escape(item.explanation)}</span></div>"
            )
        right = sum(self.correct())
        self.score.value = f"<span><b>{right} of {len(self.items)}</b> right</span>"


def dtype_quiz(device=None, dtype=None, lines=None) -> DtypeQuiz:
    """Build the dtype quiz for ``device`` (answers computed live by :func:`quiz_items`)."""
    dev = get_device(device)
    low = autocast_dtype(dev, dtype)
    return DtypeQuiz(quiz_items(dev, low, lines), dev.type, low)
