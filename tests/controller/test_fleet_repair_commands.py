"""The controller carries out every repair its incidents ask for, not only Slurm drains: a configured
command runs for the host on the repair thread and its outcome ends the ledger line; without one the
repair is recorded skipped (never left "requested"), and a repair that never ran does not count toward the
breaker. A real store, a real ingest writer, real processes; time on a fake clock."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetguard.clock import FakeClock
from fleetguard.config import Config, load_config
from fleetguard.controller.fleet_repairs import FleetRepairs
from fleetguard.controller.ingest import IngestWriter
from fleetguard.controller.stats import ControllerStats
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.store import Store
from tests.diagnosis.records import T0, xid

pytestmark = pytest.mark.integration


@dataclass
class Controller:
    store: Store
    clock: FakeClock
    repairs: FleetRepairs

    def fault(self, host: str, at: float) -> None:
        """An XID 79 from `host` stored, the incident round, and the repair thread's pass."""
        self.store.append([xid(79, at, host=host)])
        self.clock.advance(at + 5 - self.clock.time())
        with self.store.transaction() as con:
            self.repairs.incidents_task(con, at + 5)
        self.repairs.carry_out_requested()

    def ledger(self) -> list[tuple[str, str, str, str]]:
        return [
            (str(h), str(a), str(o), str(d))
            for h, a, o, d in self.store.cursor()
            .execute("SELECT host, action, outcome, detail FROM incident_actions ORDER BY requested_at")
            .fetchall()
        ]


@contextlib.contextmanager
def running(tmp_path: Path, **overrides: object) -> Iterator[Controller]:
    config: Config = load_config(
        env={}, overrides={"store.path": str(tmp_path / "fleet.duckdb"), **overrides}
    )
    clock = FakeClock(T0)
    with Store.open(config.store.path) as store:
        writer = IngestWriter(store, clock, ControllerStats())
        writer.start()
        try:
            yield Controller(store, clock, FleetRepairs(writer, IncidentTask(config, clock), config, clock))
        finally:
            writer.stop()


def test_a_configured_repair_command_runs_for_the_host_and_ends_the_ledger_line(tmp_path: Path) -> None:
    done = tmp_path / "rebooted"
    done.mkdir()
    code = "import pathlib, sys; (pathlib.Path(sys.argv[1]) / sys.argv[2]).touch(); print('rebooting')"
    command = [sys.executable, "-c", code, str(done), "{host}"]
    with running(tmp_path, **{"diagnosis.reboot_node_command": command}) as controller:
        controller.fault("gpu-7", T0)
        assert [p.name for p in done.iterdir()] == ["gpu-7"]
        assert controller.ledger() == [("gpu-7", "reboot_node", "succeeded", "rebooting")]


def test_without_a_command_the_repair_is_skipped_and_not_counted_by_the_breaker(tmp_path: Path) -> None:
    with running(tmp_path) as controller:
        controller.fault("a", T0)
        controller.fault("b", T0 + 10)  # two of two hosts: a counted skip would have tripped the breaker
        assert [(h, o) for h, _, o, _ in controller.ledger()] == [("a", "skipped"), ("b", "skipped")]
        assert controller.ledger()[0][3] == "no diagnosis.reboot_node_command configured"
        tripped = controller.store.cursor().execute("SELECT count(*) FROM breaker_state WHERE tripped")
        assert tripped.fetchone() == (0,)
