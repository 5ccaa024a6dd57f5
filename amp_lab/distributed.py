"""Mixed precision across processes (10): ``spawn`` runs a function on several ranks of torch.distributed (gloo
on 127.0.0.1, or NCCL), and the measurements of the notebook: the error of an all-reduce in low precision
(``allreduce_error``), FSDP2 training under a ``MixedPrecisionPolicy`` with the dtypes read from the tensors
(``fsdp_train``), and the memory that activations and each setup's parameters take (``activation_bytes``,
``bytes_per_parameter``, from :mod:`amp_lab.memory`).

Each measurement is a rank function (``allreduce_rank``, ``fsdp_rank``) that runs wherever a process group is
initialised: in ``spawn``'s processes, or under ``torchrun`` (``scripts/distributed_check.py``)."""

from __future__ import annotations

import contextlib
import inspect
import io
import math
import multiprocessing
import os
import queue as queue_module
import socket
import time
import traceback
import warnings
from dataclasses import dataclass, field
from datetime import timedelta

import cloudpickle
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.utils._python_dispatch import TorchDispatchMode

from ._checks import (
    ArgumentTypeError,
    check_axes,
    check_bool,
    check_callable,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_int_sequence,
    check_seed,
)
from .data import load_digits
from .dtypes import dtype_name, parse_dtype
from .memory import activation_bytes, activation_saving, bytes_per_parameter  # noqa: F401  (10 imports them here)
from .models import make_mlp
from .text import Reading, format_ratio

LOOPBACK = "127.0.0.1"  # every rank listens on and talks to this machine only
MAX_WORLD_SIZE = 8  # processes spawn starts: each imports torch and holds its own copy of the model
MAX_TIMEOUT_S = 600.0
DEFAULT_TIMEOUT_S = 120.0
MAX_NUMEL = 2**22  # allreduce_error's tensor per rank
MAX_STEPS = 500  # fsdp_train
FLOATS = (torch.float32, torch.bfloat16, torch.float16)


class RankError(RuntimeError):
    """A rank of :func:`spawn` raised (or died): ``rank``, ``world_size``, the exception's ``kind`` (its class
    name, or ``"exit"``) and ``message``, and the rank's ``remote_traceback``."""

    def __init__(self, rank: int, world_size: int, kind: str, message: str, remote_traceback: str = ""):
        self.rank, self.world_size, self.kind, self.message = rank, world_size, kind, message
        self.remote_traceback = remote_traceback
        text = f"rank {rank} of {world_size} " + (message if kind == "exit" else f"raised {kind}: {message}")
        super().__init__(
            f"{text}\n\nthe traceback on rank {rank}:\n{remote_traceback}" if remote_traceback else text
        )


# -- where the ranks run --


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS), which gloo is told to
    use so that its connections stay on 127.0.0.1; None where it cannot be named."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):  # Windows has no if_nameindex in some builds
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


def choose_backend(backend: str, world_size: int, cuda_devices: int, nccl_available: bool) -> str:
    """The backend ``spawn`` uses: ``"gloo"`` (CPU processes, any machine), or ``"nccl"`` when asked for and
    every rank has a GPU of its own (a pure function of those facts)."""
    backend = check_choice("backend", backend, ("gloo", "nccl"))
    world_size = check_int("world_size", world_size, minimum=1, maximum=MAX_WORLD_SIZE)
    cuda_devices = check_int("cuda_devices", cuda_devices, minimum=0)
    nccl_available = check_bool("nccl_available", nccl_available)
    if backend == "nccl" and not (nccl_available and cuda_devices >= world_size):
        have = f"{cuda_devices} CUDA device(s)" + (
            "" if nccl_available else " and no NCCL in this torch build"
        )
        raise ValueError(
            f"backend='nccl' needs one GPU per rank ({world_size}); this machine has {have}: use backend='gloo'"
        )
    return backend


def rank_device() -> torch.device:
    """The device a rank computes on: its own GPU under NCCL (``LOCAL_RANK``), else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return torch.device("cpu")


def _context():
    """A forkserver (one clean process, torch imported once, forked per rank) where the platform has one."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([__name__, "sklearn.datasets", "torch._dynamo"])  # each rank's imports
        return ctx
    return multiprocessing.get_context("spawn")


