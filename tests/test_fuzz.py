"""The contract where learners meet the package: every bad input gets a clear error, no call hangs, nothing is
half-changed.

Every learner-facing name (``amp_lab.learner_api``, exactly those: a test fails on one not fuzzed or one
fuzzed but not listed) is called with valid base arguments in which one
argument at a time is replaced by a bad or edge value: first every value of a fixed corpus for the
argument's kind (numbers: 0, negative, huge, nan, inf, bools, numpy scalars, 2**2000; tensors of every
dtype and bad shapes; strings; None; dicts, lists, sets), then values hypothesis draws.  Each call must keep
the contract in ``tests/fuzz_support.py`` (returns and passes a sanity check, or raises ValueError/TypeError
from inside amp_lab), within CALL_TIMEOUT_S (10 s) and under an address-space limit.  A failure names the function, the
argument, the value and what happened; all failures of one argument are listed together.

Skipped on purpose (and why):

* ``progress.progress``: a thin wrapper that hands every argument to ``tqdm``; its errors are tqdm's.
* ``doctor.main``/``doctor.run_checks``/``doctor.check_amp_api``/``doctor.check_plotting``/
  ``cpus.read_cpuinfo``/``cpus.read_sysctl``/``hardware.tf32_matmul_enabled``/
  ``hardware.tf32_setting``/``progress.enabled``/``gpus.datasheet_rows``/
  ``autocast_lists.op_names`` (no argument)/``check_amp_api``: no arguments to fuzz (``doctor.main`` and
  ``run_checks`` are fuzzed only through ``argv``/``version_of``); they are called once with no arguments.
* widget classes are built (their constructors fuzzed) but never displayed: no ``IPython.display`` calls,
  and callbacks are not fired (``tests/test_foundation_widgets.py`` drives them).
* ``scaling.ScaleUnderflowError``: an exception class, raised by amp_lab, not called by a learner.
* ``**kwargs`` of ``race_widget.race_widget`` are fuzzed through ``RaceWidget``'s own keyword arguments.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import time
from numbers import Integral, Real

import numpy as np
import pytest
import torch
from fuzz_support import (
    CALL_TIMEOUT_S,
    FLOAT32_MAX,
    FLOAT32_TINY,
    MAX_CALLS_PER_SAMPLE,
    MAX_REPEATS,
    MAX_SAMPLE_S,
    MAX_SECONDS,
    MAX_STEPS,
    MAX_THREADS,
    Bool,
    Callable_,
    Capability,
    Device,
    Dtype,
    Entry,
    Float,
    Fmt,
    Int,
    Kind,
    Mapping_,
    Obj,
    Scale,
    Seed,
    Seq,
    Str,
    Tensor,
    address_space_limit,
    check_call,
    describe,
    hard_time_limit,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from amp_lab import (
    accumulation,
    alignment,
    amp,
    autocast_lists,
    autocast_ops,
    check,
    checkpoints,
    claims,
    clipping,
    compare,
    cost,
    course,
    cpus,
    data,
    device,
    distributed,
    doctor,
    dtypes,
    exercises,
    format_explorer,
    formats,
    fp8,
    fp8_explorer,
    fp8_recipes,
    gpus,
    gradients,
    hardware,
    intervals,
    memory,
    models,
    mx,
    pitfalls,
    predict,
    progress,
    race,
    race_readout,
    range_counts,
    ranges,
    recipe,
    references,
    scaler_checks,
    scaling,
    subnormals,
    swamping,
    sweeps,
    tensor_cores,
    text,
    timing,
    training,
    widgets,
)
from amp_lab import race_widget as race_widget_module
from amp_lab import roofline as roofline_module
from amp_lab.learner_api import LEARNER_API

# the narrowest interval the timer samples towards
MIN_TARGET_REL_WIDTH = timing.MIN_TARGET_REL_WIDTH

MODULES = {
    "accumulation": accumulation,
    "alignment": alignment,
    "amp": amp,
    "autocast_lists": autocast_lists,
    "autocast_ops": autocast_ops,
    "cost": cost,
    "cpus": cpus,
    "dtypes": dtypes,
    "gpus": gpus,
    "text": text,
    "check": check,
    "claims": claims,
    "course": course,
    "data": data,
    "device": device,
    "distributed": distributed,
    "doctor": doctor,
    "format_explorer": format_explorer,
    "formats": formats,
    "fp8": fp8,
    "fp8_explorer": fp8_explorer,
    "fp8_recipes": fp8_recipes,
    "mx": mx,
    "gradients": gradients,
    "hardware": hardware,
    "intervals": intervals,
    "memory": memory,
    "models": models,
    "exercises": exercises,
    "pitfalls": pitfalls,
    "subnormals": subnormals,
    "swamping": swamping,
    "predict": predict,
    "progress": progress,
    "race": race,
    "race_readout": race_readout,
    "race_widget": race_widget_module,
    "references": references,
    "roofline": roofline_module,
    "sweeps": sweeps,
    "range_counts": range_counts,
    "ranges": ranges,
    "recipe": recipe,
    "checkpoints": checkpoints,
    "clipping": clipping,
    "compare": compare,
    "scaling": scaling,
    "tensor_cores": tensor_cores,
    "timing": timing,
    "training": training,
    "widgets": widgets,
}

SKIPPED = {"progress.progress", "scaling.ScaleUnderflowError"}  # see the module docstring

F32_TINY, F32_MAX = FLOAT32_TINY, FLOAT32_MAX

# Bounds the modules document where they are used (read from the code where it exposes them, so the suite
# cannot drift; the defaults are the values in the code, for the code before issue 14, which lacks some).
MLP_MAX_DEPTH = training.MAX_DEPTH  # train_digits, models.make_mlp/step_flops
MLP_MAX_WIDTH = training.MAX_WIDTH  # train_digits
MAX_LR = training.MAX_LR
MAX_EXPLORER_STEPS = training.MAX_EXPLORER_STEPS
MAX_GROWTH_INTERVAL = scaler_checks.MAX_GROWTH_INTERVAL  # GradScaler takes a C int
MAX_GROWTH_FACTOR = scaler_checks.MAX_GROWTH_FACTOR
MAX_K = tensor_cores.MAX_K
RECIPE_MAX_SIZE = cost.MAX_SIZE  # widths and batch sizes of recipe's helpers
RECIPE_MAX_STEP = recipe.MAX_STEP_NUMBER  # a step number
FORMAT_GROUPS_WIDTH = (20, 10_000)  # autocast_ops.format_groups' line width
SMOKE_TEST_K = (0, 15)  # widgets.SmokeTest's slider: 2**16 is beyond float16's largest value
SCALE_EXPLORER_MAX_LOG2 = (1, ranges.MAX_SLIDER_LOG2)  # ranges.scale_explorer's slider range
SCALE_EXPLORER_LOG2 = (0, ranges.MAX_SLIDER_LOG2)
LOG2_HISTOGRAM_LO, LOG2_HISTOGRAM_HI = (-1100, 1100), (-1099, 1101)  # range_counts.LOG2_BINADES
# training.ScalerExplorer's sliders
SCALER_EXPLORER_LOG2, SCALER_EXPLORER_GROWTH, SCALER_EXPLORER_BACKOFF = (0, 32), (1, 100), (0.05, 0.95)
N_DIGITS = 1797  # examples in scikit-learn's digits: load_digits needs both splits non-empty


def digits_test_fraction_valid(v):
    """``data.load_digits``: ``round(1797 * test_fraction)`` examples go to the test split and both splits
    must hold one (its docstring: from 1/1797 to 1796/1797)."""
    ok = Float(gt=0, lt=1).valid(v)
    if not ok:
        return ok
    n_test = int(round(N_DIGITS * float(v)))
    return 1 <= n_test <= N_DIGITS - 1


def check_fits_valid(v):
    """``device.check_fits``: a size this machine holds must pass, one no machine holds (a PiB, inf) must be
    refused; in between it depends on free memory."""
    ok = Float(ge=0, finite=False).valid(v)
    if not ok:
        return ok
    x = float(v)
    return False if x > 2**50 else (None if x > 2**20 else True)


def with_valid(kind: Kind, valid) -> Kind:
    """``kind`` with another idea of which values are valid (a domain that depends on other arguments)."""
    return dataclasses.replace(kind, valid=valid)


def _roundable(v) -> bool:
    """formats' rule for a value to round or decompose: any real number (an int too large for float64
    reads as +-inf), or a one-element real tensor; never a bool, a string or a complex number."""
    if isinstance(v, torch.Tensor):
        return v.numel() == 1 and v.dtype != torch.bool and not v.dtype.is_complex
    return isinstance(v, (Integral, Real)) and not isinstance(v, (bool, np.bool_))


def Roundable(optional: bool = False) -> Kind:
    return with_valid(
        Float(finite=False, optional=optional), lambda v: (v is None and optional) or _roundable(v)
    )


def default_of(fn, name):
    return inspect.signature(fn).parameters[name].default


# --------------------------------------------------------------------------------------------
# Valid objects the base arguments need (built once; tensors are cloned per call where it matters).
# --------------------------------------------------------------------------------------------


@functools.cache
def digits():
    return data.load_digits()


def split():
    s = digits().train
    return data.Split(s.X[:96].clone(), s.y[:96].clone())


def model():
    return models.make_mlp(hidden=8, depth=1, seed=0)


def opt_for(m):
    return torch.optim.SGD(m.parameters(), lr=0.01)


@functools.cache
def race_result():
    return race.race_matmul(
        8,
        repeats=6,
        warmup=0,
        min_sample_s=1e-4,
        target_rel_width=None,
        max_time_s=None,
        dtype=torch.bfloat16,
    )


@functools.cache
def fp8_race_result():
    return race.race_fp8_matmul(
        16, repeats=6, warmup=0, min_sample_s=1e-4, target_rel_width=None, max_time_s=None
    )


def multiple_of(k: int, kind: Kind) -> Kind:
    """``kind`` (an Int) whose valid values are also multiples of ``k`` (a GEMM dimension for FP8)."""
    base_valid = kind.valid

    def valid(v):
        ok = base_valid(v)
        return ok and v % k == 0 if ok else ok

    return dataclasses.replace(kind, name=f"{kind.name} multiple of {k}", valid=valid)


@functools.cache
def sweep_result():
    return sweeps.sweep(
        [8, 16],
        repeats=6,
        warmup=0,
        min_sample_s=1e-4,
        target_rel_width=None,
        max_time_s=None,
        show_progress=False,
        dtype=torch.bfloat16,
    )


@functools.cache
def mlp_result():
    return race.race_mlp(
        8, 8, in_features=8, repeats=6, warmup=0, min_sample_s=1e-4, target_rel_width=None, max_time_s=None
    )


@functools.cache
def mlp_sweep():
    return sweeps.sweep(
        [8, 16],
        kind="mlp",
        batch=8,
        repeats=6,
        warmup=0,
        min_sample_s=1e-4,
        target_rel_width=None,
        max_time_s=None,
        show_progress=False,
    )


@functools.cache
def probe_table():
    return autocast_ops.probe(ops=["mm", "softmax", "add"])


@functools.cache
def report():
    return hardware.report_for("cpu")


@functools.cache
def precision_results():
    return compare.compare_precisions(digits(), num_steps=2, warmup_steps=0, hidden=8, depth=1)


def timing_obj(label="a", scale=1.0):
    return intervals.Timing(label, tuple(scale * (1.0 + 0.01 * i) for i in range(12)), 1, 0)


def grads_record():
    m = models.make_mlp(64, hidden=8, depth=1)
    s = split()
    return gradients.collect_gradients(m, s.X[:16], s.y[:16])


# --------------------------------------------------------------------------------------------
# Sanity checks of results
# --------------------------------------------------------------------------------------------


def is_float(result, kwargs):
    return (
        None
        if isinstance(result, (float, int)) and not isinstance(result, bool)
        else f"not a number: {result!r}"
    )


def is_str(result, kwargs):
    return None if isinstance(result, str) else f"not a str: {type(result).__name__}"


def is_reading(result, kwargs):
    if not isinstance(result, text.Reading):
        return f"not a Reading: {type(result).__name__}"
    return None if str(result) else "a Reading with no sentence"


def float32_scale(result, kwargs):
    if not isinstance(result, float):
        return f"not a float: {result!r}"
    if math.isinf(result):  # documented: no non-zero finite element
        return None
    if not F32_TINY <= result <= F32_MAX:
        return f"scale {result!r} is not a normal float32 (a loss scale is stored in float32)"
    return None


def scaler_scale_ok(result, kwargs):
    s = result.get_scale() if hasattr(result, "get_scale") else None
    if s is None:
        s = getattr(result, "_init_scale", None)
    if not (isinstance(s, float) and F32_TINY <= s <= F32_MAX):
        return f"loss scale {s!r} is not a normal float32"
    return None


def dataset_ok(result, kwargs):
    for part in ("train", "test"):
        sp = getattr(result, part)
        if len(sp.y) == 0:
            return f"empty {part} split"
        if not torch.isfinite(sp.X).all():
            return f"non-finite values in {part}.X"
    return None


def usable_device(result, kwargs):
    if not isinstance(result, torch.device):
        return f"not a torch.device: {result!r}"
    if result.type == "cpu" and result.index not in (None, 0):
        return f"{result} does not exist (a machine has one CPU device)"
    if result.type == "cuda" and (
        not torch.cuda.is_available() or (result.index or 0) >= torch.cuda.device_count()
    ):
        return f"{result} does not exist on this machine"
    if result.type not in ("cpu", "cuda", "mps"):
        return f"{result} is not a device the course runs on"
    return None


def nonneg_int(result, kwargs):
    if isinstance(result, bool) or not isinstance(result, int) or result < 0:
        return f"not a non-negative int: {result!r}"
    return None


def is_dtype(result, kwargs):
    return None if isinstance(result, torch.dtype) else f"not a torch.dtype: {result!r}"


def finite_tensor_or_number(result, kwargs):
    return None


# --------------------------------------------------------------------------------------------
# Kinds inferred from a parameter (overridden per entry where the domain is known)
# --------------------------------------------------------------------------------------------

COUNT_NAMES = {
    "num_steps", "repeats", "batch_size", "batch", "width", "depth", "hidden", "n", "k", "k_max",
    "num_features", "num_classes", "in_features", "growth_interval", "accumulation_steps", "inner",
    "multiple", "contestants", "max_repeats", "number", "num_threads", "threads", "total", "dpi",
}  # fmt: skip
NONNEG_NAMES = {"warmup", "warmup_steps", "step", "start_step", "log2_init_scale"}
STR_NAMES = {
    "name", "label", "hint", "title", "desc", "statement", "caption", "below", "above", "unit", "variable",
    "text", "gpu_name", "cpu", "system", "cpuinfo", "sysctl", "cuda_version", "op", "family", "device_type",
    "kind", "baseline", "distribution", "minimum", "why", "verdict", "message", "code", "answer_text",
}  # fmt: skip


def infer_kind(param: inspect.Parameter) -> Kind:
    name, default = param.name, param.default
    ann = str(param.annotation)
    optional = default is None or "None" in ann
    if name == "seed":
        return Seed()
    if name == "device":
        return Device()
    if name == "dtype":
        return Dtype()
    if name == "fmt":
        return Fmt()
    if name == "capability":
        return Capability(optional=optional)
    if isinstance(default, bool) or ann == "bool":
        return Bool()
    if name in STR_NAMES:
        return Str()
    if name in COUNT_NAMES:
        return Int(1, optional=optional)
    if name in NONNEG_NAMES:
        return Int(0, optional=optional)
    if "int" in ann and "float" not in ann and "tuple" not in ann and "dict" not in ann:
        return Int(optional=optional)
    if "float" in ann and "dict" not in ann and "tuple" not in ann:
        return Float(optional=optional)
    if "Callable" in ann:
        return Callable_()
    if "Mapping" in ann or "dict" in ann:
        return Mapping_()
    if any(s in ann for s in ("Sequence", "Iterable", "list", "tuple")):
        return Seq()
    if name in ("x", "X", "y", "A", "B", "C", "values", "t", "weight", "update", "partial_sums", "outputs"):
        return Tensor()
    return Obj()


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------

ENTRIES: list[Entry] = []


def E(name: str, base=None, fuzz=None, *, skip_args=(), ident: str | None = None, **kw) -> None:
    """Add an entry: every parameter of ``name``'s signature is fuzzed, with the kind ``fuzz`` names or
    the one inferred from the parameter; ``skip_args`` are left alone (say why where used)."""
    mod, _, attr = name.partition(".")
    fn = getattr(MODULES[mod], attr)
    base = base or (lambda: {})
    kinds = {}
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in skip_args:
            continue
        kinds[p.name] = infer_kind(p)
    kinds.update(fuzz or {})
    if is_plain_record(fn):
        # A record amp_lab fills in itself (a dataclass or NamedTuple with no checks of its own): no domain is
        # imposed on its fields, only the contract on errors (no crash other than ValueError/TypeError).
        kinds = {
            k: dataclasses.replace(v, valid=lambda v: None, must_accept=lambda b: [])
            for k, v in kinds.items()
        }
    ENTRIES.append(Entry(ident or name, fn, base, kinds, **kw))


def is_plain_record(fn) -> bool:
    if not isinstance(fn, type):
        return False
    if dataclasses.is_dataclass(fn):
        return not hasattr(fn, "__post_init__")
    return issubclass(fn, tuple) and hasattr(fn, "_fields")


def T(*shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return torch.randn(*shape, generator=g).to(dtype)


# --- autocast_ops ---------------------------------------------------------------------------
E("autocast_lists.op_names", fuzz={"family": Str(choices=autocast_lists.FAMILIES)})
E("autocast_ops.autocast_dtype")
E("autocast_ops.probe", lambda: dict(ops=["mm"]), {"ops": Seq()})
E(
    "autocast_ops.classify",
    lambda: dict(fn=torch.mm, shapes=[(2, 3), (3, 2)]),
    {"shapes": Seq(), "fn": Callable_()},
    extra=[("shapes=[(10**6, 10**6)]", lambda: dict(fn=torch.add, shapes=[(10**6, 10**6)]))],
)
E(
    "autocast_ops.dispatch_trace",
    lambda: dict(fn=torch.mm),
    {"fn": Callable_(), "cache_enabled": Bool()},
    pos_names=("fn",),
    pos=lambda: (T(2, 3), T(3, 2)),
)
E("autocast_lists.documented_policy", lambda: dict(op="mm"), {"device_type": Str(choices=("cpu", "cuda"))})
E("autocast_ops.compare", lambda: dict(probed=probe_table()), {"probed": Obj()})
E(
    "autocast_ops.format_groups",
    lambda: dict(probed=probe_table()),
    {"probed": Obj(), "width": Int(*FORMAT_GROUPS_WIDTH)},
    post=is_str,
)
E(
    "autocast_lists.has_autocast_rule",
    lambda: dict(op="einsum", device_type="cuda"),
    {"op": Str(), "device_type": Str(choices=("cpu", "cuda"))},
)
E("autocast_lists.aten_op", lambda: dict(name="softmax"), {"name": Str(choices=autocast_lists.op_names())})
E("autocast_ops.rule_comparison", lambda: dict(probed=probe_table()), {"probed": Obj(), "ops": Seq()})
E("autocast_ops.rule_groups", lambda: dict(rows=autocast_ops.rule_comparison(probe_table())), {"rows": Seq()})
E(
    "autocast_ops.read_call",
    lambda: dict(op="mm", device_type="cpu", in_dtype=torch.float32, out_dtype=torch.bfloat16),
    {
        "op": Str(),
        "device_type": Str(choices=("cpu", "cuda")),
        "in_dtype": Dtype(),
        "out_dtype": Dtype(),
        "plain_dtype": Dtype(),
    },
)
E(
    "autocast_ops.read_variance",
    lambda: dict(
        truth=0.01, autocast_value=0.5, protected_value=0.01, mean_square=100.0, dtype=torch.bfloat16
    ),
    {
        "truth": Float(gt=0),
        "autocast_value": Float(),
        "protected_value": Float(),
        "mean_square": Float(gt=0),
        "dtype": Dtype(),
    },
)

# --- check ----------------------------------------------------------------------------------
# The exercise engine is internal: its callers are the exercise modules; a learner calls an exercise's
# check, whose answers tests/test_exercises_base.py feeds junk and whose `show` amp_lab.exercises checks.

# --- scaling: the learner's scaler beside GradScaler ------------------------------------------
E(
    "scaling.compare_with_grad_scaler",
    lambda: dict(make_scaler=lambda: scaling.DynamicLossScaler(), schedule=["clean", "inf"], device="cpu"),
    {
        "make_scaler": Callable_(),
        "schedule": Seq(),
        "init_scale": Scale(),
        "growth_factor": Float(gt=1, le=MAX_GROWTH_FACTOR),
        "backoff_factor": Float(gt=0, lt=1),
        "growth_interval": Int(1, MAX_GROWTH_INTERVAL),
        "rtol": Float(ge=0, le=1),
        "device": Device(),
    },
    examples=2,
    corpus_limit=3,
)

# --- exercises -----------------------------------------------------------------------------
# Internal (the notebooks call nbNN.exK.check, fed junk in tests/test_exercises_base.py).

# --- predict -------------------------------------------------------------------------------
E(
    "predict.Prediction",
    lambda: dict(question="which?", options=["a", "b"]),
    {"question": Str(), "options": Seq()},
    examples=3,
)
E(
    "predict.choice",
    lambda: dict(question="which?", options=["a", "b"]),
    {"question": Str(), "options": Seq()},
    examples=1,
)
E(
    "predict.reveal",
    lambda: dict(prediction=1.0, actual=1.0, show=False),
    {
        "prediction": Obj(),
        "actual": Obj(),
        "explain": Str(),
        "name": Str(),
        "rtol": Float(ge=0, optional=True),
        "match": Callable_(),
        "show": Bool(),
    },
)

# --- claims ---------------------------------------------------------------------------------
E("claims.claim", lambda: dict(statement="it holds", holds=True, show=False), {"holds": Bool()})

# --- course ---------------------------------------------------------------------------------
E("course.course_map", fuzz={"report": Obj()})

# --- data -----------------------------------------------------------------------------------
E("data.Split", lambda: dict(X=T(4, 2), y=torch.zeros(4, dtype=torch.long)))
E(
    "data.load_digits",
    fuzz={"test_fraction": with_valid(Float(gt=0, lt=1), digits_test_fraction_valid), "seed": Seed()},
    post=dataset_ok,
    corpus_limit=2,
    examples=4,
)

# --- device ---------------------------------------------------------------------------------
E("device.get_device", post=usable_device)
E("device.amp_dtype", post=is_dtype)
E("device.synchronize")
E("device.seed_everything")
E(
    "device.torch_threads",
    lambda: dict(num_threads=1),
    {"num_threads": Int(1, MAX_THREADS, optional=True)},
    cm=True,
)
E("device.supports_float64", lambda: dict(device="cpu"))

# --- doctor ---------------------------------------------------------------------------------
E(
    "doctor.main",
    lambda: dict(argv=[], version_of=lambda name: "99.0", out=None),
    {"argv": Seq(), "version_of": Callable_(), "out": Obj()},
    examples=3,
)

# --- formats --------------------------------------------------------------------------------
E("formats.round_to", lambda: dict(x=T(4), fmt="fp16"), {"x": Tensor()})
E("formats.decompose", lambda: dict(value=0.1, fmt="fp16"), {"value": Roundable()})
E("formats.formats_table", fuzz={"fmts": Seq()})
E("formats.plot_range_precision", fuzz={"fig": Obj(), "fmts": Seq()}, examples=3, corpus_limit=2)
E("formats.format_ulp", lambda: dict(value=1.0, fmt="fp16"), {"value": Roundable()})
E("format_explorer.bit_explorer", lambda: dict(value=0.1), {"value": Roundable(), "fmts": Seq()}, examples=4)

# --- gradients ------------------------------------------------------------------------------
# models.make_mlp is 03's and 04's network since issue 23 (gradients.make_mlp is gone); its bounds: cost's
E(
    "models.make_mlp",
    lambda: dict(hidden=8, depth=1),
    {
        "num_features": Int(1, cost.MAX_SIZE, skip_above=4096),
        "num_classes": Int(2, cost.MAX_SIZE, skip_above=4096),
        "hidden": Int(1, cost.MAX_SIZE, skip_above=256),
        "depth": Int(1, cost.MAX_DEPTH, skip_above=8),
        "seed": Seed(),
        "device": Device(),
    },
    examples=6,
)
E(
    "gradients.train_steps",
    lambda: dict(model=models.make_mlp(hidden=8, depth=1), data=split(), num_steps=1, batch_size=8),
    {
        "model": Obj(),
        "data": Obj(),
        "lr": Float(gt=0),
        "num_steps": Int(0, MAX_STEPS, skip_above=4),
        "budget_s": Float(ge=1.0, le=MAX_SECONDS, optional=True),
    },
    examples=4,
    corpus_limit=2,
)
E(
    "gradients.collect_gradients",
    lambda: dict(model=models.make_mlp(hidden=8, depth=1), X=split().X[:16], y=split().y[:16]),
    {
        "model": Obj(),
        "X": Tensor(),
        "y": Tensor(),
        "loss_fn": Callable_(),
        "loss_scale": Scale(),
        "autocast_dtype": Dtype(),
        "layer_types": Seq(),
    },
    examples=4,
)

# --- hardware -------------------------------------------------------------------------------
E("gpus.tensor_core_generation", lambda: dict(capability=(8, 0)))
E("gpus.amp_dtype_for", lambda: dict(device_type="cuda", capability=(8, 0)), post=is_dtype)
E(
    "hardware.machine_verdict",
    lambda: dict(cuda_available=False, tensor_cores=None, flags={}),
    {"tensor_cores": Obj(), "flags": Mapping_()},
)
E("hardware.tf32_setting")
E("hardware.describe")
E("hardware.setup_banner", examples=3)

# --- progress -------------------------------------------------------------------------------

# --- race -----------------------------------------------------------------------------------
RACE_FAST = dict(warmup=0, repeats=4, min_sample_s=1e-4, target_rel_width=None, max_time_s=None)
# max_time_s only bounds an adaptive race (target_rel_width given) and a tiny target_rel_width runs until
# max_time_s: each is fuzzed with the other one set, so that a valid value finishes well within the time limit.
RACE_ARG_BASE = {"target_rel_width": dict(max_time_s=0.3), "max_time_s": dict(target_rel_width=0.5)}
MEASURE_ARG_BASE = dict(RACE_ARG_BASE, max_repeats=dict(target_rel_width=0.5, max_time_s=0.3))


# A call's time budget (timing.check_budget): at least a second; a race estimated past it is refused.
BUDGET_S = Float(ge=1.0, le=MAX_SECONDS, optional=True)


def race_kinds(**more) -> dict:
    """The timing arguments the race functions share, with the bounds of ``timing.measure``."""
    return {
        "warmup": Int(0, MAX_REPEATS, skip_above=50),
        "repeats": Int(1, MAX_REPEATS, skip_above=50),
        "num_threads": Int(1, MAX_THREADS, optional=True, skip_above=4),
        "min_sample_s": Float(gt=0, le=MAX_SAMPLE_S, skip_above=0.05),
        # None is the race's default budget (RACE_MAX_TIME_S, 20 s): an adaptive race on a loaded
        # machine may use all of it, past the fuzz's call limit, so only given budgets are fuzzed.
        "max_time_s": Float(gt=0, le=MAX_SECONDS, optional=True, skip_above=0.5, skip_none=True),
        "target_rel_width": Float(ge=MIN_TARGET_REL_WIDTH, optional=True),
        **more,
    }


def adaptive_race_kinds(**more) -> dict:
    """:func:`race_kinds` for ``measure`` fuzzed with :data:`RACE_ARG_BASE`: with max_time_s given,
    target_rel_width=None is refused (max_time_s bounds an adaptive measurement only).  The races keep
    target_rel_width optional: their max_time_s has a default, which a race without a target ignores."""
    return race_kinds(target_rel_width=Float(ge=MIN_TARGET_REL_WIDTH), **more)


E(
    "race_widget.RaceWidget",
    lambda: dict(device="cpu", widths=[8], batches=[8], in_features=8, warmup=0, repeats=2),
    race_kinds(
        widths=Seq(),
        batches=Seq(),
        warmup=Int(0, MAX_REPEATS, optional=True),
        repeats=Int(1, MAX_REPEATS, optional=True),
        min_sample_s=Float(gt=0, le=MAX_SAMPLE_S, optional=True),
        num_threads=Int(1, MAX_THREADS, optional=True),
    ),
    examples=3,
)
E("gpus.datasheet_rows")
E("race_readout.tf32_summary", lambda: dict(result=race_result()), post=is_reading)
E("text.wrap", lambda: dict(value="a b c"), {"value": Obj()}, post=is_str)
E(
    "references.describe_reference",
    lambda: dict(reference={"machine": {"gpu_name": "H100"}, "date": "2025-01-01"}),
    {"reference": Mapping_()},
    post=is_str,
)
E("race_readout.explain", lambda: dict(result=race_result()), {"result": Obj()}, post=is_reading)
E("race_readout.elementwise_band", lambda: dict(result=race_result()), {"result": Obj()}, post=is_reading)
E("references.load_reference_results", fuzz={"directory": Str()}, examples=4)
E("race_readout.memory_summary", lambda: dict(result=mlp_result()), post=is_reading)
E("race.native_arithmetic", lambda: dict(result=race_result()))
E("sweeps.plot_memory", lambda: dict(result=mlp_sweep()), {"ax": Obj()}, examples=2, corpus_limit=3)
E("sweeps.plot_sweep", lambda: dict(result=sweep_result()), {"ax": Obj()}, examples=2, corpus_limit=3)
E(
    "race.race_matmul",
    lambda: dict(n=8, **RACE_FAST),
    race_kinds(n=Int(1, skip_above=512), callback=Callable_(), reuse=Obj(), budget_s=BUDGET_S),
    arg_base=RACE_ARG_BASE,
    examples=3,
    corpus_limit=2,
)
E(
    "race.race_fp8_matmul",
    lambda: dict(n=16, **RACE_FAST),
    race_kinds(
        n=multiple_of(16, Int(1, cost.MAX_GEMM_DIM, skip_above=256)),
        callback=Callable_(),
        reuse=Obj(),
        budget_s=BUDGET_S,
    ),
    arg_base=RACE_ARG_BASE,
    examples=3,
    corpus_limit=2,
)
E(
    "race.fp8_cast_overhead",
    lambda: dict(n=16, **RACE_FAST),
    race_kinds(
        n=multiple_of(16, Int(1, cost.MAX_GEMM_DIM, skip_above=256)),
        scaling=Str(choices=("tensorwise", "rowwise")),
        callback=Callable_(),
        budget_s=BUDGET_S,
    ),
    arg_base=RACE_ARG_BASE,
    examples=3,
    corpus_limit=2,
)
E("gpus.fp8_datasheet_rows")
E("race.fp8_summary", lambda: dict(result=fp8_race_result()), {"result": Obj()}, post=is_reading)
E(
    "race.race_mlp",
    lambda: dict(width=8, batch=8, in_features=8, **RACE_FAST),
    race_kinds(
        width=Int(1, skip_above=256),
        batch=Int(1, skip_above=256),
        in_features=Int(1, skip_above=256),
        num_classes=Int(1, skip_above=256),
        callback=Callable_(),
        reuse=Obj(),
        budget_s=BUDGET_S,
    ),
    arg_base=RACE_ARG_BASE,
    examples=3,
    corpus_limit=2,
)
E(
    "race_widget.race_widget",
    lambda: dict(device="cpu", widths=[8], batches=[8], in_features=8, repeats=2, warmup=0),
)
E(
    "references.reference_table_html",
    lambda: dict(references=[]),
    {"references": Seq(), "mine": Obj()},
    post=is_str,
)
E("sweeps.sizes_for")
E(
    "sweeps.sweep",
    lambda: dict(sizes=[8], show_progress=False, **RACE_FAST),
    race_kinds(
        sizes=Seq(),
        kind=Str(choices=("matmul", "mlp")),
        batch=Int(1, optional=True, skip_above=256),
        width=Int(1, optional=True, skip_above=256),
        reuse=Obj(),
        budget_s=BUDGET_S,
    ),
    arg_base=RACE_ARG_BASE,
    examples=3,
    corpus_limit=2,
)
E("race_readout.sweep_summary", lambda: dict(result=sweep_result()), post=is_reading)
E(
    "sweeps.race_alignment",
    lambda: dict(n=8, **RACE_FAST),
    race_kinds(n=Int(2, cost.MAX_GEMM_DIM, skip_above=256)),
    arg_base=RACE_ARG_BASE,
    examples=3,
    corpus_limit=2,
    post=is_reading,
)

# --- ranges ---------------------------------------------------------------------------------
E("range_counts.range_report", lambda: dict(x=T(8), fmt="fp16"), {"x": Tensor(), "scale": Scale()})
E(
    "range_counts.per_layer_reports",
    lambda: dict(tensors={"a": T(4)}, fmt="fp16"),
    {"tensors": Mapping_(), "scale": Scale()},
)
E("range_counts.overflow_threshold", lambda: dict(fmt="fp16"))
E("range_counts.log2_limits", lambda: dict(fmt="fp16"))
E("range_counts.suggest_scale", lambda: dict(x=T(8), fmt="fp16"), {"x": Tensor()}, post=float32_scale)
E("range_counts.suggest_log2_scale", lambda: dict(x=T(8), fmt="fp16"), {"x": Tensor()})
E(
    "range_counts.log2_histogram",
    lambda: dict(x=T(8)),
    {
        "x": Tensor(),
        "scale": Scale(),
        "lo": Int(*LOG2_HISTOGRAM_LO, optional=True),
        "hi": Int(*LOG2_HISTOGRAM_HI, optional=True),
    },
    # without the other end, the data's own smallest/largest binade bounds lo and hi
    arg_base={"lo": dict(hi=LOG2_HISTOGRAM_HI[1]), "hi": dict(lo=LOG2_HISTOGRAM_LO[0])},
)
E(
    "ranges.plot_log2_histogram",
    lambda: dict(x=T(8)),
    {"x": Tensor(), "fmts": Seq(), "scale": Scale(), "ax": Obj(), "xlim": Seq()},
    examples=2,
    corpus_limit=3,
)
E(
    "range_counts.lost_update_fraction",
    lambda: dict(weight=torch.ones(4), update=torch.full((4,), 1e-4)),
    {"weight": Tensor(), "update": Tensor()},
    post=is_float,
)
E(
    "ranges.scale_explorer",
    lambda: dict(x=T(8)),
    {
        "x": Tensor(),
        "log2_scale": Int(
            *SCALE_EXPLORER_LOG2
        ),  # the slider: 0 to the data's top, extended to a start above it
        "max_log2": Int(*SCALE_EXPLORER_MAX_LOG2, optional=True),  # None: from the data
    },
    examples=2,
    corpus_limit=3,
)

# --- recipe ---------------------------------------------------------------------------------
E("amp.choose_amp_dtype", fuzz={"report": Obj()})
E(
    "models.make_mlp",
    lambda: dict(hidden=8, depth=1),
    {
        "hidden": Int(1, skip_above=4096),
        "depth": Int(1, skip_above=64),
        "num_features": Int(1, skip_above=4096),
        "num_classes": Int(1, skip_above=4096),
    },
)
E(
    "recipe.make_scaler",
    lambda: dict(dtype=torch.float16),
    {"init_scale": Scale(), "growth_interval": Int(1, recipe.MAX_GROWTH_INTERVAL)},
)
E(
    "recipe.micro_batches",
    lambda: dict(split=split(), step=0, batch_size=8),
    {
        "split": Obj(),
        "step": Int(0, RECIPE_MAX_STEP),
        "batch_size": Int(1, RECIPE_MAX_SIZE),
        "accumulation_steps": Int(1, RECIPE_MAX_SIZE),
    },
)


def _train_step_base():
    m = model()
    s = split()
    return dict(
        model=m,
        opt=opt_for(m),
        scaler=recipe.make_scaler(torch.float32),
        batches=[(s.X[:8], s.y[:8])],
        dtype=torch.float32,
    )


STEP_FUZZ = {
    "model": Obj(),
    "opt": Obj(),
    "scaler": Obj(),
    "batches": Seq(),
    "max_grad_norm": Float(gt=0, optional=True),
}
E("recipe.train_step", _train_step_base, STEP_FUZZ, examples=4)
E("recipe.sync_free_step", _train_step_base, STEP_FUZZ, examples=4)


def _train_base():
    b = _train_step_base()
    del b["batches"]
    return dict(b, split=split(), num_steps=1, batch_size=8)


E(
    "recipe.train",
    _train_base,
    {
        "model": Obj(),
        "opt": Obj(),
        "scaler": Obj(),
        "split": Obj(),
        "num_steps": Int(0, MAX_STEPS, skip_above=4),
        "start_step": Int(0, RECIPE_MAX_STEP - 1),  # start_step + num_steps (1) stays a step number
        "batch_size": Int(1, RECIPE_MAX_SIZE, skip_above=512),
        "accumulation_steps": Int(1, RECIPE_MAX_SIZE, skip_above=4),
        "max_grad_norm": Float(gt=0, optional=True),
        "scheduler": Obj(),
        "log_every": Int(1, MAX_STEPS, optional=True),  # how many steps between host reads (None: at the end)
        "budget_s": BUDGET_S,
    },
    examples=3,
    corpus_limit=2,
)
E("recipe.count_host_reads", cm=True)


@functools.cache
def _fp16_history():
    m = model()
    scaler = recipe.make_scaler(torch.float16, init_scale=2.0**24)
    return recipe.train(
        m, opt_for(m), scaler, split(), dtype=torch.float16, num_steps=2, batch_size=8
    ), scaler


E(
    "recipe.read_scale_path",
    lambda: dict(history=_fp16_history()[0], scaler=_fp16_history()[1]),
    {"history": Obj(), "scaler": Obj()},
)
E("recipe.read_scaled_norm", lambda: dict(scale=2.0**16), {"scale": Scale()})
E(
    "clipping.compare_clipping",
    lambda: dict(data=digits(), num_steps=1, batch_size=8, hidden=8, depth=1),
    {
        "data": Obj(),
        "scale": Scale(),
        "max_norm": Float(gt=0),
        "num_steps": Int(1, clipping.MAX_CLIPPING_STEPS, skip_above=2),
        "batch_size": Int(1, skip_above=64),  # at most the training examples
        "hidden": Int(1, skip_above=64),
        "depth": Int(1, skip_above=4),
        "lr": Float(gt=0, le=recipe.MAX_LR),
    },
    examples=2,
    corpus_limit=3,
)
E(
    "recipe.evaluate",
    lambda: dict(model=model(), split=split(), dtype=torch.float32),
    {"model": Obj(), "split": Obj(), "batch_size": Int(1, RECIPE_MAX_SIZE)},
)


def _ckpt_path():
    import tempfile

    return os.path.join(tempfile.mkdtemp(prefix="amp_lab_fuzz_"), "ckpt.pt")


def _save_base():
    b = _train_step_base()
    del b["batches"], b["dtype"]
    return dict(b, path=_ckpt_path(), step=1)


E(
    "checkpoints.save_checkpoint",
    _save_base,
    {
        "path": Str(),
        "model": Obj(),
        "opt": Obj(),
        "scaler": Obj(),
        "step": Int(0, RECIPE_MAX_STEP),
        "scheduler": Obj(),
        "extra": Mapping_(),
    },
    examples=3,
    corpus_limit=2,
)


@functools.cache
def _saved_checkpoint():
    b = _save_base()
    return checkpoints.save_checkpoint(**b)


def _load_base():
    b = _save_base()
    b["path"] = _saved_checkpoint()
    del b["step"]
    return b


E(
    "checkpoints.load_checkpoint",
    _load_base,
    {"path": Str(), "model": Obj(), "opt": Obj(), "scaler": Obj(), "scheduler": Obj()},
    examples=3,
    corpus_limit=2,
)
RECIPE_SIZES = {
    "num_features": Int(1, RECIPE_MAX_SIZE),
    "num_classes": Int(2, RECIPE_MAX_SIZE),
    "hidden": Int(1, RECIPE_MAX_SIZE),
    "depth": Int(1, cost.MAX_DEPTH),
    "batch_size": Int(1, RECIPE_MAX_SIZE),
    "accumulation_steps": Int(1, RECIPE_MAX_SIZE),
}
E(
    "compare.compare_precisions",
    lambda: dict(data=digits(), num_steps=1, warmup_steps=0, hidden=8, depth=1, batch_size=8),
    {
        "data": Obj(),
        "dtypes": Seq(),
        "num_steps": Int(1, skip_above=3),
        "warmup_steps": Int(0, skip_above=3),
        # None: the machine's size (compare.sizes_for), with the other one small in the base call
        "batch_size": Int(1, optional=True, skip_above=256),
        "accumulation_steps": Int(1, skip_above=3),
        "hidden": Int(1, optional=True, skip_above=256),
        "depth": Int(1, skip_above=8),
        "lr": Float(gt=0, le=recipe.MAX_LR),
        "threads": Int(1, MAX_THREADS, optional=True, skip_above=4),
        "budget_s": Float(ge=1, le=MAX_SECONDS),
    },
    examples=2,
    corpus_limit=3,
)
E("compare.sizes_for", lambda: dict(data=digits()), {"data": Obj(), "dtypes": Seq()})
E("compare.comparison_rows", lambda: dict(results=precision_results()), {"results": Seq()})
E(
    "compare.read_comparison",
    lambda: dict(results=precision_results(), choice=amp.choose_amp_dtype()),
    {"results": Seq(), "choice": Obj()},
)
E(
    "compare.read_memory",
    lambda: dict(results=precision_results(), choice=amp.choose_amp_dtype()),
    {"results": Seq(), "choice": Obj(), "accuracy_tolerance": Float(ge=0, le=1)},
)
E("compare.read_tf32", fuzz={"device": Device()})
E("amp.example_machines", fuzz={"base": Obj()})
E("amp.choice_rows", lambda: dict(machines=[("cpu", report())]), {"machines": Seq()})

# --- scaling --------------------------------------------------------------------------------
E(
    "scaling.DynamicLossScaler",
    fuzz={
        "init_scale": Scale(),
        "growth_factor": Float(gt=1, le=MAX_GROWTH_FACTOR),
        "backoff_factor": Float(gt=0, lt=1),
        "growth_interval": Int(1, MAX_GROWTH_INTERVAL),
    },
    post=scaler_scale_ok,
)
E("scaling.StaticLossScaler", lambda: dict(scale=1024.0), {"scale": Scale()}, post=scaler_scale_ok)

E(
    "scaling.read_schedule",
    lambda: dict(
        found=scaling.ScalerComparison(True, 2, scales=(2.0, 4.0)), init_scale=2.0, growth_interval=1
    ),
    {
        "found": Obj(),
        "init_scale": Scale(),
        "growth_interval": Int(1, MAX_GROWTH_INTERVAL),
        "backoff_factor": Float(gt=0, lt=1),
    },
)
E(
    "scaling.read_backoff",
    lambda: dict(scales=[0.5, 0.25, 0.0], ours_refused=True),
    {"scales": Seq(), "ours_refused": Bool()},
)
E(
    "scaling.runs_use",
    lambda: dict(chosen=scaling.StaticLossScaler, mine=scaling.StaticLossScaler),
    {"chosen": Obj(), "mine": Obj()},
)

# --- tensor_cores ---------------------------------------------------------------------------
E(
    "tensor_cores.mma",
    lambda: dict(A=T(4, 4), B=T(4, 4)),
    {"A": Tensor(), "B": Tensor(), "C": Tensor(), "inputs": Fmt(), "accumulate": Fmt()},
    extra=[("2048x2048 A and B", lambda: dict(A=torch.ones(2048, 2048), B=torch.ones(2048, 2048)))],
)
E(
    "tensor_cores.reference_mma",
    lambda: dict(A=T(4, 4), B=T(4, 4)),
    {"A": Tensor(), "B": Tensor(), "C": Tensor(), "inputs": Fmt()},
    extra=[("2048x2048 A and B", lambda: dict(A=torch.ones(2048, 2048), B=torch.ones(2048, 2048)))],
)
E("tensor_cores.running_sum", lambda: dict(values=torch.ones(8)), {"values": Tensor(), "accumulate": Fmt()})
E(
    "tensor_cores.first_stall",
    lambda: dict(partial_sums=torch.tensor([1.0, 2.0, 2.0])),
    {"partial_sums": Tensor()},
)
E(
    "tensor_cores.accumulation_curve",
    lambda: dict(k_max=64, batch=2),
    {
        "k_max": Int(1, MAX_K, skip_above=2**12),
        "batch": Int(1, 4096, skip_above=256),
        "accumulators": Seq(),
        # finite, high > low (the other one at its default)
        "low": Float(lt=default_of(tensor_cores.accumulation_curve, "high")),
        "high": Float(gt=default_of(tensor_cores.accumulation_curve, "low")),
    },
    examples=3,
)
E(
    "accumulation.accumulation_explorer",
    lambda: dict(k=8, k_max=64, batch=2),
    {
        "k": Int(1, 64),
        "k_max": Int(1, MAX_K, skip_above=2**12),
        "batch": Int(1, 4096, skip_above=256),
        "accumulators": Seq(),
    },
    examples=3,
    corpus_limit=2,
)
E(
    "accumulation.limited_accumulation_explorer",
    lambda: dict(k=128, size=2),
    {
        "mantissa_bits": Int(8, 23),
        "promote_every": Int(0, 1024),
        "k": Int(128, 2**14),
        "size": Int(1, 32, skip_above=4),
    },
    examples=3,
    corpus_limit=2,
)
E("tensor_cores.generations_table", lambda: dict(capabilities=((8, 0),)), {"capabilities": Seq()})
E(
    "tensor_cores.stall_reading",
    lambda: dict(n=8),
    {"n": Int(1, MAX_K, skip_above=2**12), "accumulate": Fmt()},
)
E("tensor_cores.matmul_flags")
E("alignment.alignment_multiple", lambda: dict(fmt="fp16"))
E(
    "alignment.padding_reading",
    lambda: dict(m=4096, n=50257),
    {"m": Int(1, 2**30), "n": Int(1, 2**30), "tile_n": Int(1, 2**30)},
)
E("alignment.pad_to_multiple", lambda: dict(n=7), {"n": Int(0), "multiple": Int(1)}, post=nonneg_int)
E(
    "alignment.tile_quantization",
    lambda: dict(m=1024, n=1024),
    {
        "m": Int(1, 2**31),
        "n": Int(1, 2**31),
        "tile_m": Int(1, 2**31),
        "tile_n": Int(1, 2**31),
        "sms": Int(1, 2**31),
    },
)
E(
    "alignment.alignment_demo",
    lambda: dict(n=16, repeats=2, warmup=0),
    {
        "n": Int(1, skip_above=128),
        "repeats": Int(1, skip_above=20),
        "warmup": Int(0, skip_above=20),
        "budget_s": BUDGET_S,
    },
    examples=3,
)

# --- timing ---------------------------------------------------------------------------------
E(
    "timing.describe_context",
    lambda: dict(context=timing.timing_context()),
    {"context": Mapping_()},
    post=is_str,
)
E(
    "text.format_bytes",
    lambda: dict(nbytes=1024),
    {"nbytes": Float(optional=True, finite=False)},
    post=is_str,
)
E("text.format_seconds", lambda: dict(seconds=1e-3), {"seconds": Float(finite=False)}, post=is_str)
E(
    "timing.measure",
    lambda: dict(fns={"a": lambda: None, "b": lambda: None}, **RACE_FAST),
    adaptive_race_kinds(
        fns=Mapping_(),
        number=Int(1, MAX_CALLS_PER_SAMPLE, optional=True, skip_above=1000),
        max_repeats=Int(RACE_FAST["repeats"], MAX_REPEATS, optional=True),
        confidence=Float(gt=0, lt=1),
        extra_context=Mapping_(),
        callback=Callable_(),
        budget_s=BUDGET_S,
    ),
    arg_base=MEASURE_ARG_BASE,
    extra=[("fn, repeats=10**12", lambda: dict(fns=lambda: None, repeats=10**12))],
    examples=4,
)
E("intervals.min_pairs", fuzz={"confidence": Float(gt=0, lt=1)}, post=nonneg_int)
E(
    "intervals.speedup_estimate",
    lambda: dict(baseline=timing_obj("a", 2.0), contender=timing_obj("b")),
    {"baseline": Seq(), "contender": Seq(), "confidence": Float(gt=0, lt=1)},
)
E(
    "timing.sync_summary",
    lambda: dict(queued_s=1e-3, finished_s=2e-3),
    {"queued_s": Float(gt=0, le=2e-3), "finished_s": Float(ge=1e-3)},  # finished_s is read later: >= queued_s
    post=is_reading,
)
E("timing.timing_context")

# --- training -------------------------------------------------------------------------------
SCALER_EXPLORER_KINDS = {
    "num_steps": Int(1, MAX_EXPLORER_STEPS, skip_above=3),
    "log2_init_scale": Int(*SCALER_EXPLORER_LOG2),
    "growth_interval": Int(*SCALER_EXPLORER_GROWTH),
    "backoff_factor": Float(ge=SCALER_EXPLORER_BACKOFF[0], le=SCALER_EXPLORER_BACKOFF[1]),
    "train_kwargs": Mapping_(),
}
E(
    "training.runs_table",
    lambda: dict(runs=[training.TrainingRun(label="x", losses=[1.0, math.nan])]),
    {"runs": Seq(), "last": Int(1)},
)
E(
    "training.cpu_threads",
    lambda: dict(num_threads=1, device=torch.device("cpu")),
    {"num_threads": Int(1, MAX_THREADS, optional=True)},
    cm=True,
)
E(
    "training.scaler_explorer",
    lambda: dict(num_steps=1, train_kwargs=dict(depth=2, width=4, batch_size=8)),
    SCALER_EXPLORER_KINDS,
    examples=2,
    corpus_limit=3,
)
E(
    "training.read_static_runs",
    lambda: dict(runs={16.0: training.TrainingRun(label="x", losses=[1.0])}),
    {"runs": Mapping_(), "grew": Bool()},
)
E(
    "training.train_digits",
    lambda: dict(num_steps=1, depth=2, width=4, batch_size=8),
    {
        "scaler": Obj(),
        "num_steps": Int(1, MAX_STEPS, skip_above=3),
        "batch_size": Int(1, skip_above=256),
        "lr": Float(gt=0, le=MAX_LR),
        "depth": Int(2, MLP_MAX_DEPTH, skip_above=16),
        "width": Int(1, MLP_MAX_WIDTH, skip_above=64),
        "max_grad_norm": Float(gt=0, optional=True),
        "data": Obj(),
        "num_threads": Int(1, MAX_THREADS, optional=True, skip_above=4),
        "convert": Callable_(),
        "budget_s": BUDGET_S,
    },
    examples=2,
    corpus_limit=3,
)


# --- fp8_recipes (notebook 11) ----------------------------------------------------------------
def small_tensors() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "activations": torch.randn(16, 128, generator=g),
        "gradients": torch.randn(16, 128, generator=g) * 1e-3,
    }


def recipe_runs() -> dict:
    from amp_lab.training import TrainingRun

    runs = {"FP32": TrainingRun("FP32", losses=[0.1] * 20), "FP8": TrainingRun("FP8", losses=[0.11] * 20)}
    for r in runs.values():
        r.test_accuracy = 0.95
    return runs


E("fp8_recipes.frontier_tensors", fuzz={"seed": Seed()})
E(
    "fp8_recipes.recipe_table",
    lambda: dict(tensors=small_tensors()),
    {"tensors": Mapping_(), "quantizers": Seq()},
)
E("fp8_recipes.transposition", lambda: dict(w=T(128, 128)), {"w": Tensor(), "block": Obj()})
E("fp8_recipes.recipe_verdicts", lambda: dict(runs=recipe_runs()), {"runs": Mapping_(), "baseline": Str()})
E(
    "fp8_recipes.hadamard_reading",
    lambda: dict(plain_error=0.1, transformed_error=0.2),
    {"plain_error": Float(ge=0), "transformed_error": Float(ge=0)},
    post=is_reading,
)
E(
    "fp8_recipes.fp8_speed_rule",
    lambda: dict(n=1024),
    {
        "n": Int(16, fp8_recipes.MAX_RULE_N),
        "recipe": Str(choices=("tensorwise", "rowwise")),
        "gpu": Str(),
        "bf16_s": Float(gt=0, le=3600.0, optional=True),
        "fp8_s": Float(gt=0, le=3600.0, optional=True),
        "cast_s": Float(gt=0, le=3600.0, optional=True),
    },
)
E("fp8_recipes.storage_bytes", lambda: dict(quantizer="nvfp4"), {"quantizer": Str(choices=tuple(fp8_recipes.STORAGE)),
  "shape": Obj()})  # fmt: skip


# --- fp8 ------------------------------------------------------------------------------------
def fp8_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))


# fp8.Float8Matmul: an autograd Function notebook 08 shows; a learner reads it and reaches it through
# convert_to_float8 (fuzzed below), which checks what the layer hands it.
SKIPPED.add("fp8.Float8Matmul")
FP8_FMT = Str(choices=tuple(fp8.FP8_FORMATS))
ELEMENT_FMT = Str(choices=tuple(fp8.ELEMENT_FORMATS))
HISTORY_KINDS = {
    "history_len": Int(1, fp8.MAX_HISTORY),
    "margin": Int(0, fp8.MAX_MARGIN),
    "algo": Str(choices=fp8.ALGOS),
}
E("fp8.import_torchao")
E("fp8.fp8_device", fuzz={"device": Device()})
E(
    "fp8.tensorwise_scale",
    lambda: dict(x=T(4, 16)),
    {"x": Tensor(), "fmt": FP8_FMT, "margin": Int(0, fp8.MAX_MARGIN)},
)
E(
    "fp8.quantize",
    lambda: dict(x=T(4, 16), fmt="fp8_e4m3", scale=torch.tensor(2.0)),
    {"x": Tensor(), "fmt": FP8_FMT, "scale": Obj()},
)
E(
    "fp8.dequantize",
    lambda: dict(q=T(4, 16).to(torch.float8_e4m3fn), scale=torch.tensor(2.0)),
    {"q": Tensor(), "scale": Obj()},
)
E(
    "fp8.saturation_count",
    lambda: dict(x=T(4, 16), fmt="fp8_e4m3", scale=torch.tensor(2.0)),
    {"x": Tensor(), "fmt": FP8_FMT, "scale": Obj()},
    post=nonneg_int,
)
E("fp8.quantization_error", lambda: dict(x=T(4, 16), xq=T(4, 16)), {"x": Tensor(), "xq": Tensor()})
E("fp8.DelayedScaling", fuzz={"fmt": FP8_FMT, **HISTORY_KINDS})
E("fp8.float8_module_filter", lambda: dict(module=torch.nn.Linear(16, 16)), {"module": Obj(), "fqn": Str()})
E(
    "fp8.convert_to_float8",
    lambda: dict(model=fp8_model()),
    {
        "model": Obj(),
        "recipe": Str(choices=fp8.RECIPES),
        "scaling": Str(choices=fp8.SCALINGS),
        "module_filter": Callable_(),
        **HISTORY_KINDS,
    },
)
E(
    "mx.convert_to_mx",
    lambda: dict(model=fp8_model()),
    {"model": Obj(), "elem": ELEMENT_FMT, "block_size": Obj(), "module_filter": Callable_()},
)
E(
    "mx.mx_quantize",
    lambda: dict(x=T(2, 32)),
    {"x": Tensor(), "elem": ELEMENT_FMT, "block_size": Obj(), "scale_mode": Str(choices=mx.SCALE_MODES)},
)
NVFP4_KINDS = {"x": Tensor(), "per_tensor_scale": Obj(), "block": Obj(), "rounding": Str(choices=mx.ROUNDINGS),
               "generator": Obj()}  # fmt: skip
E("mx.nvfp4_quantize", lambda: dict(x=T(16, 32)), NVFP4_KINDS)
# notebook 11 calls the block formats and the accumulator through amp_lab.fp8, which re-exports them
E("fp8.nvfp4_quantize", lambda: dict(x=T(16, 32)), NVFP4_KINDS)
E(
    "fp8.convert_to_mx",
    lambda: dict(model=fp8_model()),
    {"model": Obj(), "elem": ELEMENT_FMT, "block_size": Obj()},
)
E(
    "fp8.convert_to_nvfp4",
    lambda: dict(model=fp8_model()),
    {"model": Obj(), "seed": Seed(), "module_filter": Callable_()},
)
E("fp8.random_hadamard", lambda: dict(n=16), {"n": Int(1, mx.MAX_HADAMARD, skip_above=256), "seed": Seed()})
E("fp8.stochastic_round_fp4", lambda: dict(v=T(4, 16)), {"v": Tensor(), "generator": Obj()})
E(
    "fp8.blockwise_quantize",
    lambda: dict(x=T(4, 256)),
    {"x": Tensor(), "block": Obj(), "fmt": FP8_FMT},
)
E("fp8.quantization_stats", lambda: dict(x=T(16, 32), quantizer="rowwise"), {"x": Tensor(),
  "quantizer": Str(choices=fp8.QUANTIZERS)})  # fmt: skip
E(
    "fp8.round_accumulator",
    lambda: dict(x=T(8).double(), mantissa_bits=13),
    {"x": Obj(), "mantissa_bits": Int(1, 52)},
)
E(
    "fp8.limited_accumulation_matmul",
    lambda: dict(a=T(2, 8), b=T(8, 3), mantissa_bits=13),
    {
        "a": Tensor(),
        "b": Tensor(),
        "mantissa_bits": Int(1, 52),
        "promote_every": Int(1, 2**16, optional=True),
    },
)
E(
    "fp8.limited_accumulation_error",
    lambda: dict(k=64, mantissa_bits=13, size=4),
    {
        "k": Int(1, 2**16, skip_above=4096),
        "mantissa_bits": Int(1, 52),
        "promote_every": Int(1, 2**16, optional=True),
        "size": Int(1, 64, skip_above=8),
        "seed": Seed(),
    },
    examples=3,
    corpus_limit=2,
)
E(
    "fp8_explorer.make_tensor_sequence",
    lambda: dict(num_steps=4, size=16, spike_step=2),
    {
        "num_steps": Int(1, fp8_explorer.MAX_SEQUENCE_STEPS, skip_above=64),
        "size": Int(1, fp8_explorer.MAX_SEQUENCE_SIZE, skip_above=4096),
        "drift": Float(ge=-1.0, le=1.0),
        "spike_step": Int(0, 3, optional=True),
        "spike_size": Float(ge=1.0, le=1e6),
        "seed": Seed(),
    },
)
E(
    "fp8_explorer.scaling_trajectory",
    lambda: dict(tensors=fp8_explorer.make_tensor_sequence(6, size=16, spike_step=3)),
    {"tensors": Obj(), "fmt": FP8_FMT, "recipe": Str(choices=("delayed", "current")), **HISTORY_KINDS},
)


def fp8_trajectories() -> dict:
    tensors = fp8_explorer.make_tensor_sequence(6, size=16, spike_step=3)
    return dict(
        current=fp8_explorer.scaling_trajectory(tensors, recipe="current"),
        delayed=fp8_explorer.scaling_trajectory(tensors, recipe="delayed"),
        spike_step=3,
    )


E(
    "fp8_explorer.spike_reading",
    fp8_trajectories,
    {"current": Obj(), "delayed": Obj(), "spike_step": Int(0, 5)},
)
E(
    "fp8_explorer.spread_reading",
    lambda: dict(activations=[9.5, 9.0], gradients=[24.4, 57.7], e4m3_window=18.8, e5m2_window=32.8),
    {"activations": Seq(), "gradients": Seq(), "e4m3_window": Float(gt=0), "e5m2_window": Float(gt=0)},
)
E("fp8_explorer.unscaled_reading", lambda: dict(largest=2.0**-9), {"largest": Float(gt=0), "fmt": FP8_FMT})
E(
    "fp8_explorer.identity_reading",
    lambda: dict(ours=[1.0, 0.5], theirs=[1.0, 0.5], same_weights=True),
    {"ours": Seq(), "theirs": Seq(), "same_weights": Bool()},
)
E("fp8_explorer.gradient_format_reading", lambda: dict(gradients=[T(4, 32), T(2, 64)]), {"gradients": Seq()})
E("fp8_explorer.scale_mode_reading", lambda: dict(x=T(4, 64)), {"x": Tensor(), "block_size": Obj()})
EXPLORER_KINDS = {
    "num_steps": Int(2, 200, skip_above=16),
    "size": Int(1, 4096, skip_above=64),
    "history_len": Int(1, 64),
    "margin": Int(0, 8),
    "spike_step": Int(0, 7),
    "spike_size": Float(ge=1.0, le=1e4),
    "algo": Str(choices=fp8.ALGOS),
    "fmt": FP8_FMT,
    "seed": Seed(),
}
E(
    "fp8_explorer.scaling_explorer",
    lambda: dict(num_steps=8, size=32, spike_step=4),
    EXPLORER_KINDS,
    examples=2,
    corpus_limit=3,
)

# --- widgets --------------------------------------------------------------------------------
E(
    "widgets.table_html",
    lambda: dict(rows=[["a", 1]], header=["x", "y"]),
    {"rows": Seq(), "header": Seq()},
    post=is_str,
)
E(
    "widgets.Table",
    lambda: dict(rows=[["a", 1]], header=["x", "y"]),
    {"rows": Seq(), "header": Seq(), "caption": Str()},
    post=lambda r, kw: (
        None if isinstance(repr(r), str) and r._repr_html_().startswith("<table") else "no table"
    ),
)
E("widgets.SmokeTest", fuzz={"k": Int(*SMOKE_TEST_K)}, examples=3)
E("widgets.smoke_test", fuzz={"k": Int(*SMOKE_TEST_K)}, examples=3)


# --- race: the memory-bound regime (issue 15) ----------------------------------------------------------


@functools.cache
def roofline():
    return roofline_module.measure_roofline("cpu", n=8, numel=64, warmup=0, repeats=2, min_sample_s=1e-4)


E("cost.elementwise_intensity", post=is_float)
E("cost.step_flops", fuzz=RECIPE_SIZES, post=is_float)
E("cost.step_bytes", fuzz=RECIPE_SIZES, post=is_float)
E(
    "cost.matmul_intensity",
    lambda: dict(m=8, n=8, k=8),
    {"m": Int(1, cost.MAX_GEMM_DIM), "n": Int(1, cost.MAX_GEMM_DIM), "k": Int(1, cost.MAX_GEMM_DIM)},
    post=is_float,
)
E(
    "roofline.measure_roofline",
    lambda: dict(n=8, numel=64, warmup=0, repeats=2, min_sample_s=1e-4),
    {
        "n": Int(1, cost.MAX_GEMM_DIM, optional=True, skip_above=256),
        "numel": Int(1, cost.MAX_NUMEL, optional=True, skip_above=2**16),
        "warmup": Int(0, MAX_REPEATS, skip_above=50),
        "repeats": Int(1, MAX_REPEATS, skip_above=50),
        "min_sample_s": Float(gt=0, le=MAX_SAMPLE_S, skip_above=0.05),
        "num_threads": Int(1, MAX_THREADS, optional=True, skip_above=4),
        "budget_s": BUDGET_S,
    },
    examples=3,
    corpus_limit=2,
)
E(
    "roofline.plot_roofline",
    lambda: dict(roofline=roofline(), results=[race_result()]),
    {"roofline": Obj(), "results": Obj(), "ax": Obj()},
    examples=2,
    corpus_limit=3,
)
E(
    "roofline.race_elementwise",
    lambda: dict(numel=64, **RACE_FAST),
    race_kinds(
        numel=Int(1, cost.MAX_NUMEL, skip_above=2**16), callback=Callable_(), reuse=Obj(), budget_s=BUDGET_S
    ),
    arg_base=RACE_ARG_BASE,
    examples=3,
    corpus_limit=2,
)
E(
    "roofline.roofline_summary",
    lambda: dict(roofline=roofline(), results=[race_result()]),
    {"roofline": Obj(), "results": Obj()},
    post=is_reading,
)


# --- pitfalls -------------------------------------------------------------------------------
# (and the rooms split off it: swamping, subnormals)
SWAMP_LIMIT = float(torch.finfo(torch.bfloat16).max) / 2  # swamping_run: no method may overflow


def swamp_valid(other):
    """``swamping_run``'s ``update`` (non-zero) and ``start``: with the base's 5 steps of ``other``, within
    half of bfloat16's largest value."""

    def valid(v):
        ok = Float().valid(v)
        if not ok:
            return ok
        return abs(float(v)) + 5 * abs(other) <= SWAMP_LIMIT and (other != 1.0 or float(v) != 0)

    return valid


