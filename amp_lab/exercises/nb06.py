"""Exercises of notebook 06 (the timing race).

Exercise 1 is reasoning about the tutorial loop; exercise 2 diagnoses a timing loop (:data:`TIMING_LOOP`,
shown in the notebook) from a list of candidate flaws (:data:`FLAWS`); exercises 3 and 4 are about the
learner's own measurements: the right answers are computed here from the roofline (``roof``) and the race
(``result``) the learner's notebook measured, so they hold whatever those measurements say.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .._checks import ArgumentTypeError
from ..check_base import CheckResult, finish, is_placeholder
from ..check_items import check_choice, check_set
from ..cost import elementwise_intensity, matmul_intensity
from ..race import RaceResult, native_arithmetic
from ..roofline import Roofline
from . import Mistake, exercise

__all__ = ["ex1", "ex2", "ex3", "ex4", "TIMING_LOOP", "FLAWS", "REGIMES", "MAX_OPS"]


def _norm(x) -> str:
    return " ".join(str(x).split()).lower()


# --------------------------------------------------------------------------------------------
# Exercise 1: who pays for the start-up?
# --------------------------------------------------------------------------------------------

_RATIO_HINT = (
    "which contestant ran first, and is its time in the numerator or the denominator of FP32 time / AMP time?"
)


@exercise(1, "Who pays for the start-up?", mistakes=[Mistake("too high", "the numerator or the denominator")])
def ex1(answer, *, show: bool = True) -> CheckResult:
    """Which way the tutorial loop's cold start (AMP timed first, no warm-up) biases FP32 time / AMP time."""
    # The one-off costs land on whoever runs first (AMP), so they inflate the denominator: the ratio shrinks.
    first, numerator, denominator = "amp", "fp32", "amp"
    inflated_ratio = "too high" if first == numerator else "too low" if first == denominator else None
    return check_choice(
        answer,
        inflated_ratio,
        options=["too high", "too low"],
        explanations={
            "too low": "AMP ran first, so its time includes the one-off start-up costs: the denominator of "
            "FP32 time / AMP time is inflated and the speedup comes out too low.",
            "too high": "the start-up costs (CUDA context, cuBLAS handles, kernel selection, allocator growth) "
            "land on whoever runs first: whose time grows, and where does that time sit in the ratio?",
        },
        hint=_RATIO_HINT,
        show=show,
    )


# --------------------------------------------------------------------------------------------
# Exercise 2: diagnose a timing loop
# --------------------------------------------------------------------------------------------

# The loop the notebook shows (the notebook's markdown quotes it; a test checks that it does).
TIMING_LOOP = """\
model, X = model.to("cuda"), X.to("cuda")
times = []
for i in range(5):
    start = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(X)
    times.append(time.perf_counter() - start)
print(f"AMP forward pass: {statistics.mean(times) * 1e3:.2f} ms")"""

# Candidate flaws: letter -> (the statement the notebook lists, is it a flaw of TIMING_LOOP, why).
FLAWS = {
    "a": ("the first call is timed with the rest: there is no warm-up", True,
          "the first call pays one-off costs (kernel selection, allocator growth, cuBLAS handles) and it is "
          "sample 0 here"),
    "b": ("the clock is read before the GPU has finished: there is no synchronisation", True,
          "Python gets control back as soon as a kernel is queued; without torch.cuda.synchronize() (or CUDA "
          "events) before the second reading, the loop times the queueing"),
    "c": ("it reports the mean of the samples", True,
          "one slow sample (the cold first one, or a hiccup of the machine) pulls a mean of five samples far; "
          "a median, with its spread, is robust to it"),
    "d": ("time.perf_counter() is the wrong clock: time.time() is the one for intervals", False,
          "it is the other way round: perf_counter is a monotonic, high-resolution clock made for intervals, "
          "while time.time() is a wall clock that may jump"),
    "e": ("the clock must be read inside the `with torch.autocast(...)` block, or autocast is not timed", False,
          "autocast only decides the dtypes of the ops inside the block; the ops are what take the time, and "
          "they all ran before the second reading"),
}  # fmt: skip

