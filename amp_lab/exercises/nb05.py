"""Exercises of notebook 05 (autocast op lists): every expected value comes from running autocast on the
learner's device; each hint points at the idea missed without naming the dtype or the policy."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import autocast_ops as ao
from ..check import check_value
from ..check_base import CheckResult, finish, hint_lines, is_placeholder, no_answer, norm, read_dtype
from ..check_items import check_choice
from ..device import get_device, seeded, supports_float64
from ..dtypes import dtype_name
from . import Mistake, exercise

__all__ = ["ex1", "ex2", "ex3", "ex4", "REGION_NAMES", "POLICIES", "variance_column"]

# Exercise 1: the names of the region's results, in the order its lines run.
REGION_NAMES = ("h", "p", "loss", "hX", "hh", "G")
# Exercises 2 and 4: the four policies a learner chooses from.
POLICIES = ("lower", "fp32", "promote", "unchanged")
VARIANCE_ATOL = 1e-3  # exercise 3: the variance is due within this of the float64 reference

_PROMOTE_HINT = "a promote op casts every input to the widest of its inputs' dtypes before it runs"
# result -> the idea a wrong dtype for it missed
_HINTS = {
    "h": "a linear layer is a matmul: look up linear's policy in the live table; what does that policy do to float32 inputs?",
    "p": "softmax is decided by the rule this device registers (or does not): look at softmax's row in the live table for this device, and remember that h is already the output of the line before",
    "loss": "losses are computed in a wider dtype on purpose: look up mse_loss's policy in the live table",
    "hX": "cat meets inputs of two dtypes here: " + _PROMOTE_HINT,
    "hh": _PROMOTE_HINT,
    "G": "autocast casts only the dtypes it counts as eligible, even for an op on the lower-precision list: look at the dtype of torch.mm's inputs on this line, and at the cell that showed `dtype=` arguments",
}
_PROMOTE_NOT_FP32_HINT = "promote is not fp32: a promote op casts to the widest of its inputs' dtypes; what are the dtypes of cat's inputs on this line?"
_GENERIC_HINT = "look each op up in the live table (`table[op].policy`); each line's inputs are the outputs of the lines before it"


def _no(text: str, show: bool, hint: str | None = None) -> CheckResult:
    """Not yet: ``text``, and the hint that points at the idea missed."""
    return finish("wrong", text, hint_lines(hint), show=show)


def _region_dtypes(dev: torch.device) -> dict[str, torch.dtype]:
    """Run exercise 1's region on ``dev``: the dtype of each named result."""
    d64 = dev if supports_float64(dev) else torch.device("cpu")  # Apple GPUs (MPS) have no float64
    with seeded(2):
        lin = nn.Linear(8, 8).to(dev)
        X = torch.randn(4, 8, device=dev)
    with torch.autocast(dev.type, dtype=ao.autocast_dtype(dev)):
        h = lin(X)
        p = torch.softmax(h, dim=-1)
        loss = F.mse_loss(h, X)
        hX = torch.cat([h, X])
        hh = torch.cat([h, h])
        G = torch.mm(X.to(d64).double(), X.to(d64).double().T)
    return {"h": h.dtype, "p": p.dtype, "loss": loss.dtype, "hX": hX.dtype, "hh": hh.dtype, "G": G.dtype}


_EX1 = {
    "float32 for a promote op": _PROMOTE_NOT_FP32_HINT,
    "low dtype for a mixed promote op": _HINTS["hX"],
    "float64 cast down": _HINTS["G"],
    "linear kept in float32": _HINTS["h"],
    "loss in the low dtype": _HINTS["loss"],
}


@exercise(1, "Predict the dtypes", mistakes=_EX1)
def ex1(answer, device, *, show: bool = True) -> CheckResult:
    """A dict with the dtype of each result of the region (keys REGION_NAMES), on ``device``."""
    expected = _region_dtypes(get_device(device))
    what = "a dict {" + ", ".join(f"{k!r}: ..." for k in REGION_NAMES) + "} of dtypes"
    if is_placeholder(answer):
        return no_answer("answer", show, what)
    if not isinstance(answer, dict):
        text = "`answer` should be a dict such as {'h': torch.float32, ...}, one dtype per name."
        return _no(text, show, _GENERIC_HINT)
    right, notes, missing = [], [], []
    for key, want in expected.items():
        got = read_dtype(given := answer.get(key))
        if is_placeholder(given):
            missing.append(key)
        elif got == want:
            right.append(key)
        elif got is None:
            notes.append(f"answer[{key!r}] = {given!r:.40} is not a dtype (e.g. torch.float32 or 'bf16').")
        else:
            hint = _PROMOTE_NOT_FP32_HINT if key == "hh" and got == torch.float32 else _HINTS[key]
            notes.append(f"answer[{key!r}] = {dtype_name(got)} is not what the line gives: {hint}.")
    if not right and not notes:
        return no_answer("answer", show, what)
    details = {"right": right, "missing": missing}
    if len(right) == len(expected):
        return finish("exact", f"all {len(right)} dtypes in `answer` are right.", show=show, details=details)
    if missing:
        notes.append("not answered yet: " + ", ".join(repr(k) for k in missing))
    if extra := [repr(k) for k in answer if k not in expected]:
        notes.append("not asked (ignored): " + ", ".join(extra))
    head = f"{len(right)} of {len(expected)} dtypes in `answer` are right."
    return finish("wrong", head, notes, show=show, details=details)


