"""What notebooks 00, 01, 02 and 05 (and their solutions) say, read from the committed notebooks: words defined
where they are first used, no question answered by the markdown before it, aligned printouts, and the
statements issue 24 found wrong, checked against torch (the oracle) by running the cells that make them."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import nbformat
import pytest
import torch

from amp_lab import formats, gpus
from amp_lab import tensor_cores as tc
from amp_lab.widgets import Table

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = {
    "00": "00_setup_check.ipynb",
    "01": "01_float_formats.ipynb",
    "02": "02_tensor_cores.ipynb",
    "05": "05_autocast_op_lists.ipynb",
}
SOLUTIONS = {
    n: f"solutions/{f.replace('.ipynb', '_solutions.ipynb')}" for n, f in NOTEBOOKS.items() if n != "00"
}


def cells(name: str):
    return nbformat.read(ROOT / "notebooks" / name, as_version=4).cells


def cell_with(name: str, text: str, kind: str = "code"):
    found = [c for c in cells(name) if c.cell_type == kind and text in c.source]
    assert len(found) == 1, f"{name}: {len(found)} {kind} cells contain {text!r}"
    return found[0]


def run_cell(source: str, namespace: dict):
    """Run a cell's source: its printed text, and the value of its last expression (what Jupyter shows)."""
    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tree, "<cell>", "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace) if last else None
    return out.getvalue(), value


def readable_text(cell) -> str:
    """What a learner reads in a cell: markdown, or a code cell's comments, strings and printed output."""
    if cell.cell_type == "markdown":
        return cell.source
    comments = "\n".join(line.split("#", 1)[1] for line in cell.source.splitlines() if "#" in line)
    outputs = "\n".join(
        o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", [])
    )
    return "\n".join([comments, *re.findall(r"\"[^\"]*\"|'[^']*'", cell.source), outputs])


# ---------------------------------------------------------------------------------------------
# Item 4: words defined at their first use, in each notebook where they appear
# ---------------------------------------------------------------------------------------------

# word (as a learner meets it) -> what its definition must say, in the same cell as the first use
DEFINITIONS = {
    r"\bGEMMs?\b": r"general matrix multiplication",
    r"\bbinades?\b": r"interval from one power of two to the next",
    r"\bIQR\b": r"interquartile range",
    r"\bamax\b": r"(absolute|largest) (value|magnitude)",
    r"launch[- ]bound": r"launch(ing)? (the |its )?kernels?|launch overhead|time to launch",
}


@pytest.mark.parametrize("name", [*NOTEBOOKS.values(), *SOLUTIONS.values()])
def test_words_are_defined_where_a_learner_first_meets_them(name):
    for word, definition in DEFINITIONS.items():
        first = next((c for c in cells(name) if re.search(word, readable_text(c))), None)
        if first is not None:
            said = " ".join(readable_text(first).split())  # one line: a definition may wrap
            assert re.search(definition, said), f"{name}: {word} used undefined in:\n{first.source}"


# ---------------------------------------------------------------------------------------------
# Item 5: the markdown before a question does not answer it
# ---------------------------------------------------------------------------------------------


def markdown_before(name: str, guess: str) -> str:
    """The markdown a learner reads between the previous reveal and the question that sets ``guess``."""
    text = []
    for c in cells(name):
        if c.cell_type == "code" and f"{guess} = predict.choice(" in c.source:
            return "\n".join(text)
        if c.cell_type == "code" and "predict.reveal(" in c.source:
            text = []
        elif c.cell_type == "markdown":
            text.append(c.source)
    raise AssertionError(f"{name}: no predict.choice sets {guess}")


def _fp16_sum_of_ones(n: int) -> float:
    s = torch.tensor(0.0, dtype=torch.float16)
    for _ in range(n):
        s = s + 1  # torch's own FP16 addition, each partial sum rounded
    return s.item()


