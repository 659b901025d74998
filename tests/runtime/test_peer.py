"""Peer lookup: the uid and socket inode of the client end of a loopback connection, IPv4 and IPv6."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from fleetguard.jobcontrol.peer import Sender, diag_peer, pid_uid, proc_peer, tcp_peer, tcp_peer_uid

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def fake_proc(tmp_path: Path, table: str, rows: list[tuple[str, str, int, int]]) -> str:
    body = "".join(
        f"   {i}: {local} {remote} 01 00000000:00000000 00:00000000 00000000  {uid}        0 {inode} 1\n"
        for i, (local, remote, uid, inode) in enumerate(rows)
    )
    (tmp_path / "net").mkdir(exist_ok=True)
    (tmp_path / "net" / table).write_text(HEADER + body)
    return str(tmp_path)


CLIENT, SERVER = ("127.0.0.1", 40000), ("127.0.0.1", 9477)  # 0100007F:9C40 -> 0100007F:2505


def test_the_sender_is_the_owner_and_inode_of_the_client_end_of_the_connection(tmp_path: Path) -> None:
    rows = [("0100007F:2505", "0100007F:9C40", 0, 11), ("0100007F:9C40", "0100007F:2505", 1001, 12)]
    proc = fake_proc(tmp_path, "tcp", rows)
    assert tcp_peer(CLIENT, SERVER, proc) == Sender(uid=1001, socket_inode=12)
    assert tcp_peer_uid(CLIENT, SERVER, proc) == 1001


def test_an_ipv6_loopback_sender_is_found_in_tcp6(tmp_path: Path) -> None:
    loop6 = "00000000000000000000000001000000"  # ::1 as /proc/net/tcp6 prints it
    rows = [(f"{loop6}:9C40", f"{loop6}:2505", 1002, 77)]
    proc = fake_proc(tmp_path, "tcp6", rows)
    assert tcp_peer(("::1", 40000), ("::1", 9477), proc) == Sender(uid=1002, socket_inode=77)


def test_a_connection_not_in_the_table_has_no_sender(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, "tcp", [])
    assert tcp_peer(CLIENT, SERVER, proc) is None


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_on_this_machine_a_real_loopback_connection_is_found_with_our_uid(
    family: socket.AddressFamily,
) -> None:
    address = "127.0.0.1" if family == socket.AF_INET else "::1"
    try:
        listener = socket.socket(family)
        listener.bind((address, 0))
    except OSError:
        pytest.skip(f"no {address} here")
    with listener:
        listener.listen()
        with socket.create_connection(listener.getsockname()[:2]) as client:
            sender = tcp_peer(client.getsockname()[:2], listener.getsockname()[:2])
            assert sender is not None and sender.uid == os.getuid()
            assert sender.socket_inode == os.fstat(client.fileno()).st_ino
    assert pid_uid(os.getpid()) == os.getuid()


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_the_kernels_answer_for_one_socket_matches_proc_net_tcp(address: str) -> None:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.create_server((address, 0), family=family) as server:
        client = socket.create_connection(server.getsockname()[:2])
        accepted, _ = server.accept()
        ends = (client.getsockname()[:2], client.getpeername()[:2])
        found = diag_peer(*ends)
        assert found is not None and found == proc_peer(*ends)
        assert found.uid == os.geteuid() and found.socket_inode == os.fstat(client.fileno()).st_ino
        client.close()
        accepted.close()
    assert diag_peer((address, 1), ends[1]) is None  # no such connection
