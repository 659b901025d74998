"""Who is on the other end of a loopback report: the uid owning the client's TCP socket and that socket's
inode. The inode finds the sending process (the one holding the socket), which is what lets the agent tell a
rank's own pid from a pid it merely names.

Asked of the kernel for that one socket (NETLINK_SOCK_DIAG, as `ss` does: constant cost), and only where
netlink is unavailable read from /proc/net/tcp{,6}, whose cost grows with every socket on the host (20 ms for
6,500 sockets): the lookup runs for every connection a local user opens, so it must not be the slow one."""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
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
    if proc_root == "/proc":  # the kernel's own answer for this host (tests pass a fake /proc)
        try:
            return diag_peer(client, server)
        except _NoSockDiag:
            pass
    return proc_peer(client, server, proc_root)


class _NoSockDiag(Exception):
    """Netlink socket diagnostics cannot be used here (no netlink, a seccomp filter, an old kernel)."""


_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_NO_COOKIE = 0xFFFFFFFF
_ALL_STATES = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_UID_INODE = struct.Struct("=II")  # inet_diag_msg's idiag_uid, idiag_inode
_UID_OFFSET = _HEADER.size + 4 + 48 + 12


def diag_peer(client: tuple[str, int], server: tuple[str, int], wait: bool = True) -> Sender | None:
    """tcp_peer through NETLINK_SOCK_DIAG: the one socket named by its four-tuple, as the kernel sees it.
    wait=False: never block (for an event loop's thread); _NoSockDiag if the answer is not there at once.
    The kernel answers a sock_diag request within the send itself, so it always is on a working kernel."""
    family = socket.AF_INET6 if ":" in client[0] else socket.AF_INET
    try:  # inet_pton rather than ipaddress: this runs at every accept, on the server's loop thread
        local, remote = socket.inet_pton(family, client[0]), socket.inet_pton(family, server[0])
    except OSError as exc:
        raise ValueError(f"not an address pair: {client[0]!r}, {server[0]!r}") from exc
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES)
    request += struct.pack("!HH", client[1], server[1])
    request += local.ljust(16, b"\0") + remote.ljust(16, b"\0")
    request += struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
    message = _HEADER.pack(_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0) + request
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(1.0 if wait else 0.0)
            nl.send(message)
            reply = nl.recv(8192)
    except OSError as exc:
        raise _NoSockDiag(str(exc)) from exc
    if len(reply) < _HEADER.size:
        raise _NoSockDiag("short netlink reply")
    _, kind, _, _, _ = _HEADER.unpack_from(reply)
    if kind == _NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", reply, _HEADER.size)
        if -code == errno.ENOENT:
            return None  # no such connection (the client has gone)
        raise _NoSockDiag(f"sock_diag error {-code}")
    if kind != _SOCK_DIAG_BY_FAMILY or len(reply) < _UID_OFFSET + _UID_INODE.size:
        raise _NoSockDiag(f"unexpected netlink reply type {kind}")
    uid, inode = _UID_INODE.unpack_from(reply, _UID_OFFSET)
    return Sender(uid=uid, socket_inode=inode)


def proc_peer(client: tuple[str, int], server: tuple[str, int], proc_root: str = "/proc") -> Sender | None:
    """tcp_peer from /proc/net/tcp{,6} (netlink unavailable, or a fake /proc in tests)."""
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


def connection_owner(client: tuple[str, int], server: tuple[str, int]) -> tuple[str, object]:
    """Who holds a connection, for a per-owner connection cap: a loopback client is its uid (one local user
    can bind any 127.x address), a remote one its address; ("unknown", None) when the uid cannot be found."""
    address = _peer_address(client)
    if address is None:
        return ("address", client[0])
    if not address.is_loopback:
        return ("address", str(address))
    sender = tcp_peer(client, server)
    return ("uid", sender.uid) if sender is not None else ("unknown", None)


def connection_owner_now(client: tuple[str, int], server: tuple[str, int]) -> tuple[str, object] | None:
    """connection_owner without blocking, for an event loop's thread: the same answer, or None where only a
    blocking lookup (netlink unavailable: /proc/net/tcp read whole) could give it. A remote client costs no
    system call; a loopback one is one netlink request for its one socket."""
    address = _peer_address(client)
    if address is None:
        return ("address", client[0])
    if not address.is_loopback:
        return ("address", str(address))
    try:
        sender = diag_peer(client, server, wait=False)
    except _NoSockDiag:
        return None
    return ("uid", sender.uid) if sender is not None else ("unknown", None)


def _peer_address(client: tuple[str, int]) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(client[0].partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


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
