"""Folding repeats of the same event: counted, not stored ten thousand times.

One real node logged 800k XID 95 lines for 29 distinct errors. Events with the same key
(host, kind, code, pci_bus_id, device) inside one window are folded:

- the first occurrence opens a window and is emitted at once, unchanged;
- repeats inside the window are held and emitted as ONE row when the window closes: the first repeat's fields
  with ``count`` = number of repeats and ``last_ts`` = time of the last one;
- a window closes when `drain(now)` is called at or after ``start + window_seconds``, when a repeat arrives
  after that time (it then opens the next window), or with ``drain(now, force=True)`` (shutdown).

Invariant: the sum of ``count`` over emitted rows equals the sum of ``count`` over events added. Windows run
on the events' own timestamps and the ``now`` the caller passes; nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from fleetguard.records.telemetry import Event

DEFAULT_WINDOW_SECONDS: Final = 60.0
# Beyond this many open windows the oldest is closed early: a flood of distinct keys must not grow memory.
DEFAULT_MAX_OPEN_WINDOWS: Final = 10_000

DedupKey = tuple[str, str, int | None, str | None, str | None]


def dedup_key(event: Event) -> DedupKey:
    """Which events count as "the same": same host, kind, code, PCI bus id and device."""
    return (event.host, event.kind, event.code, event.pci_bus_id, event.device)


@dataclass(slots=True)
class _Window:
    start_ts: float
    first_repeat: Event | None = None
    repeats: int = 0
    last_ts: float = 0.0

    def folded(self) -> Event | None:
        if self.first_repeat is None or self.repeats == 0:
            return None
        return replace(self.first_repeat, count=self.repeats, last_ts=self.last_ts)


class EventDeduplicator:
    """Folds repeated events per key and time window; also counts every raw occurrence per (kind, code)."""

    def __init__(
        self,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        max_open_windows: int = DEFAULT_MAX_OPEN_WINDOWS,
    ) -> None:
        if not window_seconds > 0:
            raise ValueError(f"window_seconds must be > 0, got {window_seconds!r}")
        if max_open_windows < 1:
            raise ValueError(f"max_open_windows must be >= 1, got {max_open_windows!r}")
        self.window_seconds = float(window_seconds)
        self.max_open_windows = max_open_windows
        self._windows: dict[DedupKey, _Window] = {}
        self._occurrences: dict[tuple[str, int | None], int] = {}

    def add(self, event: Event) -> list[Event]:
        """Take one event; return what must be stored now (the event itself if it opens a window, and a folded
        row if it closed the previous window of its key)."""
        occurrence_key = (event.kind, event.code)
        self._occurrences[occurrence_key] = self._occurrences.get(occurrence_key, 0) + event.count
        key = dedup_key(event)
        out: list[Event] = []
        window = self._windows.get(key)
        if window is not None and event.ts >= window.start_ts + self.window_seconds:
            out.extend(_released(self._windows.pop(key)))
            window = None
        if window is None:
            if len(self._windows) >= self.max_open_windows:
                out.extend(self._close_oldest())
            self._windows[key] = _Window(start_ts=event.ts, last_ts=event.ts)
            out.append(event)
            return out
        if window.first_repeat is None:
            window.first_repeat = event
        window.repeats += event.count
        window.last_ts = max(window.last_ts, event.last_ts if event.last_ts is not None else event.ts)
        return out

    def add_repeat(self, key: DedupKey, ts: float) -> bool:
        """Count one more occurrence of the event with `key` at `ts` without building it: True when it was
        counted (exactly what `add` would do with it), False when `add` must take the whole event because
        it would open a window or be a window's first repeat, whose fields the folded row keeps.

        Why: in a storm nearly every line is such a repeat, and building an Event for each was most of
        what a line cost."""
        window = self._windows.get(key)
        if window is None or window.first_repeat is None or ts >= window.start_ts + self.window_seconds:
            return False
        occurrence_key = (key[1], key[2])
        self._occurrences[occurrence_key] = self._occurrences.get(occurrence_key, 0) + 1
        window.repeats += 1
        if ts > window.last_ts:
            window.last_ts = ts
        return True

    def drain(self, now: float, force: bool = False) -> list[Event]:
        """Close every window that ended at or before `now` (all with `force`); return the folded rows."""
        closing = [
            key
            for key, window in self._windows.items()
            if force or now >= window.start_ts + self.window_seconds
        ]
        out: list[Event] = []
        for key in closing:
            out.extend(_released(self._windows.pop(key)))
        out.sort(key=lambda e: e.ts)
        return out

    def occurrences(self) -> Mapping[tuple[str, int | None], int]:
        """Every occurrence ever added, folded or not, per (kind, code): what /metrics counters count."""
        return dict(self._occurrences)

    @property
    def open_windows(self) -> int:
        return len(self._windows)

    @property
    def pending_repeats(self) -> int:
        """Repeats held in open windows, not yet emitted."""
        return sum(w.repeats for w in self._windows.values())

    def _close_oldest(self) -> list[Event]:
        oldest = min(self._windows, key=lambda k: self._windows[k].start_ts)
        return _released(self._windows.pop(oldest))


def _released(window: _Window) -> list[Event]:
    folded = window.folded()
    return [] if folded is None else [folded]


def fold_burst(events: Iterable[Event], window_seconds: float | None) -> list[Event]:
    """Fold repeats within one read of a log, releasing everything at the end: no state kept, no delay.

    Used by the log collectors so that one read of a storm (a ring buffer replay, a large file) becomes a
    handful of rows; folding across reads is the agent's job (an EventDeduplicator that lives with the agent).
    Takes an iterable, so a collector can stream events through without holding them all. None: no folding.
    """
    if window_seconds is None:
        return list(events)
    folder = EventDeduplicator(window_seconds)
    out: list[Event] = []
    for event in events:
        out.extend(folder.add(event))
    out.extend(folder.drain(0.0, force=True))
    return out
