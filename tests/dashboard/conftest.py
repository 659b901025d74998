"""Dashboard fixtures: one simulated fleet store, the dashboard served over it on loopback, one Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboard.server import DashboardServer, serve_dashboard
from fleetguard.config import load_config
from fleetguard.store import Store
from tests.dashboard.browser import Browser, chromium
from tests.dashboard.fleet_store import BuiltFleet, build_fleet_store

OPERATOR_TOKEN = "operator-token-for-tests-0123456789"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> BuiltFleet:
    return build_fleet_store(tmp_path_factory.mktemp("dashboard") / "fleet.duckdb")


@pytest.fixture(scope="module")
def fleet_store(fleet: BuiltFleet) -> Iterator[Store]:
    """Open for writing, as under `fleetguard up`: the dashboard reads through the writer's cursors."""
    store = Store.open(fleet.path)
    yield store
    store.close()


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "operator.token"
    path.write_text(OPERATOR_TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def candidate_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A candidate that ignores thermal throttling and tolerates hotter GPUs."""
    path = tmp_path_factory.mktemp("policy") / "candidate.toml"
    path.write_text("[gpu]\nthermal_throttle = false\ntemperature_warn_celsius = 120\n")
    return path


@pytest.fixture(scope="module")
def dashboard(
    fleet: BuiltFleet, fleet_store: Store, token_file: Path, candidate_policy: Path
) -> Iterator[DashboardServer]:
    config = load_config(
        env={},
        overrides={
            "dashboard.operator_token_file": str(token_file),
            "dashboard.refresh_seconds": 3600.0,
            "dashboard.candidate_policy_file": str(candidate_policy),
        },
    )
    server = serve_dashboard(fleet_store, config, port=0, now=lambda: fleet.end_ts)
    yield server
    server.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b
