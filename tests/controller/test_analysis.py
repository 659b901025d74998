"""Cross-host analysis on the writer thread: silent hosts and rollups (fake clock, real store)."""

from __future__ import annotations

import json
from dataclasses import replace

from fleetguard.clock import FakeClock
from fleetguard.controller.analysis import SilentHosts, host_silent_finding
from fleetguard.controller.correlation import FleetCorrelation, FleetEvent, correlate
from fleetguard.controller.ingest import IngestWriter, Pending
from fleetguard.controller.rollups import Rollups
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.validate import parse_batch
from fleetguard.records.telemetry import Event, EventKind, GpuSample, NicCounterSample
from fleetguard.shipping.wire import OutgoingBatch, columns_by_table, encode
from fleetguard.store import Store

MINUTE0 = 1_795_000_020.0  # a minute boundary
T0 = MINUTE0 + 20.0


def _commit(writer: IngestWriter, host: str, seq: int, records: list[object], sent: float) -> None:
    body = encode(OutgoingBatch(host, "boot", seq, sent, 5.0, "test", columns_by_table(records)))
    pending = Pending(parse_batch(body, host), 0.0)
    writer.commit_group([pending])
    assert pending.error is None


def _findings(store: Store) -> list[tuple[str, str, str]]:
    rows = store.connection.execute("SELECT kind, host, evidence_json FROM findings ORDER BY ts").fetchall()
    return [(str(k), str(h), str(e)) for k, h, e in rows]


def test_a_host_silent_past_three_intervals_is_one_finding_until_it_speaks_again(store: Store) -> None:
    clock = FakeClock(T0)
    writer = IngestWriter(store, clock, ControllerStats())
    silent = SilentHosts(writer, 0.0)
    _commit(writer, "node-a", 1, [], T0)
    _commit(writer, "node-b", 1, [], T0)
    clock.advance(20.0)
    _commit(writer, "node-b", 2, [], clock.time())
    with store.transaction() as con:
        silent(con, clock.time())  # node-a: 20 s silent, 3 x 5 s + 10 s = 25 s allowed
    assert _findings(store) == []
    clock.advance(10.0)
    _commit(writer, "node-b", 3, [], clock.time())
    for _ in range(3):
        with store.transaction() as con:
            silent(con, clock.time())
        clock.advance(5.0)
    found = _findings(store)
    assert [(k, h) for k, h, _ in found] == [("host_silent", "node-a")]
    assert json.loads(found[0][2])["last_seq"] == 1
    _commit(writer, "node-a", 2, [], clock.time())  # back ...
    clock.advance(60.0)  # ... and silent again: a second silence, a second finding
    with store.transaction() as con:
        SilentHosts(writer, 0.0)(con, clock.time())  # a restarted controller: the first is not repeated
    assert [(k, h) for k, h, _ in _findings(store)] == [("host_silent", "node-a")] * 2 + [
        ("host_silent", "node-b")
    ]


def test_a_silence_reported_under_the_old_id_scheme_is_not_reported_again(store: Store) -> None:
    clock = FakeClock(T0)
    writer = IngestWriter(store, clock, ControllerStats())
    _commit(writer, "node-a", 1, [], T0)
    [host] = writer.host_states()
    clock.advance(60.0)
    before_upgrade = replace(
        host_silent_finding(host, clock.time(), 0.0), finding_id=f"host_silent:node-a:{host.last_seen:.3f}"
    )
    store.append([before_upgrade])
    with store.transaction() as con:
        SilentHosts(writer, 0.0)(con, clock.time())  # the upgraded controller, same silence
    assert [(k, h) for k, h, _ in _findings(store)] == [("host_silent", "node-a")]


