"""The training runtime's trust model, in one place (docs/runtime.md, "Trust model").

The agent usually runs as root and can signal any process; its endpoint is open to every local user. So:
- a job is identified by its owner's uid and the id its ranks report (`job_key`): two users' "job 7" are
  two jobs, and root never joins a job another user reported first (job-id squatting);
- a report's pid is trusted (watched, and signalled on a restart) only when that process is the sender:
  it holds the client end of the report's connection, runs as the sender's uid, in the agent's pid
  namespace (`trusted_pid`). Any other report is judged by its heartbeats alone;
- at signal time the target is opened as a pidfd and checked again (same start time, the job owner's
  uid, the sender's pid namespace) before the signal goes through that pidfd (`signal_owned`), so a pid
  that was reused, or a process that changed hands, is never signalled.
"""

from __future__ import annotations

import enum
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from fleetguard.jobcontrol.peer import Sender, pid_uid
from fleetguard.jobcontrol.procfs import read_stat

_OWNER_MARK = "@uid"


def job_key(owner_uid: int, job_id: str) -> str:
    """The job's identity as every runtime record, finding and action carries it: `<job id>@uid<owner>`.
    A job id cannot contain the owner mark's meaning: the owner is always the last `@uid` suffix."""
    return f"{job_id}{_OWNER_MARK}{owner_uid}"


def job_owner(key: str) -> tuple[int | None, str]:
    """(owner uid, job id as its ranks reported it) of a `job_key`; (None, key) for a key without owner."""
    job_id, mark, uid = key.rpartition(_OWNER_MARK)
    if not mark or not uid.isdigit():
        return None, key
    return int(uid), job_id


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """What makes a pid one particular process: its start time, owner and pid namespace."""

    pid: int
    uid: int
    start_ticks: int
    process_group: int
    pid_namespace: int  # inode of /proc/<pid>/ns/pid


def namespace_inode(link: Path) -> int | None:
    """The inode in a /proc/<pid>/ns/* link ("pid:[4026531836]"); None when it cannot be read."""
    try:
        text = os.readlink(link)
    except OSError:
        return None
    _, bracket, rest = text.partition("[")
    number = rest.rstrip("]")
    return int(number) if bracket and number.isdigit() else None


def agent_pid_namespace(proc_root: str = "/proc") -> int | None:
    return namespace_inode(Path(proc_root) / "self" / "ns" / "pid")


def identify(pid: int, proc_root: str = "/proc") -> ProcessIdentity | None:
    """The identity of a live process; None when it is gone, a zombie, or cannot be read."""
    state = read_stat(pid, proc_root)
    uid = pid_uid(pid, proc_root)
    namespace = namespace_inode(Path(proc_root) / str(pid) / "ns" / "pid")
    if state is None or uid is None or namespace is None or state.state in ("Z", "X"):
        return None
    return ProcessIdentity(pid, uid, state.start_ticks, state.process_group, namespace)


def holds_socket(pid: int, socket_inode: int, proc_root: str = "/proc") -> bool:
    """True when one of `pid`'s file descriptors is the socket with this inode."""
    want = f"socket:[{socket_inode}]"
    fd_dir = Path(proc_root) / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(fd_dir / name) == want:
                return True
        except OSError:
            continue
    return False


def trusted_pid(sender: Sender | None, pid: int, proc_root: str = "/proc") -> ProcessIdentity | None:
    """The identity of `pid` when it is the sender's own process (it holds the report's socket, runs as the
    sender's uid, in the agent's pid namespace); None when the report is to be judged by heartbeats alone."""
    if sender is None or sender.socket_inode is None:
        return None
    identity = identify(pid, proc_root)
    if identity is None or identity.uid != sender.uid:
        return None
    if identity.pid_namespace != agent_pid_namespace(proc_root):
        return None  # a pid from another namespace names a different process here
    if not holds_socket(pid, sender.socket_inode, proc_root):
        return None
    return identity


class SignalResult(enum.Enum):
    SENT = "sent"
    GONE = "gone"  # the process no longer exists
    REFUSED = "refused"  # the pid is now a different process, another user's, or in another namespace


def signal_owned(
    target: ProcessIdentity, owner_uid: int, sig: signal.Signals, proc_root: str = "/proc"
) -> SignalResult:
    """Send `sig` to `target` through a pidfd, after checking (with the pidfd open, so the pid cannot be
    reused meanwhile) that it is still the same process, owned by the job's owner, in the same pid
    namespace as when its rank reported it."""
    try:
        pidfd = os.pidfd_open(target.pid)
    except ProcessLookupError:
        return SignalResult.GONE
    except OSError:
        return SignalResult.REFUSED  # no pidfds: nothing can be checked race-free, so nothing is sent
    try:
        now = identify(target.pid, proc_root)
        if now is None:
            return SignalResult.GONE
        expected = (target.start_ticks, owner_uid, target.pid_namespace)
        if (now.start_ticks, now.uid, now.pid_namespace) != expected:
            return SignalResult.REFUSED
        signal.pidfd_send_signal(pidfd, sig)
        return SignalResult.SENT
    except ProcessLookupError:
        return SignalResult.GONE
    finally:
        os.close(pidfd)


def group_members(leader: ProcessIdentity, proc_root: str = "/proc") -> list[ProcessIdentity]:
    """The processes of the group `leader` leads (a torchrun worker and its data-loader children) that run
    as the leader's uid in its pid namespace, leader first; just the leader when it leads no group."""
    if leader.process_group != leader.pid:
        return [leader]
    members = [leader]
    try:
        names = os.listdir(proc_root)
    except OSError:
        return members
    for name in names:
        if not name.isdigit() or int(name) == leader.pid:
            continue
        state = read_stat(int(name), proc_root)
        if state is None or state.process_group != leader.pid:
            continue
        member = identify(int(name), proc_root)
        if member is not None and (member.uid, member.pid_namespace) == (leader.uid, leader.pid_namespace):
            members.append(member)
    return members


def is_running(target: ProcessIdentity, proc_root: str = "/proc") -> bool:
    """The very process `target` names is still alive (not a zombie, not a reused pid)."""
    state = read_stat(target.pid, proc_root)
    return state is not None and state.state not in ("Z", "X") and state.start_ticks == target.start_ticks
