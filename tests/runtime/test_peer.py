"""Peer checks: a report's pid is trusted only when it belongs to its sender (or root sent it)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from fleetguard.runtime.peer import pid_trusted, pid_uid, tcp_peer_uid


def fake_proc(tmp_path: Path, rows: list[tuple[str, str, int]], pids: dict[int, int]) -> str:
    header = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    )
    body = "".join(
        f"   {i}: {local} {remote} 01 00000000:00000000 00:00000000 00000000  {uid}        0 {100 + i} 1\n"
        for i, (local, remote, uid) in enumerate(rows)
    )
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(header + body)
    for pid, uid in pids.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    return str(tmp_path)


CLIENT, SERVER = ("127.0.0.1", 40000), ("127.0.0.1", 9477)  # 0100007F:9C40 -> 0100007F:2505


def test_the_senders_uid_comes_from_the_client_end_of_the_connection(tmp_path: Path) -> None:
    proc = fake_proc(
        tmp_path, [("0100007F:2505", "0100007F:9C40", 0), ("0100007F:9C40", "0100007F:2505", 1001)], {}
    )
    assert tcp_peer_uid(CLIENT, SERVER, proc) == 1001


def test_a_pid_of_the_senders_own_uid_is_trusted_another_users_is_not(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, [], {4242: 1001, 1: 0, 777: 1002})
    assert pid_trusted(1001, 4242, proc)
    assert not pid_trusted(1001, 1, proc)  # e.g. init: a restart would kill it
    assert not pid_trusted(1001, 777, proc)
    assert not pid_trusted(1001, 9999, proc)  # not a process here (another pid namespace)


def test_root_may_name_any_pid_and_an_unknown_sender_none(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, [], {777: 1002})
    assert pid_trusted(0, 777, proc)
    assert not pid_trusted(None, 777, proc)


def test_on_this_machine_a_real_loopback_connection_is_found_with_our_uid() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()) as client:
            assert tcp_peer_uid(client.getsockname(), listener.getsockname()) == os.getuid()
    assert pid_uid(os.getpid()) == os.getuid()