def test_no_question_is_answered_by_the_markdown_before_it():
    bf16_257 = torch.tensor(257.0).to(torch.bfloat16).item()  # torch's cast: the oracle
    e4m3_1e6 = torch.tensor(1e6).to(torch.float8_e4m3fn).float().item()
    fp16_sum = _fp16_sum_of_ones(3000)
    forbidden = {
        ("01", "guess_257"): [f"{bf16_257:g}"],
        ("01", "guess_e4m3"): [f"{e4m3_1e6:g}", "saturat", "clips"],
        ("02", "guess_sum"): [f"{fp16_sum:g}", "stall", "stops", "2**11"],
        ("05", "guess_mm"): [str(torch.bfloat16).removeprefix("torch.")],
        ("05", "guess_norm"): ["layer_norm ran", "unchanged"],
        ("05", "guess_variance"): ["cannot survive", "nearly equal", "fragile", "rounded to the low dtype"],
    }
    for (number, guess), words in forbidden.items():
        text = markdown_before(NOTEBOOKS[number], guess)
        for word in words:
            assert word not in text, f"{NOTEBOOKS[number]}: the markdown before {guess} says {word!r}"
    # the lesson's objectives (read before any question) do not give 01's or 02's answers either
    assert "saturation" not in cells(NOTEBOOKS["01"])[1].source
    assert "stalls" not in cells(NOTEBOOKS["02"])[1].source


def test_05_asks_about_layer_norm_before_its_live_table_shows_the_answer():
    """The live table (ao.probe) prints every op's policy, layer_norm's too: the question comes first."""
    sources = [c.source for c in cells(NOTEBOOKS["05"]) if c.cell_type == "code"]
    question = next(i for i, s in enumerate(sources) if "guess_norm = predict.choice(" in s)
    reveal = next(i for i, s in enumerate(sources) if "predict.reveal(guess_norm" in s)
    table = next(i for i, s in enumerate(sources) if "ao.probe(device)" in s)
    assert question < reveal < table


# ---------------------------------------------------------------------------------------------
# Item 3: 05's variance printout lines up
# ---------------------------------------------------------------------------------------------


def test_05_variance_printout_has_one_column_for_the_numbers():
    from amp_lab import autocast_ops as ao
    from amp_lab.device import seed_everything

    cell = cell_with(NOTEBOOKS["05"], "def variance_by_moments")
    device = torch.device("cpu")
    printed, _ = run_cell(cell.source, {"torch": torch, "device": device, "low": ao.autocast_dtype(device),
                                        "seed_everything": seed_everything})  # fmt: skip
    lines = printed.splitlines()
    assert len(lines) == 3
    starts = {re.search(r"-?\d+\.\d{6}$", line).start() for line in lines}
    assert len(starts) == 1, printed


# ---------------------------------------------------------------------------------------------
# Item 2: 02's accumulator story
# ---------------------------------------------------------------------------------------------


def test_02_reads_the_three_accumulator_switches_live_and_claims_the_opt_in():
    nb = cells(NOTEBOOKS["02"])
    readout = cell_with(NOTEBOOKS["02"], "tc.matmul_flags():")
    printed, _ = run_cell(readout.source, {"tc": tc})
    for flag in tc.MATMUL_FLAGS:
        assert f"{flag} = {getattr(torch.backends.cuda.matmul, flag)}" in printed
    guard = cell_with(NOTEBOOKS["02"], 'flags["allow_fp16_accumulation"]')
    assert "allow_fp16_accumulation" in guard.source and not guard.source.startswith("# NBVAL_IGNORE_OUTPUT")
    markdown = "\n".join(c.source for c in nb if c.cell_type == "markdown")
    assert "CUBLAS_COMPUTE_32F" in markdown and "split-K" in markdown
    for wrong in ("the accumulator is the library's choice", "accumulator is chosen by the library kernel",
                  "cuBLAS keeps every partial sum", "lets cuBLAS reduce some partial sums"):  # fmt: skip
        assert wrong not in markdown


