"""What a Tensor Core computes, emulated (taught in ``02_tensor_cores``).

A Tensor Core computes ``D = A·B + C`` on a small tile, one MMA (matrix multiply-accumulate):
low-precision inputs (FP16, BF16, TF32, FP8), products formed exactly, and a running sum kept in
an accumulator (FP32, or FP16 where the library asks for it).  This module emulates that
arithmetic on any device with every rounding modelled exactly (see below for where hardware
differs), so a CPU-only learner can see why the accumulator's precision matters as the inner
dimension ``K`` grows:

* ``mma(A, B, C, inputs=, accumulate=)`` - the emulated multiply-accumulate; ``reference_mma``
  - the same product in float64.
* ``running_sum(values, accumulate=)`` - every partial sum of a sequential accumulation (the
  famous stall: adding 1.0 to an FP16 sum stops at 2048).
* ``accumulation_curve`` and the ``accumulation_explorer`` widget - relative error against float64
  for every ``K`` up to ``k_max``; ``AccumulationCurve.output_errors`` the same error once the
  result is rounded to FP16/BF16, as an autocast matmul returns it.
* ``ACCUMULATE_RATES`` - datasheet rates of FP16 accumulation against FP32 accumulation
  (the same on data-centre parts, half on GeForce cards).
* ``generations_table()`` - Tensor Core generations from ``amp_lab.hardware.tensor_core_generation``
  plus per-clock throughput from NVIDIA's whitepapers.
* ``alignment_multiple``, ``pad_to_multiple``, ``time_matmul``, ``alignment_demo`` - why matrix
  dimensions should be multiples of 8 for FP16, measured with CUDA events when a GPU is present;
  ``tile_quantization`` - the work a GEMM wastes on partial tiles and partial waves.

The arithmetic model: inputs rounded to ``inputs`` (as ``formats.round_to`` does), every
product exact, then added one at a time in ``k`` order, each addition rounded once (to nearest,
ties to even) to the accumulator format.  Real Tensor Cores add several products at once and,
as Fasi, Higham, Mikaitis and Pranesh measured ("Numerical behavior of NVIDIA tensor cores",
PeerJ CS 2021), align and truncate the addends, so their last bits can differ from this model;
the lesson (the accumulator's precision decides how the error grows with ``K``) does not.

Which accumulator a real matmul uses is not autocast's choice: autocast only picks the input
dtype, and the library kernel (cuBLAS) picks the accumulator.  cuBLAS accumulates FP16/BF16 GEMMs
in FP32 by default, but PyTorch lets it reduce partial sums in reduced precision
(``torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction``, True by default), and
Hopper's FP8 GEMMs keep only about 14 bits in their accumulator (DeepSeek-V3 technical report,
2024).
"""

from __future__ import annotations

import contextlib
import html
import io
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from . import formats
from ._checks import (
    MAX_REPEATS,
    ArgumentTypeError,
    check_choice,
    check_float,
    check_instance,
    check_int,
    check_seed,
)
from .device import amp_dtype, check_fits, float64_on_cpu, float64_to, get_device, parse_dtype
from .gpus import tensor_core_generation
from .widgets import FigurePane

__all__ = [
    "INPUT_FORMATS",
    "ACCUMULATE_FORMATS",
    "TENSOR_CORE_DETAILS",
    "ARCHITECTURE_DETAILS",
    "mma",
    "reference_mma",
    "running_sum",
    "first_stall",
    "AccumulationCurve",
    "accumulation_curve",
    "AccumulationExplorer",
    "accumulation_explorer",
    "generations_table",
    "ACCUMULATE_RATES",
    "alignment_multiple",
    "pad_to_multiple",
    "A100_SMS",
    "tile_quantization",
    "time_matmul",
    "AlignmentDemo",
    "alignment_demo",
]

# Inputs whose pairwise products fit float64 exactly (at most 26 significant bits each).
INPUT_FORMATS = ("fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2")
ACCUMULATE_FORMATS = ("fp32", "fp16", "bf16")

