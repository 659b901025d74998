"""The feed's steady GPUs (`StoreFeed._gpu_split`: summed up in SQL) against the same store read row by
row: the same observations and the same per-GPU state, on a real DuckDB store, in the corners the
randomised equivalence test does not reach."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

import pytest

from diagnosis.model import ComponentKind, Observation
from diagnosis.rules import Component, Rules
from fleetguard.incidents.feed import StoreFeed
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.records.telemetry import GpuSample
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
    return [(seen[0], rules[0]), (seen[1], rules[1])], summed


def _same(got: tuple[list[Observation], Rules], expected: tuple[list[Observation], Rules]) -> None:
    assert got[0] == expected[0]
    for state in ("previous", "uuids", "read_at", "names", "heard"):
        assert getattr(got[1], state) == getattr(expected[1], state), state


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
