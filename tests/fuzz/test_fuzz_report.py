"""Fuzzing the rank report schema: any body is either a report whose every value fits the column it lands
in (the store takes the batch) or a 400 naming a field; never an exception, never a refused batch."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetguard.clock import FakeClock
from fleetguard.jobcontrol.peer import Sender
from fleetguard.records.bounds import SqlType, fits
from fleetguard.runtime.protocol import MAX_EPOCH_SECONDS, RankReport, ReportError, parse_report
from fleetguard.runtime.server import RuntimeServer
from fleetguard.store import Store
from fleetguard.store.schema import TABLE_BY_RECORD

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Integers around every edge a column has: int64, uint64, and far beyond.
EDGES = [
    0,
    1,
    -1,
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    -(2**63),
    -(2**63) - 1,
    2**64 - 1,
    2**64,
    10**20,
    10**30,
]
integers = st.one_of(st.sampled_from(EDGES), st.integers(), st.integers(min_value=-5, max_value=64))
numbers = st.one_of(
    integers,
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1.7e9, MAX_EPOCH_SECONDS, MAX_EPOCH_SECONDS * 2, -1.0, 1e308]),
)
names = st.one_of(
    st.sampled_from(["job-a", "world", "compute", "step", "", "-x", "a" * 200]), st.text(max_size=20)
)
junk = st.one_of(st.none(), st.booleans(), numbers, names, st.lists(st.integers(), max_size=3))
maybe_int = st.one_of(st.none(), integers, junk)


valid_ts = st.floats(min_value=0.0, max_value=2e9)
valid_timing = st.tuples(valid_ts, st.integers(-1, 10**6), st.sampled_from(["compute", "step"]), valid_ts)
valid_collective = st.tuples(
    st.sampled_from(["world", "0", "tp"]),
    valid_ts,
    st.integers(-1, 10**9),
    st.integers(-1, 10**9),
    st.integers(-1, 10**9),
    st.one_of(st.none(), st.just("nccl:all_reduce")),
    st.one_of(st.none(), st.integers(0, 2**40)),
)


@st.composite
def _items(
    draw: st.DrawFn, valid: st.SearchStrategy[tuple[Any, ...]], hostile: st.SearchStrategy[Any]
) -> Any:
    """A list of mostly valid items, a few with one element replaced by a hostile value."""
    items = [list(item) for item in draw(st.lists(valid, max_size=4))]
    for item in items:
        if draw(st.booleans()) and draw(st.booleans()):
            item[draw(st.integers(0, len(item) - 1))] = draw(hostile)
    return items if draw(st.integers(0, 9)) else draw(junk)


@st.composite
def reports(draw: st.DrawFn) -> dict[str, Any]:
    """A valid report with a few of its fields (or of its timings' and collectives' elements) replaced by
    hostile values: edges of every integer type, non-finite floats, wrong types, odd names."""
    world = draw(st.integers(min_value=1, max_value=16))
    rank = draw(st.integers(min_value=0, max_value=world - 1))
    doc: dict[str, Any] = {
        "job_id": "job-a",
        "rank": rank,
        "local_rank": draw(st.integers(min_value=0, max_value=rank)),
        "world_size": world,
        "pid": draw(st.integers(min_value=1, max_value=10**6)),
        "step": draw(st.one_of(st.none(), st.integers(-1, 10**9))),
        "section": draw(st.sampled_from([None, "compute", "step"])),
        "status": draw(st.sampled_from(["running", "finished", "error"])),
        "checkpoint_step": draw(st.one_of(st.none(), st.integers(0, 10**9))),
        "local_world_size": draw(st.one_of(st.none(), st.integers(world, world))),
        "dropped_timings": draw(st.integers(0, 100)),
        "timings": draw(_items(valid_timing, numbers)),
        "collectives": draw(_items(valid_collective, st.one_of(numbers, names))),
        "acked": draw(st.lists(st.sampled_from(["checkpoint:1", "stop:2"]), max_size=2)),
    }
    hostile = {
        "job_id": st.one_of(names, junk),
        "rank": maybe_int,
        "local_rank": maybe_int,
        "world_size": maybe_int,
        "pid": maybe_int,
        "step": maybe_int,
        "section": st.one_of(names, junk),
        "status": st.one_of(names, junk),
        "checkpoint_step": maybe_int,
        "local_world_size": maybe_int,
        "dropped_timings": maybe_int,
        "acked": st.one_of(st.lists(st.one_of(names, junk), max_size=3), junk),
    }
    for key in draw(st.lists(st.sampled_from(sorted(hostile)), max_size=2)):
        doc[key] = draw(hostile[key])
    for key in draw(st.sets(st.sampled_from(sorted(doc)), max_size=1)):
        del doc[key]
    return doc


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, allow_nan=True).encode()


def _fits_column(sql_type: str, value: object) -> bool:
    if value is None:
        return True
    if sql_type == "TIMESTAMP":
        return isinstance(value, float) and 0.0 <= value <= MAX_EPOCH_SECONDS
    if sql_type in ("VARCHAR", "BOOLEAN"):
        return True
    return fits(SqlType(sql_type), value)


def _records(report: RankReport) -> list[object]:
    return [report.heartbeat, *report.timings, *report.collectives]


@FUZZ
@given(doc=reports())
def test_a_parsed_report_fits_every_column_or_is_a_report_error(doc: dict[str, Any]) -> None:
    try:
        report = parse_report(_encode(doc), "agent", 1.7e9, owner_uid=1000)
    except ReportError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    for record in _records(report):
        table = TABLE_BY_RECORD[type(record)]
        for column in table.columns:
            value = getattr(record, column.name)
            assert _fits_column(column.sql_type, value), (table.name, column.name, value)
    assert all(
        isinstance(v, int) and not math.isnan(v) for v in (report.heartbeat.rank, report.heartbeat.pid)
    )


@FUZZ
@given(doc=reports())
def test_the_server_answers_every_body_with_200_or_a_4xx_never_a_500(doc: dict[str, Any]) -> None:
    server = RuntimeServer(lambda r: [], host="agent", clock=FakeClock(), port=0)
    try:
        status, answer = server.handle_body(_encode(doc), Sender(uid=1000))
        assert status in (200, 400), answer
        assert server.stats.handler_errors == 0
    finally:
        server.stop()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=reports())
def test_the_store_takes_every_report_the_parser_accepts(store: Store, doc: dict[str, Any]) -> None:
    try:
        report = parse_report(_encode(doc), "agent", 1.7e9, owner_uid=1000)
    except ReportError:
        return
    records = _records(report)
    assert store.append(records) == len(records)
