"""Who is on the other end of a loopback report: the uid owning the client's TCP socket (/proc/net/tcp) and
the uid owning the pid the report names. The agent signals that pid on a restart and often runs as root, so
it only trusts a pid that belongs to the sender (or any pid when the sender is root)."""

from __future__ import annotations

import ipaddress
from pathlib import Path


def _proc_hex(address: str, port: int) -> str:
    # /proc/net/tcp prints an IPv4 address as the hex of its 32-bit value in host (little-endian) order
    packed = ipaddress.IPv4Address(address).packed
    return f"{int.from_bytes(packed, 'little'):08X}:{port:04X}"


def tcp_peer_uid(client: tuple[str, int], server: tuple[str, int], proc_root: str = "/proc") -> int | None:
    """The uid that owns the client end of the IPv4 connection client -> server; None when not found."""
    try:
        want_local, want_remote = _proc_hex(*client), _proc_hex(*server)
        lines = (Path(proc_root) / "net" / "tcp").read_text().splitlines()[1:]
    except (OSError, ValueError):
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 7 and fields[1] == want_local and fields[2] == want_remote:
            try:
                return int(fields[7])
            except ValueError:
                return None
    return None


def pid_uid(pid: int, proc_root: str = "/proc") -> int | None:
    """The real uid of process `pid`; None when it does not exist (here) or cannot be read."""
    try:
        for line in (Path(proc_root) / str(pid) / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def pid_trusted(sender_uid: int | None, pid: int, proc_root: str = "/proc") -> bool:
    """True when the sender may have the agent watch and signal `pid`: the sender is root, or the pid is a
    process of the sender's own uid. A pid of another user, or of another pid namespace, is not."""
    return sender_uid is not None and (sender_uid == 0 or pid_uid(pid, proc_root) == sender_uid)
