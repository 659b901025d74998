"""Follows training logs and turns NCCL / PyTorch-distributed errors into Events (kind nccl_error).

Event fields: ``code`` as `collectors.nccl_parse` documents per category (IB completion status, errno, NCCL
result); ``device`` names the IB device and port when the line does (``mlx5_0:1``), else the CUDA device
(``cuda:4``) or the rank (``rank3``), else the log file's name; ``pid`` is the process NCCL printed. Lines
from another host (a shared log of a multi-node job) keep that host's name; lines from this host (the short
name NCCL prints) get the collector's host name, so they join the GPU samples of this host.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import tzinfo
from typing import Final

from collectors.event_dedup import DEFAULT_WINDOW_SECONDS, fold_burst
from collectors.file_tail import FileTail, TailResult
from collectors.nccl_parse import classify_nccl_line, parse_nccl_line
from fleetguard.records.telemetry import Batch, Event, EventKind

SOURCE: Final = "nccl_log"
MAX_FILES: Final = 256
# Bytes of one file one collect reads: a flood of log lines is worked through in slices (`has_backlog`).
DEFAULT_MAX_BYTES_PER_COLLECT: Final = 512 * 1024


def nccl_event(
    text: str, host: str, now: float, file_name: str | None = None, tz: tzinfo | None = None
) -> Event | None:
    """The Event one log line reports, or None. Pure: `now` stamps lines that carry no time of their own."""
    line = parse_nccl_line(text, tz)
    fault = classify_nccl_line(line)
    if fault is None:
        return None
    if fault.hca is not None:
        device: str | None = fault.hca
    elif line.cuda_device is not None:
        device = f"cuda:{line.cuda_device}"
    elif line.rank is not None:
        device = f"rank{line.rank}"
    else:
        device = file_name
    return Event(
        ts=line.ts if line.ts is not None else now,
        host=_event_host(line.host, host),
        kind=EventKind.NCCL_ERROR,
        source=SOURCE,
        message=line.message,
        code=fault.code,
        device=device,
        pid=line.pid,
    )


def _event_host(line_host: str | None, host: str) -> str:
    if not line_host or line_host == host or line_host == host.split(".", 1)[0]:
        return host
    return line_host


class NcclLogCollector:
    """Tails every file matching `paths` (literal paths or glob patterns, re-expanded each round so that
    logs of jobs started later are picked up). A file is read from its start when first seen, unless
    `from_start=False`."""

    name = "nccl_log"

    def __init__(
        self,
        host: str,
        paths: Sequence[str],
        *,
        from_start: bool = True,
        tz: tzinfo | None = None,
        fold_window_seconds: float | None = DEFAULT_WINDOW_SECONDS,
        max_bytes_per_collect: int = DEFAULT_MAX_BYTES_PER_COLLECT,
    ) -> None:
        if isinstance(paths, str):
            paths = [paths]
        self.host = host
        self.patterns = list(paths)
        self._from_start = from_start
        self._tz = tz
        self._fold_window_seconds = fold_window_seconds
        self._max_bytes = max_bytes_per_collect
        self._tails: dict[str, FileTail] = {}
        self._problems: dict[str, int] = {}

    def collect(self, now: float) -> Batch:
        return Batch(events=fold_burst(self._events(now), self._fold_window_seconds))

    def _events(self, now: float) -> Iterator[Event]:
        for path in self._current_files():
            tail = self._tails.get(path)
            if tail is None:
                tail = self._tails[path] = FileTail(path, self._from_start, self._max_bytes)
            result = TailResult()
            name = os.path.basename(path)
            for text in tail.follow(result):
                try:
                    event = nccl_event(text, self.host, now, name, self._tz)
                except Exception:  # fuzzed; still, one bad line must not cost the round
                    self._count("parser_error")
                    continue
                if event is not None:
                    yield event
            for reason in result.problems:
                self._count(reason)

    def problems(self) -> Mapping[str, int]:
        return dict(self._problems)

    @property
    def has_backlog(self) -> bool:
        """A file had more to read than the last collect's byte budget."""
        return any(tail.behind for tail in self._tails.values())

    def close(self) -> None:
        self._tails.clear()

    @property
    def files(self) -> list[str]:
        """The files followed now."""
        return sorted(self._tails)

    def _current_files(self) -> list[str]:
        found: set[str] = set()
        for pattern in self.patterns:
            matches = glob.glob(pattern) if glob.has_magic(pattern) else [pattern]
            found.update(m for m in matches if os.path.isfile(m))
        for gone in set(self._tails) - found:
            del self._tails[gone]  # a rotated-away or deleted log: forget it
        if len(found) > MAX_FILES:
            self._count("too_many_files")
        return sorted(found)[:MAX_FILES]

    def _count(self, reason: str) -> None:
        self._problems[reason] = self._problems.get(reason, 0) + 1
