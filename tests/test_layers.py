"""The package's map and rule (CONTRIBUTING.md, "The map, and the rule"), read from CONTRIBUTING itself so
the two cannot drift: every module sits in one layer and imports only modules of lower layers, at the top
of its file; no module is over 700 lines, and the whole package (exercises included) stays under 18,000."""

from __future__ import annotations

import ast
import re
import shutil
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "amp_lab"
MAX_LINES = 700
MAX_PACKAGE_LINES = 18_000  # the whole package, its .py files (ruff-formatted), exercises included


def layer_table(text: str) -> dict[str, tuple[int, str]]:
    """``{module pattern: layer}`` from the map's rows (``| L4 machine | `hardware` | ... |``).  A layer is a
    number and an optional letter: L8 < L8a < L8b < L9 (a room split off a module sits just above it)."""
    start = text.index("## The map, and the rule")
    end = text.index("\n## ", start + 1)
    table = {}
    for line in text[start:end].splitlines():
        m = re.match(r"^\| L(\d+)([a-z]?)[^|]*\| `([\w.*]+)` \|", line)
        if m:
            assert m.group(3) not in table, f"{m.group(3)} is in the map twice"
            table[m.group(3)] = (int(m.group(1)), m.group(2))
    return table


def module_name(path: Path, package: Path) -> str:
    rel = path.relative_to(package).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def internal_imports(path: Path, package: Path, modules: set[str]) -> list[tuple[str, int, bool]]:
    """``(imported module, line, at top level?)`` for every import of the package inside ``path``;
    ``modules`` are the package's module names (an imported name that is one is that module)."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    me = module_name(path, package).split(".") if module_name(path, package) else []
    pkg = me if path.name == "__init__.py" else me[:-1]
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.ImportFrom) and node.level:
            base = pkg[: len(pkg) - node.level + 1] + (node.module.split(".") if node.module else [])
            for alias in node.names:
                sub = ".".join([*base, alias.name])
                targets.append(sub if sub in modules else ".".join(base))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("amp_lab"):
            base = node.module.split(".")[1:]
            for alias in node.names:
                sub = ".".join([*base, alias.name])
                targets.append(sub if sub in modules else ".".join(base))
        elif isinstance(node, ast.Import):
            targets = [a.name.removeprefix("amp_lab").lstrip(".") for a in node.names if a.name.startswith("amp_lab")]
        for t in targets:
            if t:  # the package itself (``from . import x`` resolved above) has no layer of its own
                found.append((t, node.lineno, id(node) in top))
    return found


def shown(layer: tuple[int, str]) -> str:
    return f"L{layer[0]}{layer[1]}"


def layer_of(name: str, table: dict) -> tuple[int, str] | None:
    if name in table:
        return table[name]
    matches = [layer for pattern, layer in table.items() if fnmatch(name, pattern)]
    return matches[0] if matches else None


def violations(package: Path, table: dict) -> list[str]:
    """Every way ``package`` breaks the map and the rule, as readable lines (empty when it keeps them)."""
    problems = []
    modules = {module_name(p, package): p for p in sorted(package.rglob("*.py")) if module_name(p, package)}
    for pattern in table:
        if not any(fnmatch(m, pattern) for m in modules):
            problems.append(f"the map lists `{pattern}`, which is no module")
    graph, names = {}, set(modules)
    for name, path in modules.items():
        layer = layer_of(name, table)
        if layer is None:
            problems.append(f"{name} is in no layer of the map")
            continue
        graph[name] = set()
        for target, line, at_top in internal_imports(path, package, names):
            graph[name].add(target)
            where = f"{path.relative_to(package.parent)}:{line}"
            if not at_top:
                problems.append(f"{where}: {name} imports {target} inside a function")
            target_layer = layer_of(target, table)
            if target_layer is None:
                continue
            if target_layer >= layer:
                problems.append(
                    f"{where}: {name} ({shown(layer)}) imports {target} ({shown(target_layer)}), not a lower layer"
                )
    # A cycle is also an upward import, so the check above catches it; named here so the message says so.
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                problems.append("import cycle: " + " -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return list(dict.fromkeys(problems))


TABLE = layer_table((ROOT / "CONTRIBUTING.md").read_text())


def test_the_package_keeps_the_map_and_the_rule():
    assert violations(PACKAGE, TABLE) == []


def package_sizes(package: Path) -> dict[str, int]:
    return {module_name(p, package) or "amp_lab": len(p.read_text().splitlines()) for p in package.rglob("*.py")}


def test_no_module_is_over_700_lines():
    over = {m: n for m, n in package_sizes(PACKAGE).items() if n > MAX_LINES}
    assert over == {}, f"over {MAX_LINES} lines: {over}"


def test_the_package_stays_under_its_line_budget():
    total = sum(package_sizes(PACKAGE).values())
    assert total < MAX_PACKAGE_LINES, f"the package has {total} lines, over its budget of {MAX_PACKAGE_LINES}"


def test_the_line_budget_counts_every_module(tmp_path):
    package = tmp_path / "amp_lab"
    shutil.copytree(PACKAGE, package)
    before = sum(package_sizes(package).values())
    (package / "exercises" / "nb99.py").write_text("x = 1\n" * 250)
    assert sum(package_sizes(package).values()) == before + 250


@pytest.mark.parametrize(
    "module, injected, expected",
    [
        ("dtypes", "from .race import race_mlp\n", "dtypes (L1) imports race (L8), not a lower layer"),
        ("gpus", "from .cost import step_flops\n", "gpus (L2) imports cost (L2), not a lower layer"),
        ("device", "def f():\n    from .text import say\n", "device imports text inside a function"),
        ("timing", "from . import compare\n", "import cycle"),
    ],
)
def test_the_checker_catches_an_injected_violation(tmp_path, module, injected, expected):
    copy = tmp_path / "amp_lab"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / f"{module}.py"
    path.write_text(path.read_text() + "\n" + injected)
    found = violations(copy, TABLE)
    assert any(expected in line for line in found), found


def test_a_lettered_layer_sits_just_above_its_number():
    table = layer_table("## The map, and the rule\n| L8 races | `a` | x |\n| L8a races | `b` | y |\n| L9 x | `c` | z |\n\n## End")
    assert table["a"] < table["b"] < table["c"]


def test_the_checker_catches_an_unmapped_module(tmp_path):
    copy = tmp_path / "amp_lab"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "stray.py").write_text("x = 1\n")
    assert "stray is in no layer of the map" in violations(copy, TABLE)
