"""amp_lab.tensor_cores against torch's IEEE arithmetic, exact rationals and published peaks."""

import math
import re
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import accumulation as AE
from amp_lab import alignment as AL
from amp_lab import formats as F
from amp_lab import gpus
from amp_lab import tensor_cores as T
from amp_lab.gpus import tensor_core_generation

# --------------------------------------------------------------------------------------------
# an independent oracle: exact rational arithmetic, rounded by hand
# --------------------------------------------------------------------------------------------


def round_fraction(q: Fraction, name: str) -> Fraction | float:
    """Correctly round an exact rational to a format (ties to even; IEEE overflow to inf)."""
    f = F.FORMATS[name]
    if q == 0:
        return Fraction(0)
    sign = -1 if q < 0 else 1
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    assert Fraction(2) ** e <= a < Fraction(2) ** (e + 1)
    e = max(e, f.emin)
    quantum = Fraction(2) ** (e - f.mantissa_bits)
    v = a / quantum
    n = v.numerator // v.denominator
    rem = v - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    r = n * quantum
    if r > Fraction(f.max):
        return sign * math.inf
    return sign * r


def oracle_mma(A, B, C, inputs, accumulate):
    Ar = F.round_to(A, inputs).tolist()
    Br = F.round_to(B, inputs).tolist()
    Cr = F.round_to(C, "fp32").tolist()
    M, K, N = len(Ar), len(Br), len(Br[0])
    out = []
    for i in range(M):
        row = []
        for j in range(N):
            acc = round_fraction(Fraction(Cr[i][j]), accumulate)
            for k in range(K):
                if isinstance(acc, float):  # already infinite: stays so (same signs only here)
                    break
                acc = round_fraction(acc + Fraction(Ar[i][k]) * Fraction(Br[k][j]), accumulate)
            row.append(float(acc))
        out.append(row)
    return torch.tensor(out, dtype=torch.float64)


def test_round_fraction_agrees_with_torch_casts():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2000, generator=g) * torch.exp2(torch.randint(-30, 18, (2000,), generator=g).float())
    for name in ("fp16", "bf16", "fp32"):
        expected = x.to(F.FORMATS[name].torch_dtype).double()
        got = torch.tensor(
            [float(round_fraction(Fraction(v), name)) for v in x.tolist()], dtype=torch.float64
        )
        assert torch.equal(got, expected)


# --------------------------------------------------------------------------------------------
# mma
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("inputs", ["fp16", "bf16", "fp8_e4m3"])
def test_mma_fp32_accumulation_equals_torch_float32_loop(inputs):
    # products of these inputs are exact in float32, and float32 addition rounds correctly, so a
    # sequential torch float32 loop *is* the model, bit for bit
    g = torch.Generator().manual_seed(1)
    A = torch.randn(8, 64, generator=g) * 3
    B = torch.randn(64, 8, generator=g)
    C = torch.randn(8, 8, generator=g)
    Ar, Br = F.round_to(A, inputs), F.round_to(B, inputs)
    acc = C.clone()
    for k in range(64):
        acc = acc + Ar[:, k : k + 1] * Br[k : k + 1, :]
    D = T.mma(A, B, C, inputs=inputs, accumulate="fp32")
    assert D.dtype == torch.float32 and D.shape == (8, 8)
    assert torch.equal(D, acc)


