"""What is open right now, for the fleet page: active incidents where the incident engine writes this store,
else the findings of the last hour (a store from before incidents, or one without the engine)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from dash import html

from dashboard.components import Col, ago, gpu_text, href, md_link, table, when
from dashboard.queries.base import Cursor, tables
from dashboard.queries.findings import FindingRow, recent_findings
from dashboard.queries.incidents import IncidentRow, active_by_severity, breaker, incidents

FINDINGS_WINDOW_SECONDS: Final = 3600.0
SEVERITIES: Final = ("critical", "warning", "info")
SHOWN: Final = 12


@dataclass(frozen=True)
class OpenProblems:
    title: str
    total: int
    breakdown: Any
    table: Any
    breaker: str
    breaker_note: str


def _chips(by_severity: Counter[str] | dict[str, int]) -> html.Div:
    chips = [
        html.Span(f"{by_severity[s]} {s}", className=f"chip sev-{s}")
        for s in SEVERITIES
        if by_severity.get(s)
    ]
    return html.Div(chips or [html.Span("none", className="muted")], className="chips")


def open_problems(cur: Cursor, now: float, gpu_names: Mapping[str, str]) -> OpenProblems:
    """`gpu_names`: uuid -> "GPU <index>", so an incident on a GPU names it as it sits in its host."""
    if "incidents" in tables(cur):
        return _from_incidents(cur, now, gpu_names)
    return _from_findings(cur, now)


def _from_incidents(cur: Cursor, now: float, gpu_names: Mapping[str, str]) -> OpenProblems:
    counts = active_by_severity(cur)
    active = [r for r in incidents(cur, now) if r.state in ("open", "acting")][:SHOWN]
    state = breaker(cur)
    if state is None:
        shown, note = "closed", "no repair held"
    elif state.tripped:
        shown, note = "OPEN", f"since {when(state.tripped_at)}: {state.reason} (fleetguard breaker reset)"
    else:
        shown, note = "closed", "repairs allowed"
    return OpenProblems(
        title="Open incidents",
        total=sum(counts.values()),
        breakdown=_chips(counts),
        table=_incident_table(active, now, gpu_names),
        breaker=shown,
        breaker_note=note,
    )


def _incident_table(rows: list[IncidentRow], now: float, gpu_names: Mapping[str, str]) -> Any:
    data = [
        {
            "incident": md_link(r.fault, href("incidents", r.incident_id)),
            "severity": r.severity,
            "state": r.state,
            "host": md_link(r.host, href("hosts", r.host)),
            "component": _component(r, gpu_names),
            "summary": r.summary[:160],
            "count": r.occurrences,
            "last": ago(now - r.last_seen),
        }
        for r in rows
    ]
    cols = [
        Col("incident", "incident", "link"),
        Col("severity", "severity"),
        Col("state", "state"),
        Col("host", "host", "link"),
        Col("component", "component", "link"),
        Col("summary", "summary", wide=True),
        Col("count", "count", "int"),
        Col("last seen", "last"),
    ]
    return table("fleet-problems-table", cols, data, page_size=SHOWN)


def _component(r: IncidentRow, gpu_names: Mapping[str, str]) -> str:
    if r.component_kind == "gpu":
        return md_link(gpu_text(r.component_id, gpu_names), href("gpus", r.component_id))
    return f"{r.component_id} ({r.component_kind})"


def _from_findings(cur: Cursor, now: float) -> OpenProblems:
    findings = recent_findings(cur, now - FINDINGS_WINDOW_SECONDS, now)
    # A finding raised again every round is one problem: keep the newest per (subject, kind).
    newest: dict[tuple[str, str], FindingRow] = {}
    for f in findings:
        newest.setdefault((f.subject, f.kind), f)
    rows = [
        {
            "when": ago(now - f.ts),
            "severity": f.severity,
            "kind": f.kind,
            "subject": _subject_link(f),
            "summary": f.summary,
        }
        for f in newest.values()
    ]
    cols = [
        Col("when", "when"),
        Col("severity", "severity"),
        Col("kind", "kind"),
        Col("about", "subject", "link"),
        Col("summary", "summary", wide=True),
    ]
    return OpenProblems(
        title="Findings (last hour)",
        total=len(newest),
        breakdown=_chips(Counter(f.severity for f in newest.values())),
        table=table("fleet-problems-table", cols, rows, page_size=10),
        breaker="—",
        breaker_note="no incident engine in this store",
    )


def _subject_link(f: FindingRow) -> str:
    if f.gpu_uuid:
        return md_link(f.subject, href("gpus", f.gpu_uuid))
    if f.job_id:
        return md_link(f.subject, href("jobs", f.job_id))
    if f.host:
        return md_link(f.subject, href("hosts", f.host))
    return f.subject
