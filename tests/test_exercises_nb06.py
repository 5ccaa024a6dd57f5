"""amp_lab.exercises.nb06 (06_timing_race): the solutions pass, unfilled answers are not attempted, every
common wrong answer gets its hint, the answers follow the learner's own measurements (faked here, so the
tests are fast and cover every outcome), and its verdicts carry their reason codes."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import torch

from amp_lab import cost, intervals, race, roofline
from amp_lab.exercises import nb06
from tests.exercise_support import assert_not_attempted, assert_passes, feed_mistake, run_check

ROOT = Path(__file__).resolve().parents[1]
NO_BF16 = {"avx512_bf16": False, "amx_bf16": False, "avx512_fp16": False}
AVX512_BF16 = {"avx512_bf16": True, "amx_bf16": False, "avx512_fp16": False}
UNKNOWN = {"avx512_bf16": None, "amx_bf16": None, "avx512_fp16": None}
FASTER = [1.8, 2.0, 1.9, 2.1, 2.0, 1.95, 2.05, 2.0]
SLOWER = [0.3, 0.35, 0.32, 0.34, 0.33, 0.31, 0.36, 0.33]
CLOSE = [0.9, 1.1, 0.95, 1.05, 1.0, 0.98, 1.02, 1.01]


def _result(ratios, flags=NO_BF16):
    """A RaceResult whose per-round FP32/AMP ratios are ``ratios``, raced on a CPU with ``flags``."""
    amp = [1e-3] * len(ratios)
    timings = {"fp32": intervals.Timing("fp32", tuple(r * a for r, a in zip(ratios, amp, strict=True)), 1, 1),
               "amp": intervals.Timing("amp", tuple(amp), 1, 1)}  # fmt: skip
    ctx = {"device": "cpu", "threads": 2, "tf32_matmul": None, "cpu_flags": flags, "torch": torch.__version__}
    return race.RaceResult("mlp", {"width": 8, "batch": 4}, torch.bfloat16, timings, 1e6, None, ctx)


def _roof(ridge):
    """A Roofline with the given ridge point (FLOP per byte)."""
    return roofline.Roofline(ridge * 1e10, 1e10, 1024, 2**20, {}, {"device": "cpu", "threads": 1})


WORKLOAD = {
    "layer": ("matmul", 64, 256, 1024),  # 24.4 FLOP/byte in FP32
    "gemv": ("matmul", 1, 4096, 4096),  # about 0.5
    "square": ("matmul", 1024, 1024, 1024),  # 170.7
    "add": ("add", 2**20),  # 1/12
}


def _classify(workload, ridge):
    out = {}
    for name, op in workload.items():
        i = (
            cost.matmul_intensity(*op[1:], torch.float32)
            if op[0] == "matmul"
            else cost.elementwise_intensity(torch.float32)
        )
        out[name] = "memory-bound" if i < ridge else "compute-bound"
    return out


# ---- exercise 1 ----


def test_ex1_start_up():
    assert_passes(nb06.ex1, "too low")
    assert_passes(nb06.ex1, " Too Low ")
    assert_not_attempted(nb06.ex1, None)
    feed_mistake(nb06.ex1, "too high", "too high")
    assert run_check(nb06.ex1, "slower").status == "not yet"


# ---- exercise 2 ----


def test_ex2_diagnose_the_loop():
    assert_passes(nb06.ex2, {"a", "b", "c"})
    assert_passes(nb06.ex2, ["C", "b", "a"])
    assert_not_attempted(nb06.ex2, None)
    assert_not_attempted(nb06.ex2, ...)
    feed_mistake(nb06.ex2, "forgot synchronisation", {"a", "c"})
    feed_mistake(nb06.ex2, "no warm-up missed", {"b", "c"})
    feed_mistake(nb06.ex2, "mean is fine", {"a", "b"})
    feed_mistake(nb06.ex2, "perf_counter blamed", {"a", "b", "c", "d"})
    feed_mistake(nb06.ex2, "autocast timed inside", {"a", "b", "c", "e"})
    for wrong in ("abc", {"a", "b", "c", "z"}, 3, set(), {"a", "b", "c", "d", "e"}):
        assert run_check(nb06.ex2, wrong).status == "not yet"


def test_ex2_rubric_matches_the_loop_it_is_about():
    # The loop's flaws are real: no warm-up (sample 0 is the first call), no synchronisation, a mean.
    loop = nb06.TIMING_LOOP
    assert "synchronize" not in loop and "statistics.mean" in loop and "for i in range(5)" in loop
    assert "perf_counter" in loop  # so blaming the clock is a distractor, not a flaw


@pytest.mark.parametrize(
    "path", ["notebooks/06_timing_race.ipynb", "notebooks/solutions/06_timing_race_solutions.ipynb"]
)
def test_ex2_notebooks_show_the_loop_and_the_options(path):
    cells = json.loads((ROOT / path).read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert nb06.TIMING_LOOP in text, f"{path} does not quote nb06.TIMING_LOOP"
    for letter, statement in nb06.FLAWS.items():
        assert f'`"{letter}"`: {statement}' in text, f"{path} does not list flaw {letter!r}: {statement}"


# ---- exercise 3 ----


def test_ex3_roofline_on_a_cpu_like_and_a_gpu_like_ridge():
    for ridge in (3.6, 12.0, 100.0):
        want = _classify(WORKLOAD, ridge)
        assert_passes(nb06.ex3, want, WORKLOAD, _roof(ridge))
        assert_passes(nb06.ex3, {k: v.split("-")[0].upper() for k, v in want.items()}, WORKLOAD, _roof(ridge))
    # The answer follows the machine: the batch-64 layer is compute-bound below its intensity, memory-bound above.
    assert (
        _classify(WORKLOAD, 3.6)["layer"] == "compute-bound"
        and _classify(WORKLOAD, 100.0)["layer"] == "memory-bound"
    )
    assert run_check(nb06.ex3, _classify(WORKLOAD, 3.6), WORKLOAD, _roof(100.0)).status == "not yet"


def test_ex3_not_attempted_and_malformed():
    roof = _roof(3.6)
    assert_not_attempted(nb06.ex3, None, WORKLOAD, roof)
    assert_not_attempted(nb06.ex3, {k: None for k in WORKLOAD}, WORKLOAD, roof)
    for wrong in ("memory-bound", {"layer": "compute-bound"}, {**_classify(WORKLOAD, 3.6), "extra": "memory-bound"},
                  {**_classify(WORKLOAD, 3.6), "add": "fast"}):  # fmt: skip
        assert run_check(nb06.ex3, wrong, WORKLOAD, roof).status == "not yet"


def test_ex3_mistakes():
    roof = _roof(3.6)
    want = _classify(WORKLOAD, 3.6)
    swapped = {k: "memory-bound" if v == "compute-bound" else "compute-bound" for k, v in want.items()}
    assert feed_mistake(nb06.ex3, "regimes swapped", swapped, WORKLOAD, roof).reasons[0] == "nb06.inverted"
    shape = feed_mistake(
        nb06.ex3, "every matmul compute-bound", {**want, "gemv": "compute-bound"}, WORKLOAD, roof
    )
    assert shape.reasons == ("nb06.shape",) and shape.details == {"right": 3}
    # Counting elements instead of bytes makes intensities 4x too high: at a ridge of 30 the layer (24.4
    # FLOP/byte) looks compute-bound.
    wide = _roof(30.0)
    per_element = {**_classify(WORKLOAD, 30.0), "layer": "compute-bound"}
    assert per_element != _classify(WORKLOAD, 30.0)
    assert (
        feed_mistake(nb06.ex3, "elements for bytes", per_element, WORKLOAD, wide).reasons[-1] == "nb06.bytes"
    )


# ---- exercise 4 ----


@pytest.mark.parametrize(
    ("ratios", "flags", "right"),
    [(SLOWER, NO_BF16, {"b"}), (CLOSE, NO_BF16, {"b"}), (FASTER, NO_BF16, {"d"}),
     (FASTER, AVX512_BF16, {"a"}), (SLOWER, AVX512_BF16, {"c"}), (CLOSE, AVX512_BF16, {"c"}),
     (SLOWER, UNKNOWN, {"b", "c"}), (FASTER, UNKNOWN, {"a"})],
)  # fmt: skip
def test_ex4_follows_outcome_and_hardware(ratios, flags, right):
    result = _result(ratios, flags)
    for letter in "abcde":
        status = run_check(nb06.ex4, letter, result).status
        assert status == ("passed" if letter in right else "not yet"), (letter, status)
    assert_not_attempted(nb06.ex4, None, result)


def test_ex4_mistakes():
    slow_emulated = _result(SLOWER, NO_BF16)
    feed_mistake(nb06.ex4, "memory decides speed", "e", slow_emulated)
    feed_mistake(nb06.ex4, "outcome misread", "d", slow_emulated)  # claims a win on the same hardware
    feed_mistake(nb06.ex4, "hardware misread", "c", slow_emulated)  # right outcome, claims native arithmetic
    fast_native = _result(FASTER, AVX512_BF16)
    feed_mistake(nb06.ex4, "outcome misread", "c", fast_native)
    feed_mistake(nb06.ex4, "hardware misread", "d", fast_native)


JUNK = [0, -1, 1.5, float("nan"), True, "", "a", "x" * 500, [], {}, set(), {"a": 1}, [[1]], torch.ones(2), object(),
        lambda: None, b"a", {"a", 3}, (None,)]  # fmt: skip


def test_no_answer_raises():
    # A wrong or odd answer is "not yet" (or "not attempted"), never a traceback.
    roof, result = _roof(3.6), _result(SLOWER)
    for junk in JUNK:
        for ex, args in ((nb06.ex3, (WORKLOAD, roof)), (nb06.ex4, (result,))):  # 1 and 2: test_exercises_base
            status = run_check(ex, junk, *args).status
            assert status in ("not yet", "not attempted"), (ex, junk, status)
    for junk in JUNK:
        status = run_check(nb06.ex3, {name: junk for name in WORKLOAD}, WORKLOAD, roof).status
        assert status in ("not yet", "not attempted"), (junk, status)


# ---- exercise 5: the learner writes the honest timer, run on a simulated device ----


def _timer(*, warmup=2, sync=True, rounds=8, interleave=True, reduce="median", upside_down=False, number=1):
    """A learner's my_speedup(fp32, amp, clock, sync), right by default, with one thing changed."""

    def my_speedup(fp32, amp, clock, sync_):
        contestants = {"fp32": fp32, "amp": amp}
        for fn in contestants.values():
            for _ in range(warmup):
                fn()
        samples = {"fp32": [], "amp": []}
        order = list(contestants)
        for r in range(rounds):
            names = order if (r % 2 == 0 or not interleave) else order[::-1]
            for name in names:
                if sync:
                    sync_()
                start = clock()
                for _ in range(number):
                    contestants[name]()
                if sync:
                    sync_()
                samples[name].append((clock() - start) / number)
        if not interleave:  # all of FP32, then all of AMP: rerun as the tutorial loop does
            samples = {"fp32": [], "amp": []}
            for name in order:
                for _ in range(rounds):
                    sync_()
                    start = clock()
                    contestants[name]()
                    sync_()
                    samples[name].append(clock() - start)
        ratios = [f / a for f, a in zip(samples["fp32"], samples["amp"], strict=True)]
        if upside_down:
            ratios = [1 / x for x in ratios]
        return {"median": statistics.median, "mean": statistics.mean}[reduce](ratios)

    return my_speedup


