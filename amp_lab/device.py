"""The course's one device and precision helper.

Every notebook and module asks this file which device to run on and which low-precision
dtype that device's autocast should use, so no notebook carries its own device-selection
snippet.  (Taught in ``00_setup_check``.)

* ``get_device()`` picks CUDA when a GPU is present, else the CPU.  The environment
  variable ``AMP_LAB_DEVICE`` overrides the choice (``make notebooks`` and ``make test`` set
  it to ``cpu`` so stored outputs are reproducible on any machine).
* ``amp_dtype(device)`` is the low-precision dtype the course uses on that device, the one
  decision ``hardware.amp_dtype_for`` makes (the machine report's ``race_dtype`` is the same):
  bfloat16 on CUDA GPUs from Ampere (compute capability 8.0) on, float16 on Volta, Turing and
  older GPUs and on Apple GPUs (MPS), bfloat16 on CPUs.
"""

from __future__ import annotations

import math
import os
import random
from contextlib import contextmanager

import torch

from ._checks import MAX_THREADS, ArgumentTypeError, check_choice, check_int, check_seed
from .gpus import amp_dtype_for
from .text import format_bytes

ENV_VAR = "AMP_LAB_DEVICE"


def _device_available(dev: torch.device) -> bool:
    if dev.type == "cpu":
        return True
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return False
        return dev.index is None or dev.index < torch.cuda.device_count()
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        return bool(mps and mps.is_available())
    return False


def get_device(device: str | torch.device | None = None) -> torch.device:
    """Return the device the course runs on.

    ``device=None`` means: ``$AMP_LAB_DEVICE`` if set, else ``cuda`` when available, else
    ``cpu``.  An explicit device that this machine lacks raises ``ValueError`` saying so; so does a
    CPU (or Apple GPU) index other than 0, since there is only one (``"cpu:5"`` is not a device here).
    """
    name = "device"
    if device is None:
        from_env = os.environ.get(ENV_VAR)
        if from_env:
            name = f"${ENV_VAR}"
        device = from_env or ("cuda" if torch.cuda.is_available() else "cpu")
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device.strip())
        except RuntimeError:
            raise ValueError(
                f"{name}={device!r} is not a device name; use 'cpu', 'cuda', 'cuda:N' or 'mps'"
            ) from None
    else:
        raise ArgumentTypeError(
            f"{name} must be a device name such as 'cpu' or 'cuda', a torch.device or None, "
            f"got {type(device).__name__}: {device!r:.80}"
        )
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


def device_type(device: str | torch.device | None = None) -> str:
    """The ``device_type`` string that ``torch.autocast`` and ``torch.amp.GradScaler`` take."""
    return get_device(device).type


def amp_dtype(device: str | torch.device | None = None) -> torch.dtype:
    """The low-precision dtype the course uses for autocast on ``device`` (``00_setup_check``).

    The decision is ``hardware.amp_dtype_for``'s, so it always agrees with the machine report's
    ``race_dtype``.  Cheap enough to call in every cell: on CUDA it reads only the GPU's compute
    capability (which torch caches), never the full machine report.
    """
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
    """Seed Python, NumPy (when installed) and torch (all devices).  ``seed`` is an integer from 0 to
    2**32 - 1, what all three accept."""
    seed = check_seed("seed", seed)
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return
    np.random.seed(seed)


# --------------------------------------------------------------------------------------------
# Memory: refuse what cannot fit, before anything is allocated (the one helper every size goes through)
# --------------------------------------------------------------------------------------------


def cuda_available_bytes(free: int, reserved: int, allocated: int) -> int:
    """Bytes a new allocation on a GPU can have: what the driver reports free (``torch.cuda.mem_get_info``)
    plus what torch's caching allocator holds reserved but not in use (``memory_reserved`` minus
    ``memory_allocated``), which it hands out again without asking the driver.  Counting only the driver's
    free memory would refuse a race on a 10 GB card after an earlier one left 5 GB cached."""
    free = check_int("free", free, minimum=0)
    reserved = check_int("reserved", reserved, minimum=0)
    allocated = check_int("allocated", allocated, minimum=0)
    return free + max(0, reserved - allocated)


