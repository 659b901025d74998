"""Wire version 2 at the controller: a batch reads as version 1's (fuzzed parity; in the store too, through
edge processes and the journal), and every malformation a hostile agent can build is refused with one line
naming the right reason, never with any other exception."""

from __future__ import annotations

import copy
import gzip
import json
import math
import time
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetguard.clock import FakeClock, SystemClock
from fleetguard.controller.edge_pool import EdgePool
from fleetguard.controller.ingest import IngestResult, IngestWriter, Pending
from fleetguard.controller.journal import SUFFIX, Journal, JournalEntry
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal, parse_batch
from fleetguard.controller.wire_v2_schema import MAX_TABLE_ROWS
from fleetguard.records.telemetry import Event, EventKind
from fleetguard.shipping.wire import OutgoingBatch, columns_by_table, encode
from fleetguard.shipping.wire_v2 import NotInV2, encode_v2
from fleetguard.store import Store
from fleetguard.store.schema import TABLES, Column
from tests.controller.helpers import batch, gpu_rows, metric_value, start_test_controller

HOST = "node-a"
NOW = 1_795_000_000.0
# The tables fuzzed: the three that travel as arrays, and one that travels as version 1's lists.
FUZZED = ("gpu_samples", "nic_samples", "nic_counters", "events")
NASTY: list[object] = [
    None,
    math.nan,
    math.inf,
    -math.inf,
    2**63,
    2**64,
    -(2**63) - 1,
    10**400,
    True,
    1.5,
    "3",
    "",
    -1,
    5.0,  # a time before 2000
    NOW + 7200,  # a time two hours ahead of the controller's clock
    "node-b",  # another host's name
    "t\ud800",  # a lone surrogate
    "x" * 70_000,  # longer than any VARCHAR takes
]


def _valid(column: Column) -> st.SearchStrategy[Any]:
    if column.name == "host":
        return st.just(HOST)
    if column.sql_type == "TIMESTAMP":
        return st.one_of(st.floats(NOW - 86400, NOW), st.integers(int(NOW) - 86400, int(NOW)))
    if column.sql_type == "VARCHAR":
        return st.text("abcé€😀", max_size=4)
    if column.sql_type == "BIGINT":
        return st.integers(-(2**63), 2**63 - 1)
    if column.sql_type == "UBIGINT":
        return st.integers(0, 2**64 - 1)
    if column.sql_type == "DOUBLE":
        return st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(10**6), 10**6))
    if column.sql_type == "BOOLEAN":
        return st.booleans()
    raise AssertionError(f"no values for {column.sql_type}")


@st.composite
def _columns(draw: st.DrawFn, name: str, nasty: bool) -> dict[str, list[Any]]:
    table = TABLES[name]
    rows = draw(st.integers(1, 4))
    present = [c for c in table.columns if c.required or draw(st.integers(0, 3)) == 0]
    out: dict[str, list[Any]] = {}
    for column in present:
        values = [draw(_valid(column)) for _ in range(rows)]
        if nasty and draw(st.integers(0, 9)) == 0:
            values[draw(st.integers(0, rows - 1))] = draw(st.sampled_from(NASTY))
        if nasty and column.nullable and draw(st.integers(0, 5)) == 0:
            values = [None if draw(st.booleans()) else v for v in values]
        out[column.name] = values
    return out


@st.composite
def _batches(draw: st.DrawFn, nasty: bool = True) -> OutgoingBatch:
    names = draw(st.lists(st.sampled_from(FUZZED), min_size=1, max_size=len(FUZZED), unique=True))
    tables = {name: draw(_columns(name, nasty)) for name in names}
    return OutgoingBatch(HOST, "boot-1", draw(st.integers(1, 10**6)), NOW, 5.0, "test", tables)


