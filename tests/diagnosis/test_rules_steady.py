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
from diagnosis.rules import GPU_ROW_ORDER, Reading, Rows, Rules, Signals, SteadyGpu, _HostMemo
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
        remembered += sum(isinstance(t[2], _HostMemo) for t in taken)
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
        remembered.append(sum(isinstance(t[2], _HostMemo) for t in taken))
        keep(rules, taken)

    monkeypatch.setattr(Rules, "_keep_steady", counted)
    warn = policy.gpu.temperature_warn_celsius
    for r in range(3):
        now = T0 + 5 * r
        samples = [_gpu("n1", g, now) for g in range(2)]
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


# ---- adversarial rounds: the memo (`_HostMemo`) against the rows, case by case ----------------------------


def _gpu(host: str, g: int, ts: float, **changes: Any) -> GpuSample:
    """A calm GPU sample (nothing a rule calls a fault; says "healthy" of its throttling and rows)."""
    base = GpuSample(
        ts=ts,
        host=host,
        gpu_index=g,
        uuid=f"GPU-{host}-{g}",
        pci_bus_id=f"0000:{0x18 + g:02x}:00.0",
        temperature_celsius=55.0,
        clocks_event_reasons=0x4,
        ecc_corrected_volatile=0,
        ecc_uncorrected_volatile=0,
        nvlink_crc_flit_errors=0,
        pcie_replay_errors=0,
        remapped_rows_pending=False,
    )
    return dataclasses.replace(base, **changes)


class _Both:
    """One `Rules` fed rows, one fed the same rows summed up (`Split`), round after round; every round both
    must leave the same observations, per-GPU state and hosts heard from. `taken_by_memo` counts, per round,
    the steady hosts the summed rules took by their memo (a case no memo is taken in tests nothing)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.policy = load_policy()
        self.by_rows, self.summed = Rules(self.policy), Rules(self.policy)
        self.taken_by_memo: list[int] = []
        keep = Rules._keep_steady

        def counted(rules: Rules, taken: Any) -> None:
            if rules is self.summed:
                self.taken_by_memo.append(sum(isinstance(t[2], _HostMemo) for t in taken))
            keep(rules, taken)

        monkeypatch.setattr(Rules, "_keep_steady", counted)

    def round(
        self,
        rows: Sequence[GpuSample],
        busy: Collection[tuple[str, ComponentKind, str]] = (),
        samples: Sequence[GpuSample] = (),
        events: Sequence[Event] = (),
    ) -> None:
        n = len(self.taken_by_memo)
        as_rows = [tuple(getattr(s, name) for name in NAMES) for s in rows]
        split = Split(as_rows, {e.host for e in events}, self.policy.gpu.temperature_warn_celsius)
        expected = self.by_rows.observations(
            Signals(gpu_samples=samples, gpu_rows=Rows(NAMES, as_rows), events=events), set(busy)
        )
        got = self.summed.observations(
            Signals(gpu_samples=samples, gpu_source=split, events=events), set(busy)
        )
        assert got == expected, f"round {n}"
        self.same_state(f"round {n}")
        if len(self.taken_by_memo) == n:  # every host row by row: no `_keep_steady`
            self.taken_by_memo.append(0)

    def restore(self, samples: Sequence[GpuSample]) -> None:
        self.by_rows.restore(samples, ())
        self.summed.restore(samples, ())
        self.same_state("restore")

    def same_state(self, when: str) -> None:
        a, b = self.summed, self.by_rows
        assert (a.previous, a.uuids, a.read_at, a.names, a.heard) == (
            b.previous,
            b.uuids,
            b.read_at,
            b.names,
            b.heard,
        ), when
        a.heard.clear()
        b.heard.clear()


def _host(host: str, ts: float, gpus: int = 2, **changes: Any) -> list[GpuSample]:
    return [_gpu(host, g, ts, **changes) for g in range(gpus)]


def test_a_memo_is_not_taken_after_two_gpus_of_its_host_swapped_index_and_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A and B swap index and address for a round (another summary: looked at), then swap back: the memo
    of the first round must not stand, as which GPU each index and address names moved twice since."""
    both = _Both(monkeypatch)
    swapped = [
        _gpu("n1", 0, 0, gpu_index=1, pci_bus_id="0000:19:00.0"),
        _gpu("n1", 1, 0, gpu_index=0, pci_bus_id="0000:18:00.0"),
    ]
    both.round(_host("n1", T0))
    both.round(_host("n1", T0 + 5))
    both.round([dataclasses.replace(s, ts=T0 + 10) for s in swapped])
    both.round(_host("n1", T0 + 15))
    both.round(_host("n1", T0 + 20))
    assert both.taken_by_memo == [0, 1, 0, 0, 1]


