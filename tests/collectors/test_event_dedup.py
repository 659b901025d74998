"""Folding repeated events: first occurrence at once, repeats as one counted row, nothing lost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.event_dedup import EventDeduplicator, dedup_key, fold_burst
from fleetguard.records.telemetry import Event, EventKind

T0 = 1_700_000_000.0


def xid(ts: float, code: int = 95, bus: str = "0000:9b:00.0", host: str = "h1", count: int = 1) -> Event:
    return Event(
        ts=ts,
        host=host,
        kind=EventKind.XID,
        source="kmsg",
        message=f"Xid {code}",
        code=code,
        pci_bus_id=bus,
        count=count,
    )


def test_first_occurrence_is_emitted_immediately_and_unchanged() -> None:
    folder = EventDeduplicator(window_seconds=60)
    event = xid(T0)
    assert folder.add(event) == [event]


def test_repeats_inside_the_window_are_held() -> None:
    folder = EventDeduplicator(window_seconds=60)
    folder.add(xid(T0))
    assert folder.add(xid(T0 + 1)) == []
    assert folder.add(xid(T0 + 2)) == []
    assert folder.pending_repeats == 2


def test_closed_window_releases_one_row_with_count_and_last_ts() -> None:
    folder = EventDeduplicator(window_seconds=60)
    folder.add(xid(T0))
    for i in range(1, 10):
        folder.add(xid(T0 + i))
    rows = folder.drain(T0 + 60)
    assert len(rows) == 1
    assert (rows[0].count, rows[0].ts, rows[0].last_ts) == (9, T0 + 1, T0 + 9)


def test_drain_before_the_window_ends_releases_nothing() -> None:
    folder = EventDeduplicator(window_seconds=60)
    folder.add(xid(T0))
    folder.add(xid(T0 + 1))
    assert folder.drain(T0 + 59.9) == []


def test_drain_with_force_releases_open_windows() -> None:
    folder = EventDeduplicator(window_seconds=60)
    folder.add(xid(T0))
    folder.add(xid(T0 + 1))
    assert [r.count for r in folder.drain(T0 + 2, force=True)] == [1]
    assert folder.open_windows == 0


def test_window_without_repeats_releases_no_row() -> None:
    folder = EventDeduplicator(window_seconds=60)
    folder.add(xid(T0))
    assert folder.drain(T0 + 120) == []
    assert folder.open_windows == 0


def test_repeat_after_the_window_closes_the_old_one_and_is_emitted_as_a_new_first() -> None:
    folder = EventDeduplicator(window_seconds=60)
    folder.add(xid(T0))
    folder.add(xid(T0 + 10))
    late = xid(T0 + 61)
    out = folder.add(late)
    assert [(e.count, e.ts) for e in out] == [(1, T0 + 10), (1, T0 + 61)]
    assert out[1] is late


def test_different_gpus_are_folded_separately() -> None:
    folder = EventDeduplicator(window_seconds=60)
    assert len(folder.add(xid(T0, bus="0000:9b:00.0"))) == 1
    assert len(folder.add(xid(T0, bus="0000:3b:00.0"))) == 1


def test_different_codes_hosts_and_devices_are_different_keys() -> None:
    base = xid(T0)
    assert dedup_key(base) != dedup_key(xid(T0, code=48))
    assert dedup_key(base) != dedup_key(xid(T0, host="h2"))
    other_device = Event(**{**{f: getattr(base, f) for f in base.__slots__}, "device": "x"})  # type: ignore[arg-type]
    assert dedup_key(base) != dedup_key(other_device)


def test_already_folded_rows_keep_their_count() -> None:
    folder = EventDeduplicator(window_seconds=60)
    folder.add(xid(T0))
    folder.add(xid(T0 + 1, count=500))
    (row,) = folder.drain(T0 + 60)
    assert row.count == 500


def test_occurrences_count_every_raw_event_per_kind_and_code() -> None:
    folder = EventDeduplicator(window_seconds=60)
    for i in range(5):
        folder.add(xid(T0 + i))
    folder.add(xid(T0, code=48))
    assert folder.occurrences() == {("xid", 95): 5, ("xid", 48): 1}


def test_eight_hundred_thousand_lines_of_29_errors_fold_to_a_few_rows() -> None:
    """The real storm: 800k XID 95 lines for 29 distinct GPU errors, within one minute."""
    folder = EventDeduplicator(window_seconds=60)
    buses = [f"0000:{i:02x}:00.0" for i in range(29)]
    stored: list[Event] = []
    for i in range(800_000):
        stored.extend(folder.add(xid(T0 + i * 50e-6, bus=buses[i % 29])))
    stored.extend(folder.drain(T0 + 120))
    assert len(stored) == 58
    assert sum(e.count for e in stored) == 800_000


def test_too_many_open_windows_close_the_oldest_early() -> None:
    folder = EventDeduplicator(window_seconds=60, max_open_windows=2)
    folder.add(xid(T0, code=1))
    folder.add(xid(T0 + 1, code=1))
    folder.add(xid(T0 + 2, code=2))
    out = folder.add(xid(T0 + 3, code=3))
    assert [(e.code, e.count) for e in out] == [(1, 1), (3, 1)]
    assert folder.open_windows == 2


@pytest.mark.parametrize("window", [0, -1.0])
def test_window_must_be_positive(window: float) -> None:
    with pytest.raises(ValueError, match="window_seconds"):
        EventDeduplicator(window_seconds=window)


def test_fold_burst_releases_everything_in_one_call() -> None:
    events = [xid(T0 + i * 0.1) for i in range(100)] + [xid(T0, code=48)]
    out = fold_burst(events, 60)
    assert sorted((e.code, e.count) for e in out) == [(48, 1), (95, 1), (95, 99)]


_steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.integers(0, 3),  # key choice
            st.floats(0, 200, allow_nan=False),  # time step forward
            st.integers(1, 5),  # count carried by the event
        ),
        st.tuples(st.just("drain"), st.just(0), st.floats(0, 200, allow_nan=False), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(steps=_steps, window=st.floats(0.5, 100, allow_nan=False), max_open=st.integers(1, 5))
def test_sum_of_emitted_counts_equals_raw_occurrences(
    steps: list[tuple[str, int, float, int]], window: float, max_open: int
) -> None:
    folder = EventDeduplicator(window_seconds=window, max_open_windows=max_open)
    now = T0
    added = 0
    emitted: list[Event] = []
    for op, key, step, count in steps:
        now += step
        if op == "add":
            added += count
            emitted.extend(folder.add(xid(now, code=key, count=count)))
        else:
            emitted.extend(folder.drain(now))
    emitted.extend(folder.drain(now, force=True))
    assert sum(e.count for e in emitted) == added
    assert sum(folder.occurrences().values()) == added
    assert folder.open_windows == 0


def test_a_repeat_counted_by_key_is_what_adding_it_would_do() -> None:
    """add_repeat (the kernel-log collector's storm path) counts only what `add` would fold into an open
    window's repeats, and leaves the rest (a window to open, its first repeat, a late one) to `add`."""
    events = [xid(T0 + i * 0.5) for i in range(10)] + [xid(T0 + 61), xid(T0 + 61.5), xid(T0 + 2, code=48)]
    by_add, by_key = EventDeduplicator(60), EventDeduplicator(60)
    out_add: list[Event] = []
    out_key: list[Event] = []
    declined = 0
    for e in events:
        out_add.extend(by_add.add(e))
        if not by_key.add_repeat(dedup_key(e), e.ts):
            declined += 1
            out_key.extend(by_key.add(e))
    out_add.extend(by_add.drain(0.0, force=True))
    out_key.extend(by_key.drain(0.0, force=True))
    assert out_key == out_add
    assert by_key.occurrences() == by_add.occurrences()
    # opened, first repeat; the late one opens a window, then its first repeat; code 48 opens its own
    assert declined == 5
