"""Machinery for ``tests/test_fuzz.py``: the contract of every public function, checked one call at a time.

The contract (CONTRIBUTING.md, "Errors a learner can read"): called with one bad argument, a public
function either

* returns, and its result passes a light sanity check (and, where the argument's domain is known, the
  value was a valid one: an invalid value that is *accepted* fails), or
* raises ``ValueError`` or ``TypeError`` (``amp_lab._checks.ArgumentTypeError`` is both) **raised by
  amp_lab code**: the innermost frame of the exception's traceback is a file inside the ``amp_lab``
  package directory (an error that torch, numpy or Python's own functions raised and amp_lab let through
  fails, whatever its type),

and it returns or raises within :data:`CALL_TIMEOUT_S` seconds, without exhausting memory (every other
exception, ``MemoryError`` and torch's allocation errors included, fails).
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import linecache
import math
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch

import amp_lab
from amp_lab import _checks

# The code's own bounds (CONTRIBUTING.md, "Bounded work"), read from amp_lab so the suite cannot drift from
# them.
MAX_STEPS = _checks.MAX_STEPS
MAX_REPEATS = _checks.MAX_REPEATS
MAX_SECONDS = _checks.MAX_SECONDS
MAX_SAMPLE_S = _checks.MAX_SAMPLE_S
MAX_SEED = _checks.MAX_SEED
MAX_THREADS = _checks.MAX_THREADS
MAX_CALLS_PER_SAMPLE = _checks.MAX_CALLS_PER_SAMPLE
FLOAT32_TINY = _checks.FLOAT32_TINY
FLOAT32_MAX = _checks.FLOAT32_MAX
# An integer argument whose upper bound the suite does not know (no ``hi``): beyond this, refusing is as
# fine as accepting, because every count has a cap and every size is checked against free memory.
UNKNOWN_BEYOND = 2**31

AMP_LAB_DIR = os.path.dirname(os.path.abspath(amp_lab.__file__))
# A hang never returns; a valid call on a loaded 2-core CI machine (make test runs the notebooks beside the
# unit tests) can take a few seconds.  10 s tells the two apart there; FUZZ_CALL_TIMEOUT_S overrides it.
CALL_TIMEOUT_S = float(os.environ.get("FUZZ_CALL_TIMEOUT_S", "10"))
# A call stuck inside one C function never returns to the interpreter, so SIGALRM cannot interrupt it:
# faulthandler then dumps every thread's stack and ends the process (a hang must not hang CI).
HARD_TIMEOUT_S = 120.0  # per test (see hard_time_limit)
MEMORY_HEADROOM = 4 * 2**30  # address space a call may add to what the test process already maps


# faulthandler writes to a real file descriptor (pytest replaces sys.stderr with one that has none).
_HARD_TIMEOUT_FILE = sys.__stderr__ if sys.__stderr__ is not None else sys.stdout


class CallTimeout(BaseException):
    """Raised by the SIGALRM handler in the main thread (a BaseException, so no ``except Exception``
    inside amp_lab can swallow it)."""


# --------------------------------------------------------------------------------------------
# Values: each is made fresh for every call (functions may change tensors in place).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class V:
    label: str
    make: Callable[[], Any]

    def __call__(self):
        return self.make()


def const(value, label: str | None = None) -> V:
    return V(label or _short(value), lambda: value)


def _short(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**70:
        return f"{'-' if value < 0 else ''}2**{abs(value).bit_length() - 1}"
    if isinstance(value, torch.Tensor):
        return f"tensor(shape={tuple(value.shape)}, dtype={value.dtype})"
    if isinstance(value, np.ndarray):
        return f"np.array(shape={value.shape}, dtype={value.dtype})"
    if isinstance(value, np.generic):
        return f"np.{type(value).__name__}({value!r})"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe(value) -> str:
    return _short(value)


TORCH_DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
)

NUMBERS = [
    const(0),
    const(-1),
    const(1),
    const(2),
    const(3),
    const(-5),
    const(0.0),
    const(-0.0),
    const(0.5),
    const(1.5),
    const(-1.0),
    const(0.9999),
    const(1e-50),
    const(1e-45),
    const(1e-300),
    const(1e300),
    const(3.5e38),
    const(math.nan),
    const(math.inf),
    const(-math.inf),
    const(True),
    const(False),
    const(np.float64(math.nan)),
    const(np.float32(0.5)),
    const(np.float16(65504.0)),
    const(np.int64(0)),
    const(np.int64(-1)),
    const(np.int64(2**40)),
    const(np.bool_(True)),
    const(2**2000),
    const(-(2**2000)),
    const(10**12),
    const(2**31),
    const(2**63),
    const(2**64),
    const(complex(1, 0)),
    const(Fraction(1, 3)),
]

WRONG_TYPES = [
    const(None),
    const("1"),
    const(""),
    const("junk"),
    V("[]", list),
    V("[1]", lambda: [1]),
    V("{}", dict),
    V("{'a': 1}", lambda: {"a": 1}),
    V("set()", set),
    V("{7, 5}", lambda: {7, 5}),
    const((1, 2)),
    const(b"1"),
    V("object()", object),
    V("tensor(1.0)", lambda: torch.tensor(1.0)),
    V("tensor([1.0, 2.0])", lambda: torch.tensor([1.0, 2.0])),
    V("np.array([1.0])", lambda: np.array([1.0])),
]


def _tensor_values() -> list[V]:
    out = []
    for dtype in TORCH_DTYPES:
        name = str(dtype).replace("torch.", "")
        out.append(V(f"ones(3, {name})", lambda d=dtype: torch.ones(3, dtype=d)))
        out.append(V(f"0-d {name}", lambda d=dtype: torch.ones((), dtype=d)))
    out += [
        V("empty (0,)", lambda: torch.empty(0)),
        V("empty (0, 4)", lambda: torch.empty(0, 4)),
        V("shape (1,)", lambda: torch.ones(1)),
        V("rank 3 (2, 3, 4)", lambda: torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))),
        V("rank 4 (1, 1, 2, 2)", lambda: torch.ones(1, 1, 2, 2)),
        V("all nan (3,)", lambda: torch.full((3,), math.nan)),
        V("[inf, -inf, 0]", lambda: torch.tensor([math.inf, -math.inf, 0.0])),
        V("[1e-45, 0, -1e-40]", lambda: torch.tensor([1e-45, 0.0, -1e-40])),
        V("float64 [1e300, 1e-300]", lambda: torch.tensor([1e300, 1e-300], dtype=torch.float64)),
        V("zeros (4,)", lambda: torch.zeros(4)),
        V("non-contiguous (3, 2).T", lambda: torch.arange(6.0).reshape(3, 2).T),
        V("requires_grad (3,)", lambda: torch.ones(3, requires_grad=True)),
        V("2048x2048 float32", lambda: torch.ones(2048, 2048)),
        V("np.ones(3, float32)", lambda: np.ones(3, np.float32)),
        V("np.array(0.5)", lambda: np.array(0.5)),
        V("np.array(['a'])", lambda: np.array(["a"])),
        V("np.array object", lambda: np.array([None, 1], dtype=object)),
        V("[1.0, 2.0]", lambda: [1.0, 2.0]),
        V("[1e-45]", lambda: [1e-45]),
        V("[]", list),
        V("[[1], [2, 3]] ragged", lambda: [[1], [2, 3]]),
        V("['a']", lambda: ["a"]),
        const(0.5),
        const(True),
        const(2**2000),
        const(math.nan),
        const(None),
        const("junk"),
        V("{}", dict),
        V("{1, 2}", lambda: {1, 2}),
    ]
    return out


TENSORS = _tensor_values()

STRINGS = [
    const(""),
    const(" "),
    const("junk"),
    const("FP16"),
    const("fp16 "),
    const("fp-16"),
    const("float16"),
    const("fp8"),
    const("bf16"),
    const("cuda"),
    const("cpu:5"),
    const("\x00"),
    const("é"),
    V("'a' * 10000", lambda: "a" * 10000),
    const(None),
    const(1),
    const(1.5),
    const(True),
    V("[]", list),
    V("{}", dict),
    V("set()", set),
    const(b"fp16"),
    const(torch.float16),
]

DTYPES = [
    *(const(d) for d in TORCH_DTYPES),
    const(torch.complex128),
    const(torch.int16),
    const(torch.float8_e4m3fn),
    const(torch.float8_e5m2),
    const("fp16"),
    const("float16"),
    const("bf16"),
    const("half"),
    const("torch.float16"),
    const("junk"),
    const(""),
    const(np.float16),
    const(np.dtype("float16")),
    const(float),
    const(None),
    const(1),
    const(True),
    const(1.5),
    V("[]", list),
    V("{}", dict),
]

DEVICES = [
    const("cpu"),
    const("cpu:0"),
    const("cpu:5"),
    const("cpu:-1"),
    const("cuda"),
    const("cuda:0"),
    const("cuda:99"),
    const("mps"),
    const("meta"),
    const("xla"),
    const("junk"),
    const(""),
    const(torch.device("cpu")),
    const(torch.device("cpu", 5)),
    const(torch.device("meta")),
    const(0),
    const(-1),
    const(1),
    const(None),
    const(True),
    const(1.5),
    V("[]", list),
    V("{}", dict),
]

CAPABILITIES = [
    const((7, 5)),
    const((8, 0)),
    const((9, 0)),
    const((12, 0)),
    const((0, 0)),
    const((-1, 0)),
    const((7,)),
    const((7, 5, 0)),
    const(()),
    V("{7, 5}", lambda: {7, 5}),
    V("[7, 5]", lambda: [7, 5]),
    const("7.5"),
    const("sm_75"),
    const(7.5),
    const(75),
    const((7.5, 0)),
    const(("7", "5")),
    const((True, False)),
    const((np.int64(8), np.int64(0))),
    const((2**2000, 0)),
    const((10**12, 0)),
    const(None),
    V("{}", dict),
    V("{'major': 7}", lambda: {"major": 7}),
    V("tensor([7, 5])", lambda: torch.tensor([7, 5])),
]

MAPPINGS = [
    V("{}", dict),
    V("{'a': 1}", lambda: {"a": 1}),
    V("{1: 2}", lambda: {1: 2}),
    V("{None: None}", lambda: {None: None}),
    V("{'a': nan}", lambda: {"a": math.nan}),
    V("[('a', 1)]", lambda: [("a", 1)]),
    V("[]", list),
    const(None),
    const("x"),
    V("set()", set),
    const(1),
    V("tensor(1.0)", lambda: torch.tensor(1.0)),
]

SEQUENCES = [
    V("[]", list),
    V("[1]", lambda: [1]),
    V("[0]", lambda: [0]),
    V("[-1]", lambda: [-1]),
    V("[1.5]", lambda: [1.5]),
    V("[None]", lambda: [None]),
    V("['a']", lambda: ["a"]),
    const((1, 2, 3)),
    V("{1, 2}", lambda: {1, 2}),
    V("[2**2000]", lambda: [2**2000]),
    V("[nan]", lambda: [math.nan]),
    V("[True]", lambda: [True]),
    V("range(10**12)", lambda: range(10**12)),
    V("[1] * 100000", lambda: [1] * 100_000),
    V("np.array([1, 2])", lambda: np.array([1, 2])),
    V("tensor([1, 2])", lambda: torch.tensor([1, 2])),
    V("[[1]]", lambda: [[1]]),
    const(None),
    const("abc"),
    V("{}", dict),
    const(5),
]

CALLABLES = [
    V("lambda: None", lambda: lambda *a, **k: None),
    V("lambda: 1.0", lambda: lambda *a, **k: 1.0),
    V("lambda: 'x'", lambda: lambda *a, **k: "x"),
    V("lambda: tensor(nan)", lambda: lambda *a, **k: torch.tensor(math.nan)),
    V("lambda (no args)", lambda: lambda: None),
    const(None),
    const(1),
    const("fn"),
    V("[]", list),
    V("object()", object),
]

BOOLS = [
    const(True),
    const(False),
    const(0),
    const(1),
    const(2),
    const(None),
    const("yes"),
    const(""),
    const(np.bool_(True)),
    V("tensor(True)", lambda: torch.tensor(True)),
    V("tensor([True, False])", lambda: torch.tensor([True, False])),
    V("[]", list),
    const(1.5),
    const(math.nan),
]

OBJECTS = [
    const(None),
    const(0),
    const(-1),
    const(1.5),
    const(math.nan),
    const(True),
    const(""),
    const("junk"),
    V("[]", list),
    V("[None]", lambda: [None]),
    V("{}", dict),
    V("{'a': 1}", lambda: {"a": 1}),
    V("set()", set),
    const((1, 2)),
    V("tensor(1.0)", lambda: torch.tensor(1.0)),
    V("ones(2)", lambda: torch.ones(2)),
    V("np.ones(2)", lambda: np.ones(2)),
    V("object()", object),
    V("lambda: None", lambda: lambda *a, **k: None),
    const(2**2000),
]


# --------------------------------------------------------------------------------------------
# Kinds of argument: a corpus of bad and edge values, a hypothesis strategy, and (where the domain is
# known) which values are valid.  ``valid(v)`` returns True, False, or None (not known: any outcome
# within the contract is fine).
# --------------------------------------------------------------------------------------------


@dataclass
class Kind:
    name: str
    corpus: list[V]
    strategy: Any = None  # a hypothesis strategy (built lazily by the test module)
    valid: Callable[[Any], bool | None] = lambda v: None
    must_accept: Callable[[Any], list[V]] = lambda base: []
    skip: Callable[[Any], bool] = lambda v: False  # valid but too much work for one fuzz call


def _is_number(v) -> bool:
    return isinstance(v, Real) and not isinstance(v, (bool, np.bool_))


def Int(lo=None, hi=None, *, optional=False, skip_above: int | None = None) -> Kind:
    """An integer argument (a count, a size, an index).  Must refuse: a non-integer (bool, float,
    string, None unless optional), a value outside ``[lo, hi]``.  Must accept numpy integers.  Without
    ``hi`` (or ``lo``), a value beyond :data:`UNKNOWN_BEYOND` on that side may go either way."""

    def valid(v):
        if v is None:
            return optional
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, Integral):
            return False
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            return False
        if (hi is None and v > UNKNOWN_BEYOND) or (lo is None and v < -UNKNOWN_BEYOND):
            return None
        return True

    def must_accept(base):
        if base is None or isinstance(base, bool) or not isinstance(base, Integral):
            return []
        out = [const(np.int64(base))]
        if -(2**31) <= base < 2**31:
            out.append(const(np.int32(base)))
        return out

    def skip(v):
        # valid, but more work than one fuzz call may take
        return skip_above is not None and v is not None and bool(valid(v)) and v > skip_above

    return Kind(f"Int({lo}, {hi})", NUMBERS + WRONG_TYPES, valid=valid, must_accept=must_accept, skip=skip)


def Seed(hi: int = MAX_SEED) -> Kind:
    return Int(0, hi)


def Float(gt=None, ge=None, lt=None, le=None, *, optional=False, finite=True, skip_above=None,
          skip_none=False) -> Kind:
    """A real-number argument.  Must refuse: a non-number (bool, string, None unless optional, a
    tensor), nan/inf (when ``finite``), a value outside the bounds.  Must accept numpy floats.
    ``skip_above`` and ``skip_none`` leave out valid values that would only make the call slow (a time
    budget of many seconds, or None meaning the default one)."""

    def valid(v):
        if v is None:
            return optional
        if not _is_number(v):
            return False
        try:
            x = float(v)
        except OverflowError:
            return False
        if finite and not math.isfinite(x):
            return False
        if gt is not None and not x > gt:
            return False
        if ge is not None and not x >= ge:
            return False
        if lt is not None and not x < lt:
            return False
        if le is not None and not x <= le:
            return False
        return True

    def must_accept(base):
        if not _is_number(base):
            return []
        out = [const(np.float64(base))]
        if float(np.float32(base)) == float(base):
            out.append(const(np.float32(base)))
        if float(base).is_integer() and abs(base) < 2**53:
            out.append(const(int(base)))
        return out

    def skip(v):
        if v is None:
            return skip_none and optional
        return skip_above is not None and bool(valid(v)) and float(v) > skip_above

    return Kind("Float", NUMBERS + WRONG_TYPES, valid=valid, must_accept=must_accept, skip=skip)


def Scale() -> Kind:
    """A loss scale: a float32 normal number (``_checks.check_scale``)."""
    k = Float(gt=0, ge=FLOAT32_TINY, le=FLOAT32_MAX)
    k.name = "Scale"
    return k


def Bool() -> Kind:
    return Kind("Bool", BOOLS)


def Str(choices=None) -> Kind:
    def valid(v):
        if choices is None:
            return None
        return v in choices if isinstance(v, str) else None

    return Kind("Str", STRINGS, valid=valid)


def Tensor() -> Kind:
    return Kind("Tensor", TENSORS)


def Dtype() -> Kind:
    return Kind("Dtype", DTYPES)


def Device() -> Kind:
    return Kind("Device", DEVICES)


def Fmt() -> Kind:
    return Kind("Fmt", STRINGS + [const("fp8_e4m3"), const("fp8_e5m2"), const("tf32"), const("fp64")])


def Capability(optional=False) -> Kind:
    def valid(v):
        if v is None:
            return optional
        if isinstance(v, (set, dict, str, float)):
            return False
        return None

    return Kind("Capability", CAPABILITIES, valid=valid)


def Mapping_() -> Kind:
    return Kind("Mapping", MAPPINGS)


def Seq() -> Kind:
    return Kind("Sequence", SEQUENCES)


def Callable_() -> Kind:
    return Kind("Callable", CALLABLES)


def Obj() -> Kind:
    return Kind("Object", OBJECTS)


# --------------------------------------------------------------------------------------------
# The table: one entry per public function or class.
# --------------------------------------------------------------------------------------------


@dataclass
class Entry:
    name: str  # "module.function"
    fn: Callable
    base: Callable[[], dict]  # valid keyword arguments (made fresh per call)
    fuzz: dict[str, Kind] = field(default_factory=dict)
    post: Callable[[Any, dict], str | None] | None = None  # sanity check of a result: a complaint or None
    pos: Callable[[], tuple] | None = None  # positional arguments (for ``*args`` functions)
    pos_names: tuple[str, ...] = ()  # keyword arguments passed positionally, before ``pos``
    cm: bool = False  # the result is a context manager: enter and leave it
    extra: list[tuple[str, Callable[[], dict]]] = field(default_factory=list)  # joint overrides
    accept: list[tuple[str, Callable[[], dict]]] = field(default_factory=list)  # valid edge cases
    examples: int = 8  # random (hypothesis) examples per fuzzed argument
    corpus_limit: int | None = None  # for slow functions: every n-th corpus value only
    # per fuzzed argument, base arguments changed with it (an argument valid only together with another)
    arg_base: dict[str, dict] = field(default_factory=dict)

    def base_for(self, arg: str) -> dict:
        return dict(self.base(), **self.arg_base.get(arg, {}))

    def call(self, kwargs: dict):
        kwargs = dict(kwargs)
        args = tuple(kwargs.pop(n) for n in self.pos_names if n in kwargs) + (self.pos() if self.pos else ())
        result = self.fn(*args, **kwargs)
        if self.cm:
            with result:
                pass
        return result


# --------------------------------------------------------------------------------------------
# Running one call under the contract.
# --------------------------------------------------------------------------------------------


def raised_in_amp_lab(exc: BaseException) -> tuple[bool, str]:
    """Whether ``exc`` was raised by amp_lab code, and where.

    The innermost traceback frame must be a file inside the amp_lab package directory, *and* its line
    must be a ``raise`` statement: an exception raised in C (a torch op, ``float(None)``, numpy) adds no
    frame of its own, so its innermost frame is the amp_lab line that called into C; such an error was not
    raised by amp_lab, it came through it."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False, "<no traceback>"
    last = frames[-1]
    path = os.path.abspath(last.filename)
    where = f"{os.path.relpath(path, os.path.dirname(AMP_LAB_DIR))}:{last.lineno}"
    if "site-packages" in path:
        where = path.split("site-packages" + os.sep)[-1] + f":{last.lineno}"
    if not path.startswith(AMP_LAB_DIR + os.sep):
        return False, where
    line = (last.line or linecache.getline(last.filename, last.lineno)).strip()
    if not line.startswith("raise"):
        return False, f"{where} (from C code called there: `{line[:70]}`)"
    return True, where