def _rank_main(payload: bytes, rank: int, world_size: int, port: int, backend: str, results) -> None:
    """One rank: join the process group through the caller's store, run the function, send back its result
    (pickled here, so no tensor is shared with a process that is about to exit) and what it printed."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    os.environ.update(MASTER_ADDR=LOOPBACK, MASTER_PORT=str(port))
    if backend == "gloo":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))  # the ranks share the cores
        if iface := loopback_interface():
            os.environ["GLOO_SOCKET_IFNAME"] = iface
    printed = io.StringIO()
    try:
        fn, args = cloudpickle.loads(payload)
        if backend == "nccl":
            torch.cuda.set_device(rank)
        store = dist.TCPStore(LOOPBACK, port, is_master=False, timeout=timedelta(seconds=60))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
        with contextlib.redirect_stdout(printed):
            result = fn(rank, world_size, *args)
        message = ("ok", rank, cloudpickle.dumps(result), printed.getvalue())
        with contextlib.suppress(Exception):  # the ranks tear the group down together (see distributed_check)
            dist.barrier()
    except BaseException as exc:  # sent to the caller, which raises it with the rank named
        message = ("error", rank, type(exc).__name__, str(exc), traceback.format_exc(), printed.getvalue())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    results.put(message)


def _loopback_store():
    """The ranks' rendezvous: a TCPStore listening on 127.0.0.1 only, on a free port (a socket bound there and
    handed over to the store, which then owns it; where a platform cannot hand one over, the store binds)."""
    listener = socket.socket()
    try:
        listener.bind((LOOPBACK, 0))
        listener.listen(MAX_WORLD_SIZE * 4)
        port, fd = listener.getsockname()[1], listener.fileno()
        store = dist.TCPStore(LOOPBACK, port, is_master=True, wait_for_workers=False, master_listen_fd=fd)
    except (RuntimeError, TypeError, ValueError, OSError):
        listener.close()
        return dist.TCPStore(LOOPBACK, 0, is_master=True, wait_for_workers=False)
    listener.detach()  # the store closes the socket when it goes
    return store


def spawn(fn, world_size: int, *args, timeout_s: float = DEFAULT_TIMEOUT_S, backend: str = "gloo") -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes (at most :data:`MAX_WORLD_SIZE`), each a
    rank of a torch.distributed process group (gloo on 127.0.0.1; ``backend="nccl"`` when every rank has a
    GPU), and return their results in rank order.  ``fn`` may be defined in a notebook cell (it travels by
    value, with cloudpickle).  A rank that raises is raised here as :class:`RankError` naming the rank, the
    other ranks stopped; ranks not done after ``timeout_s`` seconds are stopped and ``TimeoutError`` raised.
    What a rank prints is printed here after it, prefixed by its rank.  From a script (not a notebook), call it
    under ``if __name__ == "__main__":``: each rank's process imports the script, as multiprocessing's do."""
    check_callable("fn", fn)
    try:  # a function that cannot take (rank, world_size, *args) is refused here, not in every rank
        inspect.signature(fn).bind(0, 1, *args)
    except ValueError:  # a builtin without a signature: its ranks will say
        pass
    except TypeError as exc:
        raise ArgumentTypeError(f"fn must take (rank, world_size, *args), as given: {exc}") from None
    world_size = _check_world_size("world_size", world_size)
    timeout_s = check_float("timeout_s", timeout_s, gt=0, le=MAX_TIMEOUT_S)
    cuda = torch.cuda.device_count() if backend == "nccl" else 0
    backend = choose_backend(backend, world_size, cuda, dist.is_nccl_available())
    try:
        payload = cloudpickle.dumps((fn, args))
    except Exception as exc:  # a lock, a generator, an open file: nothing another process can receive
        raise ArgumentTypeError(f"fn and its args must be picklable to reach the ranks: {exc}") from None
    ctx = _context()
    store = _loopback_store()
    results = ctx.Queue()
    ranks = [
        ctx.Process(
            target=_rank_main, args=(payload, r, world_size, store.port, backend, results), daemon=True
        )
        for r in range(world_size)
    ]
    done = None
    try:
        for p in ranks:
            p.start()
        done = _collect(ranks, results, time.monotonic() + timeout_s, timeout_s)
    finally:
        _stop(ranks, wait=done is not None)
        results.close()
        del store
    for rank in range(world_size):
        for line in done[rank][1].splitlines():
            print(f"[rank {rank}] {line}")
    return [done[rank][0] for rank in range(world_size)]