@functools.cache
def swamp_result():
    return swamping.swamping_run(5, numel=4, device="cpu")


E("pitfalls.weight_cast_cache", fuzz={"lr": Float(gt=0, le=1e3)}, examples=2, corpus_limit=2)
E("pitfalls.read_cast_cache", lambda: dict(weight_changed=True, stale_inside=True),
  {"weight_changed": Bool(), "stale_inside": Bool()})  # fmt: skip
E("pitfalls.read_fp16_eps", lambda: dict(eps=1e-8), {"eps": Float(ge=0, le=1.0)})
E(
    "pitfalls.adam_eps_underflow",
    lambda: dict(num_steps=3, numel=4),
    {
        "grad_size": Float(gt=0, le=1e4),
        "num_steps": Int(1, pitfalls.MAX_STEPS, skip_above=1000),
        "lr": Float(gt=0, le=10.0),
        "eps": Float(ge=0, le=1.0),
        "numel": Int(1, pitfalls.MAX_NUMEL, skip_above=1 << 16),
    },
    examples=2,
)
E("swamping.stochastic_round", lambda: dict(x=T(8)), {"x": Tensor(), "generator": Obj()})
E(
    "swamping.swamping_run",
    lambda: dict(num_steps=5, numel=4),
    {
        "num_steps": Int(1, pitfalls.MAX_STEPS, skip_above=1000),
        "update": with_valid(Float(), swamp_valid(1.0)),
        "start": with_valid(Float(), swamp_valid(1e-3)),
        "numel": Int(1, 1 << 16, skip_above=1 << 12),
    },
    examples=2,
)
E("swamping.plot_swamping", lambda: dict(result=swamp_result()), {"result": Obj(), "ax": Obj()}, examples=2,
  corpus_limit=3)  # fmt: skip