# Bounds on the emulation's work, checked before it starts.  The emulation adds one term at a time
# (a Python-level loop over K, each step a few numpy passes over an M×N tile): about 15 ns per
# element and 30 µs per step on a laptop core, so these limits keep any call within a few seconds.
MAX_MMA_WORK = 1 << 24  # M * N * K of one mma (a 256×256×256 product)
MAX_K = 1 << 16  # additions in one sequential sum: mma's K, running_sum's length, accumulation_curve's k_max
MAX_CURVE_ELEMENTS = 1 << 22  # batch * k_max of accumulation_curve (the default is 32 * 4096 = 2**17)


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``s = fl(a + b)`` and the exact error ``e`` with ``a + b == s + e`` (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _add_rounded(acc: np.ndarray, p: np.ndarray, f: formats.FloatFormat) -> np.ndarray:
    """``acc + p`` rounded once to ``f`` (correctly: the float64 sum plus its exact error)."""
    with np.errstate(all="ignore"):
        s, err = _two_sum(acc, p)
    return formats._round_array(s, f, err)


def _matrix(name: str, x, dev: torch.device) -> torch.Tensor:
    # real numbers only: a bool or complex matrix is refused (its imaginary part would be dropped)
    x = formats._real_tensor(x, name, f"{name} must be a 2-D tensor or nested list of numbers")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D (a matrix), got shape {tuple(x.shape)}")
    return x.to(dev).float()


def _operands(A, B, C, inputs, accumulate, device, work_limit: bool = False):
    dev = get_device(device)
    work = torch.device("cpu")
    check_choice("inputs", formats.get_format(inputs).name, INPUT_FORMATS)
    check_choice("accumulate", formats.get_format(accumulate).name, ACCUMULATE_FORMATS)
    A = _matrix("A", A, work)
    B = _matrix("B", B, work)
    if A.shape[1] != B.shape[0]:
        raise ValueError(
            f"A's columns must match B's rows (inner dimension K), got {tuple(A.shape)} and {tuple(B.shape)}"
        )
    M, N = A.shape[0], B.shape[1]
    if work_limit:
        K = A.shape[1]
        if K > MAX_K:
            raise ValueError(
                f"mma emulates one addition at a time, so K = {K:,} (A's columns) means {K:,} steps: the limit "
                f"is K <= {MAX_K:,} (2**16); use smaller inputs, or reference_mma / torch.matmul for big products"
            )
        if max(M, 1) * max(N, 1) * max(K, 1) > MAX_MMA_WORK:
            raise ValueError(
                f"mma emulates one addition at a time, so A {tuple(A.shape)} @ B {tuple(B.shape)} "
                f"(M*N*K = {M * N * K:,}) is too much work: the limit is M*N*K <= {MAX_MMA_WORK:,} (2**24); "
                "use smaller inputs (a tile such as 16×16×256 shows the same rounding), or reference_mma / "
                "torch.matmul for big products"
            )
    # float64 copies of A, B, C and the accumulator
    check_fits(8 * (M * A.shape[1] + A.shape[1] * N + 2 * M * N), work, "the emulated product", "use smaller inputs")
    if C is None:
        C = torch.zeros(M, N, device=work)
    else:
        C = _matrix("C", C, work)
        if tuple(C.shape) != (M, N):
            raise ValueError(f"C must have shape {(M, N)} (rows of A, columns of B), got {tuple(C.shape)}")
    Ar = float64_on_cpu(formats.round_to(A, inputs)).numpy()
    Br = float64_on_cpu(formats.round_to(B, inputs)).numpy()
    return dev, Ar, Br, float64_on_cpu(C).numpy()


def mma(A, B, C=None, *, inputs="fp16", accumulate="fp32", device=None) -> torch.Tensor:
    """Emulate a Tensor Core's ``D = A·B + C``; returns float32 ``D`` on ``device``.

    ``A`` (M×K) and ``B`` (K×N) are rounded to ``inputs`` (one of ``INPUT_FORMATS``), ``C`` (M×N,
    default zeros) to the accumulator format ``accumulate`` (``"fp32"``, ``"fp16"``, ``"bf16"``).
    Starting from ``C``, the exact products ``A[:, k] * B[k, :]`` are added for ``k = 0 .. K-1``,
    each addition rounded once to the accumulator (see the module docstring for how this models
    real Tensor Cores).

    The emulation adds one term at a time, so its work is bounded before it starts: ``M*N*K`` at
    most :data:`MAX_MMA_WORK` (2**24) and ``K`` at most :data:`MAX_K` (2**16); a larger product
    is refused with a ``ValueError`` (use smaller inputs, or :func:`reference_mma`).  Bool and
    complex inputs are refused (a complex product's imaginary part has no place in a real format).
    """
    dev, Ar, Br, C = _operands(A, B, C, inputs, accumulate, device, work_limit=True)
    facc = formats.get_format(accumulate)
    acc = formats._round_array(C, facc)
    for k in range(Ar.shape[1]):
        acc = _add_rounded(acc, Ar[:, k : k + 1] * Br[k : k + 1, :], facc)  # products exact in float64
    return torch.from_numpy(acc).float().to(dev)


def reference_mma(A, B, C=None, *, inputs="fp16", device=None) -> torch.Tensor:
    """``A·B + C`` in float64 from the same rounded inputs: the reference ``mma`` is compared with.

    Returned on ``device``, except on an Apple GPU (MPS), which has no float64: there it stays on
    the CPU.  Compare with ``D.cpu().double()``, which works on every device.
    """
    dev, Ar, Br, C = _operands(A, B, C, inputs, "fp32", device)
    return float64_to(torch.from_numpy(Ar @ Br + C), dev)


def running_sum(values, accumulate="fp16", *, device=None) -> torch.Tensor:
    """Every partial sum of ``values`` added in order along the last dimension (float32 result).

    Each addition is rounded once to ``accumulate`` (any ``formats.FORMATS`` name); the values are
    used exactly as float32.  ``running_sum(torch.ones(3000), "fp16")`` stalls at 2048.

    Real values only (bool and complex are refused).  The sum runs one addition at a time, so
    the last dimension is at most :data:`MAX_K` (2**16) long and ``values`` holds at most
    :data:`MAX_MMA_WORK` (2**24) elements.
    """
    dev = get_device(device)
    f = formats.get_format(accumulate)
    values = formats._real_tensor(values, "values", "values must be a tensor or a list of numbers")
    if values.dim() == 0 or values.shape[-1] == 0:
        raise ValueError(
            f"values must have at least one element along the last dimension, got shape {tuple(values.shape)}"
        )
    if values.shape[-1] > MAX_K or values.numel() > MAX_MMA_WORK:
        raise ValueError(
            f"values of shape {tuple(values.shape)} is too long a sum to emulate one addition at a time: "
            f"the last dimension may be at most {MAX_K:,} (2**16) long and values at most {MAX_MMA_WORK:,} "
            "elements; use fewer values"
        )
    v = float64_on_cpu(values.float()).numpy()
    out = _accumulate(v, f)
    return torch.from_numpy(out).float().to(dev)


def _accumulate(p: np.ndarray, f: formats.FloatFormat) -> np.ndarray:
    """All partial sums of ``p`` along its last axis, each addition rounded once to ``f``."""
    if f.name == "fp32":
        p32 = p.astype(np.float32)
        if np.array_equal(p32, p, equal_nan=True):
            # Terms exact in float32 (products of FP16/BF16/TF32/FP8 inputs are): numpy's
            # accumulate adds them in order in IEEE float32, which is this model exactly.
            return np.add.accumulate(p32, axis=-1, dtype=np.float32).astype(np.float64)
    p = np.ascontiguousarray(np.moveaxis(p, -1, 0))  # one row per addition
    out = np.empty_like(p)
    acc = np.zeros(p.shape[1:], dtype=np.float64)
    for k in range(p.shape[0]):
        acc = _add_rounded(acc, p[k], f)
        out[k] = acc
    return np.moveaxis(out, 0, -1)


def first_stall(partial_sums) -> tuple[int, float] | None:
    """``(index, value)`` of the first addition that left a 1-D running sum unchanged, or None.

    The index counts additions from 1, so ``first_stall(running_sum(torch.ones(3000), "fp16"))``
    is ``(2049, 2048.0)``: the 2049th ``+ 1.0`` no longer changes the sum.  ``partial_sums`` must
    be 1-D (one running sum; for a batch, call it on each row): flattening several sums into one
    would report a "stall" where one row ends and the next begins.
    """
    t = formats._real_tensor(partial_sums, "partial_sums", "partial_sums must be a 1-D tensor or a list of numbers")
    if t.dim() != 1:
        raise ValueError(
            f"partial_sums must be 1-D (one running sum), got shape {tuple(t.shape)}; "
            "for several sums, call first_stall on each row"
        )
    s = float64_on_cpu(t)
    if s.numel() < 2:
        return None
    same = torch.nonzero(s[1:] == s[:-1]).flatten()
    if same.numel() == 0:
        return None
    i = int(same[0]) + 1
    return i + 1, float(s[i])


# --------------------------------------------------------------------------------------------
# Error against K
# --------------------------------------------------------------------------------------------


@dataclass
class AccumulationCurve:
    """Dot products of length 1..k_max accumulated in several formats (see ``accumulation_curve``).

    ``reference`` and ``partial[fmt]`` are (batch, k_max) float64 partial sums; ``errors[fmt]`` is
    the median over the batch of the relative error against ``reference``, for every ``K``.
    """

    inputs: str
    accumulators: tuple[str, ...]
    k_max: int
    reference: torch.Tensor
    partial: dict[str, torch.Tensor]
    errors: dict[str, torch.Tensor]
    low: float = 0.0
    high: float = 1.0

    def at(self, k: int) -> dict:
        """Numbers at ``K = k``: first dot product's values and median relative errors."""
        k = check_int("k", k, minimum=1, maximum=self.k_max)
        row = {"K": k, "reference": float(self.reference[0, k - 1])}
        for name in self.accumulators:
            row[f"{name}_value"] = float(self.partial[name][0, k - 1])
            row[f"{name}_error"] = float(self.errors[name][k - 1])
        return row

    def output_partial(self, accumulator: str, output="fp16") -> torch.Tensor:
        """``partial[accumulator]`` rounded once more to ``output`` (float64, same shape).

        Under ``torch.autocast`` a matmul's result is stored in the low dtype (FP16 or BF16)
        whatever the accumulator was, so its error includes this last rounding; it *is* torch's
        cast, ``partial.float().to(torch.float16)``.
        """
        name = check_choice("accumulator", formats.get_format(accumulator).name, self.accumulators)
        out = formats.get_format(output)
        check_choice("output", out.name, ACCUMULATE_FORMATS)
        return float64_on_cpu(formats.round_to(self.partial[name].float(), out))

    def output_errors(self, output="fp16") -> dict[str, torch.Tensor]:
        """Median relative error against float64, for every ``K``, of each accumulator's result
        rounded to ``output`` (see :meth:`output_partial`): the error an autocast matmul returns."""
        errors = {}
        for name in self.accumulators:
            out = self.output_partial(name, output)
            rel = (out - self.reference).abs() / self.reference.abs().clamp_min(torch.finfo(torch.float64).tiny)
            errors[name] = rel.median(dim=0).values
        return errors


def accumulation_curve(
    k_max: int = 4096,
    *,
    inputs="fp16",
    accumulators=("fp32", "fp16"),
    batch: int = 32,
    seed: int = 0,
    low: float = 0.0,
    high: float = 1.0,
    device=None,
) -> AccumulationCurve:
    """Accumulate ``batch`` random dot products of length ``k_max`` in each accumulator format.

    Inputs are uniform in ``[low, high)`` rounded to ``inputs``; the run is sequential in ``K``, so
    the partial sum after ``K`` terms *is* the length-``K`` dot product and one pass gives the
    whole curve.  The float64 reference is the cumulative sum of the exact products (its own
    rounding error, about ``K * 2**-53``, is far below anything plotted).
    """
    k_max = check_int("k_max", k_max, minimum=1, maximum=MAX_K)
    batch = check_int("batch", batch, minimum=1, maximum=4096)
    if batch * k_max > MAX_CURVE_ELEMENTS:
        raise ValueError(
            f"batch * k_max = {batch} * {k_max} = {batch * k_max:,} is more than the {MAX_CURVE_ELEMENTS:,} (2**22) "
            "terms accumulation_curve emulates; choose a smaller batch or k_max"
        )
    seed = check_seed("seed", seed)
    check_choice("inputs", formats.get_format(inputs).name, INPUT_FORMATS)
    accs = _accumulator_names(accumulators)
    low = check_float("low", low)
    high = check_float("high", high)
    if not high > low:
        raise ValueError(f"high must be > low, got low={low}, high={high}")
    get_device(device)  # validated for a uniform API; the emulation is exact float64 work on the CPU
    # a, b (float32), their float64 roundings, the products, the reference, and per accumulator its
    # partial sums, relative errors and a working copy (float64)
    check_fits(
        batch * k_max * (2 * 4 + 4 * 8 + 3 * 8 * len(accs)),
        torch.device("cpu"),
        f"accumulation_curve(k_max={k_max}, batch={batch})",
        "choose a smaller batch or k_max",
    )
    g = torch.Generator().manual_seed(seed)
    a = low + (high - low) * torch.rand(batch, k_max, generator=g)
    b = low + (high - low) * torch.rand(batch, k_max, generator=g)
    a64, b64 = float64_on_cpu(formats.round_to(a, inputs)), float64_on_cpu(formats.round_to(b, inputs))
    p = a64 * b64  # exact products
    reference = torch.cumsum(p, dim=1)
    partial, errors = {}, {}
    for name in accs:
        out = torch.from_numpy(_accumulate(p.numpy(), formats.get_format(name)))
        partial[name] = out
        rel = (out - reference).abs() / reference.abs().clamp_min(torch.finfo(torch.float64).tiny)
        errors[name] = rel.median(dim=0).values
    return AccumulationCurve(
        inputs=formats.get_format(inputs).name,
        accumulators=accs,
        k_max=k_max,
        reference=reference.cpu(),
        partial=partial,
        errors=errors,
        low=float(low),
        high=float(high),
    )


def _accumulator_names(accumulators) -> tuple[str, ...]:
    """Accumulator formats from one name or a non-empty list of distinct ones in ACCUMULATE_FORMATS."""
    if isinstance(accumulators, (str, formats.FloatFormat, torch.dtype)):
        accumulators = (accumulators,)
    elif not isinstance(accumulators, (list, tuple)):
        raise ArgumentTypeError(
            f"accumulators must be a format name or a list of them, got {type(accumulators).__name__}: "
            f"{accumulators!r:.80}"
        )
    accs = tuple(
        check_choice("accumulators", formats.get_format(a).name, ACCUMULATE_FORMATS) for a in accumulators
    )
    if not accs:
        raise ValueError("accumulators must name at least one of: " + ", ".join(ACCUMULATE_FORMATS))
    if len(set(accs)) != len(accs):
        raise ValueError(f"accumulators={accumulators!r} names a format twice; name each one once")
    return accs


_ACC_COLOURS = {"fp32": "#1f77b4", "fp16": "#d62728", "bf16": "#ff7f0e"}


def plot_accumulation(curve: AccumulationCurve, ax, k: int | None = None):
    """Draw ``curve``'s median relative error against K on ``ax`` (log-log); returns the K marker line."""
    from matplotlib.axes import Axes

    check_instance("curve", curve, AccumulationCurve, "an AccumulationCurve (from accumulation_curve)")
    check_instance("ax", ax, Axes, "matplotlib Axes")
    if k is not None:
        k = check_int("k", k, minimum=1, maximum=curve.k_max)
    # ~400 log-spaced K values are indistinguishable from all of them on log axes, and keep a
    # slider's redraw fast
    idx = np.unique(np.geomspace(1, curve.k_max, num=min(curve.k_max, 400)).round().astype(int)) - 1
    ks = idx + 1
    for name in curve.accumulators:
        err = curve.errors[name].clamp_min(1e-12).numpy()[idx]
        label = f"{formats.FORMATS[name].label} accumulator"
        ax.loglog(ks, err, color=_ACC_COLOURS.get(name), label=label)
    ax.axhline(1e-12, color="0.8", lw=0.5)
    unit = {name: formats.FORMATS[name].eps / 2 for name in curve.accumulators}
    for name, u in unit.items():
        ax.axhline(u, color=_ACC_COLOURS.get(name), ls=":", lw=1)
    ax.set_xlabel("inner dimension K (terms in each dot product)")
    ax.set_ylabel("median relative error vs float64")
    ax.set_title(f"{formats.FORMATS[curve.inputs].label} inputs, exact products: error grows with K")
    ax.set_ylim(1e-12, 1.0)
    # plain tick labels: log axes' default mathtext labels are slow to lay out on every redraw
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0e}"))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_formatter(NullFormatter())
    ax.legend(loc="upper left", fontsize=8)
    marker = ax.axvline(k if k is not None else 1, color="0.3", ls="--", lw=1)
    return marker


