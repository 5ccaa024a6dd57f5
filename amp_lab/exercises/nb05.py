"""Exercises of notebook 05 (autocast op lists).

Every expected value is computed here by running autocast itself on the learner's device
(:mod:`amp_lab.autocast_ops` probes and classifies; the regions of exercise 1 are run as written),
never typed in.  The common wrong answers are diagnosed before the generic comparison, so each hint
points at the autocast idea that was missed without naming the dtype or the policy.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import autocast_ops as ao
from .._checks import ArgumentTypeError
from ..check import check_value
from ..check_base import CheckResult, finish, is_placeholder, no_answer, read_dtype
from ..check_items import check_choice
from ..device import get_device, seeded, supports_float64
from . import Mistake, combine, exercise

__all__ = ["ex1", "ex2", "ex3", "ex4", "REGION_NAMES", "POLICIES"]

# Exercise 1: the names of the region's results, in the order its lines run.
REGION_NAMES = ("h", "p", "loss", "hX", "hh", "G")
# Exercises 2 and 4: the four policies a learner chooses from.
POLICIES = ("lower", "fp32", "promote", "unchanged")

# Variance by moments (exercise 3): a column of VARIANCE_N values around VARIANCE_MEAN.
VARIANCE_N, VARIANCE_MEAN, VARIANCE_SPREAD, VARIANCE_ATOL = 128, 5.0, 0.1, 1e-3


def _device(device) -> torch.device:
    """The device a check runs on: a torch.device or a name such as "cpu" (validated by get_device)."""
    if device is None or isinstance(device, bool) or not isinstance(device, (str, torch.device)):
        raise ArgumentTypeError(f"device must be a torch.device or a name such as 'cpu', got {device!r:.60}")
    return get_device(device)


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


# --------------------------------------------------------------------------------------------
# Exercise 1: the dtypes of one autocast region
# --------------------------------------------------------------------------------------------

_LINEAR_HINT = "a linear layer is a matmul: look up linear's policy in the live table; what does that policy do to float32 inputs?"
_FP32_OP_HINT = "losses are computed in a wider dtype on purpose: look up mse_loss's policy in the live table"
_MIXED_PROMOTE_HINT = (
    "cat meets one low-precision and one float32 input; a promote op casts every input to the widest of its "
    "inputs' dtypes before it runs"
)
_PROMOTE_NOT_FP32_HINT = (
    "promote is not fp32: a promote op casts to the widest of its inputs' dtypes, and here both inputs come "
    "from the same line"
)
_FLOAT64_HINT = (
    "float64 tensors are not eligible for autocast's casts, even for an op on the lower-precision list"
)
_DEVICE_RULE_HINT = (
    "softmax is decided by the rule this device registers (or does not): look at softmax's row in the live "
    "table for this device, and remember that h is already the output of the line before"
)
_GENERIC_HINT = "look each op up in the live table (`table[op].policy`); each line's inputs are the outputs of the lines before it"


def region_dtypes(device) -> dict[str, torch.dtype]:
    """Run exercise 1's region on ``device`` and return the dtype of each named result."""
    dev = _device(device)
    low = ao.autocast_dtype(dev)
    d64 = dev if supports_float64(dev) else torch.device("cpu")  # Apple GPUs (MPS) have no float64
    with seeded(2):
        lin = nn.Linear(8, 8).to(dev)
        X = torch.randn(4, 8, device=dev)
    with torch.autocast(dev.type, dtype=low):
        h = lin(X)
        p = torch.softmax(h, dim=-1)
        loss = F.mse_loss(h, X)
        hX = torch.cat([h, X])
        hh = torch.cat([h, h])
        G = torch.mm(X.to(d64).double(), X.to(d64).double().T)
    return {"h": h.dtype, "p": p.dtype, "loss": loss.dtype, "hX": hX.dtype, "hh": hh.dtype, "G": G.dtype}


_HINTS = {
    "h": _LINEAR_HINT,
    "loss": _FP32_OP_HINT,
    "hX": _MIXED_PROMOTE_HINT,
    "G": _FLOAT64_HINT,
    "p": _DEVICE_RULE_HINT,
}


def _dtype_hint(key: str, got: torch.dtype) -> str:
    """The idea missed when ``got`` is the (wrong) answer for ``key``."""
    if key == "hh" and got == torch.float32:
        return _PROMOTE_NOT_FP32_HINT
    if key == "hh":
        return _MIXED_PROMOTE_HINT.replace("cat meets one low-precision and one float32 input; ", "")
    return _HINTS.get(key, _GENERIC_HINT)


