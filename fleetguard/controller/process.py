"""`fleetguard controller`: the store, the single writer, the API server and the periodic analysis, run until
SIGTERM; then stop accepting, commit what was accepted, close the store."""

from __future__ import annotations

import gc
import logging
import os
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TextIO

from fleetguard import stop_signals
from fleetguard.clock import Clock, SystemClock
from fleetguard.config import Config
from fleetguard.controller.edge_pool import Edge, EdgePool, make_edge
from fleetguard.controller.ingest import IngestWriter, parse_entry
from fleetguard.controller.journal import SYNC_BUCKETS, Journal, JournalError
from fleetguard.controller.maintenance import Maintenance
from fleetguard.controller.server import ApiSettings, ControllerApi, reads_need_token
from fleetguard.controller.stats import ControllerStats
from fleetguard.controller.tokens import TokenBook
from fleetguard.httpserve import HttpServer, Limits, bound_where
from fleetguard.sd_notify import Notifier
from fleetguard.secret_files import SecretFileError, open_secret_file
from fleetguard.store import Store
from fleetguard.store.holder import HolderKind, announce, withdraw

log = logging.getLogger(__name__)

# Workers mostly wait for their group to commit, so many of them cost memory, not CPU; and every batch in
# flight can join the next group, so their number caps the group size and with it ingest throughput.
WORKERS = 512
# With the ingest journal a handler thread holds a batch for a parse and a shared fdatasync (a few ms), not
# for its commit: a few dozen keep up with thousands of hosts, and fewer threads contend for the interpreter
# (512 of them, hundreds awake at once under a diagnosis round, were part of the ingest p99).
JOURNALED_WORKERS = 32
# Per-client bounds (4,200 half-open connections from one client once held all 4,096): one address (an IPv6
# client's /64) holds at most a quarter of the connections, room for a load generator's 512 on loopback,
# and a request head must be in within 10 s of the accept however slowly its bytes come.
MAX_CONNECTIONS_PER_ADDRESS = 1024
HEAD_TIMEOUT_SECONDS = 10.0
# DuckDB checkpoints when the WAL reaches this; a checkpoint stalls commits. The default (16 MB) is reached
# every few seconds at 2,000 hosts, each stall ~0.3 s; larger means rarer stalls for the same total work.
CHECKPOINT_THRESHOLD = "256MB"
# DuckDB's own cache and working memory (default: 80% of the machine); queries past it spill to disk.
DUCKDB_MEMORY_LIMIT = "1GB"


@dataclass
class RunningController:
    store: Store
    writer: IngestWriter
    maintenance: Maintenance
    server: HttpServer
    api: ControllerApi
    on_stop: list[Callable[[], None]]
    stopped: bool = False
    # Ingest other than HTTP (the NATS consumer, controller.pool): stopped before the writer.
    sources: list[Callable[[], None]] = field(default_factory=list)
    dashboard_url: str | None = None  # the operators' dashboard ([dashboard] enabled)

    @property
    def port(self) -> int:
        return self.server.port

    def stop(self) -> None:
        """Stop accepting, commit what was accepted, close the store. Safe to call twice."""
        if self.stopped:
            return
        self.stopped = True
        self.server.stop()
        self.api.close()
        withdraw(self.store.path)
        for stop_source in self.sources:
            stop_source()
        self.writer.stop()
        if self.writer.journal is not None:
            self.writer.journal.close()  # every entry committed: no segment is left
        self.maintenance.stop()
        for stop in self.on_stop:
            stop()
        self.store.close()


def open_journal(config: Config) -> Journal | None:
    """The ingest journal ([controller] journal, journal_dir); None when off or the store is in memory."""
    if not config.controller.journal or config.store.path == ":memory:":
        return None
    directory = Path(config.controller.journal_dir or f"{config.store.path}.journal")
    try:
        return Journal.open(directory)
    except JournalError as exc:
        raise OSError(f"controller.journal_dir: {exc}") from exc