@pytest.mark.parametrize("accumulate", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("inputs", ["fp16", "bf16", "tf32", "fp8_e5m2"])
def test_mma_equals_exact_rational_oracle(inputs, accumulate):
    g = torch.Generator().manual_seed(2)
    A = torch.rand(3, 24, generator=g) * 4
    B = torch.rand(24, 3, generator=g) * 4
    C = torch.randn(3, 3, generator=g)
    D = T.mma(A, B, C, inputs=inputs, accumulate=accumulate)
    assert torch.equal(D.double(), oracle_mma(A, B, C, inputs, accumulate))


@settings(max_examples=60)
@given(
    st.lists(st.floats(-300, 300, width=16), min_size=8, max_size=8),
    st.lists(st.floats(-300, 300, width=16), min_size=8, max_size=8),
    st.sampled_from(["fp16", "bf16"]),
)
def test_mma_property_against_rationals(a, b, accumulate):
    A = torch.tensor([a])
    B = torch.tensor([b]).T
    C = torch.zeros(1, 1)
    D = T.mma(A, B, C, inputs="fp16", accumulate=accumulate)
    assert torch.equal(D.double(), oracle_mma(A, B, C, "fp16", accumulate))


def test_mma_breaks_ties_with_the_part_float64_cannot_hold():
    # 2**-60 + (1 + 2**-8) is just above a bf16 tie; float64 alone would lose 2**-60 and round to even
    tie_lo = 1 + 2**-8  # halfway between 1 and 1 + 2**-7
    tie_hi = 1 + 3 * 2**-8  # halfway between 1 + 2**-7 and 1 + 2**-6
    cases = [
        (tie_lo, 2.0**-60, 1 + 2**-7),
        (tie_lo, -(2.0**-60), 1.0),
        (tie_lo, 0.0, 1.0),
        (tie_hi, -(2.0**-60), 1 + 2**-7),
        (tie_hi, 0.0, 1 + 2**-6),
    ]
    for a, c, expected in cases:
        D = T.mma([[a]], [[1.0]], [[c]], inputs="fp16", accumulate="bf16")
        assert D.item() == expected, (a, c)
        assert float(round_fraction(Fraction(a) + Fraction(c), "bf16")) == expected


def test_mma_default_c_and_reference():
    A = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    B = torch.eye(2)
    assert torch.equal(T.mma(A, B), A)
    g = torch.Generator().manual_seed(3)
    A = torch.randn(4, 16, generator=g)
    B = torch.randn(16, 4, generator=g)
    ref = T.reference_mma(A, B, inputs="fp16")
    assert ref.dtype == torch.float64
    expected = F.round_to(A, "fp16").double() @ F.round_to(B, "fp16").double()
    assert torch.allclose(ref, expected, rtol=0, atol=1e-12)
    err32 = (T.mma(A, B, accumulate="fp32").double() - ref).abs().max()
    err16 = (T.mma(A, B, accumulate="fp16").double() - ref).abs().max()
    assert err32 < err16


def test_mma_bad_arguments():
    A, B = torch.ones(2, 3), torch.ones(3, 2)
    with pytest.raises(ValueError, match="inner dimension"):
        T.mma(A, torch.ones(2, 2))
    with pytest.raises(ValueError, match="C must have shape"):
        T.mma(A, B, torch.ones(3, 3))
    with pytest.raises(ValueError, match="inputs"):
        T.mma(A, B, inputs="fp32")
    with pytest.raises(ValueError, match="accumulate"):
        T.mma(A, B, accumulate="fp8_e4m3")
    with pytest.raises(ValueError, match="fmt"):
        T.mma(A, B, accumulate="fp64")
    with pytest.raises(ValueError, match="2-D"):
        T.mma(torch.ones(3), B)
    with pytest.raises(ValueError, match="device"):
        T.mma(A, B, device="tpu")


# --------------------------------------------------------------------------------------------
# running sums and the stall
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_running_sum_of_ones_stalls_like_torch(name, dtype):
    n = 2100 if name == "fp16" else 300
    ours = T.running_sum(torch.ones(n), name)
    acc = torch.zeros((), dtype=dtype)
    one = torch.ones((), dtype=dtype)
    expected = []
    for _ in range(n):
        acc = acc + one  # torch's own low-precision addition
        expected.append(acc.item())
    assert ours.tolist() == expected
    p = F.FORMATS[name].precision
    assert T.first_stall(ours) == (2**p + 1, float(2**p))  # 2048 for fp16, 256 for bf16
    assert T.first_stall(T.running_sum(torch.ones(n), "fp32")) is None


def test_running_sum_fp32_equals_torch_float32_loop():
    g = torch.Generator().manual_seed(4)
    v = torch.randn(3, 200, generator=g) * 100
    acc = torch.zeros(3)
    expected = torch.empty_like(v)
    for k in range(200):
        acc = acc + v[:, k]
        expected[:, k] = acc
    assert torch.equal(T.running_sum(v, "fp32"), expected)
    with pytest.raises(ValueError, match="values"):
        T.running_sum(torch.ones(0), "fp16")


# --------------------------------------------------------------------------------------------
# error against K, and its widget
# --------------------------------------------------------------------------------------------


def test_accumulation_curve():
    curve = T.accumulation_curve(128, batch=4, seed=0)
    assert curve.reference.shape == (4, 128) and set(curve.errors) == {"fp32", "fp16"}
    # oracle: a torch float32 loop over the same exact products
    g = torch.Generator().manual_seed(0)
    a = torch.rand(4, 128, generator=g)
    b = torch.rand(4, 128, generator=g)
    p = F.round_to(a, "fp16") * F.round_to(b, "fp16")  # exact in float32
    acc = torch.zeros(4)
    for k in range(128):
        acc = acc + p[:, k]
        assert torch.equal(curve.partial["fp32"][:, k], acc.double())
    assert torch.allclose(curve.reference[:, -1], p.double().sum(1), rtol=1e-15)
    assert curve.errors["fp32"][0] == 0  # one exact product
    assert curve.errors["fp16"][-1] > 10 * curve.errors["fp32"][-1]
    row = curve.at(128)
    assert row["fp16_value"] == curve.partial["fp16"][0, -1].item()
    with pytest.raises(ValueError, match="k"):
        curve.at(129)
    with pytest.raises(ValueError, match="accumulators"):
        T.accumulation_curve(8, accumulators=("fp8_e5m2",))


def test_accumulation_explorer_headless():
    ex = AE.accumulation_explorer(k=16, k_max=256, batch=4)
    renders = ex.pane.renders
    assert "amp-accumulation-k" in ex.slider._dom_classes
    ex.slider.value = 200
    row = ex.curve.at(200)
    cells = re.findall(r"class='amp-acc-value'>([^<]*)<", ex.readout.value)
    assert [float(c) for c in cells] == [row["reference"], row["fp32_value"], row["fp16_value"]]
    assert "K = 200" in ex.readout.value
    assert ex.pane.renders == renders + 1
    assert list(ex._marker.get_xdata()) == [200, 200]
    assert ex.pane.image.value[:4] == b"\x89PNG"
    # the blitted update shows what a full redraw of the figure shows (a few antialiased pixels
    # where the marker crosses the axes frame are drawn in the other order)
    import io

    import numpy as np
    from PIL import Image

    blitted = np.asarray(Image.open(io.BytesIO(ex.pane.image.value)).convert("RGBA"))
    full = np.asarray(Image.open(io.BytesIO(ex.pane.refresh())).convert("RGBA"))
    assert blitted.shape == full.shape
    differ = (blitted != full).any(axis=-1)
    assert differ.sum() <= 10, differ.sum()
    ex.slider.value = 20
    moved = np.asarray(Image.open(io.BytesIO(ex.pane.image.value)).convert("RGBA"))
    assert (moved != blitted).any(axis=-1).sum() > 50  # the marker really moved


# --------------------------------------------------------------------------------------------
# generations and alignment
# --------------------------------------------------------------------------------------------


def test_generations_table_reuses_hardware():
    rows = T.generations_table()
    caps = [tuple(int(p) for p in r["capability"].split(".")) for r in rows]
    for r, cap in zip(rows, caps, strict=True):
        tc = tensor_core_generation(cap)
        assert r["architecture"] == tc.architecture
        assert r["generation"] == (tc.generation if tc.has_tensor_cores else "-")
    volta = rows[caps.index((7, 0))]
    assert "4×4×4" in volta["per clock (per Tensor Core)"] and volta["precisions"] == "FP16"
    assert rows[caps.index((6, 0))]["precisions"] == "(no Tensor Cores)"
    assert "FP8" in rows[caps.index((9, 0))]["precisions"]
    # Ada shares Hopper's generation number but not its per-SM rates or its warp-group MMA
    ada = rows[caps.index((8, 9))]
    assert ada["reference part"] != "H100" and "wgmma" not in ada["MMA instruction"]


@pytest.mark.parametrize(
    "generation, sms, boost_ghz, published_tflops",
    [(1, 80, 1.530, 125.0), (3, 108, 1.410, 312.0), (4, 132, 1.830, 989.4)],  # V100, A100, H100 SXM
)
def test_per_clock_figures_reproduce_published_peaks(generation, sms, boost_ghz, published_tflops):
    d = gpus.TENSOR_CORE_DETAILS[generation]
    per_sm = d.fma_per_tensor_core_per_clock * d.tensor_cores_per_sm
    tflops = 2 * per_sm * sms * boost_ghz * 1e9 / 1e12
    assert tflops == pytest.approx(published_tflops, rel=0.01)


def test_alignment_helpers():
    for name in ("fp16", "bf16", "fp8_e4m3", "fp32"):
        bytes_per = torch.finfo(F.FORMATS[name].torch_dtype).bits // 8
        assert AL.alignment_multiple(name) * bytes_per == 16
    assert AL.alignment_multiple("tf32") == 4
    assert AL.pad_to_multiple(4095, 8) == 4096
    assert AL.pad_to_multiple(4096, 8) == 4096
    assert AL.pad_to_multiple(50257, 64) == 50304
    with pytest.raises(ValueError, match="multiple"):
        AL.pad_to_multiple(10, 0)


def test_alignment_demo_on_cpu_says_it_needs_cuda():
    demo = AL.alignment_demo(4096, device="cpu")
    assert demo.rows == []
    assert demo.reading.codes == ("tc.alignment_skipped", "tc.alignment_would_show")
    facts = demo.reading.facts
    assert (facts["n"], facts["n1"], facts["multiple"], facts["repeats"]) == (4096, 4095, 8, 20)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_alignment_demo_on_cuda():
    demo = AL.alignment_demo(1024, device="cuda", repeats=5, warmup=2)
    assert [r["n"] for r in demo.rows] == [1024, 1023]
    assert demo.reading.outcome == "tc.alignment_measured" and demo.reading.facts["work"] == 1023**3 / 1024**3
    assert all(r["median_ms"] > 0 for r in demo.rows)
    D = T.mma(torch.ones(2, 3), torch.ones(3, 2), device="cuda")
    assert D.device.type == "cuda" and D.tolist() == [[3.0, 3.0], [3.0, 3.0]]


# --------------------------------------------------------------------------------------------
# time_matmul on a second GPU, without one
# --------------------------------------------------------------------------------------------


class _FakeCuda:
    """Just enough of torch.cuda for time_matmul's CUDA branch on a CPU: a current device that
    ``torch.cuda.device`` sets, and events that note which device was current when recorded."""

    def __init__(self, monkeypatch, count=2):
        self.current = 0
        self.recorded_on = []
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                self.device = None

            def record(self, stream=None):
                fake.recorded_on.append(fake.current)

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return 1.0

        class device:  # noqa: N801 - torch's name
            def __init__(self, dev):
                self.index = torch.device(dev).index if not isinstance(dev, int) else dev

            def __enter__(self):
                self.before, fake.current = fake.current, self.index
                return self

            def __exit__(self, *exc):
                fake.current = self.before
                return False

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 << 30, 80 << 30))
        # what torch's allocator holds (device.available_bytes adds it back): nothing on the fake GPUs.  Faked
        # too so that the test holds on a machine with one real GPU, where cuda:1 does not exist.
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "device", device)
        # the operands on the CPU: this machine has no CUDA memory to put them in
        monkeypatch.setattr(
            AL, "_matmul_operands", lambda n, dtype, dev: (torch.ones(n, n, dtype=dtype),) * 2
        )


