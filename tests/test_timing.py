"""amp_lab.timing: the honest timer and the interval of a speedup.

No test asserts a speed: the machine is shared and noisy.  The timer is tested with a fake clock and fake
synchronisation (so *when* it reads the clock is checked exactly); the interval against independent
oracles: scipy's binomial distribution for the order statistic, numpy's median, hand-worked small cases,
and its coverage on seeded synthetic samples whose true ratio is known.
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import hardware, intervals, text, timing
from amp_lab.intervals import SpeedupEstimate, speedup_estimate

# ------------------------------------------------------------------------------------------
# The timer, with a fake clock
# ------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, log):
        self.now = 0.0
        self.log = log

    def __call__(self):
        self.log.append("clock")
        return self.now


@pytest.fixture
def fake(monkeypatch):
    log: list[str] = []
    clock = FakeClock(log)
    monkeypatch.setattr(timing, "_clock", clock)
    monkeypatch.setattr(timing, "_budget_clock", lambda: clock.now)  # the budget reads the same fake time
    monkeypatch.setattr(timing, "_synchronizer", lambda dev: (lambda: log.append("sync")))
    return log, clock


def test_timer_warms_up_then_synchronises_before_every_clock_reading(fake):
    log, clock = fake

    def fn():
        log.append("call")
        clock.now += 0.5

    t = timing.measure(fn, warmup=3, repeats=4, number=2)
    first = log.index("clock")
    # the three warm-up calls happen before the clock is ever read ...
    assert log[:first] == ["call", "call", "call", "sync"]
    # ... and every sample is: synchronise, read, calls, synchronise, read
    assert log[first - 1 :] == ["sync", "clock", "call", "call", "sync", "clock"] * 4
    assert t.samples == (0.5,) * 4  # seconds per call
    assert (t.number, t.warmup, len(t.samples)) == (2, 3, 4)


def test_warm_up_keeps_start_up_cost_out_of_the_samples(fake):
    log, clock = fake
    calls = []

    def fn():  # the first call pays a start-up cost, as CUDA context creation or kernel selection does
        calls.append(1)
        clock.now += 1.0 if len(calls) == 1 else 0.001

    warm = timing.measure(fn, warmup=1, repeats=5, number=1)
    assert warm.samples == pytest.approx((0.001,) * 5)
    calls.clear()
    cold = timing.measure(fn, warmup=0, repeats=5, number=1)  # the tutorial loop's mistake: the first call is timed
    assert cold.samples[0] == pytest.approx(1.0)
    assert cold.median == pytest.approx(0.001)  # the median resists one cold sample; a single trial would not


def test_number_per_sample_is_calibrated_on_the_fastest_warm_up_call(fake):
    log, clock = fake
    costs = iter([0.05, 0.004, 0.006] + [0.004] * 100)  # a slow first call must not shorten the samples

    def fn():
        log.append("call")
        clock.now += next(costs)

    t = timing.measure(fn, warmup=3, repeats=3, min_sample_s=0.01)
    assert t.number == math.ceil(0.01 / 0.004)
    assert t.warmup == 3
    assert log.count("call") == t.warmup + len(t.samples) * t.number == 3 + 3 * t.number
    assert t.samples == pytest.approx((0.004,) * 3)
    # warmup=0 still needs one call to calibrate, and it is not counted as a sample
    t0 = timing.measure(fn, warmup=0, repeats=2, min_sample_s=0.01)
    assert t0.warmup == 1 and len(t0.samples) == 2


def test_contestants_are_interleaved_and_the_order_flips_every_round(fake):
    log, clock = fake
    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    timings = timing.measure(fns, warmup=1, repeats=4, number=1)
    assert order[:2] == ["a", "b"]  # warm-up
    assert order[2:] == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert set(timings) == {"a", "b"}
    assert all(len(t.samples) == 4 for t in timings.values())


def test_callback_reports_warm_up_and_every_sample(fake):
    events = []
    timing.measure({"fp32": lambda: None, "amp": lambda: None}, warmup=1, repeats=3, number=1, callback=events.append)
    phases = [(e.phase, e.label, e.done) for e in events]
    assert phases[:2] == [("warmup", "fp32", 0), ("warmup", "amp", 0)]
    assert [p for p in phases if p[0] == "sample"] == [
        ("sample", "fp32", 1), ("sample", "amp", 1), ("sample", "amp", 2),
        ("sample", "fp32", 2), ("sample", "fp32", 3), ("sample", "amp", 3),
    ]  # fmt: skip
    assert len(events[-1].samples["fp32"]) == 3 and events[-1].total == 3


class FakeEvent:
    def __init__(self, log, clock):
        self.log, self.clock, self.t = log, clock, None

    def record(self):
        self.log.append("record")
        self.t = self.clock.now

    def synchronize(self):
        self.log.append("event-sync")

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3  # milliseconds, as torch.cuda.Event does


def test_cuda_event_sampler_brackets_the_calls_with_events_and_waits_for_the_end(fake):
    log, clock = fake
    sampler = timing._sampler(torch.device("cpu"), event=lambda: FakeEvent(log, clock))

    def fn():
        log.append("call")
        clock.now += 0.25

    seconds = sampler(fn, 3)
    assert log == ["sync", "record", "call", "call", "call", "record", "event-sync"]
    assert seconds == pytest.approx(0.75)


def test_cuda_uses_events_and_the_cpu_the_wall_clock(fake, monkeypatch):
    log, clock = fake
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing: FakeEvent(log, clock))
    timing._sampler(torch.device("cuda"))(lambda: None, 2)
    assert "record" in log and "clock" not in log
    log.clear()
    timing._sampler(torch.device("cpu"))(lambda: None, 2)
    assert log == ["sync", "clock", "sync", "clock"]


# ------------------------------------------------------------------------------------------
# Sampling until the interval is narrow, within a budget
# ------------------------------------------------------------------------------------------


def _contestants(clock, ratios):
    """Two contestants: "fp32" costs ratios[i] fake seconds in round i, "amp" always 1 s."""
    rounds = {"fp32": 0}

    def fp32():
        clock.now += ratios[rounds["fp32"] % len(ratios)]
        rounds["fp32"] += 1

    def amp():
        clock.now += 1.0

    return {"fp32": fp32, "amp": amp}


def test_sampling_stops_as_soon_as_the_interval_is_narrow_enough(fake):
    _, clock = fake
    # Every round gives the same ratio, so the interval is a point once there are enough pairs for one.
    t = timing.measure(_contestants(clock, [2.0]), warmup=0, repeats=2, number=1, target_rel_width=0.01)
    assert len(t["fp32"].samples) == intervals.min_pairs(0.95) == 6
    est = speedup_estimate(t["fp32"], t["amp"])
    assert (est.ratio, est.low, est.high) == (2.0, 2.0, 2.0)
    # A wider confidence needs more pairs before any finite interval exists.
    t99 = timing.measure(_contestants(clock, [2.0]), warmup=0, repeats=2, number=1, target_rel_width=0.01,
                         confidence=0.99)  # fmt: skip
    assert len(t99["fp32"].samples) == intervals.min_pairs(0.99) == 8


def test_without_a_target_exactly_repeats_rounds_are_taken(fake):
    _, clock = fake
    t = timing.measure(_contestants(clock, [2.0, 0.5]), warmup=0, repeats=3, number=1)
    assert len(t["fp32"].samples) == len(t["amp"].samples) == 3


@pytest.mark.parametrize("max_time_s", [7.0, 30.5, 61.0])
def test_a_noisy_race_stops_when_the_next_round_would_overrun_the_budget(fake, max_time_s):
    _, clock = fake
    # Ratios that swing between 0.5 and 2: the interval never gets narrow, so only the budget stops it.
    # Each round lasts 1 + ratio fake seconds, i.e. 1.5 or 3.
    t = timing.measure(_contestants(clock, [0.5, 2.0]), warmup=0, repeats=2, number=1, target_rel_width=0.05,
                       max_time_s=max_time_s)  # fmt: skip
    n = len(t["fp32"].samples)
    assert n >= 2
    elapsed = clock.now
    slowest = max(f + a for f, a in zip(t["fp32"].samples, t["amp"].samples, strict=True))
    assert elapsed <= max_time_s  # no round started that, as slow as the slowest so far, would end past the budget
    assert elapsed + slowest > max_time_s  # ... and one more such round would have ended past it
    assert speedup_estimate(t["fp32"], t["amp"]).rel_width > 0.05


def test_the_minimum_rounds_are_taken_even_past_the_budget_and_max_repeats_caps_them(fake):
    _, clock = fake
    t = timing.measure(_contestants(clock, [0.5, 2.0]), warmup=0, repeats=5, number=1, target_rel_width=0.01,
                       max_time_s=1.0)  # fmt: skip
    assert len(t["fp32"].samples) == 5
    capped = timing.measure(_contestants(clock, [0.5, 2.0]), warmup=0, repeats=2, number=1, target_rel_width=0.01,
                            max_time_s=3600, max_repeats=9)  # fmt: skip
    assert len(capped["fp32"].samples) == 9


def test_the_interval_is_checked_for_every_contestant_against_the_baseline(fake):
    _, clock = fake
    fns = _contestants(clock, [2.0])
    noisy = {"i": 0}

    def tf32():  # alternates: its ratio to fp32 never settles
        clock.now += (0.5, 4.0)[noisy["i"] % 2]
        noisy["i"] += 1

    fns["tf32"] = tf32
    t = timing.measure(fns, warmup=0, repeats=2, number=1, target_rel_width=0.01, max_repeats=20,
                       max_time_s=3600)  # fmt: skip
    assert len(t["fp32"].samples) == 20  # fp32/amp settled at 6 pairs, fp32/tf32 never did
    t = timing.measure(fns, warmup=0, repeats=2, number=1, target_rel_width=0.01, max_repeats=20, baseline="amp",
                       max_time_s=3600)  # fmt: skip
    assert len(t["fp32"].samples) == 20


def test_progress_total_is_the_minimum_and_rounds_may_go_past_it(fake):
    _, clock = fake
    events = []
    timing.measure(_contestants(clock, [2.0]), warmup=0, repeats=2, number=1, target_rel_width=0.01,
                   callback=events.append)  # fmt: skip
    samples = [e for e in events if e.phase == "sample"]
    assert {e.total for e in samples} == {2} and max(e.done for e in samples) == 6


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"target_rel_width": 0}, "target_rel_width"),
        ({"target_rel_width": -0.1}, "target_rel_width"),
        ({"target_rel_width": float("nan")}, "target_rel_width"),
        ({"target_rel_width": 0.1, "max_time_s": 0}, "max_time_s"),
        ({"max_time_s": 5.0}, "max_time_s"),  # a budget without a target bounds nothing
        ({"target_rel_width": 0.1, "max_repeats": 1, "repeats": 3}, "max_repeats"),
        ({"max_repeats": 50}, "max_repeats"),
        ({"target_rel_width": 0.1, "baseline": "tf32"}, "baseline"),
        ({"confidence": 1.0}, "confidence"),
        ({"confidence": "high"}, "confidence"),
    ],
)
def test_bad_sampling_arguments_raise_value_error_naming_them(kwargs, name):
    fns = {"fp32": lambda: None, "amp": lambda: None}
    with pytest.raises(ValueError, match=name):
        timing.measure(fns, warmup=0, number=1, **kwargs)


def test_a_target_needs_two_contestants():
    with pytest.raises(ValueError, match="target_rel_width"):
        timing.measure(lambda: None, number=1, target_rel_width=0.1)


def test_bad_measure_input():
    with pytest.raises(ValueError, match="fns"):
        timing.measure({})
    with pytest.raises(ValueError, match="callable"):
        timing.measure({"a": 3})


# ------------------------------------------------------------------------------------------
# The interval of a speedup
# ------------------------------------------------------------------------------------------


def test_exact_small_case_six_pairs_gives_min_to_max():
    # 6 pairs: [min, max] covers the median with probability 1 - 2/64 = 96.9% >= 95%; the next
    # narrower interval, [2nd, 5th], only 1 - 2*7/64 = 78%.
    b = [2.0, 2.1, 1.9, 2.0, 2.2, 2.0]
    e = speedup_estimate(b, [1.0] * 6)
    assert e == SpeedupEstimate(ratio=2.0, low=1.9, high=2.2, confidence=0.95, pairs=6)
    assert e.outcome == "faster"
    assert str(e) == "2.00x (95% interval 1.90x to 2.20x)"


def test_exact_small_case_ten_pairs_drops_one_from_each_end():
    # 10 pairs: [2nd, 9th] covers with 1 - 2*11/1024 = 97.9%; [3rd, 8th] with 1 - 2*56/1024 = 89%.
    ratios = [0.7, 1.3, 0.9, 1.1, 1.0, 0.8, 1.2, 0.95, 1.05, 0.6]
    amp = [2e-3 * (i + 1) for i in range(10)]  # the per-round level changes; only the ratios matter
    fp32 = [r * a for r, a in zip(ratios, amp, strict=True)]
    e = speedup_estimate(fp32, amp)
    s = sorted(ratios)
    assert e.low == pytest.approx(s[1]) and e.high == pytest.approx(s[8])
    assert e.ratio == pytest.approx(statistics.median(ratios)) and e.pairs == 10
    assert e.outcome == "too close to call"


def test_too_few_pairs_give_no_interval_at_95_but_do_at_90():
    b, c = [3.0, 3.1, 2.9, 3.0, 3.2], [1.0] * 5
    e = speedup_estimate(b, c)
    assert (e.low, e.high, e.pairs) == (0.0, math.inf, 5) and e.outcome == "too close to call"
    assert str(e) == "3.00x (5 pairs: too few for a 95% interval)"
    assert e.rel_width == math.inf
    e90 = speedup_estimate(b, c, confidence=0.9)  # 1 - 2/32 = 93.75% >= 90%
    assert (e90.low, e90.high) == (2.9, 3.2) and e90.outcome == "faster"
    assert str(e90) == "3.00x (90% interval 2.90x to 3.20x)"


def test_outcomes_and_their_text():
    slower = speedup_estimate([1.0] * 8, [4.0, 3.9, 4.1, 4.0, 4.2, 3.8, 4.0, 4.0])
    assert slower.outcome == "slower" and slower.high < 1
    close = speedup_estimate([1.0] * 8, [0.9, 1.1] * 4)
    assert close.outcome == "too close to call" and close.low < 1 < close.high
    # an end that two decimals would print as 1.00x gets a third decimal, so the text shows its side of 1
    near = SpeedupEstimate(ratio=1.01, low=1.004, high=1.02, confidence=0.95, pairs=30)
    assert near.outcome == "faster" and str(near) == "1.01x (95% interval 1.004x to 1.020x)"


@settings(max_examples=60)
@given(
    st.lists(st.tuples(st.floats(1e-6, 1.0), st.floats(1e-6, 1.0)), min_size=1, max_size=60),
    st.sampled_from([0.8, 0.9, 0.95, 0.99]),
)
def test_interval_matches_the_binomial_order_statistic_and_swaps_exactly(pairs, confidence):
    from scipy.stats import binom

    b, c = [p[0] for p in pairs], [p[1] for p in pairs]
    e = speedup_estimate(b, c, confidence=confidence)
    n = len(pairs)
    ratios = np.sort(np.array(b) / np.array(c))
    assert e.ratio == pytest.approx(float(np.median(ratios)), rel=1e-12)
    # oracle: the largest k with 1 - 2 * P(B <= k - 1) >= confidence, B ~ Binomial(n, 1/2)
    ks = [k for k in range(1, (n + 1) // 2 + 1) if 1 - 2 * binom.cdf(k - 1, n, 0.5) >= confidence - 1e-12]
    if not ks:
        assert (e.low, e.high) == (0.0, math.inf)
    else:
        k = max(ks)
        assert e.low == pytest.approx(ratios[k - 1], rel=1e-12) and e.high == pytest.approx(ratios[n - k], rel=1e-12)
        assert e.low <= e.ratio <= e.high
        # Swapping the contestants inverts the interval exactly: the order statistics are the same on a log scale.
        s = speedup_estimate(c, b, confidence=confidence)
        assert s.low == pytest.approx(1 / e.high, rel=1e-12) and s.high == pytest.approx(1 / e.low, rel=1e-12)


def _coverage(rng, true_ratio, n, trials, noise):
    hits = 0
    for _ in range(trials):
        level = rng.uniform(1e-3, 2e-3, size=n)  # the machine's pace changes between rounds: both feel it
        fp32 = level * true_ratio * noise(rng, n)
        amp = level * noise(rng, n)
        e = speedup_estimate(fp32.tolist(), amp.tolist())
        hits += e.low <= true_ratio <= e.high
    return hits / trials


def _lognormal_with_stalls(rng, n):
    # Timing noise: a few percent, plus now and then a sample 2-4x slow (another program took the core).
    x = rng.lognormal(0.0, 0.05, size=n)
    stalls = rng.random(n) < 0.1
    return np.where(stalls, x * rng.uniform(2, 4, size=n), x)


@pytest.mark.parametrize("true_ratio, n", [(1.32, 15), (0.35, 25), (1.0, 40)])
def test_coverage_on_synthetic_samples_with_a_known_true_ratio(true_ratio, n):
    from scipy.stats import binom

    rng = np.random.default_rng(12)
    trials = 1500
    # The two contestants' noise has the same distribution, so log(fp32/amp) is symmetric about
    # log(true_ratio): the true median ratio is true_ratio.
    covered = _coverage(rng, true_ratio, n, trials, _lognormal_with_stalls)
    k = intervals._order_statistic(n, 0.95)
    nominal = 1 - 2 * binom.cdf(k - 1, n, 0.5)  # what the order statistics guarantee, >= 95%
    se = math.sqrt(nominal * (1 - nominal) / trials)
    assert nominal >= 0.95
    assert abs(covered - nominal) < 4 * se, (covered, nominal)


def test_coverage_holds_for_skewed_noise_where_a_t_interval_would_not_be_justified():
    from scipy.stats import binom

    rng = np.random.default_rng(3)
    true_ratio, n, trials = 2.0, 20, 1500
    hits = 0
    for _ in range(trials):
        # log ratio = log(2) + (exponential noise shifted to median 0): strongly skewed
        log_r = math.log(true_ratio) + rng.exponential(0.2, size=n) - 0.2 * math.log(2)
        amp = rng.uniform(1e-3, 2e-3, size=n)
        e = speedup_estimate((amp * np.exp(log_r)).tolist(), amp.tolist())
        hits += e.low <= true_ratio <= e.high
    k = intervals._order_statistic(n, 0.95)
    nominal = 1 - 2 * binom.cdf(k - 1, n, 0.5)
    assert abs(hits / trials - nominal) < 4 * math.sqrt(nominal * (1 - nominal) / trials)


def test_more_pairs_give_a_narrower_interval():
    rng = np.random.default_rng(5)
    widths = []
    for n in (10, 40, 160):
        amp = rng.uniform(1e-3, 2e-3, size=n)
        fp32 = amp * 1.5 * rng.lognormal(0, 0.05, size=n)
        widths.append(speedup_estimate(fp32.tolist(), amp.tolist()).rel_width)
    assert widths[0] > widths[1] > widths[2]


def test_timings_arrays_and_tensors_are_accepted_as_well_as_sequences():
    b = intervals.Timing("fp32", (2.0, 2.2, 1.8, 2.0, 2.1, 1.9), 1, 0)
    want = speedup_estimate(list(b.samples), [1.0] * 6)
    assert speedup_estimate(b, [1.0] * 6) == want
    assert speedup_estimate(np.array(b.samples), torch.ones(6, dtype=torch.float64)) == want
    with pytest.raises(ValueError, match=r"baseline\[0\]"):
        speedup_estimate(np.ones((6, 2)), [1.0] * 6)  # rows are not seconds


@pytest.mark.parametrize(
    "baseline, contender, confidence, name",
    [
        ([1.0, 2.0], [1.0], 0.95, "contender"),  # unequal lengths: rounds cannot be paired
        ([], [], 0.95, "baseline"),
        ([1.0, -2.0], [1.0, 1.0], 0.95, r"baseline\[1\]"),
        ([1.0, 2.0], [1.0, 0.0], 0.95, r"contender\[1\]"),
        ([1.0, float("nan")], [1.0, 1.0], 0.95, r"baseline\[1\]"),
        ([1.0, True], [1.0, 1.0], 0.95, r"baseline\[1\]"),
        ("1.0", [1.0], 0.95, "baseline"),
        ([1.0], 1.0, 0.95, "contender"),
        ([1.0], [1.0], 1.0, "confidence"),
        ([1.0], [1.0], 0.0, "confidence"),
        ([1.0], [1.0], "95%", "confidence"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(baseline, contender, confidence, name):
    with pytest.raises(ValueError, match=name):
        speedup_estimate(baseline, contender, confidence=confidence)


def test_min_pairs_matches_the_binomial_tails():
    for confidence in (0.8, 0.9, 0.95, 0.99, 0.999):
        n = intervals.min_pairs(confidence)
        assert 1 - 2 * 0.5**n >= confidence > 1 - 2 * 0.5 ** (n - 1)
    with pytest.raises(ValueError, match="confidence"):
        intervals.min_pairs(1.5)


# ------------------------------------------------------------------------------------------
# Statistics, context, formatting
# ------------------------------------------------------------------------------------------


@settings(max_examples=60)
@given(st.lists(st.floats(min_value=1e-7, max_value=10.0, allow_nan=False), min_size=1, max_size=40))
def test_median_and_iqr_match_numpy_and_torch_benchmark(samples):
    t = intervals.Timing("x", tuple(samples), number=3, warmup=0, context={"threads": 1})
    q1, med, q3 = np.percentile(samples, [25, 50, 75])
    assert t.median == pytest.approx(med, rel=1e-12)
    assert t.iqr == pytest.approx(q3 - q1, rel=1e-9, abs=1e-15)
    m = t.to_measurement()
    assert m.median == pytest.approx(t.median, rel=1e-9)
    assert m.iqr == pytest.approx(t.iqr, rel=1e-6, abs=1e-12)
    assert m.number_per_run == 3 and m.num_threads == 1


def test_context_records_threads_tf32_cpu_flags_and_versions_and_threads_are_restored():
    from amp_lab.cpus import cpu_flags

    seen = []
    before = torch.get_num_threads()
    t = timing.measure(lambda: seen.append(torch.get_num_threads()), num_threads=1, warmup=1, repeats=2, number=1)
    assert set(seen) == {1} and t.context["threads"] == 1
    assert torch.get_num_threads() == before
    ctx = t.context
    assert ctx["device"] == "cpu" and ctx["torch"] == torch.__version__ and ctx["cuda"] == torch.version.cuda
    assert ctx["tf32_matmul"] is None  # TF32 is a CUDA setting
    assert "synchronise" in ctx["sync"]
    assert ctx["cpu_count"] >= 1
    assert ctx["cpu_flags"] == cpu_flags()
    assert "capability" not in ctx  # a CUDA fact


def test_describe_context_names_the_machine_from_the_recorded_facts():
    ctx = {"device": "cpu", "device_name": "Test CPU", "threads": 1, "cpu_capability": "AVX512",
           "cpu_flags": {"avx512_bf16": True, "amx_bf16": False, "avx512_fp16": False}, "torch": "9.9",
           "load_avg_1min": 0.5, "cpu_count": 8}  # fmt: skip
    text = timing.describe_context(ctx)
    assert text.startswith("measured on cpu (Test CPU), 1 CPU thread, torch CPU kernels AVX512")
    assert "CPU bfloat16 arithmetic native" in text and "CPU float16 arithmetic emulated" in text
    assert "torch 9.9" in text and "load average 0.5 on 8 cores" in text
    gpu = dict(ctx, device="cuda:0", device_name="NVIDIA H100", capability=(9, 0), tf32_matmul=False)
    assert "compute capability 9.0, TF32 for FP32 matmuls off" in timing.describe_context(gpu)
    real = timing.describe_context(timing.timing_context("cpu"))
    assert real.startswith("measured on cpu (") and torch.__version__ in real


def test_tf32_switch_sets_torch_flag_and_restores_it_without_breaking_the_legacy_api():
    matmul = torch.backends.cuda.matmul
    old = matmul.fp32_precision
    try:
        with hardware.tf32_matmul(True):
            assert matmul.fp32_precision == "tf32" and hardware.tf32_matmul_enabled()
        with hardware.tf32_matmul(False):
            assert matmul.fp32_precision == "ieee" and not hardware.tf32_matmul_enabled()
        assert matmul.fp32_precision == old
        # a learner who used the legacy API before a race can still read it afterwards
        torch.set_float32_matmul_precision("high")
        with hardware.tf32_matmul(False):
            pass
        assert torch.get_float32_matmul_precision() == "high"
        assert hardware.tf32_matmul_enabled()
    finally:
        torch.set_float32_matmul_precision("highest")


def test_format_helpers():
    assert text.format_seconds(0.00123) == "1.23 ms"
    assert text.format_seconds(2.5) == "2.5 s"
    assert text.format_seconds(4.2e-6) == "4.2 µs"
    assert text.format_bytes(3 * 2**20) == "3.00 MiB"
    assert text.format_bytes(None) == "n/a"
    assert text.format_ratio(1.3217) == "1.32x"
    assert text.format_ratio(0.01234) == "0.0123x" and text.format_ratio(0.35) == "0.35x"
    assert text.format_ratio(float("inf")) == "infx"


@pytest.mark.parametrize(
    "queued, finished, outcome",
    [(0.010, 0.0101, "agree"), (0.010, 0.030, "disturbed")],
)
def test_sync_summary_reads_the_two_clock_readings(queued, finished, outcome):
    reading = timing.sync_summary(queued, finished, "cpu")
    assert reading.outcome == outcome and reading.reasons == (f"timing.sync_{outcome}",)
    assert reading.facts["ratio"] == pytest.approx(finished / queued)


def test_sync_summary_on_a_gpu_and_bad_input(monkeypatch):
    monkeypatch.setattr(timing, "get_device", lambda device=None: torch.device("cuda"))
    queued = timing.sync_summary(0.001, 0.05, "cuda")
    assert queued.outcome == "queued_only" and queued.facts["ratio"] == pytest.approx(50)
    assert "finishing took 50.0x as long" in str(queued)  # the one sentence check: the number reaches it
    assert timing.sync_summary(0.01, 0.011, "cuda").outcome == "close"
    with pytest.raises(ValueError, match="finished_s"):
        timing.sync_summary(0.02, 0.01)
    with pytest.raises(ValueError, match="queued_s"):
        timing.sync_summary(0.0, 0.01)


# ----------------------------------------------------------------------------------------------
# Issue 14: every bad input gets a clear error before any work starts; nothing runs unbounded
# ----------------------------------------------------------------------------------------------


def _must_not_run():
    raise AssertionError("the timed function ran although the arguments were refused")


@pytest.mark.parametrize(
    "fns, kwargs, exc, match",
    [
        (_must_not_run, {"repeats": 10**12}, ValueError, "repeats must be <= 10000"),
        (_must_not_run, {"min_sample_s": 1e6}, ValueError, "min_sample_s must be <= 10"),
        (_must_not_run, {"warmup": 10**9}, ValueError, "warmup must be <= 10000"),
        (_must_not_run, {"number": 10**9}, ValueError, "number must be <= 1000000"),
        (_must_not_run, {"num_threads": 10**6}, ValueError, "num_threads must be <= 1024"),
        (_must_not_run, {"repeats": 9000, "min_sample_s": 1.0}, ValueError, "more than the course's limit"),
        (_must_not_run, {"callback": "print"}, TypeError, "callback must be a function"),
        (_must_not_run, {"extra_context": ["race"]}, TypeError, "extra_context must be a dict"),
        (_must_not_run, {"repeats": True}, TypeError, "repeats must be an integer"),
        ({"a": _must_not_run, "b": _must_not_run}, {"target_rel_width": 0.1, "max_time_s": 1e9}, ValueError,
         "max_time_s must be <= 3600"),
        ({"a": _must_not_run, "b": _must_not_run}, {"target_rel_width": 0.1, "max_repeats": 10**9}, ValueError,
         "max_repeats must be <= 10000"),
        ({"a": _must_not_run, "b": _must_not_run}, {"baseline": ["a"]}, ValueError, "baseline"),
        ({1: _must_not_run, "1": _must_not_run}, {}, ValueError, "distinct"),
        ([_must_not_run], {}, TypeError, "fns must be a callable"),
    ],
)  # fmt: skip
def test_measure_refuses_bad_or_unbounded_arguments_before_calling_anything(fns, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        timing.measure(fns, device="cpu", **kwargs)


def test_measure_accepts_numpy_scalars(fake):
    _, clock = fake
    t = timing.measure(_contestants(clock, [2.0]), device="cpu", warmup=np.int64(0), repeats=np.int64(3),
                       number=np.int64(1), min_sample_s=np.float64(0.01))  # fmt: skip
    assert len(t["fp32"].samples) == 3 and t["fp32"].number == 1
    with pytest.raises(ValueError, match="repeats must be <= 10000"):  # NumPy integers are bounded too
        timing.measure(_must_not_run, device="cpu", repeats=np.int64(10**12))


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: text.format_seconds("1"), TypeError, "seconds must be a number"),
        (lambda: text.format_seconds(None), TypeError, "seconds must be a number"),
        (lambda: text.format_bytes("1024"), TypeError, "nbytes must be a number"),
        (lambda: text.format_ratio("2"), TypeError, "x must be a number"),
        (lambda: text.format_ratio(1.5, digits=-1), ValueError, "digits must be >= 0"),
        (lambda: text.format_ratio(1.5, digits=1.5), TypeError, "digits must be an integer"),
        (lambda: timing.describe_context(None), TypeError, "context must be a timing context dict"),
    ],
)
def test_timing_helpers_name_the_bad_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_format_bytes_prints_nan_and_inf_and_refuses_huge_ints():
    assert text.format_bytes(float("nan")) == "nan"  # int(nan) used to raise from inside the formatter
    assert text.format_bytes(float("inf")) == "inf"
    with pytest.raises(ValueError, match=r"^nbytes must be within float64's range"):
        text.format_bytes(10**400)
    assert text.format_seconds(np.float32(0.5)) == "500 ms"


# ------------------------------------------------------------------------------------------
# Issue 14: what the fuzz suite found, each refused by amp_lab with the argument named
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("formatter", "name"),
    [(text.format_seconds, "seconds"), (text.format_bytes, "nbytes"), (text.format_ratio, "x")],
)
@pytest.mark.parametrize("huge", [2**2000, -(2**2000), 10**400])
def test_formatters_refuse_integers_beyond_float64_with_a_value_error(formatter, name, huge):
    with pytest.raises(ValueError, match=rf"^{name} must be within float64's range"):
        formatter(huge)


@pytest.mark.parametrize(
    ("formatter", "value", "expected"),
    [(text.format_seconds, float("inf"), "inf"), (text.format_seconds, float("nan"), "nan"),
     (text.format_bytes, float("-inf"), "-inf"), (text.format_ratio, float("inf"), "infx"),
     (text.format_seconds, 2, "2 s"), (text.format_bytes, 2**40, "1.00 TiB"),
     (text.format_ratio, 3, "3.00x"), (text.format_ratio, np.float32(0.01234), "0.0123x")],
)  # fmt: skip
def test_formatters_print_inf_nan_and_plain_numbers_explicitly(formatter, value, expected):
    assert formatter(value) == expected


@pytest.mark.parametrize("target", [1e-50, 1e-9, 9.99e-4])
def test_measure_refuses_a_target_interval_too_narrow_to_reach(target):
    def never():
        raise AssertionError("measure ran a contestant for a target it can never reach")

    with pytest.raises(ValueError, match=r"^target_rel_width=.* is narrower than a timer can resolve"):
        timing.measure({"a": never, "b": never}, target_rel_width=target)
    assert timing.check_budget(0, 1, 0.01, target_rel_width=timing.MIN_TARGET_REL_WIDTH)["target_rel_width"] == 1e-3


# --------------------------------------------------------------------------------------------
# The notebook's timer cell and measure agree (on one fake clock)
# --------------------------------------------------------------------------------------------


def _timer_cell() -> str:
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "06_timing_race.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    (cell,) = [c for c in cells if "def honest_race(" in c]
    return cell


def test_the_notebook_timer_cell_is_short():
    assert len(_timer_cell().splitlines()) <= 40


class _FakeClock:
    """Time moves only when a contestant runs: call k of contestant c takes ``c.ticks(k)``."""

    def __init__(self):
        self.now = 0.0

    def contestant(self, durations):
        calls = iter(range(10**6))
        return lambda: setattr(self, "now", self.now + durations[next(calls) % len(durations)])

    def __call__(self):
        return self.now


def test_the_notebook_timer_cell_and_measure_take_the_same_samples(monkeypatch):
    namespace = {"device": "cpu"}
    exec(_timer_cell(), namespace)  # the learner's cell, as the notebook runs it
    results = []
    for use_cell in (True, False):
        clock = _FakeClock()
        # different per-call times that depend on the call's index: the order of every call matters
        fns = {"fp32": clock.contestant([3.0, 5.0, 4.0]), "amp": clock.contestant([2.0, 1.0])}
        if use_cell:
            samples, ratio = namespace["honest_race"](fns, warmup=2, rounds=7, number=3, clock=clock)
        else:
            monkeypatch.setattr(timing, "_clock", clock)
            t = timing.measure(fns, device="cpu", warmup=2, repeats=7, number=3)
            samples = {k: list(v.samples) for k, v in t.items()}
            ratio = speedup_estimate(t["fp32"], t["amp"]).ratio
        results.append((samples, ratio))
    (cell_samples, cell_ratio), (measure_samples, measure_ratio) = results
    assert cell_samples == measure_samples and len(cell_samples["fp32"]) == 7
    assert cell_ratio == measure_ratio
    # a hand-computed round: after 2 warm-up calls each, round 0 runs fp32 calls 2-4 (4+3+5) then amp's 2-4 (2+1+2)
    assert cell_samples["fp32"][0] == 4.0 and cell_samples["amp"][0] == 5.0 / 3


def test_calibrated_seconds_max_power_caps_the_extrapolation():
    """A call whose time grows as m**2 is extrapolated as m**2 by default (up to power + 1) and linearly with
    max_power=1: what compare's matmul calibration asks for, so one slow sample cannot read as growth."""

    def make(m):
        return lambda: time.sleep(1e-6 * m * m)

    capped = timing.calibrated_seconds(make, 1024, "cpu", power=1, start=8, max_power=1)
    free = timing.calibrated_seconds(make, 1024, "cpu", power=1, start=8)
    assert free > 3 * capped > 0