def available_bytes(device: str | torch.device | None = None) -> int | None:
    """Memory a new allocation on ``device`` can have (None where this platform cannot say)."""
    dev = device if isinstance(device, torch.device) else get_device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return cuda_available_bytes(
            int(free), int(torch.cuda.memory_reserved(dev)), int(torch.cuda.memory_allocated(dev))
        )
    if dev.type == "cpu":
        try:
            with open("/proc/meminfo", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_AVPHYS_PAGES"))
        except (AttributeError, ValueError, OSError):
            return None
    return None


def check_fits(needed: int, device, what: str, hint: str) -> None:
    """Raise ValueError, before anything is allocated, when ``needed`` bytes are more than 90% of what
    ``device`` has available (:func:`available_bytes`; no check where that is unknown).  ``what`` names
    the request in the message and ``hint`` says what to choose instead."""
    from numbers import Real

    if isinstance(needed, bool) or not isinstance(needed, Real):
        raise ArgumentTypeError(
            f"needed must be a number of bytes, got {type(needed).__name__}: {needed!r:.80}"
        )
    if not needed >= 0:  # NaN too
        raise ValueError(f"needed must be a number of bytes >= 0, got {needed!r}")
    for arg, value in (("what", what), ("hint", hint)):
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{arg} must be a string, got {type(value).__name__}: {value!r:.80}")
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


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def _rng_devices() -> list[int]:
    """The CUDA devices whose generators ``torch.manual_seed`` reseeds (none without CUDA)."""
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


@contextmanager
def seeded(seed: int):
    """Run a block with torch's generators seeded to ``seed``, then give the learner's generators back
    exactly as they were: the CPU's *and* every CUDA device's (``torch.manual_seed`` reseeds them all,
    so forking only the CPU's would silently reseed a learner's GPU).  (``models.make_mlp``,
    the race's model.)"""
    seed = check_int("seed", seed, minimum=0, maximum=2**64 - 1)
    mps = getattr(torch, "mps", None)
    # torch.manual_seed reseeds an Apple GPU's generator too, and fork_rng forks one device type only.
    mps_state = mps.get_rng_state() if mps is not None and _mps_available() else None
    try:
        with torch.random.fork_rng(devices=_rng_devices()):
            torch.manual_seed(seed)
            yield
    finally:
        if mps_state is not None:
            mps.set_rng_state(mps_state)


def torch_threads(num_threads: int | None, device: str | torch.device | None = None):
    """Run a block with ``num_threads`` torch intra-op CPU threads, then restore the count.

    ``None`` keeps the current count.  With ``device`` given, only a CPU device changes it (a GPU
    run keeps the host's threads).  The course's networks are tiny: a second thread has nothing to
    split, on a busy machine threads that wait for each other make a step many times slower, and
    one thread gives the same numbers whatever the core count, so stored outputs reproduce.
    ``num_threads`` is an integer from 1 to ``MAX_THREADS`` (1024), checked when this is called.
    """
    if num_threads is not None:
        num_threads = check_int("num_threads", num_threads, minimum=1, maximum=MAX_THREADS)
    dev = None if device is None else get_device(device)
    return _torch_threads(num_threads, dev)


@contextmanager
def _torch_threads(num_threads: int | None, dev: torch.device | None):
    if num_threads is None or (dev is not None and dev.type != "cpu"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# Apple GPUs (MPS) have no float64: a float64 tensor cannot exist there.  Exact float64 work on a
# learner's tensor therefore happens on the CPU, through the two helpers below, which
# ``tests/test_mps_paths.py`` makes the only float64 conversions of the package's numerical modules.


def _as_device(device, name: str = "device") -> torch.device:
    """``device`` as a ``torch.device``, available here or not (a ``ValueError`` naming ``name``)."""
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise ArgumentTypeError(f"{name} must be a device name or torch.device, got {type(device).__name__}")
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
    """``t`` (detached) as a float64 tensor on the CPU, whatever device it lives on.

    Copied to the CPU *first*, in its own dtype, then widened there: an MPS tensor never meets
    float64 on the GPU.  Every float16, bfloat16 and float32 value is exact in float64, so the
    result is the same to the bit as ``t.double()`` on a device that has float64.
    """
    if not isinstance(t, torch.Tensor):
        raise ArgumentTypeError(f"t must be a torch.Tensor, got {type(t).__name__}")
    return t.detach().cpu().to(torch.float64)


def float64_to(t: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    """A float64 result ``t`` moved to ``device`` where that device has float64 (CPU, CUDA);
    on an Apple GPU (MPS) it stays on the CPU, since float64 cannot live there."""
    if not isinstance(t, torch.Tensor):
        raise ArgumentTypeError(f"t must be a torch.Tensor, got {type(t).__name__}")
    dev = _as_device(device)
    if not supports_float64(dev):
        return t.cpu()
    # get_device before moving: "cuda:0" on a machine without CUDA is a ValueError naming the device,
    # never torch's AssertionError "Torch not compiled with CUDA enabled".
    return t.to(get_device(dev))