def test_time_matmul_records_events_on_its_own_gpu(monkeypatch):
    # torch.cuda.Event.record() uses the *current* device's stream: timing cuda:1 while cuda:0 is
    # current would time nothing useful.  time_matmul must make its device current.
    fake = _FakeCuda(monkeypatch)
    r = AL.time_matmul(8, dtype=torch.float32, device=torch.device("cuda", 1), repeats=3, warmup=1, inner=1)
    assert r["samples_ms"] == [1.0, 1.0, 1.0]
    assert fake.recorded_on == [1] * 6
    assert fake.current == 0  # and gives the learner's current device back


def test_alignment_demo_refuses_what_memory_cannot_hold(monkeypatch):
    fake = _FakeCuda(monkeypatch)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (8 << 30, 16 << 30))
    monkeypatch.setattr(AL, "_matmul_operands", lambda *a: pytest.fail("allocated before the memory check"))
    with pytest.raises(ValueError, match=r"alignment_demo\(n=32768\).*refused before allocating"):
        AL.alignment_demo(2**15, dtype="fp16", device="cuda:1")
    assert fake.recorded_on == []


# ---- every bad input gets a clear error, no call hangs ----

import time  # noqa: E402

import numpy as np  # noqa: E402

from amp_lab import tensor_cores as tc  # noqa: E402


