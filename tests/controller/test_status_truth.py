"""Issue 20's done-when: a controller with agents (real processes on loopback) and `fleetguard up` are asked
the same question three ways — `fleetguard status --json`, `/v1/fleet` + `/v1/hosts`, and the dashboard's
fleet model — and give one answer: the same hosts, the same health per host, the same open incidents, the
same breaker. `export` from the running controller writes every table, incidents included; `breaker
status`, `alerts status` and `policy replay` work while the store is held; a wrong URL is one line."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest

from dashboard.snapshot import build_fleet_model
from fleetguard.store.export import fetch_snapshot
from fleetguard.store.holder import read_holder
from fleetguard.store.migrations import migrate
from tests.controller.fleet_processes import FLEETGUARD, Fleet, free_port, stop

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SILENT_AFTER = 8.0  # controller.silent_after_seconds: a stopped agent turns silent within the test
HEAD_START = 45.0  # simulate.head_start_seconds: incidents and kernel-log events from the first samples
# Tables the export from the running controller must write with rows (what the fleet has stored by then).
EXPORT_CHECKED = ("gpu_samples", "events", "findings", "fleet_hosts", "incidents", "incident_evidence")


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FLEETGUARD, *args], capture_output=True, text=True, timeout=timeout)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def _api_answer(base: str) -> dict[str, Any]:
    """What must agree: host -> (health, reason), open incident ids, breaker."""
    fleet = _get(base + "/v1/fleet")
    hosts = _get(base + "/v1/hosts")["hosts"]
    return _answer(fleet, hosts)


def _answer(fleet: dict[str, Any], hosts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "hosts": {h["host"]: (h["health"], _steady(h["reason"]), h["open_incidents"]) for h in hosts},
        "open_incidents": fleet["open_incidents"],
        "worst": [i["incident_id"] for i in fleet["worst_incidents"]],
        "breaker": fleet["breaker"]["tripped"],
        "health": fleet["health"],
    }


def _steady(reason: str) -> str:
    """A silent host's reason counts its seconds of silence: the same reason a second later."""
    return re.sub(r"^no data for \d+ s", "no data for N s", reason)


