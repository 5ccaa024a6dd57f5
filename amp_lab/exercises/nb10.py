"""Exercises of notebook 10 (mixed precision across processes): which setups fit come from the ZeRO formulas
(:func:`amp_lab.memory.zero_bytes`); the learner's communication hook and found_inf exchange run on real gloo
ranks (:func:`amp_lab.distributed.spawn`) beside DDP's own float32 all-reduce; the bytes saved for backward
are measured (:func:`amp_lab.memory.activation_bytes`) on a model the learner counts by hand."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..check import check_value
from ..check_base import CheckResult, finish, is_placeholder, no_answer
from ..check_items import check_set
from ..distributed import CollectiveDtypes, RankError, spawn
from ..memory import ZERO_STAGES, activation_bytes, zero_bytes
from ..models import make_mlp
from . import Mistake, answer_names, exercise, finite_float, wrong

__all__ = ["ex1", "ex2", "ex3", "ex4", "FIT", "SETUPS", "COUNT"]

# Exercise 1: a model, its ranks and their memory (GB = 1e9 bytes); the setups to choose from.
FIT = {"parameters": 13e9, "ranks": 16, "gb_per_rank": 48}
SETUPS = (*ZERO_STAGES, "FSDP2 (fully_shard)")
_FSDP_STAGE = 3  # FSDP2 shards weights, gradients and optimizer state: ZeRO-3's accounting

_EX1 = {
    "ZeRO-1": "ZeRO-1 shards only the optimizer's 12 bytes: each rank still keeps the 2 + 2 bytes of weights and "
    "gradients of every parameter",
    "DDP": "plain data parallel keeps all 16 bytes of every parameter on every rank",
    "ZeRO-2": "ZeRO-2 leaves only the low-precision weights unsharded: count what a rank keeps",
    "ZeRO-3": "ZeRO-3 shards everything: a rank keeps 1/N of all 16 bytes",
    "FSDP2 (fully_shard)": "fully_shard shards the weights, gradients and optimizer state alike, as ZeRO-3 does",
}


def _fits() -> set[str]:
    per_rank = FIT["gb_per_rank"] * 1e9
    stage = {name: i for i, name in enumerate(ZERO_STAGES)} | {SETUPS[-1]: _FSDP_STAGE}
    return {s for s in SETUPS if FIT["parameters"] * zero_bytes(stage[s], FIT["ranks"]) <= per_rank}


@exercise(1, "Which setups fit", mistakes=[Mistake(*m) for m in _EX1.items()])
def ex1(answer, *, show: bool = True) -> CheckResult:
    """The setups of :data:`SETUPS` in which the weights, gradients and Adam state of :data:`FIT`'s model fit in
    each rank's memory (mixed-precision Adam, 16 bytes per parameter before sharding; activations aside)."""
    expected = _fits()
    explanations = {s: _EX1[s] for s in SETUPS if s not in expected}
    names = answer_names(answer)
    missing = [s for s in SETUPS if s in expected and names is not None and s.lower() not in names]
    hint = _EX1[missing[0]] if missing else "for each setup, which of the 16 bytes are divided by the ranks?"
    return check_set(answer, expected, options=SETUPS, explanations=explanations, hint=hint, show=show)


# -- exercise 2: a bf16 compression hook --


def _hook_rank(rank: int, world_size: int, hook) -> dict:
    """DDP's gradients on this rank with its own float32 all-reduce and with ``hook``, on hidden inputs."""
    gen = torch.Generator().manual_seed(1000 + rank)
    X, y = torch.randn(24, 16, generator=gen), torch.randint(0, 4, (24,), generator=gen)
    out = {}
    for name, h in (("reference", None), ("yours", hook)):
        model = make_mlp(16, 4, hidden=48, depth=1, seed=3, device="cpu")
        ddp = DistributedDataParallel(model)
        if h is not None:
            ddp.register_comm_hook(dist.group.WORLD, h)
        comm = CollectiveDtypes("allreduce")
        with comm:
            torch.nn.functional.cross_entropy(ddp(X), y).backward()
        out[name] = {"grads": [p.grad.detach().clone() for p in model.parameters()], "comm": comm.seen}
    return out


