"""amp_lab.exercises.nb10 (10_distributed_mixed_precision): the solutions pass, unfilled answers are not
attempted, and every common wrong answer gets its hint.  Exercises 2 and 3 run the learner's function on real
gloo ranks (amp_lab.distributed.spawn); the oracles are torch itself: DDP's own float32 all-reduce, the ZeRO
formulas recomputed here, and a byte count made by hand."""

from __future__ import annotations

import torch
import torch.distributed as dist

from amp_lab.exercises import nb10
from tests.exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check


def test_ex1_which_setups_fit():
    p, n, gb = nb10.FIT["parameters"], nb10.FIT["ranks"], nb10.FIT["gb_per_rank"] * 1e9
    per_parameter = {"DDP": 16, "ZeRO-1": 4 + 12 / n, "ZeRO-2": 2 + 14 / n, "ZeRO-3": 16 / n}  # by hand
    per_parameter["FSDP2 (fully_shard)"] = 16 / n
    fits = {s for s, b in per_parameter.items() if p * b <= gb}
    assert fits == {"ZeRO-2", "ZeRO-3", "FSDP2 (fully_shard)"}
    assert_passes(nb10.ex1, fits)
    assert_passes(nb10.ex1, [s.lower() for s in fits])
    assert_not_attempted(nb10.ex1, None)
    feed_mistake(nb10.ex1, "ZeRO-1", fits | {"ZeRO-1"})
    feed_mistake(nb10.ex1, "DDP", fits | {"DDP"})
    feed_mistake(nb10.ex1, "ZeRO-2", fits - {"ZeRO-2"})
    feed_mistake(nb10.ex1, "ZeRO-3", {"ZeRO-2", "FSDP2 (fully_shard)"})
    feed_mistake(nb10.ex1, "FSDP2 (fully_shard)", {"ZeRO-2", "ZeRO-3"})
    for wrong in ("ZeRO-3", 3, set(nb10.SETUPS)):
        assert run_check(nb10.ex1, wrong).status == "not yet"


def bf16_hook(process_group, bucket):
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(process_group.size())
    work = dist.all_reduce(compressed, group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0].to(buffer.dtype))


def divide_after(process_group, bucket):  # the mean computed after the sum: right too
    buffer = bucket.buffer()
    work = dist.all_reduce(buffer.to(torch.bfloat16), group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0].to(buffer.dtype) / process_group.size())


def fp32_hook(process_group, bucket):
    buffer = bucket.buffer().div_(process_group.size())
    return (
        dist.all_reduce(buffer, group=process_group, async_op=True).get_future().then(lambda f: f.value()[0])
    )


def fp16_hook(process_group, bucket):
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(process_group.size())
    work = dist.all_reduce(compressed, group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0].to(buffer.dtype))


def summed_hook(process_group, bucket):
    buffer = bucket.buffer()
    work = dist.all_reduce(buffer.to(torch.bfloat16), group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0].to(buffer.dtype))


def halved_hook(process_group, bucket):  # a hard-coded 2 ranks
    buffer = bucket.buffer()
    work = dist.all_reduce(buffer.to(torch.bfloat16).div_(2), group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0].to(buffer.dtype))


def local_hook(process_group, bucket):  # no communication: each rank keeps its own gradient
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def tensor_hook(process_group, bucket):
    return bucket.buffer()


def test_ex2_bf16_compression_hook():
    for hook in (bf16_hook, divide_after):
        result = assert_passes(nb10.ex2, hook)
        assert 0 < result.details["error"] < 2**-6  # bfloat16's roundings, against DDP's float32 all-reduce
    assert_not_attempted(nb10.ex2, None)
    feed_mistake(nb10.ex2, "no compression", fp32_hook)
    feed_mistake(nb10.ex2, "float16", fp16_hook)
    feed_mistake(nb10.ex2, "a sum", summed_hook)
    feed_mistake(nb10.ex2, "ranks disagree", local_hook)
    feed_mistake(nb10.ex2, "not a future", tensor_hook)
    feed_mistake(nb10.ex2, "not a future", 42)
    assert run_check(nb10.ex2, halved_hook).status == "not yet"


def max_flag(found_inf):
    dist.all_reduce(found_inf, op=dist.ReduceOp.MAX)
    return found_inf


def sum_in_place(found_inf):
    dist.all_reduce(found_inf)


def local_flag(found_inf):
    return found_inf


def rank0_flag(found_inf):
    dist.broadcast(found_inf, 0)
    return found_inf


def test_ex3_skip_everywhere():
    assert_passes(nb10.ex3, max_flag)
    assert_passes(nb10.ex3, sum_in_place)
    assert_not_attempted(nb10.ex3, None)
    feed_mistake(nb10.ex3, "local", local_flag)
    feed_mistake(nb10.ex3, "one rank's", rank0_flag)
    assert run_check(nb10.ex3, lambda f: 1 / 0).status == "not yet"


def test_ex4_count_the_bytes():
    b, f, h, c = (nb10.COUNT[k] for k in ("batch", "num_features", "hidden", "num_classes"))
    assert nb10.COUNT["depth"] == 2 and nb10.COUNT["dtype"] == "bf16"
    activations = 2 * b * (f + h + h)  # bf16: the input and the two ReLU outputs, each stored once
    copies = 2 * (h * h + c * h)  # bf16 copies of the second and third weights
    right = activations + copies
    assert_passes(nb10.ex4, right)
    assert_not_attempted(nb10.ex4, None)
    feed_mistake(nb10.ex4, "float32 bytes", 2 * right)
    feed_mistake(nb10.ex4, "no weight copies", activations)
    feed_mistake(nb10.ex4, "the first weight", right + 2 * f * h)
    feed_mistake(nb10.ex4, "counted twice", right + 2 * b * h * 2)
    feed_mistake(nb10.ex4, "the biases", right + 2 * (h + h + c))
    for wrong in (right + 1, "27904", -right):
        assert run_check(nb10.ex4, wrong).status == "not yet"


def test_the_notebook_states_the_sizes_the_checks_use():
    import nbformat

    from tests.test_exercise_cells import ROOT

    nb = nbformat.read(ROOT / "notebooks" / "10_distributed_mixed_precision.ipynb", as_version=4)
    text = " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    f, h, c = nb10.COUNT["num_features"], nb10.COUNT["hidden"], nb10.COUNT["num_classes"]
    assert f"make_mlp({f}, {c}, hidden={h}, depth={nb10.COUNT['depth']})" in text
    assert f"on a batch of {nb10.COUNT['batch']}" in text
    assert f"{nb10.FIT['parameters'] / 1e9:g} billion parameters" in text
    assert f"on {nb10.FIT['ranks']} GPUs of {nb10.FIT['gb_per_rank']} GB" in text
    assert all(f'`"{s}"`' in text for s in nb10.SETUPS)
