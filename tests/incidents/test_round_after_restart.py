"""A controller restarted between two rounds finds in the next round what one that kept running finds.

The rules keep per-component state in memory between rounds (each GPU's last counters, which PCI address is
which GPU, when each GPU and port was last read) and read only the rows new since the last round, so what a
restart loses must come back from the store. Two real stores get the same rows; one task runs throughout,
the other is replaced by a new one (its state rebuilt from its store) before every third round; each round's
changes and the state they leave must agree. The rows are chosen so that the state matters across the
restart: ECC and NVLink counters that rise between the last sample before it and the first after, a port
that goes down and comes back, XIDs keyed by the PCI address a sample taught, throttling that stops."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from diagnosis.incident import IncidentChange
from fleetguard.clock import FakeClock
from fleetguard.config import Config, load_config
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.records.telemetry import Event, EventKind, GpuSample, NicCounterSample, NicSample
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store

T0 = 1_700_000_000.0
HOSTS = tuple(f"n{i}" for i in range(4))
GPUS = 2


def _batch(rng: random.Random, now: float, ecc: dict[tuple[str, int], list[int]]) -> list[object]:
    out: list[object] = []
    for host in HOSTS:
        for g in range(GPUS):
            counters = ecc[(host, g)]
            if rng.random() < 0.2:
                counters[rng.randrange(3)] += rng.randint(1, 3000)
            out.append(
                GpuSample(
                    ts=now,
                    host=host,
                    gpu_index=g,
                    uuid=f"GPU-{host}-{g}",
                    pci_bus_id=f"0000:{0x18 + g:02x}:00.0",
                    temperature_celsius=60.0,
                    clocks_event_reasons=rng.choice([0x4] * 6 + [0x40]),
                    ecc_uncorrected_volatile=counters[0],
                    ecc_corrected_volatile=counters[1],
                    nvlink_crc_flit_errors=counters[2],
                    remapped_rows_pending=False,
                )
            )
        for p in range(2):
            state = rng.choice(["ACTIVE"] * 8 + ["DOWN"])
            out.append(NicSample(ts=now, host=host, device=f"mlx5_{p}", port=1, state=state))
            delta = rng.choice([0] * 8 + [4000])
            out.append(
                NicCounterSample(
                    ts=now,
                    host=host,
                    device=f"mlx5_{p}",
                    port=1,
                    counter="symbol_error",
                    group="counters",
                    value=delta,
                    delta=delta,
                    rate_per_second=float(delta),
                )
            )
        if rng.random() < 0.15:
            g = rng.randrange(GPUS)
            out.append(
                Event(
                    ts=now,
                    host=host,
                    kind=EventKind.XID,
                    source="kmsg",
                    message=f"NVRM: Xid (PCI:0000:{0x18 + g:02x}:00): 48",
                    code=48,
                    pci_bus_id=f"0000:{0x18 + g:02x}:00",
                )
            )
    return out


def _normal(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple(_normal(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, list | tuple):
        return tuple(_normal(v) for v in value)
    if isinstance(value, float):
        return round(value, 6)
    return value


def _changes(changes: list[IncidentChange]) -> list[Any]:
    return sorted((_normal(c) for c in changes), key=repr)


def _task(config: Config, now: float) -> IncidentTask:
    task = IncidentTask(config, FakeClock(now))
    # The circuit breaker stays out of the way: what it counted (hosts acted on within its window, repairs
    # in the last hour) is not in the store, so a restart forgets it (a gap of its own, not the rules').
    task.policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0, "repairs_per_hour": 1000}})
    return task


def test_a_round_after_a_restart_finds_what_a_round_without_one_finds(tmp_path: Path) -> None:
    rng = random.Random(5)
    ecc = {(h, g): [0, 0, 0] for h in HOSTS for g in range(GPUS)}
    kept_path, restarted_path = tmp_path / "kept.duckdb", tmp_path / "restarted.duckdb"
    kept_config = load_config(overrides={"store.path": str(kept_path)})
    restarted_config = load_config(overrides={"store.path": str(restarted_path)})
    with Store.open(kept_path) as kept_store, Store.open(restarted_path) as restarted_store:
        kept, restarted = _task(kept_config, T0), _task(restarted_config, T0)
        restarts = found = 0
        for r in range(24):
            now = T0 + 10 * r
            batch = _batch(rng, now, ecc)
            kept_store.append(batch)
            restarted_store.append(batch)
            if r % 3 == 2:
                restarted = _task(restarted_config, now)  # the process came back
                restarts += 1
            with kept_store.transaction() as con:
                kept(con, now)
            with restarted_store.transaction() as con:
                restarted(con, now)
            assert _changes(restarted.last_changes) == _changes(kept.last_changes), f"round {r}"
            found += len(kept.last_changes)
            assert kept.service is not None and restarted.service is not None
            ours, theirs = restarted.service.engine.rules, kept.service.engine.rules
            assert ours.previous == theirs.previous
            assert ours.uuids == theirs.uuids
            assert ours.read_at == theirs.read_at
        faults = {c.incident.key.fault for c in kept.last_changes}
        assert restarts == 8 and found > 20, (restarts, found, faults)
