"""The ingest wire format, version 1: one gzip-compressed JSON object per batch (docs/controller.md).

    {"v": 1, "host": H, "boot_id": B, "seq": N, "sent_ts": T, "interval_seconds": F, "agent_version": V,
     "tables": {"gpu_samples": {"ts": [...], "host": [...], ...}, ...},
     "acks": [{"id": ..., "outcome": ..., "detail": ...}]}

Tables and columns are the store's (`fleetguard.store.schema.TABLES`), column-major so the controller checks
and inserts a column at a time. Times are UTC epoch seconds. (host, boot_id, seq) names the batch: boot_id is
new each time the agent starts, seq counts its batches from 1, so a batch re-sent after a lost reply is known.
"""

from __future__ import annotations

import gzip
import json
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetguard.shipping.commands import CommandAck
from fleetguard.store.schema import TABLE_BY_RECORD

WIRE_VERSION = 1
CONTENT_TYPE = "application/json"
CONTENT_ENCODING = "gzip"

Columns = dict[str, list[Any]]


@dataclass
class OutgoingBatch:
    host: str
    boot_id: str
    seq: int
    sent_ts: float
    interval_seconds: float
    agent_version: str
    tables: dict[str, Columns] = field(default_factory=dict)
    acks: list[CommandAck] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "v": WIRE_VERSION,
            "host": self.host,
            "boot_id": self.boot_id,
            "seq": self.seq,
            "sent_ts": self.sent_ts,
            "interval_seconds": self.interval_seconds,
            "agent_version": self.agent_version,
            "tables": self.tables,
            "acks": [a.to_json() for a in self.acks],
        }


def columns_by_table(records: Iterable[object]) -> dict[str, Columns]:
    """Record dataclasses as column lists per table (the order of records kept within each table)."""
    by_table: dict[str, list[object]] = {}
    for record in records:
        table = TABLE_BY_RECORD.get(type(record))
        if table is None:
            raise TypeError(f"no table stores records of type {type(record).__name__}")
        by_table.setdefault(table.name, []).append(record)
    out: dict[str, Columns] = {}
    for name, rows in by_table.items():
        names = TABLE_BY_RECORD[type(rows[0])].column_names
        out[name] = _transpose(names, rows)
    return out


def _transpose(names: Sequence[str], rows: Sequence[object]) -> Columns:
    getter = operator.attrgetter(*names)
    if len(names) == 1:
        return {names[0]: [getter(r) for r in rows]}
    return {n: list(values) for n, values in zip(names, zip(*map(getter, rows), strict=True), strict=True)}


def encode(batch: OutgoingBatch, level: int = 6) -> bytes:
    """The request body: compact JSON, gzip-compressed. NaN and infinity are refused here (JSON has none)."""
    text = json.dumps(batch.to_json(), separators=(",", ":"), allow_nan=False)
    return gzip.compress(text.encode(), compresslevel=level, mtime=0)