def test_mma_refuses_huge_products_before_starting():
    A = torch.zeros(2048, 2048)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"M\*N\*K <= 16,777,216.*smaller inputs"):
        tc.mma(A, A)
    with pytest.raises(ValueError, match=r"K <= 65,536"):
        tc.mma(torch.ones(1, 100_000), torch.ones(100_000, 1))
    assert time.perf_counter() - t0 < 2.0  # refused, not attempted
    # the largest allowed product still runs, and reference_mma has no emulation limit
    A = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    assert tc.mma(A, A).shape == (256, 256)
    assert tc.reference_mma(torch.ones(300, 300), torch.ones(300, 300)).shape == (300, 300)


@pytest.mark.parametrize(
    "bad,words",
    [
        (torch.ones(2, 2, dtype=torch.complex64), "complex"),
        (torch.ones(2, 2, dtype=torch.bool), "bool"),
        ([[True, False], [False, True]], "bool"),
        ("abc", "A must be"),
        (None, "A must be"),
    ],
)
def test_mma_refuses_complex_bool_and_non_numbers(bad, words):
    with pytest.raises(TypeError, match=words):
        tc.mma(bad, torch.ones(2, 2))


@pytest.mark.parametrize(
    "bad,err,words",
    [
        (torch.ones(3, dtype=torch.complex64), TypeError, "complex"),
        (torch.ones(3, dtype=torch.bool), TypeError, "bool"),
        ("1 2 3", TypeError, "values"),
        (torch.ones(100_000), ValueError, "65,536"),
        (torch.ones(300, 60_000), ValueError, "16,777,216"),
    ],
)
def test_running_sum_refuses_bad_values(bad, err, words):
    with pytest.raises(err, match=words):
        tc.running_sum(bad, "fp16")


