"""Autocast's op lists side by side, and the readouts of ``05_autocast_op_lists``.

The documented lists and the registered rules are :mod:`amp_lab.autocast_lists`; the dispatcher probe is
:mod:`amp_lab.autocast_probe`.  This room sets them beside each other: :func:`compare` (a probe against the
docs), :func:`rule_comparison` and :func:`rule_groups` (docs, the rules torch registers for CPU *and* CUDA,
and a probe), :func:`format_groups` (the probe, one paragraph per policy), and the notebook's readouts,
which return a :class:`~amp_lab.text.Reading` (codes and numbers; :data:`amp_lab.text.REASONS` words them).
The names the notebooks call are importable from here, as ``amp_lab.autocast_ops``.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ._checks import bounded_list, check_choice, check_float, check_instance, check_int
from .autocast_lists import (
    AUTOCAST_KEYS,
    DOC_ALIASES,
    DOCUMENTED,
    POLICIES,
    POLICY_MEANING,
    TORCH_POLICY,
    documented_policy,
    has_autocast_rule,
)
from .autocast_probe import (
    ATEN_OPS,
    FAMILIES,
    MAX_CLASSIFY_ELEMENTS,
    MAX_OP_NAMES,
    OpResult,
    ProbeTable,
    TraceCall,
    aten_op,
    autocast_dtype,
    classify,
    dispatch_trace,
    op_list,
    op_names,
    probe,
    probed_result,
    short,
)
from .text import Reading

__all__ = [
    "AUTOCAST_KEYS",
    "DOCUMENTED",
    "FAMILIES",
    "MAX_CLASSIFY_ELEMENTS",
    "MAX_OP_NAMES",
    "POLICIES",
    "POLICY_MEANING",
    "TORCH_POLICY",
    "VARIANCE_BANDS",
    "Comparison",
    "Difference",
    "OpResult",
    "ProbeTable",
    "RuleRow",
    "TraceCall",
    "aten_op",
    "autocast_dtype",
    "classify",
    "compare",
    "dispatch_trace",
    "documented_policy",
    "format_groups",
    "has_autocast_rule",
    "op_names",
    "probe",
    "read_call",
    "read_variance",
    "rule_comparison",
    "rule_groups",
]

_LISTED = ("lower", "fp32", "promote")


def _check_probe_table(value) -> ProbeTable:
    return check_instance("probed", value, ProbeTable, "the ProbeTable that probe() returns")


# ---------------------------------------------------------------------------------------
# A probe against the docs
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One op where the probe and the docs disagree; ``reading`` says how (codes and facts)."""

    op: str
    probed: str
    documented: str
    reading: Reading

    @property
    def note(self) -> str:
        return str(self.reading)


@dataclass(frozen=True)
class Comparison:
    """A probe set beside the documented lists of the same device type."""

    device_type: str
    probed_torch: str
    documented_torch: str
    agree: tuple[str, ...]
    differ: tuple[Difference, ...]
    not_probed: tuple[str, ...] = ()

    @property
    def reading(self) -> Reading:
        facts = dict(
            device=self.device_type,
            probed_torch=self.probed_torch,
            documented_torch=self.documented_torch,
            agree=len(self.agree),
            differ=len(self.differ),
        )
        return Reading("autocast.compared", (), facts)


def _difference(result: OpResult, documented: str) -> Difference:
    if result.policy == "n/a":
        return Difference(result.op, result.policy, documented, result.evidence)
    code = "autocast.differs"
    if documented == "unchanged" and result.policy == "lower":
        code = "autocast.undocumented_lower"
    elif documented == "unchanged" and result.policy in ("fp32", "promote"):
        code = "autocast.undocumented_fp32"
    elif result.policy == "unchanged":
        code = "autocast.documented_no_cast"
    facts = dict(result.evidence.facts, probed=result.policy, documented=documented)
    return Difference(result.op, result.policy, documented, Reading(code, (), facts))


def compare(probed: ProbeTable) -> Comparison:
    """Agreements and differences between a probe and the documented lists of its device type.

    An op on no documented list counts as documented ``"unchanged"`` (the docs: "ops not listed below do
    not go through autocasting").  ``not_probed`` names the documented ops the probe did not run.
    """
    _check_probe_table(probed)
    device = check_choice("probed.device_type", probed.device_type, AUTOCAST_KEYS)
    agree, differ = [], []
    for name, result in probed.items():
        doc = documented_policy(name, device)
        if doc == result.policy:
            agree.append(name)
        else:
            differ.append(_difference(result, doc))
    lists = DOCUMENTED[device]
    listed = (DOC_ALIASES.get(n, n) for p in (*_LISTED, "refused") for n in lists[p])
    not_probed = tuple(dict.fromkeys(n for n in listed if n not in probed))
    return Comparison(
        device, probed.torch_version, DOCUMENTED["torch_version"], tuple(agree), tuple(differ), not_probed
    )


