"""Exercises of notebook 06 (the timing race): 3 and 4 are answered from the learner's own roofline (``roof``)
and race (``result``); in 5 the learner writes the honest timer, run on a device the check simulates.  Every sentence is a reason code of ``exercises_nb06`` in ``amp_lab/reasons.json``."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import torch

from ..check_base import CheckResult, Note, finish, is_placeholder, no_answer, norm
from ..check_items import check_choice, check_set
from ..cost import elementwise_intensity, matmul_intensity
from ..dtypes import dtype_name
from ..race import native_arithmetic
from ..text import say
from . import Mistake, exercise

__all__ = ["ex1", "ex2", "ex3", "ex4", "ex5", "TIMING_LOOP", "FLAWS"]


def _hint(code: str) -> Note:
    """The hint line of reason ``code`` (its code is the result's reason)."""
    line = Note("hint: " + say(code))
    line.code = code
    return line


def _mistake(name: str, code: str) -> Mistake:
    return Mistake(name, say(code))


@exercise(1, "Who pays for the start-up?", mistakes=[_mistake("too high", "nb06.ratio")])
def ex1(answer, *, show: bool = True) -> CheckResult:
    """Which way the tutorial loop's cold start (AMP timed first, no warm-up) biases FP32 time / AMP time."""
    # The one-off costs land on whoever runs first (AMP): they inflate the denominator, so the ratio shrinks.
    explanations = {"too low": say("nb06.startup_too_low"), "too high": say("nb06.startup_too_high")}
    options, hint = ["too high", "too low"], say("nb06.ratio")
    return check_choice(answer, "too low", options=options, explanations=explanations, hint=hint, show=show)


# The loop the notebook shows (its markdown quotes it; a test checks that it does).
TIMING_LOOP = """\
model, X = model.to("cuda"), X.to("cuda")
times = []
for i in range(5):
    start = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(X)
    times.append(time.perf_counter() - start)
print(f"AMP forward pass: {statistics.mean(times) * 1e3:.2f} ms")"""

# The statements the notebook lists (quoted there, word for word).
FLAWS = {
    "a": "the first call is timed with the rest: there is no warm-up",
    "b": "the clock is read before the GPU has finished: there is no synchronisation",
    "c": "it reports the mean of the samples",
    "d": "time.perf_counter() is the wrong clock: time.time() is the one for intervals",
    "e": "the clock must be read inside the `with torch.autocast(...)` block, or autocast is not timed",
}
# A real flaw and the mistake of leaving it out, then a distractor and the mistake of picking it.
_FLAW_MISTAKES = {
    "a": _mistake("no warm-up missed", "nb06.warmup"),
    "b": _mistake("forgot synchronisation", "nb06.sync"),
    "c": _mistake("mean is fine", "nb06.mean"),
    "d": _mistake("perf_counter blamed", "nb06.clock"),
    "e": _mistake("autocast timed inside", "nb06.autocast"),
}
_REAL_FLAWS = ("a", "b", "c")


@exercise(2, "Diagnose a timing loop", mistakes=list(_FLAW_MISTAKES.values()))
def ex2(answer, *, show: bool = True) -> CheckResult:
    """Which of :data:`FLAWS` make the number :data:`TIMING_LOOP` prints untrustworthy (a set of letters)."""
    items = answer if isinstance(answer, (set, frozenset, list, tuple, Mapping)) else [answer]
    picked = {norm(x) for x in items if isinstance(x, str)}
    missed = [_FLAW_MISTAKES[k].hint for k in _REAL_FLAWS if picked and k not in picked]
    why = {k: _FLAW_MISTAKES[k].hint for k in FLAWS if k not in _REAL_FLAWS}
    hint = "; ".join(missed) or say("nb06.loop")
    return check_set(answer, _REAL_FLAWS, options=list(FLAWS), explanations=why, hint=hint, show=show)


def _regime(intensity: float, ridge: float) -> str:
    return "memory-bound" if intensity < ridge else "compute-bound"


def _read_regime(value) -> str | None:
    """ "memory-bound", "Memory bound" or "memory" as "memory-bound" (and compute alike), else None."""
    word = norm(value).replace("-", " ").removesuffix(" bound") if isinstance(value, str) else None
    return f"{word}-bound" if word in ("memory", "compute") else None


_EX3 = {
    "regimes swapped": "nb06.inverted",
    "every matmul compute-bound": "nb06.shape",
    "elements for bytes": "nb06.bytes",
}


@exercise(3, "Memory- or compute-bound, here?", mistakes=[_mistake(*m) for m in _EX3.items()])
def ex3(answer, workload, roof, *, show: bool = True) -> CheckResult:
    """``answer``, a dict {op name: "memory-bound" or "compute-bound"}, for each FP32 op of ``workload`` against
    this machine's roofline ``roof`` (:func:`amp_lab.roofline.measure_roofline`): below the ridge is memory-bound."""
    # FP32 FLOP per byte of each op: ("matmul", m, n, k) or ("add", numel)
    f32 = torch.float32
    intensity = {
        n: matmul_intensity(*op[1:], f32) if op[0] == "matmul" else elementwise_intensity(f32)
        for n, op in workload.items()
    }
    want = {name: _regime(i, roof.ridge) for name, i in intensity.items()}
    blank = isinstance(answer, Mapping) and answer and all(map(is_placeholder, answer.values()))
    if is_placeholder(answer) or blank:
        return no_answer("answer", show, say("nb06.workload_answer"))
    if not isinstance(answer, Mapping):
        return finish("wrong", say("nb06.not_a_dict", kind=type(answer).__name__), show=show)
    missing = ", ".join(repr(n) for n in workload if n not in answer)
    unknown = ", ".join(repr(n) for n in answer if n not in workload)
    if missing or unknown:
        return finish("wrong", say("nb06.entries", missing=missing or "-", unknown=unknown or "-"), show=show)
    got = {name: _read_regime(answer[name]) for name in workload}
    if (bad := next((n for n, regime in got.items() if regime is None), None)) is not None:
        return finish("wrong", say("nb06.not_a_regime", name=bad, value=f"{answer[bad]!r:.40}"), show=show)
    n, n_right = len(workload), sum(got[name] == want[name] for name in workload)
    if n_right == n:
        side = {k: "below" if w == "memory-bound" else "above" for k, w in want.items()}
        notes = [say("nb06.op_placed", name=k, intensity=i, side=side[k]) for k, i in intensity.items()]
        return finish("exact", say("nb06.all_placed", n=n, ridge=roof.ridge), notes, show=show)
    hints = []
    if n_right == 0 and n > 1:
        hints.append(_hint("nb06.inverted"))
    if any(workload[k][0] == "matmul" and want[k] == "memory-bound" != got[k] for k in workload):
        hints.append(_hint("nb06.shape"))
    per_element = {name: _regime(4 * i, roof.ridge) for name, i in intensity.items()}  # 4 bytes taken as 1
    if per_element != want and got == per_element:
        hints.append(_hint("nb06.bytes"))
    head = say("nb06.some_placed", right=n_right, n=n, ridge=roof.ridge)
    return finish("wrong", head, hints or [_hint("nb06.intensity")], show=show, details={"right": n_right})


# Letter -> (AMP measurably faster?, native arithmetic?) that the statement claims; "e" claims memory decides.
_STATEMENTS = {"a": (True, True), "b": (False, False), "c": (False, True), "d": (True, False)}
_EX4 = {
    "memory decides speed": "nb06.memory",
    "outcome misread": "nb06.outcome",
    "hardware misread": "nb06.hardware",
}


@exercise(4, "Explain the race", mistakes=[_mistake(*m) for m in _EX4.items()])
def ex4(answer, result, *, show: bool = True) -> CheckResult:
    """Which statement ("a" to "e") explains the race ``result``: its outcome and whether the hardware that
    ran it multiplies the AMP dtype natively (:func:`amp_lab.race.native_arithmetic`)."""
    native = native_arithmetic(result)
    faster = result.outcome == "faster"
    if native is None:  # the hardware is unknown: only the measurement decides (a win is taken at its word)
        accepted = ["a"] if faster else ["b", "c"]
    else:
        accepted = [k for k, claims in _STATEMENTS.items() if claims == (faster, native)]
    a = norm(answer) if isinstance(answer, str) else None
    hint = None if a == "e" else say("nb06.two_facts")
    if a in _STATEMENTS and a not in accepted:
        claims_faster, claims_native = _STATEMENTS[a]
        if claims_faster != faster and native in (None, claims_native):
            hint = say("nb06.outcome")
        elif claims_faster == faster:
            hint = say("nb06.hardware")
    facts = {"interval": result.speedup_interval, "outcome": result.outcome, "low": dtype_name(result.dtype)}
    facts["native"] = {True: "yes", False: "no", None: "unknown"}[native]
    why = {**{k: say(f"nb06.needs_{k}", **facts) for k in _STATEMENTS}, "e": say("nb06.memory")}
    return check_choice(answer, accepted, options=list("abcde"), explanations=why, hint=hint, show=show)


class _Device:
    """A simulated GPU: a call queues its work (FP32 2 ms, AMP 1 ms; 50 ms more on each one's first call, 20 ms
    on the second AMP call after the first clock read), ``sync`` waits, ``clock`` reads the time.  ``log``: the
    calls, and at each clock read whether work was still queued (a bool)."""

    def __init__(self):
        self.now = self.busy = 0.0
        self.log, self.calls, self.timed_amp, self.read = [], {"fp32": 0, "amp": 0}, 0, False

    def call(self, name: str) -> None:
        if len(self.log) > 10_000:
            raise RuntimeError("more than 10,000 calls: a loop that does not end?")
        self.timed_amp += name == "amp" and self.read
        burst = name == "amp" and self.timed_amp == 2
        cost = {"fp32": 2e-3, "amp": 1e-3}[name] + 0.05 * (self.calls[name] == 0) + 0.02 * burst
        self.calls[name] += 1
        self.busy = max(self.busy, self.now) + cost
        self.now += 5e-6  # queueing the work is quick
        self.log.append(name)

    def sync(self) -> None:
        self.now = max(self.now, self.busy)

    def clock(self) -> float:
        self.log.append(self.busy > self.now)  # True: the clock is read while work is still queued
        self.read = True
        return self.now


def _samples(log: list) -> list[set]:
    """The contestants called between one clock read and the next, for each sample that called any."""
    cuts = [i for i, x in enumerate(log) if isinstance(x, bool)]
    return [set(log[a + 1 : b]) for a, b in zip(cuts, cuts[1:], strict=False) if b > a + 1]


_EX5 = {
    "own clock": "nb06.own_clock",
    "no synchronisation": "nb06.code_sync",
    "no warm-up": "nb06.code_warmup",
    "one trial": "nb06.code_trials",
    "not interleaved": "nb06.code_order",
    "a mean, not the median": "nb06.code_median",
    "ratio upside down": "nb06.code_ratio",
}


@exercise(5, "Write the honest timer", mistakes=[_mistake(*m) for m in _EX5.items()])
def ex5(answer, *, show: bool = True) -> CheckResult:
    """``answer(fp32, amp, clock, sync)`` on :class:`_Device` returns FP32 time / AMP time: 2, exactly, only
    when it warms up, synchronises, takes interleaved rounds and returns the median of their ratios."""
    if is_placeholder(answer):
        return no_answer("my_speedup", show, "your function")
    if not callable(answer):
        return finish("wrong", say("nb06.not_a_function", kind=type(answer).__name__), show=show)
    dev = _Device()
    try:
        got = answer(lambda: dev.call("fp32"), lambda: dev.call("amp"), dev.clock, dev.sync)
    except NotImplementedError:
        return finish("unanswered", say("nb06.skeleton"), show=show)
    except Exception as exc:  # the learner's code: reported, never raised
        return finish("wrong", say("nb06.raised", error=type(exc).__name__, text=f"{exc}"[:200]), show=show)
    value = float(got) if isinstance(got, (int, float)) and not isinstance(got, bool) else math.nan
    reads = [x for x in dev.log if isinstance(x, bool)]
    first_read = next((i for i, x in enumerate(dev.log) if isinstance(x, bool)), len(dev.log))
    samples = _samples(dev.log)
    order = [next(iter(c)) for c in samples if len(c) == 1]
    runs = [len(list(g)) for _, g in itertools.groupby(order)]
    found = [
        not reads,
        any(reads),
        not {"fp32", "amp"} <= set(dev.log[:first_read]),
        min(order.count("fp32"), order.count("amp")) < 3,
        any(len(c) > 1 for c in samples) or max(runs, default=3) > 2,
        math.isfinite(value) and value < 2 * (1 - 1e-6) and not math.isclose(value, 0.5, rel_tol=1e-6),
        math.isclose(value, 0.5, rel_tol=1e-6),
    ]
    if math.isclose(value, 2.0, rel_tol=1e-6) and not any(found[:5]):
        return finish("exact", say("nb06.timer_right"), show=show)
    hint = next((_hint(code) for code, hit in zip(_EX5.values(), found, strict=True) if hit), None)
    head = say("nb06.timer_wrong", value=f"{got!r:.40}")
    return finish("wrong", head, [hint or _hint("nb06.timer_recipe")], show=show)
