"""/metrics over HTTP: rendered once per round, served from bytes, slow clients pin no thread."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetguard.agent.metrics import MetricsState
from fleetguard.agent.metrics_http import serve_metrics
from fleetguard.httpserve import HttpServer, Limits
from fleetguard.jobcontrol.peer import connection_owner, connection_owner_now
from fleetguard.records.telemetry import Batch, GpuSample

WAIT_SECONDS = 30.0


def gpu(temperature: float) -> GpuSample:
    return GpuSample(ts=1.0, host="h", gpu_index=0, uuid="GPU-0", temperature_celsius=temperature)


class CountingState(MetricsState):
    """Counts renderings (collect calls) to show that scrapes share them."""

    def __init__(self) -> None:
        super().__init__()
        self.renders = 0

    def collect(self):  # type: ignore[no-untyped-def]
        self.renders += 1
        return super().collect()


@pytest.fixture
def state() -> CountingState:
    s = CountingState()
    s.observe(Batch(gpu_samples=[gpu(50.0)]))
    s.round_done()
    return s


@pytest.fixture
def server(state: CountingState) -> Iterator[HttpServer]:
    srv = serve_metrics(state, "127.0.0.1", 0)
    yield srv
    srv.stop()


def scrape(port: int, path: str = "/metrics", method: str = "GET") -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_SECONDS)
    conn.request(method, path)
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    return response.status, body


def temperature(text: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "fleetguard_gpu_temperature_celsius":
                return float(sample.value)
    raise AssertionError("no temperature series")


def test_a_scrape_shows_the_last_completed_round(state: CountingState, server: HttpServer) -> None:
    status, text = scrape(server.port)
    assert status == 200
    assert temperature(text) == 50.0
    state.observe(Batch(gpu_samples=[gpu(70.0)]))
    assert temperature(scrape(server.port)[1]) == 50.0  # the round is not over yet
    state.round_done()
    assert temperature(scrape(server.port)[1]) == 70.0


def test_fifty_concurrent_scrapes_of_one_round_share_one_rendering(
    state: CountingState, server: HttpServer
) -> None:
    renders_before = state.renders
    results: list[tuple[int, str]] = []
    lock = threading.Lock()

    def one() -> None:
        answer = scrape(server.port)
        with lock:
            results.append(answer)

    threads = [threading.Thread(target=one) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_SECONDS)
    assert [status for status, _ in results] == [200] * 50
    assert len({text for _, text in results}) == 1
    assert state.renders - renders_before == 1


def test_other_paths_and_methods(server: HttpServer) -> None:
    assert scrape(server.port, "/")[0] == 200
    assert scrape(server.port, "/nope")[0] == 404
    assert scrape(server.port, "/metrics", "POST")[0] == 405
    assert scrape(server.port, "/metrics", "HEAD") == (200, "")


def test_silent_connections_pin_no_thread_and_are_closed(state: CountingState) -> None:
    srv = serve_metrics(state, "127.0.0.1", 0, Limits(workers=2, request_timeout_seconds=1.0))
    try:
        threads_before = threading.active_count()
        silent = [socket.create_connection(("127.0.0.1", srv.port), timeout=WAIT_SECONDS) for _ in range(200)]
        assert scrape(srv.port)[0] == 200
        assert threading.active_count() <= threads_before + 2
        for sock in silent:
            assert sock.recv(16) == b""  # the server hung up on it
            sock.close()
    finally:
        srv.stop()


_HOLDER = """
import encodings.idna, os, socket, sys
port, count = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([]); os.setgid(65534); os.setuid(65534)
held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]
print("held", flush=True)
sys.stdin.readline()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_a_user_holding_every_connection_does_not_lock_the_scraper_out(state: CountingState) -> None:
    srv = serve_metrics(
        state, "127.0.0.1", 0, Limits(workers=1, max_connections=32, max_connections_per_owner=8)
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(srv.port), "32"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        deadline = time.monotonic() + WAIT_SECONDS
        # each connection reached the server and was looked up (on a worker thread): poll, not a fixed
        # sleep, so a loaded machine is only slower, not a failure
        while srv.stats.connections_refused < 24 and time.monotonic() < deadline:
            time.sleep(0.02)
        status, body = scrape(srv.port)
        assert status == 200 and "fleetguard_" in body
        assert srv.stats.connections_refused >= 24
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=WAIT_SECONDS)
        srv.stop()


def test_owners_are_local_uids_or_remote_addresses() -> None:
    assert connection_owner(("10.1.2.3", 5000), ("10.1.2.4", 9400)) == ("address", "10.1.2.3")
    assert connection_owner(("::ffff:10.1.2.3", 5000), ("::", 9400)) == ("address", "10.1.2.3")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        owner = connection_owner(client.getsockname(), client.getpeername())
        client.close()
        accepted.close()
    assert owner == ("uid", os.geteuid())