@contextlib.contextmanager
def hard_time_limit(seconds: float = HARD_TIMEOUT_S):
    """Arm faulthandler's watchdog for a whole test (arming and cancelling it costs about a millisecond, too
    much for every call; the per-call limit is :func:`time_limit`'s SIGALRM)."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=_HARD_TIMEOUT_FILE)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@contextlib.contextmanager
def time_limit(seconds: float = CALL_TIMEOUT_S):
    def on_alarm(signum, frame):
        raise CallTimeout(f"call did not return within {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _global_state():
    return (
        torch.get_num_threads(),
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
        torch.get_default_dtype(),
        torch.is_grad_enabled(),
    )


def _restore_global_state(state) -> None:
    threads, tf32, cudnn_tf32, precision, default_dtype, grad = state
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = cudnn_tf32
    torch.set_float32_matmul_precision(precision)
    torch.set_default_dtype(default_dtype)
    torch.set_grad_enabled(grad)


def check_call(
    entry: Entry, kwargs: dict, *, arg: str | None, value, valid: bool | None, label: str,
    timeout: float = CALL_TIMEOUT_S,
) -> str | None:
    """Run one call within ``timeout`` seconds; return None if it kept the contract, else a line saying
    what happened."""
    import matplotlib.pyplot as plt

    what = f"{entry.name}({arg}={label})" if arg else f"{entry.name}[{label}]"
    state = _global_state()
    sink = io.StringIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), time_limit(timeout):
                result = entry.call(kwargs)
    except CallTimeout as e:
        return f"{what}: {e}"
    except (ValueError, TypeError) as e:
        inside, where = raised_in_amp_lab(e)
        if valid is True:
            return f"{what}: a valid value was refused: {type(e).__name__} at {where}: {_msg(e)}"
        if not inside:
            return f"{what}: {type(e).__name__} raised outside amp_lab, at {where}: {_msg(e)}"
        return None
    except (MemoryError, Exception) as e:  # noqa: B014 (MemoryError is named on purpose)
        _, where = raised_in_amp_lab(e)
        return f"{what}: {type(e).__name__} at {where}: {_msg(e)}"
    finally:
        plt.close("all")
        _restore_global_state(state)
    if valid is False:
        return f"{what}: an invalid value was accepted (returned {_short(result)})"
    if entry.post is not None:
        try:
            complaint = entry.post(result, kwargs)
        except Exception as e:  # the sanity check itself could not read the result
            complaint = f"sanity check raised {type(e).__name__}: {_msg(e)}"
        if complaint:
            return f"{what}: returned a result that fails the sanity check: {complaint}"
    return None


def _msg(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 160 else text[:157] + "..."


# --------------------------------------------------------------------------------------------
# Memory guard
# --------------------------------------------------------------------------------------------


def mapped_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


@contextlib.contextmanager
def address_space_limit(headroom: int = MEMORY_HEADROOM):
    """Cap this process's address space at what it maps now plus ``headroom`` (restored afterwards), so a
    fuzz input that allocates without checking fails with an allocation error instead of taking the
    machine down.  Does nothing where ``RLIMIT_AS`` is not available."""
    try:
        import resource
    except ImportError:  # not on this OS
        yield None
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = mapped_bytes() + headroom
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
