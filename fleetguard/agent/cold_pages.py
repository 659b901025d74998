"""Give back the pages of a shared library that only start-up touched.

Importing DuckDB, connecting and migrating the store touch ~49 MB of `_duckdb`'s 68 MB file (its catalog of
built-in functions is registered at connect; the kernel maps code 64 KB around each fault), while the agent's
writes afterwards run ~21 MB of it (BENCHMARKS.md, issue 22: the local agent under 100 MB). Those clean
file pages count in the agent's RSS and in the host's page cache until memory pressure reclaims them.
`MADV_PAGEOUT` (Linux 5.4+) reclaims them now: pages no other process maps leave the page cache, and what the
agent runs again is read back once on its next fault.

Only read-only mappings of the named file with no anonymous pages are advised: a read-only segment that was
relocated at load (RELRO) holds private copies, and although PAGEOUT preserves contents (it swaps or skips
them), the selection leaves them alone so nothing here depends on that.
"""

from __future__ import annotations

import ctypes
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

MADV_PAGEOUT: Final = 21  # linux/mman.h (5.4+); an older kernel answers EINVAL
_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \d+\s*(.*)$")
_ANONYMOUS = re.compile(r"^Anonymous:\s+(\d+) kB$")
_READ_ONLY: Final = frozenset({"r-xp", "r--p"})


@dataclass(frozen=True, slots=True)
class Mapping:
    """One line of /proc/<pid>/smaps with the one field this module needs."""

    start: int
    end: int
    perms: str
    path: str
    anonymous_kib: int


def parse_smaps(text: str) -> list[Mapping]:
    """The mappings of an smaps text (a mapping with no Anonymous line counts as having none)."""
    out: list[Mapping] = []
    head: tuple[int, int, str, str] | None = None
    anonymous = 0
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            if head is not None:
                out.append(Mapping(*head, anonymous))
            head = (int(header[1], 16), int(header[2], 16), header[3], header[4])
            anonymous = 0
            continue
        field = _ANONYMOUS.match(line)
        if field:
            anonymous = int(field[1])
    if head is not None:
        out.append(Mapping(*head, anonymous))
    return out


def reclaimable(mappings: list[Mapping], path: str) -> list[tuple[int, int]]:
    """(start, length) of the clean read-only mappings of `path`."""
    return [
        (m.start, m.end - m.start)
        for m in mappings
        if m.path == path and m.perms in _READ_ONLY and m.anonymous_kib == 0 and m.end > m.start
    ]


def reclaim_file_pages(path: str, smaps: Path = Path("/proc/self/smaps")) -> int:
    """Advise MADV_PAGEOUT on this process's clean read-only mappings of `path`; bytes advised (0 where the
    kernel or C library cannot: the pages then stay until memory pressure takes them, as before)."""
    try:
        ranges = reclaimable(parse_smaps(smaps.read_text()), path)
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError) as exc:  # no /proc, or a C library without madvise
        log.debug("cannot reclaim pages of %s: %s", path, exc)
        return 0
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    advised = 0
    for start, length in ranges:
        if madvise(start, length, MADV_PAGEOUT) != 0:
            log.debug("madvise(MADV_PAGEOUT) on %s: errno %d", path, ctypes.get_errno())
            break  # EINVAL: a kernel before 5.4; every other range would answer the same
        advised += length
    return advised