def test_running_sum_accepts_numpy_and_int_tensors():
    expect = tc.running_sum(torch.ones(5), "fp16")
    assert torch.equal(tc.running_sum(np.ones(5, dtype=np.float32), "fp16"), expect)
    assert torch.equal(tc.running_sum(torch.ones(5, dtype=torch.int32), "fp16"), expect)


def test_first_stall_wants_one_running_sum():
    # flattened, rows [0, 1] and [1, 2] would "stall" where one ends and the next begins
    with pytest.raises(ValueError, match="1-D"):
        tc.first_stall(torch.tensor([[0.0, 1.0], [1.0, 2.0]]))
    with pytest.raises(ValueError, match="1-D"):
        tc.first_stall(torch.tensor(3.0))
    with pytest.raises(TypeError, match="bool"):
        tc.first_stall(torch.tensor([True, True]))
    assert tc.first_stall([0.0, 1.0, 2.0]) is None
    assert tc.first_stall([]) is None
    assert tc.first_stall(tc.running_sum(torch.ones(3000), "fp16")) == (2049, 2048.0)


@pytest.mark.parametrize(
    "kwargs,err,words",
    [
        ({"k_max": 2**16, "batch": 4096}, ValueError, "batch \\* k_max"),
        ({"k_max": 2**17}, ValueError, "k_max"),
        ({"k_max": 64, "batch": 0}, ValueError, "batch"),
        ({"k_max": 64, "seed": -1}, ValueError, "seed"),
        ({"k_max": 64, "seed": 1.5}, TypeError, "seed"),
        ({"k_max": 64, "low": True}, TypeError, "low"),
        ({"k_max": 64, "high": math.nan}, ValueError, "high"),
        ({"k_max": 64, "low": 1.0, "high": 0.5}, ValueError, "high must be > low"),
        ({"k_max": 64, "accumulators": ()}, ValueError, "at least one"),
        ({"k_max": 64, "accumulators": ("fp32", "fp32")}, ValueError, "twice"),
        ({"k_max": 64, "accumulators": 5}, TypeError, "accumulators"),
        ({"k_max": 64, "accumulators": ("fp8_e4m3",)}, ValueError, "accumulators"),
    ],
)
def test_accumulation_curve_bad_arguments(kwargs, err, words):
    t0 = time.perf_counter()
    with pytest.raises(err, match=words):
        tc.accumulation_curve(**kwargs)
    assert time.perf_counter() - t0 < 1.0  # refused before any work