class AccumulationExplorer:
    """Slide K and compare accumulators; build it with :func:`accumulation_explorer`.

    Attributes: ``slider`` (``IntSlider`` for K), ``readout`` (``HTML`` table at the current K),
    ``pane`` (a ``FigurePane`` with the error curves and a K marker), ``curve`` (the
    :class:`AccumulationCurve` shown) and ``widget`` (the layout).
    """

    def __init__(self, curve: AccumulationCurve, k: int):
        import ipywidgets as widgets

        check_instance("curve", curve, AccumulationCurve, "an AccumulationCurve (from accumulation_curve)")
        k = check_int("k", k, minimum=1, maximum=curve.k_max)


        self.curve = curve
        self.slider = widgets.IntSlider(
            value=k,
            min=1,
            max=curve.k_max,
            description="K",
            continuous_update=False,
            layout=widgets.Layout(width="40em"),
        )
        self.slider.add_class("amp-accumulation-k")
        self.readout = widgets.HTML()
        self.readout.add_class("amp-accumulation-readout")
        self.pane = FigurePane(figsize=(7.0, 3.8), dpi=80)
        ax = self.pane.figure.add_subplot()
        self._ax = ax
        self._marker = plot_accumulation(curve, ax, k)
        self.pane.figure.tight_layout()
        self._background = None
        self.slider.observe(self._on_k, names="value")
        self.widget = widgets.VBox([self.slider, self.readout, self.pane.image])
        self.widget.add_class("amp-accumulation-explorer")
        self._on_k({"new": k})

    def readout_html(self, k: int) -> str:
        row = self.curve.at(k)
        lines = [("exact (float64)", f"{row['reference']!r}", "")]
        for name in self.curve.accumulators:
            lines.append(
                (
                    f"{formats.FORMATS[name].label} accumulator",
                    f"{row[f'{name}_value']!r}",
                    f"{row[f'{name}_error']:.2e}",
                )
            )
        cell = "padding:2px 10px;font-family:monospace;text-align:left"
        body = "".join(
            f"<tr><td style='{cell}'>{html.escape(a)}</td><td style='{cell}' class='amp-acc-value'>{html.escape(b)}</td>"
            f"<td style='{cell}' class='amp-acc-error'>{html.escape(c)}</td></tr>"
            for a, b, c in lines
        )
        head = (
            f"<tr><th style='{cell}'>K = {k}</th><th style='{cell}'>dot product #0</th>"
            f"<th style='{cell}'>median rel. error (batch of {self.curve.reference.shape[0]})</th></tr>"
        )
        return f"<table style='border-collapse:collapse'>{head}{body}</table>"

    def _redraw(self) -> None:
        """Re-render the pane's figure with the marker moved.

        Only the marker changes, so after one full render the static part is kept as an Agg
        background and the marker is blitted onto it (matplotlib's own blitting); the PNG put in
        ``pane.image`` is the same figure a full redraw would give.
        """
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fig = self.pane.figure
        if not isinstance(fig.canvas, FigureCanvasAgg):
            FigureCanvasAgg(fig)
        canvas = fig.canvas
        if self._background is None:
            self._marker.set_visible(False)
            canvas.draw()
            self._background = canvas.copy_from_bbox(fig.bbox)
            self._marker.set_visible(True)
        canvas.restore_region(self._background)
        self._ax.draw_artist(self._marker)
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(np.asarray(canvas.buffer_rgba())).save(buf, format="png")
        self.pane.image.value = buf.getvalue()
        self.pane.renders += 1

    def _on_k(self, change) -> None:
        k = int(change["new"])
        self.readout.value = self.readout_html(k)
        self._marker.set_xdata([k, k])
        self._redraw()


