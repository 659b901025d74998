"""The hardened HTTP server (fleetguard.httpserve), driven over real loopback sockets."""

from __future__ import annotations

import errno
import http.client
import json
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetguard.httpserve import (
    LOOKUP_BLOCKS,
    BindError,
    Connection,
    HttpError,
    HttpServer,
    JsonBodyError,
    Limits,
    Request,
    Response,
    json_depth_exceeds,
    loads_json,
)

WAIT_SECONDS = 30.0  # generous: the suite runs on a loaded 2-core machine


def echo(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("handler bug")
    if request.path == "/json":
        return Response.json(200, {"got": request.json()})
    if request.path == "/missing":
        raise HttpError(404, "no such thing")
    seen = request.connection.memo.setdefault("requests", 0)
    assert isinstance(seen, int)
    request.connection.memo["requests"] = seen + 1
    return Response.json(200, {"path": request.path, "body": len(request.body), "on_connection": seen + 1})


@pytest.fixture
def make_server() -> Iterator[Callable[..., HttpServer]]:
    servers: list[HttpServer] = []

    def make(handler: Callable[[Request], Response] = echo, **limits: float) -> HttpServer:
        server = HttpServer(handler, "127.0.0.1", 0, Limits(**limits))  # type: ignore[arg-type]
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def raw_request(port: int, data: bytes) -> bytes:
    """Send `data`, read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECONDS) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def poll(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)  # polling a real server's worker threads: it offers no event to wait on
    return condition()


def test_keep_alive_serves_several_requests_on_one_connection(make_server: Callable[..., HttpServer]) -> None:
    server = make_server()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_SECONDS)
    answers = []
    for _ in range(3):
        conn.request("POST", "/v1/report", body=b"x" * 10)
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("Connection") == "keep-alive"
        answers.append(json.loads(response.read()))
    conn.close()
    assert [a["on_connection"] for a in answers] == [1, 2, 3]
    assert answers[0] == {"path": "/v1/report", "body": 10, "on_connection": 1}
    assert server.stats.connections_accepted == 1


def test_a_response_is_one_segment_with_its_length(make_server: Callable[..., HttpServer]) -> None:
    server = make_server()
    reply = raw_request(server.port, b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Connection: close" in head
    assert f"Content-Length: {len(body)}".encode() in head


def test_http_1_0_closes_after_the_answer(make_server: Callable[..., HttpServer]) -> None:
    server = make_server()
    reply = raw_request(server.port, b"GET /x HTTP/1.0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK")


def test_slowloris_holds_no_worker_and_is_cut_off(make_server: Callable[..., HttpServer]) -> None:
    server = make_server(request_timeout_seconds=1.0, workers=2)
    threads_before = threading.active_count()
    slow = []
    for _ in range(300):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_SECONDS)
        sock.sendall(b"POST /v1/report HTTP/1.1\r\nHost: a\r\n")  # the head never ends
        slow.append(sock)
    # Meanwhile an honest client is answered at once, on a pool of two workers.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_SECONDS)
    conn.request("GET", "/ok")
    assert conn.getresponse().status == 200
    conn.close()
    assert threading.active_count() <= threads_before + 2
    for sock in slow:
        assert sock.recv(1024) == b""  # closed by the server once its deadline passed
        sock.close()
    assert poll(lambda: server.stats.timeouts >= 300)


def test_a_silent_connection_is_closed_after_the_request_timeout(
    make_server: Callable[..., HttpServer],
) -> None:
    server = make_server(request_timeout_seconds=0.5)
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_SECONDS) as sock:
        assert sock.recv(1024) == b""
    assert poll(lambda: server.stats.timeouts == 1)


def test_a_thousand_concurrent_connections_are_all_answered(make_server: Callable[..., HttpServer]) -> None:
    server = make_server()
    selector = selectors.DefaultSelector()
    replies: dict[int, bytes] = {}
    socks = []
    for i in range(1000):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_SECONDS)
        socks.append(sock)
        sock.sendall(f"GET /n{i} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode())
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, i)
        replies[i] = b""
    deadline = time.monotonic() + WAIT_SECONDS * 2
    open_count = len(socks)
    while open_count and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1.0):
            ready = key.fileobj
            assert isinstance(ready, socket.socket)
            chunk = ready.recv(65536)
            replies[key.data] += chunk
            if not chunk:
                selector.unregister(ready)
                open_count -= 1
    for sock in socks:
        sock.close()
    statuses = [reply.split(b" ", 2)[1] for reply in replies.values()]
    assert statuses == [b"200"] * 1000
    assert all(json.loads(r.partition(b"\r\n\r\n")[2])["path"] == f"/n{i}" for i, r in replies.items())


def test_json_nested_100000_deep_is_a_400_and_the_server_goes_on(
    make_server: Callable[..., HttpServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_SECONDS)
    for body in (b"[" * 100_000 + b"]" * 100_000, b"[" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000):
        conn.request("POST", "/json", body=body)
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert response.status == 400
        assert "nested deeper than 64" in answer["error"]
    conn.request("POST", "/json", body=b'{"a": [1, {"b": "]]]"}]}')
    response = conn.getresponse()
    assert (response.status, json.loads(response.read())) == (200, {"got": {"a": [1, {"b": "]]]"}]}})
    conn.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_an_oversized_body_is_refused_unread(make_server: Callable[..., HttpServer]) -> None:
    server = make_server(max_body_bytes=1000)
    reply = raw_request(server.port, b"POST /v1/report HTTP/1.1\r\nContent-Length: 1001\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b"larger than 1000 bytes" in reply
    huge = raw_request(server.port, b"POST /x HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n")
    assert huge.startswith(b"HTTP/1.1 413 ")


def test_an_oversized_head_is_a_431(make_server: Callable[..., HttpServer]) -> None:
    server = make_server(max_header_bytes=1024)
    reply = raw_request(server.port, b"GET /x HTTP/1.1\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431 ")


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"GET /x HTTP/2.0\r\n\r\n", b"505"),
        (b"GET /x HTTP/1.1\r\nbad header\r\n\r\n", b"400"),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"411"),
        (b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", b"400"),
        (b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", b"400"),
        (b"GET /missing HTTP/1.1\r\n\r\n", b"404"),
    ],
)
def test_malformed_requests_get_a_4xx_or_5xx_and_close(
    make_server: Callable[..., HttpServer], request_bytes: bytes, status: bytes
) -> None:
    server = make_server()
    reply = raw_request(server.port, request_bytes) if status != b"404" else b""
    if status == b"404":
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_SECONDS)
        conn.request("GET", "/missing")
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())) == (404, {"error": "no such thing"})
        return
    assert reply.split(b" ", 2)[1] == status
    assert server.stats.bad_requests == 1


def test_a_handler_exception_is_a_500_and_is_counted(
    make_server: Callable[..., HttpServer], caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_SECONDS)
    conn.request("GET", "/boom")
    response = conn.getresponse()
    assert (response.status, json.loads(response.read())) == (500, {"error": "internal error"})
    conn.request("GET", "/after")  # the connection is still usable
    assert conn.getresponse().status == 200
    conn.close()
    assert server.stats.handler_errors == 1
    assert any("handler failed on GET /boom" in r.getMessage() for r in caplog.records)


def test_connections_beyond_the_limit_are_answered_503(make_server: Callable[..., HttpServer]) -> None:
    server = make_server(max_connections=2)
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_SECONDS) for _ in range(2)]
    assert poll(lambda: server.stats.connections_accepted == 2)
    reply = raw_request(server.port, b"GET /x HTTP/1.1\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 503 ")
    for sock in held:
        sock.close()


def test_a_port_in_use_is_one_line_naming_it() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(BindError) as caught:
            HttpServer(echo, "127.0.0.1", port)
    assert str(caught.value).startswith(f"cannot listen on 127.0.0.1:{port}: ")
    assert "\n" not in str(caught.value)
    assert caught.value.errno == errno.EADDRINUSE


def test_stop_answers_the_request_in_flight_then_refuses_connections(
    make_server: Callable[..., HttpServer],
) -> None:
    entered = threading.Event()
    release = threading.Event()

    def slow(request: Request) -> Response:
        entered.set()
        release.wait(WAIT_SECONDS)
        return Response.text(200, "done")

    server = HttpServer(slow, "127.0.0.1", 0)
    server.start()
    port = server.port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_SECONDS)
    conn.request("GET", "/slow")
    assert entered.wait(WAIT_SECONDS)
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    release.set()
    response = conn.getresponse()
    assert (response.status, response.read(), response.getheader("Connection")) == (200, b"done", "close")
    stopper.join(WAIT_SECONDS)
    assert not stopper.is_alive()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECONDS)


def test_stop_on_a_server_never_started_releases_the_port() -> None:
    server = HttpServer(echo, "127.0.0.1", 0)
    port = server.port
    server.stop()
    HttpServer(echo, "127.0.0.1", port).stop()


def test_ipv6_loopback() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        server = HttpServer(echo, "::1", 0)
    except BindError:
        pytest.skip("no IPv6 loopback here")
    with server:
        conn = http.client.HTTPConnection("::1", server.port, timeout=WAIT_SECONDS)
        conn.request("GET", "/six")
        assert conn.getresponse().status == 200
        conn.close()


# ---- JSON depth ----------------------------------------------------------------------------------------


def test_depth_check_ignores_brackets_inside_strings() -> None:
    body = json.dumps({"text": "[" * 500 + '\\"{{{' + "}" * 3}).encode()
    assert not json_depth_exceeds(body, 2)
    assert loads_json(body, 2)["text"].startswith("[[[")


def test_depth_limit_is_exact() -> None:
    assert not json_depth_exceeds(b"[[[1]]]", 3)
    assert json_depth_exceeds(b"[[[1]]]", 2)
    with pytest.raises(JsonBodyError, match="deeper than 2"):
        loads_json(b'{"a": {"b": {"c": 1}}}', 2)


def test_not_json_is_one_line() -> None:
    with pytest.raises(JsonBodyError) as caught:
        loads_json(b"\xff{")
    assert "\n" not in str(caught.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab'),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=20,
)


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


@given(json_values, st.integers(min_value=1, max_value=6))
def test_depth_check_agrees_with_the_parsed_value(value: object, limit: int) -> None:
    body = json.dumps(value).encode()
    assert json_depth_exceeds(body, limit) == (_depth(value) > limit)
    if _depth(value) <= limit:
        assert loads_json(body, limit) == value


def _get_from(source: str, port: int) -> bytes:
    with socket.socket() as sock:
        sock.settimeout(WAIT_SECONDS)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"GET /x HTTP/1.0\r\n\r\n")
        return sock.recv(65536)


def test_an_owner_beyond_its_share_is_answered_503_while_others_are_served() -> None:
    # owners by source address: a client may bind any 127.x address, which is why the runtime uses uids
    server = HttpServer(
        echo,
        "127.0.0.1",
        0,
        Limits(max_connections=8, max_connections_per_owner=2),
        owner_of=lambda connection: connection.peer[0],
    )
    server.start()
    try:
        held = []
        for _ in range(2):
            sock = socket.socket()
            sock.bind(("127.0.0.2", 0))
            sock.connect(("127.0.0.1", server.port))
            held.append(sock)
        assert poll(lambda: server.stats.connections_accepted == 2)
        third = socket.socket()
        third.bind(("127.0.0.2", 0))
        third.connect(("127.0.0.1", server.port))
        third.sendall(b"GET /x HTTP/1.1\r\n\r\n")
        assert third.recv(65536).startswith(b"HTTP/1.1 503 ")
        third.close()
        assert raw_request(server.port, b"GET /x HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 ")
        for sock in held:
            sock.close()
        assert poll(lambda: _get_from("127.0.0.2", server.port).startswith(b"HTTP/1.1 200 "))  # share back
    finally:
        server.stop()


def test_owner_now_answers_on_the_loop_or_hands_the_lookup_to_a_worker() -> None:
    # 127.0.0.2 is named on the loop thread; 127.0.0.3 cannot be without blocking, so owner_of names it on
    # a worker. Each share is still one owner's: the third connection of either is refused.
    loop_threads: set[str] = set()

    def owner_now(connection: Connection) -> object:
        loop_threads.add(threading.current_thread().name)
        return connection.peer[0] if connection.peer[0] == "127.0.0.2" else LOOKUP_BLOCKS

    worker_threads: set[str] = set()

    def owner_of(connection: Connection) -> object:
        worker_threads.add(threading.current_thread().name)
        return connection.peer[0]

    server = HttpServer(
        echo,
        "127.0.0.1",
        0,
        Limits(max_connections=16, max_connections_per_owner=2),
        owner_of=owner_of,
        owner_now=owner_now,
        name="owned",
    )
    server.start()
    held: list[socket.socket] = []
    try:
        for source in ("127.0.0.2", "127.0.0.3"):
            for _ in range(2):
                sock = socket.socket()
                sock.bind((source, 0))
                sock.connect(("127.0.0.1", server.port))
                held.append(sock)
                sock.settimeout(WAIT_SECONDS)
                sock.sendall(b"GET /x HTTP/1.1\r\n\r\n")  # answered: its owner is counted
                assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            assert _get_from(source, server.port).startswith(b"HTTP/1.1 503 ")
        assert loop_threads == {"owned"}
        assert worker_threads and all(name.startswith("owned-owner") for name in worker_threads)
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_a_quick_answer_is_given_on_the_loop_and_none_asks_the_handler_on_a_worker() -> None:
    threads: dict[str, str] = {}

    def quick(request: Request) -> Response | None:
        threads["quick"] = threading.current_thread().name
        if request.path == "/now":
            return Response.text(200, "now\n")
        if request.path == "/bad":
            raise HttpError(400, "bad now")
        return None

    def handler(request: Request) -> Response:
        threads["handler"] = threading.current_thread().name
        return echo(request)

    server = HttpServer(handler, "127.0.0.1", 0, quick=quick, name="quick")
    server.start()
    try:
        assert raw_request(server.port, b"GET /now HTTP/1.0\r\n\r\n").endswith(b"\r\n\r\nnow\n")
        assert "handler" not in threads and threads["quick"] == "quick"
        assert raw_request(server.port, b"GET /bad HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert b'"path": "/x"' in raw_request(server.port, b"GET /x HTTP/1.0\r\n\r\n")
        assert threads["handler"].startswith("quick-worker")
        done = threading.Event()
        assert server.submit(done.set)
        assert done.wait(WAIT_SECONDS)
    finally:
        server.stop()
    assert not server.submit(lambda: None)  # stopped: nothing runs


@pytest.mark.parametrize(
    "body", [b'{"a": "\\ud800"}', b'["x\\udfffy"]', b'{"\\udc00": 1}', b'{"a": ["\\uD83D"]}']
)
def test_a_lone_surrogate_escape_is_not_json_text(body: bytes) -> None:
    # json.loads would make a str that no UTF-8 column, file or log line can hold
    with pytest.raises(JsonBodyError, match="lone UTF-16 surrogate"):
        loads_json(body)


def test_paired_surrogates_and_escaped_backslashes_are_fine() -> None:
    assert loads_json(b'["\\ud83d\\ude00", "\\\\ud800"]') == ["\U0001f600", "\\ud800"]


def test_stopping_with_connections_still_open_logs_no_error(
    make_server: Callable[..., HttpServer], caplog: pytest.LogCaptureFixture
) -> None:
    # Clients that were answered "Connection: close" but never close their end keep the server lingering
    # on them: stopping cancels those connection tasks, which Python 3.11's asyncio logs at ERROR unless the
    # server ends them itself.
    server = make_server(shutdown_grace_seconds=0.1)
    clients = []
    for _ in range(8):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_SECONDS)
        sock.sendall(b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
        clients.append(sock)
    with caplog.at_level(logging.DEBUG):
        server.stop()
    for sock in clients:
        sock.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
