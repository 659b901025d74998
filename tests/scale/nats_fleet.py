"""Real `fleetguard controller --pool` and `fleetguard agent` (transport "nats") processes around a real
nats-server, and the exactly-once checks on a controller's store."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from fleetguard.shipping.nats_connect import NatsLogin, connect
from fleetguard.shipping.wire_advert import read_advert
from tests.scale.natsd import CONTROLLER_USER, NatsServer, free_port

FLEETGUARD = [sys.executable, "-m", "fleetguard"]
TABLES = ("gpu_samples", "nic_samples", "nic_counters", "events")


@dataclass
class PoolController:
    root: Path
    nats: NatsServer
    pool: str
    port: int = 0

    def __post_init__(self) -> None:
        self.port = self.port or free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store(self) -> Path:
        return self.root / f"controller-{self.pool}.duckdb"

    def config(self) -> Path:
        path = self.root / f"controller-{self.pool}.toml"
        path.write_text(
            f'[controller]\nlisten = "127.0.0.1:{self.port}"\n'
            f'tokens_file = "{self.root}/tokens-{self.pool}.json"\n'
            f'nats_url = "{self.nats.url}"\nnats_user = "{CONTROLLER_USER}"\n'
            f'nats_password_file = "{self.nats.password_file(CONTROLLER_USER)}"\n'
            f'[store]\npath = "{self.store}"\n[dashboard]\nenabled = false\n'
        )
        return path

    def start(self) -> subprocess.Popen[bytes]:
        log_path = self.root / f"controller-{self.pool}.log"
        proc = subprocess.Popen(
            [*FLEETGUARD, "controller", "--config", str(self.config()), "--pool", self.pool],
            stdout=log_path.open("ab"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/v1/fleet", timeout=5):
                    return proc
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None:
                    raise RuntimeError(log_path.read_text()) from None
                time.sleep(0.1)  # polling a real controller process: it offers no event to wait on
        raise TimeoutError("controller did not start")

    def wait_for_advert(self, timeout: float = 60) -> list[int]:
        """Until the pool's wire advertisement is there (agents started after it read it on connecting)."""
        deadline = time.monotonic() + timeout
        while (versions := asyncio.run(_read_advert(self.nats, self.pool))) is None:
            assert time.monotonic() < deadline, f"pool {self.pool}: no wire advertisement"
            time.sleep(0.1)  # polling a real controller process: it offers no event to wait on
        return versions

    def wire_batches(self) -> dict[str, float]:
        """fleetguard_controller_nats_batches_by_wire_total of this pool, by wire version."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        prefix = f'fleetguard_controller_nats_batches_by_wire_total{{pool="{self.pool}",wire="'
        return {
            line[len(prefix)]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(prefix)
        }

    def hosts(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/v1/hosts", timeout=10) as response:
            return {h["host"]: h for h in json.loads(response.read())["hosts"]}

    def wait_for_rows(self, expected: dict[str, int], timeout: float = 60) -> None:
        """Until the controller committed at least `expected` rows per host (its consumer caught up)."""
        deadline = time.monotonic() + timeout
        hosts: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                hosts = self.hosts()
                if all(h in hosts and hosts[h]["rows"] >= n for h, n in expected.items()):
                    return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)  # polling a real controller process: it offers no event to wait on
        got = {h: hosts.get(h, {}).get("rows") for h in expected}
        raise TimeoutError(f"pool {self.pool}: expected rows {expected}, controller has {got}")


async def _read_advert(nats: NatsServer, pool: str) -> list[int] | None:
    nc = await connect(NatsLogin([nats.url], CONTROLLER_USER, nats.passwords[CONTROLLER_USER]), "test")
    try:
        return await read_advert(nc.jetstream(), pool)
    finally:
        await nc.close()


def agent_config(root: Path, nats: NatsServer, host: str, pool: str, seed: int) -> Path:
    path = root / f"{host}.toml"
    path.write_text(
        f'[agent]\nhost = "{host}"\nmetrics_port = 0\nsample_interval_seconds = 0.5\n'
        "flush_interval_seconds = 1.0\n"
        f'transport = "nats"\npool = "{pool}"\nnats_url = "{nats.url}"\n'
        f'nats_password_file = "{nats.password_file(host)}"\n'
        f'spool_dir = "{root}/spool-{host}"\n'
        f'[runtime]\nenabled = false\n[store]\npath = "{root}/{host}-unused.duckdb"\n'
        f'[simulate]\nfleet = "1x8"\nseed = {seed}\n'
    )
    return path


def start_agent(
    root: Path, nats: NatsServer, host: str, pool: str, seed: int, duration: float
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            *FLEETGUARD,
            "agent",
            "--config",
            str(agent_config(root, nats, host, pool, seed)),
            "--duration",
            str(duration),
        ],
        stdout=subprocess.PIPE,
        stderr=(root / f"{host}.log").open("ab"),
    )


def summary(proc: subprocess.Popen[bytes], timeout: float = 90) -> dict[str, Any]:
    """The JSON line an agent prints when it stops."""
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    line = [x for x in out.decode().splitlines() if x.startswith("{")][-1]
    doc: dict[str, Any] = json.loads(line)
    return doc


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def scalar(con: duckdb.DuckDBPyConnection, sql: str, *params: object) -> int:
    row = con.execute(sql, list(params)).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def stored_rows(con: duckdb.DuckDBPyConnection, host: str) -> int:
    return sum(scalar(con, f"SELECT count(*) FROM {t} WHERE host = ?", host) for t in TABLES)


def assert_exactly_once(store: Path, written: dict[str, int]) -> None:
    """Every row each host wrote is stored, none twice, every batch 1..N of each incarnation present."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert set(written) == {
            str(h) for (h,) in con.execute("SELECT DISTINCT host FROM ingest_ledger").fetchall()
        }
        assert scalar(con, "SELECT count(*) FROM gpu_samples") == scalar(
            con, "SELECT count(DISTINCT (host, gpu_index, ts)) FROM gpu_samples"
        )
        assert scalar(con, "SELECT count(*) FROM nic_counters") == scalar(
            con, 'SELECT count(DISTINCT (host, device, port, "group", counter, ts)) FROM nic_counters'
        )
        for host, rows in written.items():
            assert stored_rows(con, host) == rows, host
            assert rows == scalar(con, 'SELECT sum("rows") FROM ingest_ledger WHERE host = ?', host)
            for boot_id, seq_hi in con.execute(
                "SELECT boot_id, max(seq_hi) FROM ingest_ledger WHERE host = ? GROUP BY boot_id", [host]
            ).fetchall():
                n = scalar(
                    con,
                    "SELECT sum(seq_hi - seq_lo + 1) FROM ingest_ledger WHERE host = ? AND boot_id = ?",
                    host,
                    boot_id,
                )
                assert n == seq_hi, (host, boot_id)
    finally:
        con.close()