def _v1(b: OutgoingBatch) -> bytes:
    """Version 1 as the agent sends it: a non-finite float as NULL (`spool_buffer._without_non_finite`)."""
    finite = copy.deepcopy(b)
    for columns in finite.tables.values():
        for values in columns.values():
            values[:] = [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]
    return encode(finite)


def _normal(values: Any) -> list[Any]:
    listed = values.tolist() if isinstance(values, np.ndarray) else list(values)
    return [None if isinstance(v, float) and math.isnan(v) else v for v in listed]


def _read(body: bytes, host: str = HOST) -> tuple[str, object]:
    """What the controller makes of a body: its batch in plain lists (NULL None), or the refusal's reason."""
    try:
        b = parse_batch(body, host, now=NOW)
    except BatchRefused as exc:
        assert "\n" not in exc.message, exc.message
        return "refused", exc.reason
    return "accepted", _plain(b)


def _plain(b: IngestBatch) -> object:
    tables = {name: {c: _normal(v) for c, v in columns.items()} for name, columns in b.tables.items()}
    return (b.key, b.sent_ts, b.interval_seconds, b.agent_version, b.rows, tables, b.acks)


def _inexpressible(b: OutgoingBatch) -> bool:
    """A value msgpack cannot carry: the agent sends such a batch as version 1."""
    values = [v for columns in b.tables.values() for vs in columns.values() for v in vs]
    return any(
        (type(v) is int and not -(2**63) <= v < 2**64) or (type(v) is str and "\ud800" in v) for v in values
    )


@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_batches())
def test_a_batch_reads_the_same_in_both_versions_or_is_refused_for_the_same_reason(b: OutgoingBatch) -> None:
    v1 = _read(_v1(b))
    try:
        body = encode_v2(b)
    except NotInV2:
        assert _inexpressible(b)
        assert v1 == ("refused", Refusal.INVALID_VALUE)  # version 1 carries it, and is refused for it
        return
    assert _read(body) == v1


@settings(max_examples=30, derandomize=True, deadline=None)
@given(_batches(nasty=False))
def test_a_valid_batch_is_accepted_in_both_versions(b: OutgoingBatch) -> None:
    v1 = _read(_v1(b))
    assert v1[0] == "accepted"
    assert _read(encode_v2(b)) == v1


# ---- malformations only version 2 can carry ----------------------------------------------------------------


def _doc(b: OutgoingBatch | None = None) -> dict[str, Any]:
    """A valid version-2 body as the map it encodes, to spoil by hand."""
    doc: dict[str, Any] = msgspec.msgpack.decode(gzip.decompress(encode_v2(b or batch(HOST, 1, ts=NOW))))
    return doc


def _refused(doc: object) -> BatchRefused:
    with pytest.raises(BatchRefused) as caught:
        parse_batch(msgspec.msgpack.encode(doc), HOST, compressed=False, now=NOW)
    assert "\n" not in caught.value.message and caught.value.message
    return caught.value


def _gpu(doc: dict[str, Any]) -> dict[str, Any]:
    table: dict[str, Any] = doc["tables"]["gpu_samples"]
    return table


def test_the_document_spoiled_here_is_valid_as_it_is() -> None:
    assert parse_batch(msgspec.msgpack.encode(_doc()), HOST, compressed=False, now=NOW).rows == 3


def _listed(table: dict[str, Any], **columns: list[Any]) -> None:
    """`columns` sent as version 1's lists (as the encoder does for a value no array type holds)."""
    for name, values in columns.items():
        table["numbers"].pop(name, None)
        table["texts"].pop(name, None)
        table["columns"][name] = values


def _floats(*values: float) -> bytes:
    return np.array(values, dtype="<f8").tobytes()


def _codes(*codes: int) -> bytes:
    return np.array(codes, dtype="<u4").tobytes()


