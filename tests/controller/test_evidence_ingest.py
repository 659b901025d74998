"""An agent of the previous version (which built evidence as dicts) ships findings whose evidence this
controller's ingest takes through its size and type checks unchanged, and whose evidence reads back as this
version's records, writing the same text again."""

from __future__ import annotations

import json
from pathlib import Path

from fleetguard.controller.validate import parse_batch
from fleetguard.records.evidence import RECORDS, evidence_json, evidence_of
from fleetguard.records.findings import CONTROLLER_FINDING_KINDS, Finding, FindingKind, Severity
from fleetguard.shipping.wire import columns_by_table
from tests.controller.helpers import batch

NOW = 1_795_000_000.0
PINNED = Path(__file__).resolve().parents[1] / "fixtures" / "evidence_pinned.json"


def previous_agent_findings() -> list[Finding]:
    """Every agent-side kind, its evidence the text the previous version's writers produced."""
    pinned = json.loads(PINNED.read_text())
    out = []
    for i, (fid, row) in enumerate(sorted(pinned.items())):
        kind = FindingKind(row["kind"])
        if kind in CONTROLLER_FINDING_KINDS:
            continue  # an agent may not write these
        text = row["evidence_json"]
        out.append(Finding(NOW - i, fid, kind, Severity.WARNING, "s", "x", "node-a", evidence_json=text))
    return out


def test_a_previous_agent_s_evidence_passes_ingest_and_reads_as_this_version_s_records() -> None:
    findings = previous_agent_findings()
    assert {f.kind for f in findings} == set(FindingKind) - CONTROLLER_FINDING_KINDS
    doc = batch("node-a", 7, ts=NOW).to_json()
    tables = doc["tables"]
    assert isinstance(tables, dict)
    tables.update(columns_by_table(list(findings)))
    checked = parse_batch(json.dumps(doc).encode(), "node-a", compressed=False, now=NOW + 1)
    texts = checked.tables["findings"]["evidence_json"]
    assert texts == [f.evidence_json for f in findings]
    for f in findings:
        record = evidence_of(f)
        assert isinstance(record, RECORDS[f.kind])
        assert evidence_json(record) == f.evidence_json
