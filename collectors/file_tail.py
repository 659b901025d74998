"""Following a growing text file like ``tail -F``: each call yields the complete lines appended since the
last one, streamed chunk by chunk so that a large file never sits in memory whole.

A line without its newline yet is held back until it is complete. A file that is replaced (new inode, log
rotation) or truncated is read again from its start. Errors are recorded as reasons, never raised, so a
collector can count them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, Final

CHUNK_BYTES: Final = 1 << 20
# A "line" longer than this is not a log line; it is cut so that one bad file cannot take all memory.
MAX_LINE_BYTES: Final = 64 * 1024


@dataclass
class TailResult:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # reasons, e.g. "file_missing", "line_too_long"
    rotated: bool = False


class FileTail:
    """Follows one path. `from_start=False` skips what the file holds when it is first seen."""

    def __init__(self, path: str, from_start: bool = True, max_bytes_per_read: int | None = None) -> None:
        self.path = path
        self._from_start = from_start
        self._max_bytes = max_bytes_per_read
        self._inode: tuple[int, int] | None = None
        self._offset = 0
        self._partial = b""
        self._behind = False

    @property
    def behind(self) -> bool:
        """The last call stopped at `max_bytes_per_read` with more of the file left to read."""
        return self._behind

    @property
    def offset(self) -> int:
        """Bytes of the current file consumed so far (complete lines plus a held partial line)."""
        return self._offset

    def read(self) -> TailResult:
        """Everything appended since the last call, as a list (`follow` streams the same lines)."""
        result = TailResult()
        result.lines.extend(self.follow(result))
        return result

    def follow(self, result: TailResult) -> Iterator[str]:
        """Yield the lines appended since the last call; problems and rotation are recorded in `result`."""
        self._behind = False
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            result.problems.append("file_missing")
            return
        except OSError:
            result.problems.append("stat_error")
            return
        if not stat.S_ISREG(st.st_mode):
            # Opening a FIFO would block the caller; a device or directory is not a log file.
            result.problems.append("not_a_file")
            return
        inode = (st.st_dev, st.st_ino)
        if self._inode is None:
            self._inode = inode
            if not self._from_start:
                self._offset = st.st_size
        elif inode != self._inode or st.st_size < self._offset:
            self._inode = inode
            self._offset = 0
            self._partial = b""
            result.rotated = True
        if st.st_size == self._offset:
            return
        try:
            # O_NONBLOCK: should the path turn into a FIFO between stat and open, open must not hang.
            with os.fdopen(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
                f.seek(self._offset)
                for chunk in _chunks(f, self._max_bytes):
                    self._offset += len(chunk)
                    yield from self._split(chunk, result)
            self._behind = self._offset < st.st_size
        except OSError:
            result.problems.append("read_error")

    def _split(self, chunk: bytes, result: TailResult) -> Iterator[str]:
        data = self._partial + chunk
        parts = data.split(b"\n")
        self._partial = parts.pop()
        if len(self._partial) > MAX_LINE_BYTES:
            result.problems.append("line_too_long")
            parts.append(self._partial[:MAX_LINE_BYTES])
            self._partial = b""
        for raw in parts:
            if len(raw) > MAX_LINE_BYTES:
                result.problems.append("line_too_long")
                raw = raw[:MAX_LINE_BYTES]
            yield raw.decode("utf-8", errors="replace")


def _chunks(f: BinaryIO, max_bytes: int | None) -> Iterator[bytes]:
    left = max_bytes
    while left is None or left > 0:
        size = CHUNK_BYTES if left is None else min(CHUNK_BYTES, left)
        chunk = f.read(size)
        if not chunk:
            return
        if left is not None:
            left -= len(chunk)
        yield chunk
