"""`fleetguard alerts status` as a document: outbox rows per endpoint and status, the latest errors and the
active silences. Read from a store cursor, by the command on a store nothing holds and by the read API of a
running controller or `up` (GET /v1/alerts) when one does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from fleetguard.alerts.outbox import counts
from fleetguard.alerts.silences import active_silences


def alerts_status(con: duckdb.DuckDBPyConnection, now: float) -> dict[str, Any]:
    by = counts(con)
    errors = con.execute(
        "SELECT endpoint, last_error FROM alert_outbox WHERE last_error <> '' "
        "ORDER BY next_attempt_at DESC LIMIT 5"
    ).fetchall()
    opened = con.execute("SELECT count(*) FROM incidents").fetchone()
    return {
        "incidents_opened": int(opened[0]) if opened else 0,
        "outbox": [{"endpoint": e, "status": s, "count": n} for (e, s), n in sorted(by.items())],
        "errors": [{"endpoint": str(e), "error": str(err)} for e, err in errors],
        "silences": [
            {
                "silence_id": s.silence_id,
                "matches": s.describe(),
                "expires_at": s.expires_at,
                "created_by": s.created_by,
                "reason": s.reason,
            }
            for s in active_silences(con, now)
        ],
    }


def render_alerts_status(doc: dict[str, Any], now: float, webhooks: Sequence[str]) -> str:
    """For a person: the outbox as a table, the latest errors, the silences. `webhooks`: the endpoints the
    configuration names, to say why nothing was sent when incidents opened."""
    header = f"{'ENDPOINT':24s} {'STATUS':10s} {'ALERTS':>8s}"
    lines = [header] if doc["outbox"] else [_nothing_sent(doc, webhooks)]
    for row in doc["outbox"]:
        lines.append(f"{row['endpoint']:24s} {row['status']:10s} {row['count']:>8d}")
    for err in doc["errors"]:
        lines.append(f"  last error {err['endpoint']}: {err['error']}")
    lines.append(f"{len(doc['silences'])} active silence(s)")
    for s in doc["silences"]:
        left = (float(s["expires_at"]) - now) / 60.0
        lines.append(
            f"  {s['silence_id']}  {s['matches']}  {left:.0f} min left  by {s['created_by']}: {s['reason']}"
        )
    return "\n".join(lines) + "\n"


def _nothing_sent(doc: dict[str, Any], webhooks: Sequence[str]) -> str:
    opened = int(doc.get("incidents_opened", 0))
    if not opened:
        return "no alerts yet: no incident has opened"
    if not webhooks:
        return (
            f"no alert sent: {opened} incident(s) opened, and no webhook is configured "
            "([[alerts.webhooks]] in the config file)"
        )
    return f"no alert queued yet: {opened} incident(s) opened (below each webhook's min_severity, or muted)"