E(
    "subnormals.subnormal_slowdown",
    lambda: dict(numel=64, repeats=1, min_sample_s=1e-4),
    {
        "numel": Int(1, pitfalls.MAX_NUMEL, skip_above=1 << 16),
        "op": Str(choices=("div", "mul", "add")),
        "repeats": Int(1, subnormals.MAX_TIMING_REPEATS, skip_above=5),
        "min_sample_s": Float(gt=0, le=subnormals.MAX_TIMING_SAMPLE_S, skip_above=0.01),
    },
    examples=2,
)
E(
    "pitfalls.attention_overflow",
    lambda: dict(seq=4, head_dim=8),
    {
        "seq": Int(1, pitfalls.MAX_SEQ),
        "head_dim": Int(1, pitfalls.MAX_HEAD_DIM),
        "magnitude": Float(gt=0, le=65504.0),
    },
    examples=3,
)
E("pitfalls.compile_autocast", examples=1, corpus_limit=6)


# --- distributed and memory (10) ------------------------------------------------------------
# Every spawn starts processes (about 0.1 s on a warm forkserver; an FSDP2 run 1 to 2 s, its ranks importing
# torch._dynamo at their first fully_shard): small bases, and few corpus values and examples for fsdp_train (these
# entries take about 45 s on 2 cores).


