"""Samples handed to the rules as plain rows (what the controller's feed fetches) say exactly what the same
samples say as records: the same observations in the same order, the same per-GPU state, the same hosts
heard from. The rows path skips building a record for a row no rule can call a fault; these rounds are
made to hit every way a row can still matter (a fault in it, its component busy, its component faulting
elsewhere in the round through an XID or a port counter) and every way a GPU's state moves (late and equal
times, counters that rise, stay, fall or are unread, a GPU that changes its PCI address)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from diagnosis.model import ComponentKind, Deferred, Observation
from diagnosis.rules import GPU_ROW_ORDER, Rows, Rules, Signals
from diagnosis.rules_nic import port_id
from fleetguard.records.telemetry import Event, EventKind, GpuSample, NicCounterSample, NicSample
from fleetguard.settings.policy_files import load_policy

T0 = 1_700_000_000.0
HOSTS = ("n1", "n2", "n3", "n4")
GPUS = 3


def _gpu(rng: random.Random, host: str, g: int, ts: float, counters: list[int]) -> GpuSample:
    for i in range(len(counters)):
        roll = rng.random()
        if roll < 0.15:
            counters[i] += rng.randint(1, 500)
        elif roll < 0.18:
            counters[i] = 0  # a driver reload resets them
    unread = rng.random() < 0.1
    return GpuSample(
        ts=ts,
        host=host,
        gpu_index=g,
        uuid=f"GPU-{host}-{g}",
        pci_bus_id=rng.choice([f"0000:{0x18 + g:02x}:00.0"] * 6 + [f"0000:{0x40 + g:02X}:00.0", None]),
        temperature_celsius=rng.choice([55.0] * 8 + [95.0, None]),
        clocks_event_reasons=rng.choice([0x4] * 8 + [0x0, 0x20, 0x40, 0x80, None]),
        ecc_corrected_volatile=None if unread else counters[0],
        ecc_uncorrected_volatile=counters[1] if rng.random() < 0.9 else None,
        nvlink_crc_flit_errors=counters[2],
        pcie_replay_errors=counters[3],
        remapped_rows_pending=rng.choice([False] * 8 + [True, None]),
        remapped_rows_failure=rng.choice([None] * 8 + [False, True]),
    )


def _round(rng: random.Random, now: float, counters: dict[tuple[str, int], list[int]]) -> Signals:
    gpus, ports, events, port_counters = [], [], [], []
    for host in HOSTS:
        for _ in range(rng.randint(0, 2)):  # none, one, or two samples a round
            # Sometimes late (older than what was read), sometimes the same time twice.
            ts = now - rng.choice([0.0, 0.0, 0.0, 0.5, 30.0])
            for g in range(GPUS):
                gpus.append(_gpu(rng, host, g, ts, counters[(host, g)]))
            for p in range(2):
                state = rng.choice(["ACTIVE"] * 8 + ["active", "DOWN", "INIT", None])
                ports.append(NicSample(ts=ts, host=host, device=f"mlx5_{p}", port=1, state=state))
        if rng.random() < 0.3:  # an XID on a GPU whose samples may be quiet
            g = rng.randrange(GPUS)
            events.append(
                Event(
                    ts=now - rng.random(),
                    host=host,
                    kind=EventKind.XID,
                    source="kmsg",
                    message="NVRM: Xid 79",
                    code=79,
                    pci_bus_id=f"0000:{0x18 + g:02x}:00",
                )
            )
        if rng.random() < 0.3:  # a port counter fault on a port whose state rows may be quiet
            port_counters.append(
                NicCounterSample(
                    ts=now,
                    host=host,
                    device=f"mlx5_{rng.randrange(2)}",
                    port=1,
                    counter="symbol_error",
                    group="counters",
                    value=9000,
                    delta=5000,
                    rate_per_second=5000.0,
                )
            )
    rng.shuffle(gpus)
    gpus.sort(key=lambda s: s.ts)  # the feed's order: oldest first
    ports.sort(key=lambda s: s.ts)
    return Signals(gpu_samples=gpus, nic_samples=ports, events=events, nic_counters=port_counters)


def _as_rows(signals: Signals) -> Signals:
    gpu_names = (
        *GPU_ROW_ORDER,
        *(f.name for f in dataclasses.fields(GpuSample) if f.name not in GPU_ROW_ORDER),
    )
    port_names = tuple(f.name for f in dataclasses.fields(NicSample))
    return Signals(
        gpu_rows=Rows(gpu_names, [tuple(getattr(s, n) for n in gpu_names) for s in signals.gpu_samples]),
        nic_rows=Rows(port_names, [tuple(getattr(s, n) for n in port_names) for s in signals.nic_samples]),
        events=signals.events,
        nic_counters=signals.nic_counters,
    )


def _busy(rng: random.Random) -> set[tuple[str, ComponentKind, str]]:
    busy: set[tuple[str, ComponentKind, str]] = set()
    for host in HOSTS:
        for g in range(GPUS):
            if rng.random() < 0.2:
                busy.add((host, ComponentKind.GPU, f"GPU-{host}-{g}"))
        for p in range(2):
            if rng.random() < 0.2:
                busy.add((host, ComponentKind.PORT, port_id(f"mlx5_{p}", 1)))
    return busy


@pytest.mark.parametrize("seed", range(6))
def test_rows_say_what_the_same_samples_say_as_records(seed: int) -> None:
    rng = random.Random(seed)
    policy = load_policy()
    records, rows = Rules(policy), Rules(policy)
    counters = {(h, g): [0, 0, 0, 0] for h in HOSTS for g in range(GPUS)}
    faults = built_from_quiet = 0
    uuids: dict[tuple[str, str], str] = {}  # which address is which GPU, worked out here the plain way
    for r in range(60):
        signals = _round(rng, T0 + 10 * r, counters)
        for sample in signals.gpu_samples:
            if sample.pci_bus_id:
                uuids[(sample.host, sample.pci_bus_id.lower().removesuffix(".0"))] = sample.uuid
            uuids[(sample.host, f"index:{sample.gpu_index}")] = sample.uuid
        busy = _busy(rng) if r % 5 else set()
        expected = records.observations(signals, busy)
        got = rows.observations(_as_rows(signals), busy)
        assert got == expected, f"round {r}"
        assert all(isinstance(o, Observation) for o in got)  # no Deferred is left over
        assert rows.previous == records.previous
        assert rows.uuids == records.uuids == uuids
        assert rows.read_at == records.read_at
        assert rows.heard == records.heard
        faults += sum(not o.healthy for o in got)
        built_from_quiet += sum(
            o.healthy and (o.key.host, o.key.component_kind, o.key.component_id) not in busy for o in got
        )
    assert faults > 50 and built_from_quiet > 5  # the rounds exercised what they are meant to


def test_rows_in_another_column_order_take_the_record_path_and_still_agree() -> None:
    rng = random.Random(7)
    policy = load_policy()
    records, rows = Rules(policy), Rules(policy)
    counters = {(h, g): [0, 0, 0, 0] for h in HOSTS for g in range(GPUS)}
    for r in range(10):
        signals = _round(rng, T0 + 10 * r, counters)
        names = tuple(f.name for f in dataclasses.fields(GpuSample))  # not GPU_ROW_ORDER
        shuffled = Signals(
            gpu_rows=Rows(names, [tuple(getattr(s, n) for n in names) for s in signals.gpu_samples]),
            nic_samples=signals.nic_samples,
            events=signals.events,
            nic_counters=signals.nic_counters,
        )
        assert rows.observations(shuffled, set()) == records.observations(signals, set())
        assert rows.previous == records.previous


def test_a_deferred_is_never_confused_with_an_observation() -> None:
    # The rows path relies on this: a Deferred is a tuple, never an Observation.
    assert not issubclass(Deferred, Observation)


def test_a_host_whose_only_quiet_row_is_built_is_not_counted_as_heard_by_it() -> None:
    """The healthy observations of a GPU that faults through an XID in the same round are built (the
    engine hears the host through them); only a dropped one adds its host to `heard`, as with records."""
    sample = GpuSample(
        ts=T0, host="solo", gpu_index=0, uuid="GPU-solo", pci_bus_id="0000:18:00.0", clocks_event_reasons=0x4
    )
    event = Event(
        ts=T0,
        host="solo",
        kind=EventKind.XID,
        source="kmsg",
        message="Xid 79",
        code=79,
        pci_bus_id="0000:18:00",
    )
    records, rows = Rules(load_policy()), Rules(load_policy())
    signals = Signals(gpu_samples=[sample], events=[event])
    expected = records.observations(signals, set())
    assert rows.observations(_as_rows(signals), set()) == expected
    assert any(o.healthy for o in expected)  # the quiet sample's "not throttled", built
    assert rows.heard == records.heard == set()


@pytest.mark.parametrize("seed", range(3))
def test_rows_taken_in_paced_runs_say_what_they_say_in_one_run(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pause points a pacer is offered (`Rules.pace`, every PACE_ROWS rows) change nothing the rules
    say or keep, and come once per run of rows, for GPU rows and port rows alike."""
    import diagnosis.rules

    monkeypatch.setattr(diagnosis.rules, "PACE_ROWS", 5)
    rng = random.Random(seed)
    policy = load_policy()
    whole, paced = Rules(policy), Rules(policy)
    calls = 0

    def pace() -> None:
        nonlocal calls
        calls += 1

    paced.pace = pace
    expected_calls = 0
    for r in range(30):
        signals = _as_rows(
            _round(rng, T0 + 10 * r, {(h, g): [0, 0, 0, 0] for h in HOSTS for g in range(GPUS)})
        )
        busy = _busy(rng) if r % 3 else set()
        monkeypatch.setattr(diagnosis.rules, "PACE_ROWS", 10**9)
        expected = whole.observations(signals, busy)
        monkeypatch.setattr(diagnosis.rules, "PACE_ROWS", 5)
        assert paced.observations(signals, busy) == expected, f"round {r}"
        assert (paced.previous, paced.uuids, paced.read_at, paced.heard) == (
            whole.previous,
            whole.uuids,
            whole.read_at,
            whole.heard,
        )
        expected_calls += -(-len(signals.gpu_rows.rows) // 5) + -(-len(signals.nic_rows.rows) // 5)
    assert calls == expected_calls and calls > 30
