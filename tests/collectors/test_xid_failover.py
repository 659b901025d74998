"""When the kernel-log collector stops mid-run, NVML's XID events take over, and each XID is counted once.

Real parts: a FIFO stands in for /dev/kmsg (its writer leaves and the path goes, so the collector cannot
reopen it: it gives up), the scripted driver plays NVML's side of each XID, /metrics counts them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.kmsg import STOP_AFTER_FAILED_READS, KmsgCollector
from collectors.nvml import NvmlCollector
from fleetguard.agent.metrics import MetricsState
from fleetguard.agent.sources import Sources, build_sources
from fleetguard.config import load_config
from fleetguard.records.telemetry import Batch, EventKind
from tests.collectors.nvml_stub import FakeGpu, FakeNvml

HOST = "gpu-node-017"
T0 = 1_700_000_000.0


def kernel_xid(seq: int, xid: int) -> bytes:
    return (
        f"4,{seq},{300000000 + seq},-;NVRM: Xid (PCI:0000:18:00): {xid}, pid=4242, name=python3, x\n".encode()
    )


@pytest.fixture
def kmsg_fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "kmsg"
    os.mkfifo(path)
    yield path


def sources_on(fifo: Path, tmp_path: Path) -> Sources:
    config = load_config(
        env={},
        overrides={
            "agent.host": HOST,
            "collectors.rdma": False,
            "collectors.kmsg_path": str(fifo),
            "collectors.kmsg_state_path": "",
        },
    )
    return build_sources(config)


def one_round(sources: Sources, now: float) -> Batch:
    batch = Batch()
    for collector in sources.collectors:  # NVML first, then the kernel log, as the agent orders them
        batch.extend(collector.collect(now))
    return batch


def xid_counts(metrics: MetricsState) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    registry.register(metrics)
    text = generate_latest(registry).decode()
    return {
        (s.labels["xid"], s.labels.get("source", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "fleetguard_gpu_xid_errors_total"
    }


def test_nvml_takes_over_xids_when_the_kernel_log_stops_and_counts_each_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kmsg_fifo: Path
) -> None:
    driver = FakeNvml([FakeGpu()]).install(monkeypatch)
    sources = sources_on(kmsg_fifo, tmp_path)
    nvml, kmsg = sources.collectors
    assert isinstance(nvml, NvmlCollector) and isinstance(kmsg, KmsgCollector)
    writer = os.open(kmsg_fifo, os.O_WRONLY | os.O_NONBLOCK)
    metrics = MetricsState()
    seen = []

    # While the kernel log runs, it alone reports XIDs (NVML has no event set: the driver's copy is not read).
    os.write(writer, kernel_xid(812, 79))
    driver.xid(0, 79)
    batch = one_round(sources, T0)
    metrics.observe(batch)
    seen += [(e.source, e.code) for e in batch.events if e.kind == EventKind.XID]
    assert driver.calls["nvmlEventSetCreate"] == 0

    # The log goes away mid-run: its writer leaves and the path is gone, so it cannot be reopened.
    os.close(writer)
    kmsg_fifo.unlink()
    metrics.observe(one_round(sources, T0 + 1))
    assert kmsg.stopped and kmsg.problems() == {"reopen_failed": 1}

    # The next round NVML registers its event set; XIDs from then on come from it, once each.
    for i, xid in enumerate((48, 48, 94), start=2):
        batch = one_round(sources, T0 + i)
        driver.xid(0, xid)
        metrics.observe(batch)
        seen += [(e.source, e.code) for e in batch.events if e.kind == EventKind.XID]
    batch = one_round(sources, T0 + 5)
    metrics.observe(batch)
    seen += [(e.source, e.code) for e in batch.events if e.kind == EventKind.XID]

    assert driver.calls["nvmlEventSetCreate"] == 1 and nvml.xid_events
    assert seen == [("kmsg", 79), ("nvml", 48), ("nvml", 48), ("nvml", 94)]
    counted = {xid: total for (xid, _source), total in xid_counts(metrics).items()}
    assert counted == {"79": 1.0, "48": 2.0, "94": 1.0}
    assert nvml.notes[-1].startswith("the kernel log stopped: XIDs come from NVML's event set")


def test_while_the_kernel_log_runs_nvml_never_opens_an_event_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kmsg_fifo: Path
) -> None:
    driver = FakeNvml([FakeGpu()]).install(monkeypatch)
    sources = sources_on(kmsg_fifo, tmp_path)
    writer = os.open(kmsg_fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        for i in range(10):
            os.write(writer, kernel_xid(900 + i, 13))
            driver.xid(0, 13)
            one_round(sources, T0 + i)
    finally:
        os.close(writer)
    assert driver.calls["nvmlEventSetCreate"] == 0
    assert not sources.collectors[1].stopped  # type: ignore[attr-defined]


def test_a_log_whose_reads_keep_failing_is_given_up_after_a_few_rounds(tmp_path: Path) -> None:
    # A directory opens but every read fails (EISDIR): a stand-in for a device that went bad mid-run.
    collector = KmsgCollector(HOST, str(tmp_path), boot_time=T0 - 100)
    for i in range(STOP_AFTER_FAILED_READS - 1):
        collector.collect(T0 + i)
        assert not collector.stopped
    collector.collect(T0 + 10)
    assert collector.stopped
    assert collector.problems() == {"read_error": STOP_AFTER_FAILED_READS}
    assert (
        len(collector.collect(T0 + 11)) == 0 and collector.problems()["read_error"] == STOP_AFTER_FAILED_READS
    )