def Timeout() -> Kind:
    """A ``timeout_s``: valid values under 30 s are left out (a short one may run out on a loaded machine, and
    its TimeoutError is the documented outcome, tested in test_distributed.py)."""
    kind = Float(gt=0, le=distributed.MAX_TIMEOUT_S)
    return dataclasses.replace(kind, skip=lambda v: bool(kind.valid(v)) and float(v) < 30)


def fsdp_world_size_valid(v):
    """``fsdp_train``'s world_size with the base's batch_size of 8: 2 to 8 ranks that split it evenly."""
    ok = Int(2, distributed.MAX_WORLD_SIZE).valid(v)
    return ok and 8 % int(v) == 0 if ok else ok


def even_valid(v):
    ok = Int(2, 1024).valid(v)
    return ok and int(v) % 2 == 0 if ok else ok


def tiny_model():
    """Linear(4, 3), ReLU, Linear(3, 2): test_memory.py's hand-counted model."""
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def losses_ok(result, kwargs):
    if not (isinstance(result, list) and len(result) == kwargs["steps"]):
        return f"not {kwargs['steps']} losses: {result!r:.80}"
    return None if all(math.isfinite(x) for x in result) else f"a non-finite loss: {result!r:.80}"


def fsdp_ok(result, kwargs):
    if len(result.losses) != kwargs["steps"] or len(result.memory) != kwargs["world_size"]:
        return f"{len(result.losses)} losses and {len(result.memory)} ranks' memory for {kwargs}"
    return None


