"""The controller's incident round reading only what is new gives what a full re-read gives.

A random sequence of batches goes into a real store: rows on time, late rows stamped before rows already
read (an agent's backlog, a finding stamped before a later one), statements that commit after later ones
(a second writer lane's transaction held open across a round), transactions rolled back, rows numbered one
by one (an INSERT that draws the column's default) and restarts of the process (a new `IncidentTask`, its
state rebuilt from the store). After every round the task's changes are compared with those of an engine
that never restarts and is fed, each round, everything the store shows minus everything it showed before.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import duckdb
import pytest

from diagnosis.engine import IncidentEngine
from diagnosis.incident import IncidentChange
from diagnosis.rules import Signals
from diagnosis.rules_gpu import GPU_RULE_FIELDS
from fleetguard.clock import FakeClock
from fleetguard.config import load_config
from fleetguard.controller.columns import insert_records
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.incidents.feed import StoreFeed
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.records.telemetry import Event, EventKind, GpuSample, NicCounterSample, NicSample
from fleetguard.store import Store
from fleetguard.store.incident_tables import epoch_sql

T0 = 1_700_000_000
HOSTS = ("n1", "n2", "n3")
GPUS = 2
PORTS = 2
COUNTERS = ("symbol_error", "link_downed", "port_xmit_data")  # two with rules, one without
XIDS = (13, 31, 48, 79, 94)
# The last is a kind this version does not know (a newer agent's): both readings must pass it over alike.
FINDINGS = (
    FindingKind.STRAGGLER,
    FindingKind.HUNG_RANK,
    FindingKind.AT_RISK_GPU,
    cast(FindingKind, "not_a_rule"),
)
FOLLOWED: tuple[tuple[str, type, frozenset[str] | None], ...] = (
    ("gpu_samples", GpuSample, GPU_RULE_FIELDS),
    ("nic_samples", NicSample, None),
    ("nic_counters", NicCounterSample, None),
    ("events", Event, None),
    ("findings", Finding, None),
)


class Fleet:
    """Random but plausible records: counters only rise, each GPU's sample times are distinct."""

    def __init__(self, rng: random.Random, calm: bool = False) -> None:
        self.rng = rng
        # A calm fleet faults a tenth as often: most hosts are then steady over a round of several
        # batches, and the feed sums their GPUs up (`StoreFeed._gpu_split`).
        self.odds = 0.1 if calm else 1.0
        self.ecc: dict[tuple[str, int], list[int]] = {(h, g): [0, 0, 0] for h in HOSTS for g in range(GPUS)}
        self.stamps: set[tuple[str, int, float]] = set()
        self.findings = 0

    def batch(self, now: float, late: bool) -> list[object]:
        rng, out = self.rng, list[object]()
        for host in rng.sample(HOSTS, rng.randint(1, len(HOSTS))):
            ts = self._stamp(host, now - rng.uniform(1, 60) if late else now)
            out += [self._gpu(host, g, ts) for g in range(GPUS)]
            for p in range(PORTS):
                state = rng.choice(["ACTIVE"] * 12 + ["DOWN"])
                out.append(NicSample(ts=ts, host=host, device=f"mlx5_{p}", port=1, state=state))
                out += [self._counter(host, p, name, ts) for name in COUNTERS]
            if rng.random() < 0.15 * self.odds:
                code = rng.choice(XIDS)
                out.append(_xid(host, code, ts, rng.randrange(GPUS)))
            if rng.random() < 0.1 * self.odds:
                self.findings += 1
                kind = rng.choice(FINDINGS)
                out.append(
                    Finding(
                        ts, f"f{self.findings}", kind, Severity.WARNING, "job/rank 1", kind, host, "j1", 1
                    )
                )
        return out

    def _stamp(self, host: str, ts: float) -> float:
        ts = round(ts, 3)
        while any((host, g, ts) in self.stamps for g in range(GPUS)):
            ts = round(ts + 0.001, 3)
        self.stamps.update((host, g, ts) for g in range(GPUS))
        return ts

    def _gpu(self, host: str, g: int, ts: float) -> GpuSample:
        rng, ecc = self.rng, self.ecc[(host, g)]
        for i, chance in enumerate((0.05, 0.3, 0.1)):
            if rng.random() < chance * self.odds:
                ecc[i] += rng.randint(1, 400)
        # A calm sample: cool, capped, nothing pending (its counters moved above, a tenth as often).
        calm = self.odds < 1.0 and rng.random() >= self.odds
        return GpuSample(
            ts=ts,
            host=host,
            gpu_index=g,
            uuid=f"GPU-{host}-{g}",
            pci_bus_id=f"0000:{0x18 + g:02x}:00.0",
            temperature_celsius=55.0 if calm else rng.choice([55.0] * 8 + [92.0]),
            clocks_event_reasons=0x4 if calm else rng.choice([0x4] * 8 + [0x40, 0x80, None]),
            ecc_uncorrected_volatile=ecc[0],
            ecc_corrected_volatile=ecc[1],
            nvlink_crc_flit_errors=ecc[2],
            remapped_rows_pending=False if calm else rng.choice([False] * 8 + [True, None]),
        )

    def _counter(self, host: str, p: int, name: str, ts: float) -> NicCounterSample:
        rng = self.rng
        reset = rng.random() < 0.03
        delta = None if reset else rng.choice([0, 0, 0, 0, 0, 2, 5000])
        rate = None if delta is None else float(delta)
        return NicCounterSample(
            ts=ts,
            host=host,
            device=f"mlx5_{p}",
            port=1,
            counter=name,
            group="counters",
            value=7,
            delta=delta,
            rate_per_second=rate,
            reset=reset,
        )


