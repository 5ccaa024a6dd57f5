"""amp_lab.learner_api is the one list of learner-facing names: every amp_lab callable a notebook or a
solution calls must be on it (so it keeps the contract and is fuzzed, tests/test_fuzz.py)."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import nbformat

from amp_lab.learner_api import LEARNER_API

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").rglob("*.ipynb"))


def amp_lab_names(source: str) -> set[tuple[str, str]]:
    """``(module, name)`` for each ``from amp_lab.m import name`` and ``m.name`` (after ``from amp_lab import m``)."""
    tree = ast.parse(source)
    aliases, found = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("amp_lab"):
            sub = node.module.split(".")[1:]
            for a in node.names:
                if sub:
                    found.add((".".join(sub), a.name))
                else:
                    aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            found.add((aliases[node.value.id], node.attr))
    return found


def called_in_notebooks() -> set[str]:
    names = set()
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
        for mod, name in amp_lab_names(code):
            if mod.startswith("exercises"):
                continue  # the exercises' checks are tested by tests/test_exercises_*.py
            value = getattr(importlib.import_module(f"amp_lab.{mod}"), name, None)
            if callable(value) and not (inspect.isclass(value) and issubclass(value, BaseException)):
                names.add(f"{mod}.{name}")
    return names


def test_every_callable_a_notebook_uses_is_learner_facing():
    listed = {f"{m}.{n}" for m, ns in LEARNER_API.items() for n in ns}
    assert sorted(called_in_notebooks() - listed) == []


def test_the_scan_finds_both_import_forms():
    src = "from amp_lab import race as r\nfrom amp_lab.formats import round_to\nr.race_mlp(8)\n"
    assert amp_lab_names(src) == {("race", "race_mlp"), ("formats", "round_to")}