def _collect(ranks, results, deadline: float, timeout_s: float) -> dict:
    """Each rank's (result, printed text), waiting until ``deadline``; the first failure is raised."""
    world_size, done = len(ranks), {}
    while len(done) < world_size:
        try:
            message = results.get(timeout=max(0.01, min(0.2, deadline - time.monotonic())))
        except queue_module.Empty:
            for rank, p in enumerate(ranks):
                if rank not in done and p.exitcode is not None and p.exitcode != 0:
                    _drain(results, done)
                    if rank not in done:
                        why = (
                            f"ended with exit code {p.exitcode} before it sent a result (a script that calls spawn "
                            "must call it under `if __name__ == '__main__':`, as multiprocessing requires)"
                        )
                        raise RankError(rank, world_size, "exit", why) from None
            if time.monotonic() >= deadline:
                late = [r for r in range(world_size) if r not in done]
                raise TimeoutError(
                    f"rank(s) {', '.join(map(str, late))} of {world_size} had not finished after timeout_s="
                    f"{timeout_s:g} s; they were stopped: give a larger timeout_s (at most {MAX_TIMEOUT_S:g}) or "
                    "less work"
                ) from None
            continue
        if message[0] == "error":
            _, rank, kind, text, remote, printed = message
            raise RankError(
                rank, world_size, kind, text, remote + (f"\nit printed:\n{printed}" if printed else "")
            )
        _, rank, result, printed = message
        done[rank] = (cloudpickle.loads(result), printed)
    return done


def _drain(results, done: dict) -> None:
    """Messages already sent (a rank that exited right after sending its result)."""
    with contextlib.suppress(queue_module.Empty):
        while True:
            _, rank, result, printed = results.get(timeout=0.05)
            done[rank] = (cloudpickle.loads(result), printed)


def _stop(ranks, wait: bool) -> None:
    """Let ranks that have all sent their results exit (``wait``, up to 5 s); stop the others at once."""
    deadline = time.monotonic() + (5 if wait else 0)
    ranks = [p for p in ranks if p.pid is not None]  # a start that failed left the rest unstarted
    for p in ranks:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in ranks:
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()


# -- all-reduce in low precision --


