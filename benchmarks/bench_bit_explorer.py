"""Latency of the widgets of notebooks 01 and 02 (target: a callback under 100 ms).

Drives the widgets exactly as a learner does (setting ``.value``) and prints the median callback
time and its ratio to the target.  Usage: ``python benchmarks/bench_bit_explorer.py``.
"""

from __future__ import annotations

import statistics
import time

from amp_lab import accumulation, format_explorer

TARGET_MS = 100.0


def median_ms(fn, values) -> float:
    samples = []
    for v in values:
        t0 = time.perf_counter()
        fn(v)
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def main() -> None:
    explorer = format_explorer.bit_explorer(0.1)
    typed = ["0.1", "65520", "1e-8", "3e38", "-2.5", "448", "nan", "inf", "2049", "1e-40"] * 5

    def type_value(text):
        explorer.value_input.value = text

    def slide(v):
        explorer.slider.value = v

    ms = median_ms(type_value, typed)
    print(
        f"bit explorer, typed value: median {ms:.2f} ms per update ({ms / TARGET_MS:.3f}x the {TARGET_MS:.0f} ms target)"
    )
    ms = median_ms(slide, [10.0 ** (e / 3) for e in range(-60, 60, 3)])
    print(
        f"bit explorer, slider:      median {ms:.2f} ms per update ({ms / TARGET_MS:.3f}x the {TARGET_MS:.0f} ms target)"
    )

    acc = accumulation.accumulation_explorer(k=16, k_max=4096)

    def set_k(k):
        acc.slider.value = k

    ms = median_ms(set_k, [2**i + j for i in range(1, 12) for j in (0, 1)])
    print(
        f"accumulation explorer, K:  median {ms:.2f} ms per update ({ms / TARGET_MS:.3f}x the {TARGET_MS:.0f} ms target)"
    )


if __name__ == "__main__":
    main()
