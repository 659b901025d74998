"""Finding and reading InfiniBand / RoCE port files under <sysfs>/class/infiniband, and parsing them.

Layout (kernel ABI, Documentation/ABI/stable/sysfs-class-infiniband):
``<device>/ports/<port>/{state,phys_state,rate,link_layer}``, ``.../counters/*`` (IBTA port counters) and
``.../hw_counters/*`` (driver counters; ``hw_counters/lifespan`` is a setting, the driver's cache time in ms,
not a counter, and is left out).

Reading is the hot path (~8 ports x ~85 files every round), so files are found once per scan and each is
kept open: a sysfs attribute read with pread() at offset 0 is produced afresh by the kernel, one syscall
instead of open/read/close. Descriptors are a bounded resource of the agent (it also holds runtime
connections), so only `max_open_files` are kept open; the rest are opened relative to a directory
descriptor at each read. A file removed from sysfs (driver reload) answers ENODEV/ENOENT, which tells the
caller to scan again.
"""

from __future__ import annotations

import errno
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

# Counters hold at most 20 digits and attributes a few words: a file longer than this is garbage.
READ_BYTES: Final = 64
U64_MAX: Final = 2**64 - 1
COUNTER_GROUPS: Final = ("counters", "hw_counters")
NOT_COUNTERS: Final = frozenset({"lifespan"})
PORT_ATTRIBUTES: Final = ("state", "phys_state", "rate", "link_layer")
DEFAULT_MAX_OPEN_FILES: Final = 256

# O_NONBLOCK: a FIFO planted where a counter was must not hang the agent in open(); no effect on files.
_O_RDONLY: Final = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
_O_DIRECTORY: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_WORDS: Final = re.compile(rb"[A-Za-z][A-Za-z0-9_ ]{0,47}")

# Problem-count reasons for a read that failed, by errno.
_ERRNO_REASONS: Final[dict[int, str]] = {
    errno.EACCES: "permission_denied",
    errno.EPERM: "permission_denied",
    errno.ENOENT: "vanished",
    errno.ENODEV: "vanished",
    errno.ENXIO: "vanished",
    errno.ESTALE: "vanished",
    errno.EISDIR: "not_a_file",
    errno.ENOTDIR: "not_a_file",
    errno.ELOOP: "not_a_file",
    errno.EIO: "io_error",
}
VANISHED: Final = "vanished"


def read_failure_reason(error: OSError) -> str:
    """Reason for a failed read: permission_denied, vanished, not_a_file, io_error or read_error."""
    return _ERRNO_REASONS.get(error.errno or 0, "read_error")


