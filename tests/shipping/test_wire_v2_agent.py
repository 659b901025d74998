"""Wire version 2 at the agent: the first batch goes as version 1, later ones as version 2 once the
controller's reply says it reads it; a controller that reads version 1 only gets a spooled version-2 batch
again as version 1, and the next ones in it; a batch msgpack cannot carry goes as version 1."""

from __future__ import annotations

import gzip
import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal, parse_batch
from fleetguard.records.telemetry import GpuSample
from fleetguard.shipping.shipper import Shipper
from fleetguard.shipping.spool import Spool
from fleetguard.shipping.spool_buffer import SpoolBuffer
from fleetguard.shipping.wire import encode
from fleetguard.shipping.wire_v2 import WIRE_VERSION_2, NotInV2, WireChoice, encode_v2, is_v2, to_v1
from tests.controller.helpers import Controller, batch, gpu_rows, start_test_controller

HOST = "node-a"


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    c = start_test_controller(tmp_path / "controller")
    yield c
    c.running.stop()


def _drain(shipper: Shipper) -> list[bytes]:
    """Send every spooled batch; the bodies sent, in order."""
    sent = []
    while (record := shipper.drain.next_record()) is not None:
        body = shipper.spool.read(record)
        assert body is not None
        sent.append(body)
        shipper.send(record)
    return sent


def _stored_gpu_rows(c: Controller) -> list[tuple[Any, ...]]:
    c.settle()
    cursor = c.running.store.connection.cursor()  # the controller's own store (it holds the file)
    try:
        return cursor.execute("SELECT ts, gpu_index, uuid FROM gpu_samples ORDER BY ALL").fetchall()
    finally:
        cursor.close()


