"""What kernel messages mean: each fault kind, field by field, and the lines deliberately not events."""

from __future__ import annotations

import pytest

from collectors.kmsg_classify import (
    AER_CORRECTED,
    AER_UNCORRECTED_FATAL,
    AER_UNCORRECTED_NONFATAL,
    KernelFault,
    classify_kernel_message,
    normalise_pci_bus_id,
)
from fleetguard.records.telemetry import EventKind


def test_xid_with_pid_and_process_name() -> None:
    fault = classify_kernel_message(
        "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC "
        "response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8)."
    )
    assert fault == KernelFault(
        EventKind.XID, code=119, pci_bus_id="0000:9b:00.0", pid=2024380, process_name="nvidia-smi"
    )


def test_xid_with_unknown_process_has_no_pid_or_name() -> None:
    fault = classify_kernel_message(
        "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on "
        "(GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
    )
    assert fault == KernelFault(EventKind.XID, code=13, pci_bus_id="0000:cb:00.0")


def test_xid_from_an_older_driver_without_pid() -> None:
    fault = classify_kernel_message("NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000")
    assert fault == KernelFault(EventKind.XID, code=32, pci_bus_id="0000:01:00.0")


def test_xid_from_a_very_old_driver_without_pci_prefix() -> None:
    fault = classify_kernel_message("NVRM: Xid (0000:03:00): 13, 0001 00000000 0000a097 00001b0c")
    assert fault == KernelFault(EventKind.XID, code=13, pci_bus_id="0000:03:00.0")


def test_xid_79_stays_an_xid_event_not_a_fallen_off_bus_event() -> None:
    fault = classify_kernel_message(
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1911, name=python3, GPU has fallen off the bus."
    )
    assert fault == KernelFault(
        EventKind.XID, code=79, pci_bus_id="0000:3b:00.0", pid=1911, process_name="python3"
    )


def test_xid_on_a_non_zero_pci_domain() -> None:
    fault = classify_kernel_message(
        "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406)"
    )
    assert fault == KernelFault(EventKind.XID, code=149, pci_bus_id="0019:01:00.0")


def test_nvrm_follow_up_lines_are_not_events() -> None:
    assert classify_kernel_message("NVRM: GPU0 GSP RPC buffer contains function 76 (GSP_RM_CONTROL)") is None
    assert classify_kernel_message("NVRM: GPU Board Serial Number: 1654922004117") is None


def test_sxid_names_the_nvswitch_and_its_bus_id() -> None:
    fault = classify_kernel_message(
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 12 "
        "egress non-posted PRIV error (First)"
    )
    assert fault == KernelFault(
        EventKind.SXID, code=12028, pci_bus_id="0000:05:00.0", device="nvidia-nvswitch3"
    )


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: GPU at PCI:0000:3b:00: GPU has fallen off the bus.",
        "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
    ],
)
def test_gpu_fallen_off_the_bus(message: str) -> None:
    assert classify_kernel_message(message) == KernelFault(
        EventKind.GPU_FALLEN_OFF_BUS, pci_bus_id="0000:3b:00.0"
    )


def test_aer_corrected_error_names_the_source_device_and_reporting_port() -> None:
    fault = classify_kernel_message("pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0")
    assert fault == KernelFault(
        EventKind.PCIE_AER, code=AER_CORRECTED, pci_bus_id="0000:01:00.0", device="pcieport 0000:00:01.0"
    )


def test_aer_multiple_uncorrected_fatal() -> None:
    fault = classify_kernel_message(
        "pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:03:00.0"
    )
    assert fault == KernelFault(
        EventKind.PCIE_AER,
        code=AER_UNCORRECTED_FATAL,
        pci_bus_id="0000:03:00.0",
        device="pcieport 0000:00:03.0",
    )


def test_aer_uncorrected_non_fatal() -> None:
    fault = classify_kernel_message(
        "pcieport 0000:00:03.0: AER: Uncorrected (Non-Fatal) error received: 0000:03:00.0"
    )
    assert fault is not None
    assert fault.code == AER_UNCORRECTED_NONFATAL


def test_aer_newer_kernel_wording() -> None:
    fault = classify_kernel_message(
        "pcieport 0000:00:01.0: AER: Correctable error message received from 0000:01:00.0"
    )
    assert fault == KernelFault(
        EventKind.PCIE_AER, code=AER_CORRECTED, pci_bus_id="0000:01:00.0", device="pcieport 0000:00:01.0"
    )


def test_aer_with_only_a_requester_id_falls_back_to_the_port() -> None:
    fault = classify_kernel_message("pcieport 0000:00:1c.0: AER: Corrected error received: id=00e0")
    assert fault is not None
    assert fault.pci_bus_id == "0000:00:1c.0"


