"""Tests for amp_lab.autocast_lists, autocast_probe and autocast_ops (notebook 05).

The oracle is autocast itself: each expected policy below is computed by running the op
under ``torch.autocast`` directly (dtypes, and for "promote" the autograd graph, which is
independent of the dispatcher trace the module uses), never read from a list.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_lab import autocast_lists as al
from amp_lab import autocast_ops as ao
from amp_lab.text import REASONS

LOW = torch.bfloat16  # CPU autocast's default dtype


@pytest.fixture(scope="module")
def cpu_probe():
    return ao.probe("cpu")


def _rand(*shape, dtype=torch.float32):
    gen = torch.Generator().manual_seed(sum(shape) + len(shape))
    return (0.1 + 0.8 * torch.rand(shape, generator=gen)).to(dtype)


def _out_dtype(fn, *args, dtype=LOW):
    with torch.autocast("cpu", dtype=dtype):
        out = fn(*args)
    return out.dtype


def _truth_single(fn, shapes, dtype=LOW):
    """The policy by running autocast: float32 in -> low out means 'lower'; low in ->
    float32 out (while the same call without autocast stays low) means 'fp32'."""
    x32 = [_rand(*s) for s in shapes]
    if _out_dtype(fn, *x32, dtype=dtype) == dtype:
        return "lower"
    xlo = [t.to(dtype) for t in x32]
    if _out_dtype(fn, *xlo, dtype=dtype) == torch.float32 and fn(*xlo).dtype == dtype:
        return "fp32"
    return "unchanged"


def _grad_nodes(t):
    seen, stack = [], [t.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.append(node)
        stack.extend(f for f, _ in node.next_functions)
    return [type(n).__name__ for n in seen]


def _autocast_cast_count(fn, shapes):
    """Casts autocast adds to the autograd graph for mixed (low, float32, ...) inputs."""

    def leaves():
        ts = [_rand(*s) for s in shapes]
        ts[0] = ts[0].to(LOW)
        return [t.requires_grad_() for t in ts]

    with torch.autocast("cpu", dtype=LOW):
        out = fn(*leaves())
    with_autocast = _grad_nodes(out).count("ToCopyBackward0")
    try:
        plain = _grad_nodes(fn(*leaves())).count("ToCopyBackward0")
    except RuntimeError:  # the kernel refuses mixed dtypes on its own
        plain = 0
    return out.dtype, with_autocast - plain


MATMULS = {
    "mm": (torch.mm, [(4, 4), (4, 4)]),
    "bmm": (torch.bmm, [(2, 4, 4), (2, 4, 4)]),
    "matmul": (torch.matmul, [(4, 4), (4, 4)]),
    "addmm": (torch.addmm, [(4, 4), (4, 4), (4, 4)]),
    "baddbmm": (torch.baddbmm, [(2, 4, 4), (2, 4, 4), (2, 4, 4)]),
    "linear": (F.linear, [(2, 4), (3, 4), (3,)]),
    "mv": (torch.mv, [(4, 4), (4,)]),
    "addmv": (torch.addmv, [(4,), (4, 4), (4,)]),
    "einsum": (lambda a, b: torch.einsum("ij,jk->ik", a, b), [(3, 4), (4, 2)]),
    "conv2d": (F.conv2d, [(1, 2, 5, 5), (3, 2, 3, 3)]),
}

SINGLE = {
    "softmax": (lambda x: torch.softmax(x, dim=-1), [(2, 4)]),
    "log_softmax": (lambda x: torch.log_softmax(x, dim=-1), [(2, 4)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), [(2, 4), (4,), (4,)]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), [(1, 4, 3), (4,), (4,)]),
    "sum": (torch.sum, [(2, 4)]),
    "mean": (torch.mean, [(2, 4)]),
    "prod": (torch.prod, [(2, 4)]),
    "cumsum": (lambda x: torch.cumsum(x, dim=-1), [(2, 4)]),
    "mse_loss": (F.mse_loss, [(2, 4), (2, 4)]),
    "l1_loss": (F.l1_loss, [(2, 4), (2, 4)]),
    "smooth_l1_loss": (F.smooth_l1_loss, [(2, 4), (2, 4)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, torch.tensor([0, 1, 2])), [(3, 4)]),
    "nll_loss": (lambda x: F.nll_loss(x, torch.tensor([0, 1, 2])), [(3, 4)]),
    "kl_div": (lambda x, y: F.kl_div(x, y, reduction="batchmean"), [(2, 4), (2, 4)]),
    "binary_cross_entropy": (F.binary_cross_entropy, [(2, 4), (2, 4)]),
    "binary_cross_entropy_with_logits": (F.binary_cross_entropy_with_logits, [(2, 4), (2, 4)]),
    "exp": (torch.exp, [(2, 4)]),
    "relu": (F.relu, [(2, 4)]),
}

MIXED = {
    "cat": (lambda a, b: torch.cat([a, b]), [(2, 3), (2, 3)]),
    "stack": (lambda a, b: torch.stack([a, b]), [(2, 3), (2, 3)]),
    "index_copy": (lambda x, s: x.index_copy(0, torch.tensor([0, 2]), s), [(4, 3), (2, 3)]),
    "add": (torch.add, [(2, 4), (2, 4)]),
    "addcmul": (torch.addcmul, [(2, 4), (2, 4), (2, 4)]),
    "atan2": (torch.atan2, [(2, 4), (2, 4)]),
}


# --- the probe against autocast itself ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(MATMULS))
def test_matmul_family_policy_matches_autocast(cpu_probe, name):
    fn, shapes = MATMULS[name]
    truth = _truth_single(fn, shapes)
    assert cpu_probe[name].policy == truth
    assert cpu_probe[name].dtype == _out_dtype(fn, *[_rand(*s) for s in shapes])


def test_matmul_truth_covers_both_outcomes():
    # the oracle must be able to disagree with "everything is lower"
    truths = {name: _truth_single(fn, shapes) for name, (fn, shapes) in MATMULS.items()}
    assert truths["mm"] == "lower"
    assert set(truths.values()) != {"lower"}


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_softmax_norm_reduction_loss_policy_matches_autocast(cpu_probe, name):
    fn, shapes = SINGLE[name]
    assert cpu_probe[name].policy == _truth_single(fn, shapes)
    low_out = _out_dtype(fn, *[_rand(*s, dtype=LOW) for s in shapes])
    assert cpu_probe[name].low_dtype == low_out


def test_single_truth_covers_fp32_and_unchanged():
    truths = {name: _truth_single(fn, shapes) for name, (fn, shapes) in SINGLE.items()}
    assert truths["mse_loss"] == "fp32"
    assert "unchanged" in truths.values()


@pytest.mark.parametrize("name", sorted(MIXED))
def test_promote_versus_ordinary_type_promotion(cpu_probe, name):
    fn, shapes = MIXED[name]
    out_dtype, extra_casts = _autocast_cast_count(fn, shapes)
    truth = "promote" if out_dtype == torch.float32 and extra_casts > 0 else "unchanged"
    assert cpu_probe[name].policy == truth
    assert cpu_probe[name].mixed_dtype == out_dtype


def test_promote_oracle_separates_cat_from_add():
    assert _autocast_cast_count(*MIXED["cat"])[1] > 0
    assert _autocast_cast_count(*MIXED["add"]) == (torch.float32, 0)


def test_float16_on_cpu_matches_autocast():
    table = ao.probe("cpu", torch.float16, ops=["mm", "softmax", "mse_loss"])
    assert table.dtype == torch.float16
    for name, (fn, shapes) in {**MATMULS, **SINGLE}.items():
        if name in table:
            assert table[name].policy == _truth_single(fn, shapes, dtype=torch.float16)
    assert table["mm"].dtype == torch.float16


def test_default_dtype_is_autocast_default():
    table = ao.probe("cpu", ops=["mm"])
    assert table.dtype == torch.get_autocast_dtype("cpu")
    assert table["mm"].dtype == table.dtype


def test_catalogue_is_wide_and_keyed_by_doc_names(cpu_probe):
    assert len(cpu_probe) >= 40
    for name in ["mm", "matmul", "linear", "conv2d", "softmax", "log_softmax", "layer_norm", "sum",
                 "mse_loss", "cross_entropy", "binary_cross_entropy_with_logits", "cat", "stack"]:  # fmt: skip
        assert name in cpu_probe
    assert {r.family for r in cpu_probe.values()} == set(al.FAMILIES)
    assert set(r.policy for r in cpu_probe.values()) <= set(al.POLICIES)
    for r in cpu_probe.values():
        assert set(r.evidence.codes) <= set(REASONS), r.op
        assert len(r.evidence.sentences()) == len(r.evidence.codes)  # every code's facts are there
        if r.policy != "n/a":
            assert r.dtype is not None


def test_lower_results_record_casts_and_kernels(cpu_probe):
    mm = cpu_probe["mm"]
    assert mm.casts == 2 and mm.kernels == ("mm",)
    assert cpu_probe["einsum"].policy == _truth_single(*MATMULS["einsum"])


@pytest.mark.parametrize(
    ("op", "codes", "casts"),
    [("mm", ("autocast.lowered",), 2), ("LSTMCell", ("autocast.lowered", "autocast.promoted_back"), 6),
     ("mse_loss", ("autocast.upcast", "autocast.plain_stays"), 2), ("softmax", ("autocast.input_dtype",), 0),
     ("cat", ("autocast.promote", "autocast.plain_no_cast"), 1),
     ("index_copy", ("autocast.promote", "autocast.plain_mixed_raises"), 1),
     ("add", ("autocast.kernel_promotion",), 0)],
)  # fmt: skip
def test_the_evidence_names_the_test_that_decided(cpu_probe, op, codes, casts):
    # hand-checked against torch 2.13's CPU autocast: LSTMCell casts its input, both hidden states... (6),
    # index_copy's kernel refuses mixed dtypes without autocast
    r = cpu_probe[op]
    assert (r.evidence.codes, r.casts) == (codes, casts)
    assert r.evidence.facts["low"] == "bfloat16" and r.evidence.facts["casts"] == casts


def test_na_ops_really_fail_in_low_precision(cpu_probe):
    for r in cpu_probe.values():
        if r.policy != "n/a":
            continue
        op = next(o for o in al.catalogue() if o.name == r.op)
        xlo = [_rand(*s, dtype=LOW) for s in op.shapes]
        with pytest.raises(Exception), torch.autocast("cpu", dtype=LOW):  # noqa: B017
            op.call(*xlo)


# --- unavailable ops and bad arguments -----------------------------------------------------


def _fake(name, call, shapes=((2, 4),)):
    return al.Op(name, "pointwise", shapes, call)


def _missing(x):
    return torch.no_such_op_in_this_version(x)


def _no_low_kernel(x):
    if x.dtype != torch.float32:
        raise NotImplementedError(f'"fake" not implemented for {x.dtype}')
    return x * 2


def _refused(x):
    if torch.is_autocast_enabled("cpu"):
        raise RuntimeError("fake op is unsafe to autocast")
    return x * 2


def test_unavailable_ops_come_back_na(monkeypatch):
    fakes = (_fake("missing", _missing), _fake("no_low", _no_low_kernel), _fake("refused", _refused))
    ops = al.catalogue() + fakes
    monkeypatch.setattr(al, "catalogue", lambda: ops)
    table = ao.probe("cpu", ops=["missing", "no_low", "refused", "mm"])
    assert [table[n].policy for n in ("missing", "no_low", "refused")] == ["n/a"] * 3
    assert table["missing"].evidence.outcome == "autocast.unavailable"
    assert table["no_low"].evidence.outcome == "autocast.low_inputs_fail"
    assert table["refused"].evidence.outcome == "autocast.refused"
    assert table["refused"].evidence.facts["error"] == "RuntimeError: fake op is unsafe to autocast"
    assert table["mm"].policy == "lower"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, "int8", torch.int32])
def test_bad_dtype_raises_value_error(dtype):
    with pytest.raises(ValueError, match="dtype"):
        ao.probe("cpu", dtype)


def test_bad_op_name_and_device_raise_value_error():
    with pytest.raises(ValueError, match="ops"):
        ao.probe("cpu", ops=["mm", "not_an_op"])
    with pytest.raises(ValueError, match="family"):
        al.op_names("nonsense")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="not available"):
            ao.probe("cuda")


# --- the documented lists and compare() --------------------------------------------------


def test_documented_policy_reads_the_lists():
    assert al.documented_policy("mm", "cuda") == "lower"
    assert al.documented_policy("softmax", "cuda") == "fp32"
    assert al.documented_policy("softmax", "cpu") == "unchanged"
    assert al.documented_policy("cross_entropy", "cpu") == "fp32"  # docs spell it cross_entropy_loss
    assert al.documented_policy("binary_cross_entropy", "cuda") == "n/a"


def test_compare_partitions_the_probe(cpu_probe):
    cmp = ao.compare(cpu_probe)
    assert set(cmp.agree) | {d.op for d in cmp.differ} == set(cpu_probe)
    assert not set(cmp.agree) & {d.op for d in cmp.differ}
    for name in cmp.agree:
        assert al.documented_policy(name, "cpu") == cpu_probe[name].policy
    for d in cmp.differ:
        assert d.probed == cpu_probe[d.op].policy != d.documented
    assert "mm" in cmp.agree
    assert cmp.documented_torch == al.DOCUMENTED["torch_version"]
    assert all(len(d.reading.sentences()) == 1 for d in cmp.differ)
    facts = cmp.reading.facts
    assert (facts["agree"], facts["differ"], facts["device"]) == (len(cmp.agree), len(cmp.differ), "cpu")


def test_compare_reports_a_planted_difference(cpu_probe, monkeypatch):
    monkeypatch.setitem(al.DOCUMENTED, "cpu", {"lower": ("softmax",), "fp32": (), "promote": ("mm",), "refused": ()})
    cmp = ao.compare(cpu_probe)
    diff = {d.op: d for d in cmp.differ}
    assert (diff["softmax"].documented, diff["softmax"].reading.outcome) == ("lower", "autocast.documented_no_cast")
    assert (diff["mm"].documented, diff["mm"].reading.outcome) == ("promote", "autocast.differs")
    assert (diff["linear"].documented, diff["linear"].reading.outcome) == ("unchanged", "autocast.undocumented_lower")
    assert diff["mse_loss"].reading.outcome == "autocast.undocumented_fp32"
    assert diff["linear"].reading.facts["kernels"] == "addmm"
    with pytest.raises(ValueError, match="probed"):
        ao.compare({"mm": None})


def test_groups_name_every_op(cpu_probe):
    groups = ao.format_groups(cpu_probe)
    for name in cpu_probe:
        assert name in groups


@settings(max_examples=8)
@given(
    st.lists(
        st.sampled_from(al.op_names("matmul") + al.op_names("loss")), min_size=1, max_size=3, unique=True
    )
)
def test_probe_of_a_subset_matches_the_full_probe(cpu_probe, names):
    sub = ao.probe("cpu", ops=names)
    assert list(sub) == [n for n in cpu_probe if n in names]
    for n in names:
        assert sub[n] == cpu_probe[n]


# --- the dispatcher trace ------------------------------------------------------------------


def test_dispatch_trace_shows_casts_at_op_boundary():
    a, b = _rand(4, 4), _rand(4, 4)
    out, calls = ao.dispatch_trace(torch.mm, a, b, device="cpu")
    assert out.dtype == LOW
    assert [(c.is_cast, c.name, c.inputs, c.to) for c in calls] == [
        (True, "_to_copy", (torch.float32,), LOW),
        (True, "_to_copy", (torch.float32,), LOW),
        (False, "mm", (LOW, LOW), None),
    ]
    out, calls = ao.dispatch_trace(torch.mm, a, b, device="cpu", enabled=False)
    assert out.dtype == torch.float32 and not any(c.is_cast for c in calls)


def test_weight_cast_cache():
    layer = torch.nn.Linear(4, 4)
    x = _rand(2, 4)

    def twice(x):
        return layer(layer(x).float())

    casts = {}
    for cache in (True, False):
        _, calls = ao.dispatch_trace(twice, x, device="cpu", cache_enabled=cache)
        casts[cache] = sum(c.is_cast and c.to == LOW for c in calls)
    # weight and bias are cast once with the cache; again for the second call without it
    assert casts[False] - casts[True] == 2


# --- classify() and records ------------------------------------------------------------------


def test_classify_any_function_matches_autocast():
    fn, shapes = MATMULS["mm"]
    assert ao.classify(fn, shapes, device="cpu").policy == _truth_single(fn, shapes)
    fn, shapes = SINGLE["mse_loss"]
    assert ao.classify(fn, shapes, device="cpu").policy == _truth_single(fn, shapes)
    result = ao.classify(F.pairwise_distance, [(3, 4), (3, 4)], name="pairwise_distance", device="cpu")
    out_dtype, extra = _autocast_cast_count(F.pairwise_distance, [(3, 4), (3, 4)])
    expected = _truth_single(F.pairwise_distance, [(3, 4), (3, 4)])
    if expected == "unchanged" and out_dtype == torch.float32 and extra > 0:
        expected = "promote"
    assert (result.op, result.policy) == ("pairwise_distance", expected)


@pytest.mark.parametrize("shapes", [[], [(0, 3)], [(2, -1)], [("a",)], None, [(2.5, 3)]])
def test_classify_rejects_bad_shapes(shapes):
    with pytest.raises(ValueError, match="shapes"):
        ao.classify(torch.exp, shapes)


# ----------------------------------------------------------------------------------------------
# Issue 14: every bad input gets a clear error naming it; no call allocates what cannot fit
# ----------------------------------------------------------------------------------------------

import numpy as np  # noqa: E402


@pytest.fixture(scope="module")
def small_table():
    return ao.probe("cpu", ops=["mm", "add"])


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda t: ao.compare("table"), TypeError, "probed must be the ProbeTable"),
        (lambda t: ao.format_groups("table"), TypeError, "probed must be the ProbeTable"),
        (lambda t: ao.format_groups(t, width=0), ValueError, "width must be >= 20"),
        (lambda t: al.documented_policy(5), TypeError, "op must be an op name"),
        (lambda t: ao.probe("cpu", ops="mm"), TypeError, "ops must be a list of op names"),
        (lambda t: ao.dispatch_trace(torch.mm, torch.ones(2, 2), torch.ones(2, 2), device="cpu", enabled="no"),
         TypeError, "enabled must be True or False"),
        (lambda t: ao.dispatch_trace("mm", device="cpu"), TypeError, "fn must be a function"),
        (lambda t: ao.classify("mm", [(3, 4)], device="cpu"), TypeError, "fn must be a function"),
        (lambda t: ao.classify(torch.relu, "34", device="cpu"), TypeError, "shapes must be a non-empty list"),
        (lambda t: ao.classify(torch.relu, [(3, 4.0)], device="cpu"), TypeError, r"shapes\[0\]\[1\] must be an integer"),
        (lambda t: ao.classify(torch.relu, [(3, 4)], name=5, device="cpu"), TypeError, "name must be a string"),
        (lambda t: al.documented_policy("mm", "mps"), ValueError, "device_type='mps' is not allowed"),
        (lambda t: ao.read_call("no_such_op", "cpu", torch.float32, LOW), ValueError, "op='no_such_op'"),
        (lambda t: ao.read_call("mm", "mps", torch.float32, LOW), ValueError, "device_type='mps'"),
        (lambda t: ao.read_call("mm", "cpu", "float32", LOW), TypeError, "in_dtype must be a torch dtype"),
        (lambda t: ao.read_call("mm", "cpu", torch.float32, torch.int8), ValueError, "out_dtype=torch.int8"),
        (lambda t: ao.read_variance(0.0, 1.0, 1.0, 1.0, LOW), ValueError, "truth must be > 0"),
        (lambda t: ao.read_variance(1.0, float("nan"), 1.0, 1.0, LOW), ValueError, "autocast_value must be finite"),
        (lambda t: ao.read_variance(1.0, 1.0, 1.0, 1.0, "bf16"), TypeError, "dtype must be a torch dtype"),
    ],
)  # fmt: skip
def test_autocast_ops_name_the_bad_argument(small_table, call, exc, match):
    with pytest.raises(exc, match=match):
        call(small_table)


def test_classify_refuses_huge_shapes_before_allocating(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("inputs were allocated")

    monkeypatch.setattr(ao, "_inputs", boom)
    with pytest.raises(ValueError, match="allows at most 1,048,576"):
        ao.classify(torch.mm, [(10**6, 10**6), (10**6, 10**6)], device="cpu")
    with pytest.raises(ValueError, match="refused before allocating"):  # under the element cap, over memory
        monkeypatch.setattr("amp_lab.device.available_bytes", lambda dev: 1000)
        ao.classify(torch.relu, [(100, 100)], device="cpu")


def test_classify_takes_numpy_integers_in_shapes():
    r = ao.classify(torch.mm, [(np.int64(3), np.int64(4)), (4, np.int32(2))], device="cpu")
    assert r.policy == "lower"


@pytest.mark.parametrize("ops", [range(10**12), range(10**20), ["mm"] * (al.MAX_OP_NAMES + 1), iter(["mm"] * 10**6)])
def test_op_lists_are_refused_by_their_length_before_they_are_read(ops):
    with pytest.raises(ValueError, match=r"^ops may hold at most 1,000 items"):
        ao.rule_comparison(ops=ops)
    if not hasattr(ops, "__next__"):  # an iterator is spent by the first call
        with pytest.raises(ValueError, match=r"^ops may hold at most 1,000 items"):
            ao.probe("cpu", ops=ops)


# ----------------------------------------------------------------------------------------------
# Issue 15: has_autocast_rule, the dispatcher's registered rules, and 05's three-way table
# ----------------------------------------------------------------------------------------------

import json  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

_KEYS = {"cpu": "AutocastCPU", "cuda": "AutocastCUDA"}


def _dump_rule(aten: str, device_type: str) -> bool:
    """The oracle, read from the dispatcher's own text dump: a line for the device's Autocast key
    that is not a fallthrough."""
    name = aten if aten.startswith("aten::") else f"aten::{aten}"
    lines = torch._C._dispatch_dump(name).splitlines()
    key = _KEYS[device_type]
    return any(line.startswith(f"{key}:") and "fallthrough" not in line for line in lines)


def _registrations(device_type: str) -> set[str]:
    """A second oracle: every op the Autocast key has a registration for."""
    return set(torch._C._dispatch_get_registrations_for_dispatch_key(_KEYS[device_type]))


# aten ops with and without rules, on one device or both (more than 30 on each device)
DISPATCHER_OPS = [
    "mm", "bmm", "addmm", "matmul", "linear", "einsum", "tensordot", "linalg_vecdot", "linalg_multi_dot",
    "scaled_dot_product_attention", "conv2d", "conv_transpose2d.input", "lstm_cell", "gru_cell", "prelu",
    "softmax.int", "log_softmax.int", "layer_norm", "group_norm", "rms_norm", "batch_norm", "sum",
    "sum.dim_IntList", "prod", "cumsum", "mean", "exp", "log", "sqrt", "pow.Tensor_Scalar",
    "linalg_vector_norm", "mse_loss", "nll_loss", "cross_entropy_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "cat", "stack", "index_copy", "index_put", "add.Tensor",
    "mul.Tensor", "addcmul", "atan2", "cross", "grid_sampler", "relu", "gelu", "sigmoid", "tanh",
    "max_pool2d", "avg_pool3d", "fft_rfft", "trace",
]  # fmt: skip


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
@pytest.mark.parametrize("op", DISPATCHER_OPS)
def test_has_autocast_rule_matches_the_dispatcher(op, device_type):
    expected = _dump_rule(op, device_type)
    assert al.has_autocast_rule(op, device_type) is expected
    assert (f"aten::{op}" in _registrations(device_type)) is expected
    assert al.has_autocast_rule(f"aten::{op}", device_type) is expected


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_the_dispatcher_oracle_sees_both_answers(device_type):
    answers = [_dump_rule(op, device_type) for op in DISPATCHER_OPS]
    assert sum(answers) >= 10 and answers.count(False) >= 10


@pytest.mark.parametrize(
    ("op", "cpu", "cuda"),
    [("einsum", False, True), ("softmax.int", False, True), ("sum", False, True), ("exp", False, True),
     ("layer_norm", False, True), ("cat", True, False), ("mm", True, True), ("add.Tensor", False, False),
     ("relu", False, False), ("linalg_vecdot", True, True), ("scaled_dot_product_attention", True, True)],
)  # fmt: skip
def test_has_autocast_rule_known_facts(op, cpu, cuda):
    # issue 15's facts, read from torch 2.13's autocast_mode.cpp
    assert (al.has_autocast_rule(op, "cpu"), al.has_autocast_rule(op, "cuda")) == (cpu, cuda)


def test_has_autocast_rule_accepts_the_default_overload_spelled_out():
    assert al.has_autocast_rule("mm.default", "cuda") is True
    assert al.has_autocast_rule(" aten::cat ", "cpu") is True


def test_a_fallthrough_kernel_is_not_a_rule(monkeypatch):
    # torch 2.13 registers the Autocast fallthrough for the whole key only; were a per-op one to appear,
    # it would be "registered" but do nothing, and must not count as a rule.
    monkeypatch.setattr(torch._C, "_dispatch_kernel_for_dispatch_key_is_fallthrough", lambda op, key: True)
    assert al.has_autocast_rule("mm", "cpu") is False


@pytest.mark.parametrize(
    ("op", "device_type", "exc", "match"),
    [(None, "cpu", TypeError, "^op must be an aten op name"), (3, "cpu", TypeError, "^op must be an aten op name"),
     (b"mm", "cpu", TypeError, "^op must be"), ("mm", None, TypeError, "^device_type must be 'cpu' or 'cuda'"),
     ("mm", torch.device("cpu"), TypeError, "^device_type must be"),
     ("mm", "mps", ValueError, "^device_type='mps' is not allowed; choose one of: 'cpu', 'cuda'"),
     ("mm", "CUDA", ValueError, "^device_type='CUDA' is not allowed"),
     ("no_such_op", "cpu", ValueError, "^op='no_such_op' is not an operator in torch"),
     ("mm.no_such_overload", "cpu", ValueError, "is not an operator in torch"),
     ("softmax", "cuda", ValueError, "^op='softmax' has no default overload .*softmax.int"),
     ("", "cpu", ValueError, "is not an aten op name"), ("mm.", "cpu", ValueError, "is not an aten op name"),
     ("prims::mm", "cpu", ValueError, "is not an aten op name"), ("a b", "cpu", ValueError, "is not an aten op name"),
     ("x" * 201, "cpu", ValueError, "at most 200 characters")],
)  # fmt: skip
def test_has_autocast_rule_refuses_bad_arguments(op, device_type, exc, match):
    with pytest.raises(exc, match=match):
        al.has_autocast_rule(op, device_type)


def test_aten_op_names_exist_for_the_whole_catalogue():
    known = set(torch._C._dispatch_get_all_op_names())
    for name in al.op_names():
        aten = al.aten_op(name)
        assert f"aten::{aten}" in known, name
    with pytest.raises(ValueError, match="^name='bogus' is not allowed"):
        al.aten_op("bogus")
    with pytest.raises(TypeError, match="^name must be"):
        al.aten_op(None)


def test_python_level_ops_reach_the_aten_ops_their_rows_name():
    # softmin and norm have no aten op of their own: their rows use the rule of the aten op the Python
    # function calls, and the dispatcher trace shows that call (softmax.int runs as _softmax below it)
    out, calls = ao.dispatch_trace(lambda x: torch.norm(x), torch.rand(2, 4), device="cpu")
    assert any(c.name == "linalg_vector_norm" for c in calls)
    _, calls = ao.dispatch_trace(lambda x: F.softmin(x, dim=-1), torch.rand(2, 4), device="cpu")
    assert any(c.name == "_softmax" for c in calls)


def test_rule_comparison_rows_match_the_dispatcher(cpu_probe):
    rows = ao.rule_comparison(cpu_probe)
    assert [r.op for r in rows] == list(cpu_probe)
    for r in rows:
        assert r.rule == {d: _dump_rule(r.aten, d) for d in ("cpu", "cuda")}, r.op
        assert r.probed == cpu_probe[r.op].policy and r.probed_device == "cpu"
        for d in ("cpu", "cuda"):
            by_name = al.documented_policy(r.op, d)
            assert r.documented[d] in (by_name, al.documented_policy(r.aten.partition(".")[0], d))


def test_rule_comparison_without_a_probe_and_for_some_ops():
    rows = ao.rule_comparison(ops=["einsum", "cat"])
    assert [(r.op, r.rule["cpu"], r.rule["cuda"], r.probed) for r in rows] == [
        ("einsum", False, True, None), ("cat", True, False, None)
    ]
    assert len(ao.rule_comparison()) == len(al.op_names())


def _groups_oracle(rows, probe):
    """rule_groups recomputed from the dump oracle and the probe, without RuleRow's own fields."""
    listed = ("lower", "fp32", "promote")
    rule = {r.op: {d: _dump_rule(r.aten, d) for d in _KEYS} for r in rows}
    docs = {r.op: {d: r.documented[d] for d in _KEYS} for r in rows}
    ops = [r.op for r in rows]
    groups = {
        ("autocast.rule_cuda_only", ""): [o for o in ops if rule[o]["cuda"] and not rule[o]["cpu"]],
        ("autocast.rule_cpu_only", ""): [o for o in ops if rule[o]["cpu"] and not rule[o]["cuda"]],
    }
    for d in _KEYS:
        groups["autocast.rule_undocumented", d.upper()] = [o for o in ops if rule[o][d] and docs[o][d] == "unchanged"]
        groups["autocast.documented_no_rule", d.upper()] = [o for o in ops if not rule[o][d] and docs[o][d] in listed]
    dev = probe.device_type
    for policy in listed:
        groups[f"autocast.probed_{policy}_no_rule", dev.upper()] = [
            o for o in ops if probe[o].policy == policy and not rule[o][dev]]
    return {k: v for k, v in groups.items() if v}


