"""Silences in the store (`alert_silences`): set, ended, and read by the relay before each send."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence

import duckdb

from fleetguard.alerts.silence_rules import (
    MAX_REASON_CHARS,
    MAX_SILENCE_SECONDS,
    MIN_SILENCE_SECONDS,
    Matchers,
    Silence,
    parse_matchers,
)
from fleetguard.records.rows import number, number_or_none
from fleetguard.store.incident_tables import epoch_sql, ts_sql

MAX_ACTIVE_SILENCES = 1000  # the relay reads them all before each round: bounded
_COLUMNS = (
    f"silence_id, matchers_json, created_by, reason, {epoch_sql('created_at')}, {epoch_sql('expires_at')}, "
    f"{epoch_sql('ended_at')}"
)


def add_silence(
    con: duckdb.DuckDBPyConnection,
    matchers: Matchers,
    created_by: str,
    reason: str,
    now: float,
    seconds: float,
) -> Silence:
    """Record a silence; ValueError when too many are active already."""
    if len(active_silences(con, now)) >= MAX_ACTIVE_SILENCES:
        raise ValueError(f"{MAX_ACTIVE_SILENCES} silences are active already: end some first")
    silence = Silence(
        silence_id="sil_" + uuid.uuid4().hex[:12],
        matchers=matchers,
        created_by=" ".join(created_by.split())[:100] or "unknown",
        reason=" ".join(reason.split())[:MAX_REASON_CHARS],
        created_at=now,
        expires_at=now + seconds,
    )
    con.execute(
        f"INSERT INTO alert_silences VALUES (?, ?, ?, ?, {ts_sql()}, {ts_sql()}, NULL)",
        [
            silence.silence_id,
            json.dumps([list(m) for m in matchers]),
            silence.created_by,
            silence.reason,
            silence.created_at,
            silence.expires_at,
        ],
    )
    return silence


def end_silence(con: duckdb.DuckDBPyConnection, silence_id: str, now: float) -> bool:
    """End an active silence now; False when there is no such active silence."""
    row = con.execute(
        f"UPDATE alert_silences SET ended_at = {ts_sql()} WHERE silence_id = ? AND ended_at IS NULL "
        f"AND expires_at > {ts_sql()}",
        [now, silence_id, now],
    ).fetchall()
    return bool(row and row[0][0])


def apply_request(con: duckdb.DuckDBPyConnection, payload: dict[str, object], now: float) -> list[str]:
    """Carry out queued `alerts silence` / `unsilence` operations (left while the store was in use); one
    line per operation for the log. A malformed operation is skipped with its reason, never raised."""
    ops = payload.get("ops")
    done: list[str] = []
    for op in ops if isinstance(ops, list) else []:
        try:
            done.append(_apply(con, op, now))
        except (ValueError, TypeError, KeyError) as exc:
            done.append(f"silence request skipped: {exc}")
    return done


def _apply(con: duckdb.DuckDBPyConnection, op: object, now: float) -> str:
    if not isinstance(op, dict):
        raise ValueError("not an operation")
    if op.get("op") == "end":
        ident = str(op["silence_id"])
        return f"silence {ident} " + ("ended" if end_silence(con, ident, now) else "was not active")
    matchers = parse_matchers([str(m) for m in op["match"]])
    seconds = float(op["seconds"])
    if not (math.isfinite(seconds) and MIN_SILENCE_SECONDS <= seconds <= MAX_SILENCE_SECONDS):
        raise ValueError("a silence lasts from 1 minute to 30 days")
    asked = float(op.get("at", now))
    if not math.isfinite(asked) or asked > now + 60.0:
        asked = now  # a time that cannot be when the operator asked: count from now
    # It started when the operator asked, not when it was taken (never longer than asked for).
    remaining = min(seconds, asked + seconds - now)
    if remaining <= 0:
        return "silence request expired before it was taken"
    silence = add_silence(con, matchers, str(op.get("by", "")), str(op.get("reason", "")), now, remaining)
    return f"silence {silence.silence_id} set by {silence.created_by}: {silence.describe()}"


def active_silences(con: duckdb.DuckDBPyConnection, now: float) -> list[Silence]:
    rows = con.execute(
        f"SELECT {_COLUMNS} FROM alert_silences WHERE ended_at IS NULL AND expires_at > {ts_sql()} "
        f"ORDER BY created_at LIMIT {MAX_ACTIVE_SILENCES}",
        [now],
    ).fetchall()
    return [s for s in (_silence(r) for r in rows) if s is not None]


def _silence(r: Sequence[object]) -> Silence | None:
    try:
        raw = json.loads(str(r[1]))
        matchers = tuple((str(k), str(v)) for k, v in raw)
    except (ValueError, TypeError):
        return None  # unreadable: never mutes anything
    return Silence(
        silence_id=str(r[0]),
        matchers=matchers,
        created_by=str(r[2]),
        reason=str(r[3]),
        created_at=number(r[4]),
        expires_at=number(r[5]),
        ended_at=number_or_none(r[6]),
    )
