"""Shutdown: the runtime stops accepting, then makes its final flush; every report it acknowledged reaches
the sink, and no report after the final flush is acknowledged."""

from __future__ import annotations

import http.client
import os
import threading
from collections.abc import Sequence

from fleetguard.clock import FakeClock
from fleetguard.jobcontrol.peer import Sender
from fleetguard.records.runtime import Heartbeat
from fleetguard.runtime.service import RuntimeRecord, RuntimeService, RuntimeServiceConfig
from straggler.analysis import RuntimeAnalyzer
from tests.runtime.helpers import report_body

SENDERS = 4


class Sink:
    def __init__(self) -> None:
        self.records: list[object] = []
        self.lock = threading.Lock()

    def __call__(self, batch: Sequence[object]) -> None:
        with self.lock:
            self.records.extend(batch)


def send_until_refused(port: int, rank: int, acked: list[tuple[int, int]], started: threading.Event) -> None:
    """Report steps 1, 2, ... on one kept-alive connection until the agent stops answering 200."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    step = 0
    try:
        while True:
            step += 1
            body = report_body(
                rank=rank, local_rank=rank, pid=os.getpid(), step=step, timings=[], collectives=[]
            )
            conn.request("POST", "/v1/report", body=body)
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                return
            acked.append((rank, step))
            if step == 20:
                started.set()
    except (ConnectionError, http.client.HTTPException, OSError):
        return
    finally:
        conn.close()


def test_every_acknowledged_report_reaches_the_sink_when_the_runtime_stops_mid_stream() -> None:
    sink = Sink()
    service = RuntimeService(
        RuntimeServiceConfig(host="node1", port=0, tick_interval_seconds=0.05), FakeClock(), sink
    )
    service.start()
    acked: list[tuple[int, int]] = []
    started = [threading.Event() for _ in range(SENDERS)]
    threads = [
        threading.Thread(target=send_until_refused, args=(service.port, r, acked, started[r]))
        for r in range(SENDERS)
    ]
    for t in threads:
        t.start()
    for event in started:
        assert event.wait(60)
    service.stop()
    for t in threads:
        t.join(60)
    stored = {(h.rank, h.step) for h in sink.records if isinstance(h, Heartbeat)}
    assert len(acked) >= SENDERS * 20
    assert set(acked) <= stored  # nothing acknowledged was lost


def test_a_report_after_the_final_flush_is_refused_not_acknowledged() -> None:
    sink = Sink()
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), FakeClock(), sink)
    service.start()
    service.stop()
    status, answer = service.server.handle_body(report_body(), Sender(uid=0))
    assert status == 503 and "stopping" in str(answer["error"])
    assert [r for r in sink.records if isinstance(r, Heartbeat)] == []


class SlowAnalyzer(RuntimeAnalyzer):
    """Holds the first report inside the service until told to go on (a report in flight at stop())."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Event()
        self.go_on = threading.Event()

    def observe(self, record: RuntimeRecord, now: float | None = None) -> None:
        if isinstance(record, Heartbeat) and not self.go_on.is_set():
            self.inside.set()
            self.go_on.wait(30)
        super().observe(record, now)


def test_a_report_in_flight_when_stop_begins_is_either_stored_or_refused() -> None:
    sink, analyzer = Sink(), SlowAnalyzer()
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), FakeClock(), sink, analyzer=analyzer)
    service.start()
    answer: list[int] = []

    def send() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
        try:
            conn.request("POST", "/v1/report", body=report_body(pid=os.getpid(), step=77))
            answer.append(conn.getresponse().status)
        except (ConnectionError, http.client.HTTPException, OSError):
            answer.append(0)
        finally:
            conn.close()

    sender = threading.Thread(target=send)
    sender.start()
    assert analyzer.inside.wait(30)
    stopper = threading.Thread(target=service.stop)
    stopper.start()
    stopper.join(0.5)  # stop() has begun and waits for the report in flight
    analyzer.go_on.set()
    stopper.join(60)
    sender.join(60)
    stored = [h.step for h in sink.records if isinstance(h, Heartbeat)]
    assert (answer == [200] and stored == [77]) or (answer != [200] and stored == [])
