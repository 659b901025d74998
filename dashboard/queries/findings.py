"""Findings (what analysis concluded) and actions (what was done): recent lists and counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dashboard.queries.base import TS, Cursor, fetch

MAX_ROWS: Final = 500


@dataclass(frozen=True, slots=True)
class FindingRow:
    ts: float
    finding_id: str
    kind: str
    severity: str
    subject: str
    summary: str
    host: str | None
    job_id: str | None
    rank: int | None
    gpu_uuid: str | None
    evidence_json: str


_FINDINGS_SQL: Final = f"""
SELECT epoch(ts), finding_id, kind, severity, subject, summary, host, job_id, rank, gpu_uuid, evidence_json
FROM findings
WHERE ts >= {TS} AND ts <= {TS}
  AND (? IS NULL OR host = ?) AND (? IS NULL OR job_id = ?) AND (? IS NULL OR gpu_uuid = ?)
ORDER BY ts DESC LIMIT {MAX_ROWS}
"""


def recent_findings(
    cur: Cursor,
    since: float,
    until: float,
    *,
    host: str | None = None,
    job_id: str | None = None,
    gpu_uuid: str | None = None,
) -> list[FindingRow]:
    rows = fetch(cur, _FINDINGS_SQL, [since, until, host, host, job_id, job_id, gpu_uuid, gpu_uuid])
    return [
        FindingRow(
            float(r[0]),
            str(r[1]),
            str(r[2]),
            str(r[3]),
            str(r[4]),
            str(r[5]),
            r[6],
            r[7],
            r[8],
            r[9],
            str(r[10]),
        )
        for r in rows
    ]
