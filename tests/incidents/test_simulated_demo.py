"""The simulated demo's scripted faults (as `fleetguard up --simulate` runs them) become incidents with
evidence and actions, on a fake clock: collectors -> store -> feed -> incident service, every 5 s."""

from __future__ import annotations

from collectors.protocol import Collector
from collectors.simulated import (
    SimulatedFleet,
    SimulatedGpuCollector,
    SimulatedKmsgCollector,
    SimulatedNicCollector,
    default_demo_faults,
)
from fleetguard.incidents.feed import StoreFeed
from fleetguard.incidents.repairs import RepairExecutor
from fleetguard.incidents.service import IncidentService
from fleetguard.records.telemetry import Batch
from fleetguard.settings.diagnosis import DiagnosisConfig
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from tests.diagnosis.records import T0


def test_the_demo_faults_become_incidents_with_evidence_and_actions(store: Store) -> None:
    shape = SimulatedFleet(8, 8, seed=0, start_ts=T0)
    fleet = SimulatedFleet(8, 8, seed=0, start_ts=T0, faults=default_demo_faults(shape))
    collectors: list[Collector] = [
        SimulatedGpuCollector(fleet),
        SimulatedNicCollector(fleet),
        SimulatedKmsgCollector(fleet),
    ]
    service = IncidentService.open(
        store.cursor(), load_policy(), T0, executor=RepairExecutor(DiagnosisConfig())
    )
    feed = StoreFeed.open(store.cursor())
    for second in range(0, 200):
        now = T0 + second
        batch = Batch()
        for collector in collectors:
            batch.extend(collector.collect(now))
        store.append([*batch.gpu_samples, *batch.nic_samples, *batch.nic_counters, *batch.events])
        if second % 5 == 4:
            service.round(feed.read(now), now)
    con = store.connection
    faults = {str(r[0]) for r in con.execute("SELECT DISTINCT fault FROM incidents").fetchall()}
    # ThermalThrottle, EccRampThenDbe, NvlinkCrcBurst, IbSymbolErrors, IbLinkFlap, GpuFallOffBus:
    assert {"throttle:thermal", "nvlink:crc_rate", "nic:symbol_error", "nic:link_downed"} <= faults
    assert {"ecc:uncorrected", "xid:48"} & faults
    assert {"xid:79", "event:gpu_fallen_off_bus", "event:gpu_lost"} & faults
    evidence = dict(con.execute("SELECT kind, count(*) FROM incident_evidence GROUP BY kind").fetchall())
    assert evidence.get("observation", 0) > 0 and evidence.get("gpu_sample", 0) > 0
    assert evidence.get("kernel_log", 0) > 0 and evidence.get("nic_counter", 0) > 0
    ledger = con.execute("SELECT DISTINCT action, outcome FROM incident_actions").fetchall()
    # No command is configured: recorded as skipped. A repair that never ran counts neither toward the
    # breaker nor the rate limit, so nothing is held or deferred (the demo used to trip on its own skips).
    assert ("reboot_node", "skipped") in set(ledger)
    assert {outcome for _, outcome in ledger} == {"skipped"}, ledger
    assert con.execute("SELECT count(*) FROM breaker_state WHERE tripped").fetchone() == (0,)