def accumulation_explorer(
    k: int = 256,
    k_max: int = 4096,
    *,
    inputs="fp16",
    accumulators=("fp32", "fp16"),
    batch: int = 32,
    seed: int = 0,
    device=None,
) -> AccumulationExplorer:
    """The K slider of notebook 02: error of FP32 vs FP16 accumulation against float64.

    The curve is computed once (``accumulation_curve``); the slider only moves a marker and
    refreshes a readout, so it responds instantly.
    """
    # checked before the curve is computed, so a wrong k costs nothing
    k_max = check_int("k_max", k_max, minimum=1, maximum=MAX_K)
    k = check_int("k", k, minimum=1, maximum=k_max)
    curve = accumulation_curve(
        k_max, inputs=inputs, accumulators=accumulators, batch=batch, seed=seed, device=device
    )
    return AccumulationExplorer(curve, k)


# --------------------------------------------------------------------------------------------
# Generations
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Details:
    reference_part: str
    fma_per_tensor_core_per_clock: int | None
    tensor_cores_per_sm: int | None
    per_clock: str
    instruction: str
    note: str


# Keyed by Tensor Core generation (hardware.tensor_core_generation(...).generation).  Dense
# FP16 rates of each generation's data-centre part, from NVIDIA's architecture whitepapers
# (Volta: 64 FMA per Tensor Core per clock, 8 per SM; A100: 256, 4 per SM; H100: twice A100 per
# SM).  Consumer parts of the same generation can be slower per SM.
TENSOR_CORE_DETAILS: dict[int, _Details] = {
    1: _Details(
        "V100",
        64,
        8,
        "4×4×4 FP16 MMA per clock (D = A·B + C, 64 FMA)",
        "mma.sync m8n8k4",
        "FP16 inputs, FP16 or FP32 accumulator",
    ),
    2: _Details(
        "T4",
        64,
        8,
        "4×4×4 FP16 MMA per clock (64 FMA); INT8/INT4 at 2×/4× that",
        "mma.sync m16n8k8",
        "adds integer inputs for inference",
    ),
    3: _Details(
        "A100",
        256,
        4,
        "256 FP16 FMA per clock (4× a Volta Tensor Core)",
        "mma.sync m16n8k16",
        "BF16 at the FP16 rate, TF32 at half of it; 2:4 sparsity doubles both",
    ),
    4: _Details(
        "H100",
        512,
        4,
        "512 FP16 FMA per clock; FP8 at twice the FP16 rate",
        "wgmma.mma_async m64nNk16",
        "FP8 (E4M3/E5M2), its accumulator about 14 bits, not FP32 (DeepSeek-V3 report); Ada parts are 4th generation too, slower per SM",
    ),
    5: _Details(
        "B200",
        None,
        None,
        "not listed here",
        "tcgen05.mma",
        "FP6/FP4 and block-scaled (microscaling) formats",
    ),
}

