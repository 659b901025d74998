"""The typed reading of a batch (msgspec against the store's columns) answers every body exactly as the
standard library's reading with its per-column checks does: the same batch, or the same refusal."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetguard.controller import wire_schema
from fleetguard.controller.validate import BatchRefused, IngestBatch, parse_batch, parse_json_batch
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.records.telemetry import Event, EventKind
from fleetguard.shipping.wire import columns_by_table
from fleetguard.store.schema import TABLES
from tests.controller.helpers import batch

NOW = 1_795_000_000.0

# Values at and past each column type's edges, and of every other JSON type.
_EDGES = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            -1,
            1.5,
            -0.0,
            2**31,
            2**63 - 1,
            2**63,
            -(2**63),
            -(2**63) - 1,
            2**64 - 1,
            2**64,
            10**400,
            float("nan"),
            float("inf"),
            NOW,
            NOW + 7200,
            946_684_799.0,
            "",
            "3",
            "GPU-x",
            "\ud800",
            "a\ud83d\ude00",
            "x" * 70_000,
            [],
            [1],
            {"a": 1},
        ]
    ),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)


def _doc(*, findings: bool) -> dict[str, Any]:
    doc = batch("node-a", 7, ts=NOW).to_json()
    tables: dict[str, Any] = doc["tables"]  # type: ignore[assignment]
    extra: list[object] = [Event(NOW, "node-a", EventKind.XID, "kmsg", "Xid 79", code=79, gpu_index=1)]
    if findings:
        extra.append(Finding(NOW, "f-1", FindingKind.STRAGGLER, Severity.WARNING, "gpu/0", "x", host=None))
    tables.update(columns_by_table(extra))
    return doc


def _typed_first(raw: bytes, host: str, *, now: float) -> IngestBatch:
    return parse_batch(raw, host, compressed=False, now=now)


def _as_stored(tables: dict[str, dict[str, list[object]]]) -> dict[str, dict[str, list[object]]]:
    """A DOUBLE column's integers as the floats it stores: the typed reading decodes -2**63 - 1 there as a
    float, the old one kept the int that DuckDB then turned into the same double."""
    out = {}
    for name, columns in tables.items():
        types = {c.name: c.sql_type for c in TABLES[name].columns} if name in TABLES else {}
        out[name] = {
            column: [float(v) if types.get(column) == "DOUBLE" and type(v) is int else v for v in values]
            for column, values in columns.items()
        }
    return out


def _verdict(read: Any, raw: bytes) -> tuple[str, object]:
    try:
        checked: IngestBatch = read(raw, "node-a", now=NOW + 1)
    except BatchRefused as exc:
        return ("refused", exc.reason)
    tables = _as_stored(checked.tables)
    return ("ok", (checked.key, checked.sent_ts, checked.rows, tables, checked.acks))


@settings(max_examples=400, deadline=None)
@given(
    table=st.sampled_from(["gpu_samples", "nic_counters", "events", "findings"]),
    column_pick=st.integers(min_value=0, max_value=100),
    row=st.integers(min_value=0, max_value=1),
    value=_EDGES,
)
def test_a_changed_value_gets_the_same_verdict_on_both_readings(
    table: str, column_pick: int, row: int, value: object
) -> None:
    doc = _doc(findings=table == "findings")
    columns = doc["tables"][table]
    name = sorted(columns)[column_pick % len(columns)]
    values = columns[name]
    values[row % len(values)] = value
    raw = json.dumps(doc).encode()  # NaN and infinity as Python writes them: no JSON reader of ours takes one
    assert _verdict(_typed_first, raw) == _verdict(parse_json_batch, raw)


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(sorted(batch("node-a", 1).to_json())), value=_EDGES)
def test_a_changed_batch_field_gets_the_same_verdict_on_both_readings(key: str, value: object) -> None:
    doc = _doc(findings=False)
    doc[key] = value
    raw = json.dumps(doc).encode()
    assert _verdict(_typed_first, raw) == _verdict(parse_json_batch, raw)


def test_a_good_batch_is_read_by_the_typed_schema() -> None:
    raw = json.dumps(_doc(findings=True)).encode()
    assert wire_schema.decode(raw) is not None
    assert _verdict(_typed_first, raw)[0] == "ok"


def test_a_null_alone_in_a_nullable_integer_column_passes_both_readings() -> None:
    # min() of a single value compares nothing: [None] must not reach a range comparison
    doc = _doc(findings=False)
    doc["tables"]["events"]["pid"] = [None]
    raw = json.dumps(doc).encode()
    assert _verdict(_typed_first, raw) == _verdict(parse_json_batch, raw)
    assert _verdict(_typed_first, raw)[0] == "ok"


def test_an_explicit_null_column_is_refused_like_a_missing_list() -> None:
    doc = _doc(findings=False)
    doc["tables"]["events"]["pid"] = None
    raw = json.dumps(doc).encode()
    assert wire_schema.decode(raw) is None
    assert _verdict(_typed_first, raw)[0] == "refused"
