"""amp_lab.device: the one device and precision helper."""

import numpy as np
import pytest
import torch

from amp_lab import device as D
from amp_lab import dtypes, gpus


def test_env_var_forces_cpu(monkeypatch):
    monkeypatch.setenv(D.ENV_VAR, "cpu")
    assert D.get_device() == torch.device("cpu")


def test_default_without_env_follows_cuda(monkeypatch):
    monkeypatch.delenv(D.ENV_VAR, raising=False)
    assert D.get_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("bad", ["tpu", "gpu", "", "cuda:x"])
def test_bad_device_names(bad):
    with pytest.raises(ValueError, match="device"):
        D.get_device(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_missing_cuda_is_refused_plainly():
    with pytest.raises(ValueError, match="not available on this machine"):
        D.get_device("cuda")


def test_amp_dtype_per_device():
    assert D.amp_dtype("cpu") is torch.bfloat16
    # The CPU's autocast default agrees with ours.
    assert torch.get_autocast_dtype("cpu") is torch.bfloat16


# (GPU, compute capability, dtype): bfloat16 from Ampere on, float16 before.
GPUS = [("GTX 1080", (6, 1), torch.float16), ("V100", (7, 0), torch.float16), ("T4", (7, 5), torch.float16),
        ("A100", (8, 0), torch.bfloat16), ("RTX 3090", (8, 6), torch.bfloat16), ("L4", (8, 9), torch.bfloat16),
        ("H200", (9, 0), torch.bfloat16), ("B200", (10, 0), torch.bfloat16)]  # fmt: skip


@pytest.mark.parametrize("name, cap, dtype", GPUS, ids=[g[0] for g in GPUS])
def test_amp_dtype_on_cuda_reads_only_the_capability(monkeypatch, name, cap, dtype):
    # No GPU here: pretend one, and make the full machine report unusable, so amp_dtype must
    # decide from the compute capability alone (it runs in many cells; describe() is slow).
    from amp_lab import hardware

    asked = []
    monkeypatch.setattr(D, "get_device", lambda device=None: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or cap)
    monkeypatch.setattr(hardware, "describe", lambda *a, **k: pytest.fail("amp_dtype called describe()"))
    assert D.amp_dtype("cuda") is dtype
    assert asked == [torch.device("cuda", 0)]
    # The same decision the machine report makes for that GPU.
    assert hardware.machine_verdict(cuda_available=True, tensor_cores=gpus.tensor_core_generation(cap), flags={}).dtype is dtype


def test_amp_dtype_on_mps(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert D.get_device("mps") == torch.device("mps")
    assert D.amp_dtype("mps") is torch.float16
    # autocast's own MPS default agrees.
    assert torch.get_autocast_dtype("mps") is torch.float16


@pytest.mark.parametrize(
    "given, expected",
    [("bf16", torch.bfloat16), ("BFloat16", torch.bfloat16), ("fp16", torch.float16), ("torch.float16", torch.float16),
     (torch.float16, torch.float16)],
)
def test_parse_dtype(given, expected):
    assert dtypes.parse_dtype(given) is expected


@pytest.mark.parametrize("bad", ["fp64", torch.float64, torch.float32, "int8", 3])
def test_parse_dtype_rejects(bad):
    with pytest.raises(ValueError, match="dtype"):
        dtypes.parse_dtype(bad)


def test_seed_everything_reproduces():
    D.seed_everything(3)
    a = torch.randn(4)
    D.seed_everything(3)
    assert torch.equal(a, torch.randn(4))


def test_no_device_snippets_outside_the_helper():
    # One helper, used everywhere: nobody else decides between cuda and cpu by hand.
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    offenders = []
    for path in list((root / "amp_lab").glob("*.py")) + list((root / "notebooks").rglob("*.ipynb")):
        if path.name == "device.py" or ".ipynb_checkpoints" in path.parts:
            continue
        text = path.read_text()
        if '"cuda" if torch.cuda.is_available()' in text or "'cuda' if torch.cuda.is_available()" in text \
                or '\\"cuda\\" if torch.cuda.is_available()' in text:
            offenders.append(path.name)
    assert offenders == []


def test_torch_threads_sets_and_restores():
    before = torch.get_num_threads()
    with D.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with D.torch_threads(None):
        assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), D.torch_threads(1, "cpu"):
        raise RuntimeError("restored even on error")
    assert torch.get_num_threads() == before


# --------------------------------------------------------------------------------------------
# float64 on a device without it (Apple GPUs): amp_lab.device's helpers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device, ok", [("cpu", True), ("cuda", True), ("cuda:1", True), (torch.device("mps"), False),
                                        ("mps", False), ("mps:0", False)])  # fmt: skip