def _by_code(readings):
    return {(g.outcome, g.facts["device"]): g.facts["ops"].split(", ") for g in readings}


def test_rule_groups_follow_from_the_rules_not_the_docs(cpu_probe):
    rows = ao.rule_comparison(cpu_probe)
    readings = ao.rule_groups(rows)
    groups = _by_code(readings)
    assert groups == _groups_oracle(rows, cpu_probe)
    assert all(g.facts["n"] == len(g.facts["ops"].split(", ")) for g in readings)
    # the correction: einsum has a CUDA rule, and on CPU it is lowered by decomposition
    assert "einsum" in groups["autocast.rule_cuda_only", ""]
    assert "einsum" in groups["autocast.probed_lower_no_rule", "CPU"]
    assert "cat" in groups["autocast.rule_cpu_only", ""]
    assert {"einsum", "linalg_vecdot", "scaled_dot_product_attention"} <= set(
        groups["autocast.rule_undocumented", "CUDA"])


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [(lambda t: ao.rule_comparison("table"), TypeError, "^probed must be the ProbeTable"),
     (lambda t: ao.rule_comparison(t, ops=["bogus"]), ValueError, r"^ops\[0\]='bogus' is not allowed"),
     (lambda t: ao.rule_comparison(t, ops=["einsum"]), ValueError, r"^ops\[0\]='einsum' was not probed"),
     (lambda t: ao.rule_comparison(t, ops="mm"), TypeError, "^ops must be a list of op names"),
     (lambda t: ao.rule_comparison(t, ops=[3]), TypeError, r"^ops\[0\] must be an op name"),
     (lambda t: ao.rule_comparison(ops=range(10**12)), ValueError, "^ops may hold at most 1,000 items"),
     (lambda t: ao.rule_groups("rows"), TypeError, "^rows must be the list"),
     (lambda t: ao.rule_groups([1]), TypeError, r"^rows\[0\] must be a RuleRow"),
             (lambda t: ao.rule_groups([1] * 1001), ValueError, "^rows may hold at most 1,000 items")],
)  # fmt: skip
def test_rule_functions_name_the_bad_argument(small_table, call, exc, match):
    with pytest.raises(exc, match=match):
        call(small_table)