def journal_exposition(journal: Journal, writer: IngestWriter) -> list[str]:
    """The journal's gauges and counters for the controller's /metrics."""
    name = "fleetguard_controller_journal"
    rows = [
        ("entries", "gauge", "Batches answered and not yet committed to the store.", journal.held),
        ("bytes", "gauge", "Bytes of the journal's segments on disk.", journal.bytes_on_disk),
        ("max_bytes", "gauge", "The journal's bound: batches are answered 503 past it.", journal.max_bytes),
        (
            "hosts_held",
            "gauge",
            "Hosts whose batches wait (503 held): the store refused 16 of theirs, set aside in the journal.",
            len(writer.held_hosts()),
        ),
        ("appended_total", "counter", "Batches written to the journal.", journal.appended),
        (
            "syncs_total",
            "counter",
            "fdatasync calls (one for all the batches that came meanwhile).",
            journal.syncs,
        ),
        (
            "set_aside_total",
            "counter",
            "Journaled batches the store refused, kept aside.",
            writer.journal_set_aside,
        ),
    ]
    out: list[str] = []
    for suffix, kind, text, value in rows:
        out += [
            f"# HELP {name}_{suffix} {text}",
            f"# TYPE {name}_{suffix} {kind}",
            f"{name}_{suffix} {value}",
        ]
    counts, total = list(journal.sync_counts), journal.sync_seconds
    out += [
        f"# HELP {name}_sync_seconds fdatasync of the journal: every answer waits on one.",
        f"# TYPE {name}_sync_seconds histogram",
    ]
    running = 0
    for bound, count in zip([*map(str, SYNC_BUCKETS), "+Inf"], counts, strict=True):
        running += count
        out.append(f'{name}_sync_seconds_bucket{{le="{bound}"}} {running}')
    out += [f"{name}_sync_seconds_sum {total}", f"{name}_sync_seconds_count {running}"]
    return out


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    """The server side of HTTPS (controller.tls_cert / tls_key); OSError naming the files if unusable."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # The key goes through the one secret-file reader; OpenSSL then loads that same checked descriptor
    # (/proc/self/fd), never the path again, so a file swapped after the check is not the one used.
    try:
        fd = open_secret_file("controller.tls_key", key)
    except SecretFileError as exc:
        raise OSError(str(exc)) from exc
    try:
        context.load_cert_chain(cert, f"/proc/self/fd/{fd}")
    except (OSError, ssl.SSLError) as exc:
        raise OSError(f"controller.tls_cert {cert} / tls_key {key}: {exc}") from exc
    finally:
        os.close(fd)
    return context


def start_controller(config: Config, clock: Clock | None = None) -> RunningController:
    """Open everything and start serving; raises StoreError, TokenFileError, BindError, OSError."""
    clock = clock or SystemClock()
    ctl = config.controller
    address, port = split_listen(ctl.listen)
    tokens = TokenBook(Path(ctl.tokens_file))
    store = Store.open(config.store.path)
    edge: Edge | None = None
    journal: Journal | None = None
    try:
        store.connection.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
        store.connection.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
        stats = ControllerStats()
        journal = open_journal(config)
        writer = IngestWriter(store, clock, stats, max_queue=ctl.max_queue_batches, journal=journal)
        if journal is not None:
            stats.extra.append(partial(journal_exposition, journal, writer))
        from fleetguard.controller.analysis import register_analysis

        maintenance = Maintenance(store, clock)
        on_stop = register_analysis(writer, maintenance, config)
        api = ControllerApi(
            store,
            writer,
            tokens,
            stats,
            clock,
            ApiSettings(
                read_needs_token=reads_need_token(address),
                silent_after_seconds=ctl.silent_after_seconds,
                model_dir=config.predictor.model_dir,
            ),
            edge := make_edge(ctl.edge_processes),
        )
        limits = Limits(
            workers=JOURNALED_WORKERS if journal is not None else WORKERS,
            max_body_bytes=ctl.max_body_bytes,
            request_timeout_seconds=30.0,  # a large batch on a slow link
            head_timeout_seconds=HEAD_TIMEOUT_SECONDS,
            max_connections_per_address=MAX_CONNECTIONS_PER_ADDRESS,
        )
        if isinstance(edge, EdgePool):
            stats.extra.append(edge.exposition)
        tls = tls_context(ctl.tls_cert, ctl.tls_key) if ctl.tls_cert else None
        server = HttpServer(
            api, address, port, limits, name="fleetguard-controller", ssl_context=tls, quick=api.loop_ingest
        )
    except BaseException:
        if edge is not None:
            edge.stop()
        if journal is not None:
            journal.close()
        store.close()
        raise
    writer.start()
    # Before the first request: what a previous run answered and did not commit goes first.
    try:
        writer.replay_journal(parse_entry)
    except JournalError as exc:  # the store takes nothing: stop, the journal keeps what it holds
        writer.stop()
        if journal is not None:
            journal.close()
        if edge is not None:
            edge.stop()
        store.close()
        raise OSError(f"controller.journal_dir: {exc}") from exc
    maintenance.start()
    running = RunningController(store, writer, maintenance, server, api, on_stop)
    try:
        if api.loop_ingest is not None:
            api.loop_ingest.journal_thread.start()
        server.start()
    except BaseException:  # nothing left running behind the error: the threads, the writer, the store
        running.stop()
        raise
    scheme = "https" if tls is not None else "http"
    announce(store.path, HolderKind.CONTROLLER, f"{scheme}://{_url_host(address)}:{server.port}")
    if config.dashboard.enabled:
        try:
            running.dashboard_url = _start_dashboard(config, running)
        except BaseException:
            running.stop()
            raise
    if ctl.pool:
        from fleetguard.controller.nats_consumer import start_consumer

        try:
            running.sources.append(start_consumer(config, writer, stats).stop)
        except BaseException:
            running.stop()
            raise
    return running


def _url_host(address: str) -> str:
    """Where a client on this host reaches a listener bound to `address`."""
    if address in ("", "0.0.0.0", "::"):  # noqa: S104 (read back, not bound here)
        return "127.0.0.1"
    return f"[{address}]" if ":" in address else address


def _start_dashboard(config: Config, running: RunningController) -> str | None:
    """Serve the dashboard from the controller's store (the fleet's single writer, so operator actions are
    stored where the incidents are); closed before the store. Without Dash installed the controller runs on
    and says why; a dashboard port in use is a start-up failure naming the key."""
    try:
        from dashboard.server import serve_dashboard
    except ImportError as exc:
        log.warning("dashboard off: %s is not installed (pip install 'fleetguard[dashboard]')", exc.name)
        return None
    try:
        server = serve_dashboard(running.store, config)
    except OSError as exc:
        where = f"{config.dashboard.address}:{config.dashboard.port}"
        raise OSError(
            f"dashboard.port: cannot listen on {where}: {exc.strerror or exc} (choose another with "
            "--dashboard-port PORT (0: any free one), or set dashboard.enabled = false)"
        ) from exc
    running.on_stop.insert(0, server.close)
    return server.url


def collect_less() -> None:
    """The controller's garbage collector settings (benchmarks of its parts take the same). Parsed batches
    and a diagnosis round's rows are many small containers: collect the young generation less often, and
    never walk the objects made so far (modules, config, the hosts) in a full collection."""
    gc.set_threshold(20_000, 20, 20)
    gc.freeze()


def run_controller(config: Config, out: TextIO = sys.stdout, duration_seconds: float | None = None) -> None:
    # The interpreter's own 5 ms switch interval. 1 ms once kept the writer from queueing behind the handler
    # threads whenever DuckDB handed the lock back, when every answer waited on a commit; since answers come
    # from the journal, the forced switches cost more than they saved. Alternated single runs at 2,048
    # hosts, wire v2: 0.83 cores against 0.89, 2.02-2.04 ms of CPU per batch against 2.17-2.18, p99 58-83 ms
    # against 84-91 (BENCHMARKS.md, issue 22 session 8).
    sys.setswitchinterval(0.005)
    running = start_controller(config)
    collect_less()
    stop = threading.Event()

    def request_stop(_signum: int, _frame: object) -> None:
        stop.set()

    # A SIGINT/SIGTERM that came while the controller was starting is handed over now: it stops at once.
    restore_signals = stop_signals.route(request_stop)
    scheme = "https" if config.controller.tls_cert else "http"
    address, _ = split_listen(config.controller.listen)
    where = bound_where(address, running.port, "/", scheme)
    out.write(
        f"fleetguard controller: {where} (ingest /v1/ingest, read /v1/fleet, /metrics); "
        f"store {Path(config.store.path).resolve()}\n"
    )
    if running.dashboard_url:
        out.write(f"  dashboard {running.dashboard_url}\n")
    out.flush()
    # Type=notify: started once it serves. No watchdog: no single loop whose progress would vouch for it.
    systemd = Notifier.from_environment()
    if systemd is not None:
        systemd.ready(f"serving on port {running.port}")
    try:
        stop.wait(duration_seconds)
    finally:
        if systemd is not None:
            systemd.stopping()
            systemd.close()
        running.stop()
        restore_signals()
    out.write("fleetguard controller: stopped\n")
