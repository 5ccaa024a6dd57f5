"""docs/results/README.md lists every committed GPU results file with facts read from the file itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
FILES = sorted(RESULTS.glob("gpu-check_*.json"))


def _rows() -> dict[str, str]:
    text = (RESULTS / "README.md").read_text()
    section = text.split("## What is here", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): line for line in section.splitlines() if (m := re.match(r"\| `([^`]+)`", line))}


def test_every_row_names_a_committed_file():
    for stem in _rows():
        assert (RESULTS / f"{stem}.json").is_file() and (RESULTS / f"{stem}.md").is_file(), stem


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_each_results_file_is_listed_with_its_own_facts(path):
    data = json.loads(path.read_text())
    assert data["schema"] == "amp-lab/gpu-check/1" and data["complete"]
    row = _rows().get(path.stem)
    assert row is not None, f"{path.name} is not listed in docs/results/README.md"
    machine = data["machine"]
    assert machine["gpu_name"] in row and machine["torch"] in row and f"sm_{machine['capability'].replace('.', '')}" in row
    assert f"{machine['multiprocessors']} SMs" in row and f"{machine['gpu_memory_gib']} GiB" in row
    assert f"{data['total_s']} s in all" in row and f"planned worst case {round(data['plan']['worst_case_s']['total'])} s" in row
    statuses = {s["status"] for s in data["sections"].values()}
    assert ("every section ok" in row) == (statuses == {"ok"})
    assert ("`--quick`" in row) == data["quick"]