def test_the_first_batch_goes_as_version_1_and_later_ones_as_version_2_and_all_rows_land(
    controller: Controller, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool", 1 << 20)
    shipper = Shipper(spool, controller.url, controller.tokens[HOST], clock=time.monotonic)
    buffer = SpoolBuffer(spool, HOST, 5.0, wire=shipper.wire)
    versions = []
    for round_ in range(3):
        buffer.add(gpu_rows(HOST, 1_795_000_000.0 + round_, gpus=4))
        assert buffer.flush() == 4
        (body,) = _drain(shipper)
        versions.append(WIRE_VERSION_2 if is_v2(body) else 1)
        assert shipper.stats.committed == round_ + 1
    assert versions == [1, 2, 2]
    assert spool.pending() == 0
    stored = _stored_gpu_rows(controller)
    assert [(row[1], row[2]) for row in stored] == [(i, f"GPU-{HOST}-{i}") for i in range(4)] * 3
    assert len({row[0] for row in stored}) == 3


class _V1Controller(BaseHTTPRequestHandler):
    """A controller from before version 2: a body that is not JSON is malformed, and its replies say nothing
    of wire versions."""

    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = gzip.decompress(self.rfile.read(int(self.headers["Content-Length"])))
        if body[:1] != b"{":
            self._answer(400, {"error": "body is not JSON", "reason": "malformed"})
            return
        doc = json.loads(body)
        type(self).received.append(doc)
        self._answer(200, {"committed": True, "duplicate": False, "seq": doc["seq"], "commands": []})

    def _answer(self, status: int, doc: dict[str, Any]) -> None:
        text = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def v1_controller() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    handler: type[_V1Controller] = type("Handler", (_V1Controller,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="v1-controller")
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler.received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_controller_that_reads_version_1_only_gets_a_spooled_version_2_batch_as_version_1(
    v1_controller: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, received = v1_controller
    spool = Spool(tmp_path / "spool", 1 << 20)
    shipper = Shipper(spool, url, "token", clock=time.monotonic)
    shipper.wire.controller_reads([1, 2])  # what the controller said before it was downgraded
    buffer = SpoolBuffer(spool, HOST, 5.0, wire=shipper.wire)
    buffer.add(gpu_rows(HOST, time.time(), gpus=3))
    assert buffer.flush() == 3
    (spooled,) = _drain(shipper)
    assert is_v2(spooled), "encoded in the version the controller said it reads"
    (doc,) = received
    assert doc["v"] == 1 and doc["tables"]["gpu_samples"]["gpu_index"] == [0, 1, 2]
    assert spool.pending() == 0 and shipper.stats.committed == 1
    buffer.add(gpu_rows(HOST, time.time(), gpus=2))
    buffer.flush()
    (later,) = _drain(shipper)
    assert not is_v2(later)
    assert [d["seq"] for d in received] == [1, 2]


def test_a_value_refused_in_version_2_is_not_taken_for_a_controller_that_cannot_read_it(
    controller: Controller, tmp_path: Path
) -> None:
    spool = Spool(tmp_path / "spool", 1 << 20)
    shipper = Shipper(spool, controller.url, controller.tokens[HOST], clock=time.monotonic)
    shipper.wire.controller_reads([1, 2])
    bad = batch(HOST, 1)
    bad.tables["gpu_samples"]["host"][0] = "node-b"  # a row of another host: 400, invalid value
    spool.append(encode_v2(bad))
    spool.append(encode_v2(batch(HOST, 2)))
    _drain(shipper)
    assert shipper.stats.committed == 1 and shipper.stats.refused == {400: 1}
    assert shipper.wire.version == WIRE_VERSION_2
    assert shipper.stats.sent == 2, "the refused batch was not sent again as version 1"


class _RecordingSpool(Spool):
    """A spool that also keeps what was appended, to look at."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, 1 << 20)
        self.appended: list[bytes] = []

    def append(self, payload: bytes) -> int:
        self.appended.append(payload)
        return super().append(payload)


def test_a_batch_msgpack_cannot_carry_goes_as_version_1(tmp_path: Path) -> None:
    wire = WireChoice()
    wire.controller_reads([1, 2])
    spool = _RecordingSpool(tmp_path / "spool")
    buffer = SpoolBuffer(spool, HOST, 5.0, wire=wire)
    now = time.time()
    (row,) = gpu_rows(HOST, now, gpus=1)
    assert isinstance(row, GpuSample)
    for variant in (
        row,
        replace(row, name="H100\ud800"),  # a lone surrogate: JSON escapes it, msgpack has none
        replace(row, memory_used_bytes=2**64),  # past uint64 (and int64)
        replace(row, power_watts=math.inf),  # sent as NULL, as version 1 sends it
    ):
        buffer.add([variant])
        assert buffer.flush() == 1, "shipped, never left in the buffer to fail every flush"
    assert buffer.write_errors == 0
    assert [is_v2(body) for body in spool.appended] == [True, False, False, True]
    # Each as a controller reads it: the good one stored, the others refused naming the value.
    reasons: list[Refusal | None] = []
    for body in spool.appended:
        try:
            parse_batch(body, HOST, now=now)
            reasons.append(None)
        except BatchRefused as exc:
            reasons.append(exc.reason)
    assert reasons == [None, Refusal.INVALID_VALUE, Refusal.INVALID_VALUE, None]


def test_an_int_past_a_doubles_range_in_a_float_column_goes_as_a_list_not_an_exception() -> None:
    b = batch(HOST, 1, ts=1_795_000_000.0)
    b.tables["gpu_samples"]["power_watts"] = [10**400, 1.0]
    with pytest.raises(NotInV2):  # past uint64 too: msgpack has no integer that size
        encode_v2(b)
    b.tables["gpu_samples"]["power_watts"] = [2**64 - 1, 1.0]  # a float column may hold any int64/uint64
    v2 = parse_batch(encode_v2(b), HOST, now=1_795_000_000.0)
    assert _plain(v2) == _plain(parse_batch(encode(b), HOST, now=1_795_000_000.0))


def _plain(b: IngestBatch) -> object:
    def normal(values: Any) -> list[Any]:
        listed = values.tolist() if isinstance(values, np.ndarray) else list(values)
        return [None if isinstance(v, float) and math.isnan(v) else v for v in listed]

    tables = {name: {c: normal(v) for c, v in columns.items()} for name, columns in b.tables.items()}
    return (b.key, b.sent_ts, b.rows, tables, b.acks)


@settings(max_examples=40, derandomize=True, deadline=None)
@given(
    power=st.lists(
        st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)), min_size=2, max_size=2
    ),
    names=st.lists(st.one_of(st.none(), st.text(max_size=3)), min_size=2, max_size=2),
    memory=st.lists(st.one_of(st.none(), st.integers(0, 2**63 - 1)), min_size=2, max_size=2),
)
def test_a_version_2_body_read_back_as_version_1_is_the_same_batch(
    power: list[float | None], names: list[str | None], memory: list[int | None]
) -> None:
    now = time.time()
    b = batch(HOST, 1, ts=now)
    gpus = b.tables["gpu_samples"]
    gpus["power_watts"], gpus["name"], gpus["memory_used_bytes"] = power, names, memory  # type: ignore[assignment]
    try:
        expected: object = _plain(parse_batch(encode(b), HOST, now=now))
    except BatchRefused as exc:
        expected = exc.reason
    try:
        got: object = _plain(parse_batch(to_v1(encode_v2(b)), HOST, now=now))
    except BatchRefused as exc:
        got = exc.reason
    assert got == expected


def test_to_v1_refuses_what_is_not_a_version_2_body() -> None:
    with pytest.raises(ValueError, match="version-2"):
        to_v1(encode(batch(HOST, 1)))
    with pytest.raises(ValueError, match="version-2"):
        to_v1(b"not gzip")
