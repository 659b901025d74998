"""The import contracts in pyproject.toml ([tool.importlinter]) hold for the code, and each one fails when
code breaks it: a copy of the packages gets one offending module and the real `lint-imports` runs on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("fleetguard", "collectors", "straggler", "diagnosis", "predictor", "dashboard")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

LAYERS = "fleetguard: entry points > services > store > configuration > ground"
NO_CYCLES = "no import cycle between sibling packages or modules"
CORE = "the core packages import neither the fleetguard shell nor its store"
DASHBOARD = "the dashboard reaches fleetguard through the store API only"


@dataclass(frozen=True)
class Offence:
    path: str  # where the offending module goes, relative to the copy's root
    source: str
    broken: str  # the one contract it must break
    culprit: str  # the import the report must name


OFFENCES = [
    # Ground reaching up into a service (one that never imports it back, so no cycle is made as well).
    Offence(
        "fleetguard/jobcontrol/upward.py",
        "from fleetguard.scale import lake\n",
        LAYERS,
        "fleetguard.jobcontrol.upward -> fleetguard.scale.lake",
    ),
    # Two services importing each other, the second edge hidden in a function: no layer is crossed, the cycle
    # contract alone must see it.
    Offence(
        "fleetguard/alerts/lazy_cycle.py",
        "def service() -> object:\n    from fleetguard.incidents import service\n\n    return service\n",
        NO_CYCLES,
        ".alerts -> .incidents",
    ),
    # A core package reading the store.
    Offence(
        "diagnosis/store_reader.py",
        "from fleetguard.store import Store\n",
        CORE,
        "diagnosis.store_reader -> fleetguard.store",
    ),
    # The dashboard driving a running service instead of reading the store.
    Offence(
        "dashboard/runtime_peek.py",
        "from fleetguard.runtime import service\n",
        DASHBOARD,
        "dashboard.runtime_peek -> fleetguard.runtime.service",
    ),
]


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Real `lint-imports` on the copy at `root` (first on PYTHONPATH, so it is read, not the install)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the packages and pyproject.toml as they are in the repository."""
    root = tmp_path_factory.mktemp("pristine")
    for package in PACKAGES:
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_code_keeps_every_contract(pristine: Path) -> None:
    result = lint_imports(pristine)
    assert result.returncode == 0, result.stdout + result.stderr
    for contract in (LAYERS, NO_CYCLES, CORE, DASHBOARD):
        assert f"{contract} KEPT" in result.stdout


@pytest.mark.parametrize("offence", OFFENCES, ids=lambda o: o.path)
def test_an_offending_import_breaks_its_contract(offence: Offence, pristine: Path, tmp_path: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(pristine, root)
    (root / offence.path).write_text(offence.source, encoding="utf-8")
    result = lint_imports(root)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{offence.broken} BROKEN" in result.stdout
    assert offence.culprit in result.stdout
    kept = {LAYERS, NO_CYCLES, CORE, DASHBOARD} - {offence.broken}
    for contract in kept:
        assert f"{contract} KEPT" in result.stdout, f"{offence.path} broke {contract} as well"


def test_a_module_outside_every_layer_breaks_the_layers(pristine: Path, tmp_path: Path) -> None:
    """The layers contract is exhaustive: a new top-level module of fleetguard must be given a layer."""
    root = tmp_path / "copy"
    shutil.copytree(pristine, root)
    (root / "fleetguard" / "unplaced.py").write_text('"""Placed in no layer."""\n', encoding="utf-8")
    result = lint_imports(root)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{LAYERS} BROKEN" in result.stdout
    assert "fleetguard.unplaced" in result.stdout