def test_accumulation_curve_takes_one_accumulator_name():
    curve = tc.accumulation_curve(16, batch=2, accumulators="fp16")
    assert curve.accumulators == ("fp16",)  # not ('f', 'p', '1', '6')


def test_accumulation_explorer_checks_k_before_the_curve():
    with pytest.raises(ValueError, match="k must be <= 64"):
        AE.accumulation_explorer(k=65, k_max=64, batch=2)
    with pytest.raises(TypeError, match="k must be an integer"):
        AE.accumulation_explorer(k=1.5, k_max=64, batch=2)


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"repeats": 10**12}, "repeats must be <= 10000"),
        ({"warmup": 10**12}, "warmup must be <= 10000"),
        ({"repeats": 3400}, "warmup \\+ 3 \\* repeats"),
        ({"repeats": 0}, "repeats must be >= 1"),
        ({"repeats": True}, "repeats must be an integer"),
    ],
)
def test_alignment_demo_bounds_its_work(kwargs, words):
    with pytest.raises(ValueError, match=words):
        AL.alignment_demo(4096, device="cpu", **kwargs)


@pytest.mark.parametrize(
    "kwargs,words",
    [({"repeats": -5}, "repeats must be >= 1"), ({"warmup": -1}, "warmup"), ({"dtype": "int8"}, "dtype")],
)
def test_alignment_demo_validates_before_skipping(kwargs, words):
    # without a GPU nothing is timed, but a bad argument is still named (it used to print "-5 samples")
    with pytest.raises(ValueError, match=words):
        AL.alignment_demo(4096, device="cpu", **kwargs)


@pytest.mark.parametrize(
    "caps,err,words",
    [
        ((8, 0), ValueError, "one capability"),
        ("8.0", TypeError, "capabilities"),
        ([], ValueError, "at least one"),
        (None, TypeError, "capabilities"),
        ([(8,)], ValueError, "capability"),
    ],
)
def test_generations_table_bad_capabilities(caps, err, words):
    with pytest.raises(err, match=words):
        tc.generations_table(caps)


# --------------------------------------------------------------------------------------------
# the output rounding autocast adds, accumulate rates, tile and wave quantization
# --------------------------------------------------------------------------------------------


def test_output_errors_against_an_independent_median():
    curve = T.accumulation_curve(4096, batch=32, seed=0)
    stored = curve.output_errors("fp16")
    ref = curve.reference
    for acc in ("fp32", "fp16"):
        out = curve.partial[acc].float().half().double()
        rel = ((out - ref).abs() / ref.abs()).median(dim=0).values
        assert torch.equal(stored[acc], rel)
    # the FP32 accumulator's stored error is the final FP16 rounding: at most eps16/2 for each value
    u16 = torch.finfo(torch.float16).eps / 2
    assert float(stored["fp32"].max()) <= u16
    # the notebook's lesson: the practical ratio is far below the raw one, and still grows with K
    raw = curve.errors["fp16"] / curve.errors["fp32"]
    practical = stored["fp16"] / stored["fp32"]
    assert practical[-1] < raw[-1] / 10
    assert practical[15] < practical[255] < practical[4095]


def test_accumulate_rates_match_the_datasheets_and_the_lesson():

    by_part = {r["part"]: r for r in gpus.ACCUMULATE_RATES}
    # the FP32-accumulate figures are the dense FP16 rates race's datasheets hold (an independent table)
    for part, name in [
        ("A100", "NVIDIA A100-SXM4-80GB"),
        ("H100 SXM", "NVIDIA H100 80GB HBM3"),
        ("RTX 4090", "NVIDIA GeForce RTX 4090"),
    ]:
        assert by_part[part]["fp32_accumulate"] == pytest.approx(
            gpus.datasheet_entry(name).fp16_tflops, rel=1e-3
        )
    for r in gpus.ACCUMULATE_RATES:
        ratio = r["fp16_accumulate"] / r["fp32_accumulate"]
        assert ratio == pytest.approx(2.0 if r["kind"] == "GeForce" else 1.0, rel=1e-2), r
    assert {r["kind"] for r in gpus.ACCUMULATE_RATES} == {"GeForce", "data centre"}


