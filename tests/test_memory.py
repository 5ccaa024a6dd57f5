"""amp_lab.memory against hand counts and the tensors themselves: the bytes autograd saves for a small model
(float32 and autocast), each training setup's bytes per parameter beside the formulas, and FSDP2's shard of
them on 2 ranks."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from amp_lab import distributed, memory, models

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def tiny():
    """Linear(4, 3), ReLU, Linear(3, 2): 12 + 3 + 6 + 2 = 23 parameters."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


X = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))


def test_activation_bytes_float32_by_hand():
    """The first Linear keeps x (5 x 4 x 4 B = 80 B) for its weight's gradient, and not its weight (x needs no
    gradient); ReLU keeps its output (5 x 3 x 4 B = 60 B), which the second Linear keeps too (counted once); the
    second Linear keeps its weight for the ReLU output's gradient: the parameter itself, not counted in total."""
    r = memory.activation_bytes(tiny(), X)
    assert (r.activations, r.parameter_copies, r.cast_bytes, r.total, r.dtype) == (140, 0, 0, 140, None)
    rows = sorted((s.nbytes, s.dtype, s.kind) for s in r.saved)
    assert rows == [(24, FP32, "parameter"), (60, FP32, "activation"), (80, FP32, "activation")]


def test_a_storage_saved_by_two_ops_is_counted_once():
    """The oracle: every tensor autograd packs, in the order it packs them, seen here with the same hooks."""
    model, packed = tiny(), []

    def pack(t):
        packed.append((t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(X)
    storages = dict(packed)
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert len(packed) > len(storages), "no storage was packed twice: the case tests nothing"
    r = memory.activation_bytes(model, X)
    assert r.activations == sum(n for ptr, n in storages.items() if ptr not in parameters)
    assert len(r.saved) == len(storages)


@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_activation_bytes_under_autocast_by_hand(dtype):
    """Under autocast each Linear casts its input, weight and bias to 2-byte floats: x's copy (5 x 4 x 2 = 40 B)
    and the ReLU output (5 x 3 x 2 = 30 B) are kept, with the second weight's copy (2 x 3 x 2 = 12 B, for the ReLU
    output's gradient); every weight and bias was cast once, 23 parameters x 2 B = 46 B."""
    r = memory.activation_bytes(tiny(), X, dtype)
    assert (r.activations, r.parameter_copies, r.cast_bytes, r.total, r.dtype) == (70, 12, 46, 82, dtype)
    rows = sorted((s.nbytes, s.dtype, s.kind) for s in r.saved)
    assert rows == [(12, dtype, "parameter copy"), (30, dtype, "activation"), (40, dtype, "activation")]
    assert (
        memory.activation_bytes(tiny(), X, "bf16" if dtype == BF16 else "fp16") == r
    )  # names read as dtypes


def test_the_distributed_names_are_memorys():
    """10 imports them from amp_lab.distributed: the very same functions (fuzzed once, as memory's)."""
    assert distributed.activation_bytes is memory.activation_bytes
    assert distributed.activation_saving is memory.activation_saving
    assert distributed.bytes_per_parameter is memory.bytes_per_parameter


@pytest.mark.parametrize(
    "fp32_batch,amp_batch,outcome",
    [
        (5, 5, "memory.between"),  # 14 x 5 + 12 = 82 B against 28 x 5 = 140 B: 0.59
        (1000, 1000, "memory.half"),  # 14012 B against 28000 B: 0.50, the weight copy nearly nothing
        (5, 10, "memory.same"),  # 152 B against 140 B: 1.09
        (5, 2, "memory.less"),  # 40 B against 140 B: 0.29
    ],
)
def test_activation_saving_reads_the_two_totals(fp32_batch, amp_batch, outcome):
    """By the hand count above, a batch of n keeps 28n B in float32 (x and the ReLU output) and 14n + 12 B under
    bf16 autocast (their 2-byte copies and the second weight's): the ratio of the totals picks the outcome."""
    fp32 = memory.activation_bytes(tiny(), torch.randn(fp32_batch, 4))
    amp = memory.activation_bytes(tiny(), torch.randn(amp_batch, 4), "bf16")
    assert (fp32.total, amp.total) == (28 * fp32_batch, 14 * amp_batch + 12)
    reading = memory.activation_saving(fp32, amp)
    assert reading.codes == (outcome, "memory.copies")
    assert reading.facts["ratio"] == f"{(14 * amp_batch + 12) / (28 * fp32_batch):.2f}"
    assert reading.facts["activations"] == f"{14 * amp_batch / (28 * fp32_batch):.2f}"
    assert reading.facts["dtype"] == "bfloat16" and reading.facts["copies"] == "12 B"


def test_activation_saving_refuses():
    fp32, amp = memory.activation_bytes(tiny(), X), memory.activation_bytes(tiny(), X, "fp16")
    nothing = memory.activation_bytes(nn.Sequential(nn.ReLU()), X)  # no parameter: x needs no gradient
    assert nothing.total == 0
    for args, error in [
        ((amp, fp32), ValueError),  # swapped
        ((fp32, fp32), ValueError),
        ((nothing, amp), ValueError),  # nothing kept in float32: no ratio
        ((140, amp), TypeError),
        ((fp32, None), TypeError),
    ]:
        with pytest.raises(error):
            memory.activation_saving(*args)


@pytest.mark.parametrize(
    "what,call,error",
    [
        ("model not a module", lambda: memory.activation_bytes(lambda x: x, X), TypeError),
        ("x not a tensor", lambda: memory.activation_bytes(tiny(), [[1.0] * 4] * 5), TypeError),
        (
            "x of integers",
            lambda: memory.activation_bytes(tiny(), torch.ones(5, 4, dtype=torch.int64)),
            ValueError,
        ),
        (
            "x of too many elements (an expanded view: tiny storage)",
            lambda: memory.activation_bytes(
                tiny(), torch.zeros(1, 4).expand(memory.MAX_INPUT_NUMEL // 4 + 1, 4)
            ),
            ValueError,
        ),
        ("dtype fp32", lambda: memory.activation_bytes(tiny(), X, "fp32"), ValueError),
        ("dtype fp8", lambda: memory.activation_bytes(tiny(), X, torch.float8_e4m3fn), ValueError),
        ("dtype not a dtype", lambda: memory.activation_bytes(tiny(), X, 16), TypeError),
        ("x on another device", lambda: memory.activation_bytes(tiny(), X.to("meta")), ValueError),
        ("model on another device", lambda: memory.activation_bytes(tiny().to("meta"), X), ValueError),
        ("x of the wrong shape", lambda: memory.activation_bytes(tiny(), torch.ones(5, 3)), ValueError),
        ("x of another float dtype", lambda: memory.activation_bytes(tiny(), X.double()), ValueError),
    ],
)
def test_activation_bytes_refuses(what, call, error):
    with pytest.raises(error) as info:
        call()
    if error is ValueError:
        assert not isinstance(info.value, TypeError), "a bad value reported as a bad type"
    assert info.traceback[-1].path.parent.name == "amp_lab", "raised inside torch, not by amp_lab"


# -- bytes per parameter --


@pytest.fixture(scope="module")
def table():
    return memory.bytes_per_parameter(8)


def test_measured_rows_equal_the_formulas(table):
    """float32 Adam: 4 (weight) + 4 (gradient) + 8 (two moments) = 16; autocast's cast copies: 2; bf16 weights
    and gradients with float32 master weights and Adam on them: 2 + 2 + 4 + 8 = 16."""
    fp32, autocast, copies, low = table.rows[:4]
    assert (fp32.measured, fp32.formula) == (16, 16)
    assert (autocast.measured, autocast.formula) == (16, 16)
    assert (copies.measured, copies.formula) == (2, 2)
    assert (low.measured, low.formula) == (16, 16)


def test_the_fp32_row_by_hand_from_the_tensors(table):
    """The first row counted here: the course's MLP after one Adam step, each tensor's bytes."""
    model = models.make_mlp()
    opt = torch.optim.Adam(model.parameters())
    X, y = torch.randn(8, 64), torch.arange(8) % 10
    nn.functional.cross_entropy(model(X), y).backward()
    opt.step()
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    held = [*params, *(p.grad for p in params)]
    held += [s[k] for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]
    assert table.num_parameters == n == 64 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    assert table.rows[0].measured == sum(t.nbytes for t in held) / n


@pytest.mark.parametrize("n", [1, 2, 3, 8, 64, memory.MAX_WORLD_SIZE])
def test_zero_rows_follow_the_formulas(n):
    """ZeRO-1 shards the 12 bytes of master weights and moments, ZeRO-2 the gradients' 2 too, ZeRO-3 all 16."""
    t = memory.bytes_per_parameter(n, hidden=4, depth=1)
    zero1, zero2, zero3 = t.rows[4:7]
    assert t.world_size == n and len(t.rows) == 7
    assert zero1.formula == pytest.approx(2 + 2 + 12 / n, rel=1e-15)
    assert zero2.formula == pytest.approx(2 + 14 / n, rel=1e-15)
    assert zero3.formula == pytest.approx(16 / n, rel=1e-15)
    assert (zero1.measured, zero2.measured, zero3.measured) == (None, None, None)  # not run in one process


@pytest.mark.parametrize("dtype,hidden,depth", [(FP16, 5, 1), (BF16, 3, 3)])
def test_the_measured_rows_hold_for_other_models_and_dtypes(dtype, hidden, depth):
    t = memory.bytes_per_parameter(2, dtype=dtype, hidden=hidden, depth=depth)
    assert [r.measured for r in t.rows[:4]] == [16, 16, 2, 16]
    assert t.num_parameters == sum(
        p.numel() for p in models.make_mlp(hidden=hidden, depth=depth).parameters()
    )


@pytest.fixture(scope="module")
def fsdp_run():
    return distributed.fsdp_train("bf16", "fp32", 2, 1, batch_size=64, hidden=9, depth=2)


def test_the_fsdp_row_is_about_16_over_the_ranks(fsdp_run):
    """FSDP2 keeps float32 shards of the weights, their gradients and Adam's moments: 16/2 per parameter on each
    of 2 ranks, but it splits each parameter along dim 0 into chunks of ceil(d/2) rows, so an odd d (9 here)
    gives rank 0 one row more.  The row reads the fuller rank: counted here from the shapes."""
    shapes = [p.shape for p in models.make_mlp(hidden=9, depth=2).parameters()]
    n = sum(math.prod(s) for s in shapes)
    rank0 = sum(math.ceil(s[0] / 2) * math.prod(s[1:]) for s in shapes)
    rank1 = n - rank0
    assert fsdp_run.num_parameters == n and rank0 > n / 2
    assert [m["parameters"] for m in fsdp_run.memory] == [4 * rank0, 4 * rank1]
    assert [m["optimizer"] for m in fsdp_run.memory] == [8 * rank0, 8 * rank1]
    row = memory.bytes_per_parameter(2, fsdp=fsdp_run).rows[-1]
    assert row.formula == 8
    assert row.measured == 16 * rank0 / n
    assert 8 < row.measured < 8 * 1.15  # about 16/2: 9 rows split 5 + 4


@pytest.mark.parametrize(
    "kwargs,error",
    [
        (dict(world_size=0), ValueError),
        (dict(world_size=memory.MAX_WORLD_SIZE + 1), ValueError),
        (dict(dtype="fp32"), ValueError),
        (dict(hidden=0), ValueError),
        (dict(depth=2.0), TypeError),
        (dict(fsdp={"memory": []}), TypeError),
        (dict(fsdp=object()), TypeError),
    ],
)
def test_bytes_per_parameter_refuses(kwargs, error):
    with pytest.raises(error):
        memory.bytes_per_parameter(**kwargs)