def test_rollups_summarise_each_minute_and_hour_and_fold_in_late_data(store: Store) -> None:
    clock = FakeClock(T0)
    writer = IngestWriter(store, clock, ControllerStats())
    rollups = Rollups()
    writer.on_committed.append(lambda b: rollups.touched(b.tables))

    def gpu(ts: float, util: float) -> GpuSample:
        return GpuSample(ts, "node-a", 0, "GPU-0", utilization_gpu_percent=util, temperature_celsius=util / 2)

    def ctr(ts: float, value: int, delta: int | None) -> NicCounterSample:
        return NicCounterSample(
            ts, "node-a", "mlx5_0", 1, "port_xmit_data", "counters", value, delta, 1.0 * (delta or 0)
        )

    _commit(
        writer,
        "node-a",
        1,
        [gpu(T0, 10.0), gpu(T0 + 10, 30.0), ctr(T0, 100, None), ctr(T0 + 10, 150, 50)],
        T0,
    )
    _commit(writer, "node-a", 2, [gpu(T0 + 60, 50.0), ctr(T0 + 60, 170, 20)], T0 + 60)
    with store.transaction() as con:
        rollups(con, clock.time())
    minutes = store.connection.execute(
        "SELECT epoch(bucket), samples, utilization_gpu_avg, utilization_gpu_max FROM gpu_rollup_1m "
        "ORDER BY bucket"
    ).fetchall()
    assert minutes == [(MINUTE0, 2, 20.0, 30.0), (MINUTE0 + 60, 1, 50.0, 50.0)]
    nic = store.connection.execute(
        "SELECT samples, value_last, delta_sum FROM nic_rollup_1m ORDER BY bucket"
    ).fetchall()
    assert nic == [(2, 150, 50), (1, 170, 20)]
    # A late batch (an agent catching up) for the first minute: that minute is recomputed, not doubled.
    _commit(writer, "node-a", 3, [gpu(T0 + 30, 80.0)], T0 + 90)
    with store.transaction() as con:
        rollups(con, clock.time())
    first = store.connection.execute(
        "SELECT samples, utilization_gpu_max FROM gpu_rollup_1m ORDER BY bucket LIMIT 1"
    ).fetchall()
    assert first == [(3, 80.0)]
    hour = store.connection.execute("SELECT samples, utilization_gpu_avg FROM gpu_rollup_1h").fetchall()
    assert hour == [(4, (10.0 + 30.0 + 80.0 + 50.0) / 4)]


def _xid(ts: float, host: str, code: int) -> Event:
    return Event(ts, host, EventKind.XID, "kmsg", f"NVRM: Xid {code}", code=code)


def test_the_same_xid_on_many_hosts_within_the_window_is_one_fleet_finding(store: Store) -> None:
    clock = FakeClock(T0)
    writer = IngestWriter(store, clock, ControllerStats())
    for i, host in enumerate(("n1", "n2", "n3", "n4")):
        _commit(writer, host, 1, [_xid(T0 + i, host, 79), _xid(T0 + i, host, 13)], T0 + i)
    _commit(writer, "n5", 1, [_xid(T0, "n5", 48)], T0)  # one host only: a host problem
    task = FleetCorrelation(window_seconds=300, min_hosts=3)
    with store.transaction() as con:
        task(con, T0 + 10)
        task(con, T0 + 20)  # the same episode: not reported again
    found = store.connection.execute("SELECT kind, subject, evidence_json FROM findings").fetchall()
    assert [(k, s) for k, s, _ in found] == [("fleet_fault", "fleet/xid:79")]  # XID 13 is an application's
    assert json.loads(found[0][2])["hosts"] == ["n1", "n2", "n3", "n4"]
    with store.transaction() as con:
        FleetCorrelation(window_seconds=300, min_hosts=3)(con, T0 + 30)  # after a restart: still once
    assert len(store.connection.execute("SELECT * FROM findings").fetchall()) == 1


def test_correlate_needs_distinct_hosts() -> None:
    events = [FleetEvent(T0, "n1", "link_down", None, 1)] * 5 + [FleetEvent(T0, "n2", "link_down", None, 1)]
    assert correlate(events, min_hosts=3) == []
    assert [f.hosts for f in correlate(events, min_hosts=2)] == [("n1", "n2")]