def test_the_lookup_on_the_loop_gives_the_same_owner_without_blocking() -> None:
    # connection_owner_now runs on the server's loop thread: a remote peer needs no lookup at all, a
    # loopback one is the kernel's answer for that one socket, the uid that connection_owner finds
    for remote in [("10.1.2.3", 5000), ("::ffff:10.1.2.3", 5000), ("2001:db8::1", 5000)]:
        assert connection_owner_now(remote, ("::", 9400)) == connection_owner(remote, ("::", 9400))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        now = connection_owner_now(client.getsockname(), client.getpeername())
        blocking = connection_owner(client.getsockname(), client.getpeername())
        client.close()
        accepted.close()
    assert now == blocking == ("uid", os.geteuid())
    # a connection that is gone is nobody's: counted as unknown, as the blocking lookup does
    assert connection_owner_now(("127.0.0.1", 1), ("127.0.0.1", 2)) == ("unknown", None)


def wait_for_renders(state: CountingState, count: int) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while state.renders < count and time.monotonic() < deadline:
        time.sleep(0.01)  # the worker offers no event to wait on


def test_a_scraper_every_15_seconds_causes_no_rendering_ahead(state: CountingState) -> None:
    # The agent's clock is its rounds (1 s each at the default sampling): Prometheus every 15 s is a scrape
    # every 15 rounds. Each scrape renders its own round's text, on the worker; no round is rendered ahead.
    srv = serve_metrics(state, "127.0.0.1", 0)
    try:
        renders_before = state.renders
        for scrape_number in range(1, 5):
            for second in range(15):
                state.observe(Batch(gpu_samples=[gpu(60.0 + scrape_number + second / 100)]))
                state.round_done()
                assert not state.wants_rendering()
            # The worker runs one task at a time, in order: a rendering ahead would have run before this one.
            assert temperature(scrape(srv.port)[1]) == 60.0 + scrape_number + 14 / 100
            assert state.renders == renders_before + scrape_number
    finally:
        srv.stop()


def test_fifty_scrapers_at_once_every_15_rounds_are_one_slow_scraper() -> None:
    state = CountingState()
    for _ in range(3):
        for _ in range(50):
            state.exposition()  # fifty scrapes of one round: no gap between rounds measured
        for _ in range(15):
            state.round_done()
            assert not state.wants_rendering()
    assert state.renders == 3


def test_a_scraper_every_round_or_two_is_served_rendered_ahead(state: CountingState) -> None:
    srv = serve_metrics(state, "127.0.0.1", 0)
    try:
        renders_before = state.renders
        state.round_done()
        assert not state.wants_rendering()  # nobody has scraped: an unscraped agent renders nothing
        assert scrape(srv.port)[0] == 200  # rendered for this scrape, on the worker
        state.round_done()
        assert not state.wants_rendering()  # one scrape tells no interval: rendered when asked
        assert scrape(srv.port)[0] == 200
        assert state.renders == renders_before + 2
        renders = state.renders
        for step, gap in enumerate((1, 2, 1, 2), start=1):
            for _ in range(gap):
                state.observe(Batch(gpu_samples=[gpu(80.0 + step)]))
                state.round_done()  # a fast scraper: the worker renders each round as it completes
                assert state.wants_rendering()
                renders += 1
                wait_for_renders(state, renders)
                assert state.renders == renders
            assert temperature(scrape(srv.port)[1]) == 80.0 + step  # served from those bytes
            assert state.renders == renders
    finally:
        srv.stop()


def test_rendering_ahead_stops_when_the_fast_scraper_does() -> None:
    state = CountingState()
    for _ in range(3):
        state.exposition()
        state.round_done()
    assert state.wants_rendering()
    state.round_done()
    assert state.wants_rendering()  # two rounds since the last scrape: it may still come
    state.round_done()
    assert not state.wants_rendering()
    state.exposition()  # back after three rounds: slower than fast, rendered when asked
    state.round_done()
    assert not state.wants_rendering()


def test_the_text_served_is_always_the_last_completed_round(state: CountingState) -> None:
    # Scrapers fast then slow then fast again, some right after a round completes (its text not rendered
    # ahead yet): every scrape shows the round completed before it, never an earlier one.
    srv = serve_metrics(state, "127.0.0.1", 0)
    try:
        reading = 50.0
        for gap in (1, 1, 1, 2, 5, 15, 3, 1, 1, 2, 1):
            for _ in range(gap):
                reading += 1.0
                state.observe(Batch(gpu_samples=[gpu(reading)]))
                state.round_done()
            assert temperature(scrape(srv.port)[1]) == reading
            assert temperature(scrape(srv.port)[1]) == reading
    finally:
        srv.stop()
