"""What /proc says about a process: alive, zombie, stopped, its start time and (for a zombie) its exit code.

Ranks are torchrun's children, not ours, so waitpid() cannot be used; /proc and signal 0 can."""

from __future__ import annotations

import fcntl
import os
import struct
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ProcState:
    state: str  # R S D T t Z X ... as in /proc/<pid>/stat
    start_ticks: int  # field 22: distinguishes a reused pid from the process we registered
    process_group: int  # field 5 (pgrp): torchrun starts each worker in a group of its own
    exit_code: int | None  # for a zombie: exit status, or minus the signal that killed it


def read_stat(pid: int, proc_root: str = "/proc") -> ProcState | None:
    """The process's state, or None when it is gone (or /proc cannot be read for it)."""
    try:
        text = (Path(proc_root) / str(pid) / "stat").read_text()
    except OSError:
        return None
    return parse_stat(text)


def parse_stat(text: str) -> ProcState | None:
    # comm (field 2) may hold spaces and parentheses: everything after the last ')' is fixed-format
    _, paren, rest = text.rpartition(")")
    if not paren:
        return None
    fields = rest.split()
    if len(fields) < 20:
        return None
    try:
        start_ticks = int(fields[19])
        process_group = int(fields[2])
    except ValueError:
        return None
    exit_code: int | None = None
    if fields[0] in ("Z", "X") and len(fields) >= 50:
        try:
            exit_code = decode_wait_status(int(fields[49]))
        except ValueError:
            exit_code = None
    return ProcState(
        state=fields[0], start_ticks=start_ticks, process_group=process_group, exit_code=exit_code
    )


def decode_wait_status(status: int) -> int:
    """waitpid()-style status -> exit code, or -signal when a signal ended it (as subprocess reports it)."""
    signal_number = status & 0x7F
    return -signal_number if signal_number else (status >> 8) & 0xFF


# PIDFD_GET_INFO (Linux >= 6.15): _IOWR(0xFF, 11, struct pidfd_info), the first published struct's 64 bytes.
# Asked with PIDFD_INFO_EXIT, it gives a process's wait status once it has exited, reaped or not: the only
# way for a process that is not the parent to learn the exit of one whose parent reaped it first.
_PIDFD_GET_INFO = 0xC040FF0B
_PIDFD_INFO_EXIT = 1 << 3
_PIDFD_INFO_BYTES = 64
_PIDFD_INFO_EXIT_CODE_AT = 60  # mask, cgroupid (u64 each), eleven u32 ids, then the s32 exit_code


def pidfd_exit_code(pidfd: int) -> int | None:
    """The exit code (-signal when a signal ended it) of the exited process `pidfd` names, even once its
    parent has reaped it; None while it runs, or on a kernel without PIDFD_INFO_EXIT."""
    info = bytearray(_PIDFD_INFO_BYTES)
    struct.pack_into("<Q", info, 0, _PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, _PIDFD_GET_INFO, info)
    except OSError:  # ENOTTY/EINVAL before 6.15; ESRCH and the like: nothing to say
        return None
    if not struct.unpack_from("<Q", info, 0)[0] & _PIDFD_INFO_EXIT:
        return None  # still running
    return decode_wait_status(struct.unpack_from("<i", info, _PIDFD_INFO_EXIT_CODE_AT)[0])


def is_alive(pid: int, proc_root: str = "/proc") -> bool:
    """Running, sleeping or stopped counts as alive; a zombie or a missing pid does not."""
    state = read_stat(pid, proc_root)
    if state is not None:
        return state.state not in ("Z", "X")
    if (Path(proc_root) / "self").exists():
        return False  # procfs works and has no entry: the pid is gone
    try:  # no procfs: signal 0 is all there is
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