def test_supports_float64(device, ok):
    # answered from the device's type alone: a machine without that device can still ask
    assert D.supports_float64(device) is ok


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_float64_on_cpu_is_double_to_the_bit(dtype):
    x = (torch.randn(257, generator=torch.Generator().manual_seed(0)) * 1e3).to(dtype)
    x.requires_grad_(dtype is not torch.float16)
    y = D.float64_on_cpu(x)
    assert y.dtype == torch.float64 and y.device.type == "cpu" and not y.requires_grad
    assert torch.equal(y, x.detach().double())


def test_float64_to_keeps_float64_off_mps():
    t = torch.arange(3, dtype=torch.float64)
    assert D.float64_to(t, "cpu").device.type == "cpu"
    assert D.float64_to(t, torch.device("mps")) is t  # already on the CPU: stays there
    assert torch.equal(D.float64_to(t, "mps"), t)


@pytest.mark.parametrize("bad, error", [("tpu:x", ValueError), ("gpu!", ValueError), (3, TypeError), (None, TypeError)])
def test_float64_helpers_reject_bad_arguments(bad, error):
    with pytest.raises(error, match="device"):
        D.supports_float64(bad)
    with pytest.raises(error, match="device"):
        D.float64_to(torch.zeros(1, dtype=torch.float64), bad)


def test_amp_dtype_and_the_machine_verdict_agree_on_mps(monkeypatch):
    # The course's dtype for an Apple GPU is one decision (gpus.amp_dtype_for),
    # whichever door a learner asks through: amp_dtype, the verdict, or the machine report.
    from amp_lab import hardware

    real = D._device_available
    monkeypatch.setattr(D, "_device_available", lambda dev: dev.type == "mps" or real(dev))
    dtype = D.amp_dtype("mps")
    assert D.amp_dtype(torch.device("mps", 0)) is dtype
    assert dtype is gpus.amp_dtype_for("mps")
    facts = dict(cuda_available=False, tensor_cores=None, flags={}, device_type="mps", system="Darwin")
    verdict = hardware.machine_verdict(**facts)
    assert (verdict.device, verdict.dtype) == ("mps", dtype)
    assert (hardware.machine_verdict(**facts).device, hardware.machine_verdict(**facts).dtype) == ("mps", dtype)
    assert hardware.report_for("mps", system="Darwin").race_dtype is dtype
    report = hardware.describe("mps")
    assert (report.race_device, report.race_dtype) == ("mps", dtype)


def test_seeded_gives_an_apple_gpus_generator_back(monkeypatch):
    """torch.manual_seed reseeds the MPS generator as well; seeded() must restore it like the CPU's."""
    import torch

    from amp_lab import device

    state = {"mps": torch.tensor([7], dtype=torch.uint8)}
    monkeypatch.setattr(device, "mps_available", lambda: True)
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda *a, **k: state["mps"].clone())
    monkeypatch.setattr(torch.mps, "set_rng_state", lambda s, *a, **k: state.update(mps=s.clone()))
    real_seed = torch.manual_seed

    def manual_seed(seed):  # what torch does on a Mac: every generator, the MPS one included
        state["mps"] = torch.tensor([seed % 256], dtype=torch.uint8)
        return real_seed(seed)

    monkeypatch.setattr(torch, "manual_seed", manual_seed)
    cpu_before = torch.get_rng_state()
    with device.seeded(3):
        assert int(state["mps"][0]) == 3
    assert int(state["mps"][0]) == 7 and torch.equal(torch.get_rng_state(), cpu_before)