_SYNC_HINT = (
    "Python gets control back as soon as a GPU kernel is queued: what has finished when the clock is read?"
)
_WARMUP_HINT = "what does the first call pay for that later calls do not, and which sample is it?"
_MEAN_HINT = "one slow sample among five: what does it do to a mean, and to a median?"
_CLOCK_HINT = "perf_counter is a monotonic clock made for measuring intervals"
_AUTOCAST_HINT = "autocast only decides dtypes; the ops inside the block are what takes the time"
_MISSING_HINTS = {"a": _WARMUP_HINT, "b": _SYNC_HINT, "c": _MEAN_HINT}
_EXTRA_HINTS = {"d": _CLOCK_HINT, "e": _AUTOCAST_HINT}


def _letters(answer) -> set[str] | None:
    """The letters of a set/list/string answer (lower-case, stripped), or None if it is not one."""
    if isinstance(answer, str):
        items = [answer]
    elif isinstance(answer, Mapping):
        items = list(answer)
    elif isinstance(answer, (set, frozenset, list, tuple)):
        items = list(answer)
    else:
        return None
    if not all(isinstance(x, str) for x in items):
        return None
    return {x.strip().lower() for x in items}


@exercise(
    2,
    "Diagnose a timing loop",
    mistakes=[
        Mistake("forgot synchronisation", _SYNC_HINT),
        Mistake("no warm-up missed", _WARMUP_HINT),
        Mistake("mean is fine", _MEAN_HINT),
        Mistake("perf_counter blamed", _CLOCK_HINT),
        Mistake("autocast timed inside", _AUTOCAST_HINT),
    ],
)
def ex2(answer, *, show: bool = True) -> CheckResult:
    """Which of :data:`FLAWS` make the number :data:`TIMING_LOOP` prints untrustworthy (a set of letters)."""
    flaws = {k for k, (_, is_flaw, _) in FLAWS.items() if is_flaw}
    hints = []
    letters = _letters(answer) if not is_placeholder(answer) else None
    if letters is not None:
        hints += [_MISSING_HINTS[k] for k in sorted(flaws - letters) if k in _MISSING_HINTS]
        hints += [_EXTRA_HINTS[k] for k in sorted(letters - flaws) if k in _EXTRA_HINTS]
    hint = (
        "; ".join(hints)
        if hints
        else "compare the loop with section 1's list of what a naive timing gets wrong"
    )
    return check_set(
        answer,
        sorted(flaws),
        options=list(FLAWS),
        explanations={k: why for k, (_, is_flaw, why) in FLAWS.items() if not is_flaw},
        hint=hint,
        show=show,
    )


# --------------------------------------------------------------------------------------------
# Exercise 3: memory- or compute-bound on this machine?
# --------------------------------------------------------------------------------------------

REGIMES = ("memory-bound", "compute-bound")
MAX_OPS = 12
_ALIASES = {"memory": "memory-bound", "memory bound": "memory-bound", "memory-bound": "memory-bound",
            "compute": "compute-bound", "compute bound": "compute-bound", "compute-bound": "compute-bound"}  # fmt: skip

_INVERTED_HINT = (
    "below the ridge point an op needs more bytes per FLOP than the memory can deliver at full arithmetic speed: "
    "which roof stops it?"
)
_SHAPE_HINT = (
    "a matmul's intensity depends on its shape: count its 2mnk FLOPs against the bytes of A, B and C"
)
_BYTES_HINT = "count bytes, not elements: each FP32 number is 4 bytes"