@pytest.mark.parametrize("flag", T.MATMUL_FLAGS)
@pytest.mark.parametrize("value", [True, False])
def test_matmul_flags_are_read_live_from_torch(flag, value):
    """02 reads torch's three accumulator switches as they are now: set one here (torch's own setter, which
    the CPU build keeps too) and its reading follows; FP16 accumulation and split-K are told apart."""
    matmul = torch.backends.cuda.matmul
    before = getattr(matmul, flag)
    try:
        setattr(matmul, flag, value)
        readings = {r.facts["flag"]: r for r in T.matmul_flags()}
    finally:
        setattr(matmul, flag, before)
    assert set(readings) == set(T.MATMUL_FLAGS) == {
        "allow_fp16_accumulation",
        "allow_fp16_reduced_precision_reduction",
        "allow_bf16_reduced_precision_reduction",
    }
    r = readings[flag]
    assert r.facts["value"] is value
    kind = "fp16_accumulation" if flag == "allow_fp16_accumulation" else "split_k"
    assert r.outcome == f"tc.{kind}_{'on' if value else 'off'}"
    assert r.facts["label"] == ("BF16" if "bf16" in flag else "FP16")
    assert f"{flag} = {value}" in str(r)
    assert getattr(matmul, flag) == before  # restored


def test_fp16_accumulation_is_an_opt_in_in_this_torch():
    """torch's default (2.7 on, read live): FP16 matmuls accumulate in FP32; FP16 accumulation needs the opt-in."""
    reading = next(r for r in T.matmul_flags() if r.facts["flag"] == "allow_fp16_accumulation")
    assert torch.backends.cuda.matmul.allow_fp16_accumulation is False
    assert reading.outcome == "tc.fp16_accumulation_off"


def _tiles_by_enumeration(m, n, tm, tn, sms):
    """Oracle: walk the tiles one by one, count the useful output elements and fill waves."""
    tiles, useful = 0, 0
    for i in range(0, m, tm):
        for j in range(0, n, tn):
            tiles += 1
            useful += min(tm, m - i) * min(tn, n - j)
    waves, left = 0, tiles
    while left > 0:
        waves += 1
        left -= sms
    return tiles, useful, waves


def test_tile_quantization_by_hand():
    q = AL.tile_quantization(1024, 1024)
    assert (q["tiles"], q["waves"], q["tile_efficiency"]) == (64, 1, 1.0)
    assert q["wave_efficiency"] == 64 / 108
    q = AL.tile_quantization(1281, 1281)  # 11 x 11 tiles, the last row and column 1 wide
    assert (q["tiles"], q["waves"]) == (121, 2)
    assert q["tile_efficiency"] == 1281 * 1281 / (121 * 128 * 128)
    assert q["efficiency"] == q["tile_efficiency"] * 121 / 216
    # GPT-2's vocabulary padded to 64 fills 64-wide tiles exactly
    assert AL.tile_quantization(4096, 50304, tile_n=64)["tile_efficiency"] == 1.0
    assert AL.tile_quantization(4096, 50257, tile_n=64)["tile_efficiency"] == 50257 / 50304


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 700),
    st.integers(1, 700),
    st.sampled_from([16, 64, 128, 256]),
    st.sampled_from([32, 64, 128]),
    st.integers(1, 150),
)
def test_tile_quantization_matches_enumeration(m, n, tm, tn, sms):
    q = AL.tile_quantization(m, n, tile_m=tm, tile_n=tn, sms=sms)
    tiles, useful, waves = _tiles_by_enumeration(m, n, tm, tn, sms)
    assert (q["tiles"], q["waves"]) == (tiles, waves)
    assert q["tile_efficiency"] == pytest.approx(useful / (tiles * tm * tn), rel=1e-15)
    assert 0 < q["efficiency"] <= 1