def _xid(host: str, code: int, ts: float, gpu: int) -> Event:
    return Event(
        ts=ts,
        host=host,
        kind=EventKind.XID,
        source="kmsg",
        message=f"NVRM: Xid (PCI:0000:{0x18 + gpu:02x}:00): {code}",
        code=code,
        pci_bus_id=f"0000:{0x18 + gpu:02x}:00.0",
    )


class FullReread:
    """The reference: every round, what the store shows now minus what it showed at the last round, all
    of it as records (no counter folded), in the feed's order, every observation built; one engine that
    never restarts."""

    def __init__(self, con: duckdb.DuckDBPyConnection, engine: IncidentEngine) -> None:
        self.con = con
        self.engine = engine
        self.shown: dict[str, Counter[tuple[Any, ...]]] = {t: Counter() for t, _, _ in FOLLOWED}

    def round(self, now: float) -> list[IncidentChange]:
        signals: dict[str, list[Any]] = {}
        for (table, record, only), field in zip(
            FOLLOWED, ("gpu_samples", "nic_samples", "nic_counters", "events", "findings"), strict=True
        ):
            names = [f.name for f in dataclasses.fields(record) if only is None or f.name in only]
            cols = ", ".join(epoch_sql(n) if n == "ts" else f'"{n}"' for n in names)
            rows = Counter(self.con.execute(f"SELECT {cols}, ingest_seq FROM {table}").fetchall())
            new = sorted((rows - self.shown[table]).elements(), key=_feed_order(names))
            self.shown[table] = rows
            signals[field] = [record(**dict(zip(names, row[:-1], strict=True))) for row in new]
        # Every healthy observation built (no `busy`): the reference does not skip what changes nothing.
        observations = self.engine.rules.observations(
            Signals(
                gpu_samples=signals["gpu_samples"],
                nic_samples=signals["nic_samples"],
                nic_counters=signals["nic_counters"],
                events=signals["events"],
                findings=signals["findings"],
            )
        )
        return self.engine.observe_many(observations, now)