def test_the_policy_names_the_lists_cite_are_pytorchs():
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.exists():
        pytest.skip("this torch wheel ships no C++ headers")
    enum = re.search(r"enum class CastPolicy[^{]*\{(.*?)\};", header.read_text(), re.S).group(1)
    names = set(re.findall(r"^\s*(\w+)\s*(?:=\s*\d+)?,", enum, re.M))
    cited = set(re.findall(r"\(``(\w+)``", al.__doc__))  # "(``lower_precision_fp``: ..." in the docstring
    assert cited == {"lower_precision_fp", "fp32", "promote"} and cited <= names


# --- notebook 05's stored three-way table, kept consistent with the dispatcher -----------------

NB05 = Path(__file__).resolve().parent.parent / "notebooks" / "05_autocast_op_lists.ipynb"


def _stored_text(cell_id: str) -> str:
    nb = json.loads(NB05.read_text())
    cell = next(c for c in nb["cells"] if c.get("id") == cell_id)
    # printed text, or a widgets.Table's aligned-text repr (what nbval compares)
    return "".join("".join(o.get("text", "")) if o.get("output_type") == "stream"
                   else "".join(o.get("data", {}).get("text/plain", "")) for o in cell["outputs"])


def test_notebook_05_three_way_table_matches_the_dispatcher():
    text = _stored_text("1b1ee540")
    lines = text.strip().splitlines()
    assert lines[0].split()[-2:] == ["probed", "cpu"]
    rows = lines[2:]
    assert len(rows) >= 10
    seen = set()
    for line in rows:
        m = re.fullmatch(r"(\w+)(?: \((\S+)\))?\s+(\S+)\s+(\S+)\s+(yes|-)\s+(yes|-)\s+(\S+)", line.strip())
        assert m, line
        op, aten, doc_cpu, doc_cuda, rule_cpu, rule_cuda, probed = m.groups()
        aten = aten or op
        seen.add(op)
        assert (rule_cpu == "yes") is _dump_rule(aten, "cpu"), line
        assert (rule_cuda == "yes") is _dump_rule(aten, "cuda"), line
        assert doc_cpu in (al.documented_policy(op, "cpu"), al.documented_policy(aten.partition(".")[0], "cpu"))
        assert doc_cuda in (al.documented_policy(op, "cuda"), al.documented_policy(aten.partition(".")[0], "cuda"))
        assert probed == _truth_of(op)
    assert {"einsum", "softmax", "cat"} <= seen


