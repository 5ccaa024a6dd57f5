"""The course's one device helper: which device (``get_device``, ``$AMP_LAB_DEVICE`` overrides it), its
autocast dtype (``amp_dtype``), seeds, thread counts, memory, and float64 that never meets an Apple GPU."""

from __future__ import annotations

import math
import os
import random
from contextlib import contextmanager, nullcontext

import numpy as np
import torch

from ._checks import MAX_THREADS, check_choice, check_instance, check_int, check_seed
from .gpus import amp_dtype_for
from .text import format_bytes

ENV_VAR = "AMP_LAB_DEVICE"


def _device_available(dev: torch.device) -> bool:
    if dev.type == "cuda":
        return torch.cuda.is_available() and (dev.index is None or dev.index < torch.cuda.device_count())
    return dev.type == "cpu" or (dev.type == "mps" and mps_available())


def mps_available() -> bool:
    """Whether this machine has an Apple GPU torch can use."""
    return bool(torch.backends.mps.is_available())


def get_device(device: str | torch.device | None = None) -> torch.device:
    """The device the course runs on: ``device``, else ``$AMP_LAB_DEVICE``, else ``cuda`` when available, else
    ``cpu``.  A device this machine lacks (``"cpu:5"`` too) raises ``ValueError`` saying so."""
    name = "device"
    if device is None:
        name = f"${ENV_VAR}" if os.environ.get(ENV_VAR) else name
        device = os.environ.get(ENV_VAR) or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = _as_device(device, name)
    check_choice(name, dev.type, ["cpu", "cuda", "mps"])
    if dev.type in ("cpu", "mps") and dev.index not in (None, 0):
        raise ValueError(
            f"{name}={str(dev)!r} is not available: there is one {dev.type} device, so its index can only be 0 "
            f"(or left out: {dev.type!r})"
        )
    if not _device_available(dev):
        raise ValueError(
            f"{name}={str(dev)!r} is not available on this machine "
            f"(CUDA available: {torch.cuda.is_available()}); use 'cpu'"
        )
    return dev


def amp_dtype(device: str | torch.device | None = None) -> torch.dtype:
    """The low-precision dtype the course uses for autocast on ``device``: :func:`~amp_lab.gpus.amp_dtype_for`'s,
    from the GPU's compute capability alone, so it is cheap in every cell.  (``00_setup_check``)"""
    dev = get_device(device)
    capability = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else None
    return amp_dtype_for(dev.type, capability)


def synchronize(device: str | torch.device | None = None) -> None:
    """Wait until every kernel queued on ``device`` has finished (no-op on CPU)."""
    dev = get_device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and torch (all devices) with an integer from 0 to 2**32 - 1."""
    seed = check_seed("seed", seed)
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed)


def cuda_available_bytes(free: int, reserved: int, allocated: int) -> int:
    """Bytes a new allocation on a GPU can have: the driver's free memory plus what torch's caching allocator
    holds reserved but unused, which it hands out again without asking the driver."""
    return free + max(0, reserved - allocated)


def available_bytes(device: str | torch.device | None = None) -> int | None:
    """Memory a new allocation on ``device`` can have (None where this platform cannot say)."""
    dev = device if isinstance(device, torch.device) else get_device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        reserved, allocated = torch.cuda.memory_reserved(dev), torch.cuda.memory_allocated(dev)
        return cuda_available_bytes(int(free), int(reserved), int(allocated))
    if dev.type == "cpu":
        try:
            with open("/proc/meminfo", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:  # no /proc (macOS): unknown
            pass
    return None


def check_fits(needed: int, device, what: str, hint: str) -> None:
    """Raise ValueError, before anything is allocated, when ``needed`` bytes are more than 90% of what
    ``device`` has available (where that is known); ``what`` names the request, ``hint`` the way out."""
    dev = device if isinstance(device, torch.device) else get_device(device)
    available = available_bytes(dev)
    if available is not None and needed > 0.9 * available:
        try:
            shown = format_bytes(needed) if math.isfinite(float(needed)) else f"{float(needed)} bytes"
        except OverflowError:  # an int beyond float64's range: more than any machine has
            shown = f"at least 2**{int(needed).bit_length() - 1} bytes"
        raise ValueError(
            f"{what} needs about {shown}, but {dev} has about {format_bytes(available)} "
            f"available: refused before allocating anything; {hint}"
        )


def _rng_devices() -> list[int]:
    """The CUDA devices whose generators ``torch.manual_seed`` reseeds (none without CUDA)."""
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


@contextmanager
def seeded(seed: int):
    """Run a block with torch's generators seeded to ``seed``, then give back the learner's generators as they
    were: the CPU's, every CUDA device's and an Apple GPU's (``torch.manual_seed`` reseeds them all)."""
    mps_state = torch.mps.get_rng_state() if mps_available() else None
    try:
        with torch.random.fork_rng(devices=_rng_devices()):
            torch.manual_seed(seed)
            yield
    finally:
        if mps_state is not None:
            torch.mps.set_rng_state(mps_state)


def torch_threads(num_threads: int | None, device: str | torch.device | None = None):
    """Run a block with ``num_threads`` (1 to ``MAX_THREADS``; None: unchanged) torch CPU threads, then restore
    the count; with ``device`` given, only a CPU device changes it.  Checked when called, not when entered."""
    if num_threads is not None:
        num_threads = check_int("num_threads", num_threads, minimum=1, maximum=MAX_THREADS)
    dev = None if device is None else get_device(device)
    if num_threads is None or (dev is not None and dev.type != "cpu"):
        return nullcontext()
    return _torch_threads(num_threads)


@contextmanager
def _torch_threads(num_threads: int):
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# Apple GPUs (MPS) have no float64, so exact float64 work happens on the CPU, through the two helpers below
# (``tests/test_mps_paths.py`` makes them the package's only float64 conversions).


def _as_device(device, name: str = "device") -> torch.device:
    """``device`` as a ``torch.device``, available here or not."""
    if isinstance(device, torch.device):
        return device
    check_instance(name, device, str, "a device name such as 'cpu' or 'cuda', a torch.device or None")
    try:
        return torch.device(device.strip())
    except RuntimeError:
        raise ValueError(
            f"{name}={device!r} is not a device name; use 'cpu', 'cuda', 'cuda:N' or 'mps'"
        ) from None


def supports_float64(device: str | torch.device) -> bool:
    """Can ``device`` hold float64 tensors?  CPUs and CUDA GPUs can; Apple GPUs (MPS) cannot."""
    return _as_device(device).type != "mps"


def float64_on_cpu(t: torch.Tensor) -> torch.Tensor:
    """``t`` (detached) as float64 on the CPU: copied first, then widened, so an MPS tensor never meets float64
    (the same to the bit as ``t.double()``)."""
    return t.detach().cpu().to(torch.float64)


def float64_to(t: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """A float64 result ``t`` moved to ``device``, or kept on the CPU for an Apple GPU (no float64 there)."""
    dev = _as_device(device)
    # get_device: "cuda" without CUDA is a ValueError naming the device, not torch's AssertionError.
    return t.to(get_device(dev)) if supports_float64(dev) else t.cpu()
