"""The host daemon's install, `pip install fleetguard` with no extras, in a fresh virtual environment: the
agent runs end to end and stores data, and `fleetguard --help` works without the predictor's packages.

pip resolves the base dependencies as an operator's pip would (the local wheel cache and index first)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "pyarrow", "sklearn", "xgboost", "torch", "numpy", "duckdb", "prometheus_client")


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("base-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run([*pip, str(REPO)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return venv


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLEETGUARD_", "PYTHON", "VIRTUAL_ENV"))}
    return env | extra


def test_the_base_install_has_none_of_the_predictors_packages(base_venv: Path) -> None:
    names = ("pandas", "sklearn", "xgboost", "pyarrow")
    probe = f"import importlib.util as u; print([m for m in {names!r} if u.find_spec(m)])"
    out = subprocess.run(
        [str(base_venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    assert out.stdout.strip() == "[]"  # otherwise this test would prove nothing


def test_the_agent_of_a_base_install_stores_what_it_samples(base_venv: Path, tmp_path: Path) -> None:
    store = tmp_path / "fleet.duckdb"
    env = clean_env(
        FLEETGUARD_COLLECTORS_KMSG_STATE_PATH=str(tmp_path / "kmsg.seq"),
        FLEETGUARD_AGENT_FLUSH_INTERVAL_SECONDS="1",
        FLEETGUARD_RUNTIME_PORT="0",
    )
    args = ["agent", "--simulate", "1x2", "--metrics-port", "0", "--duration", "4", "--store", str(store)]
    done = subprocess.run(
        [str(base_venv / "bin" / "fleetguard"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["rejected_rows"] == 0 and summary["write_errors"] == 0
    assert summary["rows_written"]["gpu_samples"] >= 2  # 2 GPUs, at least one round
    con = duckdb.connect(str(store), read_only=True)
    try:
        for table, rows in summary["rows_written"].items():
            assert con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] == rows
    finally:
        con.close()


def test_help_works_on_a_base_install(base_venv: Path) -> None:
    done = subprocess.run(
        [str(base_venv / "bin" / "fleetguard"), "--help"],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    for command in ("agent", "up", "export", "train", "evaluate", "predict"):
        assert f"\n  {command} " in done.stdout


def test_help_imports_nothing_heavy() -> None:
    """In the full development install too: `--help` loads neither the predictor nor the agent's libraries."""
    probe = (
        "import sys\nfrom fleetguard.cli import main\nsys.argv = ['fleetguard', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print('LOADED', sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=clean_env(), check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "LOADED []", done.stdout