def _truth_of(op):
    # the probed column against autocast itself, for the ops the oracle above can run
    fn, shapes = {**MATMULS, **SINGLE}.get(op, (None, None))
    if fn is not None:
        return _truth_single(fn, shapes)
    return ao.probe("cpu", ops=[op])[op].policy


def test_notebook_05_groups_match_the_dispatcher(cpu_probe):
    stored = _stored_text("5a8e7dcd").split()  # the printed groups, words in order (lines wrap)
    readings = ao.rule_groups(ao.rule_comparison(cpu_probe))
    assert _by_code(readings) == _groups_oracle(ao.rule_comparison(cpu_probe), cpu_probe)
    assert stored == " ".join(g.text for g in readings).split()


# --- 05's readouts: codes and numbers, the rules from the dispatcher ---------------------------


def test_read_call_of_a_lowered_matmul():
    with torch.autocast("cpu", dtype=LOW):
        out = torch.mm(_rand(4, 4), _rand(4, 4)).dtype
    r = ao.read_call("mm", "cpu", torch.float32, out, torch.float32)
    assert (r.outcome, r.reasons) == ("autocast.call_lowered", ("autocast.rule_here", "autocast.plain_gives"))
    assert (r.facts["rule_cpu"], r.facts["rule_cuda"], r.facts["dtype"], r.facts["plain"]) == (
        "yes", "yes", "bfloat16", "float32"
    )


