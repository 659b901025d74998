"""Evidence capture reads the newest part of each incident's window first and the older part only for the
incidents it left short (fleetguard.incidents.evidence): over random histories in a real store, what it
captures equals one query over the whole window, incident by incident and row by row."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from diagnosis.incident import ChangeKind, Incident, IncidentChange, IncidentState
from diagnosis.model import ComponentKind, IncidentKey, RepairAction, Severity
from fleetguard.incidents import evidence
from fleetguard.incidents.evidence import BEFORE_SECONDS, MAX_ROWS, capture_many
from fleetguard.store import Store
from tests.diagnosis.records import T0, gpu, xid

HOSTS = ("n0", "n1", "n2")


def _incident(n: int, host: str, kind: ComponentKind, component: str, first_seen: float) -> Incident:
    return Incident(
        incident_id=f"inc-{n}",
        key=IncidentKey(host, kind, component, "xid:79"),
        state=IncidentState.OPEN,
        severity=Severity.CRITICAL,
        action=RepairAction.NONE,
        rule="test",
        summary="",
        first_seen=first_seen,
        last_seen=first_seen,
        occurrences=1,
        opened_at=first_seen,
    )


def _reference(store: Store, changes: list[IncidentChange], now: float) -> list[tuple[str, float, str]]:
    """One query per kind over each whole window: what capture gave before it read the newest part first."""
    out: list[tuple[str, float, str]] = []
    for change in changes:
        incident = change.incident
        since = incident.first_seen - BEFORE_SECONDS
        for kind in evidence._ORDER:
            if not evidence._wants(kind, incident):
                continue
            rows = evidence._query(store.cursor(), kind, [incident], [since], [MAX_ROWS], now)
            out += [(r.incident_id, r.ts, r.kind) for _, r in rows]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_capture_equals_one_query_over_the_whole_window(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    now = T0 + 2000.0
    with Store.open(tmp_path / "s.duckdb") as store:
        samples, events = [], []
        for h, host in enumerate(HOSTS):
            step = rng.choice((0.5, 1.0, 3.0, 10.0))  # dense and sparse GPUs: some fill the newest part
            start = now - rng.uniform(60.0, 1200.0)
            ts = start
            while ts <= now + 5:  # a few rows past `now`: never evidence
                samples.append(gpu(ts + h * 0.001, host=host, uuid=f"GPU-{host}"))
                ts += step
            events += [xid(79, now - rng.uniform(0.0, 1100.0), host=host) for _ in range(rng.randint(0, 40))]
        store.append(samples)
        store.append(events)
        changes = []
        for n in range(rng.randint(1, 6)):
            host = rng.choice(HOSTS)
            first_seen = now - rng.choice((0.0, 30.0, 200.0, 500.0))
            incident = _incident(n, host, ComponentKind.GPU, f"GPU-{host}", first_seen)
            changes.append(IncidentChange(incident=incident, kinds=(ChangeKind.OPENED,)))
        captured = [(r.incident_id, r.ts, r.kind) for r in capture_many(store.cursor(), changes, now)]
        expected = _reference(store, changes, now)
    assert [c for c in captured if c[2] != "observation"] == expected
    assert any(kind == "gpu_sample" for _, _, kind in expected)
