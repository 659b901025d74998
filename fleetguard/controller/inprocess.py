"""The controller inside `fleetguard up`: the agent's sink is the controller's own ingest, in the same
process, with one DuckDB and no HTTP.

Each flush makes one batch per host its rows name (a simulated fleet is several hosts), numbered (host,
boot_id, seq) as a shipping agent numbers them, and hands it to the function the HTTP endpoint uses after the
token check (`parse_batch`: every value checked against its column), then to the writer lanes (ledger, hosts'
state, rollups, fleet runtime) and waits for the commit. A batch the writer could not commit (store failing,
writer behind) is submitted again with the same key at the next flush, so the ledger stores it once whatever
happens; a batch refused for its content is dropped and counted, as a shipping agent drops it. Commands in the
replies run through the same command channel as a shipping agent's (the host's training runtime); only the
host's own batches are answered with commands (a simulated host has no agent to run them).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from fleetguard import __version__
from fleetguard.agent.local_sink import open_store
from fleetguard.clock import Clock
from fleetguard.config import Config
from fleetguard.controller.analysis import register_analysis
from fleetguard.controller.ingest import IngestWriter, Pending
from fleetguard.controller.maintenance import Maintenance
from fleetguard.controller.process import split_listen
from fleetguard.controller.server import ApiSettings, ControllerApi, reads_need_token
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.tokens import TokenBook, TokenFileError
from fleetguard.controller.validate import MAX_ROWS, BatchRefused, IngestBatch, Refusal, parse_batch
from fleetguard.httpserve import HttpServer, Limits
from fleetguard.shipping.channel import CommandChannel, Runner
from fleetguard.shipping.commands import CommandAck
from fleetguard.shipping.wire import OutgoingBatch, columns_by_table
from fleetguard.startup import StartupError, os_reason
from fleetguard.store import Store
from fleetguard.store.holder import HolderKind, announce, withdraw

log = logging.getLogger(__name__)

# How long one flush waits for its batches to commit before leaving them to the next flush (they stay queued
# in the writer and are not submitted twice while they are).
COMMIT_WAIT_SECONDS = 30.0
# Rows per batch: well under the ingest's MAX_ROWS, so a backlog after a store outage still passes the checks.
BATCH_ROWS = min(50_000, MAX_ROWS)
DEFAULT_MAX_ROWS = 500_000  # buffered while batches cannot be committed; then the oldest are dropped
# What sending again cannot fix: the batch is dropped (counted), as a shipping agent drops a 400/413.
_CONTENT_REFUSALS = frozenset({Refusal.MALFORMED, Refusal.INVALID_VALUE, Refusal.TOO_LARGE})


@dataclass
class _Sent:
    batch: IngestBatch
    pending: Pending


class IngestBuffer:
    """The agent's RowBuffer whose flush is the controller's ingest."""

    def __init__(
        self,
        writer: IngestWriter,
        host: str,
        interval_seconds: float,
        clock: Clock,
        *,
        channel: CommandChannel | None = None,
        max_rows: int = DEFAULT_MAX_ROWS,
        commit_wait_seconds: float = COMMIT_WAIT_SECONDS,
    ) -> None:
        self.writer = writer
        self.host = host
        self.interval_seconds = interval_seconds
        self.clock = clock
        self.channel = channel
        self.max_rows = max_rows
        self.commit_wait_seconds = commit_wait_seconds
        self.boot_id = uuid.uuid4().hex
        self._seq: dict[str, int] = {}
        self._rows: list[object] = []
        self._added = 0
        self._callbacks: list[tuple[int, Callable[[], None]]] = []  # (rows added before it, callback)
        self._unsent: list[IngestBatch] = []  # checked, not committed: submitted again with the same key
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.rows_written: dict[str, int] = {}
        self.write_errors = 0
        self.dropped_rows = 0
        self.rejected_rows = 0
        self.batches_committed = 0
        self.batches_duplicate = 0

    def add(self, rows: Iterable[object]) -> None:
        new = list(rows)
        with self._lock:
            self._rows.extend(new)
            self._added += len(new)
            excess = len(self._rows) - self.max_rows
            if excess > 0:
                del self._rows[:excess]
                self.dropped_rows += excess

    def after_stored(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append((self._added, callback))

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows) + sum(b.rows for b in self._unsent)

    @property
    def uncommitted_batches(self) -> int:
        """Checked batches not committed yet (lost if the process stops now)."""
        return len(self._unsent)

    def flush(self) -> int:
        """Batches of everything buffered through the ingest; rows committed. Never raises: what could not be
        committed is submitted again (same keys) at the next flush."""
        with self._flush_lock:
            with self._lock:
                rows, self._rows = self._rows, []
                added = self._added
                due = [c for c in self._callbacks if c[0] <= added]
                self._callbacks = [c for c in self._callbacks if c[0] > added]
            acks = self.channel.take_acks() if self.channel is not None else []
            batches = self._unsent + self._check(rows, acks)
            self._unsent = []
            committed = self._commit(batches)
            if self._unsent:
                with self._lock:  # their callbacks wait for them
                    self._callbacks = [(0, cb) for _, cb in due] + self._callbacks
                return committed
            for _, callback in due:
                try:
                    callback()
                except Exception:
                    log.exception("a callback waiting for stored rows failed")
            return committed

    def _check(self, rows: list[object], acks: list[CommandAck]) -> list[IngestBatch]:
        """Rows as checked ingest batches: per host, in order, at most BATCH_ROWS each."""
        by_host: dict[str, list[object]] = {}
        for row in rows:
            by_host.setdefault(getattr(row, "host", None) or self.host, []).append(row)
        if acks:
            by_host.setdefault(self.host, [])
        out: list[IngestBatch] = []
        for host, host_rows in by_host.items():
            for start in range(0, max(1, len(host_rows)), BATCH_ROWS):
                part = host_rows[start : start + BATCH_ROWS]
                part_acks = acks if host == self.host and start == 0 else []
                batch = self._checked(host, part, part_acks)
                if batch is not None:
                    out.append(batch)
        return out

    def _checked(self, host: str, rows: list[object], acks: list[CommandAck]) -> IngestBatch | None:
        seq = self._seq.get(host, 0) + 1
        self._seq[host] = seq
        outgoing = OutgoingBatch(
            host=host,
            boot_id=self.boot_id,
            seq=seq,
            sent_ts=self.clock.time(),
            interval_seconds=self.interval_seconds,
            agent_version=__version__,
            tables=columns_by_table(rows),
            acks=acks,
        )
        # The wire's JSON (no gzip, no HTTP): the checks see exactly the values a shipping agent would send.
        try:
            body = json.dumps(outgoing.to_json(), separators=(",", ":"), allow_nan=False)
        except ValueError:  # NaN or infinity from a collector: no column takes one; the rest is stored
            self.rejected_rows += _without_non_finite(outgoing)
            body = json.dumps(outgoing.to_json(), separators=(",", ":"), allow_nan=False)
        try:
            return parse_batch(body.encode(), host, compressed=False, now=self.clock.time())
        except BatchRefused as exc:
            self._refused(host, len(rows), exc)
            return None

    def _commit(self, batches: list[IngestBatch]) -> int:
        sent: list[_Sent] = []
        for i, batch in enumerate(batches):
            try:
                sent.append(_Sent(batch, self.writer.submit(batch, replies=self._runs_commands(batch.host))))
            except BatchRefused:  # the writer's queue is full: this and the rest wait for the next flush
                self.write_errors += 1
                self._unsent.extend(batches[i:])
                break
        committed = 0
        for s in sent:
            if not self.writer.wait_answer(s.pending, self.commit_wait_seconds):
                # Still queued: it commits later, and its key makes a second submission a duplicate. Given up
                # before the commit chose its commands, so none is counted for it; the resubmission's answer
                # carries them.
                self.write_errors += 1
                self._unsent.append(s.batch)
                continue
            if s.pending.error is not None:
                if s.pending.error.reason in _CONTENT_REFUSALS:
                    self._refused(s.batch.host, s.batch.rows, s.pending.error)
                else:
                    self.write_errors += 1
                    self._unsent.append(s.batch)
                continue
            result = s.pending.result
            assert result is not None
            # A duplicate is a batch submitted again after its first submission outlived a flush's wait: that
            # one committed it, unseen here, so its rows are counted now (each batch is counted once).
            self.batches_duplicate += result.duplicate
            self.batches_committed += 1
            committed += s.batch.rows
            for name, columns in s.batch.tables.items():
                n = len(next(iter(columns.values())))
                self.rows_written[name] = self.rows_written.get(name, 0) + n
            if result.commands and self.channel is not None:
                self.channel.deliver(result.commands)
        if self._unsent:
            log.warning(
                "%d batches wait for the next flush (the store or its writer is behind)", len(self._unsent)
            )
        return committed

    def _runs_commands(self, host: str) -> bool:
        """Whether an agent here runs `host`'s commands: only then do its answers carry them (and count as
        copies sent, `host_commands.deliveries`); a simulated host's stay pending, delivered to nobody."""
        return self.channel is not None and host == self.host

    def _refused(self, host: str, rows: int, exc: BatchRefused) -> None:
        self.rejected_rows += rows
        log.error(
            "the ingest refused a batch of %d rows of %s and it is dropped: %s", rows, host, exc.message
        )


