"""Who is on the other end of a loopback report: the uid owning the client's TCP socket and that socket's
inode, from /proc/net/tcp (IPv4) or /proc/net/tcp6 (IPv6). The inode finds the sending process (the one
holding the socket), which is what lets the agent tell a rank's own pid from a pid it merely names."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Sender:
    """The user who sent a report and the inode of the client's socket (None: not known, so no pid the
    report names can be shown to be the sender's)."""

    uid: int
    socket_inode: int | None = None


def _proc_hex(address: str, port: int) -> str:
    # /proc/net/tcp{,6} print an address as 32-bit words, each in host (little-endian) byte order
    packed = ipaddress.ip_address(address).packed
    words = (int.from_bytes(packed[i : i + 4], "little") for i in range(0, len(packed), 4))
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def tcp_peer(client: tuple[str, int], server: tuple[str, int], proc_root: str = "/proc") -> Sender | None:
    """The owner and socket inode of the client end of the connection client -> server; None when
    not found."""
    try:
        want_local, want_remote = _proc_hex(*client), _proc_hex(*server)
        table = "tcp6" if ":" in client[0] else "tcp"
        text = (Path(proc_root) / "net" / table).read_text()
    except (OSError, ValueError):
        return None
    # Looked up at every accept: find the one line in C rather than split thousands of them in Python.
    at = text.find(f" {want_local} {want_remote} ")
    if at < 0:
        return None
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    fields = text[start : end if end >= 0 else len(text)].split()
    if len(fields) > 9 and fields[1] == want_local and fields[2] == want_remote:
        try:
            return Sender(uid=int(fields[7]), socket_inode=int(fields[9]))
        except ValueError:
            return None
    return None


def tcp_peer_uid(client: tuple[str, int], server: tuple[str, int], proc_root: str = "/proc") -> int | None:
    """The uid that owns the client end of the connection client -> server; None when not found."""
    sender = tcp_peer(client, server, proc_root)
    return None if sender is None else sender.uid


def pid_uid(pid: int, proc_root: str = "/proc") -> int | None:
    """The real uid of process `pid`; None when it does not exist (here) or cannot be read."""
    try:
        for line in (Path(proc_root) / str(pid) / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