# ---------------------------------------------------------------------------------------
# Docs, registered rules of both devices, and a probe
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleRow:
    """One op in three sources: ``documented`` policy per device (``{"cpu": ..., "cuda": ...}``, under the
    op's name or its aten name), ``rule`` registered per device (``{"cpu": bool, "cuda": bool}``, live from
    the dispatcher), and the ``probed`` policy on ``probed_device`` (None without a probe)."""

    op: str
    aten: str
    documented: dict
    rule: dict
    probed: str | None = None
    probed_device: str | None = None


def _documented_either(name: str, aten: str, device_type: str) -> str:
    """The docs' policy for ``name``, or for its aten op where the docs list that spelling instead (the CPU
    list names ``matmul``, which ``a @ b`` calls, not ``__matmul__``)."""
    policy = documented_policy(name, device_type)
    base = aten.partition(".")[0]
    return documented_policy(base, device_type) if policy == "unchanged" and base != name else policy


def rule_comparison(probed: ProbeTable | None = None, *, ops: Iterable[str] | None = None) -> list[RuleRow]:
    """The docs, torch's registered rules on both devices, and a probe, one :class:`RuleRow` per op.

    ``ops`` are catalogue names (default: the probe's ops, or the whole catalogue); ``probed`` is a
    :class:`ProbeTable` from :func:`probe` (optional).  The registered rules come from the dispatcher for
    CPU *and* CUDA, so the CUDA column is live even without a GPU.
    """
    if probed is not None:
        _check_probe_table(probed)
    if ops is None:
        names = list(probed) if probed is not None else op_names()
    else:
        names = op_list("ops", ops)
        known = op_names()
        for i, name in enumerate(names):
            check_choice(f"ops[{i}]", name, known)
            if probed is not None:
                probed_result(probed, name, f"ops[{i}]")
    rows = []
    for name in names:
        aten = ATEN_OPS.get(name, name)
        rows.append(
            RuleRow(
                name,
                aten,
                {d: _documented_either(name, aten, d) for d in AUTOCAST_KEYS},
                {d: has_autocast_rule(aten, d) for d in AUTOCAST_KEYS},
                probed[name].policy if probed is not None and name in probed else None,
                probed.device_type if probed is not None else None,
            )
        )
    return rows


def rule_groups(rows: Iterable[RuleRow]) -> list[Reading]:
    """What the rows say, one :class:`~amp_lab.text.Reading` per non-empty group (its ``ops`` fact).

    Where the registered rules of the two devices differ, where a device's registrations and its documented
    list disagree, and (with a probe) which ops the probe saw lowered or forced to float32 without a rule of
    their own on the probed device: ops that decompose into ops that have one.
    """
    rows = bounded_list("rows", rows, MAX_OP_NAMES, "the list rule_comparison() returns")
    for i, r in enumerate(rows):
        check_instance(f"rows[{i}]", r, RuleRow, "a RuleRow (rule_comparison() builds them)")
    groups: dict[tuple[str, str], list[str]] = {
        ("autocast.rule_cuda_only", ""): [r.op for r in rows if r.rule["cuda"] and not r.rule["cpu"]],
        ("autocast.rule_cpu_only", ""): [r.op for r in rows if r.rule["cpu"] and not r.rule["cuda"]],
    }
    for d in AUTOCAST_KEYS:
        groups["autocast.rule_undocumented", d] = [
            r.op for r in rows if r.rule[d] and r.documented[d] == "unchanged"
        ]
        groups["autocast.documented_no_rule", d] = [
            r.op for r in rows if not r.rule[d] and r.documented[d] in _LISTED
        ]
    for r in rows:
        if r.probed_device in AUTOCAST_KEYS and r.probed in _LISTED and not r.rule[r.probed_device]:
            groups.setdefault((f"autocast.probed_{r.probed}_no_rule", r.probed_device), []).append(r.op)
    return [
        Reading(
            code, (), {"device": device.upper(), "n": len(ops), "ops": ", ".join(ops), "op_list": tuple(ops)}
        )
        for (code, device), ops in groups.items()
        if ops
    ]


