"""The race widget (``06_timing_race``): width, batch and precision controls, a Race button, two lanes
that move as the samples come in, and a result card that reads the race."""

from __future__ import annotations

import html
import statistics
from collections.abc import Sequence

import torch

from . import race as _race
from ._checks import check_int, check_int_sequence
from .cost import IN_FEATURES, mlp_bytes, mlp_step_flops
from .device import check_fits, get_device
from .dtypes import dtype_name, parse_dtype
from .gpus import amp_dtype_for, bf16_hardware, tensor_core_generation
from .intervals import plural
from .race import RACE_TARGET_REL_WIDTH, RaceResult, contestant_names, unit_of
from .race_readout import explain, memory_summary
from .sweeps import sizes_for
from .text import format_bytes, format_ratio, format_seconds
from .timing import RaceProgress, check_budget, tf32_text


def _card(state: str, body: str) -> str:
    style = "border:1px solid #ccc;border-radius:6px;padding:8px 12px;max-width:760px"
    return f'<div class="amp-race-card" data-race-state="{state}" style="{style}">{body}</div>'


def precision_choices(device_type: str, capability=None) -> list[tuple[str, str]]:
    """The AMP dtype buttons, (label, dtype name): the course's first; bf16 "emulated" before Ampere."""
    first = dtype_name(amp_dtype_for(device_type, capability))
    emulated = device_type == "cuda" and capability is not None and not bf16_hardware(capability)
    labels = {"bfloat16": "bf16 (emulated)" if emulated else "bf16", "float16": "fp16"}
    return [(labels[d], d) for d in (first, *(d for d in ("bfloat16", "float16") if d != first))]


def precision_warning(device_type: str, capability, dtype) -> str | None:
    """A warning for racing bfloat16 on a CUDA GPU before Ampere (emulated: AMP cannot win), or None."""
    bf16 = parse_dtype(dtype) == torch.bfloat16
    if device_type != "cuda" or capability is None or not bf16 or bf16_hardware(capability):
        return None
    tc = tensor_core_generation(capability)
    return (
        f"{tc.architecture} (sm_{tc.capability[0]}{tc.capability[1]}) has no bf16 Tensor Cores: torch emulates "
        "bfloat16 here, so expect AMP in bf16 to lose. Race fp16 to see what these Tensor Cores do."
    )