def _model_answer(base: str, now: float, workdir: Path) -> dict[str, Any]:
    """The dashboard's fleet model (dashboard.snapshot.build_fleet_model, what its pages draw) over a
    consistent snapshot of the running process's store, fetched through its read API."""
    snap = workdir / f"snap-{time.monotonic_ns()}"
    fetched = fetch_snapshot(base, None, snap)
    con = duckdb.connect(":memory:")
    try:
        migrate(con)
        for name in fetched:
            con.execute(f"DROP TABLE IF EXISTS {name}")
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{snap / name}/*.parquet')")
        model = build_fleet_model(con, now, 0.5, SILENT_AFTER)
        breaker = con.execute("SELECT coalesce(bool_or(tripped), false) FROM breaker_state").fetchone()
    finally:
        con.close()
    open_ids = [i.incident_id for h in model.hosts for i in h.incidents]
    return {
        "hosts": {h.host: (h.health.value, _steady(h.reason), len(h.incidents)) for h in model.hosts},
        "open_incidents": len(open_ids),
        "breaker": bool(breaker and breaker[0]),
    }


def _metrics_health(base: str) -> dict[str, str]:
    """host -> state from /metrics' fleetguard_controller_host_health (the state whose series reads 1)."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as response:
        text = response.read().decode()
    pattern = re.compile(r'^fleetguard_controller_host_health\{host="([^"]+)",state="(\w+)"\} 1$', re.M)
    return dict(pattern.findall(text))


def _settled(base: str, attempts: int = 20) -> dict[str, Any]:
    """Two reads of the API a moment apart that agree: nothing changed in between (the incident engine
    runs each round, so a read in the middle of a change is retried rather than compared)."""
    before = _api_answer(base)
    for _ in range(attempts):
        time.sleep(0.5)
        after = _api_answer(base)
        if after == before:
            return after
        before = after
    raise AssertionError("the fleet never held still for half a second")


def _agree(base: str, status_args: list[str], workdir: Path) -> dict[str, Any]:
    """status --json, the read API and the dashboard's model, read while nothing changes."""
    for _ in range(10):
        api = _settled(base)
        result = _cli("status", *status_args, "--json")
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout)
        status = _answer(doc["fleet"], doc["hosts"])
        model = _model_answer(base, float(doc["fleet"]["generated_ts"]), workdir)
        if _api_answer(base) != api or status != api:
            continue  # it moved while we read: read again
        assert model == {k: api[k] for k in ("hosts", "open_incidents", "breaker")}
        assert _metrics_health(base) == {host: h[0] for host, h in api["hosts"].items()}
        # And the person's view says the same: each host with its health, the worst incident named.
        text = _cli("status", *status_args)
        assert text.returncode == 0, text.stderr
        if _api_answer(base) != api:
            continue  # an incident moved between the two reads (a loaded machine): read both again
        for host, (health, _reason, _n) in api["hosts"].items():
            assert any(host in line and health in line for line in text.stdout.splitlines()), text.stdout
        assert f"incidents {api['open_incidents']} open" in text.stdout
        assert isinstance(doc, dict)
        return doc
    raise AssertionError("status and the read API never agreed on a quiet fleet")


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path, free_port())
    try:
        yield f
    finally:
        f.cleanup()


def test_status_api_and_dashboard_agree_on_a_controller_and_export_writes_every_table(
    fleet: Fleet, tmp_path: Path
) -> None:
    config = fleet.write_controller_config()
    text = config.read_text().replace(
        "[controller]\n", f"[controller]\nsilent_after_seconds = {SILENT_AFTER}\n"
    )
    config.write_text(text)
    controller = _start_controller_with(fleet, config)

    # A head start: the thermal, ECC and XID faults (20-40 s into the script) are due at once.
    a = fleet.start_agent("host-a", seed=1, duration=300, head_start=HEAD_START)
    b = fleet.start_agent("host-b", seed=2, duration=300, head_start=HEAD_START)
    gone = fleet.start_agent("host-gone", seed=3, duration=1, head_start=HEAD_START)
    fleet.wait_for_hosts({"host-a", "host-b", "host-gone"})
    gone.communicate(timeout=60)
    # Faults of the simulated fleet open incidents; host-gone turns silent.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        doc = _get(fleet.url + "/v1/fleet")
        if doc["open_incidents"] > 0 and doc["hosts_silent"] == 1:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"no incident or no silent host: {doc}")
    doc = _agree(fleet.url, ["--controller", fleet.url], tmp_path)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert hosts["host-gone"]["health"] == "silent"
    assert hosts["host-gone"]["reason"].startswith("no data for")
    assert doc["fleet"]["open_incidents"] > 0  # not "open findings 0" beside open incidents

    # The store is held: the commands name the controller and ask it.
    locked = _cli("breaker", "status", "--config", str(config))
    assert locked.returncode == 0, locked.stderr
    assert locked.stdout.startswith(("closed", "OPEN"))
    alerts = _cli("alerts", "status", "--config", str(config))
    assert alerts.returncode == 0 and "active silence" in alerts.stdout, alerts.stderr
    holder = read_holder(str(fleet.store))
    assert holder is not None and holder.kind == "controller" and holder.url == fleet.url

    # The simulated fleets' kernel-log faults reach the store a flush or two in, and the findings (host-gone's
    # silence) the controller's next check after that (later on a loaded machine): the export below must
    # find every table it is checked against holding rows, asked of the running controller.
    deadline = time.monotonic() + 120
    while empty := [t for t in EXPORT_CHECKED if _stored(config, t) == 0]:
        assert time.monotonic() < deadline, f"nothing stored in {empty} in 120 s"
        time.sleep(1.0)

    out = tmp_path / "export"
    export_started = time.time()
    exported = _cli("export", "--parquet", str(out), "--config", str(config))
    assert exported.returncode == 0, exported.stderr
    rows = {
        line.split()[0]: int(line.split()[1])
        for line in exported.stdout.splitlines()[1:]
        if len(line.split()) == 2 and line.split()[1].isdigit()
    }
    for table in EXPORT_CHECKED:
        assert rows.get(table, 0) > 0, (table, exported.stdout)
    for table, n in rows.items():
        files = list((out / table).rglob("*.parquet"))
        assert files, table
        assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == n, table

    for proc in (a, b):
        stop(proc)
    stop(controller)
    # Every table the store has rows in (as of the export: nothing ships any more, and the controller's
    # own writers only add) was written.
    with duckdb.connect(str(fleet.store), read_only=True) as con:
        tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        counted = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}  # type: ignore[index]
        # The controller's repair pass records what it did after each incident round, so the ledger may have
        # gained its first rows after the snapshot: only rows requested before the export began must be in it.
        before_export = "requested_at < make_timestamp(CAST(? * 1e6 AS BIGINT))"
        ledger_before = con.execute(
            f"SELECT count(*) FROM incident_actions WHERE {before_export}", [export_started]
        ).fetchone()
    missing = [t for t, n in counted.items() if n and t not in rows and t != "fleetguard_meta"]
    # Written by the controller's own loops, which go on after the export's snapshot: the rollups, the
    # commands it queues and the diagnosis rounds' pending faults (replaced whole each round) may hold their
    # first rows only after it.
    late = {
        "host_commands",
        "gpu_rollup_1h",
        "nic_rollup_1h",
        "gpu_rollup_1m",
        "nic_rollup_1m",
        "diagnosis_pending",
    }
    if "incident_actions" in missing and ledger_before is not None and ledger_before[0] == 0:
        late.add("incident_actions")
    assert not [t for t in missing if t not in late], (missing, rows)
    assert read_holder(str(fleet.store)) is None  # withdrawn at stop


def _stored(config: Path, table: str) -> int:
    query = _cli("query", f"SELECT count(*) AS n FROM {table}", "--config", str(config), "--format", "json")
    assert query.returncode == 0, query.stderr
    return int(json.loads(query.stdout)[0]["n"])


def _start_controller_with(fleet: Fleet, config: Path) -> subprocess.Popen[bytes]:
    log = (fleet.root / "controller.log").open("ab")
    proc = subprocess.Popen([*FLEETGUARD, "controller", "--config", str(config)], stdout=log, stderr=log)
    fleet.started.append(proc)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            _get(fleet.url + "/v1/fleet")
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError((fleet.root / "controller.log").read_text()) from None
            time.sleep(0.1)
    raise TimeoutError("controller did not start")


def test_up_serves_the_read_api_and_the_commands_ask_it(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "up.toml"
    store = tmp_path / "up.duckdb"
    config.write_text(
        f"[agent]\nmetrics_port = 0\nsample_interval_seconds = 0.5\nflush_interval_seconds = 1.0\n"
        f'[controller]\nlisten = "127.0.0.1:{port}"\ntokens_file = "{tmp_path}/tokens.json"\n'
        f'[store]\npath = "{store}"\n[dashboard]\nenabled = false\n[runtime]\nenabled = false\n'
        f'[simulate]\nfleet = "2x4"\nseed = 5\nhead_start_seconds = {HEAD_START}\n'
    )
    log = (tmp_path / "up.log").open("ab")
    up = subprocess.Popen(
        [*FLEETGUARD, "up", "--config", str(config), "--no-predict", "--duration", "300"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180  # a wait, not a target: up starts slowly on a loaded machine
        doc: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                doc = _get(base + "/v1/fleet")
                if doc["hosts"] == 2 and doc["open_incidents"] > 0:
                    break
            except OSError:
                assert up.poll() is None, (tmp_path / "up.log").read_text()
            time.sleep(0.5)
        else:
            raise AssertionError(f"up never served a fleet with incidents: {doc}")
        # The default URL of `status` is controller.listen: the same config finds `up`.
        _agree(base, ["--config", str(config)], tmp_path)
        holder = read_holder(str(store))
        assert holder is not None and holder.kind == "up" and holder.url == base
        # `up` is not a controller agents may ship to.
        request = urllib.request.Request(base + "/v1/ingest", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 404

        assert _cli("breaker", "status", "--config", str(config)).returncode == 0
        replay = _cli("policy", "replay", "--config", str(config), "--since", "1h", "--step", "5")
        assert replay.returncode == 0, replay.stderr
        assert "incidents" in replay.stdout and "{" not in replay.stdout
        query = _cli(
            "query", "SELECT count(*) AS n FROM incidents", "--config", str(config), "--format", "json"
        )
        assert query.returncode == 0, query.stderr
        assert json.loads(query.stdout)[0]["n"] >= 1
        with tempfile.TemporaryDirectory(dir=tmp_path) as out:
            exported = _cli("export", "--parquet", out, "--config", str(config))
            assert exported.returncode == 0, exported.stderr
            assert (Path(out) / "incidents" / "incidents.parquet").exists()
    finally:
        stop(up)
    assert read_holder(str(store)) is None


def test_status_pointed_at_something_else_says_so_in_one_line(tmp_path: Path) -> None:
    """The dashboard's URL (HTML), a port nobody listens on: one line, no traceback."""
    import http.server
    import threading

    class Html(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!DOCTYPE html><html>dash</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Html)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        result = _cli("status", "--controller", f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert result.returncode == 1
    assert "does not serve fleetguard's read API" in result.stderr and "dashboard" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1

    nobody = _cli("status", "--controller", f"http://127.0.0.1:{free_port()}")
    assert nobody.returncode == 1 and "cannot reach" in nobody.stderr
    assert len(nobody.stderr.strip().splitlines()) == 1
