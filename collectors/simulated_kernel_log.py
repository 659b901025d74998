"""Kernel log lines of the simulated fleet, worded as the NVIDIA driver prints them, so they read as real.

Formats follow lines seen on hosts with r535+ drivers:
`NVRM: Xid (PCI:0000:9b:00): 48, pid=..., name=..., <detail>`,
with `pid='<unknown>', name=<unknown>` when no process owns the fault.
"""

from __future__ import annotations

import random
from collections.abc import Callable

_MMU_CLIENTS = ("GPCCLIENT_T1_0", "GPCCLIENT_T1_13", "GPCCLIENT_RAST", "GPCCLIENT_PE_3")
_MMU_FAULT_TYPES = ("FAULT_PDE ACCESS_TYPE_VIRT_READ", "FAULT_PTE ACCESS_TYPE_VIRT_WRITE")
_SM_EXCEPTIONS = ("Out Of Range Address", "Misaligned Address", "Illegal Instruction Encoding")


def kernel_pci(pci_bus_id: str) -> str:
    """The driver's short form of a bus id: "0000:9b:00.0" -> "PCI:0000:9b:00"."""
    return "PCI:" + pci_bus_id.rsplit(".", 1)[0]


def xid_line(pci_bus_id: str, xid: int, pid: int | None, process_name: str | None, detail: str) -> str:
    owner = f"pid={pid}, name={process_name}" if pid is not None else "pid='<unknown>', name=<unknown>"
    return f"NVRM: Xid ({kernel_pci(pci_bus_id)}): {xid}, {owner}, {detail}"


def fallen_off_bus_line(pci_bus_id: str) -> str:
    return f"NVRM: GPU at {kernel_pci(pci_bus_id)}: GPU has fallen off the bus."


def _xid_13(rng: random.Random) -> str:
    gpc, tpc, sm = rng.randrange(8), rng.randrange(9), rng.randrange(2)
    return f"Graphics SM Warp Exception on (GPC {gpc}, TPC {tpc}, SM {sm}): {rng.choice(_SM_EXCEPTIONS)}"


def _xid_31(rng: random.Random) -> str:
    address = rng.getrandbits(44)
    return (
        f"channel 0x{rng.randrange(1, 64):08x}, intr 00000000. MMU Fault: ENGINE GRAPHICS "
        f"GPC{rng.randrange(8)} {rng.choice(_MMU_CLIENTS)} "
        f"faulted @ 0x{address >> 32:x}_{address & 0xFFFFFFFF:08x}. "
        f"Fault is of type {rng.choice(_MMU_FAULT_TYPES)}"
    )


def _xid_43(rng: random.Random) -> str:
    return f"Ch {rng.randrange(1, 64):08x}"


def _xid_45(rng: random.Random) -> str:
    return f"Ch {rng.randrange(1, 64):08x}"


def _xid_48(rng: random.Random) -> str:
    return (
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr "
        f"0x{rng.getrandbits(36):x} partition {rng.randrange(8)}, subpartition {rng.randrange(2)}"
    )


def _xid_63(rng: random.Random) -> str:
    return "Row Remapper: New row marked for remapping, reset gpu to activate."


def _xid_74(rng: random.Random) -> str:
    return f"NVLink: fatal error detected on link {rng.randrange(18)}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"


def _xid_79(rng: random.Random) -> str:
    return "GPU has fallen off the bus."


def _xid_94(rng: random.Random) -> str:
    return f"Contained: SM (0x1). RST: No, D-RST: No (partition {rng.randrange(8)})"


def _xid_95(rng: random.Random) -> str:
    return "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No"


def _xid_119(rng: random.Random) -> str:
    return (
        "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL)."
    )


XID_DETAILS: dict[int, Callable[[random.Random], str]] = {
    13: _xid_13,
    31: _xid_31,
    43: _xid_43,
    45: _xid_45,
    48: _xid_48,
    63: _xid_63,
    74: _xid_74,
    79: _xid_79,
    94: _xid_94,
    95: _xid_95,
    119: _xid_119,
}


def xid_detail(xid: int, rng: random.Random) -> str:
    """The text after `name=...,` for an XID the simulation can raise (see XID_DETAILS)."""
    return XID_DETAILS[xid](rng)
