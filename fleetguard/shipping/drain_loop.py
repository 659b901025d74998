"""The one drain loop of the agent's shippers: spooled batches to a transport (HTTP, NATS), deleted from the
spool only once the transport says the far end stored them.

The loop decides what both transports share: which batch goes next and how long to wait after a failure
(fleetguard.shipping.drain), what a failure does to the spool (nothing: the batch stays; only a batch that
can never be stored is dropped, and counted), the counters, and shutdown (try briefly to send what is left).
A transport only sends: `send(body)` returns once the far end stored the batch, or raises one of
fleetguard.shipping.errors' failures saying what became of it.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from fleetguard.shipping.drain import BACKOFF_CAP_SECONDS, Drain
from fleetguard.shipping.errors import BatchRefused, RetryLater, SendFailed, TransportDown
from fleetguard.shipping.spool import Spool, SpoolRecord

log = logging.getLogger(__name__)

IDLE_WAIT_SECONDS = 1.0  # nothing spooled: look again this often (a new batch wakes the loop at once)


@dataclass
class ShipperStats:
    sent: int = 0
    committed: int = 0
    duplicates: int = 0
    refused: dict[int, int] = field(default_factory=dict)  # by HTTP status
    dropped_refused: int = 0  # batches the far end can never store (refused for their content): deleted
    errors: int = 0  # no answer (connection refused, timeout, not connected)
    bad_commands: int = 0
    last_success_ts: float = 0.0


class Transport(Protocol):
    def prepare(self) -> None:
        """Before each round, batch or not: open what the transport keeps open (a connection that also
        carries commands). Raises TransportDown while it cannot."""

    def send(self, body: bytes) -> None:
        """Deliver one spooled batch; returns only once the far end stored it. Raises BatchRefused (it can
        never be stored), RetryLater, TransportDown or SendFailed (it stays spooled)."""

    def close(self) -> None:
        """Drop the connection (after an unexpected failure, and at stop); the next round opens it again."""


class DrainLoop:
    """The shipper thread over one spool and one transport. `ship(record)` is one send with its outcome
    applied; the thread calls it for the next record until stopped."""

    def __init__(
        self,
        spool: Spool,
        transport: Transport,
        stats: ShipperStats,
        *,
        clock: Callable[[], float],
        rng: random.Random,
        thread_name: str,
        join_seconds: float,
        backoff_cap_seconds: float = BACKOFF_CAP_SECONDS,
    ) -> None:
        self.spool = spool
        self.transport = transport
        self.stats = stats
        self.clock = clock
        self.drain = Drain(spool, rng, backoff_cap_seconds)
        self._thread_name = thread_name
        self._join_seconds = join_seconds
        self._wake = threading.Event()  # a new batch
        self._stop = threading.Event()
        # Shutdown: a backoff in progress ends now (the far end may well be back: a final try is cheap) ...
        self._closing = threading.Event()
        # ... and the first send that fails after that ends the drain (the rest stays spooled).
        self._gave_up = threading.Event()
        # Set to end a backoff in progress: by shutdown, or by the transport saying the far end is back.
        self._backoff_over = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        """A new batch is in the spool."""
        self._wake.set()

    def resume(self) -> None:
        """The far end is reachable again (a NATS client reconnected): a backoff in progress ends now. Safe
        for a fleet: the client paced and jittered its own reconnects, so this is not every agent at once
        retrying a controller that is still down, which is what the backoff is for."""
        self._backoff_over.set()
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self, drain_seconds: float = 0.0) -> None:
        """Stop; with `drain_seconds`, first try that long to send what is spooled (shutdown)."""
        if drain_seconds > 0 and self._thread is not None and self._thread.is_alive():
            # Not "only if the last send worked": a shipper backing off from a controller that has since come
            # back would otherwise leave its whole backlog spooled at every stop (CI caught 6 batches so).
            deadline = self.clock() + drain_seconds
            self._closing.set()
            self._backoff_over.set()
            self._wake.set()
            while self.spool.pending() and self.clock() < deadline and not self._gave_up.is_set():
                self._gave_up.wait(0.05)
        self._stop.set()
        self._closing.set()
        self._backoff_over.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self._join_seconds)
        self.transport.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            delay = self.step()
            if delay is None:
                self._wake.wait(IDLE_WAIT_SECONDS)
                self._wake.clear()
            elif delay > 0:
                if self._closing.is_set():
                    self._gave_up.set()  # one failure at shutdown: the rest waits for the next start
                    self._stop.wait()
                    continue
                # A backoff is not cut short by new batches (a fleet that lost its controller must not
                # retry at every flush), only by shutdown or `resume`.
                if self._backoff_over.wait(delay) and not self._closing.is_set():
                    self._backoff_over.clear()

    def step(self) -> float | None:
        """One round: the next batch sent; the seconds to wait before the next round, None when idle."""
        try:
            self.transport.prepare()
        except TransportDown as exc:
            return self._down(exc)
        except Exception:  # a bug must not end shipping: everything stays spooled, tried again later
            log.exception("shipping: the transport could not be opened")
            self.transport.close()
            return self.drain.failed()
        record = self.drain.next_record()
        if record is None:
            return None
        return self.ship(record)

    def ship(self, record: SpoolRecord) -> float:
        """Send one record and apply the outcome; the seconds to wait before the next send."""
        body = self.spool.read(record)
        if body is None:
            return 0.0
        try:
            self.transport.send(body)
        except BatchRefused as exc:
            log.error("batch %d dropped: %s", record.record_id, exc)
            self.stats.dropped_refused += 1
            self.spool.ack(record.record_id)
            return 0.0
        except RetryLater as exc:
            log.debug("batch %d: %s", record.record_id, exc)
            return exc.seconds
        except TransportDown as exc:
            return self._down(exc)
        except SendFailed as exc:
            log.debug("batch %d not stored: %s", record.record_id, exc)
            return self.drain.failed()
        except Exception:  # a bug must not end shipping: the batch stays spooled, tried again later
            log.exception("shipping batch %d failed", record.record_id)
            self.transport.close()
            return self.drain.failed()
        self.drain.succeeded()
        self.spool.ack(record.record_id)
        self.stats.committed += 1
        self.stats.last_success_ts = self.clock()
        return 0.0

    def _down(self, exc: TransportDown) -> float:
        self.stats.errors += 1
        if self.drain.failures == 0 and not exc.said:
            log.warning("%s; batches stay spooled", exc)
        return self.drain.unreachable()