# ----------------------------------------------------------------------------------------------
# Every bad input gets a clear error, raised before anything changes
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: D.get_device("cpu:5"), ValueError, "device='cpu:5' is not available: there is one cpu device"),
        (lambda: D.get_device(torch.device("cpu", 1)), ValueError, "there is one cpu device"),
        (lambda: D.get_device("mps:1"), ValueError, "there is one mps device"),
        (lambda: D.get_device(123), TypeError, "device must be a device name"),
        (lambda: D.get_device(["cpu"]), TypeError, "device must be a device name"),
        (lambda: dtypes.parse_dtype(5), TypeError, "dtype must be a torch dtype or its name"),
        (lambda: dtypes.parse_dtype(None), TypeError, "dtype must be a torch dtype"),
        (lambda: D.torch_threads(0), ValueError, "num_threads must be >= 1"),
        (lambda: D.torch_threads(10**6), ValueError, "num_threads must be <= 1024"),
        (lambda: D.torch_threads(1.5), TypeError, "num_threads must be an integer"),
        (lambda: D.torch_threads(True), TypeError, "num_threads must be an integer"),
        (lambda: D.torch_threads(1, device="tpu"), ValueError, "device"),
    ],
)
def test_device_helpers_refuse_bad_arguments_by_name(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_a_bad_thread_count_is_refused_when_asked_for_and_changes_nothing():
    before = torch.get_num_threads()
    with pytest.raises(ValueError, match="num_threads"):
        D.torch_threads(0)  # not torch.set_num_threads's RuntimeError, and not only once the block is entered
    assert torch.get_num_threads() == before
    with D.torch_threads(np.int64(1)):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_a_bad_amp_lab_device_names_the_environment_variable(monkeypatch):
    monkeypatch.setenv(D.ENV_VAR, "cpu:3")
    with pytest.raises(ValueError, match=r"\$AMP_LAB_DEVICE='cpu:3'"):
        D.get_device()
    monkeypatch.setenv(D.ENV_VAR, "cpu:0")
    assert D.get_device() == torch.device("cpu", 0)


@pytest.mark.parametrize("seed, exc", [(-1, ValueError), (2**32, ValueError), (1.5, TypeError), (True, TypeError),
                                       ("0", TypeError)])  # fmt: skip
def test_seed_everything_refuses_a_bad_seed_before_seeding_anything(seed, exc):
    import random

    torch.manual_seed(123)
    random.seed(123)
    expected_torch, expected_random = torch.rand(1), random.random()
    torch.manual_seed(123)
    random.seed(123)
    with pytest.raises(exc, match="seed must be"):
        D.seed_everything(seed)
    assert torch.equal(torch.rand(1), expected_torch) and random.random() == expected_random  # nothing half-seeded


def test_seed_everything_takes_numpy_integers():
    D.seed_everything(np.int64(7))
    a = torch.rand(2)
    D.seed_everything(7)
    assert torch.equal(a, torch.rand(2))


def test_parse_dtype_takes_allowed_as_a_list_or_set_too():
    assert dtypes.parse_dtype("fp32", allowed=[torch.float32]) is torch.float32
    assert dtypes.parse_dtype(torch.float16, allowed={torch.float16, torch.bfloat16}) is torch.float16


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda", 0)])
def test_float64_to_names_a_device_this_machine_lacks(device):
    with pytest.raises(ValueError, match="is not available on this machine"):
        D.float64_to(torch.zeros(2, dtype=torch.float64), device)


@pytest.mark.parametrize(("bad", "exc"), [(5, TypeError), (None, TypeError), ("gpu", ValueError)])
def test_float64_to_refuses_what_is_no_device(bad, exc):
    with pytest.raises(exc, match="^device"):
        D.float64_to(torch.zeros(2, dtype=torch.float64), bad)


@pytest.mark.parametrize(
    ("needed", "shown"), [(2**2000, r"at least 2\*\*2000 bytes"), (float("inf"), "inf bytes")], ids=["2**2000", "inf"]
)
def test_check_fits_names_an_impossible_request_without_overflowing(needed, shown):
    with pytest.raises(ValueError, match=rf"^a test needs about {shown}"):
        D.check_fits(needed, "cpu", "a test", "choose less")