def _without_non_finite(batch: OutgoingBatch) -> int:
    replaced = 0
    for columns in batch.tables.values():
        for values in columns.values():
            for i, v in enumerate(values):
                if isinstance(v, float) and not math.isfinite(v):
                    values[i] = None
                    replaced += 1
    return replaced


class InProcessController:
    """The sink of `fleetguard up` (fleetguard.agent.sink.Sink): the store, the controller's writer lanes and
    periodic analysis, and the IngestBuffer that feeds them."""

    def __init__(
        self,
        config: Config,
        clock: Clock,
        runner: Runner | None = None,
        *,
        incidents: bool = True,
        serve_api: bool = False,
    ) -> None:
        """`runner` carries out the commands ingest replies bring for this host (the training runtime's
        actions); `incidents=False` leaves incidents to a part of its own (`up`'s incidents extension);
        `serve_api` serves the controller's read API on controller.listen (`up`: `fleetguard status`,
        `breaker status`, `alerts status` and `export` ask it while it holds the store)."""
        self._store = open_store(config.store.path)
        try:
            self.stats = ControllerStats()
            self.writer = IngestWriter(self._store, clock, self.stats)
            self.maintenance = Maintenance(self._store, clock)
            # up scores on its own thread (fleetguard/embedded.py): the same service, plus the job's actions
            self._stops = register_analysis(
                self.writer, self.maintenance, config, incidents=incidents, scoring=False
            )
            journal = Path(config.store.path + ".commands.jsonl")
            in_memory = config.store.path == ":memory:"
            self.channel = None if runner is None or in_memory else CommandChannel(journal, runner)
            self._buffer = IngestBuffer(
                self.writer, config.host, config.agent.flush_interval_seconds, clock, channel=self.channel
            )
            self.api_server: HttpServer | None = None
            self.api: ControllerApi | None = None
            self.api_url = ""
            if serve_api:
                self.api, self.api_server, self.api_url = _serve_read_api(
                    config, self._store, self.writer, self.stats, clock
                )
        except BaseException:
            self._store.close()
            raise

    @property
    def buffer(self) -> IngestBuffer:
        return self._buffer

    @property
    def store(self) -> Store:
        return self._store

    @property
    def metrics(self) -> None:
        return None

    def start(self) -> None:
        if self.channel is not None:
            self.channel.start()
        self.writer.start()
        self.maintenance.start()
        if self.api_server is not None:
            self.api_server.start()
            announce(self._store.path, HolderKind.UP, self.api_url)

    def apply_retention(self, days: float, now: float) -> None:
        """The controller's maintenance runs retention (register_analysis)."""

    def close(self) -> None:
        """After the agent's final flush: the writer commits what is queued, analysis stops, the store
        closes."""
        if self.channel is not None:
            self.channel.stop()
        if self.api_server is not None and self.api is not None:
            self.api_server.stop()
            self.api.close()
            withdraw(self._store.path)
        self.writer.stop()
        self.maintenance.stop()
        for stop in self._stops:
            stop()
        self._store.close()

    def summary(self) -> dict[str, object]:
        return {
            "committed_batches": self._buffer.batches_committed,
            "duplicate_batches": self._buffer.batches_duplicate,
            "uncommitted_batches": self._buffer.uncommitted_batches,
            "boot_id": self._buffer.boot_id,
        }