class RaceWidget:
    """Width, batch and precision controls, a Race button (or :meth:`run`: ``race_mlp``), two lanes (how far
    each got while the faster did all its samples) and a result card; defaults from ``sweeps.sizes_for``."""

    def __init__(
        self,
        *,
        device=None,
        widths: Sequence[int] | None = None,
        batches: Sequence[int] | None = None,
        in_features: int = IN_FEATURES,
        warmup: int | None = None,
        repeats: int | None = None,
        min_sample_s: float | None = None,
        target_rel_width: float | None = RACE_TARGET_REL_WIDTH,
        max_time_s: float | None = None,
        num_threads: int | None = None,
    ):
        import ipywidgets as widgets

        sz = sizes_for(device)  # the defaults of this machine
        widths = check_int_sequence("widths", sz.widget_widths if widths is None else widths, minimum=1)
        batches = check_int_sequence("batches", sz.widget_batches if batches is None else batches, minimum=1)
        self.in_features = check_int("in_features", in_features, minimum=1)
        given = dict(warmup=warmup, repeats=repeats, min_sample_s=min_sample_s, max_time_s=max_time_s)
        given["num_threads"] = num_threads
        budget = {"num_threads": None, **sz.budget, **{k: v for k, v in given.items() if v is not None}}
        self.budget, self.repeats = {**budget, "target_rel_width": target_rel_width}, budget["repeats"]
        self.device = get_device(device)
        self._facts = _race.device_facts(self.device)
        n = len(contestant_names(*self._facts))
        check_budget(**self.budget, contestants=n)
        w, b = max(widths), max(batches)
        need = mlp_bytes(w, b, torch.float16, in_features=self.in_features, contestants=n)
        largest = f"RaceWidget's largest race (width={w}, batch={b})"
        check_fits(need, self.device, largest, "choose smaller widths or batches")

        self.width = widgets.Dropdown(options=widths, value=widths[0], description="width")
        self.batch = widgets.Dropdown(options=batches, value=batches[0], description="batch")
        choices = precision_choices(*self._facts)
        self.precision = widgets.ToggleButtons(options=choices, value=choices[0][1], description="AMP dtype")
        self.button = widgets.Button(description="Race", button_style="primary", icon="flag-checkered")
        self.button.add_class("amp-race-button")
        bar = dict(value=0, min=0, max=self.repeats, bar_style="info", layout=widgets.Layout(width="420px"))
        self.fp32_bar = widgets.FloatProgress(description="FP32", **bar)
        self.amp_bar = widgets.FloatProgress(description="AMP", **bar)
        self.fp32_time, self.amp_time, self.result = widgets.HTML(), widgets.HTML(), widgets.HTML()
        self.result.add_class("amp-race-result")
        self._lanes = {"fp32": (self.fp32_bar, self.fp32_time), "amp": (self.amp_bar, self.amp_time)}
        self.last: RaceResult | None = None
        self._ready()

        for control in (self.width, self.batch, self.precision):
            control.observe(self._on_settings, names="value")
        self.button.on_click(lambda _button: self.run())
        rows = [[self.width, self.batch], [self.precision, self.button]]
        rows += [list(lane) for lane in self._lanes.values()]
        self.widget = widgets.VBox([*map(widgets.HBox, rows), self.result])

    dtype = property(lambda self: parse_dtype(self.precision.value))

    def _ready(self) -> None:
        w, b = self.width.value, self.batch.value
        flops = mlp_step_flops(w, b, in_features=self.in_features)
        warning = precision_warning(*self._facts, self.precision.value)
        note = f"<br><b>Note:</b> {html.escape(warning)}" if warning else ""
        self.result.value = _card(
            "ready",
            f"Ready: width {w}, batch {b}, AMP in {self.precision.value} on {self.device}: "
            f"{flops / 1e6:,.1f} MFLOP of matmuls per training step. Press <b>Race</b>.{note}",
        )

    def _on_settings(self, _change) -> None:
        for bar in (self.fp32_bar, self.amp_bar):
            bar.value, bar.max, bar.bar_style = 0, self.repeats, "info"
        self.fp32_time.value = self.amp_time.value = ""
        self._ready()

    def _set_lanes(self, fp32: Sequence[float], amp: Sequence[float]) -> int:
        """Move both lanes for the rounds both contestants have finished; returns that number of rounds."""
        rounds = min(len(fp32), len(amp))
        if rounds == 0:
            return 0
        med = {"fp32": statistics.median(fp32[:rounds]), "amp": statistics.median(amp[:rounds])}
        fastest = min(med.values())
        for name, (bar, label) in self._lanes.items():
            bar.max = max(bar.max, rounds)  # sampling may go on past `repeats` rounds
            bar.value = rounds * fastest / med[name]
            label.value = f"{format_seconds(med[name])}/step"
        return rounds

    def _on_progress(self, event: RaceProgress) -> None:
        if event.phase == "warmup":
            self.result.value = _card("running", f"Warming up {html.escape(event.label)} ...")
            return
        if (rounds := self._set_lanes(event.samples["fp32"], event.samples["amp"])) == 0:
            self.result.value = _card("running", "Racing ...")
            return
        target, most = self.budget["target_rel_width"], self.budget["max_time_s"]
        more = f" of {event.total}"
        if target is not None:
            more = f" (at least {event.total}; then until the interval is within about "
            more += f"+-{50 * target:.0f}% or {most:g} s have passed)"
        self.result.value = _card("running", f"Racing ... round {rounds}{more}")

    def run(self) -> RaceResult | None:
        """Race with the current settings; updates the lanes and the result card."""
        self.button.disabled = True
        self._on_settings(None)
        self.result.value = _card("running", "Starting ...")
        try:
            kw = dict(in_features=self.in_features, device=self.device, dtype=self.dtype, **self.budget)
            result = _race.race_mlp(self.width.value, self.batch.value, callback=self._on_progress, **kw)
        except Exception as exc:  # shown in the card: a callback has nowhere else to report
            self.result.value = _card("error", f"<b>Could not race:</b> {html.escape(str(exc))}")
            return None
        finally:
            self.button.disabled = False
        self.last = result
        self._show(result)
        return result

    def _show(self, result: RaceResult) -> None:
        self._set_lanes(result.fp32.samples, result.amp.samples)
        styles = {"faster": ("warning", "success"), "slower": ("success", "warning")}
        self.fp32_bar.bar_style, self.amp_bar.bar_style = styles.get(result.outcome, ("info", "info"))
        self.result.value = _card("done", result_card_html(result))


def result_card_html(result: RaceResult) -> str:
    """The race widget's result card: the speedup, interval, outcome, ``explain``, timings and context."""
    e = html.escape
    est, unit, ctx = result.speedup_interval, unit_of(result.kind), result.context
    cell = "padding:1px 10px 1px 0;text-align:right"
    header = ["", f"median per {unit}", "spread (IQR)", "TFLOP/s"] + (["memory"] if result.memory else [])
    rows = ["<tr>" + "".join(f"<th style='{cell}'>{e(h)}</th>" for h in header) + "</tr>"]
    for name, t in result.timings.items():
        values = [name.upper(), format_seconds(t.median), format_seconds(t.iqr), f"{result.tflops[name]:.3g}"]
        values += [format_bytes(result.memory[name])] if result.memory else []
        rows.append("<tr>" + "".join(f"<td style='{cell}'>{e(v)}</td>" for v in values) + "</tr>")
    mem_note = f"<br>memory: {e(str(memory_summary(result)))}" if result.memory else ""
    return (
        f"<div style='font-size:1.3em'>speedup <b class='amp-race-speedup'>{format_ratio(est.ratio)}</b> "
        f"(<span class='amp-race-interval'>{e(est.interval_text())}</span>): "
        f"<b class='amp-race-outcome' data-outcome='{e(est.outcome)}'>{e(est.outcome)}</b></div>"
        f"<div>AMP {e(dtype_name(result.dtype))} vs FP32, {e(result.size)}</div>"
        f"<p>{e(str(explain(result)))}</p>"
        f"<table style='font-family:monospace;border-collapse:collapse'>{''.join(rows)}</table>"
        f"<small>{plural(est.pairs, 'interleaved round')} after "
        f"{plural(result.fp32.warmup, 'untimed warm-up ' + unit)}; {plural(ctx['threads'], 'thread')}; "
        f"TF32 for FP32: {tf32_text(ctx)}; timed with {e(ctx['sync'])}; torch {e(ctx['torch'])}{mem_note}</small>"
    )


def race_widget(**kwargs) -> RaceWidget:
    """Build the race widget (see :class:`RaceWidget`); the notebook cell ends with ``racer.widget``."""
    return RaceWidget(**kwargs)