@functools.cache
def fsdp_run():
    return distributed.fsdp_train("bf16", "fp32", 2, 1, batch_size=8, hidden=4, depth=1)


FSDP_BASE = dict(
    param_dtype="fp32", reduce_dtype="fp32", world_size=2, steps=1, batch_size=8, hidden=4, depth=1
)
E(
    "distributed.spawn",
    lambda: dict(fn=lambda rank, world_size: rank, world_size=2, timeout_s=60.0),
    {
        "fn": Callable_(),
        "world_size": Int(1, distributed.MAX_WORLD_SIZE),
        "timeout_s": Timeout(),
        "backend": Str(choices=("gloo",)),  # nccl: only with a GPU per rank (test_distributed.py)
    },
    post=lambda r, kw: None if isinstance(r, list) and len(r) == kw["world_size"] else f"got {r!r:.80}",
    examples=2,
)
E(
    "distributed.choose_backend",
    lambda: dict(backend="gloo", world_size=2, cuda_devices=0, nccl_available=False),
    {
        "backend": Str(choices=("gloo",)),
        "world_size": Int(1, distributed.MAX_WORLD_SIZE),
        "cuda_devices": Int(0),
        "nccl_available": Bool(),
    },
    post=is_str,
)
E(
    "distributed.allreduce_error",
    lambda: dict(dtype="bf16", world_size=2, numel=8, timeout_s=60.0),
    {
        "world_size": Int(1, distributed.MAX_WORLD_SIZE),
        "numel": Int(1, distributed.MAX_NUMEL, skip_above=1 << 12),
        "timeout_s": Timeout(),
    },
    post=is_float,
    examples=2,
)
E(
    "distributed.allreduce_errors",
    lambda: dict(dtypes=["bf16"], world_sizes=[2], numel=8),
    {"dtypes": Seq(), "world_sizes": Seq(), "numel": Int(1, distributed.MAX_NUMEL, skip_above=1 << 12)},
    examples=2,
)
E(
    "distributed.fsdp_train",
    lambda: dict(FSDP_BASE, timeout_s=60.0),
    {
        "param_dtype": Dtype(),
        "reduce_dtype": Dtype(),
        "world_size": with_valid(Int(2, distributed.MAX_WORLD_SIZE, skip_above=2), fsdp_world_size_valid),
        "steps": Int(1, distributed.MAX_STEPS, skip_above=2),
        "inject_inf": Mapping_(),
        "lr": Float(gt=0, le=1.0),
        "batch_size": with_valid(Int(2, 1024, skip_above=16), even_valid),
        "hidden": Int(1, 1024, skip_above=8),
        "depth": Int(1, 8, skip_above=2),
        "init_scale": Float(ge=1.0, le=2.0**24),
        "timeout_s": Timeout(),
    },
    arg_base={"inject_inf": dict(param_dtype="fp16"), "init_scale": dict(param_dtype="fp16")},
    accept=[("an inf on rank 1 at step 0", lambda: dict(FSDP_BASE, param_dtype="fp16", inject_inf={0: 1}))],
    post=fsdp_ok,
    examples=1,
    corpus_limit=3,
)
E(
    "distributed.single_process_losses",
    lambda: dict(steps=1, batch_size=8, hidden=4, depth=1),
    {
        "steps": Int(1, distributed.MAX_STEPS, skip_above=4),
        "lr": Float(gt=0, le=1.0),
        "batch_size": Int(1, 1024, skip_above=64),
        "hidden": Int(1, skip_above=64),
        "depth": Int(1, MLP_MAX_DEPTH, skip_above=3),
    },
    post=losses_ok,
    examples=2,
)
E(
    "memory.activation_bytes",
    lambda: dict(model=tiny_model(), x=T(5, 4)),
    {"model": Obj(), "x": Tensor()},
    post=lambda r, kw: None if r.total > 0 else f"nothing saved: {r}",
)


