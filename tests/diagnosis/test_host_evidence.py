"""Host evidence: faults the agent saw itself, tied to the suspect rank's process or GPU."""

from __future__ import annotations

from collectors.gpu_device import GpuProcesses
from diagnosis.host_evidence import HostFault, evidence_for, host_fault, suspect_ranks
from fleetguard.records.findings import Finding, FindingKind, Severity
from fleetguard.records.telemetry import Event, EventKind

FATAL = frozenset({48, 79, 95})
GPUS = [
    GpuProcesses("GPU-0", 0, "0000:3b:00.0", (4242,)),
    GpuProcesses("GPU-1", 1, "0000:5e:00.0", (5151,)),
]


def xid(
    code: int, *, source: str = "kmsg", bus: str | None = "0000:3b:00.0", pid: int | None = None
) -> Event:
    return Event(100.0, "h", EventKind.XID, source, f"Xid {code}", code=code, pci_bus_id=bus, pid=pid)


def test_a_fatal_xid_from_the_kernel_log_or_nvml_is_a_host_fault() -> None:
    assert host_fault(xid(48), FATAL) is not None
    assert host_fault(xid(79, source="nvml"), FATAL) is not None


def test_an_application_xid_is_not_a_host_fault() -> None:
    assert host_fault(xid(13), FATAL) is None  # a program's own fault: a user can cause it


def test_what_the_ranks_write_is_not_a_host_fault() -> None:
    assert host_fault(xid(48, source="nccl_log"), FATAL) is None
    assert (
        host_fault(Event(100.0, "h", EventKind.NCCL_ERROR, "nccl_log", "unhandled system error"), FATAL)
        is None
    )


def test_a_gpu_off_the_bus_is_a_host_fault() -> None:
    gone = Event(
        100.0, "h", EventKind.GPU_FALLEN_OFF_BUS, "kmsg", "GPU has fallen off the bus", pci_bus_id="x"
    )
    assert host_fault(gone, FATAL) is not None


def _fault(bus: str | None = "0000:3b:00.0", *, ts: float = 100.0, pid: int | None = None) -> HostFault:
    return HostFault(ts, EventKind.XID, "kmsg", 48, None, bus, pid)


def test_a_fault_on_the_gpu_the_suspects_process_uses_bears_on_it() -> None:
    evidence = evidence_for([_fault()], [4242], GPUS, 0.0, 200.0)
    assert evidence.corroborates
    assert evidence.describe() == "XID 48 on 0000:3b:00.0 (kmsg)"


def test_a_fault_on_another_gpu_of_the_host_does_not() -> None:
    assert not evidence_for([_fault("0000:5e:00.0")], [4242], GPUS, 0.0, 200.0).corroborates


def test_a_fault_the_kernel_attributes_to_the_suspects_process_bears_on_it_without_nvml() -> None:
    assert evidence_for([_fault(None, pid=4242)], [4242], [], 0.0, 200.0).corroborates


def test_a_fault_outside_the_window_does_not() -> None:
    assert not evidence_for([_fault(ts=10.0)], [4242], GPUS, 50.0, 200.0).corroborates


def test_no_trusted_process_no_evidence() -> None:
    assert not evidence_for([_fault()], [], GPUS, 0.0, 200.0).corroborates


def test_the_suspects_of_a_localised_hang_come_from_its_evidence() -> None:
    hang = Finding(
        1.0,
        "f",
        FindingKind.HANG_LOCALISED,
        Severity.CRITICAL,
        "s",
        "s",
        "h",
        "j",
        evidence_json='{"suspect_ranks": [1, 3]}',
    )
    assert suspect_ranks(hang) == (1, 3)
