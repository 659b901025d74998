"""The agent's own hardware faults kept for the runtime's host actions: bounded, aged out, never fatal."""

from __future__ import annotations

from collectors.gpu_device import GpuProcesses
from fleetguard.records.telemetry import Event, EventKind
from fleetguard.runtime.host_signals import HostSignals, fatal_xids


class Processes:
    def __init__(self, gpus: list[GpuProcesses] | None = None) -> None:
        self.gpus = gpus

    def gpu_processes(self) -> list[GpuProcesses]:
        if self.gpus is None:
            raise RuntimeError("NVML went away")
        return self.gpus


def xid(ts: float, code: int = 48, bus: str = "0000:3b:00.0") -> Event:
    return Event(ts, "h", EventKind.XID, "kmsg", f"Xid {code}", code=code, pci_bus_id=bus)


def test_the_catalogues_fatal_xids_are_host_evidence_and_application_xids_are_not() -> None:
    fatal = fatal_xids()
    assert {48, 79, 95} <= fatal
    assert not {13, 31, 43} & fatal


def test_a_fault_on_the_gpu_a_suspect_process_uses_is_evidence() -> None:
    signals = HostSignals([Processes([GpuProcesses("GPU-0", 0, "0000:3b:00.0", (4242,))])], fatal_xids())
    signals.observe([xid(100.0), xid(100.0, code=13)])
    evidence = signals.evidence([4242], 0.0, 200.0)
    assert [f.code for f in evidence.faults] == [48]


def test_faults_kept_are_bounded_and_age_out() -> None:
    signals = HostSignals([Processes([GpuProcesses("GPU-0", 0, "0000:3b:00.0", (1,))])], {48}, max_faults=10)
    signals.observe([xid(float(t)) for t in range(100)])
    assert len(signals.evidence([1], 0.0, 1e9).faults) == 10
    signals.observe([xid(10_000.0)])  # an hour later: the old ones are gone
    assert [f.ts for f in signals.evidence([1], 0.0, 1e9).faults] == [10_000.0]


def test_a_collector_failing_to_list_processes_costs_the_evidence_not_the_runtime() -> None:
    signals = HostSignals([Processes(None)], {48})
    signals.observe([xid(100.0)])
    assert not signals.evidence([4242], 0.0, 200.0).corroborates