MALFORMED_CASES: dict[str, Any] = {
    "an array one value short": lambda d: _gpu(d)["numbers"].update(ts=_floats(NOW)),
    "an array not a whole number of values": lambda d: _gpu(d)["numbers"].update(ts=_floats(NOW, NOW)[:-1]),
    "codes one short": lambda d: _gpu(d)["texts"]["uuid"].update(codes=_codes(1)),
    "a code past the values": lambda d: _gpu(d)["texts"]["uuid"].update(codes=_codes(1, 3)),
    "more values than rows": lambda d: _gpu(d)["texts"]["uuid"].update(values=["a", "b", "c"]),
    "a number array for a VARCHAR column": lambda d: _gpu(d)["numbers"].update(name=_floats(1, 2)),
    "a number array for a BOOLEAN column": lambda d: _gpu(d)["numbers"].update(
        retired_pages_pending=_floats(1, 2)
    ),
    "a texts column that is not VARCHAR": lambda d: _gpu(d)["texts"].update(
        power_watts={"values": ["1"], "codes": _codes(1, 1)}
    ),
    "an unknown number column": lambda d: _gpu(d)["numbers"].update(nope=_floats(1, 2)),
    "a column in numbers and columns": lambda d: _gpu(d).update(columns={"gpu_index": [0, 1]}),
    "a column in texts and columns": lambda d: _gpu(d).update(columns={"uuid": ["a", "b"]}),
    "a column in numbers and texts": lambda d: _gpu(d)["texts"].update(
        ts={"values": ["a"], "codes": _codes(1, 1)}
    ),
    "numbers in a table that sends lists": lambda d: d["tables"].update(
        findings={"rows": 1, "numbers": {"ts": _floats(NOW)}}
    ),
    "texts in a table that sends lists": lambda d: d["tables"].update(
        events={"rows": 1, "texts": {"kind": {"values": ["x"], "codes": _codes(1)}}}
    ),
    "rows past the bound": lambda d: _gpu(d).update(rows=MAX_TABLE_ROWS + 1),
    "negative rows": lambda d: _gpu(d).update(rows=-1),
    "v 1 in msgpack": lambda d: d.update(v=1),
    "v 3": lambda d: d.update(v=3),
    "an unknown key": lambda d: d.update(extra=1),
    "an unknown table key": lambda d: _gpu(d).update(extra={}),
    "an unknown texts key": lambda d: _gpu(d)["texts"]["uuid"].update(extra=1),
    "an unknown table": lambda d: d["tables"].update(nope={"rows": 0}),
    "numbers as a list": lambda d: _gpu(d)["numbers"].update(ts=[NOW, NOW]),
    "codes as a list": lambda d: _gpu(d)["texts"]["uuid"].update(codes=[1, 1]),
    "a table without rows": lambda d: _gpu(d).pop("rows"),
    "tables as a list": lambda d: d.update(tables=[]),
    "a missing key": lambda d: d.pop("seq"),
    "an ack that is not a map": lambda d: d.update(acks=[1]),
    "an ack whose outcome is a list": lambda d: d.update(acks=[{"id": "x", "outcome": [1]}]),
    "an ack whose outcome is a map": lambda d: d.update(acks=[{"id": "x", "outcome": {"a": 1}}]),
    "keys that are not names": lambda d: d.update({1: 1, "x": 2}),
    "a column key that is not a name": lambda d: _gpu(d)["columns"].update({5: [1, 2]}),
    "a table key that is not a name": lambda d: d["tables"].update({(1, 2): {}}),
    "a host that is a list": lambda d: d.update(host=[HOST]),
    "texts values that are not strings": lambda d: _gpu(d)["texts"]["name"].update(values=[1]),
}