# Architectures whose figures differ from their generation's data-centre part.
ARCHITECTURE_DETAILS: dict[str, _Details] = {
    "Ada Lovelace": _Details(
        "L4 / RTX 40",
        None,
        4,
        "FP8 added as on Hopper; lower per-SM rates than H100",
        "mma.sync (FP8: m16n8k32)",
        "4th generation like Hopper, without Hopper's warp-group MMA",
    ),
}

# Dense FP16 Tensor Core TFLOP/s with an FP16 accumulator and with an FP32 accumulator, from NVIDIA's
# whitepapers (which print both; sparse rates are twice these).  Data-centre parts run both at one
# rate; GeForce parts run FP32 accumulation at half the FP16-accumulation rate.
ACCUMULATE_RATES = (
    {"part": "A100", "kind": "data centre", "fp16_accumulate": 312.0, "fp32_accumulate": 312.0,
     "source": "NVIDIA A100 Tensor Core GPU architecture whitepaper (A100 SXM4)"},
    {"part": "H100 SXM", "kind": "data centre", "fp16_accumulate": 989.4, "fp32_accumulate": 989.4,
     "source": "NVIDIA H100 Tensor Core GPU architecture whitepaper (H100 SXM5)"},
    {"part": "RTX 3090", "kind": "GeForce", "fp16_accumulate": 142.0, "fp32_accumulate": 71.0,
     "source": "NVIDIA Ampere GA102 GPU architecture whitepaper (GeForce RTX 3090)"},
    {"part": "RTX 4090", "kind": "GeForce", "fp16_accumulate": 330.3, "fp32_accumulate": 165.2,
     "source": "NVIDIA Ada Lovelace GPU architecture whitepaper (GeForce RTX 4090)"},
)  # fmt: skip