def test_02_rates_table_says_which_rate_pytorch_gets():
    cell = cell_with(NOTEBOOKS["02"], "gpus.ACCUMULATE_RATES")
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_fp16_accumulation
    try:
        for opt_in in (False, True):
            matmul.allow_fp16_accumulation = opt_in
            _, table = run_cell(cell.source, {"torch": torch, "gpus": gpus, "Table": Table})
            assert "PyTorch's default" in table.header[2] and "allow_fp16_accumulation" in table.header[3]
            gets = "fp16_accumulate" if opt_in else "fp32_accumulate"
            assert [float(row[-1]) for row in table.rows] == [
                round(r[gets], 1) for r in gpus.ACCUMULATE_RATES
            ]
    finally:
        matmul.allow_fp16_accumulation = before


# ---------------------------------------------------------------------------------------------
# Item 6: other statements that were wrong
# ---------------------------------------------------------------------------------------------


def test_01_says_which_fp16_values_become_zero():
    """Not "smaller than the min subnormal": only values at or below half of it (torch's cast is the oracle)."""
    cell = cell_with(NOTEBOOKS["01"], "FP16 min subnormal")
    printed, _ = run_cell(cell.source, {"FORMATS": formats.FORMATS, "math": __import__("math")})
    line = next(line for line in printed.splitlines() if "min subnormal" in line)
    half = float(re.search(r"at or below half of it \(([^)]+)\) become 0", line).group(1))
    tiny = (
        torch.tensor(1, dtype=torch.int16).view(torch.float16).item()
    )  # the smallest subnormal, from its bits
    assert half == pytest.approx(tiny / 2, rel=1e-3)
    assert torch.tensor(tiny / 2).half().item() == 0.0  # the tie goes to the even neighbour, 0
    assert torch.tensor(tiny / 2).nextafter(torch.tensor(1.0)).half().item() == tiny


def test_01_ties_the_min_subnormal_to_the_mantissa_bits():
    """The min subnormal is the min normal times 2^-M: it is not set by the exponent bits alone."""
    for name, f in formats.FORMATS.items():
        assert f.min_subnormal == f.min_normal * 2.0**-f.mantissa_bits, name
    for fmt, bits in (("fp32", torch.int32), ("bf16", torch.int16), ("fp16", torch.int16)):
        dtype = formats.FORMATS[fmt].torch_dtype
        smallest = torch.tensor(1, dtype=bits).view(dtype).item()  # the smallest subnormal, from its bits
        assert smallest == torch.finfo(dtype).tiny * 2.0 ** -formats.FORMATS[fmt].mantissa_bits, fmt
    text = "\n".join(c.source for c in cells(NOTEBOOKS["01"]) if c.cell_type == "markdown")
    assert "**min subnormal** come from the exponent bits" not in text
    assert "Exponent bits set the range (max, min normal, min subnormal)" not in text
    assert "min normal times 2^-M" in text and "Values at or below half the smallest subnormal" in text


def test_02_and_the_guide_name_the_module_the_generations_come_from():
    source = tc.tensor_core_generation.__module__.removeprefix("amp_lab.")
    assert source == "gpus"
    guide = (ROOT / "docs" / "instructor-guide.md").read_text()
    section = guide.split("### `02_tensor_cores.ipynb`", 1)[1].split("\n### ", 1)[0]
    texts = [c.source for c in cells(NOTEBOOKS["02"]) if c.cell_type == "markdown"] + [section]
    named = [m for t in texts for m in re.findall(r"computed from `amp_lab\.(\w+)`", t)]
    assert named and set(named) == {source}


def test_01_gives_the_subnormal_formula_torch_decodes():
    """A subnormal is 2^(1 - bias) × 0.mantissa (not 2^(0 - bias)): checked on torch's own bit patterns."""
    text = cell_with(NOTEBOOKS["01"], "## Six formats, one layout", kind="markdown").source
    assert "2^(1 - bias) × 0.mantissa" in text
    for fmt, bits in (
        ("fp32", torch.int32),
        ("bf16", torch.int16),
        ("fp16", torch.int16),
        ("fp8_e4m3", torch.int8),
    ):
        f = formats.FORMATS[fmt]
        for m in (1, 2 ** (f.mantissa_bits - 1) + 1, 2**f.mantissa_bits - 1):
            value = torch.tensor(m, dtype=bits).view(f.torch_dtype).float().item()
            assert value == 2.0 ** (1 - f.bias) * m / 2**f.mantissa_bits, (fmt, m)