INVALID_CASES: dict[str, Any] = {
    "NaN in a NOT NULL float column": lambda d: _gpu(d)["numbers"].update(ts=_floats(NOW, math.nan)),
    "infinity": lambda d: _gpu(d)["numbers"].update(power_watts=_floats(1.0, math.inf)),
    "minus infinity in a time": lambda d: _gpu(d)["numbers"].update(ts=_floats(NOW, -math.inf)),
    "code 0 in a NOT NULL text column": lambda d: _gpu(d)["texts"]["uuid"].update(codes=_codes(0, 1)),
    "a time before 2000": lambda d: _gpu(d)["numbers"].update(ts=_floats(NOW, 5.0)),
    "a time two hours ahead": lambda d: _gpu(d)["numbers"].update(ts=_floats(NOW, NOW + 7200)),
    "another host in a host column": lambda d: _gpu(d)["texts"].update(
        host={"values": [HOST, "node-b"], "codes": _codes(1, 2)}
    ),
    "an over-long text": lambda d: _gpu(d)["texts"]["uuid"].update(values=["x" * 70_000, "y"]),
    "NaN in a list column": lambda d: _listed(_gpu(d), power_watts=[1.0, math.nan]),
    "infinity in a list column": lambda d: d["tables"].update(
        events={"rows": 1, "columns": _event_columns(count=[1], last_ts=[math.inf])}
    ),
    "NaN in a list time of a table that sends lists": lambda d: d["tables"].update(
        events={"rows": 1, "columns": _event_columns(last_ts=[math.nan])}
    ),
    "a string in a number list": lambda d: _listed(_gpu(d), power_watts=[1.0, "2"]),
    "a bool in an integer list": lambda d: _listed(_gpu(d), memory_used_bytes=[True, 1]),
    "an integer past int64 in a list": lambda d: _listed(_gpu(d), memory_used_bytes=[2**63, 1]),
    "a NULL in a NOT NULL list": lambda d: _listed(_gpu(d), gpu_index=[None, 1]),
    "a seq of 0": lambda d: d.update(seq=0),
    "maps and lists in a list column": lambda d: _gpu(d)["columns"].update(memory_used_bytes=[{"a": 1}, [1]]),
    "an ext value in a list column": lambda d: _listed(_gpu(d), name=[msgspec.msgpack.Ext(1, b"x"), "a"]),
    "a sent_ts that is NaN": lambda d: d.update(sent_ts=math.nan),
}


def _event_columns(**extra: list[Any]) -> dict[str, list[Any]]:
    event = Event(NOW, HOST, EventKind.XID, "kmsg", "m")
    return {**columns_by_table([event])["events"], **extra}


@pytest.mark.parametrize("case", sorted(MALFORMED_CASES))
def test_a_body_that_is_not_a_batch_is_refused_as_malformed(case: str) -> None:
    doc = _doc()
    MALFORMED_CASES[case](doc)
    assert _refused(doc).reason is Refusal.MALFORMED


@pytest.mark.parametrize("case", sorted(INVALID_CASES))
def test_a_value_its_column_cannot_hold_is_refused_as_an_invalid_value(case: str) -> None:
    doc = _doc()
    INVALID_CASES[case](doc)
    assert _refused(doc).reason is Refusal.INVALID_VALUE


def test_a_string_that_is_not_utf8_is_malformed() -> None:
    raw = msgspec.msgpack.encode(_doc())
    uuid = msgspec.msgpack.encode(f"GPU-{HOST}-0")
    assert raw.count(uuid) == 1
    spoiled = raw.replace(uuid, uuid[:-1] + b"\xff")
    with pytest.raises(BatchRefused) as caught:
        parse_batch(spoiled, HOST, compressed=False, now=NOW)
    assert caught.value.reason is Refusal.MALFORMED and "\n" not in caught.value.message


def test_a_wrong_host_in_version_2_is_refused_as_in_version_1() -> None:
    with pytest.raises(BatchRefused) as caught:
        parse_batch(encode_v2(batch("node-b", 1, ts=NOW)), HOST, now=NOW)
    assert caught.value.reason is Refusal.WRONG_HOST