_POLICY_MISTAKES = {  # exercises 2 and 4: name -> hint
    "lower because it looks like a matmul": "autocast decides by the op that is dispatched, not by what the op means mathematically: which op does outer(u, v) = u[:, None] * v[None, :] dispatch, and what is its policy in the live table?",
    "kernel promotion taken for promote": "a float32 output from mixed inputs is not yet promote: did autocast insert the casts, or did the kernel's own type promotion do it? (ao.dispatch_trace shows autocast's casts)",
    "guessed without the experiment": "run it three ways under autocast (float32 inputs, low-precision inputs, mixed inputs) and once without autocast, and compare the output dtypes",
}
_BY_MEANING, _KERNEL, _EXPERIMENT = (Mistake(*m) for m in _POLICY_MISTAKES.items())


def _policy_check(answer, fn, shapes, op_name: str, device, hint: str, show: bool) -> CheckResult:
    """The policy of ``fn`` under autocast on ``device``, as ``ao.classify`` finds it, against ``answer``."""
    dev = get_device(device)
    probe = ao.classify(fn, shapes, name=op_name, device=dev)
    lo = dtype_name(ao.autocast_dtype(dev))
    means = {
        "lower": f"`lower`: float32 inputs come out as {lo}, because autocast casts them down first",
        "fp32": f"`fp32`: {lo} inputs come out float32, while without autocast they stay {lo}",
        "promote": "`promote`: from mixed inputs autocast itself casts to the widest type (its casts show in ao.dispatch_trace)",
        "unchanged": "`unchanged`: autocast has no rule for it; the op runs in the dtype it is given",
    }
    means[probe.policy] += f". The probe's evidence: {probe.reason}"
    a = norm(answer) if isinstance(answer, str) else None
    if a == "promote" and probe.policy == "unchanged" and probe.mixed_dtype == torch.float32:
        hint = _KERNEL.hint
    return check_choice(
        answer, probe.policy, options=list(POLICIES), explanations=means, hint=hint, show=show
    )


@exercise(2, "Is outer a matmul?", mistakes=[_BY_MEANING, _KERNEL])
def ex2(answer, device, *, show: bool = True) -> CheckResult:
    """The policy of torch.outer under autocast on ``device``: one of POLICIES."""
    return _policy_check(answer, torch.outer, [(4,), (3,)], "outer", device, _BY_MEANING.hint, show)


@exercise(4, "An op on no list", mistakes=[_EXPERIMENT, _KERNEL])
def ex4(answer, device, *, show: bool = True) -> CheckResult:
    """The policy of F.pairwise_distance under autocast on ``device``: one of POLICIES."""
    shapes, fn = [(3, 4), (3, 4)], F.pairwise_distance
    return _policy_check(answer, fn, shapes, "pairwise_distance", device, _EXPERIMENT.hint, show)


# Exercise 3's common wrong answers: name -> hint.
_EX3 = {
    "forgetting enabled=False": "torch.mm inside the autocast region rounds its inputs to the low dtype before it multiplies: how does the section on switching autocast off keep them out of autocast's reach?",
    "casting the result instead of the inputs": "casting the result to float32 comes too late: the rounding happened to the inputs of torch.mm, inside the region",
}
_ENABLED_FALSE_HINT = _EX3["forgetting enabled=False"]


def variance_column(device) -> torch.Tensor:
    """Exercise 3's data: a seeded float32 column of 128 values around 5 on ``device``."""
    with seeded(1):
        return 5.0 + 0.1 * torch.randn(128, 1, device=get_device(device))


def _moments(x: torch.Tensor) -> torch.Tensor:
    ones = torch.full((1, x.shape[0]), 1.0 / x.shape[0], device=x.device)
    return torch.mm(ones, x * x) - torch.mm(ones, x) ** 2


@exercise(3, "A protected sub-region", mistakes=[Mistake(*m) for m in _EX3.items()])
def ex3(safe_variance, device, *, show: bool = True) -> CheckResult:
    """``safe_variance(x)``, called inside an autocast region, returns the variance by moments of
    the column ``x`` as a float32 tensor within VARIANCE_ATOL of the float64 reference."""
    dev = get_device(device)
    if is_placeholder(safe_variance):
        return no_answer("safe_variance", show, "your function")
    if not callable(safe_variance):
        return _no(f"`safe_variance` is a {type(safe_variance).__name__}, not a function.", show)
    x, low = variance_column(dev), ao.autocast_dtype(dev)
    try:
        with torch.autocast(dev.type, dtype=low):
            got = safe_variance(x.clone())
    except NotImplementedError:
        got = None
    except Exception as exc:  # the learner's code: report, never raise
        return _no(f"safe_variance(x) raised {type(exc).__name__}: {exc}", show)
    if got is None:
        text = "safe_variance returns None or raises NotImplementedError: write it, then run this cell again."
        return finish("unanswered", text, show=show, details={"answered": False})
    if not isinstance(got, torch.Tensor):
        return _no(f"safe_variance(x) returned {type(got).__name__}; return one float32 number.", show)
    if got.numel() != 1 or got.dtype != torch.float32:
        what = f"a {dtype_name(got.dtype)} tensor of shape {tuple(got.shape)}"
        hint = _ENABLED_FALSE_HINT if got.dtype == low else None
        return _no(f"safe_variance(x) returned {what}; return one float32 number.", show, hint)
    value = got.detach().reshape(()).cpu()
    truth = x.cpu().double().var(unbiased=False)
    with torch.autocast(dev.type, dtype=low):
        too_late = _moments(x).float().reshape(()).cpu()
    if abs(value.double() - truth) > VARIANCE_ATOL and torch.equal(value, too_late):
        text = "safe_variance(x) is float32, but far from the float64 reference."
        return _no(text, show, _EX3["casting the result instead of the inputs"])
    name, hint = "safe_variance(x)", _ENABLED_FALSE_HINT
    return check_value(value, truth, dtype=torch.float32, atol=VARIANCE_ATOL, name=name, hint=hint, show=show)