def _op_intensity(name: str, op, *, per_element: bool = False) -> float:
    """FP32 arithmetic intensity of one ``workload`` entry: ("matmul", m, n, k) or ("add", numel)."""
    if not isinstance(op, tuple) or not op or op[0] not in ("matmul", "add"):
        raise ValueError(
            f"workload[{name!r}]={op!r:.60} must be a tuple ('matmul', m, n, k) or ('add', numel)"
        )
    scale = 4 if per_element else 1  # bytes counted as elements: an FP32 number is 4 bytes
    if op[0] == "matmul":
        if len(op) != 4:
            raise ValueError(f"workload[{name!r}]={op!r:.60} must be ('matmul', m, n, k)")
        return scale * matmul_intensity(op[1], op[2], op[3], torch.float32)
    if len(op) != 2:
        raise ValueError(f"workload[{name!r}]={op!r:.60} must be ('add', numel)")
    return scale * elementwise_intensity(torch.float32)


def _regime(intensity: float, ridge: float) -> str:
    return "memory-bound" if intensity < ridge else "compute-bound"


def _check_workload(workload) -> dict:
    if not isinstance(workload, Mapping):
        raise ArgumentTypeError(
            f"workload must be a dict {{op name: ('matmul', m, n, k) or ('add', numel)}}, got {type(workload).__name__}"
        )
    if not 1 <= len(workload) <= MAX_OPS:
        raise ValueError(f"workload must hold 1 to {MAX_OPS} ops, got {len(workload)}")
    for name in workload:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"workload's op names must be strings, got {name!r:.40}")
    return dict(workload)


@exercise(
    3,
    "Memory- or compute-bound, here?",
    mistakes=[
        Mistake("regimes swapped", _INVERTED_HINT),
        Mistake("every matmul compute-bound", _SHAPE_HINT),
        Mistake("elements for bytes", _BYTES_HINT),
    ],
)
def ex3(answer, workload, roof, *, show: bool = True) -> CheckResult:
    """Classify each op of ``workload`` (FP32) as memory- or compute-bound against this machine's measured
    roofline ``roof`` (:func:`amp_lab.roofline.measure_roofline`): its intensity below the ridge point is
    memory-bound.  ``answer`` is a dict {op name: "memory-bound" or "compute-bound"}."""
    workload = _check_workload(workload)
    if not isinstance(roof, Roofline):
        raise ArgumentTypeError(
            f"roof must be the Roofline of roofline.measure_roofline, got {type(roof).__name__}"
        )
    intensity = {name: _op_intensity(name, op) for name, op in workload.items()}
    want = {name: _regime(i, roof.ridge) for name, i in intensity.items()}
    shape = "a dict {op name: 'memory-bound' or 'compute-bound'}, one entry per op of `workload`"
    if is_placeholder(answer) or (
        isinstance(answer, Mapping) and answer and all(is_placeholder(v) for v in answer.values())
    ):
        return finish(
            "unanswered", f"no answer yet: set `answer` to {shape} and run this cell again.", show=show
        )
    if not isinstance(answer, Mapping):
        return finish(
            "wrong", f"`answer` is a {type(answer).__name__}; this exercise wants {shape}.", show=show
        )
    missing = [n for n in workload if n not in answer]
    unknown = [repr(n) for n in answer if n not in workload]
    if missing or unknown:
        notes = []
        if missing:
            notes.append("no entry for: " + ", ".join(repr(n) for n in missing))
        if unknown:
            notes.append("not an op of `workload`: " + ", ".join(unknown))
        return finish("wrong", "`answer` should have one entry per op of `workload`.", notes, show=show)
    got = {}
    for name in workload:
        value = answer[name]
        regime = _ALIASES.get(_norm(value)) if isinstance(value, str) else None
        if regime is None:
            return finish(
                "wrong",
                f"`answer[{name!r}]` = {value!r:.40} is neither 'memory-bound' nor 'compute-bound'.",
                show=show,
            )
        got[name] = regime
    n_right = sum(got[n] == want[n] for n in workload)
    ridge = f"this machine's ridge point: {roof.ridge:.3g} FLOP per byte"
    if n_right == len(workload):
        notes = [f"{n}: {intensity[n]:.3g} FLOP/byte, {'below' if want[n] == 'memory-bound' else 'above'} the ridge"
                 for n in workload]  # fmt: skip
        return finish("exact", f"all {len(workload)} ops classified right ({ridge}).", notes, show=show)
    hints = []
    if n_right == 0 and len(workload) > 1:
        hints.append(_INVERTED_HINT)
    if any(
        workload[n][0] == "matmul" and want[n] == "memory-bound" and got[n] == "compute-bound"
        for n in workload
    ):
        hints.append(_SHAPE_HINT)
    per_element = {
        n: _regime(_op_intensity(n, op, per_element=True), roof.ridge) for n, op in workload.items()
    }
    if per_element != want and got == per_element:
        hints.append(_BYTES_HINT)
    if not hints:
        hints.append("compute each op's FLOPs per byte (cost.matmul_intensity, cost.elementwise_intensity) and "
                     "compare it with roof.ridge")  # fmt: skip
    return finish(
        "wrong",
        f"{n_right} of {len(workload)} ops classified right ({ridge}).",
        [f"hint: {h}" for h in hints],
        show=show,
        details={"right": n_right},
    )


