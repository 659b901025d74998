"""The agent's write buffer when it ships to a controller: each flush turns the buffered rows into one wire
batch (compacted, compressed) and appends it to the spool, durable, instead of writing a local store.

It has the WriteBuffer's interface (add, after_stored, flush, len, counters), so the agent loop is the same
whichever way rows leave the host; a callback queued with `after_stored` (the kernel log's resume point)
runs once its rows are in the spool, which is as durable as a local store.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable

from fleetguard import __version__
from fleetguard.shipping.channel import CommandChannel
from fleetguard.shipping.commands import CommandAck
from fleetguard.shipping.compact import Compactor
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.wire import OutgoingBatch, columns_by_table, encode
from fleetguard.shipping.wire_v2 import WIRE_VERSION_2, NotInV2, WireChoice, encode_v2_counted
from fleetguard.store.schema import TABLE_BY_RECORD

log = logging.getLogger(__name__)

DEFAULT_MAX_ROWS = 500_000  # kept in memory only while the spool cannot be written (disk full)


class SpoolBuffer:
    def __init__(
        self,
        spool: Spool,
        host: str,
        interval_seconds: float,
        *,
        channel: CommandChannel | None = None,
        compactor: Compactor | None = None,
        on_appended: Callable[[], None] | None = None,
        max_rows: int = DEFAULT_MAX_ROWS,
        clock: Callable[[], float] = time.time,
        wire: WireChoice | None = None,
    ) -> None:
        self.spool = spool
        # Which wire version new batches are encoded in (the shipper's: it learns what the controller reads,
        # from its HTTP answers or its NATS advertisement); None: version 1 always.
        self.wire = wire
        self.host = host
        self.interval_seconds = interval_seconds
        self.boot_id = uuid.uuid4().hex
        self.channel = channel
        self.compactor = compactor if compactor is not None else Compactor()
        self._on_appended = on_appended
        self.max_rows = max_rows
        self._clock = clock
        self._seq = 0
        self._rows: deque[object] = deque()
        self._callbacks: list[tuple[int, Callable[[], None]]] = []  # (rows before it, callback)
        self._added = 0  # rows ever added
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.rows_written: dict[str, int] = {}
        self.write_errors = 0
        self.rejected_rows = 0
        self.dropped_rows = 0

    def add(self, rows: Iterable[object]) -> None:
        new = list(rows)
        with self._lock:
            self._rows.extend(new)
            self._added += len(new)
            while len(self._rows) > self.max_rows:
                self._rows.popleft()
                self.dropped_rows += 1

    def after_stored(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append((self._added, callback))

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def flush(self) -> int:
        """One batch of everything buffered (and the pending command acks) into the spool; rows shipped.
        Never raises: on a spool failure (disk full) the rows stay buffered for the next flush."""
        with self._flush_lock:
            with self._lock:
                rows = list(self._rows)
                added = self._added
                callbacks = [c for c in self._callbacks if c[0] <= added]
            acks = self.channel.take_acks() if self.channel is not None else []
            kept = self.compactor.keep(rows)
            if kept or acks:
                try:
                    self._append(kept, acks)
                except (OSError, ValueError) as exc:
                    self.write_errors += 1
                    if self.channel is not None:
                        self.channel.return_acks(acks)
                    log.error("the spool cannot be written (%s); %d rows stay buffered", exc, len(rows))
                    return 0
            with self._lock:
                for _ in range(len(rows)):
                    self._rows.popleft()
                self._callbacks = [c for c in self._callbacks if c[0] > added]
            for _, callback in callbacks:
                try:
                    callback()
                except Exception:
                    log.exception("a callback waiting for spooled rows failed")
            for row in kept:
                name = TABLE_BY_RECORD[type(row)].name
                self.rows_written[name] = self.rows_written.get(name, 0) + 1
            return len(kept)

    def _append(self, rows: list[object], acks: list[CommandAck]) -> None:
        self._seq += 1
        batch = OutgoingBatch(
            host=self.host,
            boot_id=self.boot_id,
            seq=self._seq,
            sent_ts=self._clock(),
            interval_seconds=self.interval_seconds,
            agent_version=__version__,
            tables=columns_by_table(rows),
            acks=list(acks),
        )
        body: bytes | None = None
        if self.wire is not None and self.wire.version == WIRE_VERSION_2:
            try:
                body, non_finite = encode_v2_counted(batch)  # NaN or infinity: sent as NULL, as below
                self.rejected_rows += non_finite
            except NotInV2 as exc:  # version 1 carries it; the controller refuses it naming the value
                log.warning("batch %d sent as wire version 1: %s", self._seq, exc)
        if body is None:
            try:
                body = encode(batch)
            except ValueError:
                # NaN or infinity from a collector: JSON has none, and no column takes one. Ship the rest.
                body = encode(_without_non_finite(batch, self))
        try:
            self.spool.append(body)
        except BaseException:
            self._seq -= 1
            raise
        if self._on_appended is not None:
            self._on_appended()


def _without_non_finite(batch: OutgoingBatch, buffer: SpoolBuffer) -> OutgoingBatch:
    for columns in batch.tables.values():
        for values in columns.values():
            for i, v in enumerate(values):
                if isinstance(v, float) and not math.isfinite(v):
                    values[i] = None
                    buffer.rejected_rows += 1
    return batch