def _perf_counter_timer(fp32, amp, clock, sync):
    return _timer()(fp32, amp, time.perf_counter, sync)


def _notebook_honest_race():
    """Notebook 06's honest_race (section 2), run on the check's clock and synchronisation."""
    cells = json.loads((ROOT / "notebooks/06_timing_race.ipynb").read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if "def honest_race(" in "".join(c["source"]))
    env = {"device": "cpu"}
    exec(source.replace("from amp_lab.device import synchronize", ""), env)
    return env["honest_race"]


def test_ex5_passes_the_right_timer_and_the_notebooks_own():
    assert_passes(nb06.ex5, _timer())
    assert_passes(nb06.ex5, _timer(number=3, rounds=6, warmup=1))
    honest = _notebook_honest_race()

    def my_speedup(fp32, amp, clock, sync):
        honest.__globals__["synchronize"] = lambda device: sync()
        return honest({"fp32": fp32, "amp": amp}, clock=clock)[1]

    assert_passes(nb06.ex5, my_speedup)


def test_ex5_not_attempted_and_malformed():
    assert_not_attempted(nb06.ex5, None)

    def skeleton(fp32, amp, clock, sync):
        raise NotImplementedError

    assert_not_attempted(nb06.ex5, skeleton)
    assert run_check(nb06.ex5, 2.0).status == "not yet"
    assert run_check(nb06.ex5, lambda *a: 1 / 0).status == "not yet"
    assert run_check(nb06.ex5, lambda *a: "2").status == "not yet"

    def forever(fp32, amp, clock, sync):
        while True:
            fp32()

    assert "10,000 calls" in run_check(nb06.ex5, forever).message


def test_ex5_mistakes():
    feed_mistake(nb06.ex5, "own clock", _perf_counter_timer)
    feed_mistake(nb06.ex5, "no synchronisation", _timer(sync=False))
    feed_mistake(nb06.ex5, "no warm-up", _timer(warmup=0))
    feed_mistake(nb06.ex5, "one trial", _timer(rounds=1))
    feed_mistake(nb06.ex5, "not interleaved", _timer(interleave=False))
    feed_mistake(nb06.ex5, "a mean, not the median", _timer(reduce="mean"))
    feed_mistake(nb06.ex5, "ratio upside down", _timer(upside_down=True))


def test_ex5_device_is_an_honest_oracle():
    # The simulated device: FP32 2 ms, AMP 1 ms per call; a call only queues its work; sync waits for it.
    dev = nb06._Device()
    dev.call("fp32")
    assert dev.clock() < 1e-3 and dev.log[-1] is True  # queued, not done: the clock read too early
    dev.sync()
    start = dev.clock()
    dev.call("amp")
    dev.call("amp")
    dev.sync()
    # two AMP calls: the first pays the start-up, the second (the 2nd timed AMP call) meets the burst
    assert dev.clock() - start == pytest.approx(2 * 1e-3 + 0.05 + 0.02)
