"""A small fleet store for the dashboard tests: 4 simulated hosts x 4 GPUs x 2 ports over 5 minutes with
scripted faults, one host that went silent, one training job with a straggler, risk scores, a finding and
an action. Built with the simulator and the store's own write path, at a fixed end time."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from collectors.protocol import Collector
from collectors.simulated import (
    EccRampThenDbe,
    GpuFallOffBus,
    IbLinkFlap,
    SimulatedFleet,
    SimulatedGpuCollector,
    SimulatedKmsgCollector,
    SimulatedNicCollector,
    ThermalThrottle,
)
from collectors.simulated_faults import FaultScript
from fleetguard.records.action_requests import ActionKind
from fleetguard.records.findings import ActionOutcome, ActionRecord, Finding, FindingKind, Severity
from fleetguard.records.prediction import Prediction
from fleetguard.records.runtime import Heartbeat, StepTiming
from fleetguard.records.telemetry import Batch, GpuSample
from fleetguard.store import Store

END_TS = 1_790_000_000.0
SPAN_SECONDS = 300.0
STEP_SECONDS = 5.0
JOB_ID = "train-42"
SLOW_RANK = 5
DEAD_RANK = 6
SILENT_HOST = "sim-host-silent"
ALERT_ENDPOINT = "http://127.0.0.1:9/oncall"


@dataclass(frozen=True)
class BuiltFleet:
    path: Path
    end_ts: float
    hosts: list[str]
    failed_gpu_uuid: str  # ECC ramp then a double-bit error (XID 48, fatal)
    lost_gpu_uuid: str  # fell off the bus
    hot_gpu_uuid: str  # thermal throttle still on at the end
    flapping_port: tuple[str, str]  # (host, device)
    at_risk_uuid: str
    at_risk_score: float
    finding_id: str


def build_fleet_store(path: Path) -> BuiltFleet:
    start = END_TS - SPAN_SECONDS
    faults: list[FaultScript] = [
        EccRampThenDbe(host=1, gpu=2, start_seconds=30, ramp_seconds=100, corrected_errors=300),
        GpuFallOffBus(host=3, gpu=3, start_seconds=170),
        ThermalThrottle(host=2, gpu=0, start_seconds=150, duration_seconds=400, ramp_seconds=40),
        IbLinkFlap(host=0, port=1, start_seconds=240, down_seconds=8),
    ]
    fleet = SimulatedFleet(4, 4, ports_per_host=2, seed=7, faults=faults, start_ts=start)
    collectors: list[Collector] = [
        SimulatedGpuCollector(fleet),
        SimulatedNicCollector(fleet),
        SimulatedKmsgCollector(fleet),
    ]
    with Store.open(path) as store:
        t = start
        while t <= END_TS:
            batch = Batch()
            for c in collectors:
                batch.extend(c.collect(t))
            store.append([*batch.gpu_samples, *batch.nic_samples, *batch.nic_counters, *batch.events])
            if t <= END_TS - 200:  # then it stops reporting
                store.append([GpuSample(ts=t, host=SILENT_HOST, gpu_index=0, uuid="GPU-silent-0000")])
            t += STEP_SECONDS
        store.append(_job_records(fleet.host_names, start))
        at_risk = fleet.gpu(0, 1).uuid
        predictions = [
            Prediction(
                END_TS - 30, h.name, g.uuid, 0.91 if g.uuid == at_risk else 0.05, 1, "demo-model", 24.0
            )
            for h in fleet.hosts
            for g in h.gpus
        ]
        finding = Finding(
            ts=END_TS - 20,
            finding_id="straggler/train-42/5/10/3",
            kind=FindingKind.STRAGGLER,
            severity=Severity.WARNING,
            subject=f"job/{JOB_ID}/rank/{SLOW_RANK}",
            summary=f"rank {SLOW_RANK} of job {JOB_ID} is 1.60x its peers' median over 3 windows",
            host=fleet.host_names[1],
            job_id=JOB_ID,
            rank=SLOW_RANK,
            evidence_json=json.dumps({"score": 0.6}),
        )
        action = ActionRecord(
            END_TS - 10,
            "act-1",
            ActionKind.CHECKPOINT,
            f"job/{JOB_ID}",
            finding.finding_id,
            ActionOutcome.SUCCEEDED,
        )
        dead = Finding(
            ts=END_TS - 15,
            finding_id=f"dead_rank/{JOB_ID}/{DEAD_RANK}",
            kind=FindingKind.DEAD_RANK,
            severity=Severity.CRITICAL,
            subject=f"job/{JOB_ID}/rank/{DEAD_RANK}",
            summary=f"rank {DEAD_RANK} of job {JOB_ID} exited (pid gone)",
            host=fleet.host_names[1],
            job_id=JOB_ID,
            rank=DEAD_RANK,
        )
        store.append([*predictions, finding, dead, action])
        _run_incident_engine(store, start)
    return BuiltFleet(
        path=path,
        end_ts=END_TS,
        hosts=[*fleet.host_names, SILENT_HOST],
        failed_gpu_uuid=fleet.gpu(1, 2).uuid,
        lost_gpu_uuid=fleet.gpu(3, 3).uuid,
        hot_gpu_uuid=fleet.gpu(2, 0).uuid,
        flapping_port=(fleet.host_names[0], "mlx5_1"),
        at_risk_uuid=at_risk,
        at_risk_score=0.91,
        finding_id=finding.finding_id,
    )


def _job_records(hosts: list[str], start: float) -> list[object]:
    """8 ranks on the first two hosts, one step every 10 s; rank 5 takes 1.6x as long."""
    out: list[object] = []
    for step in range(int(SPAN_SECONDS // 10)):
        ts = start + 10.0 * step + 5.0
        for rank in range(8):
            host = hosts[rank // 4]
            seconds = 1.0 * (1.6 if rank == SLOW_RANK else 1.0) + 0.01 * (step % 3)
            out.append(Heartbeat(ts, host, JOB_ID, rank, rank % 4, 8, 1000 + rank, step, "step"))
            out.append(StepTiming(ts, host, JOB_ID, rank, step, "forward_backward", seconds))
    return out


def _run_incident_engine(store: Store, start: float) -> None:
    """The real incident engine over the stored history, as `fleetguard up` runs it: incidents with their
    evidence and action ledger, and alerts to one webhook, of which the relay's bookkeeping then records one
    delivered, one dead-lettered and one waiting for a retry."""
    from fleetguard.alerts.outbox import AlertStatus, due, record_attempt
    from fleetguard.incidents.feed import StoreFeed
    from fleetguard.incidents.service import IncidentService
    from fleetguard.settings.alerts import WebhookConfig
    from fleetguard.settings.policy_files import load_policy

    webhook = WebhookConfig(name="oncall", url=ALERT_ENDPOINT)
    service = IncidentService.open(store.cursor(), load_policy(), start, webhooks=[webhook])
    service.round(StoreFeed.open(store.cursor()).read(END_TS), END_TS)
    cur = store.cursor()
    outcomes = [
        (200, "delivered", "", AlertStatus.DELIVERED),
        (410, "gone", "410 Gone", AlertStatus.DEAD),
        (503, "retry", "503 Service Unavailable", AlertStatus.PENDING),
    ]
    for alert, (code, outcome, error, status) in zip(due(cur, END_TS), outcomes, strict=False):
        record_attempt(
            cur,
            alert,
            now=END_TS - 5,
            status_code=code,
            outcome=outcome,
            error=error,
            duration_seconds=0.05,
            new_status=status,
            next_attempt_at=END_TS + 30,
        )