# --------------------------------------------------------------------------------------------
# Exercise 4: explain the race
# --------------------------------------------------------------------------------------------

# Letter -> (AMP measurably faster?, native arithmetic?) that the statement claims; "e" claims memory decides.
_STATEMENTS = {"a": (True, True), "b": (False, False), "c": (False, True), "d": (True, False)}
_MEMORY_HINT = (
    "AMP keeps FP32 weights, gradients and optimizer state, and the time is set by the arithmetic and the "
    "overhead, not by memory"
)
_OUTCOME_HINT = 'is the speedup\'s interval above 1 (result.outcome == "faster"), or not?'
_HARDWARE_HINT = "does race.native_arithmetic(result) say this hardware multiplies the AMP dtype natively?"


@exercise(
    4,
    "Explain the race",
    mistakes=[
        Mistake("memory decides speed", _MEMORY_HINT),
        Mistake("outcome misread", _OUTCOME_HINT),
        Mistake("hardware misread", _HARDWARE_HINT),
    ],
)
def ex4(answer, result, *, show: bool = True) -> CheckResult:
    """Which statement ("a" to "e") explains the race ``result``: its outcome and whether the hardware that
    ran it multiplies the AMP dtype natively (:func:`amp_lab.race.native_arithmetic`)."""
    if not isinstance(result, RaceResult):
        raise ArgumentTypeError(
            f"result must be the RaceResult of race.race_mlp, got {type(result).__name__}"
        )
    native = native_arithmetic(result)
    faster = result.outcome == "faster"
    if native is None:  # the hardware is unknown: only the measurement decides (a win is taken at its word)
        accepted = ["a"] if faster else ["b", "c"]
    else:
        accepted = [k for k, (f, n) in _STATEMENTS.items() if f == faster and n == native]
    low = str(result.dtype).removeprefix("torch.")
    measured = (
        f"measured: {result.speedup_interval}, {result.outcome}; native {low} arithmetic on this hardware: "
        f"{ {True: 'yes', False: 'no', None: 'unknown'}[native] }"
    )
    hint = "two facts decide it: " + _OUTCOME_HINT + " and " + _HARDWARE_HINT
    if isinstance(answer, str) and _norm(answer) in _STATEMENTS and _norm(answer) not in accepted:
        claims_faster, claims_native = _STATEMENTS[_norm(answer)]
        if claims_faster != faster and (native is None or claims_native == native):
            hint = _OUTCOME_HINT
        elif claims_faster == faster:
            hint = _HARDWARE_HINT
    return check_choice(
        answer,
        accepted,
        options=["a", "b", "c", "d", "e"],
        explanations={
            "a": f"{measured}. 'a' needs a measurable win and native {low} arithmetic.",
            "b": f"{measured}. 'b' needs no measurable win and no native {low} arithmetic.",
            "c": f"{measured}. 'c' needs native {low} arithmetic and still no measurable win.",
            "d": f"{measured}. 'd' needs a measurable win on hardware without native {low} arithmetic.",
            "e": _MEMORY_HINT + " (section 4 reads the memory of your races).",
        },
        hint=hint if _norm(answer) != "e" else None,
        show=show,
    )
