"""The package's paths on an Apple GPU (MPS), tested on a machine without one.

An Apple GPU has no float64: ``t.double()`` or ``t.to(torch.float64)`` of a tensor on ``mps``
raises, and so does moving a float64 tensor there.  Two kinds of test keep the numerical modules
free of that crash:

* a static check: in these modules every float64 conversion goes through
  ``amp_lab.device.float64_on_cpu`` / ``float64_to``, and every float64 tensor made from numbers
  says ``device="cpu"``;
* ``fake_mps``: CPU tensors that play MPS tensors (a ``TorchFunctionMode`` tags them and
  refuses, as MPS does, float64 and FP8 on the "GPU", ``.numpy()`` of a "GPU" tensor and a CPU
  generator drawing for it), through which every affected public function runs end to end and
  must give the CPU's result, bit for bit.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_unflatten

import amp_lab.device as D
from amp_lab import (
    alignment,
    check,
    formats,
    gradients,
    range_counts,
    ranges,
    scaling,
    tensor_cores,
    training,
)

# --------------------------------------------------------------------------------------------
# The static check
# --------------------------------------------------------------------------------------------

MODULES = (tensor_cores, alignment, ranges, range_counts, gradients, scaling, training, formats, check)


def _is_float64(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr in ("float64", "double")
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
    )


def _is_cpu(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "cpu"


def _is_from_numpy(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "from_numpy"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
    )


def float64_hazards(source: str) -> list[str]:
    """Lines of ``source`` that may make float64 on a tensor's own device (see the module docstring)."""
    found = []
    for node in ast.walk(ast.parse(textwrap.dedent(source))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        method = func.attr if isinstance(func, ast.Attribute) else None
        line = f"line {node.lineno}: {ast.unparse(node)}"
        if method == "double":
            found.append(line)  # t.double() stays on t's device
        elif method in ("to", "type") and any(_is_float64(a) for a in [*node.args, *[k.value for k in node.keywords]]):
            found.append(line)  # t.to(torch.float64) / t.to(dev, torch.float64) / t.type(torch.float64)
        elif method == "to" and _is_from_numpy(func.value):
            found.append(line)  # torch.from_numpy(float64 array).to(dev): float64 onto the device
        elif any(k.arg == "dtype" and _is_float64(k.value) for k in node.keywords) and not any(
            k.arg == "device" and _is_cpu(k.value) for k in node.keywords
        ):
            found.append(line)  # torch.tensor(..., dtype=torch.float64) lands on the default device
    return found


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_float64_goes_through_the_cpu_helpers(module):
    hazards = float64_hazards(inspect.getsource(module))
    assert hazards == [], (
        f"{module.__name__} makes float64 where an Apple GPU has none; use amp_lab.device.float64_on_cpu(t) "
        f"or float64_to(t, device), or pass device='cpu':\n" + "\n".join(hazards)
    )


@pytest.mark.parametrize(
    "bad",
    [
        "a = y.abs().double()",  # ranges._overflow_mask once did
        "f = float((new == w_f).double().mean())",  # range_counts.lost_update_fraction
        "r = torch.from_numpy(Ar @ Br + C).to(dev)",  # tensor_cores.reference_mma
        "p = torch.as_tensor(x, dtype=torch.float64)",
        "p = torch.tensor([1.0], dtype=torch.double, device=dev)",
        "v = t.to(torch.float64)",
        "v = t.to(dev, torch.float64)",
        "v = t.to(device=dev, dtype=torch.float64)",
        "v = t.type(torch.double)",
    ],
)
def test_static_check_finds_each_hazard(bad):
    assert len(float64_hazards(bad)) == 1


@pytest.mark.parametrize(
    "good",
    [
        "a = float64_on_cpu(y)",
        "r = float64_to(torch.from_numpy(acc), dev)",
        "r = torch.from_numpy(acc).float().to(dev)",
        "p = torch.as_tensor(x, dtype=torch.float64, device='cpu')",
        "eps = torch.finfo(torch.float64).eps",
        "same = t.dtype is torch.float64",
    ],
)
def test_static_check_accepts_the_safe_forms(good):
    assert float64_hazards(good) == []


# --------------------------------------------------------------------------------------------
# A fake Apple GPU
# --------------------------------------------------------------------------------------------

_TAG = "_amp_lab_fake_mps"
_MPS = torch.device("mps", 0)
_NO_MPS_DTYPES = (torch.float64, torch.float8_e4m3fn, torch.float8_e5m2)


def _on_mps(x) -> bool:
    return isinstance(x, torch.Tensor) and getattr(x, _TAG, False)


def _mps_device(x) -> bool:
    return (isinstance(x, torch.device) and x.type == "mps") or (isinstance(x, str) and x.strip().startswith("mps"))


def _cpu_device(x) -> bool:
    return (isinstance(x, torch.device) and x.type == "cpu") or x == "cpu"


class FakeMPS(TorchFunctionMode):
    """CPU tensors that behave, for these tests, like tensors on an Apple GPU.

    A tensor made with ``device="mps"``, moved with ``.to("mps")``, or computed from such a tensor
    is tagged as on the GPU and reports ``device == mps:0``; ``.cpu()`` / ``.to("cpu")`` give an
    untagged tensor.  As on a real Apple GPU, a float64 or FP8 result on the GPU raises
    ``TypeError``, ``.numpy()`` of a GPU tensor raises, and so does a CPU generator drawing onto it.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, spec = tree_flatten((args, kwargs))
        if func is torch.device or not any(_on_mps(x) or _mps_device(x) for x in flat):
            return func(*args, **kwargs)
        if func == torch.Tensor.device.__get__:
            return _MPS
        if func == torch.Tensor.is_mps.__get__:
            return True
        if func is torch.Tensor.numpy:
            raise TypeError("can't convert mps:0 device type tensor to numpy. Use Tensor.cpu() first.")
        gen = kwargs.get("generator")
        if isinstance(gen, torch.Generator) and gen.device.type != "mps":
            raise RuntimeError(f"Expected a 'mps' device type for generator but found '{gen.device.type}'")
        to_cpu = func is torch.Tensor.cpu or (func is torch.Tensor.to and any(_cpu_device(x) for x in flat))
        flat = [torch.device("cpu") if _mps_device(x) else x for x in flat]
        args, kwargs = tree_unflatten(flat, spec)
        out = func(*args, **kwargs)
        outs, _ = tree_flatten(out)
        if to_cpu:
            return out.view_as(out) if out is args[0] else out  # a fresh, untagged CPU tensor
        for t in outs:
            if isinstance(t, torch.Tensor):
                if t.dtype in _NO_MPS_DTYPES:
                    raise TypeError(
                        f"Cannot convert a MPS Tensor to {str(t.dtype).removeprefix('torch.')} dtype as the MPS "
                        "framework doesn't support it."
                    )
                setattr(t, _TAG, True)
        return out


@pytest.fixture
def fake_mps(monkeypatch):
    """Runs a test with ``get_device("mps")`` accepted and the :class:`FakeMPS` mode on."""
    real = D._device_available
    monkeypatch.setattr(D, "_device_available", lambda dev: dev.type == "mps" or real(dev))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: None)
    with FakeMPS():
        yield


def to_mps(t: torch.Tensor) -> torch.Tensor:
    return t.to("mps")


def test_the_fake_refuses_what_mps_refuses(fake_mps):
    x = to_mps(torch.ones(3))
    assert x.device.type == "mps" and (x * 2).device.type == "mps"
    assert x.cpu().device.type == "cpu" and x.to("cpu").device.type == "cpu"
    with pytest.raises(TypeError, match="float64"):
        x.double()
    with pytest.raises(TypeError, match="float64"):
        torch.as_tensor([1.0], dtype=torch.float64).to("mps")
    with pytest.raises(TypeError, match="float8"):
        x.to(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="numpy"):
        x.numpy()
    with pytest.raises(RuntimeError, match="generator"):
        torch.randn(2, generator=torch.Generator().manual_seed(0), device="mps")
    assert x.cpu().double().dtype == torch.float64  # on the CPU it is fine


def _values(seed: int = 0, n: int = 4096) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g) * torch.exp2(torch.randint(-40, 40, (n,), generator=g).float())


@pytest.mark.parametrize("fmt", formats.FORMAT_NAMES)
def test_round_to_and_emulate_round_on_mps(fake_mps, fmt):
    """FP8 casts do not exist on MPS: round_to falls back to emulate_round, which must not use float64 there."""
    x = _values()
    for fn in (formats.round_to, formats.emulate_round):
        want = fn(x, fmt)
        got = fn(to_mps(x), fmt)
        assert got.device.type == "mps"
        assert torch.equal(got.cpu(), want) or torch.equal(got.cpu().nan_to_num(), want.nan_to_num())


@pytest.mark.parametrize("fmt", formats.FORMAT_NAMES)
def test_range_report_on_mps(fake_mps, fmt):
    x = _values(1)
    want = range_counts.range_report(x, fmt, scale=2.0**10)
    assert range_counts.range_report(to_mps(x), fmt, scale=2.0**10) == want
    assert range_counts.per_layer_reports({"a": to_mps(x)}, fmt) == {"a": range_counts.range_report(x, fmt)}
    assert range_counts.suggest_log2_scale(to_mps(x), fmt) == range_counts.suggest_log2_scale(x, fmt)


def test_log2_histogram_on_mps(fake_mps):
    x = _values(2)
    want = range_counts.log2_histogram(x, scale=2.0**-3)
    got = range_counts.log2_histogram(to_mps(x), scale=2.0**-3)
    assert (got.edges == want.edges).all() and (got.counts == want.counts).all()
    assert (got.zeros, got.nonfinite, got.outside) == (want.zeros, want.nonfinite, want.outside)


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3"])
def test_lost_update_fraction_on_mps(fake_mps, fmt):
    w, d = _values(3), _values(4) * 1e-4
    assert range_counts.lost_update_fraction(to_mps(w), to_mps(d), fmt) == range_counts.lost_update_fraction(w, d, fmt)


def test_tensor_core_emulation_on_mps(fake_mps):
    g = torch.Generator().manual_seed(5)
    A, B, C = torch.randn(4, 24, generator=g), torch.randn(24, 3, generator=g), torch.randn(4, 3, generator=g)
    D = tensor_cores.mma(to_mps(A), to_mps(B), to_mps(C), inputs="fp16", accumulate="fp16", device="mps")
    assert D.device.type == "mps"
    assert torch.equal(D.cpu(), tensor_cores.mma(A, B, C, inputs="fp16", accumulate="fp16"))
    ref = tensor_cores.reference_mma(to_mps(A), to_mps(B), to_mps(C), inputs="fp16", device="mps")
    # float64 cannot live on the GPU: the reference stays on the CPU, with the CPU's value
    assert ref.dtype == torch.float64 and ref.device.type == "cpu"
    assert torch.equal(ref, tensor_cores.reference_mma(A, B, C, inputs="fp16"))
    assert (D.cpu().double() - ref).abs().max() < 1e-1  # what notebook 02 computes, in the order MPS allows
    s = tensor_cores.running_sum(to_mps(torch.ones(3000)), "fp16", device="mps")
    assert s.device.type == "mps" and tensor_cores.first_stall(s) == (2049, 2048.0)
    curve = tensor_cores.accumulation_curve(64, batch=4, device="mps")
    assert torch.equal(curve.reference, tensor_cores.accumulation_curve(64, batch=4).reference)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8_e5m2", "tf32"])
def test_checks_on_mps(fake_mps, dtype):
    x = _values(6, 16) * 2.0**-20
    answer = formats.round_to(to_mps(x), dtype)
    assert check.check_tensor(answer, to_mps(x), dtype=dtype, show=False).ok
    assert not check.check_tensor(answer * 1.5, to_mps(x), dtype=dtype, show=False).ok
    assert check.check_value(answer[0], to_mps(x)[0], dtype=dtype, show=False).ok
    assert check.check_between(to_mps(x)[0], -1e12, 1e12, show=False).ok


def test_checks_of_half_tensors_on_mps(fake_mps):
    x = to_mps(_values(7, 16) * 2.0**-20).to(torch.float16)
    assert check.check_tensor(x, x, show=False).ok


def test_scaling_to_float32_needs_no_device():
    assert scaling.to_float32(0.1) == float(torch.tensor(0.1, dtype=torch.float32))


def test_scale_explorer_on_mps(fake_mps):
    x = _values(8) * 2.0**-30
    want = ranges.scale_explorer(x, "fp16", log2_scale=3)
    got = ranges.scale_explorer(to_mps(x), "fp16", log2_scale=3)
    assert got.report == want.report and got.readout.value == want.readout.value
    got.slider.value = want.slider.value = 12
    assert got.report == want.report and got.readout.value == want.readout.value