@functools.cache
def activation_pair():
    x = T(5, 4)
    return memory.activation_bytes(tiny_model(), x), memory.activation_bytes(tiny_model(), x, "bf16")


E(
    "memory.activation_saving",
    lambda: dict(fp32=activation_pair()[0], amp=activation_pair()[1]),
    {"fp32": Obj(), "amp": Obj()},
    post=is_reading,
)
E(
    "distributed.draw_data_parallel",
    lambda: dict(world_size=2),
    {
        "world_size": Int(1, distributed.MAX_WORLD_SIZE),
        "compute_dtype": Dtype(),
        "reduce_dtype": Dtype(),
        "ax": Obj(),
    },
    examples=2,
    corpus_limit=2,
)
E("distributed.rank_device", post=usable_device)
E(
    "memory.bytes_per_parameter",
    lambda: dict(world_size=2, hidden=4, depth=1),
    {
        "world_size": Int(1, memory.MAX_WORLD_SIZE),
        "hidden": Int(1, 1024, skip_above=64),
        "depth": Int(1, 8, skip_above=3),
        "fsdp": Obj(),
    },
    accept=[("fsdp=a run on 2 ranks", lambda: dict(world_size=2, hidden=4, depth=1, fsdp=fsdp_run()))],
    examples=2,
)
# amp_lab.distributed's own names for memory's functions (10 imports them from there): the very same objects
# (test_reexports_are_the_same_functions), so their bad arguments are fuzzed once, as memory's.
REEXPORTS = {
    "distributed.activation_bytes": "memory.activation_bytes",
    "distributed.activation_saving": "memory.activation_saving",
    "distributed.bytes_per_parameter": "memory.bytes_per_parameter",
}
E("distributed.activation_bytes", lambda: dict(model=tiny_model(), x=T(5, 4)))
E("distributed.activation_saving", lambda: dict(fp32=activation_pair()[0], amp=activation_pair()[1]))
E("distributed.bytes_per_parameter", lambda: dict(world_size=2, hidden=4, depth=1))


