"""Steady GPUs passed summed up (`SteadyGpu`: what the controller's feed passes for a host whose every GPU row
of the round said the same and nothing a rule calls a fault) leave the rules exactly where their rows would:
the same observations in the same order, the same per-GPU state, the same hosts heard from.

The source here splits rows in Python the way the feed's SQL does (`feed._steady_sql`); the rounds are
made to hit every way a steady host must still go row by row (a GPU busy, counters that moved since the
last round, two GPUs at one address or index) and every way a summary moves the state (late and equal
times, a GPU new to the rules, a GPU at a new address, rows that say nothing healthy)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Collection, Sequence
from typing import Any

import pytest

from diagnosis.model import ComponentKind
from diagnosis.rules import GPU_ROW_ORDER, Reading, Rows, Rules, Signals, SteadyGpu
from diagnosis.rules_gpu import may_fault
from fleetguard.records.telemetry import Event, EventKind, GpuSample
from fleetguard.settings.policy_files import load_policy

T0 = 1_700_000_000.0
HOSTS = ("n1", "n2", "n3", "n4", "n5")
GPUS = 3
NAMES = (*GPU_ROW_ORDER, *(f.name for f in dataclasses.fields(GpuSample) if f.name not in GPU_ROW_ORDER))


class Split:
    """`GpuRowSource` over rows in memory, split as the feed's SQL splits them."""

    def __init__(self, rows: list[tuple[Any, ...]], event_hosts: set[str], warn: float) -> None:
        self.all = rows
        rules = dataclasses.replace(load_policy().gpu, temperature_warn_celsius=warn)
        at = {n: NAMES.index(n) for n in NAMES}
        by_gpu: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
        for row in rows:
            by_gpu.setdefault((row[at["host"]], row[at["uuid"]]), []).append(row)
        same = ("gpu_index", "pci_bus_id", *GPU_ROW_ORDER[1:5])
        steady_gpu: dict[tuple[str, str], bool] = {}
        for key, gpu_rows in by_gpu.items():
            alike = all(len({r[at[n]] for r in gpu_rows}) == 1 for n in same)
            quiet = not any(
                may_fault(
                    r[at["remapped_rows_failure"]],
                    r[at["remapped_rows_pending"]],
                    r[at["clocks_event_reasons"]],
                    r[at["temperature_celsius"]],
                    rules,
                    False,
                )
                for r in gpu_rows
            )
            steady_gpu[key] = alike and quiet
        hosts = {host for host, _ in by_gpu}
        steady_hosts = {
            h for h in hosts if all(ok for (host, _), ok in steady_gpu.items() if host == h)
        } - event_hosts
        self.steady_hosts = steady_hosts
        self._steady: list[SteadyGpu] = []
        for (host, uuid), gpu_rows in sorted(by_gpu.items()):
            if host not in steady_hosts:
                continue
            first = gpu_rows[0]
            says = any(
                r[at["remapped_rows_pending"]] is False or r[at["clocks_event_reasons"]] is not None
                for r in gpu_rows
            )
            self._steady.append(
                SteadyGpu._make(
                    (
                        host,
                        uuid,
                        first[at["gpu_index"]],
                        first[at["pci_bus_id"]],
                        max(r[0] for r in gpu_rows),
                        *first[1:5],
                        says,
                    )
                )
            )
        self.asked: list[set[str]] = []

    @property
    def steady(self) -> Sequence[SteadyGpu]:
        return self._steady

    def rows(self, hosts: Collection[str]) -> Rows:
        self.asked.append(set(hosts))
        skip = self.steady_hosts - set(hosts)
        return Rows(NAMES, [r for r in self.all if r[5] not in skip])