@exercise(
    1,
    "Predict the dtypes",
    mistakes=[
        Mistake("float32 for a promote op", _PROMOTE_NOT_FP32_HINT),
        Mistake("low dtype for a mixed promote op", _MIXED_PROMOTE_HINT),
        Mistake("float64 cast down", _FLOAT64_HINT),
        Mistake("linear kept in float32", _LINEAR_HINT),
        Mistake("loss in the low dtype", _FP32_OP_HINT),
    ],
)
def ex1(answer, device, *, show: bool = True) -> CheckResult:
    """A dict with the dtype of each result of the region (keys REGION_NAMES), on ``device``."""
    dev = _device(device)
    expected = region_dtypes(dev)
    if is_placeholder(answer):
        return no_answer(
            "answer", show, "a dict {" + ", ".join(f"{k!r}: ..." for k in REGION_NAMES) + "} of dtypes"
        )
    if not isinstance(answer, dict):
        return finish(
            "wrong",
            "`answer` should be a dict such as {'h': torch.float32, ...}, one dtype per name.",
            [f"hint: {_GENERIC_HINT}"],
            show=show,
        )
    right, notes, missing = [], [], []
    for key, want in expected.items():
        given = answer.get(key)
        if is_placeholder(given):
            missing.append(key)
            continue
        got = read_dtype(given)
        if got is None:
            notes.append(
                f"answer[{key!r}] = {given!r:.40} is not a dtype; write e.g. torch.float32 or 'bf16'."
            )
        elif got == want:
            right.append(key)
        else:
            notes.append(
                f"answer[{key!r}] = {_name(got)} is not what the line gives: {_dtype_hint(key, got)}."
            )
    if missing and not right and not notes:
        return no_answer("answer", show, "a dict with one dtype per name (" + ", ".join(REGION_NAMES) + ")")
    details = {"right": right, "missing": missing}
    if len(right) == len(expected):
        return finish("exact", f"all {len(right)} dtypes in `answer` are right.", show=show, details=details)
    if missing:
        notes.append("not answered yet: " + ", ".join(repr(k) for k in missing))
    extra = [k for k in answer if k not in expected]
    if extra:
        notes.append("not asked (ignored): " + ", ".join(repr(k) for k in extra))
    head = f"{len(right)} of {len(expected)} dtypes in `answer` are right."
    return finish("wrong", head, notes, show=show, details=details)


# --------------------------------------------------------------------------------------------
# Exercises 2 and 4: the policy of an op on no list
# --------------------------------------------------------------------------------------------


def _policy_means(low: torch.dtype) -> dict[str, str]:
    lo = _name(low)
    return {
        "lower": f"`lower`: float32 inputs come out as {lo}, because autocast casts them down first",
        "fp32": f"`fp32`: {lo} inputs come out float32, while without autocast they stay {lo}",
        "promote": "`promote`: from mixed inputs autocast itself casts to the widest type (its casts show in "
        "ao.dispatch_trace)",
        "unchanged": "`unchanged`: autocast has no rule for it; the op runs in the dtype it is given",
    }


_BY_MEANING_HINT = (
    "autocast decides by the op that is dispatched, not by what the op means mathematically: which op does "
    "outer(u, v) = u[:, None] * v[None, :] dispatch, and what is its policy in the live table?"
)
_KERNEL_PROMOTION_HINT = (
    "a float32 output from mixed inputs is not yet promote: did autocast insert the casts, or did the kernel's "
    "own type promotion do it? (ao.dispatch_trace shows autocast's casts)"
)
_EXPERIMENT_HINT = (
    "run it three ways under autocast (float32 inputs, low-precision inputs, mixed inputs) and once without "
    "autocast, and compare the output dtypes"
)


def _policy_check(answer, fn, shapes, op_name: str, dev: torch.device, show: bool, hint: str) -> CheckResult:
    result = ao.classify(fn, shapes, name=op_name, device=dev)
    expected = result.policy
    low = ao.autocast_dtype(dev)
    means = _policy_means(low)
    a = answer.strip().lower() if isinstance(answer, str) else answer
    if not is_placeholder(answer) and a != expected and a in POLICIES:
        if a == "promote" and expected == "unchanged" and result.mixed_dtype == torch.float32:
            hint = _KERNEL_PROMOTION_HINT
        return check_choice(
            answer,
            expected,
            options=list(POLICIES),
            explanations={a: means[a]},
            name="answer",
            hint=hint,
            show=show,
        )
    r = check_choice(
        answer, expected, options=list(POLICIES), explanations=means, name="answer", hint=hint, show=False
    )
    if r.ok:
        r = CheckResult(r.verdict, r.message + f"\n  the probe's evidence: {result.reason}", r.details)
    if show:
        print(r.message)
    return r


@exercise(
    2,
    "Is outer a matmul?",
    mistakes=[
        Mistake("lower because it looks like a matmul", _BY_MEANING_HINT),
        Mistake("kernel promotion taken for promote", _KERNEL_PROMOTION_HINT),
    ],
)
def ex2(answer, device, *, show: bool = True) -> CheckResult:
    """The policy of torch.outer under autocast on ``device``: one of POLICIES."""
    dev = _device(device)
    return _policy_check(answer, torch.outer, [(4,), (3,)], "outer", dev, show, _BY_MEANING_HINT)


