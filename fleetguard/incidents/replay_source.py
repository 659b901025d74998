"""Recorded history from a store, as the rounds a replay feeds to the incident engine."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import duckdb

from diagnosis.rules import Signals
from diagnosis.rules_gpu import GPU_RULE_FIELDS
from fleetguard.incidents.feed import select_records
from fleetguard.records.findings import Finding
from fleetguard.records.telemetry import Event, GpuSample, NicCounterSample, NicSample
from fleetguard.store.incident_tables import epoch_sql, ts_sql

CHUNK_SECONDS = 6 * 3600.0  # read this much history per query
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """'30d', '12h', '90m', '3600' -> seconds."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 30d, 12h, 90m)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def history_span(con: duckdb.DuckDBPyConnection) -> tuple[float, float] | None:
    """The first and last record time of the store's telemetry; None when it holds none."""
    spans = []
    for table in ("events", "gpu_samples", "nic_counters", "findings"):
        try:
            row = con.execute(
                f"SELECT {epoch_sql('min(ts)')}, {epoch_sql('max(ts)')} FROM {table}"
            ).fetchall()
        except duckdb.Error:
            continue
        if row and row[0][0] is not None:
            spans.append((float(row[0][0]), float(row[0][1])))
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans)


def history_rounds(
    con: duckdb.DuckDBPyConnection, since: float, until: float, step_seconds: float
) -> Iterator[tuple[float, Signals]]:
    """Records between `since` and `until` in rounds of `step_seconds`, each with its end time."""
    start = since
    while start < until:
        end = min(start + CHUNK_SECONDS, until)
        where, params = f"ts >= {ts_sql()} AND ts < {ts_sql()}", [start, end]
        chunk: dict[str, Sequence[Any]] = {
            "events": select_records(con, "events", Event, where, params),
            "gpu": select_records(con, "gpu_samples", GpuSample, where, params, GPU_RULE_FIELDS),
            "ports": select_records(con, "nic_samples", NicSample, where, params),
            "counters": select_records(con, "nic_counters", NicCounterSample, where, params),
            "findings": select_records(con, "findings", Finding, where, params),
        }
        yield from _split(chunk, start, end, step_seconds)
        start = end


def _split(
    chunk: dict[str, Sequence[Any]], start: float, end: float, step: float
) -> Iterator[tuple[float, Signals]]:
    buckets: dict[int, dict[str, list[Any]]] = {}
    for name, rows in chunk.items():
        for row in rows:
            index = int((float(row.ts) - start) // step)
            buckets.setdefault(index, {}).setdefault(name, []).append(row)
    for index in sorted(buckets):
        b: dict[str, list[Any]] = {n: [] for n in chunk} | buckets[index]
        yield (
            min(start + (index + 1) * step, end),
            Signals(
                events=b["events"],
                gpu_samples=b["gpu"],
                nic_samples=b["ports"],
                nic_counters=b["counters"],
                findings=b["findings"],
            ),
        )
