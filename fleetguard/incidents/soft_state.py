"""The incident engine's state between rounds that the incident tables do not hold (faults below their
thresholds, incidents clearing), stored with each round and taken back on start
(fleetguard.store.diagnosis_state_tables)."""

from __future__ import annotations

import json

import duckdb

from diagnosis.engine import IncidentEngine
from diagnosis.model import IncidentKey
from diagnosis.pending import pending_from_dict, pending_to_dict


def save_soft_state(con: duckdb.DuckDBPyConnection, engine: IncidentEngine) -> None:
    """What changed since the last save: a few rows a round (most samples change nothing pending), written
    as one DELETE and one INSERT per table whatever their number."""
    pending, clearing = engine.take_soft_changes()
    if pending:
        kept = [(k.text(), p) for k, p in pending.items() if p is not None]
        con.execute(
            "DELETE FROM diagnosis_pending WHERE incident_key IN (SELECT unnest(?::VARCHAR[]))",
            [[k.text() for k in pending]],
        )
        con.execute(
            "INSERT INTO diagnosis_pending SELECT unnest(?::VARCHAR[]), unnest(?::DOUBLE[]), "
            "unnest(?::VARCHAR[])",
            [
                [k for k, _ in kept],
                [p.first_seen for _, p in kept],
                [json.dumps(pending_to_dict(p), separators=(",", ":")) for _, p in kept],
            ],
        )
    if clearing:
        cleared = [(i, t) for i, t in clearing.items() if t is not None]
        con.execute(
            "DELETE FROM diagnosis_clearing WHERE incident_id IN (SELECT unnest(?::VARCHAR[]))",
            [list(clearing)],
        )
        con.execute(
            "INSERT INTO diagnosis_clearing SELECT unnest(?::VARCHAR[]), unnest(?::DOUBLE[])",
            [[i for i, _ in cleared], [t for _, t in cleared]],
        )


def load_soft_state(con: duckdb.DuckDBPyConnection, engine: IncidentEngine) -> None:
    pending = con.execute(
        "SELECT incident_key, state_json FROM diagnosis_pending ORDER BY first_seen, incident_key"
    ).fetchall()
    clearing = con.execute("SELECT incident_id, cleared_at FROM diagnosis_clearing").fetchall()
    engine.restore_soft(
        ((IncidentKey.parse(k), pending_from_dict(json.loads(s))) for k, s in pending),
        ((str(i), float(t)) for i, t in clearing),
    )