@exercise(
    4,
    "An op on no list",
    mistakes=[
        Mistake("guessed without the experiment", _EXPERIMENT_HINT),
        Mistake("kernel promotion taken for promote", _KERNEL_PROMOTION_HINT),
    ],
)
def ex4(answer, device, *, show: bool = True) -> CheckResult:
    """The policy of F.pairwise_distance under autocast on ``device``: one of POLICIES."""
    dev = _device(device)
    return _policy_check(
        answer, F.pairwise_distance, [(3, 4), (3, 4)], "pairwise_distance", dev, show, _EXPERIMENT_HINT
    )


# --------------------------------------------------------------------------------------------
# Exercise 3: a protected sub-region
# --------------------------------------------------------------------------------------------

_ENABLED_FALSE_HINT = (
    "torch.mm inside the autocast region rounds its inputs to the low dtype before it multiplies: nest a region "
    "with enabled=False around the moments"
)
_CAST_TOO_LATE_HINT = (
    "casting the result to float32 comes too late: the rounding happened to the inputs of torch.mm, inside the "
    "region"
)


def variance_column(device) -> torch.Tensor:
    """Exercise 3's data: a seeded float32 column of VARIANCE_N values on ``device``."""
    dev = _device(device)
    with seeded(1):
        return VARIANCE_MEAN + VARIANCE_SPREAD * torch.randn(VARIANCE_N, 1, device=dev)


def _moments(x: torch.Tensor) -> torch.Tensor:
    ones = torch.full((1, x.shape[0]), 1.0 / x.shape[0], device=x.device)
    return torch.mm(ones, x * x) - torch.mm(ones, x) ** 2


@exercise(
    3,
    "A protected sub-region",
    mistakes=[
        Mistake("forgetting enabled=False", _ENABLED_FALSE_HINT),
        Mistake("casting the result instead of the inputs", _CAST_TOO_LATE_HINT),
    ],
)
def ex3(safe_variance, device, *, show: bool = True) -> CheckResult:
    """``safe_variance(x)``, called inside an autocast region, returns the variance by moments of
    the column ``x`` as a float32 tensor within VARIANCE_ATOL of the float64 reference."""
    dev = _device(device)
    if is_placeholder(safe_variance):
        return no_answer("safe_variance", show, "your function")
    if not callable(safe_variance):
        return finish(
            "wrong", f"`safe_variance` is a {type(safe_variance).__name__}, not a function.", show=show
        )
    x = variance_column(dev)
    truth = x.cpu().double().var(unbiased=False)
    low = ao.autocast_dtype(dev)
    try:
        with torch.autocast(dev.type, dtype=low):
            got = safe_variance(x.clone())
    except NotImplementedError:
        return finish(
            "unanswered",
            "safe_variance raises NotImplementedError: write it, run its cell, then run this cell again.",
            show=show,
            details={"answered": False},
        )
    except Exception as exc:  # the learner's code: report, never raise
        return finish("wrong", f"safe_variance(x) raised {type(exc).__name__}: {exc}", show=show)
    if got is None:
        return finish(
            "unanswered",
            "safe_variance returns None: write it, run its cell, then run this cell again.",
            show=show,
            details={"answered": False},
        )
    if not isinstance(got, torch.Tensor):
        return finish(
            "wrong", f"safe_variance(x) returned a {type(got).__name__}; return a tensor.", show=show
        )
    if got.numel() != 1:
        return finish(
            "wrong",
            f"safe_variance(x) returned a tensor of shape {tuple(got.shape)}; the variance is "
            "one number (shape (1, 1) or ())",
            show=show,
        )
    if got.dtype == low:
        return finish(
            "wrong",
            f"safe_variance(x) returned {_name(got.dtype)}, not float32.",
            [f"hint: {_ENABLED_FALSE_HINT}"],
            show=show,
        )
    with torch.autocast(dev.type, dtype=low):
        too_late = _moments(x).float()
    error = abs(got.detach().double().cpu().reshape(()) - truth).item()
    if (
        got.dtype == torch.float32
        and error > VARIANCE_ATOL
        and torch.equal(got.detach().reshape(()), too_late.reshape(()))
    ):
        return finish(
            "wrong",
            "safe_variance(x) is float32, but far from the float64 reference.",
            [f"hint: {_CAST_TOO_LATE_HINT}"],
            show=show,
        )
    r_value = check_value(
        got.detach().cpu().reshape(()),
        truth,
        dtype=torch.float32,
        atol=VARIANCE_ATOL,
        name="safe_variance(x)",
        hint=_ENABLED_FALSE_HINT,
        show=False,
    )
    r_dtype = CheckResult(
        "exact" if got.dtype == torch.float32 else "wrong",
        f"{'✓ passed' if got.dtype == torch.float32 else '✗ not yet'}: safe_variance(x) is "
        f"{_name(got.dtype)}" + ("." if got.dtype == torch.float32 else "; return float32."),
    )
    return combine([r_value, r_dtype], show=show)