def test_aer_detail_lines_are_not_counted_a_second_time() -> None:
    assert (
        classify_kernel_message(
            "pcieport 0000:00:01.0: AER: PCIe Bus Error: "
            "severity=Corrected, type=Physical Layer, (Receiver ID)"
        )
        is None
    )
    assert (
        classify_kernel_message(
            "pcieport 0000:00:01.0: AER:   device [8086:1901] error status/mask=00000001/00002000"
        )
        is None
    )


def test_mlx5_insufficient_power() -> None:
    fault = classify_kernel_message(
        "mlx5_core 0000:5c:00.0: mlx5_pcie_event:299:(pid 268269): "
        "Detected insufficient power on the PCIe slot (27W)."
    )
    assert fault == KernelFault(EventKind.NIC_INSUFFICIENT_POWER, pci_bus_id="0000:5c:00.0")


def test_mlx5_power_capability_not_advertised_is_not_an_event() -> None:
    message = (
        "mlx5_core 0000:13:00.0: mlx5_pcie_event:297:(pid 11): PCIe slot power capability was not advertised."
    )
    assert classify_kernel_message(message) is None


def test_mlx5_sensor_over_temperature() -> None:
    fault = classify_kernel_message(
        "mlx5_core 0000:41:00.1: temp_warn:170:(pid 0): High temperature on sensors with bit set 0 1"
    )
    assert fault == KernelFault(EventKind.NIC_OVER_TEMPERATURE, pci_bus_id="0000:41:00.1")


def test_mlx5_module_over_temperature_names_the_interface() -> None:
    fault = classify_kernel_message(
        "mlx5_core 0000:08:00.0 ens1f0: Port module event[error]: module 0, Cable error, High Temperature"
    )
    assert fault == KernelFault(EventKind.NIC_OVER_TEMPERATURE, pci_bus_id="0000:08:00.0", device="ens1f0")


def test_segfault_in_libnccl() -> None:
    fault = classify_kernel_message(
        "python[12345]: segfault at 0 ip 00007f3a2b1c4d5e sp 00007ffd1e2f3a40 error 4 in "
        "libnccl.so.2.18.3[7f3a2a000000+1f4e000] likely on CPU 3 (core 3, socket 0)"
    )
    assert fault == KernelFault(
        EventKind.SEGFAULT_NCCL, device="libnccl.so.2.18.3", pid=12345, process_name="python"
    )


def test_general_protection_fault_in_libcuda() -> None:
    fault = classify_kernel_message(
        "traps: pt_main_thread[4242] general protection fault ip:7f1e2c3d4e5f sp:7ffc9a8b7c6d error:0 in "
        "libcuda.so.535.104.05[7f1e2b000000+1a00000]"
    )
    assert fault == KernelFault(
        EventKind.SEGFAULT_CUDA, device="libcuda.so.535.104.05", pid=4242, process_name="pt_main_thread"
    )


def test_segfault_of_a_process_name_with_a_space() -> None:
    fault = classify_kernel_message(
        "Dataloader 0[77]: segfault at 8 ip 00007f00 sp 00007ff0 error 6 in libcudart.so.12[7f00+1000]"
    )
    assert fault is not None
    assert (fault.kind, fault.process_name, fault.pid) == (EventKind.SEGFAULT_CUDA, "Dataloader 0", 77)


def test_segfault_elsewhere_is_not_an_event() -> None:
    message = "python[1]: segfault at 0 ip 00007f00 sp 00007ff0 error 4 in libc.so.6[7f00+195000]"
    assert classify_kernel_message(message) is None


@pytest.mark.parametrize(
    "message",
    [
        "Linux version 6.8.0-45-generic",
        "nvidia-nvlink: Nvlink Core is being initialized, major device number 511",
        "mlx5_core 0000:0c:00.0: firmware version: 28.39.1002",
        "",
    ],
)
def test_ordinary_lines_are_not_events(message: str) -> None:
    assert classify_kernel_message(message) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PCI:0000:9B:00", "0000:9b:00.0"),
        ("00000000:9B:00.0", "0000:9b:00.0"),
        ("0000:9b:00.1", "0000:9b:00.1"),
        ("9b:00", "0000:9b:00.0"),
        ("0019:01:00", "0019:01:00.0"),
    ],
)
def test_pci_bus_ids_are_normalised_to_the_nvml_form(text: str, expected: str) -> None:
    assert normalise_pci_bus_id(text) == expected


@pytest.mark.parametrize("text", ["", "zz:00", "0000:9b", "100000000:9b:00.0", "0000:9b:00.8"])
def test_non_bus_ids_normalise_to_none(text: str) -> None:
    assert normalise_pci_bus_id(text) is None