DEFAULT_CAPABILITIES = ((6, 0), (7, 0), (7, 5), (8, 0), (8, 9), (9, 0), (10, 0))


def generations_table(capabilities=DEFAULT_CAPABILITIES) -> list[dict]:
    """One row per compute capability: architecture, Tensor Core generation, precisions (from
    ``amp_lab.hardware.tensor_core_generation``) and per-clock throughput (``TENSOR_CORE_DETAILS`` by
    generation, ``ARCHITECTURE_DETAILS`` where an architecture differs from its generation's data-centre part)."""
    if isinstance(capabilities, (str, bytes)) or not isinstance(capabilities, (list, tuple)):
        raise ArgumentTypeError(
            f"capabilities must be a list of (major, minor) pairs such as [(8, 0), (9, 0)], got "
            f"{type(capabilities).__name__}: {capabilities!r:.80}"
        )
    if not capabilities:
        raise ValueError("capabilities must hold at least one (major, minor) pair")
    if len(capabilities) == 2 and all(isinstance(c, int) and not isinstance(c, bool) for c in capabilities):
        raise ValueError(
            f"capabilities={capabilities!r} is one capability; pass a list of them: [{tuple(capabilities)!r}]"
        )
    rows = []
    for cap in capabilities:
        tc = tensor_core_generation(cap)
        d = None
        if tc.generation is not None:
            d = ARCHITECTURE_DETAILS.get(tc.architecture, TENSOR_CORE_DETAILS.get(tc.generation))
        per_sm = (
            d.fma_per_tensor_core_per_clock * d.tensor_cores_per_sm
            if d and d.fma_per_tensor_core_per_clock and d.tensor_cores_per_sm
            else None
        )
        rows.append(
            {
                "capability": f"{tc.capability[0]}.{tc.capability[1]}",
                "architecture": tc.architecture,
                "generation": tc.generation if tc.generation is not None else "-",
                "precisions": ", ".join(tc.precisions).upper() if tc.precisions else "(no Tensor Cores)",
                "per clock (per Tensor Core)": d.per_clock if d else "-",
                "dense FP16 FMA/clock/SM": per_sm if per_sm else "-",
                "reference part": d.reference_part if d else "-",
                "MMA instruction": d.instruction if d else "-",
                "note": d.note if d else "FP16 runs on ordinary CUDA cores",
            }
        )
    return rows


# --------------------------------------------------------------------------------------------
# Alignment
# --------------------------------------------------------------------------------------------