# --------------------------------------------------------------------------------------------
# Coverage: every public name of every module is in the table (or skipped on purpose)
# --------------------------------------------------------------------------------------------


def test_the_fuzz_covers_exactly_the_learner_facing_list():
    fuzzed = {e.name for e in ENTRIES}
    listed = {f"{m}.{n}" for m, names in LEARNER_API.items() for n in names}
    assert sorted(listed - fuzzed - SKIPPED) == [], "learner-facing names with no fuzz entry (add one here)"
    assert sorted(fuzzed - listed) == [], (
        "fuzzed names missing from amp_lab.learner_api (list them, or drop the entry)"
    )


def test_every_learner_facing_name_exists():
    missing = [
        f"{m}.{n}"
        for m, names in LEARNER_API.items()
        for n in names
        if not callable(getattr(MODULES[m], n, None))
    ]
    assert missing == []


# --------------------------------------------------------------------------------------------
# Hypothesis strategies per kind (random values on top of each kind's fixed corpus)
# --------------------------------------------------------------------------------------------

_junk_text = st.text(max_size=12)
_numbers = st.one_of(
    st.integers(-3, 3),
    st.integers(min_value=2**31, max_value=2**2100),
    st.integers(max_value=-(2**31), min_value=-(2**2100)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e-30, max_value=1e-30),
    st.booleans(),
    st.none(),
    _junk_text,
    st.sampled_from([np.float32(-0.0), np.float16(1e-7), np.int8(-1), np.uint64(2**64 - 1), np.bool_(False)]),
)
_tensors = st.builds(
    lambda shape, dtype, fill: torch.full(shape, fill).to(dtype),
    st.lists(st.integers(0, 3), max_size=4).map(tuple),
    st.sampled_from(
        [
            torch.bool,
            torch.int64,
            torch.float16,
            torch.bfloat16,
            torch.float32,
            torch.float64,
            torch.complex64,
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
)
_strings = st.one_of(
    _junk_text,
    st.sampled_from(list(formats.FORMAT_NAMES) + ["cpu", "cuda", "mps", "float16", "bfloat16"]).flatmap(
        lambda s: st.sampled_from([s.upper(), s + " ", " " + s, s[:-1], s + "x", s.replace("_", "-")])
    ),
    st.none(),
    st.integers(-2, 2),
)
_objects = st.one_of(
    st.none(),
    st.integers(),
    st.floats(),
    _junk_text,
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sets(st.integers(), max_size=3),
    st.tuples(st.integers(), st.integers()),
)


def strategy_for(kind: Kind):
    name = kind.name
    if name.startswith(("Int", "Float", "Scale")):
        return _numbers
    if name == "Tensor":
        return st.one_of(_tensors, _numbers)
    if name in ("Str", "Fmt", "Device", "Dtype"):
        return _strings
    if name == "Capability":
        return st.one_of(
            st.tuples(st.integers(-2, 2**40), st.integers(-2, 20)),
            st.lists(st.integers(0, 12), max_size=3),
            _objects,
        )
    return _objects


# --------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def in_tmp_dir(tmp_path_factory):
    """The whole module runs in a temporary directory: fuzzed paths (``save_checkpoint(path="FP16")``) and
    anything else a call writes land there, not in the repository."""
    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("fuzz_cwd"))
    try:
        yield
    finally:
        os.chdir(old)


@pytest.fixture(scope="module", autouse=True)
def guard_memory(in_tmp_dir):
    """The whole fuzz module runs under an address-space cap (see fuzz_support.address_space_limit)."""
    digits()  # loaded before the cap: scikit-learn's first load maps a lot
    # First calls import lazily (torch.optim's first step, matplotlib's first figure) and take seconds;
    # made here, so the time limit measures the call and not the imports.
    gradients.train_steps(models.make_mlp(hidden=8, depth=1), split(), num_steps=1, batch_size=8)
    import matplotlib.pyplot as plt

    plt.close(plt.figure())
    with address_space_limit() as limit:
        yield limit


@pytest.fixture(autouse=True)
def hard_timeout():
    """A call stuck in C ignores SIGALRM: faulthandler ends the run instead (a hang must not hang CI)."""
    with hard_time_limit():
        yield


# Factories that hand every argument to a class unchanged (``return ScaleExplorer(x, fmt, ...)``): their bad
# arguments are the class's, fuzzed in the class's entry, so their own entries run only the base call, and
# test_factory_forwards_every_argument_to_its_class proves that nothing is checked, changed or dropped on
# the way (a factory that starts to do anything itself fails there and must be fuzzed again).
FORWARDERS = {
    "widgets.smoke_test": "widgets.SmokeTest",
    "predict.choice": "predict.Prediction",
}
CASES = [(e, arg) for e in ENTRIES if e.name not in FORWARDERS and e.name not in REEXPORTS for arg in e.fuzz]


def _case_id(case):
    e, arg = case
    return f"{e.name}.{arg}"


# The suite runs in `make test` in under a minute on 2 cores: each argument gets the corpus values below
# plus every STRIDE-th other one, and EXAMPLES hypothesis draws.  FUZZ_STRIDE=1 FUZZ_EXAMPLES=20 runs
# everything (minutes).
STRIDE = int(os.environ.get("FUZZ_STRIDE", "5"))
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1"))
PRIORITY = {
    "0", "-1", "-5", "1.5", "-1.0", "0.9999", "1e-50", "nan", "inf", "True", "2**2000", "10**12",
    "np.float32(np.float32(0.5))", "None", "'junk'", "''", "{7, 5}", "'cpu:5'", "[1e-45]", "'FP16'",
    "tensor(1.0)", "0-d float32", "empty (0,)", "rank 3 (2, 3, 4)", "ones(3, bool)", "ones(3, complex64)",
    "ones(3, int64)", "2048x2048 float32", "[]", "{}", "range(10**12)", "(7,)", "'7.5'", "lambda: None",
}  # fmt: skip


def _run_corpus(entry: Entry, arg: str, kind: Kind, failures: list[str]) -> int:
    base = entry.base_for(arg)
    stride = STRIDE * (entry.corpus_limit or 1)
    values = [v for i, v in enumerate(kind.corpus) if v.label in PRIORITY or i % stride == 0]
    n = 0
    for v in values:
        value = v()
        if kind.skip(value):
            continue
        kwargs = dict(entry.base_for(arg), **{arg: value})
        n += 1
        failure = check_call(entry, kwargs, arg=arg, value=value, valid=kind.valid(value), label=v.label)
        if failure:
            failures.append(failure)
    for v in kind.must_accept(base.get(arg)):
        kwargs = dict(entry.base_for(arg), **{arg: v()})
        n += 1
        failure = check_call(entry, kwargs, arg=arg, value=v(), valid=True, label=v.label + " (must accept)")
        if failure:
            failures.append(failure)
    return n


CALLS = {"n": 0}


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_one_bad_argument(case):
    """One argument replaced by each corpus value, then by hypothesis's values; the rest valid."""
    entry, arg = case
    kind = entry.fuzz[arg]
    failures: list[str] = []
    CALLS["n"] += _run_corpus(entry, arg, kind, failures)

    @settings(
        max_examples=max(1, min(entry.examples, EXAMPLES)),
        phases=[Phase.generate],
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(value=strategy_for(kind))
    def explore(value):
        if kind.skip(value):
            return
        CALLS["n"] += 1
        kwargs = dict(entry.base_for(arg), **{arg: value})
        failure = check_call(
            entry, kwargs, arg=arg, value=value, valid=kind.valid(value), label=describe(value)
        )
        if failure and failure not in failures:
            failures.append(failure)

    explore()
    assert not failures, f"{len(failures)} contract violation(s):\n" + "\n".join(failures)


@pytest.mark.parametrize("name,source", REEXPORTS.items(), ids=list(REEXPORTS))
def test_reexports_are_the_same_functions(name, source):
    entries = {e.name: e for e in ENTRIES}
    assert entries[name].fn is entries[source].fn, f"{name} is no longer {source}: fuzz it on its own"


@pytest.mark.parametrize("factory,cls", FORWARDERS.items(), ids=list(FORWARDERS))
def test_factory_forwards_every_argument_to_its_class(factory, cls, monkeypatch):
    """Each argument of the factory reaches the class as the very object given (so the class's fuzz entry,
    which fuzzes the same arguments with the same kinds, holds for the factory too)."""
    entries = {e.name: e for e in ENTRIES}
    mine, theirs = entries[factory].fuzz, entries[cls].fuzz
    assert {a: k.name for a, k in mine.items()} == {a: theirs[a].name for a in mine if a in theirs}, (
        f"{cls}'s entry does not fuzz every argument of {factory} with the same kind"
    )
    module, name = cls.split(".")
    real = getattr(MODULES[module], name)
    calls = []
    monkeypatch.setattr(
        MODULES[module], name, lambda *args, **kwargs: calls.append((args, kwargs)) or "built"
    )
    sentinels = {arg: object() for arg in inspect.signature(entries[factory].fn).parameters}
    assert entries[factory].fn(**sentinels) == "built" and len(calls) == 1, (
        f"{factory} did not build one {cls}"
    )
    given = inspect.signature(real).bind(*calls[0][0], **calls[0][1]).arguments
    assert given.keys() == sentinels.keys() and all(given[a] is sentinels[a] for a in sentinels), (
        f"{factory} changed or dropped arguments on the way to {cls}: {sorted(given)} vs {sorted(sentinels)}"
    )


BASE_AND_JOINT = [(e, "base", e.base, None) for e in ENTRIES]
BASE_AND_JOINT += [(e, label, make, None) for e in ENTRIES for label, make in e.extra]
BASE_AND_JOINT += [(e, label, make, True) for e in ENTRIES for label, make in e.accept]


@pytest.mark.parametrize(
    "entry,label,make,valid", BASE_AND_JOINT, ids=[f"{e.name}[{label}]" for e, label, _, _ in BASE_AND_JOINT]
)
def test_base_and_joint_cases(entry, label, make, valid):
    """The base call itself keeps the contract and returns (a broken base would hide every finding);
    joint cases (several arguments bad together) keep it too; ``accept`` cases must not be refused."""
    kwargs = make()
    if label == "base":
        valid = True
    CALLS["n"] += 1
    failure = check_call(entry, kwargs, arg=None, value=None, valid=valid, label=label)
    assert failure is None, failure


# --------------------------------------------------------------------------------------------
# Validate, then change: a method that refuses changes nothing
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["model with other shapes", "missing file", "junk file"])
def test_load_checkpoint_refuses_without_change(what, tmp_path):
    """A refused checkpoint leaves model, optimizer and scaler as they were."""
    path = _saved_checkpoint()
    m = models.make_mlp(hidden=8, depth=1, seed=1)
    if what == "model with other shapes":
        m = models.make_mlp(hidden=16, depth=1, seed=1)
    elif what == "missing file":
        path = str(tmp_path / "missing.pt")
    else:
        path = tmp_path / "junk.pt"
        path.write_bytes(b"not a checkpoint")
    o = opt_for(m)
    sc = recipe.make_scaler(torch.float16, init_scale=2.0**10)
    before = ([p.detach().clone() for p in m.parameters()], repr(o.state_dict()), repr(sc.state_dict()))
    entry = Entry("checkpoints.load_checkpoint", checkpoints.load_checkpoint, lambda: {})
    failure = check_call(
        entry, dict(path=path, model=m, opt=o, scaler=sc), arg="path", value=None, valid=False, label=what
    )
    assert failure is None, failure
    after = ([p.detach().clone() for p in m.parameters()], repr(o.state_dict()), repr(sc.state_dict()))
    assert (
        all(torch.equal(a, b) for a, b in zip(before[0], after[0], strict=False)) and before[1:] == after[1:]
    ), f"checkpoints.load_checkpoint ({what}) refused but changed the model, optimizer or scaler"


# --------------------------------------------------------------------------------------------
# Explicit "must accept" cases: valid edge inputs that must not be refused
# --------------------------------------------------------------------------------------------

MUST_ACCEPT = [
    (
        "formats.from_bits(np.int64(0x3C00), 'fp16') == 1.0",
        lambda: formats.from_bits(np.int64(0x3C00), "fp16") == 1.0,
    ),
    (
        "formats.from_bits(np.uint16(0x3C00), 'fp16') == 1.0",
        lambda: formats.from_bits(np.uint16(0x3C00), "fp16") == 1.0,
    ),
    (
        "formats.decompose(np.float32(0.1), 'fp16')",
        lambda: formats.decompose(np.float32(0.1), "fp16").fmt == "fp16",
    ),
    (
        "formats.round_to(torch.tensor(0.1), 'bf16') is 0-d",
        lambda: formats.round_to(torch.tensor(0.1), "bf16").dim() == 0,
    ),
    (
        "formats.round_to(np.float64(0.1), 'fp16')",
        lambda: isinstance(formats.round_to(np.float64(0.1), "fp16"), torch.Tensor),
    ),
    (
        "range_counts.range_report(torch.tensor(0.5), 'fp16')",
        lambda: range_counts.range_report(torch.tensor(0.5), "fp16").total == 1,
    ),
    (
        "range_counts.suggest_scale(torch.tensor(3.0), 'fp16') is a float32 scale",
        lambda: F32_TINY <= range_counts.suggest_scale(torch.tensor(3.0), "fp16") <= F32_MAX,
    ),
    (
        "scaling.StaticLossScaler(np.float32(1024.0))",
        lambda: scaling.StaticLossScaler(np.float32(1024.0)).get_scale() in (None, 1024.0),
    ),
    (
        "scaling.DynamicLossScaler(np.float64(2.0**16), growth_interval=np.int64(10))",
        lambda: scaling.DynamicLossScaler(np.float64(2.0**16), growth_interval=np.int64(10)) is not None,
    ),
    (
        "scaling.StaticLossScaler(2.0**-126) (smallest normal float32)",
        lambda: scaling.StaticLossScaler(2.0**-126) is not None,
    ),
    (
        "data.load_digits(seed=np.int64(3), test_fraction=np.float32(0.5))",
        lambda: len(data.load_digits(seed=np.int64(3), test_fraction=np.float32(0.5)).test.y) > 0,
    ),
    (
        "device.seed_everything(np.int64(2**32 - 1))",
        lambda: device.seed_everything(np.int64(2**32 - 1)) is None,
    ),
    ("cost.matmul_intensity(np.int64(8), 8, 8)", lambda: cost.matmul_intensity(np.int64(8), 8, 8) > 0),
    ("alignment.pad_to_multiple(np.int32(7))", lambda: alignment.pad_to_multiple(np.int32(7)) == 8),
    (
        "gpus.tensor_core_generation((np.int64(8), np.int64(0)))",
        lambda: gpus.tensor_core_generation((np.int64(8), np.int64(0))).architecture == "Ampere",
    ),
    (
        "gpus.tensor_core_generation([9, 0]) (a list)",
        lambda: gpus.tensor_core_generation([9, 0]).architecture == "Hopper",
    ),
    (
        "check.check_value(np.float32(0.5), 0.5)",
        lambda: check.check_value(np.float32(0.5), 0.5, show=False).ok,
    ),
    (
        "check.check_value(torch.tensor(0.5), 0.5) (0-d tensor)",
        lambda: check.check_value(torch.tensor(0.5), 0.5, show=False).ok,
    ),
    (
        "text.format_seconds(np.float64(1e-3))",
        lambda: isinstance(text.format_seconds(np.float64(1e-3)), str),
    ),
    (
        "tensor_cores.running_sum(torch.ones(3, dtype=torch.float16))",
        lambda: tensor_cores.running_sum(torch.ones(3, dtype=torch.float16)).numel() == 3,
    ),
    ("claims.claim('x', np.bool_(True))", lambda: claims.claim("x", np.bool_(True), show=False).holds),
    (
        "claims.claim('x', torch.tensor(True))",
        lambda: claims.claim("x", torch.tensor(True), show=False).holds,
    ),
]


@pytest.mark.parametrize("label,call", MUST_ACCEPT, ids=[m[0] for m in MUST_ACCEPT])
def test_must_accept(label, call):
    entry = Entry(
        label, call, lambda: {}, post=lambda r, kw: None if r is True else f"got {r!r}, expected True"
    )
    CALLS["n"] += 1
    failure = check_call(entry, {}, arg=None, value=None, valid=True, label="must accept")
    assert failure is None, failure


def test_time_limit_works():
    """The harness's own check: a call that runs past the limit is reported, not waited for (the same
    code path as the suite's CALL_TIMEOUT_S, with a limit short enough not to cost the suite 10 s)."""
    limit = 0.3
    entry = Entry("sleeper", lambda: time.sleep(30), lambda: {})
    t0 = time.perf_counter()
    failure = check_call(entry, {}, arg=None, value=None, valid=None, label="sleep", timeout=limit)
    assert failure and f"did not return within {limit:g} s" in failure
    assert time.perf_counter() - t0 < limit + 1
    assert inspect.signature(check_call).parameters["timeout"].default == CALL_TIMEOUT_S  # every other call


def test_foreign_errors_are_caught():
    """The harness's own check: a ValueError raised inside torch is a failure, one raised by amp_lab is not."""
    torch_error = Entry("torch", lambda: torch.nn.functional.softmax(torch.ones(2), dim="x"), lambda: {})
    assert "outside amp_lab" in (
        check_call(torch_error, {}, arg=None, value=None, valid=None, label="x") or ""
    )
    c_error = Entry("C", lambda: formats.round_to(torch.ones(2), fmt=object()), lambda: {})
    assert check_call(c_error, {}, arg=None, value=None, valid=None, label="x") is None or True  # either way
    ours = Entry("ours", lambda: formats.get_format("junk"), lambda: {})
    assert check_call(ours, {}, arg=None, value=None, valid=None, label="x") is None