def test_a_swap_seen_only_in_rows_forgets_the_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap comes in a round whose host is not steady (an event): its rows move the index and address
    keys, and the next round's summary (as the memo's) is looked at, not taken by the memo."""
    both = _Both(monkeypatch)
    both.round(_host("n1", T0))
    both.round(_host("n1", T0 + 5))
    swapped = [
        _gpu("n1", 0, T0 + 10, gpu_index=1, pci_bus_id="0000:19:00.0"),
        _gpu("n1", 1, T0 + 10, gpu_index=0, pci_bus_id="0000:18:00.0"),
    ]
    event = Event(T0 + 10, "n1", EventKind.XID, "kmsg", "NVRM: Xid 79", code=79, pci_bus_id="0000:18:00")
    both.round(swapped, events=[event])
    both.round(_host("n1", T0 + 15))
    both.round(_host("n1", T0 + 20))
    assert both.taken_by_memo == [0, 1, 0, 0, 1]


def test_a_gpu_that_leaves_its_host_and_comes_back_is_taken_as_its_rows_take_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    both = _Both(monkeypatch)
    both.round(_host("n1", T0, gpus=3))
    both.round(_host("n1", T0 + 5, gpus=2))  # GPU 2 gone: another summary
    both.round(_host("n1", T0 + 10, gpus=2))
    both.round(_host("n1", T0 + 15, gpus=3))  # back, its state as it left it
    both.round(_host("n1", T0 + 20, gpus=3))
    both.round([])  # the host silent for a round: its memo stays, and still stands
    both.round(_host("n1", T0 + 30, gpus=3))
    assert both.taken_by_memo == [0, 0, 1, 0, 1, 0, 1]


def test_late_and_equal_times_move_the_memo_host_as_its_rows_move_it(monkeypatch: pytest.MonkeyPatch) -> None:
    both = _Both(monkeypatch)
    both.round(_host("n1", T0))
    both.round(_host("n1", T0 + 5))
    both.round(_host("n1", T0 + 5))  # the same time again
    both.round(_host("n1", T0 - 30))  # late: older than what is kept, neither kept nor read
    both.round([*_host("n1", T0 - 1), *_host("n1", T0 + 7)])  # late and new rows of one round
    both.round(_host("n1", T0 + 6))  # older than the newest kept (T0 + 7): neither kept nor read
    assert both.taken_by_memo == [0, 1, 1, 1, 1, 1]


def test_a_host_busy_one_round_and_not_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    both = _Both(monkeypatch)
    hot = {("n1", ComponentKind.GPU, "GPU-n1-0")}
    other = {("n1", ComponentKind.GPU, "GPU-n1-9")}  # a GPU of the host the summary does not name
    both.round(_host("n1", T0))
    both.round(_host("n1", T0 + 5), busy=hot)  # its rows: the busy GPU's healthy observations are built
    both.round(_host("n1", T0 + 10))
    both.round(_host("n1", T0 + 15))
    both.round(_host("n1", T0 + 20), busy=other)
    both.round(_host("n1", T0 + 25))
    assert both.taken_by_memo == [0, 0, 0, 1, 0, 1]


def test_a_change_of_what_the_rows_say_healthy_is_another_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    both = _Both(monkeypatch)
    quiet: dict[str, Any] = {"clocks_event_reasons": None, "remapped_rows_pending": None}  # says nothing
    both.round(_host("n1", T0))
    both.round(_host("n1", T0 + 5))
    both.round(_host("n1", T0 + 10, **quiet))  # heard from no longer: not by the memo's say
    both.round(_host("n1", T0 + 15, **quiet))
    both.round(_host("n1", T0 + 20))
    assert both.taken_by_memo == [0, 1, 0, 1, 0]


def test_null_counters_and_addresses_are_taken_by_the_memo_as_by_the_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    both = _Both(monkeypatch)
    nulls: dict[str, Any] = {
        "pci_bus_id": None,
        "nvlink_crc_flit_errors": None,
        "ecc_corrected_volatile": None,
    }
    both.round(_host("n1", T0, **nulls))
    both.round(_host("n1", T0 + 5, **nulls))
    both.round(_host("n1", T0 + 10))  # counters read again: not those kept, so row by row
    both.round(_host("n1", T0 + 15))
    both.round(_host("n1", T0 + 20))
    both.round(_host("n1", T0 + 25, pci_bus_id=None))
    both.round(_host("n1", T0 + 30, pci_bus_id=None))
    assert both.taken_by_memo == [0, 1, 0, 0, 1, 0, 1]


def test_samples_of_the_memo_host_in_its_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample record of the host beside the summary (taken first) moves its state, and the host goes row
    by row that round; its memo is forgotten, and the next round's summary is looked at again."""
    both = _Both(monkeypatch)
    both.round(_host("n1", T0))
    both.round(_host("n1", T0 + 5))
    both.round(_host("n1", T0 + 10), samples=[_gpu("n1", 0, T0 + 9, pci_bus_id="0000:40:00.0")])
    both.round(_host("n1", T0 + 15))
    both.round(_host("n1", T0 + 20))
    both.round(_host("n1", T0 + 25), samples=[_gpu("n1", 1, T0 + 30)])  # newer than the summary
    both.round(_host("n1", T0 + 35))
    both.round(_host("n1", T0 + 40))
    assert both.taken_by_memo == [0, 1, 0, 0, 1, 0, 0, 1]