def alignment_multiple(fmt="fp16") -> int:
    """The dimension multiple that keeps rows 16-byte aligned for ``fmt``: 8 for FP16/BF16, 4 for
    TF32/FP32, 16 for FP8.  cuBLAS picks its fastest Tensor Core kernels when M, N and K (and the
    leading dimensions) are multiples of it."""
    f = formats.get_format(fmt)
    nbytes = 4 if f.torch_dtype is None else torch.empty(0, dtype=f.torch_dtype).element_size()
    return 16 // nbytes


def pad_to_multiple(n: int, multiple: int = 8) -> int:
    """The smallest multiple of ``multiple`` that is ``>= n`` (e.g. a vocabulary of 50257 -> 50264)."""
    n = check_int("n", n, minimum=0)
    multiple = check_int("multiple", multiple, minimum=1)
    return -(-n // multiple) * multiple


A100_SMS = 108  # streaming multiprocessors of an A100 (NVIDIA A100 whitepaper)


def tile_quantization(m: int, n: int, *, tile_m: int = 128, tile_n: int = 128, sms: int = A100_SMS) -> dict:
    """How much of a GEMM's work a partial tile or a partial wave wastes (``02_tensor_cores``).

    A GEMM kernel cuts the ``m×n`` output into tiles of ``tile_m×tile_n`` (128×128, 256×128 and
    64-wide tiles are common), one thread block each, and the GPU runs the tiles in *waves* of
    ``sms`` at a time (the simplest model: one tile per streaming multiprocessor, 108 on an A100).
    A dimension that is not a multiple of the tile leaves a partial tile that costs a full one
    (tile quantization); a tile count that is not a multiple of ``sms`` leaves the last wave
    partly idle (wave quantization).  This is the model of NVIDIA's "Matrix Multiplication
    Background" guide; real kernels choose their tiles per size, so it explains, not predicts.

    Returns ``tiles``, ``tile_efficiency`` (useful share of the tiles' work: ``m*n`` over
    ``tiles * tile_m * tile_n``), ``waves``, ``wave_efficiency`` (share of SM slots busy:
    ``tiles`` over ``waves * sms``) and their product ``efficiency``, with the arguments.
    Every argument is at most 2**31 (work is a handful of integer operations).
    """
    limit = 1 << 31
    m = check_int("m", m, minimum=1, maximum=limit)
    n = check_int("n", n, minimum=1, maximum=limit)
    tile_m = check_int("tile_m", tile_m, minimum=1, maximum=limit)
    tile_n = check_int("tile_n", tile_n, minimum=1, maximum=limit)
    sms = check_int("sms", sms, minimum=1, maximum=limit)
    tiles = -(-m // tile_m) * -(-n // tile_n)
    waves = -(-tiles // sms)
    tile_eff = m * n / (tiles * tile_m * tile_n)
    wave_eff = tiles / (waves * sms)
    return {
        "m": m,
        "n": n,
        "tile_m": tile_m,
        "tile_n": tile_n,
        "sms": sms,
        "tiles": tiles,
        "tile_efficiency": tile_eff,
        "waves": waves,
        "wave_efficiency": wave_eff,
        "efficiency": tile_eff * wave_eff,
    }


def _generator_device(dev: torch.device) -> torch.device:
    """Where ``time_matmul`` draws its random operands: on a CUDA device itself (a CUDA generator
    draws there), anywhere else on the CPU, then moved (a CPU generator cannot draw on an Apple
    GPU, and torch's MPS generator gives other numbers than the CPU's)."""
    return dev if dev.type == "cuda" else torch.device("cpu")


def _matmul_operands(n: int, dtype: torch.dtype, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The two seeded ``n×n`` operands of ``time_matmul``, in ``dtype`` on ``dev``."""
    where = _generator_device(dev)
    g = torch.Generator(device=where).manual_seed(0)
    a = torch.randn(n, n, generator=g, device=where).to(dev, dtype)
    b = torch.randn(n, n, generator=g, device=where).to(dev, dtype)
    return a, b


def _time_matmul_bytes(n: int, dtype: torch.dtype) -> int:
    """Bytes ``time_matmul(n)`` needs at its peak: the two operands and the product in ``dtype``,
    plus the FP32 draw each operand is made from."""
    low = torch.empty(0, dtype=dtype).element_size()
    return n * n * (4 + 3 * low)


def _synchronizer(dev: torch.device):
    """Waits for the work queued on ``dev``: the CPU runs a matmul before returning, an Apple GPU
    (MPS) only queues it, so its clock must wait for ``torch.mps.synchronize()``."""
    if dev.type == "mps":
        return lambda: torch.mps.synchronize()
    return lambda: None


def _on_device(dev: torch.device):
    """Make ``dev`` the current CUDA device for a block: ``torch.cuda.Event.record()`` records on the
    *current* device's stream, which is not ``dev`` when ``dev`` is ``cuda:1``."""
    return torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()


def time_matmul(
    n: int, *, dtype=None, device=None, repeats: int = 20, warmup: int = 5, inner: int = 1
) -> dict:
    """Median time of an ``n×n @ n×n`` matmul in ``dtype`` (default ``amp_dtype(device)``).

    On CUDA it uses CUDA events around ``inner`` back-to-back matmuls after ``warmup`` untimed
    ones, ``repeats`` samples, median; elsewhere ``time.perf_counter`` (on an Apple GPU after
    waiting for the queued work).  Returns ``n``, ``dtype``, ``median_ms`` (per matmul),
    ``tflops`` and ``samples_ms``.  A size the device's free memory cannot hold is refused with
    a ``ValueError`` before anything is allocated.  ``repeats``, ``warmup`` and ``inner`` are each at
    most ``MAX_REPEATS`` (10,000), and so is the number of matmuls in all, ``warmup + repeats * inner``.
    """
    dev = get_device(device)
    n = check_int("n", n, minimum=1, maximum=1 << 15)
    repeats, warmup, inner = _timing_counts(repeats, warmup, inner)
    dtype = (
        amp_dtype(dev)
        if dtype is None
        else parse_dtype(dtype, allowed=(torch.float16, torch.bfloat16, torch.float32))
    )
    check_fits(
        _time_matmul_bytes(n, dtype),
        dev,
        f"time_matmul(n={n}) in {str(dtype).removeprefix('torch.')}",
        "choose a smaller n",
    )
    samples = []
    with _on_device(dev), torch.inference_mode():
        a, b = _matmul_operands(n, dtype, dev)
        for _ in range(warmup):
            a @ b
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
            for _ in range(repeats):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    a @ b
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / inner)
        else:
            sync = _synchronizer(dev)
            for _ in range(repeats):
                sync()
                t0 = time.perf_counter()
                for _ in range(inner):
                    a @ b
                sync()
                samples.append((time.perf_counter() - t0) * 1e3 / inner)
    median = statistics.median(samples)
    return {
        "n": n,
        "dtype": str(dtype).removeprefix("torch."),
        "median_ms": median,
        "tflops": 2.0 * n**3 / (median * 1e-3) / 1e12,
        "samples_ms": samples,
    }


def _timing_counts(repeats, warmup, inner=1) -> tuple[int, int, int]:
    repeats = check_int("repeats", repeats, minimum=1, maximum=MAX_REPEATS)
    warmup = check_int("warmup", warmup, minimum=0, maximum=MAX_REPEATS)
    inner = check_int("inner", inner, minimum=1, maximum=MAX_REPEATS)
    if warmup + repeats * inner > MAX_REPEATS:
        raise ValueError(
            f"warmup + repeats * inner = {warmup} + {repeats} * {inner} = {warmup + repeats * inner:,} matmuls is "
            f"more than MAX_REPEATS = {MAX_REPEATS:,}; choose fewer repeats or a smaller inner"
        )
    return repeats, warmup, inner


@dataclass
class AlignmentDemo:
    """Result of :func:`alignment_demo`: ``measured`` is False where no CUDA GPU was used."""

    measured: bool
    message: str
    rows: list[dict] = field(default_factory=list)

    def __str__(self) -> str:
        if not self.measured:
            return self.message
        lines = [self.message, f"{'n':>6}  {'multiple of 8':>13}  {'median ms':>9}  {'TFLOP/s':>8}"]
        for r in self.rows:
            lines.append(
                f"{r['n']:>6}  {('yes' if r['n'] % 8 == 0 else 'no'):>13}  {r['median_ms']:>9.3f}  {r['tflops']:>8.1f}"
            )
        a, b = self.rows[0], self.rows[1]
        lines.append(
            f"n = {b['n']} does {b['n'] ** 3 / a['n'] ** 3:.4f}x the work of n = {a['n']} "
            f"and takes {b['median_ms'] / a['median_ms']:.2f}x the time"
        )
        return "\n".join(lines)


def alignment_demo(
    n: int = 4096, *, dtype=None, device=None, repeats: int = 20, warmup: int = 5
) -> AlignmentDemo:
    """Time ``n×n`` against ``(n-1)×(n-1)`` matmuls on CUDA (CUDA events, warm-up, median).

    Without a CUDA device nothing is timed (CPU matmuls say nothing about Tensor Cores): the
    result's message says what the measurement would show and why it is skipped.
    """
    dev = get_device(device)
    n = check_int("n", n, minimum=9, maximum=1 << 15)
    repeats, warmup, _ = _timing_counts(repeats, warmup, 3)  # each size is timed with inner=3
    if dtype is not None:
        dtype = parse_dtype(dtype, allowed=(torch.float16, torch.bfloat16))
    if dev.type != "cuda":
        dtype_name = str(amp_dtype("cuda") if torch.cuda.is_available() else torch.float16).removeprefix(
            "torch."
        )
        return AlignmentDemo(
            measured=False,
            message=(
                f"No CUDA GPU here (device: {dev.type}), so this cell is skipped: it needs a CUDA GPU.\n"
                f"On one it times a {n}x{n} {dtype_name} matmul against {n - 1}x{n - 1} with CUDA events "
                f"(warm-up, {repeats} samples, median) and prints milliseconds and TFLOP/s for each.\n"
                f"{n} is a multiple of {alignment_multiple('fp16')}, {n - 1} is not: cuBLAS must fall back to "
                "slower kernels for the unaligned size (on old cuBLAS, to no Tensor Cores at all), so the "
                "smaller matrix usually takes longer and delivers fewer TFLOP/s.\n"
                "Timing CPU matmuls instead would say nothing about Tensor Cores."
            ),
        )
    dtype = torch.float16 if dtype is None else dtype
    rows = [
        time_matmul(m, dtype=dtype, device=dev, repeats=repeats, warmup=warmup, inner=3) for m in (n, n - 1)
    ]
    name = torch.cuda.get_device_name(dev)
    return AlignmentDemo(
        measured=True,
        message=f"{name}: {str(dtype).removeprefix('torch.')} matmuls, CUDA events, median of {repeats}",
        rows=rows,
    )
