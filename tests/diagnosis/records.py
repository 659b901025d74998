"""Small builders of collector records for the diagnosis tests."""

from __future__ import annotations

from fleetguard.records.telemetry import Event, EventKind, GpuSample, NicCounterSample, NicSample

T0 = 1_700_000_000.0
PCI = "0000:9b:00.0"
UUID = "GPU-aaaa"


def xid(code: int, ts: float, host: str = "node1", pci: str = "0000:9b:00", count: int = 1) -> Event:
    return Event(
        ts=ts,
        host=host,
        kind=EventKind.XID,
        source="kmsg",
        message=f"NVRM: Xid (PCI:{pci}): {code}, pid=1, name=python3, something",
        code=code,
        pci_bus_id=pci,
        count=count,
    )


def gpu(ts: float, host: str = "node1", uuid: str = UUID, **fields: object) -> GpuSample:
    return GpuSample(ts=ts, host=host, gpu_index=0, uuid=uuid, pci_bus_id=PCI, **fields)  # type: ignore[arg-type]


def port(ts: float, state: str, host: str = "node1") -> NicSample:
    return NicSample(ts=ts, host=host, device="mlx5_0", port=1, state=state)


def counter(
    ts: float, name: str, delta: int, rate: float | None = None, host: str = "node1"
) -> NicCounterSample:
    return NicCounterSample(
        ts=ts,
        host=host,
        device="mlx5_0",
        port=1,
        counter=name,
        group="counters",
        value=100 + delta,
        delta=delta,
        rate_per_second=rate,
    )