def _round(
    rng: random.Random, now: float, counters: dict[tuple[str, int], list[int]]
) -> tuple[list[GpuSample], list[Event]]:
    samples, events = [], []
    for host in HOSTS:
        calm = rng.random() < 0.7
        pci_clash = calm and rng.random() < 0.05  # two GPUs at one address
        says = rng.random() < 0.9  # else nothing pending or throttled is read: no healthy observation
        stamps = sorted(now - rng.choice([0.0, 0.0, 1.0, 2.0, 3.0, 30.0]) for _ in range(rng.randint(1, 4)))
        for ts in stamps:
            for g in range(GPUS):
                c = counters[(host, g)]
                if not calm:
                    for i in range(4):
                        if rng.random() < 0.1:
                            c[i] += rng.randint(1, 50)
                elif rng.random() < 0.03 and ts == stamps[0]:
                    c[rng.randrange(4)] += 1  # moved since the last round: the first row rises
                pci: str | None = f"0000:{0x18 + (0 if pci_clash else g):02x}:00.0"
                if not calm and rng.random() < 0.1:
                    pci = rng.choice([f"0000:{0x40 + g:02X}:00.0", None])
                samples.append(
                    GpuSample(
                        ts=ts,
                        host=host,
                        gpu_index=g,
                        uuid=f"GPU-{host}-{g}",
                        pci_bus_id=pci,
                        temperature_celsius=55.0 if calm else rng.choice([55.0] * 6 + [95.0, None]),
                        clocks_event_reasons=(0x4 if says else None)
                        if calm
                        else rng.choice([0x4] * 6 + [0x40, None]),
                        ecc_corrected_volatile=c[0],
                        ecc_uncorrected_volatile=c[1],
                        nvlink_crc_flit_errors=c[2] if rng.random() < 0.95 or calm else None,
                        pcie_replay_errors=c[3],
                        remapped_rows_pending=(False if says else None)
                        if calm
                        else rng.choice([False] * 6 + [True]),
                    )
                )
        if rng.random() < 0.15:
            g = rng.randrange(GPUS)
            events.append(
                Event(
                    now,
                    host,
                    EventKind.XID,
                    "kmsg",
                    "NVRM: Xid 79",
                    code=79,
                    pci_bus_id=f"0000:{0x18 + g:02x}:00",
                )
            )
    rng.shuffle(samples)  # the feed's order within a time is the statement's, then the columns'
    samples.sort(key=lambda s: s.ts)  # oldest first
    return samples, events