def _relative(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    num = sum(float((x.double() - y.double()).abs().sum()) for x, y in zip(a, b, strict=True))
    return num / sum(float(y.double().abs().sum()) for y in b)


_EX2 = {
    "no compression": "the all-reduce still sends float32: cast the bucket's buffer to bfloat16 before it, and "
    "back to the buffer's dtype after it",
    "float16": "this hook compresses to bfloat16 (the range of float32, so no scale is needed)",
    "a sum": "all_reduce sums the ranks' tensors; DDP's gradient is their mean",
    "ranks disagree": "the ranks ended with different gradients: every rank must receive the same reduced "
    "tensor (all-reduce, not a broadcast or a local result)",
    "not a future": "a hook returns a torch.futures.Future: all_reduce(..., async_op=True).get_future(), "
    "then .then(...) to turn its result back into the buffer's dtype",
}
RANKS = 3  # the hook's check runs on three ranks, so a hard-coded 2 shows


@exercise(2, "A bfloat16 compression hook", mistakes=[Mistake(*m) for m in _EX2.items()])
def ex2(answer, *, show: bool = True) -> CheckResult:
    """``answer`` is the learner's DDP communication hook ``hook(process_group, bucket) -> Future``: it must
    all-reduce the bucket in bfloat16 and give the mean back in the bucket's dtype; run by DDP on
    :data:`RANKS` gloo ranks beside DDP's own float32 all-reduce."""
    if is_placeholder(answer):
        return no_answer("answer", show, "your hook (`bf16_allreduce_hook`)")
    if not callable(answer):
        return wrong(
            f"`answer` is a {type(answer).__name__}, not a function.", _EX2["not a future"], show=show
        )
    try:
        ranks = spawn(_hook_rank, RANKS, answer, timeout_s=60)
    except RankError as exc:
        first = str(exc).split("\n", 1)[0]
        return wrong(f"your hook failed under DDP: {first}", _EX2["not a future"], show=show)
    except TimeoutError:
        return wrong("your hook did not finish within 60 s.", _EX2["ranks disagree"], show=show)
    yours = [r["yours"] for r in ranks]
    reference = ranks[0]["reference"]["grads"]
    sent = {d for r in yours for d in r["comm"]}
    if any(_relative(r["grads"], yours[0]["grads"]) > 0 for r in yours[1:]):
        return wrong("the ranks' gradients differ after your hook.", _EX2["ranks disagree"], show=show)
    if torch.float16 in sent:
        return wrong("your hook sent float16 tensors.", _EX2["float16"], show=show)
    if torch.bfloat16 not in sent or torch.float32 in sent:
        return wrong("your hook did not send the gradients in bfloat16.", _EX2["no compression"], show=show)
    error = _relative(yours[0]["grads"], reference)
    summed = _relative([g / RANKS for g in yours[0]["grads"]], reference)
    if summed < error:
        return wrong("your gradients are not the ranks' mean.", _EX2["a sum"], show=show)
    if error > 2**-6:  # bfloat16 keeps 8 bits: the mean is off by a rounding or two, not more
        hint = "compare your result with the mean of the ranks' gradients: divide by the group's size"
        return wrong("your gradients are not the mean of the ranks' gradients yet.", hint, show=show)
    text = (
        f"your hook sends bfloat16 and DDP's gradients are the ranks' mean: {error:.1e} mean relative error "
        "against DDP's float32 all-reduce, for half the bytes on the wire"
    )
    return finish("close", text, show=show, details={"error": error})


# -- exercise 3: skip everywhere --


def _found_inf_rank(rank: int, world_size: int, fn, cases) -> list:
    """What the learner's ``fn`` returns on this rank for each case (a tuple of the ranks that found an inf)."""
    out = []
    for found in cases:
        flag = torch.tensor([1.0 if rank in found else 0.0])
        got = fn(flag)
        got = flag if got is None else got  # an in-place all_reduce returns None
        out.append(float(torch.as_tensor(got).float().sum()))
    return out


_EX3 = {
    "local": "each rank sees only its own gradients: the ranks must exchange found_inf before any of them decides",
    "one rank's": "every rank's flag counts, not one rank's: which collective combines a value from every rank and "
    "gives every rank the result?",
}
_CASES = ((), (1,), (0, 2), (0, 1, 2), (2,))


@exercise(3, "Skip everywhere", mistakes=[Mistake(*m) for m in _EX3.items()])
def ex3(answer, *, show: bool = True) -> CheckResult:
    """``answer`` is the learner's ``found_inf_anywhere(found_inf)``: given this rank's flag (a float tensor of
    one element, 1.0 when this rank's gradients hold an inf or NaN), it returns a flag (or changes it in place)
    that is nonzero on every rank exactly when some rank found one; run on three gloo ranks."""
    if is_placeholder(answer):
        return no_answer("answer", show, "your function (`found_inf_anywhere`)")
    if not callable(answer):
        return wrong(f"`answer` is a {type(answer).__name__}, not a function.", _EX3["local"], show=show)
    try:
        ranks = spawn(_found_inf_rank, RANKS, answer, _CASES, timeout_s=60)
    except (RankError, TimeoutError) as exc:
        first = str(exc).split("\n", 1)[0]
        return wrong(f"found_inf_anywhere failed on the ranks: {first}", _EX3["local"], show=show)
    for i, found in enumerate(_CASES):
        skips = [ranks[r][i] != 0 for r in range(RANKS)]
        if skips != [bool(found)] * RANKS:
            local = skips == [r in found for r in range(RANKS)]
            return wrong(
                "with an inf on some ranks, not every rank would skip the step (or one would skip for nothing).",
                _EX3["local" if local else "one rank's"],
                show=show,
            )
    return finish(
        "exact",
        f"every rank skips exactly when some rank found an inf, in all {len(_CASES)} cases",
        show=show,
    )


# -- exercise 4: count the bytes --

COUNT = {"batch": 48, "num_features": 64, "hidden": 64, "depth": 2, "num_classes": 10, "dtype": "bf16"}


def _count_model():
    model = make_mlp(
        COUNT["num_features"], COUNT["num_classes"], hidden=COUNT["hidden"], depth=COUNT["depth"]
    )
    X = torch.zeros(COUNT["batch"], COUNT["num_features"], device=next(model.parameters()).device)
    return model, X


_EX4 = {
    "float32 bytes": "under autocast the saved tensors are bfloat16: 2 bytes each",
    "no weight copies": "autograd also keeps the bfloat16 copies of the weights the backward pass multiplies by",
    "the first weight": "the first layer's input needs no gradient: does its backward need its weight?",
    "counted twice": "a tensor saved by two ops (a ReLU's output, the next Linear's input) is stored once",
    "the biases": "a bias's gradient is a sum of the output's gradient: nothing is saved for it",
}


def _count_slips() -> dict[int, str]:
    """The totals of the usual miscounts, each with its mistake's name."""
    b, f, h, c, depth = (COUNT[k] for k in ("batch", "num_features", "hidden", "num_classes", "depth"))
    acts = b * (f + depth * h)  # elements: the input and each hidden ReLU output, once
    weights = h * h * (depth - 1) + c * h  # the weights behind an input that needs a gradient
    right = 2 * (acts + weights)
    return {
        4 * (acts + weights): "float32 bytes",
        4 * acts: "float32 bytes",
        2 * acts: "no weight copies",
        right + 2 * f * h: "the first weight",
        right + 2 * b * h * depth: "counted twice",
        right + 2 * (depth * h + c): "the biases",
    }


@exercise(4, "Count the bytes autograd keeps", mistakes=[Mistake(*m) for m in _EX4.items()])
def ex4(answer, *, show: bool = True) -> CheckResult:
    """The bytes autograd keeps for backward (beyond the float32 parameters) in one forward pass of :data:`COUNT`'s
    MLP under bfloat16 autocast, measured with ``saved_tensors_hooks``."""
    model, X = _count_model()
    expected = activation_bytes(model, X, COUNT["dtype"]).total
    a = finite_float(answer)
    hint = (
        "list what each layer saves for its backward: its input (if its weight needs a gradient) and its weight "
        "(if its input needs a gradient), in the dtype autocast ran it in"
    )
    slips = {k: v for k, v in _count_slips().items() if k != expected}
    if a is not None and a in slips:
        return wrong(f"`answer` = {answer!r} is not the count yet.", _EX4[slips[int(a)]], show=show)
    return check_value(answer, expected, rtol=0, atol=0, hint=hint, show=show)
