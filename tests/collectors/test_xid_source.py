"""Which collector reports XIDs on a real host: the kernel log when it can be read, else NVML; never both.

The driver reports each XID to NVML's event set and as an `NVRM: Xid` kernel-log line; a scripted driver
(`nvml_stub`) and a file standing in for /dev/kmsg play both sides of one XID.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.event_dedup import EventDeduplicator
from fleetguard.agent.metrics import MetricsState
from fleetguard.agent.sources import Sources, build_sources, collect_once
from fleetguard.config import Config, load_config
from fleetguard.records.telemetry import Batch, Event, EventKind
from tests.collectors.nvml_stub import FakeGpu, FakeNvml

HOST = "gpu-node-017"
NOW = 1_700_000_000.0
# XID 79 on FakeGpu()'s bus (00000000:18:00.0), as the driver prints it to /dev/kmsg.
KERNEL_XID_79 = (
    "4,812,300000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=4242, name=python3, GPU has fallen off the bus.\n"
)


def config(tmp_path: Path, *, kmsg: bool = True, kmsg_path: Path | None = None) -> Config:
    if kmsg_path is None:
        kmsg_path = tmp_path / "kmsg"
        kmsg_path.write_text(KERNEL_XID_79)
    return load_config(
        env={},
        overrides={
            "agent.host": HOST,
            "collectors.rdma": False,
            "collectors.kmsg": kmsg,
            "collectors.kmsg_path": str(kmsg_path),
            "collectors.kmsg_state_path": "",
        },
    )


def one_round(sources: Sources) -> Batch:
    batch = Batch()
    for collector in sources.collectors:
        batch.extend(collector.collect(NOW))
        collector.close()
    return batch


def xid_counter(metrics: MetricsState) -> dict[tuple[str, str, str], float]:
    """fleetguard_gpu_xid_errors_total as a scrape shows it, by (host, pci_bus_id, xid)."""
    registry = CollectorRegistry()
    registry.register(metrics)
    return {
        (s.labels["host"], s.labels["pci_bus_id"], s.labels["xid"]): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
        if s.name == "fleetguard_gpu_xid_errors_total"
    }


def xids(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind == EventKind.XID]


def test_one_xid_reported_to_nvml_and_the_kernel_log_is_counted_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    driver = FakeNvml([FakeGpu()]).install(monkeypatch)
    sources = build_sources(config(tmp_path))
    driver.xid(0, 79)  # the same XID as the kernel-log line

    batch = one_round(sources)
    metrics = MetricsState()
    metrics.observe(batch)
    folder = EventDeduplicator()
    stored = [row for e in batch.events for row in folder.add(e)] + folder.drain(NOW, force=True)

    assert xid_counter(metrics) == {(HOST, "0000:18:00.0", "79"): 1.0}
    assert sum(e.count for e in xids(stored)) == 1


def test_xids_come_from_the_kernel_log_when_it_can_be_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    driver = FakeNvml([FakeGpu()]).install(monkeypatch)
    sources = build_sources(config(tmp_path))
    driver.xid(0, 79)

    (xid,) = xids(one_round(sources).events)

    assert sources.xid_source == "kmsg"
    assert (xid.source, xid.code, xid.pid, xid.process_name) == ("kmsg", 79, 4242, "python3")
    assert driver.calls["nvmlEventSetCreate"] == 0


@pytest.mark.parametrize("kernel_log", ["unreadable", "switched_off"])
def test_collect_once_shows_nvml_xids_when_no_kernel_log_is_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kernel_log: str
) -> None:
    driver = FakeNvml([FakeGpu()]).install(monkeypatch)
    driver.pending_xids.append((0, 79))  # waiting in the event set when the round drains it
    if kernel_log == "unreadable":
        cfg = config(tmp_path, kmsg_path=tmp_path / "no-such-kmsg")
    else:
        cfg = config(tmp_path, kmsg=False)

    report = collect_once(cfg)

    assert report["xid_source"] == "nvml"
    assert [(e["source"], e["code"], e["pci_bus_id"]) for e in report["events"]] == [
        ("nvml", 79, "0000:18:00.0")
    ]
