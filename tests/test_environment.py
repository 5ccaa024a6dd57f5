"""environment.yml (conda route) and pyproject.toml must list the same packages and minimums."""

import re
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CONDA_TO_PIP = {"pytorch": "torch"}
NOT_PACKAGES = {"python", "pip"}


def _split(spec: str) -> tuple[str, str | None]:
    """``name``, ``name>=X.Y`` or ``name>=X.Y,<X.Z`` -> (name, ">=X.Y" / ">=X.Y,<X.Z" / None)."""
    m = re.fullmatch(
        r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*(?:>=\s*([0-9][0-9.]*)(?:\s*,\s*<\s*([0-9][0-9.]*))?)?\s*", spec
    )
    if not m:
        raise AssertionError(f"unparseable requirement {spec!r}: use 'name', 'name>=X.Y' or 'name>=X.Y,<X.Z'")
    bound = None if m.group(2) is None else ">=" + m.group(2) + ("" if m.group(3) is None else ",<" + m.group(3))
    return m.group(1).lower().replace("_", "-"), bound


def pyproject_requirements(text: str) -> dict[str, str | None]:
    project = tomllib.loads(text)["project"]
    specs = list(project["dependencies"]) + list(project["optional-dependencies"]["dev"])
    # Requirements with an environment marker (e.g. tomli on Python 3.10) are pip-only back-ports.
    return dict(_split(s) for s in specs if ";" not in s)


def conda_requirements(text: str) -> dict[str, str | None]:
    env = yaml.safe_load(text)
    found: dict[str, str | None] = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for spec in dep.get("pip", []):
                if spec.strip().startswith("-e"):
                    continue
                name, minimum = _split(spec)
                found[name] = minimum
            continue
        name, minimum = _split(dep)
        if name in NOT_PACKAGES:
            continue
        found[CONDA_TO_PIP.get(name, name)] = minimum
    return found


def test_conda_forge_only_and_course_installed_editable():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert any("-e ." in section for section in pip_sections)


def test_environment_matches_pyproject():
    ours = pyproject_requirements((ROOT / "pyproject.toml").read_text())
    conda = conda_requirements((ROOT / "environment.yml").read_text())
    assert conda == ours, (
        f"only in pyproject: {sorted(set(ours) - set(conda))}; only in environment.yml: "
        f"{sorted(set(conda) - set(ours))}; differing minimums: "
        f"{sorted(k for k in set(ours) & set(conda) if ours[k] != conda[k])}"
    )


def test_drift_is_detected():
    # The comparison itself must be able to fail: drop one package and change one minimum.
    text = (ROOT / "environment.yml").read_text()
    ours = pyproject_requirements((ROOT / "pyproject.toml").read_text())
    assert conda_requirements(text.replace("  - tqdm>=4.66\n", "")) != ours
    bound = re.search(r"pytorch>=([0-9.]+)", text)
    assert bound is not None
    assert conda_requirements(text.replace(bound.group(0), "pytorch>=1.0")) != ours
    # an upper bound counts too: torchao's range is the one the FP8 proofs were run against
    ranged = re.search(r"torchao>=([0-9.]+),<([0-9.]+)", text)
    assert ranged is not None
    assert conda_requirements(text.replace(ranged.group(0), f"torchao>={ranged.group(1)}")) != ours


def test_python_minimum_matches():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda_python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert project["requires-python"] == conda_python.removeprefix("python")


@pytest.mark.parametrize("spec", ["torch>=2.4", "ipywidgets", "jupyterlab_widgets>=3.0"])
def test_split_parses(spec):
    name, _ = _split(spec)
    assert name and name == name.lower()
