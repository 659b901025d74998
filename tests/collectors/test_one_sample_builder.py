"""One family of GPU simulators behind the device Protocol: every `GpuSample` the code makes is built by
`collectors.gpu_sampling`, from a `GpuDevice`'s readings (NVML, the simulated fleet, a scripted history)."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
from enum import StrEnum
from pathlib import Path

from collectors.gpu_device import FastReading, GpuIdentity
from collectors.gpu_sampling import fast_sample
from collectors.scripted_device import ScriptedGpuDevice
from fleetguard.incidents.simulated_history import history
from fleetguard.records.telemetry import GpuSample

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fleetguard", "collectors", "predictor", "diagnosis", "straggler", "dashboard")
BUILDER = ROOT / "collectors" / "gpu_sampling.py"


def _builds_gpu_samples(path: Path) -> list[int]:
    """Lines of `path` that call GpuSample(...) directly."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "GpuSample")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "GpuSample")
        )
    ]


def test_no_module_but_the_sampler_builds_gpu_samples() -> None:
    offenders = {
        str(path.relative_to(ROOT)): lines
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != BUILDER and (lines := _builds_gpu_samples(path))
    }
    assert offenders == {}
    assert _builds_gpu_samples(BUILDER), "the builder itself must still be found by this scan"


def test_a_fast_sample_of_a_scripted_device_carries_its_reading_and_no_slow_read() -> None:
    device = ScriptedGpuDevice(GpuIdentity(index=2, uuid="GPU-x", pci_bus_id="0000:38:00.0"))
    device.set_fast(FastReading(temperature_celsius=71.0, clocks_event_reasons=0x40))
    sample = fast_sample(device, "node0007", 1000.0)
    assert (sample.ts, sample.host, sample.gpu_index, sample.uuid, sample.pci_bus_id) == (
        1000.0,
        "node0007",
        2,
        "GPU-x",
        "0000:38:00.0",
    )
    assert (sample.temperature_celsius, sample.clocks_event_reasons) == (71.0, 0x40)
    # nothing slow was read: no slow_read_ts, no PCIe or NVLink fields, no energy
    assert sample.slow_read_ts is None and sample.pcie_link_gen is None and sample.energy_joules is None


def test_the_incident_history_is_unchanged_by_its_move_onto_the_device_seam() -> None:
    """The digest of a small history with a hot GPU in it, as generated before the samples went through
    the scripted device and the one builder (seeded: same records, same values, same order)."""
    records = [r for day in history(4, 3, seed=3, gpus_per_host=2) for r in day]
    digest = hashlib.sha256()
    for r in records:
        assert dataclasses.is_dataclass(r) and not isinstance(r, type)
        # an enum member (Event.kind) as its text, as the record held it when the digest was taken
        values = tuple(str(v) if isinstance(v, StrEnum) else v for v in dataclasses.astuple(r))
        digest.update(repr((type(r).__name__, values)).encode())
    hot = [r for r in records if isinstance(r, GpuSample) and r.temperature_celsius == 92.0]
    assert len(records) == 2316 and len(hot) == 5
    assert digest.hexdigest() == "01698c4066dceb42fcee64afa2fb53615b5cb5def86d14a47f7b0d1b26e319ec"
