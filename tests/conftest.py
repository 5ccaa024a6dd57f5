import os

from hypothesis import HealthCheck, settings

# Property tests run on a 2-core CI machine: no per-example deadline, a fixed
# number of examples, and derandomised so a failure reproduces.
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Tests never pick a GPU by accident: they ask for one explicitly when they want it.
os.environ.setdefault("AMP_LAB_DEVICE", "cpu")
os.environ.setdefault("AMP_LAB_PROGRESS", "0")


import pytest  # noqa: E402


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread for a module of small tensors: a second thread only adds contention on a busy
    2-core machine (10x slower for test_scaling's).  A module asks for it with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make this CPU build of torch report one CUDA GPU: ``fake_gpu(name, capability, arch_list)``.  Only
    the facts torch.cuda reports are faked (name, capability, the build's arch list and CUDA version);
    nothing can run on it."""
    import torch

    def install(name: str, capability: tuple[int, int], arch_list, cuda: str = "13.0") -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: name)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: capability)
        monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(arch_list))
        monkeypatch.setattr(torch.version, "cuda", cuda)

    return install
