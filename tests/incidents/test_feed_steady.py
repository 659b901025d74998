"""The feed's steady GPUs (`StoreFeed._gpu_split`: summed up in SQL) against the same store read row by
row: the same observations and the same per-GPU state, on a real DuckDB store, in the corners the
randomised equivalence test does not reach."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Collection, Sequence
from pathlib import Path

import pytest

from diagnosis.model import ComponentKind, Observation
from diagnosis.rules import Component, Rules
from diagnosis.rules_gpu import FAULT_BITS
from fleetguard.incidents.feed import StoreFeed
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.records.telemetry import Event, EventKind, GpuSample
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store

T0 = 1_700_000_000.0


def _calm(host: str, g: int, ts: float) -> GpuSample:
    return GpuSample(
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


def _both_ways(
    path: Path, rounds: Sequence[Sequence[object]], busy: Collection[Component] = ()
) -> tuple[list[tuple[list[Observation], Rules]], int]:
    """Each round stored, then read by a feed that sums steady GPUs up and by one that does not, each
    into its own rules: (observations, rules) of each, and how many GPUs the first summed up."""
    policy = load_policy()
    summed = 0
    with Store.open(path) as store:
        feeds = (
            StoreFeed(store.connection, temperature_warn=policy.gpu.temperature_warn_celsius),
            StoreFeed(store.connection),
        )
        rules = (Rules(policy), Rules(policy))
        seen: tuple[list[Observation], list[Observation]] = ([], [])
        for n, records in enumerate(rounds):
            store.append(records)
            for feed, r, out in zip(feeds, rules, seen, strict=True):
                signals = feed.read(T0 + n)
                if signals.gpu_source is not None:
                    summed += len(signals.gpu_source.steady)
                out.extend(r.observations(signals, set(busy)))
            # Round by round, as the engine takes and empties it: piled up, a round's hosts would hide.
            assert rules[0].heard == rules[1].heard, f"heard, round {n}"
            for r in rules:
                r.heard.clear()
    return [(seen[0], rules[0]), (seen[1], rules[1])], summed


def _same(got: tuple[list[Observation], Rules], expected: tuple[list[Observation], Rules]) -> None:
    assert got[0] == expected[0]
    for state in ("previous", "uuids", "read_at", "names", "heard"):
        assert getattr(got[1], state) == getattr(expected[1], state), state


WARN = load_policy().gpu.temperature_warn_celsius


@pytest.mark.parametrize(
    ("change", "rows"),
    [
        ({"remapped_rows_failure": True}, "newest"),
        ({"remapped_rows_pending": True}, "newest"),
        ({"remapped_rows_pending": None}, "newest"),
        ({"clocks_event_reasons": None}, "host"),  # "healthy" said by the remap state alone
        ({"clocks_event_reasons": None, "remapped_rows_pending": None}, "host"),  # nothing healthy said
        ({"clocks_event_reasons": FAULT_BITS & -FAULT_BITS}, "newest"),
        ({"temperature_celsius": WARN}, "newest"),
        ({"temperature_celsius": WARN - 0.01}, "gpu"),
        ({"temperature_celsius": math.nan}, "newest"),
        ({"temperature_celsius": None}, "gpu"),
        ({"ecc_corrected_volatile": None}, "newest"),
        ({"ecc_corrected_volatile": None}, "gpu"),
        ({"ecc_corrected_volatile": 1}, "newest"),
        ({"pcie_replay_errors": 3}, "gpu"),
        ({"pci_bus_id": "0000:18:00.0".upper()}, "newest"),
        ({"pci_bus_id": "0000:18:00.0".upper()}, "gpu"),
        ({"pci_bus_id": None}, "gpu"),
        ({"pci_bus_id": "0000:19:00"}, "gpu"),  # the other GPU's address, written without its function
        ({"gpu_index": 1}, "gpu"),  # the other GPU's index
        ({"gpu_index": 7}, "newest"),
        ({"ts": T0 - 5}, "gpu"),  # late: older than the sample the rules kept
    ],
)
def test_one_corner_of_the_steady_test_leaves_the_rules_where_the_rows_do(
    tmp_path: Path, change: dict[str, object], rows: str
) -> None:
    """Two calm rounds of two hosts; in the second, one value changed in the newest row of one GPU, in
    every row of that GPU, or in every row of its host: the SQL's "same", "fault" and "says healthy"
    tests each met one value at a time (NULL, NaN, the warning itself, a fault bit, an address spelled
    otherwise, another GPU's index or address, a late time)."""
    first = [_calm(h, g, T0 - 2 + ts) for ts in (0.0, 0.5) for h in ("a", "b") for g in range(2)]
    second = [_calm(h, g, T0 + ts) for ts in (0.0, 0.5) for h in ("a", "b") for g in range(2)]
    newest = second[4]  # a's GPU 0, the later time

    def changed(sample: GpuSample) -> bool:
        if rows == "host":
            return sample.host == "a"
        return sample.uuid == "GPU-a-0" and (rows == "gpu" or sample is newest)

    second = [dataclasses.replace(s, **change) if changed(s) else s for s in second]  # type: ignore[arg-type]
    (got, expected), summed = _both_ways(tmp_path / "s.duckdb", [first, second, second[:4]])
    _same(got, expected)
    assert summed >= 4 + 2  # the first round's GPUs, and b's in the second: the summary path was taken


@pytest.mark.parametrize("finding_host", [None, ""])
def test_a_hostless_finding_about_a_gpu_of_a_host_named_fleet_sends_that_host_row_by_row(
    tmp_path: Path, finding_host: str | None
) -> None:
    """The rules key a finding without a host to the host "fleet" (`finding_observation`): a GPU a
    finding faults this round has its quiet rows built, so a host of that name is not steady."""
    finding = Finding(
        ts=T0,
        finding_id="f1",
        kind=FindingKind.STRAGGLER,
        severity=Severity.WARNING,
        subject="gpu",
        summary="slow",
        host=finding_host,
        gpu_uuid="GPU-fleet-0",
    )
    rows = [_calm("fleet", g, T0 - 1) for g in range(2)] + [_calm("fleet", g, T0) for g in range(2)]
    (got, expected), summed = _both_ways(tmp_path / "s.duckdb", [rows, [*rows[2:], finding]])
    assert any(o.key.host == "fleet" and o.healthy for o in expected[0])  # the quiet rows were built
    _same(got, expected)
    assert summed == 2  # the first round's two GPUs: the summary path was taken


def test_host_names_with_quotes_are_values_not_sql(tmp_path: Path) -> None:
    hosts = ("n'1", 'n"2', "n3) OR (1=1")
    first = [_calm(h, g, T0 - 1) for h in hosts for g in range(2)]
    second = [_calm(h, g, T0) for h in hosts for g in range(2)]
    busy = {("n'1", ComponentKind.GPU, "GPU-n'1-0")}
    (got, expected), summed = _both_ways(tmp_path / "s.duckdb", [first, second], busy)
    _same(got, expected)
    assert summed == 2 * 6  # every GPU summed up in both rounds (the busy host's are sent back)


def test_near_the_caps_the_rules_state_is_what_the_rows_in_their_order_leave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At MAX_GPUS a per-GPU map is emptied mid-round, and which GPUs it keeps then depends on the order
    the rows come in: steady GPUs taken first would be kept where the rows path forgets them."""
    import diagnosis.rules

    monkeypatch.setattr(diagnosis.rules, "MAX_GPUS", 3)
    hot = [
        GpuSample(
            ts=T0 - 0.5,
            host="b",
            gpu_index=g,
            uuid=f"GPU-b-{g}",
            pci_bus_id=f"0000:{0x18 + g:02x}:00.0",
            temperature_celsius=95.0,  # at the warning: host b goes row by row
        )
        for g in range(2)
    ]
    calm = [_calm("a", g, T0) for g in range(2)]
    (got, expected), summed = _both_ways(tmp_path / "s.duckdb", [[*hot, *calm]])
    assert summed == 2
    _same(got, expected)


def _odd_round(rng: random.Random, now: float, counters: dict[tuple[str, int], list[int]]) -> list[object]:
    """A round whose rows reach the corners of the SQL's "same" and "fault" tests: NULL and NaN values,
    a PCI address in another case or without its function, one index twice, late and equal times, the
    fault bits, a remap pending or failed, events, and findings with and without a host."""
    warn = load_policy().gpu.temperature_warn_celsius
    out: list[object] = []
    for host in ODD_HOSTS:
        odd = rng.random() < 0.3
        for ts in sorted(now - rng.choice([0.0, 0.0, 0.5, 30.0]) for _ in range(rng.randint(0, 3))):
            for g in range(3):
                c = counters[(host, g)]
                if odd and rng.random() < 0.2:
                    c[rng.randrange(4)] += 1
                values = [None if odd and rng.random() < 0.1 else v for v in c]
                plain = f"0000:{0x18 + g:02x}:00.0"
                pci: str | None = plain
                if odd and rng.random() < 0.2:
                    pci = rng.choice([None, plain.upper(), plain.removesuffix(".0"), "0000:18:00.0"])
                out.append(
                    GpuSample(
                        ts=ts,
                        host=host,
                        gpu_index=0 if odd and rng.random() < 0.1 else g,
                        uuid=f"GPU-{host}-{g}",
                        pci_bus_id=pci,
                        temperature_celsius=rng.choice([math.nan, None, warn, warn - 0.01, 55.0])
                        if odd
                        else 55.0,
                        clocks_event_reasons=rng.choice([0x4, 0, None, 0x8, 0x20, -1]) if odd else 0x4,
                        ecc_corrected_volatile=values[0],
                        ecc_uncorrected_volatile=values[1],
                        nvlink_crc_flit_errors=values[2],
                        pcie_replay_errors=values[3],
                        remapped_rows_pending=rng.choice([False, None, True] if odd else [False, None]),
                        remapped_rows_failure=rng.choice([None, False, True]) if odd else None,
                    )
                )
        if rng.random() < 0.05:
            out.append(
                Event(now, host, EventKind.XID, "kmsg", "NVRM: Xid 79", code=79, pci_bus_id="0000:18:00")
            )
        if rng.random() < 0.05:
            out.append(
                Finding(
                    ts=now,
                    finding_id=f"f-{now}-{host}",
                    kind=FindingKind.STRAGGLER,
                    severity=Severity.WARNING,
                    subject="gpu",
                    summary="slow",
                    host=rng.choice([None, "", host]),
                    gpu_uuid=f"GPU-{host}-0",
                )
            )
    return out


ODD_HOSTS = ("n1", "n'2", 'n"3', "fleet")


@pytest.mark.parametrize("seed", range(3))
def test_rounds_at_the_corners_of_the_steady_test_leave_the_rules_where_their_rows_do(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    counters = {(h, g): [0, 0, 0, 0] for h in ODD_HOSTS for g in range(3)}
    gpus = [(h, ComponentKind.GPU, f"GPU-{h}-{g}") for h in ODD_HOSTS for g in range(3)]
    policy = load_policy()
    summed = 0
    with Store.open(tmp_path / "s.duckdb") as store:
        feeds = (
            StoreFeed(store.connection, temperature_warn=policy.gpu.temperature_warn_celsius),
            StoreFeed(store.connection),
        )
        rules = (Rules(policy), Rules(policy))
        for n in range(25):
            now = T0 + 2 * n
            records = _odd_round(rng, now, counters)
            if records:
                store.append(records)
            busy = None if rng.random() < 0.1 else set(rng.sample(gpus, rng.randint(0, 2)))
            seen = []
            for feed, r in zip(feeds, rules, strict=True):
                signals = feed.read(now)
                if signals.gpu_source is not None:
                    summed += len(signals.gpu_source.steady)
                seen.append((r.observations(signals, busy), r))
            _same(seen[0], seen[1])
            for r in rules:
                r.heard.clear()
    assert summed > 20  # the summary path was taken