# ---------------------------------------------------------------------------------------
# The probe as text
# ---------------------------------------------------------------------------------------


def format_groups(probed: ProbeTable, *, width: int = 100) -> str:
    """The probe as one paragraph per policy: ``policy (n) - meaning:`` and its ops."""
    _check_probe_table(probed)
    width = check_int("width", width, minimum=20, maximum=10_000)
    out = []
    for policy, names in probed.by_policy().items():
        if names:
            body = textwrap.fill(
                ", ".join(names), width=width, initial_indent="    ", subsequent_indent="    "
            )
            out.append(f"{policy} ({len(names)}) - {POLICY_MEANING[policy]}:\n{body}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# The notebook's reveals
# ---------------------------------------------------------------------------------------

_FLOATS = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def _float_dtype(name: str, value) -> torch.dtype:
    check_instance(name, value, torch.dtype, "a torch dtype such as torch.float32")
    return check_choice(name, value, _FLOATS)


def read_call(op: str, device_type: str, in_dtype, out_dtype, plain_dtype=None) -> Reading:
    """What autocast did to one call of the aten op ``op`` on ``device_type`` (``"cpu"``, ``"cuda"``): it
    got ``in_dtype`` inputs and returned ``out_dtype`` (``plain_dtype``: the same call without autocast).

    The outcome says whether autocast cast down, cast up or left the dtype; the reasons say whether each
    device registers a rule for the op (:func:`has_autocast_rule`).
    """
    rules = {d: has_autocast_rule(op, d) for d in AUTOCAST_KEYS}  # validates op
    check_choice("device_type", device_type, AUTOCAST_KEYS)
    din, dout = _float_dtype("in_dtype", in_dtype), _float_dtype("out_dtype", out_dtype)
    dplain = None if plain_dtype is None else _float_dtype("plain_dtype", plain_dtype)
    wide = {d: torch.finfo(d).bits + (d == torch.float16) for d in _FLOATS}  # float16 above bfloat16
    outcome = (
        "autocast.call_kept"
        if din == dout
        else "autocast.call_lowered"
        if wide[dout] < wide[din]
        else "autocast.call_upcast"
    )
    reasons = ["autocast.rule_here" if rules[device_type] else "autocast.no_rule_here"]
    if rules["cpu"] != rules["cuda"]:
        reasons.append("autocast.rule_decides")
    if dplain is not None:
        reasons.append("autocast.plain_gives")
    facts = dict(
        op=op.removeprefix("aten::"),
        device=device_type.upper(),
        rule=rules[device_type],
        rule_cpu="yes" if rules["cpu"] else "no",
        rule_cuda="yes" if rules["cuda"] else "no",
        in_dtype=short(din),
        dtype=short(dout),
        plain=short(dplain),
    )
    return Reading(outcome, tuple(reasons), facts)


# The choices of 05's variance prediction, from the closest to the farthest.
VARIANCE_BANDS = ("within 1% of it", "off by 1% to 50%", "off by more than half of it")


def read_variance(
    truth: float, autocast_value: float, protected_value: float, mean_square: float, dtype
) -> Reading:
    """How the variance by moments fared: ``autocast_value`` computed inside autocast in ``dtype``,
    ``protected_value`` in float32 with autocast switched off, against the float64 ``truth``; ``mean_square``
    is E[x^2], where the low dtype's spacing decides what survives the subtraction.

    ``facts["band"]`` is the one of :data:`VARIANCE_BANDS` the autocast value falls in.
    """
    truth = check_float("truth", truth, gt=0)
    autocast_value = check_float("autocast_value", autocast_value)
    protected_value = check_float("protected_value", protected_value)
    mean_square = check_float("mean_square", mean_square, gt=0, le=torch.finfo(torch.float64).max)
    dtype = _float_dtype("dtype", dtype)
    error = abs(autocast_value - truth)
    band = 0 if error < truth / 100 else 1 if error <= truth / 2 else 2
    spacing = torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(mean_square))  # the dtype's step there
    reasons = (
        "autocast.spacing_far" if spacing > 10 * truth else "autocast.spacing_comparable",
        "autocast.protected_ok" if abs(protected_value - truth) < 1e-3 else "autocast.protected_off",
    )
    outcome = ("autocast.variance_close", "autocast.variance_off", "autocast.variance_lost")[band]
    facts = dict(
        band=VARIANCE_BANDS[band],
        error=error,
        truth=truth,
        dtype=short(dtype),
        mean_square=mean_square,
        spacing=spacing,
    )
    return Reading(outcome, reasons, facts)
