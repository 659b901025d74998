"""What a kernel-log message is about: XID, SXID, GPU off the bus, PCIe AER, mlx5 faults, NCCL/CUDA segfaults.

`classify_kernel_message` is pure and returns None for the (vast majority of) lines that are none of these.

PCI bus ids are normalised to the NVML form used across fleetguard, lower case with a 4-digit domain and a
function: ``0000:9b:00.0``. The NVIDIA driver prints GPUs without the function (``PCI:0000:9b:00``); a GPU is
always function 0, so ``.0`` is appended. NVML's 8-digit domain (``00000000:9B:00.0``) becomes 4 digits.

The driver sometimes adds follow-up lines after an Xid (``NVRM: GPU at PCI:...: GPU-<uuid>``,
``NVRM: GPU Board Serial Number: ...``); they repeat what the Xid line said or add identity only, and are
deliberately ignored. For PCIe AER only the "error received" summary line is an event; the detail lines after
it (``PCIe Bus Error: severity=...``, ``device [8086:1901] error status/mask=...``) describe the same error
and would count it twice.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

from fleetguard.records.telemetry import EventKind

# Event.code for PCIe AER events: the severity, so corrected and fatal errors are never folded together.
AER_CORRECTED: Final = 0
AER_UNCORRECTED_NONFATAL: Final = 1
AER_UNCORRECTED_FATAL: Final = 2


@dataclass(frozen=True, slots=True)
class KernelFault:
    """The fields of an Event that a kernel message determines."""

    kind: EventKind
    code: int | None = None
    pci_bus_id: str | None = None
    device: str | None = None
    pid: int | None = None
    process_name: str | None = None


_PCI = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(" + _PCI + r")\): (\d{1,6})(?:, (.*))?$")
_XID_PID = re.compile(r"pid='?(<unknown>|\d{1,10})'?, name=(.*?), ")
_SXID = re.compile(r"(nvidia-nvswitch\d{0,4}): SXid \((?:PCI:)?(" + _PCI + r")\): (\d{1,6})\b")
_FALLEN = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?(" + _PCI + r"):? .*fallen off the bus")
_AER_RECEIVED = re.compile(
    r"(\S{1,40}) ("
    + _PCI
    + r"): AER: (Multiple )?(Corrected|Correctable|Uncorrect(?:ed|able)(?: \((Non-Fatal|Fatal)\))?)"
    r" error(?: message)? received(?::| from) ?(?:id=)?(" + _PCI + r")?"
)
_MLX5 = re.compile(r"mlx5_core (" + _PCI + r")(?: (\w[\w.-]*):)?")
_OVER_TEMP = re.compile(r"high temperature|over[ -]?temperature", re.IGNORECASE)
_INSUFFICIENT_POWER = re.compile(r"insufficient power", re.IGNORECASE)
_SEGFAULT = re.compile(
    r"^(?:traps: )?(.{1,64}?)\[(\d{1,10})\]:? "
    r"(?:segfault at \S+ ip \S+ sp \S+ error \d+|general protection(?: fault)? \S.*?)"
    r" in (lib(?:nccl|cuda)[\w.+-]*)\["
)


# printk lines are at most ~1000 characters; longer input is not a kernel message, and capping it keeps every
# pattern below linear-ish on adversarial input.
MAX_MESSAGE_CHARS: Final = 4096


def classify_kernel_message(message: str) -> KernelFault | None:
    """The fault a kernel message reports, or None when it reports none of the kinds fleetguard follows."""
    message = message[:MAX_MESSAGE_CHARS]
    if "NVRM" in message:
        return _classify_nvrm(message)
    if "SXid" in message:
        sxid = _SXID.search(message)
        if sxid is None:
            return None
        return KernelFault(
            EventKind.SXID,
            code=int(sxid.group(3)),
            pci_bus_id=normalise_pci_bus_id(sxid.group(2)),
            device=sxid.group(1),
        )
    if "AER:" in message:
        return _classify_aer(message)
    if "mlx5_core" in message:
        return _classify_mlx5(message)
    if "lib" in message and ("segfault" in message or "general protection" in message):
        return _classify_segfault(message)
    return None


def _classify_nvrm(message: str) -> KernelFault | None:
    xid = _XID.search(message)
    if xid is not None:
        pid: int | None = None
        name: str | None = None
        who = _XID_PID.match(xid.group(3) or "")
        if who is not None:
            pid = None if who.group(1) == "<unknown>" else int(who.group(1))
            name = None if who.group(2) in ("<unknown>", "'<unknown>'", "") else who.group(2)
        return KernelFault(
            EventKind.XID,
            code=int(xid.group(2)),
            pci_bus_id=normalise_pci_bus_id(xid.group(1)),
            pid=pid,
            process_name=name,
        )
    fallen = _FALLEN.search(message)
    if fallen is not None:
        return KernelFault(EventKind.GPU_FALLEN_OFF_BUS, pci_bus_id=normalise_pci_bus_id(fallen.group(1)))
    return None


def _classify_aer(message: str) -> KernelFault | None:
    aer = _AER_RECEIVED.search(message)
    if aer is None:
        return None
    severity_text = aer.group(4)
    if severity_text.startswith("Correct"):
        severity = AER_CORRECTED
    elif aer.group(5) == "Fatal":
        severity = AER_UNCORRECTED_FATAL
    else:
        severity = AER_UNCORRECTED_NONFATAL
    port = normalise_pci_bus_id(aer.group(2))
    source = normalise_pci_bus_id(aer.group(6)) if aer.group(6) else None
    return KernelFault(
        EventKind.PCIE_AER,
        code=severity,
        pci_bus_id=source or port,
        device=f"{aer.group(1)} {port}",
    )


def _classify_mlx5(message: str) -> KernelFault | None:
    if _OVER_TEMP.search(message):
        kind = EventKind.NIC_OVER_TEMPERATURE
    elif _INSUFFICIENT_POWER.search(message):
        kind = EventKind.NIC_INSUFFICIENT_POWER
    else:
        return None
    nic = _MLX5.search(message)
    if nic is None:
        return KernelFault(kind)
    return KernelFault(kind, pci_bus_id=normalise_pci_bus_id(nic.group(1)), device=nic.group(2))


def _classify_segfault(message: str) -> KernelFault | None:
    crash = _SEGFAULT.match(message)
    if crash is None:
        return None
    library = crash.group(3)
    kind = EventKind.SEGFAULT_NCCL if library.startswith("libnccl") else EventKind.SEGFAULT_CUDA
    return KernelFault(kind, device=library, pid=int(crash.group(2)), process_name=crash.group(1))


@functools.lru_cache(maxsize=1024)  # a host has a few dozen bus ids; storms repeat them
def normalise_pci_bus_id(text: str) -> str | None:
    """``PCI:0000:9B:00`` / ``00000000:9b:00.0`` / ``9b:00`` -> ``0000:9b:00.0``; None if not a bus id."""
    text = text.strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    match = re.fullmatch(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.([0-7]))?", text)
    if match is None:
        return None
    domain = int(match.group(1) or "0", 16)
    if domain > 0xFFFF:
        return None
    return f"{domain:04x}:{match.group(2)}:{match.group(3)}.{match.group(4) or '0'}"