def _serve_read_api(
    config: Config, store: Store, writer: IngestWriter, stats: ControllerStats, clock: Clock
) -> tuple[ControllerApi, HttpServer, str]:
    """The controller's read API over `up`'s store, bound now (started with the sink): on loopback by
    default, with the operator tokens of controller.tokens_file off it, as the controller's."""
    address, port = split_listen(config.controller.listen)
    try:
        tokens = TokenBook(Path(config.controller.tokens_file))
    except TokenFileError as exc:
        raise StartupError(str(exc)) from exc
    settings = ApiSettings(
        read_needs_token=reads_need_token(address),
        silent_after_seconds=config.controller.silent_after_seconds,
        model_dir=config.predictor.model_dir,  # the registry's reads; promotions need the operator token
        reads_only=True,
    )
    api = ControllerApi(store, writer, tokens, stats, clock, settings)
    limits = Limits(workers=8, max_body_bytes=1 << 16, request_timeout_seconds=30.0)
    try:
        server = HttpServer(api, address, port, limits, name="fleetguard-read-api")
    except OSError as exc:
        raise StartupError(
            f"controller.listen: `up` serves the read API there and cannot listen on {address}:{port}: "
            f"{os_reason(exc)} (set controller.listen to a free HOST:PORT; port 0 takes any)"
        ) from exc
    host = "127.0.0.1" if address in ("0.0.0.0", "::", "") else address  # noqa: S104 (read back)
    host = f"[{host}]" if ":" in host else host
    return api, server, f"http://{host}:{server.port}"