@pytest.mark.parametrize("seed", range(5))
def test_steady_gpus_summed_up_leave_the_rules_where_their_rows_do(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    policy = load_policy()
    by_rows, summed = Rules(policy), Rules(policy)
    remembered = 0  # steady hosts taken by their memo (`_HostMemo`): the previous round's state, unchanged
    keep = Rules._keep_steady

    def counted(rules: Rules, taken: Any) -> None:
        nonlocal remembered
        remembered += sum(isinstance(t[2], tuple) and hasattr(t[2], "epoch") for t in taken)
        keep(rules, taken)

    monkeypatch.setattr(Rules, "_keep_steady", counted)
    counters = {(h, g): [0, 0, 0, 0] for h in HOSTS for g in range(GPUS)}
    taken = sent_back = 0
    for r in range(60):
        samples, events = _round(rng, T0 + 5 * r, counters)
        rows = [tuple(getattr(s, n) for n in NAMES) for s in samples]
        busy = {
            (h, ComponentKind.GPU, f"GPU-{h}-{g}") for h in HOSTS for g in range(GPUS) if rng.random() < 0.05
        }
        split = Split(rows, {e.host for e in events}, policy.gpu.temperature_warn_celsius)
        expected = by_rows.observations(Signals(gpu_rows=Rows(NAMES, rows), events=events), busy)
        got = summed.observations(Signals(gpu_source=split, events=events), busy)
        assert got == expected, f"round {r}"
        assert summed.previous == by_rows.previous
        assert summed.uuids == by_rows.uuids
        assert summed.read_at == by_rows.read_at
        assert summed.names == by_rows.names
        assert summed.heard == by_rows.heard, f"round {r}"
        # The engine empties `heard` after each round: left to pile up, the round's hosts would hide in it.
        by_rows.heard.clear()
        summed.heard.clear()
        (asked,) = split.asked
        taken += len(split.steady_hosts - asked)
        sent_back += len(asked)
    assert taken > 100 and sent_back > 10  # both ways a steady host can go were taken
    assert 20 < remembered < taken  # and of the steady hosts taken, some by their memo, some looked at


def test_without_busy_every_steady_host_goes_row_by_row() -> None:
    """`busy` None: every healthy observation is built, so no summary can stand for its rows."""
    rng = random.Random(1)
    samples, _ = _round(rng, T0, {(h, g): [0, 0, 0, 0] for h in HOSTS for g in range(GPUS)})
    rows = [tuple(getattr(s, n) for n in NAMES) for s in samples]
    split = Split(rows, set(), 90.0)
    assert split.steady
    expected = Rules(load_policy()).observations(Signals(gpu_rows=Rows(NAMES, rows)))
    assert Rules(load_policy()).observations(Signals(gpu_source=split)) == expected
    assert split.asked == [split.steady_hosts]


def test_steady_gpus_offer_the_pacer_a_pause_between_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fleet's steady GPUs are taken in runs (`Rules.pace` every PACE_ROWS GPUs), never splitting a
    host: its GPUs are judged together."""
    import diagnosis.rules

    monkeypatch.setattr(diagnosis.rules, "PACE_ROWS", 4)
    rules = Rules(load_policy())
    hosts_at_pause: list[int] = []
    rules.pace = lambda: hosts_at_pause.append(len(rules.read_at))
    steady = [
        SteadyGpu(f"h{h}", f"GPU-{h}-{g}", g, f"0000:{0x18 + g:02x}:00.0", T0, 0, 0, 0, 0, True)
        for h in range(10)
        for g in range(GPUS)
    ]
    taken, by_rows = rules._take_steady(steady, set())
    assert by_rows == set() and len(taken) == 10
    # GPUS (3) a host: a pause after every second host while they are judged, and again while kept.
    judged = len(hosts_at_pause)
    assert judged == 10 * GPUS // 6
    rules._keep_steady(taken)
    assert len(rules.read_at) == 10 * GPUS
    kept = hosts_at_pause[judged:]
    assert kept and all(n % GPUS == 0 for n in kept)  # each at a host's edge
    assert len(kept) == 10 * GPUS // 6


@pytest.mark.parametrize("emptied", ["read_at", "previous", "moved"])
def test_a_memo_made_before_a_map_was_emptied_is_not_taken(
    emptied: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A map at its cap is emptied (a hostile or broken feed): the memos made before stand for state that is
    gone, and the host is looked at again, as its rows would be. Here the ports' readings fill `read_at`, or
    another host's samples fill `previous`, between two rounds in which n1 says the same. And ("moved") a
    sample of n1's own, at another address, moves the state its memo stands for."""
    import diagnosis.rules

    if emptied != "moved":
        monkeypatch.setattr(diagnosis.rules, "MAX_GPUS", 4)
    policy = load_policy()
    by_rows, summed = Rules(policy), Rules(policy)
    remembered: list[int] = []  # per round, the hosts taken by their memo
    keep = Rules._keep_steady

    def counted(rules: Rules, taken: Any) -> None:
        remembered.append(sum(isinstance(t[2], tuple) and hasattr(t[2], "epoch") for t in taken))
        keep(rules, taken)

    monkeypatch.setattr(Rules, "_keep_steady", counted)
    warn = policy.gpu.temperature_warn_celsius
    for r in range(3):
        now = T0 + 5 * r
        samples = [
            GpuSample(
                ts=now,
                host="n1",
                gpu_index=g,
                uuid=f"GPU-n1-{g}",
                pci_bus_id=f"0000:{0x18 + g:02x}:00.0",
                temperature_celsius=55.0,
                clocks_event_reasons=0x4,
                ecc_corrected_volatile=0,
                ecc_uncorrected_volatile=0,
                nvlink_crc_flit_errors=0,
                pcie_replay_errors=0,
                remapped_rows_pending=False,
            )
            for g in range(2)
        ]
        rows = [tuple(getattr(s, n) for n in NAMES) for s in samples]
        others: dict[str, Any] = {}
        if r == 1 and emptied == "read_at":  # ten ports read: past read_at's cap of 8
            others["readings"] = [Reading("n9", f"port:mlx5_{p}/1", now) for p in range(10)]
        if r == 1 and emptied == "previous":  # five more GPUs: past previous's cap of 4
            others["gpu_samples"] = [
                dataclasses.replace(s, host="n9", uuid=f"GPU-n9-{g}") for g, s in enumerate(samples * 3)
            ][:5]
        if r == 1 and emptied == "moved":  # n1's GPU 0 read once as a sample, at another address
            others["gpu_samples"] = [dataclasses.replace(samples[0], pci_bus_id="0000:40:00.0")]
            rows = []
        split = Split(rows, set(), warn)
        expected = by_rows.observations(Signals(gpu_rows=Rows(NAMES, rows), **others), set())
        got = summed.observations(Signals(gpu_source=split, **others), set())
        assert got == expected, f"round {r}"
        assert (summed.previous, summed.uuids, summed.read_at, summed.names) == (
            by_rows.previous,
            by_rows.uuids,
            by_rows.read_at,
            by_rows.names,
        ), f"round {r}"
    # Taken while it stood (round 1 before the readings, in "read_at"), never after: looked at again.
    assert remembered[-1] == 0
