"""Helpers for controller tests: a controller on loopback (real store, real HTTP), batches to send."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetguard.config import load_config
from fleetguard.controller.process import RunningController, start_controller
from fleetguard.controller.tokens import Role, add_token
from fleetguard.records.telemetry import GpuSample, NicCounterSample
from fleetguard.shipping.wire import OutgoingBatch, columns_by_table, encode


def gpu_rows(host: str, ts: float, gpus: int = 2) -> list[object]:
    return [
        GpuSample(ts=ts, host=host, gpu_index=i, uuid=f"GPU-{host}-{i}", utilization_gpu_percent=50.0 + i)
        for i in range(gpus)
    ]


def counter_rows(host: str, ts: float) -> list[object]:
    return [
        NicCounterSample(
            ts=ts,
            host=host,
            device="mlx5_0",
            port=1,
            counter="port_xmit_data",
            group="counters",
            value=2**63 + 5,
            delta=10,
            rate_per_second=10.0,
        )
    ]


def batch(host: str, seq: int, *, boot_id: str = "boot-1", ts: float | None = None) -> OutgoingBatch:
    now = time.time() if ts is None else ts
    records = [*gpu_rows(host, now), *counter_rows(host, now)]
    return OutgoingBatch(host, boot_id, seq, now, 5.0, "test", columns_by_table(records))


@dataclass
class Reply:
    status: int
    doc: Any
    headers: dict[str, str]


@dataclass
class Controller:
    running: RunningController
    tokens: dict[str, str]
    config_overrides: dict[str, Any]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.running.port}"

    def post(self, path: str, body: bytes, token: str | None, encoding: str = "gzip") -> Reply:
        headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        reply = _send(urllib.request.Request(self.url + path, data=body, method="POST", headers=headers))
        if path == "/v1/ingest":
            self.settle()
        return reply

    def settle(self) -> None:
        """Wait until every batch answered so far is committed. Answered from the ingest journal, a batch's
        rows reach the store just after its 200; the tests read them next (the helpers' reads wait too)."""
        assert self.running.writer.wait_committed(30), "answered batches not committed within 30 s"

    def ship(self, b: OutgoingBatch, token: str | None = None) -> Reply:
        return self.post("/v1/ingest", encode(b), self.tokens[b.host] if token is None else token)

    def get(self, path: str, token: str | None = None) -> Reply:
        self.settle()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return _send(urllib.request.Request(self.url + path, headers=headers))

    def metrics(self) -> str:
        self.settle()
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as response:
            return str(response.read().decode())

    def restart(self) -> None:
        self.running.stop()
        self.running = start_controller(load_config(overrides=self.config_overrides))


def _send(request: urllib.request.Request) -> Reply:
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read()
            return Reply(
                response.status, json.loads(body) if body[:1] == b"{" else body, dict(response.headers)
            )
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return Reply(exc.code, json.loads(body) if body[:1] == b"{" else body, dict(exc.headers))


def metric_value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or (line.startswith(name + "{") and line.split(" ")[0] == name):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def start_test_controller(
    tmp_path: Path, hosts: tuple[str, ...] = ("node-a", "node-b"), *, extra: dict[str, Any] | None = None
) -> Controller:
    tokens_file = tmp_path / "tokens.json"
    tokens = {h: add_token(tokens_file, h) for h in hosts}
    tokens["operator"] = add_token(tokens_file, "*", Role.OPERATOR)
    overrides = {
        "store.path": str(tmp_path / "controller.duckdb"),
        "controller.listen": "127.0.0.1:0",
        "controller.tokens_file": str(tokens_file),
        "controller.max_body_bytes": 256 * 1024,
        "dashboard.enabled": False,  # tests/controller/test_controller_dashboard.py serves it
        **(extra or {}),
    }
    return Controller(start_controller(load_config(overrides=overrides)), tokens, overrides)