class BadValue(ValueError):
    """A file's content is not what its name promises; `reason` is the problem-count reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_counter(data: bytes) -> int:
    """b"12345\\n" -> 12345. Raises BadValue: garbage_value (not a plain decimal), value_out_of_range."""
    text = data.strip()
    if not text.isdigit():  # bytes.isdigit: ASCII digits only, and False for b""; no sign, no "_"
        raise BadValue("garbage_value")
    if len(data) >= READ_BYTES:
        raise BadValue("value_out_of_range")
    value = int(text)
    if value > U64_MAX:
        raise BadValue("value_out_of_range")
    return value


def parse_state(data: bytes) -> str:
    """b"4: ACTIVE\\n" -> "ACTIVE", b"5: LinkUp\\n" -> "LinkUp" (the number is dropped). Raises BadValue."""
    _, _, name = data.rpartition(b":")
    return parse_words(name)


def parse_words(data: bytes) -> str:
    """b"InfiniBand\\n" -> "InfiniBand": a short run of letters, digits, "_" and spaces. Raises BadValue."""
    text = data.strip()
    if _WORDS.fullmatch(text) is None:
        raise BadValue("garbage_value")
    return text.decode("ascii")


def parse_rate_gbps(data: bytes) -> float:
    """b"400 Gb/sec (4X NDR)\\n" -> 400.0, b"2.5 Gb/sec (1X SDR)" -> 2.5. Raises BadValue."""
    number, _, unit = data.strip().partition(b" ")
    if not unit.startswith(b"Gb/sec"):
        raise BadValue("garbage_value")
    try:
        rate = float(number)
    except ValueError:
        raise BadValue("garbage_value") from None
    if not math.isfinite(rate) or rate < 0:
        raise BadValue("garbage_value")
    return rate


class SysfsFile:
    """One small sysfs file, read whole each time: pread() on a kept descriptor, or openat() on its folder."""

    __slots__ = ("dir_fd", "fd", "group", "key", "name")

    def __init__(self, name: str, group: str, dir_fd: int, key: tuple[str, int, str, str]) -> None:
        self.name = name
        self.group = group
        self.dir_fd = dir_fd
        self.key = key
        self.fd = -1

    def keep_open(self) -> None:
        """Keep a descriptor for pread(); if the file cannot be opened now, each read will try and say why."""
        try:
            self.fd = os.open(self.name, _O_RDONLY, dir_fd=self.dir_fd)
        except OSError:
            self.fd = -1

    def read(self) -> bytes:
        """Up to READ_BYTES bytes of the file. Raises OSError."""
        if self.fd >= 0:
            return os.pread(self.fd, READ_BYTES, 0)
        fd = os.open(self.name, _O_RDONLY, dir_fd=self.dir_fd)
        try:
            return os.read(fd, READ_BYTES)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(slots=True)
class PortFiles:
    """The files of one port found by a scan; `attributes` holds only those that existed."""

    device: str
    port: int
    attributes: dict[str, SysfsFile] = field(default_factory=dict)
    counters: list[SysfsFile] = field(default_factory=list)
    dir_fds: list[int] = field(default_factory=list)

    def close(self) -> None:
        for file in (*self.attributes.values(), *self.counters):
            file.close()
        for fd in self.dir_fds:
            os.close(fd)
        self.dir_fds.clear()


def scan_ports(class_dir: str, problems: Counter[str], max_open_files: int) -> list[PortFiles]:
    """Every port of every device under `class_dir` (<sysfs>/class/infiniband), sorted by device and port.

    What cannot be used is counted in `problems` (once per scan) and left out: a port folder whose name is
    not a number (garbage_port), a counter entry that is not a readable regular file (not_a_file), a folder
    that cannot be listed (by errno). The first `max_open_files` files are kept open for pread().
    """
    budget = max_open_files
    ports: list[PortFiles] = []
    for device in _sorted_entries(class_dir, problems):
        ports_dir = os.path.join(class_dir, device, "ports")
        for port_name in _sorted_entries(ports_dir, problems):
            if not port_name.isdigit():
                problems["garbage_port"] += 1
                continue
            port = _scan_port(device, int(port_name), os.path.join(ports_dir, port_name), problems)
            if port is None:
                continue
            for file in (*port.attributes.values(), *port.counters):
                if budget <= 0:
                    break
                file.keep_open()
                if file.fd >= 0:
                    budget -= 1
            ports.append(port)
    return ports


def _scan_port(device: str, number: int, path: str, problems: Counter[str]) -> PortFiles | None:
    try:
        port_fd = os.open(path, _O_DIRECTORY)
    except OSError as exc:
        problems[read_failure_reason(exc)] += 1
        return None
    port = PortFiles(device, number, dir_fds=[port_fd])
    for name in PORT_ATTRIBUTES:
        try:
            present = os.path.isfile(os.path.join(path, name))
        except OSError:
            present = False
        if present:
            port.attributes[name] = SysfsFile(name, "", port_fd, (device, number, "", name))
    for group in COUNTER_GROUPS:
        group_path = os.path.join(path, group)
        try:
            with os.scandir(group_path) as entries:
                names = sorted((e.name, _is_file(e)) for e in entries if e.name not in NOT_COUNTERS)
            group_fd = os.open(group_path, _O_DIRECTORY)
        except FileNotFoundError:
            continue  # not every driver has hw_counters
        except OSError as exc:
            problems[read_failure_reason(exc)] += 1
            continue
        port.dir_fds.append(group_fd)
        for name, is_file in names:
            if not is_file:  # a folder, a dangling link: nothing a counter could be read from
                problems["not_a_file"] += 1
                continue
            port.counters.append(SysfsFile(name, group, group_fd, (device, number, group, name)))
    return port


def _is_file(entry: os.DirEntry[str]) -> bool:
    """Whether an entry is (or links to) a regular file. A link loop (ELOOP) or any other error on one entry
    is that entry's problem, counted by the caller as not_a_file: it must not cost the rest of its folder."""
    try:
        return entry.is_file()
    except OSError:
        return False


def _sorted_entries(path: str, problems: Counter[str]) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return sorted(e.name for e in entries)
    except OSError as exc:
        problems[read_failure_reason(exc)] += 1
        return []
