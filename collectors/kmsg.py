"""Kernel-log collectors: follow /dev/kmsg (`KmsgCollector`) or a saved log file (`KmsgFileCollector`).

Both turn XID, SXID, GPU-off-the-bus, PCIe AER, mlx5 and NCCL/CUDA segfault lines into Events (source "kmsg");
every other line is ignored, and lines in no known form are counted in `problems()` by reason.

/dev/kmsg semantics (Documentation/ABI/testing/dev-kmsg): every read() returns one record; EAGAIN means no
more for now; EPIPE means the ring buffer overwrote records we had not read yet (counted as ``overrun``;
reading goes on with the oldest record still there). Where to start:

- with `state_path`, the last sequence number whose events are stored is saved there together with the boot
  id; on start, records up to it are skipped, so a restart neither loses nor repeats records. The collector
  cannot know when its events are stored (they wait in the agent's buffer, folded repeats longer): the agent
  calls `commit(seq)` once they are, and a crash before that makes the restart read them again. After a
  reboot (other boot id) the saved number means nothing and reading starts from the oldest record;
- without saved state, ``start="beginning"`` (the default) replays the whole ring buffer: XIDs logged during
  boot or while the agent was down matter more than the noise of a replay, which folding absorbs;
  ``start="end"`` reads only records logged from now on.

Repeats inside one read are folded (`collectors.event_dedup.fold_burst`) so that a storm replayed from the
ring buffer or a large file is a handful of rows; folding across reads is the agent's EventDeduplicator.
The live collector does this at ~2 us a line in a storm (against ~10): a raw record's header is read without
building a KernelLine, each distinct message is classified once, and a repeat is counted without an Event.

A storm must not starve the agent's sampling: one `collect` handles at most `max_lines_per_collect` lines and
says `has_backlog` when more is waiting, which the agent reads between rounds within its own time budget.
A path that is a regular file is not selectable (select() always calls it readable): `fileno()` refuses, so
the agent polls it each round, like a file being appended to. A FIFO whose writer left would read as EOF and
select as readable for ever: it is reopened, which waits quietly for the next writer.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from collections import deque
from collections.abc import Iterator, Mapping
from datetime import tzinfo
from pathlib import Path
from typing import Final, Literal

from collectors.event_dedup import DEFAULT_WINDOW_SECONDS, DedupKey, EventDeduplicator, fold_burst
from collectors.file_tail import FileTail, TailResult
from collectors.kmsg_classify import MAX_MESSAGE_CHARS, KernelFault, classify_kernel_message
from collectors.kmsg_parse import KernelLine, Unparsed, parse_kernel_line, parse_kmsg_record
from collectors.protocol import CollectorUnavailable
from fleetguard.private_files import read_own_file, replace_file, writable_by_others
from fleetguard.records.telemetry import Batch, Event

SOURCE: Final = "kmsg"
# /dev/kmsg rejects a read() buffer smaller than the record (EINVAL); record + dictionary is <= 8 KiB.
_READ_BYTES: Final = 16 * 1024
# Lines one collect handles (~2 us each in a storm of raw records): a storm is worked through in slices.
DEFAULT_MAX_LINES_PER_COLLECT: Final = 5_000
# Reads failing this many times in a row (EIO ...): the log is given up (`stopped`), and NVML reports XIDs.
STOP_AFTER_FAILED_READS: Final = 5
DEFAULT_MAX_BYTES_PER_COLLECT: Final = 512 * 1024  # for a saved log: about as many lines
DEFAULT_BOOT_ID_PATH: Final = "/proc/sys/kernel/random/boot_id"
# Distinct messages whose classification is remembered (each at most MAX_MESSAGE_CHARS: <= 2 MiB in all).
_FAULT_CACHE_ENTRIES: Final = 512

Start = Literal["beginning", "end"]


def kernel_event(line: KernelLine, host: str, now: float, boot_time: float | None) -> Event | None:
    """The Event a parsed kernel line reports, or None. Boot-relative times become wall time via `boot_time`
    (epoch seconds at boot); without it, or for an estimate that lands in the future, the event gets `now`."""
    fault = classify_kernel_message(line.message)
    if fault is None:
        return None
    ts = line.ts if line.ts is not None else uptime_to_wall(line.uptime_seconds, now, boot_time)
    return fault_event(fault, host, line.message, ts, line.seq)


def uptime_to_wall(uptime_seconds: float | None, now: float, boot_time: float | None) -> float:
    """Wall time of a boot-relative record: `now` without a boot time, and never later than `now`."""
    if uptime_seconds is None or boot_time is None:
        return now
    return min(boot_time + uptime_seconds, now)


def fault_event(fault: KernelFault, host: str, message: str, ts: float, seq: int | None) -> Event:
    return Event(
        ts=ts,
        host=host,
        kind=fault.kind,
        source=SOURCE,
        message=message[:MAX_MESSAGE_CHARS].strip(),
        code=fault.code,
        pci_bus_id=fault.pci_bus_id,
        device=fault.device,
        pid=fault.pid,
        process_name=fault.process_name,
        seq=seq,
    )


def boot_time_from_clocks() -> float:
    """Epoch seconds at boot as /dev/kmsg timestamps count it (CLOCK_MONOTONIC, which stops in suspend)."""
    return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


class _LineEvents:
    """Parses lines into events for one host and counts what could not be parsed."""

    def __init__(
        self, host: str, boot_time: float | None, tz: tzinfo | None, fold_window_seconds: float | None
    ):
        self.host = host
        self.boot_time = boot_time
        self.tz = tz
        self.fold_window_seconds = fold_window_seconds
        self.problems: dict[str, int] = {}
        self._faults: dict[str, tuple[KernelFault, DedupKey] | None] = {}

    def count(self, reason: str, n: int = 1) -> None:
        self.problems[reason] = self.problems.get(reason, 0) + n

    def parse(self, text: str) -> KernelLine | None:
        try:
            parsed = parse_kernel_line(text, self.tz)
        except Exception:  # a parser bug must cost one line, not the collector (fuzzed, but still)
            self.count("parser_error")
            return None
        if isinstance(parsed, Unparsed):
            self.count(parsed.reason)
            return None
        return parsed

    def event(self, line: KernelLine, now: float) -> Event | None:
        try:
            return kernel_event(line, self.host, now, self.boot_time)
        except Exception:
            self.count("parser_error")
            return None

    def fault(self, message: str) -> tuple[KernelFault, DedupKey] | None:
        """What `message` reports and the key its events fold under, or None. Remembered per message: a storm
        repeats a handful of messages hundreds of thousands of times (bounded: cleared when full)."""
        try:
            return self._faults[message]
        except KeyError:
            pass
        fault = classify_kernel_message(message)
        found = None if fault is None else (fault, _fault_key(self.host, fault))
        if len(self._faults) >= _FAULT_CACHE_ENTRIES:
            self._faults.clear()
        self._faults[message] = found
        return found


def _fault_key(host: str, fault: KernelFault) -> DedupKey:
    """The `dedup_key` of the events `fault` becomes on `host`."""
    return (host, fault.kind, fault.code, fault.pci_bus_id, fault.device)


class KmsgCollector:
    """Follows /dev/kmsg (or any path that yields kmsg records). `fileno()` lets the agent select() on it."""

    name = "kmsg"

    def __init__(
        self,
        host: str,
        path: str = "/dev/kmsg",
        state_path: str | None = None,
        *,
        start: Start = "beginning",
        boot_time: float | None = None,
        boot_id_path: str = DEFAULT_BOOT_ID_PATH,
        fold_window_seconds: float | None = DEFAULT_WINDOW_SECONDS,
        max_lines_per_collect: int = DEFAULT_MAX_LINES_PER_COLLECT,
    ) -> None:
        if start not in ("beginning", "end"):
            raise ValueError(f"start must be 'beginning' or 'end', got {start!r}")
        if max_lines_per_collect < 1:
            raise ValueError(f"max_lines_per_collect must be >= 1, got {max_lines_per_collect}")
        self.host = host
        self.path = path
        self.state_path = Path(state_path) if state_path else None
        self.max_lines_per_collect = max_lines_per_collect
        self._lines = _LineEvents(
            host, boot_time if boot_time is not None else boot_time_from_clocks(), None, fold_window_seconds
        )
        self._boot_id = _read_boot_id(boot_id_path)
        self._last_seq = self._load_state()
        self._saved_seq = self._last_seq
        self._resumed = self._last_seq is not None
        self.skipped_replayed = 0  # records at or before the saved sequence: already handled before a restart
        self._partial = b""
        self._pending: deque[bytes] = deque()  # complete lines read but not handled yet (one read's worth)
        self._more = False  # the last collect stopped at its budget, not because nothing was left
        self._failed_reads = 0  # in a row
        self._stopped = False
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError as exc:
            raise CollectorUnavailable(
                f"{path} does not exist, so the kernel log cannot be followed; "
                "parse a saved log with `fleetguard collect --kmsg-file FILE` instead."
            ) from exc
        except PermissionError as exc:
            raise CollectorUnavailable(
                f"permission denied reading {path}: run the agent as root or with CAP_SYSLOG "
                "(or set the sysctl kernel.dmesg_restrict=0)."
            ) from exc
        except OSError as exc:
            raise CollectorUnavailable(f"cannot open {path}: {exc.strerror or exc}.") from exc
        opened = os.fstat(self._fd)
        forgeable = writable_by_others(path, opened)
        if forgeable is not None:
            os.close(self._fd)
            self._fd = None
            raise CollectorUnavailable(
                f"{path} {forgeable}: another user could write kernel-log faults the agent would act on as "
                "root; point collectors.kmsg_path at a file only root (or the agent's user) can write."
            )
        mode = opened.st_mode
        self._regular_file = stat.S_ISREG(mode)
        self._fifo = stat.S_ISFIFO(mode)
        if start == "end" and self._last_seq is None:
            # A pipe standing in for /dev/kmsg cannot seek, and has no backlog to skip either.
            with contextlib.suppress(OSError):
                os.lseek(self._fd, 0, os.SEEK_END)

    # ---- Collector protocol ---------------------------------------------------------------------------

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError("collector is closed")
        if self._regular_file:
            raise ValueError(f"{self.path} is a regular file: polled each round, never readable-waited on")
        return self._fd

    @property
    def has_backlog(self) -> bool:
        """More is waiting than the last collect handled (its line budget ran out)."""
        return self._more or bool(self._pending)

    def collect(self, now: float) -> Batch:
        window = self._lines.fold_window_seconds
        if window is None:
            return Batch(events=list(self._events(now)))
        folder = EventDeduplicator(window)
        events: list[Event] = []
        self._fold_lines(now, folder, events)
        events.extend(folder.drain(0.0, force=True))
        return Batch(events=events)

    def problems(self) -> Mapping[str, int]:
        return dict(self._lines.problems)

    def close(self) -> None:
        # No state saved here: what was read but never committed must be read again after a restart.
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def stopped(self) -> bool:
        """The log was given up mid-run (reads kept failing, or a FIFO could not be reopened): nothing more
        will be read, and XIDs must come from elsewhere (collectors.nvml takes over)."""
        return self._stopped

    @property
    def last_seq(self) -> int | None:
        """The last kernel sequence number read."""
        return self._last_seq

    def commit(self, seq: int) -> None:
        """The events of every record up to `seq` are stored: save `seq` so that a restart resumes after it.

        A write failure is counted in `problems()` as ``state_write_error``, not raised."""
        if self._saved_seq is not None and seq <= self._saved_seq:
            return
        self._save_state(seq)

    # ---- internals --------------------------------------------------------------------------------------

    def _events(self, now: float) -> Iterator[Event]:
        for text in self._read_lines():
            line = self._lines.parse(text)
            if line is None or not self._is_new(line.seq):
                continue
            event = self._lines.event(line, now)
            if event is not None:
                yield event

    def _fold_lines(self, now: float, folder: EventDeduplicator, out: list[Event]) -> None:
        """Read, parse and fold one slice of lines into `out` (what folding releases) and `folder`.

        The same events as `fold_burst(self._events(now))`, at a fraction of the cost per line: a raw
        record's header is read without building a KernelLine, its message is classified once per distinct
        text, and a repeat inside an open window is counted without building its Event. Any other form
        (a file or pipe standing in for /dev/kmsg may carry dmesg lines) takes the general parser."""
        lines = self._lines
        boot_time = lines.boot_time
        for text in self._read_lines():
            try:
                record = parse_kmsg_record(text)
                if record is None:
                    line = lines.parse(text)
                    if line is None or not self._is_new(line.seq):
                        continue
                    event = lines.event(line, now)
                    if event is not None:
                        out.extend(folder.add(event))
                    continue
                seq, uptime, message = record
                if not self._is_new(seq):
                    continue
                found = lines.fault(message)
                if found is None:
                    continue
                fault, key = found
                ts = now if boot_time is None else min(boot_time + uptime, now)
                if not folder.add_repeat(key, ts):
                    out.extend(folder.add(fault_event(fault, self.host, message, ts, seq)))
            except Exception:  # a parser bug must cost one line, not the collector (fuzzed, but still)
                lines.count("parser_error")

    def _read_lines(self) -> Iterator[str]:
        """Up to `max_lines_per_collect` lines (each read counts as one, so lineless junk is bounded too)."""
        budget = self.max_lines_per_collect
        self._more = False
        while budget > 0:
            if not self._pending:
                budget -= 1
                if not self._fill():
                    return
                continue
            budget -= 1
            yield self._pending.popleft().decode("utf-8", errors="replace")
        self._more = True

    def _fill(self) -> bool:
        """One read into the pending lines; False when nothing more can be read now."""
        if self._fd is None:
            return False
        try:
            chunk = os.read(self._fd, _READ_BYTES)
        except BlockingIOError:
            return False
        except BrokenPipeError:
            self._lines.count("overrun")
            return True
        except OSError as exc:
            self._lines.count("read_error" if exc.errno != errno.EINVAL else "record_too_large")
            self._failed_reads += 1
            if self._failed_reads >= STOP_AFTER_FAILED_READS:
                self._give_up()
            return False
        self._failed_reads = 0
        if not chunk:
            if self._fifo:
                self._reopen()  # the writer left: EOF now, and readable to select() for ever
            return False  # else the end of a regular file, polled again next round
        # /dev/kmsg gives whole records; a file or pipe standing in for it may split a line across reads.
        parts = (self._partial + chunk).split(b"\n")
        self._partial = parts.pop()
        if len(self._partial) > _READ_BYTES:
            self._lines.count("line_too_long")
            self._partial = b""
        self._pending.extend(part for part in parts if part)
        return True

    def _reopen(self) -> None:
        """Open the FIFO afresh onto the same descriptor number (the agent keeps selecting on it): the new
        open file is not readable until a new writer writes (Linux reports hang-up only to a reader that saw
        that writer)."""
        assert self._fd is not None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            self._lines.count("reopen_failed")
            self._give_up()
            return
        if writable_by_others(self.path, os.fstat(fd)) is not None:  # swapped for another user's FIFO
            os.close(fd)
            self._lines.count("reopen_untrusted")
            self._give_up()
            return
        os.dup2(fd, self._fd)
        os.close(fd)
        self._partial = b""

    def _give_up(self) -> None:
        self._stopped = True
        self.close()

    def _is_new(self, seq: int | None) -> bool:
        if seq is None:
            return True
        if self._last_seq is not None:
            if seq <= self._last_seq:
                self.skipped_replayed += 1
                return False
            if seq > self._last_seq + 1 and self._resumed:
                # Records between the two were overwritten before we read them (ring buffer overrun, or
                # logged while the agent was down and already rotated out).
                self._lines.count("records_lost", seq - self._last_seq - 1)
        self._resumed = True
        self._last_seq = seq
        return True

    def _load_state(self) -> int | None:
        if self.state_path is None:
            return None
        try:
            # only the agent's own regular file: another user's (or a link) could claim a sequence number
            # past records not yet handled, and so hide them
            state = json.loads(read_own_file(self.state_path))
            seq = state["seq"]
            boot_id = state.get("boot_id")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self._lines.count("state_unreadable")
            return None
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            self._lines.count("state_unreadable")
            return None
        if boot_id != self._boot_id:
            return None  # another boot: its sequence numbers started again from zero
        return seq

    def _save_state(self, seq: int) -> None:
        if self.state_path is None:
            return
        try:
            self.state_path.parent.mkdir(parents=True, exist_ok=True)
            # never through a link someone planted where the state (or a temporary file) goes
            replace_file(self.state_path, json.dumps({"boot_id": self._boot_id, "seq": seq}).encode())
        except OSError:
            self._lines.count("state_write_error")
            return
        self._saved_seq = seq


class KmsgFileCollector:
    """Parses a kernel-log text file in any supported form and follows what is appended to it (tail -F).

    Saved logs carry no boot time: boot-relative lines (raw kmsg, plain dmesg) get `now` unless `boot_time` is
    given. ``dmesg -T`` times are read in `tz` (None: this machine's zone).
    """

    name = "kmsg_file"

    def __init__(
        self,
        host: str,
        path: str,
        *,
        from_start: bool = True,
        boot_time: float | None = None,
        tz: tzinfo | None = None,
        fold_window_seconds: float | None = DEFAULT_WINDOW_SECONDS,
        max_bytes_per_collect: int = DEFAULT_MAX_BYTES_PER_COLLECT,
    ) -> None:
        try:
            st = os.stat(path)
            if stat.S_ISREG(st.st_mode):
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        except FileNotFoundError as exc:
            raise CollectorUnavailable(f"kernel-log file {path} does not exist.") from exc
        except PermissionError as exc:
            raise CollectorUnavailable(f"permission denied reading kernel-log file {path}.") from exc
        except OSError as exc:
            raise CollectorUnavailable(f"cannot read kernel-log file {path}: {exc.strerror or exc}.") from exc
        if not stat.S_ISREG(st.st_mode):
            raise CollectorUnavailable(
                f"{path} is not a regular file; to follow the live kernel log use the kmsg collector."
            )
        self.host = host
        self.path = path
        self._tail = FileTail(path, from_start=from_start, max_bytes_per_read=max_bytes_per_collect)
        self._lines = _LineEvents(host, boot_time, tz, fold_window_seconds)

    @property
    def has_backlog(self) -> bool:
        """The last collect stopped at its byte budget with more of the file to read."""
        return self._tail.behind

    def collect(self, now: float) -> Batch:
        tail = TailResult()
        events = fold_burst(self._events(self._tail.follow(tail), now), self._lines.fold_window_seconds)
        for reason in tail.problems:
            self._lines.count(reason)
        return Batch(events=events)

    def _events(self, texts: Iterator[str], now: float) -> Iterator[Event]:
        for text in texts:
            line = self._lines.parse(text)
            if line is None:
                continue
            event = self._lines.event(line, now)
            if event is not None:
                yield event

    def problems(self) -> Mapping[str, int]:
        return dict(self._lines.problems)

    def close(self) -> None:
        pass


def _read_boot_id(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None
