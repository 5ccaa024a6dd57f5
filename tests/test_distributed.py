"""amp_lab.distributed against independent oracles: ``spawn`` (rank order, errors, timeouts, printing, functions
defined here), ``choose_backend`` over a table of facts, the all-reduce's error against float64 sums computed
here from the same draws (and a case counted by hand), and FSDP2 runs: the dtypes read from the tensors, a
skipped step on every rank, float32 losses against one process.

Every rank function is defined inside a test or fixture, so it travels by value (cloudpickle), as a notebook
cell's does.  Spawns share runs through module-scoped fixtures (about 15 s in all on 2 cores)."""

from __future__ import annotations

import math
import os
import threading
import time
from fractions import Fraction

import pytest
import torch

from amp_lab import distributed
from amp_lab.distributed import RankError, choose_backend, spawn

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def _no_process_may_start(monkeypatch):
    """Fail the test if spawn gets as far as making processes (a refusal must come first)."""

    def refuse():
        raise AssertionError("a process was about to start")

    monkeypatch.setattr(distributed, "_context", refuse)


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """Whether process ``pid`` has ended (exited, or a zombie its parent has not reaped yet) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


# -- spawn --


def test_results_come_back_in_rank_order_from_a_closure_with_args():
    offset = 7  # captured: the function is not importable from any module

    def rank_fn(rank, world_size, a, b):
        if rank == 0:
            time.sleep(0.3)  # rank 0 finishes last: its result must still come first
        return (rank, world_size, a + b + offset)

    assert spawn(rank_fn, 3, 1, 2) == [(0, 3, 10), (1, 3, 10), (2, 3, 10)]
    assert spawn(lambda rank, world_size: rank * 10 + world_size, 2) == [2, 12]


def test_the_ranks_form_a_process_group():
    def rank_fn(rank, world_size):
        import torch.distributed as dist

        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        return dist.get_rank(), dist.get_world_size(), dist.get_backend(), t.item()

    assert spawn(rank_fn, 3) == [(r, 3, "gloo", 6.0) for r in range(3)]  # 1 + 2 + 3


def test_what_a_rank_prints_comes_back_prefixed_by_its_rank(capsys):
    def rank_fn(rank, world_size):
        print(f"hello from {rank}")
        print("second line")
        return rank

    assert spawn(rank_fn, 2) == [0, 1]
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "[rank 0] hello from 0",
        "[rank 0] second line",
        "[rank 1] hello from 1",
        "[rank 1] second line",
    ]


def test_a_failing_rank_is_raised_naming_it_and_the_others_are_stopped(tmp_path):
    pid_file = tmp_path / "rank0.pid"

    def rank_fn(rank, world_size):
        import torch.distributed as dist

        if rank == 0:
            pid_file.write_text(str(os.getpid()))
            try:
                dist.barrier()  # waits for rank 1, which never comes
            except Exception:  # (gloo may end it when rank 1 leaves the group)
                pass
            time.sleep(60)  # still busy: only spawn can end this rank
            return "unreachable"
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        raise KeyError("boom")

    t0 = time.monotonic()
    with pytest.raises(RankError) as info:
        spawn(rank_fn, 2, timeout_s=60)
    assert time.monotonic() - t0 < 15, "the other rank was waited for (until the timeout) instead of stopped"
    err = info.value
    assert (err.rank, err.world_size, err.kind) == (1, 2, "KeyError")
    assert "in rank_fn" in err.remote_traceback.splitlines()[-2]  # the rank's own traceback, to the raise
    assert _gone(int(pid_file.read_text())), "rank 0 still runs after spawn raised"


def test_a_rank_that_dies_is_raised_as_its_exit():
    def rank_fn(rank, world_size):
        if rank == 1:
            os._exit(3)
        return rank

    with pytest.raises(RankError) as info:
        spawn(rank_fn, 2, timeout_s=60)
    assert (info.value.rank, info.value.kind) == (1, "exit")


def test_a_timeout_stops_the_ranks_within_about_timeout_s(tmp_path):
    pid_file = tmp_path / "rank.pid"

    def rank_fn(rank, world_size):
        if rank == 1:
            pid_file.write_text(str(os.getpid()))
        time.sleep(60)

    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        spawn(rank_fn, 2, timeout_s=1.0)
    elapsed = time.monotonic() - t0
    assert 1.0 <= elapsed < 6.0, f"TimeoutError after {elapsed:.1f} s for timeout_s=1"
    assert _gone(int(pid_file.read_text()))


@pytest.mark.parametrize(
    "world_size,error",
    [
        (0, ValueError),
        (-1, ValueError),
        (9, ValueError),
        (2.5, TypeError),
        (True, TypeError),
        ("2", TypeError),
    ],
)
def test_bad_world_sizes_are_refused_before_any_process_starts(monkeypatch, world_size, error):
    _no_process_may_start(monkeypatch)
    with pytest.raises(error) as info:
        spawn(lambda rank, world_size: None, world_size)
    if error is ValueError:
        assert not isinstance(info.value, TypeError)  # a bad value, not a bad type


@pytest.mark.parametrize(
    "timeout_s,error",
    [
        (0, ValueError),
        (-1.0, ValueError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        (distributed.MAX_TIMEOUT_S * 2, ValueError),
        (True, TypeError),
        ("1", TypeError),
        (None, TypeError),
    ],
)
def test_bad_timeouts_are_refused_before_any_process_starts(monkeypatch, timeout_s, error):
    _no_process_may_start(monkeypatch)
    with pytest.raises(error):
        spawn(lambda rank, world_size: None, 2, timeout_s=timeout_s)


@pytest.mark.parametrize(
    "what,call",
    [
        ("not callable", lambda: spawn(5, 2)),
        ("takes no arguments", lambda: spawn(lambda: None, 2)),
        ("takes fewer args than given", lambda: spawn(lambda rank, world_size: None, 2, "extra")),
        (
            "an arg no process can receive",
            lambda: spawn(lambda rank, world_size, lock: None, 2, threading.Lock()),
        ),
    ],
)
def test_a_function_the_ranks_could_not_run_is_refused_before_any_process_starts(monkeypatch, what, call):
    _no_process_may_start(monkeypatch)
    with pytest.raises(TypeError):
        call()


def test_backends_are_refused_before_any_process_starts(monkeypatch):
    _no_process_may_start(monkeypatch)
    with pytest.raises(ValueError):
        spawn(lambda rank, world_size: None, 2, backend="mpi")
    if torch.cuda.device_count() < distributed.MAX_WORLD_SIZE:
        with pytest.raises(ValueError):
            spawn(lambda rank, world_size: None, distributed.MAX_WORLD_SIZE, backend="nccl")


def test_rank_device_is_the_cpu_outside_a_group_and_under_gloo():
    assert distributed.rank_device() == torch.device("cpu")
    assert spawn(lambda rank, world_size: distributed.rank_device(), 2) == [torch.device("cpu")] * 2


@pytest.mark.skipif(
    torch.cuda.device_count() < 1 or not torch.distributed.is_nccl_available(), reason="no GPU"
)
def test_nccl_ranks_compute_on_their_own_gpu():
    """On a GPU machine: one rank per GPU under NCCL, an all-reduce of bf16 on the GPU, as on the CPU."""

    def rank_fn(rank, world_size):
        import torch.distributed as dist

        t = torch.full((4,), float(rank + 1), dtype=BF16, device=distributed.rank_device())
        dist.all_reduce(t)
        return str(t.device), dist.get_backend(), t.cpu().tolist()

    n = min(torch.cuda.device_count(), 2)
    total = float(sum(range(1, n + 1)))
    assert spawn(rank_fn, n, backend="nccl") == [(f"cuda:{r}", "nccl", [total] * 4) for r in range(n)]


# facts of real and imagined machines: (backend, world_size, cuda_devices, nccl_available) -> backend or error
BACKEND_FACTS = [
    ("gloo", 2, 0, False, "gloo"),  # a laptop, a CPU-only torch build
    ("gloo", 8, 0, True, "gloo"),
    ("gloo", 2, 8, True, "gloo"),  # gloo is never refused, GPUs or not
    ("nccl", 1, 1, True, "nccl"),  # one H200
    ("nccl", 2, 2, True, "nccl"),
    ("nccl", 4, 8, True, "nccl"),  # an 8-GPU node, half of it
    ("nccl", 8, 8, True, "nccl"),
    ("nccl", 2, 1, True, ValueError),  # one GPU for two ranks
    ("nccl", 8, 4, True, ValueError),
    ("nccl", 1, 0, True, ValueError),  # no GPU at all
    ("nccl", 2, 0, False, ValueError),  # a CPU-only build: no NCCL
    ("nccl", 2, 8, False, ValueError),  # GPUs, but a torch without NCCL (Windows, macOS)
    ("mpi", 2, 2, True, ValueError),
    ("NCCL ", 2, 2, True, ValueError),
    ("gloo", 0, 0, True, ValueError),
    ("gloo", distributed.MAX_WORLD_SIZE + 1, 0, True, ValueError),
    ("nccl", 2, -1, True, ValueError),
    ("gloo", 2.0, 0, True, TypeError),
    ("nccl", 2, 2, "yes", TypeError),
]


@pytest.mark.parametrize("backend,world_size,cuda_devices,nccl,expected", BACKEND_FACTS)
def test_choose_backend_is_a_function_of_the_facts(backend, world_size, cuda_devices, nccl, expected):
    if isinstance(expected, str):
        assert choose_backend(backend, world_size, cuda_devices, nccl) == expected
    else:
        with pytest.raises(expected):
            choose_backend(backend, world_size, cuda_devices, nccl)


# -- the all-reduce's error --


def _relative_error(reduced: torch.Tensor, exact: torch.Tensor) -> float:
    return float((reduced.double() - exact).abs().sum() / exact.abs().sum())


def _draws(world_size: int, numel: int, seed: int) -> torch.Tensor:
    """The ranks' tensors as allreduce_error documents them: standard normal float64 draws, seeded."""
    return torch.randn(world_size, numel, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("dtype", [BF16, FP16, FP32])
def test_allreduce_error_on_two_ranks_is_one_rounded_addition(dtype):
    """Two ranks: the reduced value is a + b rounded once to ``dtype`` (computed here in float32, which holds the
    sum of two bf16 or fp16 values exactly unless their exponents are over 16 apart), against the exact float64
    sum of the same rounded inputs."""
    numel, seed = 64, 3
    a, b = _draws(2, numel, seed).to(dtype)
    exact = a.double() + b.double()
    expected = _relative_error((a.float() + b.float()).to(dtype), exact)
    assert distributed.allreduce_error(dtype, 2, numel=numel, seed=seed) == expected
    if dtype != FP32:
        assert expected > 0  # the case really rounds


def test_allreduce_error_on_three_ranks_lies_among_the_possible_orders():
    """Three ranks: each element is some order's ((x + y) + z), each sum rounded to bf16; the error of the sum
    of the elements lies between the sums of each element's best and worst order."""
    numel, seed = 256, 5
    x = _draws(3, numel, seed).to(BF16).float()
    exact = x.double().sum(0)
    orders = [
        ((x[i] + x[j]).to(BF16).float() + x[k]).to(BF16) for i, j, k in ((0, 1, 2), (0, 2, 1), (1, 2, 0))
    ]
    per_order = torch.stack([(o.double() - exact).abs() for o in orders])
    low, high = (
        float(v.sum() / exact.abs().sum()) for v in (per_order.min(0).values, per_order.max(0).values)
    )
    error = distributed.allreduce_error("bf16", 3, numel=numel, seed=seed)
    assert low <= error <= high and high > 0


def test_allreduce_rank_on_values_counted_by_hand():
    """rank 0 holds 1, 3, 1, 1, 1 and rank 1 holds 2**-8, 2**-7, 2**-11, 3 * 2**-9, 3 * 2**-8.  In units
    u = 2**-11 the exact sums are 7 + 61u.  bfloat16 (7 fraction bits, ulp 2**-7 = 16u at 1 and 32u at 3): 1 + 8u
    is a tie, to even 1 (error 8u); 3 + 16u a tie, to even 3 (16u); 1 + u rounds down (u); 1 + 12u rounds up to
    1 + 16u (4u); 1 + 24u a tie between 1 + 16u (odd) and 1 + 32u (even), to 1 + 32u (8u): 37u in all.  float16
    (ulp 2u at 1): only 1 + u rounds, a tie to even 1 (u).  float32 holds every sum."""
    values = torch.tensor(
        [[1.0, 3.0, 1.0, 1.0, 1.0], [2**-8, 2**-7, 2**-11, 3 * 2**-9, 3 * 2**-8]], dtype=torch.float64
    )

    def rank_fn(rank, world_size):
        torch.randn = lambda *args, **kwargs: (
            values.clone()
        )  # the draws allreduce_rank makes, in this process only
        return distributed.allreduce_rank(rank, world_size, (BF16, FP16, FP32), 5, 0)

    exact = Fraction(7) + Fraction(61, 2**11)
    expected = {
        "bfloat16": float(Fraction(37, 2**11) / exact),  # = 37/14397
        "float16": float(Fraction(1, 2**11) / exact),
        "float32": 0.0,
    }
    assert spawn(rank_fn, 2) == [expected, expected]


@pytest.fixture(scope="module")
def allreduce_table():
    return distributed.allreduce_errors(("bf16", "fp16", "fp32"), (2, 8), numel=4096, seed=0)


def test_allreduce_error_by_dtype_and_ranks(allreduce_table):
    """float32's error is a few float32 roundings (2**-24 each, about 6e-8: below 1e-6 at 8 ranks); bfloat16
    (8 significant bits) errs more than float16 (11), which errs more than float32; bfloat16's grows with the
    ranks, each rank's partial sum rounded again."""
    e = allreduce_table.errors
    assert allreduce_table.world_sizes == (2, 8) and allreduce_table.numel == 4096
    for i in range(2):
        assert 0 < e["float32"][i] < 1e-6
        assert e["bfloat16"][i] > e["float16"][i] > e["float32"][i]
    assert e["bfloat16"][1] > e["bfloat16"][0]
    reading = allreduce_table.reading()
    assert reading.codes == ("distributed.error_grows", "distributed.fp32_reduce")
    assert reading.facts["low"] == 2 and reading.facts["high"] == 8


@pytest.mark.parametrize("world_size", [1, 3])
def test_draw_data_parallel_writes_each_dtype_where_it_enters(world_size):
    """One box per rank for its slice and one for its forward and backward (in the compute dtype), an arrow label
    per rank and one all-reduce box (in the reduce dtype), one box for the update."""
    import matplotlib.pyplot as plt

    ax = distributed.draw_data_parallel(world_size, compute_dtype="fp16", reduce_dtype="bf16")
    texts = [t.get_text() for t in ax.texts if t.get_text()]  # the arrows are empty annotations
    plt.close(ax.figure)
    assert len(texts) == 3 * world_size + 2
    assert sum("float16" in t and "bfloat16" not in t for t in texts) == world_size
    assert sum("bfloat16" in t for t in texts) == world_size + 1


@pytest.mark.parametrize(
    "kwargs,error",
    [
        (dict(world_size=0), ValueError),
        (dict(world_size=distributed.MAX_WORLD_SIZE + 1), ValueError),
        (dict(world_size="3"), TypeError),
        (dict(compute_dtype="fp64"), ValueError),
        (dict(reduce_dtype=torch.int8), ValueError),
    ],
)
def test_draw_data_parallel_refuses(kwargs, error):
    with pytest.raises(error):
        distributed.draw_data_parallel(**kwargs)


# -- FSDP2 --

FSDP_SMALL = dict(batch_size=64, hidden=9, depth=2)


@pytest.fixture(scope="module")
def bf16_run():
    return distributed.fsdp_train("bf16", "fp32", 2, 2, **FSDP_SMALL)


@pytest.fixture(scope="module")
def fp16_run():
    """An inf put into rank 1's gradients at step 1 of 3 (a small initial scale, so no step overflows by itself)."""
    return distributed.fsdp_train("fp16", "fp32", 2, 3, inject_inf={1: 1}, init_scale=2.0**10, **FSDP_SMALL)


def test_fsdp_dtypes_bf16_compute_fp32_reduce(bf16_run):
    assert bf16_run.dtypes == {"master": FP32, "compute": BF16, "reduce": FP32}
    assert bf16_run.scales == [[None, None], [None, None]] and bf16_run.skipped == [[False, False]] * 2
    assert bf16_run.reading().codes == ("distributed.dtypes",)


def test_fsdp_dtypes_fp16_compute_fp32_reduce(fp16_run):
    assert fp16_run.dtypes == {"master": FP32, "compute": FP16, "reduce": FP32}


def test_fsdp_reduce_dtype_is_read_from_the_tensors():
    """bf16/bf16 reduces in bf16; and with reduce_dtype=None, FSDP2's documented default (reduce in the compute
    dtype), the policy names no reduce dtype at all, yet bf16 is read: the dtype comes from the tensors."""
    args = (
        1,
        {},
        1e-3,
        64,
        9,
        2,
        0,
        2.0**16,
    )  # steps, inject_inf, lr, batch_size, hidden, depth, seed, init_scale

    def rank_fn(rank, world_size):
        return [
            distributed.fsdp_rank(rank, world_size, BF16, reduce, *args)["dtypes"] for reduce in (BF16, None)
        ]

    both = spawn(rank_fn, 2)
    assert both[0] == both[1] == [{"master": FP32, "compute": BF16, "reduce": BF16}] * 2


def test_an_inf_on_one_rank_skips_that_step_on_every_rank(fp16_run):
    assert fp16_run.skipped == [[False, True, False], [False, True, False]]
    assert fp16_run.scales[0] == fp16_run.scales[1], "the ranks' scales differ"
    assert fp16_run.scales[0] == [2.0**10, 2.0**10, 2.0**9]  # the scale each step used: halved after step 1
    assert fp16_run.reading().codes == ("distributed.dtypes", "distributed.ranks_agree")


@pytest.fixture(scope="module")
def fp32_runs():
    steps, kw = 20, dict(batch_size=64, hidden=16, depth=2)
    return distributed.fsdp_train("fp32", "fp32", 2, steps, **kw), distributed.single_process_losses(
        steps, **kw
    )


def test_fsdp_fp32_losses_match_one_process_on_the_same_batches(fp32_runs):
    """The same model, batches and Adam: the losses differ only by float32 rounding, the mean of two half-batch
    means against one mean, and the reduce-scatter's sum of the two gradient halves against one backward over the
    batch (measured: at most 1.2e-7 relative over 20 steps, here and on other kernels and thread counts).  The
    bound, 1e-5 (80 float32 epsilons), leaves room for Adam to carry those differences on; a rank training on
    the wrong slice, or summing where it should average, is off by 1e-3 or more."""
    run, single = fp32_runs
    assert run.dtypes == {"master": FP32, "compute": FP32, "reduce": FP32}
    assert len(run.losses) == len(single) == 20
    worst = max(abs(a - b) / b for a, b in zip(run.losses, single, strict=True))
    assert worst < 1e-5, f"FSDP2 and one process differ by {worst:.2e} (relative)"


def test_fsdp_losses_decrease(fp32_runs):
    losses = fp32_runs[0].losses
    assert sum(losses[-5:]) < sum(losses[:5]) and losses[-1] < losses[0]


@pytest.mark.parametrize(
    "what,kwargs",
    [
        ("inject_inf without fp16", dict(param_dtype="bf16", inject_inf={0: 0})),
        ("inject step past the last", dict(param_dtype="fp16", steps=2, inject_inf={2: 0})),
        ("inject step negative", dict(param_dtype="fp16", inject_inf={-1: 0})),
        ("inject rank out of range", dict(param_dtype="fp16", inject_inf={0: 2})),
        ("inject_inf not a dict", dict(param_dtype="fp16", inject_inf=[(0, 0)])),
        ("batch_size not a multiple", dict(batch_size=63)),
        ("world_size 1", dict(world_size=1)),
        ("world_size 9", dict(world_size=9)),
        ("steps 0", dict(steps=0)),
        ("param_dtype fp64", dict(param_dtype="fp64")),
        ("reduce_dtype int", dict(reduce_dtype=torch.int32)),
    ],
)
def test_fsdp_train_refuses_bad_inputs_before_spawning(monkeypatch, what, kwargs):
    def no_spawn(*args, **kwargs):
        raise AssertionError("spawn was called")

    monkeypatch.setattr(distributed, "spawn", no_spawn)
    call = dict(param_dtype="fp32", reduce_dtype="fp32", world_size=2, steps=3, batch_size=64) | kwargs
    with pytest.raises((ValueError, TypeError)):
        distributed.fsdp_train(**call)