def _feed_order(names: list[str]) -> Any:
    """ORDER BY ts, ingest_seq, then every other column, NULLs last (DuckDB's default)."""
    rest = [i for i, n in enumerate(names) if n != "ts"]
    ts = names.index("ts")

    def key(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return (row[ts], row[-1], *((row[i] is None, row[i] if row[i] is not None else 0) for i in rest))

    return key


def _normal(value: Any) -> Any:
    """Changes compared to the microsecond: times that went through the store come back at that grain."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple(_normal(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, list | tuple):
        return tuple(_normal(v) for v in value)
    if isinstance(value, float):
        return round(value, 6)
    return value


def _changes(changes: list[IncidentChange]) -> list[Any]:
    return sorted((_normal(c) for c in changes), key=repr)


class Writers:
    """Transactions of a second writer held open across rounds (the controller's other lane)."""

    def __init__(self, store: Store, rng: random.Random) -> None:
        self.store, self.rng = store, rng
        self.open: list[tuple[duckdb.DuckDBPyConnection, bool]] = []

    def begin(self, records: list[object], commit: bool) -> None:
        con = self.store.cursor()
        con.execute("BEGIN TRANSACTION")
        insert_records(con, records)  # the controller's own INSERT: one sequence value per statement
        self.open.append((con, commit))

    def end_some(self) -> None:
        still = []
        for con, commit in self.open:
            if self.rng.random() < 0.5:
                con.execute("COMMIT" if commit else "ROLLBACK")
                con.close()
            else:
                still.append((con, commit))
        self.open = still

    def end_all(self) -> None:
        for con, commit in self.open:
            con.execute("COMMIT" if commit else "ROLLBACK")
            con.close()
        self.open = []


def _steps(rng: random.Random, count: int) -> Iterator[str]:
    yield "batch"  # every host reports before the first round (the breaker counts the fleet's hosts)
    yield "round"
    for _ in range(count):
        yield rng.choices(
            ["batch", "late", "held", "one_by_one", "round", "restart"], weights=[5, 2, 2, 1, 4, 1]
        )[0]
    yield "end"
    yield "round"


@pytest.mark.parametrize(
    ("seed", "calm"), [(1, False), (2, False), (3, False), (4, True), (6, True), (7, True)]
)
def test_incremental_rounds_with_late_rows_held_transactions_and_restarts_match_a_full_reread(
    tmp_path: Path, seed: int, calm: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    path = tmp_path / "s.duckdb"
    config = load_config(overrides={"store.path": str(path)})
    fleet = Fleet(rng, calm)
    summed: list[int] = []  # GPUs summed up by the feed, a round at a time
    split = StoreFeed._gpu_split

    def counted(feed: StoreFeed, new: Any) -> Any:
        got = split(feed, new)
        summed.append(0 if got is None else len(got.steady))
        return got

    monkeypatch.setattr(StoreFeed, "_gpu_split", counted)
    now = float(T0)
    with Store.open(path) as store:
        writers = Writers(store, rng)
        task = IncidentTask(config, FakeClock(now))
        reference = FullReread(store.cursor(), IncidentEngine(task.policy))
        rounds = restarts = late = 0
        try:
            for step in _steps(rng, 40):
                now += rng.choice([0, 1, 2, 5])
                if step in ("batch", "late"):
                    store.append(fleet.batch(now, late=step == "late"))
                    late += step == "late"
                elif step == "held":
                    writers.begin(fleet.batch(now, late=rng.random() < 0.5), commit=rng.random() < 0.8)
                elif step == "one_by_one":
                    event = _xid(rng.choice(HOSTS), 79, now - 3, 0)
                    store.connection.execute(
                        "INSERT INTO events (ts, host, kind, source, message, code, pci_bus_id) "
                        "VALUES (make_timestamp(CAST(? * 1e6 AS BIGINT)), ?, ?, ?, ?, ?, ?)",
                        [event.ts, event.host, event.kind, event.source, event.message, 79, event.pci_bus_id],
                    )
                elif step == "restart":
                    task = IncidentTask(config, FakeClock(now))
                    restarts += 1
                elif step == "end":
                    writers.end_all()
                else:
                    with store.transaction() as con:
                        task(con, now)
                    expected = reference.round(now)
                    assert _changes(task.last_changes) == _changes(expected), f"round {rounds} at {now}"
                    rounds += 1
                    writers.end_some()
        finally:
            writers.end_all()
        assert task.service is not None
        engine = task.service.engine
        assert {k: _normal(i) for k, i in engine.incidents.items()} == {
            k: _normal(i) for k, i in reference.engine.incidents.items()
        }
        assert engine.rules.previous == reference.engine.rules.previous
        assert engine.rules.read_at == reference.engine.rules.read_at
        assert engine.rules.uuids == reference.engine.rules.uuids
        assert engine.hosts == reference.engine.hosts
    assert rounds > 5 and late > 0 and restarts > 0  # the sequence exercised what it is meant to
    if calm:
        assert sum(summed) > 10, summed
