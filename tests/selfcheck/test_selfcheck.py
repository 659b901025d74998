"""`fleetguard selfcheck` on this CPU machine: the gloo all-reduce runs the same code path a GPU host runs
through NCCL, and injected faults (a NIC port down in a fake sysfs tree, a simulated GPU with pending row
remaps after a double-bit error) fail it with a clear line and exit 2."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from collectors.gpu_sampling import SamplingPlan
from collectors.simulated import (
    EccRampThenDbe,
    SimulatedFleet,
    SimulatedGpuCollector,
    SimulatedKmsgCollector,
    SimulatedNicCollector,
)
from fleetguard.agent.sources import Sources
from fleetguard.cli import cli
from fleetguard.selfcheck.report import CheckState
from fleetguard.selfcheck.run import run_selfcheck
from fleetguard.selfcheck.torch_probe import TorchInfo
from fleetguard.settings.policy_files import load_policy
from tests.fixtures.sysfs.ib_tree import write_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

CLEAN_KMSG = "[    0.000000] Linux version 6.8.0\n"


def _selfcheck(*args: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["selfcheck", "--json", *args])
    return result.exit_code, json.loads(result.output)


def _checks(doc: dict[str, object], check: str) -> list[dict[str, object]]:
    return [c for c in doc["checks"] if c["check"] == check]  # type: ignore[union-attr,index,attr-defined]


def test_a_simulated_host_passes_with_the_gloo_all_reduce_on_cpu() -> None:
    code, doc = _selfcheck("--simulate", "1x2")
    assert code == 0, doc
    (allreduce,) = _checks(doc, "allreduce")
    assert allreduce["state"] == "passed"
    evidence = allreduce["evidence"]
    assert evidence["backend"] == "gloo" and evidence["ranks"] == 2 and evidence["busbw_gbps"] > 0  # type: ignore[index,operator]
    (compute,) = _checks(doc, "compute")
    assert compute["state"] == "skipped" and "no CUDA GPU" in str(compute["detail"])
    assert {c["state"] for c in _checks(doc, "nic")} == {"passed"}


def test_a_port_down_in_a_fake_sysfs_tree_fails_the_check(tmp_path: Path) -> None:
    write_port(tmp_path / "sys", "mlx5_0")
    write_port(tmp_path / "sys", "mlx5_1", state="1: DOWN", phys_state="3: Disabled")
    log = tmp_path / "kmsg.txt"
    log.write_text(CLEAN_KMSG)
    code, doc = _selfcheck("--gpus", "none", "--sysfs-root", str(tmp_path / "sys"), "--kmsg-file", str(log))
    assert code == 2, doc
    failed = [c for c in _checks(doc, "nic") if c["state"] == "failed"]
    assert [c["component"] for c in failed] == ["port:mlx5_1/1"]
    assert "DOWN" in str(failed[0]["detail"])
    assert doc["passed"] is False


def test_a_gpu_host_without_a_driver_is_unknown(tmp_path: Path) -> None:
    log = tmp_path / "kmsg.txt"
    log.write_text(CLEAN_KMSG)
    code, doc = _selfcheck("--kmsg-file", str(log), "--sysfs-root", str(tmp_path))
    assert code == 3, doc
    assert [(c["component"], c["state"]) for c in _checks(doc, "health")] == [("nvml", "unknown")]


def _fleet_with_a_double_bit_error() -> Sources:
    # The fault's whole ramp lies in the past: the first reading sees the DBE and the pending remap.
    fault = EccRampThenDbe(host=0, gpu=1, start_seconds=0, ramp_seconds=1.0, corrected_errors=10)
    fleet = SimulatedFleet(1, 2, ports_per_host=1, faults=[fault], start_ts=time.time() - 60)
    collectors = [
        SimulatedGpuCollector(fleet, SamplingPlan.every(0.0)),
        SimulatedNicCollector(fleet),
        SimulatedKmsgCollector(fleet),
    ]
    return Sources(collectors, None, [], simulated=True, gpus=2)  # type: ignore[arg-type]


def test_a_simulated_gpu_with_pending_row_remaps_fails_the_health_check() -> None:
    sources = _fleet_with_a_double_bit_error()
    report = run_selfcheck(
        "sim-host-000",
        sources,
        load_policy(),
        gpus=[0, 1],
        missing=[],
        timeout_seconds=120,
        torch=TorchInfo(False, 0, "PyTorch is not installed (pip install torch)"),
    )
    failed = [r for r in report.results if r.check == "health" and r.state is CheckState.FAILED]
    assert failed and all(r.component.startswith("gpu:") for r in failed), report.results
    assert any("xid:48" in r.detail or "remap" in r.detail for r in failed)
    assert int(report.status) == 2 and not report.passed
    findings = report.findings()
    assert findings and all(f.kind == "selfcheck_failed" and f.severity == "critical" for f in findings)
    assert json.loads(findings[0].evidence_json)["check"] == "health"
    skipped = [r for r in report.results if r.state is CheckState.SKIPPED]
    assert [r.check for r in skipped] == ["compute", "allreduce"]  # said, not silently passed


def test_an_all_reduce_past_the_deadline_fails_and_leaves_no_process(tmp_path: Path) -> None:
    write_port(tmp_path / "sys", "mlx5_0")
    report = run_selfcheck(
        "h",
        Sources([], None, []),
        load_policy(),
        gpus=[],
        missing=[],
        timeout_seconds=0.01,  # each stage still gets its one-second floor: not enough to start PyTorch
        torch=TorchInfo(True, 0, ""),
    )
    (allreduce,) = [r for r in report.results if r.check == "allreduce"]
    assert allreduce.state is CheckState.FAILED and "timed out" in allreduce.detail
    assert report.results[-1].check == "deadline"


def test_usage_errors_exit_64() -> None:
    assert CliRunner().invoke(cli, ["selfcheck", "--gpus", "all,please"]).exit_code == 64
    assert CliRunner().invoke(cli, ["selfcheck", "--timeout", "forever"]).exit_code == 64