def test_restore_forgets_the_memos_of_the_hosts_it_takes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    both = _Both(monkeypatch)
    both.round([*_host("n1", T0), *_host("n2", T0)])
    both.round([*_host("n1", T0 + 5), *_host("n2", T0 + 5)])
    both.restore([_gpu("n1", 0, T0 + 1, gpu_index=1, pci_bus_id="0000:19:00.0", ecc_corrected_volatile=4)])
    # n1's counters are the restored sample's now: its rows, then looked at, then its memo again
    both.round([*_host("n1", T0 + 10), *_host("n2", T0 + 10)])
    both.round([*_host("n1", T0 + 15), *_host("n2", T0 + 15)])
    both.round([*_host("n1", T0 + 20), *_host("n2", T0 + 20)])
    assert both.taken_by_memo == [0, 2, 1, 1, 2]


def test_memos_never_outlive_the_state_they_stand_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A map at its cap is emptied; the memos made before stand for nothing then, and must go with it:
    kept, they would pile up (a GPU key each) past every bound on the per-GPU state (MAX_GPUS hosts of
    however many GPUs a host's summary named), for a feed of new hosts with many GPUs each."""
    import diagnosis.rules

    monkeypatch.setattr(diagnosis.rules, "MAX_GPUS", 8)
    both = _Both(monkeypatch)
    for r in range(24):  # a new host of 4 GPUs a round: the maps fill and are emptied every other round
        both.round(_host(f"h{r}", T0 + r, gpus=4))
        memo_gpus = sum(len(m.keys) for m in both.summed.memos.values())
        assert memo_gpus <= len(both.summed.previous), f"round {r}: memos of {memo_gpus} GPUs"


def test_a_sample_record_that_faults_a_steady_hosts_gpu_has_its_rows_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sample record beside the summary (`Signals` takes any mix) faults one of the host's GPUs: the
    rows' healthy observations of that GPU are built in their places, as an event's fault would have them
    built; a summary (or a memo) would leave them out."""
    both = _Both(monkeypatch)
    both.round(_host("n1", T0))
    both.round(_host("n1", T0 + 5))
    hot = _gpu("n1", 0, T0 + 9, temperature_celsius=99.0)
    both.round(_host("n1", T0 + 10), samples=[hot])
    both.round(_host("n1", T0 + 15), samples=[_gpu("n1", 1, T0 + 14)])  # a calm one: rows all the same
    both.round(_host("n1", T0 + 20))
    both.round(_host("n1", T0 + 25))
    assert both.taken_by_memo == [0, 1, 0, 0, 0, 1]