@pytest.mark.parametrize(
    "kwargs, err, word",
    [
        (dict(m=0, n=4), ValueError, "m"),
        (dict(m=4, n=-1), ValueError, "n"),
        (dict(m=4.0, n=4), TypeError, "m"),
        (dict(m=True, n=4), TypeError, "m"),
        (dict(m=4, n=4, tile_m=0), ValueError, "tile_m"),
        (dict(m=4, n=4, tile_n="64"), TypeError, "tile_n"),
        (dict(m=4, n=4, sms=0), ValueError, "sms"),
        (dict(m=2**40, n=4), ValueError, "m"),
    ],
)
def test_tile_quantization_bad_arguments(kwargs, err, word):
    with pytest.raises(err, match=word):
        AL.tile_quantization(**kwargs)


def test_the_reduced_precision_flag_notebook_02_reads_exists():
    # the flag the docstring and notebook 02 name exists in this torch and can be read without a GPU
    assert isinstance(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction, bool)


# --------------------------------------------------------------------------------------------
# readouts: codes and numbers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, index, stalled", [("fp16", 2049, 2048.0), ("bf16", 257, 256.0), ("fp8_e4m3", 17, 16.0)]
)
def test_stall_reading(fmt, index, stalled):
    r = T.stall_reading(3000, fmt)
    assert r.outcome == "tc.stalls"
    assert (r.facts["index"], r.facts["stalled"], r.facts["final"], r.facts["start"]) == (
        index,
        stalled,
        stalled,
        stalled,
    )
    # oracle for the two torch stores: torch's own arithmetic adds 1 to the stalled value and gets it back
    if fmt in ("fp16", "bf16"):
        x = torch.tensor(stalled, dtype=F.FORMATS[fmt].torch_dtype)
        assert (x + 1).item() == stalled


def test_stall_reading_without_a_stall():
    r = T.stall_reading(3000, "fp32")
    assert r.outcome == "tc.no_stall" and r.facts["final"] == 3000.0 and "index" not in r.facts


def test_accumulation_reading():
    curve = T.accumulation_curve(256, batch=4, seed=0)
    r = curve.reading("fp16", "fp32")
    assert r.codes == ("tc.accumulator_ratio", "tc.accumulator_why")
    f = r.facts
    assert f["k"] == 256 and f["u_ratio"] == 2.0**13  # (2**-11) / (2**-24)
    assert f["e_low"] == float(curve.errors["fp16"][-1]) and f["e_high"] == float(curve.errors["fp32"][-1])
    assert f["ratio"] == f["e_low"] / f["e_high"] and f["ratio"] > 10


def test_padding_reading_by_hand():
    # GPT-2's vocabulary: 50257 -> 50264 (a multiple of 8) or 50304 (of 64); 128x64 tiles
    r = AL.padding_reading(4096, 50257, tile_n=64)
    assert r.outcome == "tc.padding_small_gain"
    assert (r.facts["n8"], r.facts["n_tile"]) == (50264, 50304)
    assert r.facts["useful_tile"] == 1.0 and r.facts["gain"] == pytest.approx(40 / 50304, rel=1e-12)
    # a narrow layer: 104 of 128 columns useful against all 128
    r = AL.padding_reading(128, 100, tile_n=64)
    assert r.outcome == "tc.padding_worth_it" and r.facts["gain"] == pytest.approx(1 - 104 / 128, rel=1e-12)


# --- stride-0 (expanded) views are sized by their elements, before any cast or copy (issue 24) -----------


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_expanded_views_are_sized_by_elements_before_any_cast(dtype):
    # a 10**12-element view of one element: its storage is 2 or 4 bytes, its work is by numel
    big = torch.zeros(1, dtype=dtype).expand(10**6, 10**6)
    for call in (lambda: tc.mma(big, big), lambda: tc.reference_mma(big, big)):
        with pytest.raises(ValueError, match="too much work|refused before allocating"):
            call()
    with pytest.raises(ValueError, match="C must have shape"):
        tc.mma(torch.ones(2, 2), torch.ones(2, 2), torch.zeros(1, dtype=dtype).expand(10**6, 10**6))
    with pytest.raises(ValueError, match="1,000,000,000,000 elements"):
        tc.first_stall(torch.zeros(1, dtype=dtype).expand(10**12))
