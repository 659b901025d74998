"""What is open right now, for the fleet page: incidents where the store has them, recent findings before."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

from dash import html

from dashboard.components import Col, ago, href, md_link, table
from dashboard.queries.base import Cursor, tables
from dashboard.queries.findings import FindingRow, recent_findings

FINDINGS_WINDOW_SECONDS: Final = 3600.0
SEVERITIES: Final = ("critical", "warning", "info")


@dataclass(frozen=True)
class OpenProblems:
    title: str
    total: int
    breakdown: Any
    table: Any
    breaker: str
    breaker_note: str


def open_problems(cur: Cursor, now: float) -> OpenProblems:
    present = tables(cur)
    breaker, note = (
        ("—", "no incident engine in this store yet") if "incidents" not in present else ("closed", "")
    )
    findings = recent_findings(cur, now - FINDINGS_WINDOW_SECONDS, now)
    # A finding raised again every round is one problem: keep the newest per (subject, kind).
    newest: dict[tuple[str, str], FindingRow] = {}
    for f in findings:
        newest.setdefault((f.subject, f.kind), f)
    by_severity = Counter(f.severity for f in newest.values())
    rows = [
        {
            "when": ago(now - f.ts),
            "severity": f.severity,
            "kind": f.kind,
            "subject": _subject_link(f.subject, f.host, f.job_id, f.gpu_uuid),
            "summary": f.summary,
        }
        for f in newest.values()
    ]
    cols = [
        Col("when", "when"),
        Col("severity", "severity"),
        Col("kind", "kind"),
        Col("about", "subject", "link"),
        Col("summary", "summary"),
    ]
    chips = [
        html.Span(f"{by_severity[s]} {s}", className=f"chip sev-{s}")
        for s in SEVERITIES
        if by_severity.get(s)
    ]
    return OpenProblems(
        title="Findings (last hour)",
        total=len(newest),
        breakdown=html.Div(chips or [html.Span("none", className="muted")], className="chips"),
        table=table("fleet-problems-table", cols, rows, page_size=10),
        breaker=breaker,
        breaker_note=note,
    )


def _subject_link(subject: str, host: str | None, job_id: str | None, gpu_uuid: str | None) -> str:
    if gpu_uuid:
        return md_link(subject, href("gpus", gpu_uuid))
    if job_id:
        return md_link(subject, href("jobs", job_id))
    if host:
        return md_link(subject, href("hosts", host))
    return subject