@pytest.mark.parametrize(
    ("device_type", "in_dtype", "out_dtype", "outcome"),
    [("cpu", LOW, LOW, "autocast.call_kept"), ("cuda", torch.float16, torch.float32, "autocast.call_upcast")],
)
def test_read_call_where_cpu_and_cuda_part_ways(device_type, in_dtype, out_dtype, outcome):
    r = ao.read_call("layer_norm", device_type, in_dtype, out_dtype)
    here = "autocast.rule_here" if _dump_rule("layer_norm", device_type) else "autocast.no_rule_here"
    assert (r.outcome, r.reasons) == (outcome, (here, "autocast.rule_decides"))
    assert r.facts["rule"] is _dump_rule("layer_norm", device_type)


@pytest.mark.parametrize(
    ("truth", "value", "protected", "mean_square", "dtype", "band", "codes", "spacing"),
    # spacing = eps(dtype) * 2**floor(log2(E[x^2])): 2**6 * 2**-7 for bfloat16 near 100, 2**1 * 2**-10 for float16 near 3
    [(0.01, 0.5, 0.0101, 100.0, LOW, 2, ("autocast.variance_lost", "autocast.spacing_far", "autocast.protected_ok"), 0.5),
     (1.0, 1.005, 1.01, 1.0, torch.float32, 0,
      ("autocast.variance_close", "autocast.spacing_comparable", "autocast.protected_off"), 2.0**-23),
     (1.0, 1.5, 1.0, 3.0, torch.float16, 1,
      ("autocast.variance_off", "autocast.spacing_comparable", "autocast.protected_ok"), 2.0**-9)],
)  # fmt: skip
def test_read_variance_hand_computed(truth, value, protected, mean_square, dtype, band, codes, spacing):
    r = ao.read_variance(truth, value, protected, mean_square, dtype)
    assert r.codes == codes
    assert r.facts["band"] == ao.VARIANCE_BANDS[band]
    assert r.facts["spacing"] == spacing and r.facts["error"] == abs(value - truth)