def allreduce_rank(rank: int, world_size: int, dtypes, numel: int, seed: int) -> dict[str, float]:
    """On one rank of an initialised group: all-reduce (sum) this rank's tensor in each dtype and return the mean
    relative error against the float64 sum of the ranks' tensors, each rounded to that dtype first.  Every rank
    draws all the ranks' tensors (standard normal, seeded), so it can compute the exact sum itself."""
    device = rank_device()
    draws = torch.randn(world_size, numel, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    errors = {}
    for dtype in dtypes:
        inputs = draws.to(dtype)
        exact = inputs.double().sum(0)
        reduced = inputs[rank].to(device)
        dist.all_reduce(reduced)
        errors[dtype_name(dtype)] = float((reduced.cpu().double() - exact).abs().sum() / exact.abs().sum())
    return errors


def _check_world_size(name: str, value, minimum: int = 1) -> int:
    return check_int(name, value, minimum=minimum, maximum=MAX_WORLD_SIZE)


def _check_dtypes(name: str, dtypes) -> tuple[torch.dtype, ...]:
    if isinstance(dtypes, (str, torch.dtype)):
        dtypes = (dtypes,)
    check_instance(name, dtypes, (list, tuple), "a list of dtypes such as ['bf16', 'fp16', 'fp32']")
    if not 1 <= len(dtypes) <= len(FLOATS):
        raise ValueError(f"{name} must hold 1 to {len(FLOATS)} dtypes, got {len(dtypes)}")
    return tuple(
        dict.fromkeys(parse_dtype(d, allowed=FLOATS, name=f"{name}[{i}]") for i, d in enumerate(dtypes))
    )


def allreduce_error(
    dtype, world_size: int, numel: int = 2**16, seed: int = 0, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> float:
    """The mean relative error, ``sum|reduced - exact| / sum|exact|``, of all-reducing the ranks' tensors of
    ``numel`` elements in ``dtype`` (bf16, fp16 or fp32) on ``world_size`` gloo ranks, against the float64 sum of
    the same (rounded) tensors: only the reduction's own roundings count.  It grows with the ranks in bf16."""
    dtype = _check_dtypes("dtype", dtype)[0]
    world_size = _check_world_size("world_size", world_size)
    numel = check_int("numel", numel, minimum=1, maximum=MAX_NUMEL)
    seed = check_seed("seed", seed)
    return spawn(allreduce_rank, world_size, (dtype,), numel, seed, timeout_s=timeout_s)[0][dtype_name(dtype)]


@dataclass(frozen=True)
class AllreduceErrors:
    """:func:`allreduce_errors`' table: ``errors[dtype name][i]`` at ``world_sizes[i]`` ranks."""

    world_sizes: tuple[int, ...]
    errors: dict[str, list[float]]
    numel: int

    def reading(self) -> Reading:
        """Whether each dtype's error grew from the fewest ranks to the most, and by how much (bf16's first)."""
        growth = {name: e[-1] / e[0] if e[0] > 0 else math.inf for name, e in self.errors.items()}
        first = next(iter(self.errors))
        facts = {
            "dtype": first,
            "growth": format_ratio(growth[first]),
            "low": self.world_sizes[0],
            "high": self.world_sizes[-1],
            "fp32": f"{self.errors['float32'][-1]:.1e}" if "float32" in self.errors else "n/a",
            "first_error": f"{self.errors[first][0]:.1e}",
            "last_error": f"{self.errors[first][-1]:.1e}",
        }
        grew = len(self.world_sizes) > 1 and growth[first] > 1.2
        reasons = ("distributed.fp32_reduce",) if "float32" in self.errors else ()
        return Reading("distributed.error_grows" if grew else "distributed.error_flat", reasons, facts)

    def plot(self, ax=None):
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, 3.4))
        for name, errs in self.errors.items():
            ax.plot(self.world_sizes, errs, "o-", label=name)
        ax.set(xscale="log", yscale="log", xlabel="ranks (world size)", ylabel="mean relative error")
        ax.set_xticks(self.world_sizes, [str(w) for w in self.world_sizes])
        ax.minorticks_off()
        ax.set_title(f"all-reduce (sum) of {self.numel:,} values per rank, against float64", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
        return ax


def allreduce_errors(
    dtypes=("bf16", "fp16", "fp32"), world_sizes=(2, 4, 8), numel: int = 2**16, seed: int = 0
) -> AllreduceErrors:
    """:func:`allreduce_error` for each dtype at each world size (one spawn per world size, every dtype in it)."""
    dtypes = _check_dtypes("dtypes", dtypes)
    checked = check_int_sequence(
        "world_sizes", world_sizes, minimum=1, maximum=MAX_WORLD_SIZE, max_length=MAX_WORLD_SIZE
    )
    sizes = tuple(sorted(set(checked)))
    numel = check_int("numel", numel, minimum=1, maximum=MAX_NUMEL)
    seed = check_seed("seed", seed)
    found = {w: spawn(allreduce_rank, w, dtypes, numel, seed)[0] for w in sizes}
    errors = {dtype_name(d): [found[w][dtype_name(d)] for w in sizes] for d in dtypes}
    return AllreduceErrors(sizes, errors, numel)


def draw_data_parallel(world_size: int = 3, *, compute_dtype="bf16", reduce_dtype="fp32", ax=None):
    """Data parallelism in one picture: each rank's slice of the batch and its gradients (computed in
    ``compute_dtype``), the all-reduce that averages them (in ``reduce_dtype``), and the one update every rank
    then makes to its FP32 master weights; the dtypes are written where they enter."""
    import matplotlib.pyplot as plt

    world_size = check_int("world_size", world_size, minimum=1, maximum=MAX_WORLD_SIZE)
    compute = dtype_name(parse_dtype(compute_dtype, allowed=FLOATS, name="compute_dtype"))
    reduce = dtype_name(parse_dtype(reduce_dtype, allowed=FLOATS, name="reduce_dtype"))
    if check_axes("ax", ax) is None:
        _, ax = plt.subplots(figsize=(10.0, 1.0 + 0.8 * world_size))
    ax.set(xlim=(0, 10), ylim=(-0.6, world_size - 0.4))
    ax.axis("off")
    box = dict(boxstyle="round,pad=0.35", linewidth=1)
    middle = (world_size - 1) / 2
    for r in range(world_size):
        y = world_size - 1 - r
        ax.text(0.1, y, f"rank {r}: batch slice {r}", va="center", bbox={**box, "fc": "#eef3fb", "ec": "C0"})
        ax.text(2.9, y, f"forward + backward\nin {compute}: gradient g{r}", va="center", fontsize=9,
                bbox={**box, "fc": "#fdf1e6", "ec": "C1"})  # fmt: skip
        ax.annotate("", (2.8, y), (2.15, y), arrowprops=dict(arrowstyle="->", color="0.4"))
        ax.annotate("", (6.0, middle), (5.0, y), arrowprops=dict(arrowstyle="->", color="0.4"))
        ax.text(5.05, y + 0.1, f"as {reduce}", fontsize=7, color="C3", ha="left", va="bottom")
    mean = " + ".join(f"g{r}" for r in range(min(world_size, 3))) + (" + ..." if world_size > 3 else "")
    ax.text(6.05, middle, f"all-reduce in {reduce}\n({mean}) / {world_size}", va="center", fontsize=9,
            bbox={**box, "fc": "#fbeaea", "ec": "C3"})  # fmt: skip
    ax.annotate("", (8.15, middle), (7.85, middle), arrowprops=dict(arrowstyle="->", color="0.4"))
    ax.text(8.2, middle, "every rank: the same\nmean gradient, one\nAdam step on its FP32\nmaster weights",
            va="center", fontsize=8, bbox={**box, "fc": "#eaf6ea", "ec": "C2"})  # fmt: skip
    return ax


# -- FSDP2 --


class CollectiveDtypes(TorchDispatchMode):
    """While active, records the dtype of the first float tensor handed to each collective (a ``c10d`` op) whose
    name holds one of ``names``: what FSDP reduce-scatters in, or what a DDP hook sends."""

    def __init__(self, *names: str):
        super().__init__()
        self.names, self.seen = names, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        if name.startswith("c10d::") and any(n in name for n in self.names):
            flat = [a for arg in args for a in (arg if isinstance(arg, (list, tuple)) else [arg])]
            self.seen += [t.dtype for t in flat if isinstance(t, torch.Tensor) and t.is_floating_point()][:1]
        return func(*args, **(kwargs or {}))


def _local_bytes(tensors) -> int:
    """Bytes of this rank's shards, as views (not ``memory``'s storage bytes: FSDP2 pads an uneven shard)."""
    return sum(t.to_local().nbytes if hasattr(t, "to_local") else t.nbytes for t in tensors if t is not None)


def global_batch(step: int, batch_size: int, n: int, seed: int) -> torch.Tensor:
    """The indices of step ``step``'s global batch of the digits' training split (the same on every rank)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + step))[:batch_size]


def fsdp_rank(
    rank,
    world_size,
    param_dtype,
    reduce_dtype,
    steps,
    inject_inf,
    lr,
    batch_size,
    hidden,
    depth,
    seed,
    init_scale,
) -> dict:
    """One rank of :func:`fsdp_train` in an initialised group: the course's MLP, each Linear and then the whole
    model ``fully_shard``-ed with ``MixedPrecisionPolicy(param_dtype, reduce_dtype)``, Adam, and
    ``ShardedGradScaler`` when ``param_dtype`` is float16; this rank trains on its slice of each global batch."""
    device = rank_device()
    data = load_digits(device=device)
    model = make_mlp(
        data.num_features, data.num_classes, hidden=hidden, depth=depth, seed=seed, device=device
    )
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    scaled = param_dtype == torch.float16
    scaler = ShardedGradScaler(device=device.type, init_scale=init_scale) if scaled else None
    computed: list[torch.dtype] = []
    hook = model[0].register_forward_hook(lambda m, i, out: computed.append(out.dtype))
    reduced, local = CollectiveDtypes("reduce_scatter", "allreduce"), batch_size // world_size
    losses, skipped, scales = [], [], []
    for step in range(steps):
        idx = global_batch(step, batch_size, len(data.train), seed)[rank * local : (rank + 1) * local]
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(data.train.X[idx]).float(), data.train.y[idx])
        with reduced:
            (scaler.scale(loss) if scaler else loss).backward()
        if inject_inf.get(step) == rank:
            grad = next(p.grad.to_local() for p in model.parameters() if p.grad.to_local().numel())
            grad.view(-1)[0] = math.inf  # an overflow in this rank's gradients only
        before = scaler.get_scale() if scaler else None
        if scaler:
            with warnings.catch_warnings():
                # ShardedGradScaler's found_inf is a 1-element tensor beside DTensor gradients; DTensor warns that
                # it replicates it, which is what the scaler wants (torch 2.13)
                warnings.filterwarnings("ignore", "Found a non-scalar tensor with numel=1", UserWarning)
                scaler.step(opt)
                scaler.update()
        else:
            opt.step()
        skipped.append(bool(scaler and scaler.get_scale() < before))
        scales.append(before)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world_size)
    hook.remove()
    params = list(model.parameters())
    memory = {
        "parameters": _local_bytes(params),
        "gradients": _local_bytes(p.grad for p in params),
        "optimizer": _local_bytes(
            v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim()
        ),
    }
    dtypes = {"master": params[0].to_local().dtype, "compute": computed[0], "reduce": reduced.seen[0]}
    n = sum(p.numel() for p in params)
    return dict(losses=losses, skipped=skipped, scales=scales, dtypes=dtypes, memory=memory, n=n)


@dataclass(frozen=True)
class FSDPRun:
    """What :func:`fsdp_train` recorded: ``losses`` (the global batch's mean loss per step, all-reduced),
    ``dtypes`` (``master``: the sharded parameters', ``compute``: the first layer's output in the forward,
    ``reduce``: the tensors handed to the gradients' reduce-scatter; each read from the tensors), ``skipped`` and
    ``scales`` (per rank, per step: the scale each step used; None without a scaler), ``memory`` (per rank: bytes
    of its parameter, gradient and optimizer-state shards) and the settings."""

    losses: list[float]
    dtypes: dict[str, torch.dtype]
    skipped: list[list[bool]]
    scales: list[list[float | None]]
    memory: list[dict[str, int]]
    num_parameters: int
    world_size: int
    policy: dict[str, torch.dtype] = field(default_factory=dict)

    @classmethod
    def from_ranks(cls, ranks: list[dict], param_dtype, reduce_dtype) -> FSDPRun:
        """The record of the ranks' results of :func:`fsdp_rank` (in rank order), under that policy."""
        return cls(
            losses=ranks[0]["losses"],
            dtypes=ranks[0]["dtypes"],
            skipped=[r["skipped"] for r in ranks],
            scales=[r["scales"] for r in ranks],
            memory=[r["memory"] for r in ranks],
            num_parameters=ranks[0]["n"],
            world_size=len(ranks),
            policy={"param_dtype": param_dtype, "reduce_dtype": reduce_dtype},
        )

    def reading(self) -> Reading:
        """The dtypes read from the tensors and, with a scaler, whether the ranks skipped the same steps and kept
        the same scales (what a scaler must guarantee, or the ranks' parameters drift apart)."""
        facts = {
            "skipped": ", ".join(str(i) for i, s in enumerate(self.skipped[0]) if s) or "none",
            "ranks": self.world_size,
            **{k: dtype_name(v) for k, v in self.dtypes.items()},
        }
        if self.scales[0][0] is None:  # no scaler: nothing for the ranks to agree on
            return Reading("distributed.dtypes", (), facts)
        same = all(s == self.skipped[0] for s in self.skipped) and all(
            s == self.scales[0] for s in self.scales
        )
        return Reading(
            "distributed.dtypes",
            ("distributed.ranks_agree" if same else "distributed.ranks_disagree",),
            facts,
        )

    def __str__(self) -> str:
        d = {k: dtype_name(v) for k, v in self.dtypes.items()}
        return (
            f"FSDP2 on {self.world_size} ranks, {len(self.losses)} steps: loss {self.losses[0]:.4f} -> "
            f"{self.losses[-1]:.4f}; master {d['master']}, compute {d['compute']}, reduce {d['reduce']}"
        )


def _check_inject(inject_inf, steps: int, world_size: int, scaled: bool) -> dict[int, int]:
    if inject_inf is None:
        return {}
    check_instance("inject_inf", inject_inf, dict, "a dict {step: rank} or None")
    if not scaled:
        raise ValueError("inject_inf needs a loss scaler to skip the step: give param_dtype='fp16'")
    return {
        check_int("inject_inf's step", s, minimum=0, maximum=steps - 1): check_int(
            f"inject_inf[{s!r}]", r, minimum=0, maximum=world_size - 1
        )
        for s, r in inject_inf.items()
    }


def fsdp_train(
    param_dtype,
    reduce_dtype,
    world_size: int,
    steps: int,
    *,
    inject_inf=None,
    lr: float = 1e-3,
    batch_size: int = 256,
    hidden: int = 64,
    depth: int = 2,
    seed: int = 0,
    init_scale: float = 2.0**16,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> FSDPRun:
    """Train the course's MLP on the digits with FSDP2 on ``world_size`` (2 to 8) gloo ranks for ``steps`` Adam
    steps under ``MixedPrecisionPolicy(param_dtype, reduce_dtype)`` (each bf16, fp16 or fp32), each rank on its
    ``batch_size // world_size`` slice of the same global batch; float16 parameters get a ``ShardedGradScaler``.
    ``inject_inf={step: rank}`` puts an inf in that rank's gradients at that step: every rank must skip it."""
    param_dtype = parse_dtype(param_dtype, allowed=FLOATS, name="param_dtype")
    reduce_dtype = parse_dtype(reduce_dtype, allowed=FLOATS, name="reduce_dtype")
    world_size = _check_world_size("world_size", world_size, minimum=2)
    steps = check_int("steps", steps, minimum=1, maximum=MAX_STEPS)
    inject = _check_inject(inject_inf, steps, world_size, param_dtype == torch.float16)
    lr = check_float("lr", lr, gt=0, le=1.0)
    batch_size = check_int("batch_size", batch_size, minimum=world_size, maximum=1024)
    if batch_size % world_size:
        raise ValueError(
            f"batch_size={batch_size} must be a multiple of world_size={world_size}: equal slices"
        )
    hidden = check_int("hidden", hidden, minimum=1, maximum=1024)
    depth = check_int("depth", depth, minimum=1, maximum=8)
    seed = check_seed("seed", seed)
    init_scale = check_float("init_scale", init_scale, ge=1.0, le=2.0**24)
    args = (param_dtype, reduce_dtype, steps, inject, lr, batch_size, hidden, depth, seed, init_scale)
    ranks = spawn(fsdp_rank, world_size, *args, timeout_s=timeout_s)
    return FSDPRun.from_ranks(ranks, param_dtype, reduce_dtype)


def single_process_losses(
    steps: int, *, lr: float = 1e-3, batch_size: int = 256, hidden: int = 64, depth: int = 2, seed: int = 0
) -> list[float]:
    """The losses of :func:`fsdp_train`'s float32 run in one process: the same model, batches and Adam."""
    steps = check_int("steps", steps, minimum=1, maximum=MAX_STEPS)
    batch_size = check_int("batch_size", batch_size, minimum=1, maximum=1024)
    data = load_digits(device="cpu")
    model = make_mlp(data.num_features, data.num_classes, hidden=hidden, depth=depth, seed=seed, device="cpu")
    opt = torch.optim.Adam(model.parameters(), lr=check_float("lr", lr, gt=0, le=1.0))
    losses = []
    for step in range(steps):
        idx = global_batch(step, batch_size, len(data.train), check_seed("seed", seed))
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(data.train.X[idx]), data.train.y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