_VALID_BODY = encode_v2(batch(HOST, 1, ts=NOW))
_VALID_RAW = gzip.decompress(_VALID_BODY)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    compressed=st.booleans(),
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 1 << 20)),
)
def test_a_spoiled_body_is_refused_or_read_never_anything_else(
    compressed: bool, flips: list[tuple[int, int]], cut: int | None
) -> None:
    body = bytearray(_VALID_BODY if compressed else _VALID_RAW)
    for at, value in flips:
        body[at % len(body)] = value
    if cut is not None:
        del body[cut % len(body) :]
    try:
        parse_batch(bytes(body), HOST, compressed=compressed, now=NOW)
    except BatchRefused as exc:
        assert "\n" not in exc.message


_ANY = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(),
        st.text(max_size=8),
        st.binary(max_size=24),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers(-(2**63), 2**63)), inner, max_size=4),
    ),
    max_leaves=12,
)


def _paths(node: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a decoded document a value sits (map values and list items)."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


_PATHS = _paths(_doc())[1:]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(where=st.sampled_from(_PATHS), value=_ANY)
def test_any_value_anywhere_in_a_batch_is_read_or_refused_never_anything_else(
    where: tuple[Any, ...], value: object
) -> None:
    doc = _doc()
    node: Any = doc
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    try:
        parse_batch(msgspec.msgpack.encode(doc), HOST, compressed=False, now=NOW)
    except BatchRefused as exc:
        assert "\n" not in exc.message


# ---- stored: the same rows whichever version carried them ------------------------------------------------


def _good_batches() -> list[OutgoingBatch]:
    out = []
    for i, host in enumerate(("node-a", "node-b", "node-c")):
        b = batch(host, 1, ts=NOW - i)
        gpus = b.tables["gpu_samples"]
        gpus["power_watts"] = [None, 250.5]
        gpus["slow_read_ts"] = [NOW - 3, None]
        gpus["memory_used_bytes"] = [None, 2**40]  # an integer column with a NULL: a list in version 2
        gpus["name"] = [None, "H100 80GB HBM3 ✓"]
        b.tables.update(columns_by_table([Event(NOW - 2, host, EventKind.XID, "kmsg", f"xid {i}", code=79)]))
        out.append(b)
    return out


def _store_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {
            name: con.execute(f"SELECT * FROM {name} ORDER BY ALL").fetchall()  # the schema's own names
            for name in TABLES
        }
    finally:
        con.close()


def _commit(path: Path, bodies: list[tuple[str, bytes]]) -> dict[str, list[tuple[Any, ...]]]:
    with Store.open(str(path)) as store:
        writer = IngestWriter(store, FakeClock(NOW), ControllerStats())
        group = [Pending(parse_batch(body, host, now=NOW), 0.0) for host, body in bodies]
        writer.commit_group(group)
        for pending in group:
            assert pending.done.wait(30) and pending.error is None, pending.error
    return _store_rows(path)


def test_the_same_batches_store_the_same_rows_in_either_version_and_in_a_mixed_group(tmp_path: Path) -> None:
    batches = _good_batches()
    v1 = _commit(tmp_path / "v1.duckdb", [(b.host, encode(b)) for b in batches])
    v2 = _commit(tmp_path / "v2.duckdb", [(b.host, encode_v2(b)) for b in batches])
    mixed = _commit(
        tmp_path / "mixed.duckdb",
        [(b.host, (encode_v2 if i % 2 else encode)(b)) for i, b in enumerate(batches)],
    )
    assert len(v1["gpu_samples"]) == 6 and len(v1["events"]) == 3 and len(v1["nic_counters"]) == 3
    assert v2 == v1
    assert mixed == v1


# ---- edge processes and the journal ------------------------------------------------------------------------


def test_edge_processes_read_a_version_2_body_as_the_in_process_edge_does() -> None:
    bodies = [encode_v2(b) for b in _good_batches()[:1]]
    spoiled = _doc()
    _gpu(spoiled)["texts"]["uuid"].update(codes=_codes(0, 1))
    pool = EdgePool(1)
    try:
        for body in bodies:
            assert _plain(pool.parse(body, HOST, compressed=True, now=NOW)) == _plain(
                parse_batch(body, HOST, now=NOW)
            )
        with pytest.raises(BatchRefused) as caught:
            pool.parse(msgspec.msgpack.encode(spoiled), HOST, compressed=False, now=NOW)
        assert caught.value.reason is Refusal.INVALID_VALUE
    finally:
        pool.stop()


def test_a_version_2_batch_answered_and_not_committed_before_a_kill_is_stored_at_the_next_start(
    tmp_path: Path,
) -> None:
    now = time.time()
    first = OutgoingBatch(HOST, "boot-1", 1, now, 5.0, "test", columns_by_table(gpu_rows(HOST, now)))
    body = encode_v2(first)
    store = Store.open(str(tmp_path / "controller.duckdb"))
    journal = Journal.open(tmp_path / "controller.duckdb.journal")
    writer = IngestWriter(store, SystemClock(), ControllerStats(), journal=journal)
    (answer,) = writer.accept([(parse_batch(body, HOST, now=now), JournalEntry(HOST, body, True, now))])
    store.close()  # a kill: no lane ever committed it, the journal is left as it is
    assert isinstance(answer, IngestResult) and not answer.duplicate
    assert list((tmp_path / "controller.duckdb.journal").glob("*" + SUFFIX)), "answered, so on disk"

    c = start_test_controller(tmp_path)
    try:
        deadline = time.monotonic() + 20
        while (
            metric_value(c.metrics(), "fleetguard_controller_journal_entries") and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        again = c.post("/v1/ingest", body, c.tokens[HOST])
        assert again.status == 200 and again.doc["duplicate"] is True
        assert again.doc["wire"] == [1, 2]
    finally:
        c.running.stop()
    con = duckdb.connect(str(tmp_path / "controller.duckdb"), read_only=True)
    try:
        stored = con.execute("SELECT gpu_index, uuid FROM gpu_samples ORDER BY gpu_index").fetchall()
    finally:
        con.close()
    assert stored == [(0, f"GPU-{HOST}-0"), (1, f"GPU-{HOST}-1")]


def test_a_version_1_ack_whose_outcome_is_a_list_is_malformed_not_a_server_error() -> None:
    """(It raised TypeError, unhashable: a 500 the agent would send again for ever.)"""
    doc = batch(HOST, 1, ts=NOW).to_json()
    doc["acks"] = [{"id": "x", "outcome": [1]}]
    with pytest.raises(BatchRefused) as caught:
        parse_batch(json.dumps(doc).encode(), HOST, compressed=False, now=NOW)
    assert caught.value.reason is Refusal.MALFORMED


def test_an_integer_whose_bytes_are_an_infinitys_is_accepted() -> None:
    """The infinity look reads the whole block as floats: an integer column's bits are looked at again."""
    doc = _doc()
    infinity_bits = int(np.frombuffer(np.array([math.inf, -math.inf]).tobytes(), dtype="<i8")[0])
    _gpu(doc)["numbers"]["gpu_index"] = np.array([infinity_bits, 1], dtype="<i8").tobytes()
    parsed = parse_batch(msgspec.msgpack.encode(doc), HOST, compressed=False, now=NOW)
    assert parsed.rows == 3


@pytest.mark.parametrize("at", [0, 479, 480, 481, 1999])
def test_an_infinity_is_found_in_any_piece_of_a_long_block(at: int) -> None:
    from fleetguard.controller.wire_v2_schema import _may_hold_infinity

    values = np.zeros(2000)
    assert not _may_hold_infinity(values)
    values[at] = -math.inf
    assert _may_hold_infinity(values)
    assert not _may_hold_infinity(np.full(2000, math.nan))
