"""`fleetguard scan` on fixture kernel logs and sysfs trees: the summary and the Nagios-style exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from fleetguard.cli import cli
from tests.fixtures.sysfs.ib_tree import h100_host, write_port

KMSG = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg"


def run_scan(tmp_path: Path, *args: str) -> tuple[int, str]:
    config = tmp_path / "c.toml"
    config.write_text("[collectors]\nkmsg = false\n")
    result = CliRunner().invoke(cli, ["scan", "--no-nvml", "--config", str(config), *args])
    return result.exit_code, result.output


def test_a_host_with_a_gpu_fallen_off_the_bus_is_critical(tmp_path: Path) -> None:
    h100_host(tmp_path / "sys")
    code, out = run_scan(
        tmp_path, "--kmsg-file", str(KMSG / "dmesg_iso.txt"), "--sysfs-root", str(tmp_path / "sys")
    )
    assert code == 2
    assert "CRITICAL" in out and "xid:79" in out and "reboot_node" in out


def test_a_single_application_xid_is_healthy(tmp_path: Path) -> None:
    h100_host(tmp_path / "sys")
    log = tmp_path / "k.txt"
    log.write_text(
        "[  227.996636] NVRM: Xid (PCI:0000:01:00): 31, pid=5120, name=python, Ch 00000003 MMU Fault\n"
    )
    code, out = run_scan(tmp_path, "--kmsg-file", str(log), "--sysfs-root", str(tmp_path / "sys"))
    assert code == 0, out
    assert "HEALTHY" in out and "no faults found" in out


def test_a_link_that_went_down_since_the_counters_were_reset_is_a_warning(tmp_path: Path) -> None:
    write_port(tmp_path / "sys", "mlx5_0", values={"link_downed": 2})
    log = tmp_path / "k.txt"
    log.write_text("[    0.000000] Linux version 6.8.0\n")
    code, out = run_scan(tmp_path, "--kmsg-file", str(log), "--sysfs-root", str(tmp_path / "sys"), "--json")
    assert code == 1
    report = json.loads(out)
    assert report["status"] == "warning"
    assert [(f["component"], f["fault"]) for f in report["findings"]] == [
        ("port:mlx5_0/1", "nic:link_downed")
    ]


def test_a_port_that_is_down_is_critical(tmp_path: Path) -> None:
    write_port(tmp_path / "sys", "mlx5_3", state="1: DOWN", phys_state="3: Disabled")
    log = tmp_path / "k.txt"
    log.write_text("[    0.000000] Linux version 6.8.0\n")
    code, out = run_scan(tmp_path, "--kmsg-file", str(log), "--sysfs-root", str(tmp_path / "sys"))
    assert code == 2 and "nic:port_down" in out


def test_nothing_to_look_at_is_unknown(tmp_path: Path) -> None:
    code, out = run_scan(tmp_path, "--sysfs-root", str(tmp_path / "missing"))
    assert code == 3, out


def test_an_invalid_policy_is_unknown_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[collectors]\nkmsg = false\n[policy.xid.31]\nmin_count = 0\n")
    result = CliRunner().invoke(cli, ["scan", "--no-nvml", "--config", str(config)])
    assert result.exit_code == 3
    assert "policy.xid.31.min_count" in result.output


def test_a_gpu_host_whose_driver_cannot_be_read_is_unknown_not_healthy(tmp_path: Path) -> None:
    # No NVIDIA driver on this machine: NVML cannot load. Without --no-nvml the GPUs are required.
    config = tmp_path / "c.toml"
    config.write_text("[collectors]\nkmsg = false\n")
    log = tmp_path / "k.txt"
    log.write_text("[    0.000000] Linux version 6.8.0\n")
    result = CliRunner().invoke(
        cli, ["scan", "--config", str(config), "--kmsg-file", str(log), "--sysfs-root", str(tmp_path)]
    )
    assert result.exit_code == 3, result.output
    assert "UNKNOWN" in result.output and "nvml: required but could not be read" in result.output
    assert "--no-nvml" in result.output


def test_a_driverless_host_reports_the_missing_source_in_json(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[collectors]\nkmsg = false\n")
    log = tmp_path / "k.txt"
    log.write_text("[    0.000000] Linux version 6.8.0\n")
    args = ["--json", "--config", str(config), "--kmsg-file", str(log), "--sysfs-root", str(tmp_path)]
    result = CliRunner().invoke(cli, ["scan", *args])
    report = json.loads(result.output)
    assert (result.exit_code, report["status"], report["missing_required"]) == (3, "unknown", ["nvml"])


def test_a_critical_fault_is_critical_even_when_a_required_source_is_missing(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[collectors]\nkmsg = false\n")
    result = CliRunner().invoke(
        cli, ["scan", "--config", str(config), "--kmsg-file", str(KMSG / "dmesg_iso.txt")]
    )
    assert result.exit_code == 2, result.output


def test_a_kernel_log_that_cannot_be_read_is_unknown(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[collectors]\nkmsg = true\nkmsg_path = "{tmp_path / "no-such-kmsg"}"\n')
    write_port(tmp_path / "sys", "mlx5_0")
    result = CliRunner().invoke(
        cli, ["scan", "--no-nvml", "--config", str(config), "--sysfs-root", str(tmp_path / "sys")]
    )
    assert result.exit_code == 3, result.output
    assert "kernel log: required but could not be read" in result.output


def test_a_usage_error_exits_64_not_critical(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["scan", "--no-such-flag"])
    assert result.exit_code == 64 and "--no-such-flag" in result.output
    result = CliRunner().invoke(cli, ["scan", "--interval", "-5"])
    assert result.exit_code == 64 and "--interval" in result.output
