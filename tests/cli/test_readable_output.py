"""The operator commands read right in a terminal and parse in a script: a table with a header or a sentence
for people, `--json` for programs, never a Python repr or a traceback. Run as real `fleetguard` processes
over a real store whose incidents were opened by the real incident engine (tests/dashboard/fleet_store.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from collectors.protocol import Collector
from collectors.simulated import EccRampThenDbe, SimulatedFleet, SimulatedGpuCollector, SimulatedKmsgCollector
from fleetguard.records.telemetry import Batch
from fleetguard.store import Store
from tests.dashboard.fleet_store import build_fleet_store

FLEETGUARD = str(Path(sys.executable).with_name("fleetguard"))


@pytest.fixture(scope="module")
def fleet_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "fleet.duckdb"
    build_fleet_store(path)
    return path


@pytest.fixture(scope="module")
def unalerted_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fleet whose GPU failed (ECC ramp, then XID 48), its incidents opened by the real incident engine
    with no webhook configured: nothing is in the alert outbox."""
    from fleetguard.incidents.feed import StoreFeed
    from fleetguard.incidents.service import IncidentService
    from fleetguard.settings.policy_files import load_policy

    path = tmp_path_factory.mktemp("unalerted") / "fleet.duckdb"
    start, end = 1_790_000_000.0, 1_790_000_200.0
    fleet = SimulatedFleet(
        1,
        2,
        seed=3,
        faults=[EccRampThenDbe(host=0, gpu=1, start_seconds=20, ramp_seconds=60)],
        start_ts=start,
    )
    collectors: list[Collector] = [SimulatedGpuCollector(fleet), SimulatedKmsgCollector(fleet)]
    with Store.open(path) as store:
        t = start
        while t <= end:
            batch = Batch()
            for c in collectors:
                batch.extend(c.collect(t))
            store.append([*batch.gpu_samples, *batch.events])
            t += 5.0
        service = IncidentService.open(store.cursor(), load_policy(), start, webhooks=[])
        service.round(StoreFeed.open(store.cursor()).read(end), end)
    return path


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGUARD_")}
    return subprocess.run([FLEETGUARD, *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def readable(result: subprocess.CompletedProcess[str]) -> str:
    """The output of a command that succeeded, with no repr of a dict or a list and no traceback."""
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "{'" not in result.stdout and "['" not in result.stdout, result.stdout
    return result.stdout


def _incidents(store: Path) -> int:
    with duckdb.connect(str(store), read_only=True) as con:
        row = con.execute("SELECT count(*) FROM incidents").fetchone()
    assert row is not None
    return int(row[0])


def test_alerts_status_says_why_no_alert_was_sent_after_incidents_opened(
    unalerted_store: Path, tmp_path: Path
) -> None:
    opened = _incidents(unalerted_store)
    assert opened > 0
    text = readable(run("alerts", "status", "--store", str(unalerted_store), cwd=tmp_path))
    first = text.splitlines()[0]
    assert "no alerts yet" not in text
    assert first.startswith(f"no alert sent: {opened} incident(s) opened")
    assert "[[alerts.webhooks]]" in first
    as_json = run("alerts", "status", "--json", "--store", str(unalerted_store), cwd=tmp_path)
    doc = json.loads(readable(as_json))
    assert doc["incidents_opened"] == opened and doc["outbox"] == []


def test_alerts_status_is_a_table_with_a_header(fleet_store: Path, tmp_path: Path) -> None:
    text = readable(run("alerts", "status", "--store", str(fleet_store), cwd=tmp_path))
    lines = text.splitlines()
    assert lines[0].split() == ["ENDPOINT", "STATUS", "ALERTS"]
    doc = json.loads(readable(run("alerts", "status", "--json", "--store", str(fleet_store), cwd=tmp_path)))
    rows = [(r["endpoint"], r["status"], str(r["count"])) for r in doc["outbox"]]
    assert [tuple(line.split()) for line in lines[1 : 1 + len(rows)]] == rows


def test_alerts_replay_refuses_an_endpoint_the_config_does_not_name(
    fleet_store: Path, tmp_path: Path
) -> None:
    result = run("alerts", "replay", "--endpoint", "nope", "--store", str(fleet_store), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "no webhook named 'nope'" in result.stderr and "--endpoint" in result.stderr
    assert "Traceback" not in result.stderr


def test_breaker_status_prints_a_sentence_or_json(fleet_store: Path, tmp_path: Path) -> None:
    text = readable(run("breaker", "status", "--store", str(fleet_store), cwd=tmp_path))
    assert text.startswith(("closed: repairs go ahead", "OPEN since"))
    doc = json.loads(readable(run("breaker", "status", "--json", "--store", str(fleet_store), cwd=tmp_path)))
    assert set(doc) == {"tripped", "since_ts", "reason", "headroom"}
    assert text.startswith("OPEN") == doc["tripped"]


def test_export_prints_a_table_with_a_header_or_json(fleet_store: Path, tmp_path: Path) -> None:
    text = readable(
        run("export", "--parquet", str(tmp_path / "a"), "--store", str(fleet_store), cwd=tmp_path)
    )
    lines = text.splitlines()
    assert lines[0].split() == ["TABLE", "ROWS"]
    table = {line.split()[0]: int(line.split()[1]) for line in lines[1:]}
    doc = json.loads(
        readable(
            run(
                "export",
                "--parquet",
                str(tmp_path / "b"),
                "--json",
                "--store",
                str(fleet_store),
                cwd=tmp_path,
            )
        )
    )
    assert doc["rows"] == table and table["incidents"] == _incidents(fleet_store)


def test_collect_once_prints_a_summary_not_a_repr(tmp_path: Path) -> None:
    text = readable(run("collect", "--once", "--simulate", "1x2", "--no-nvml", cwd=tmp_path))
    assert text.strip()
    doc = json.loads(
        readable(run("collect", "--once", "--json", "--simulate", "1x2", "--no-nvml", cwd=tmp_path))
    )
    assert isinstance(doc, dict)


def test_policy_replay_prints_counts_as_words_and_json_for_scripts(fleet_store: Path, tmp_path: Path) -> None:
    args = ("policy", "replay", "--store", str(fleet_store), "--since", "1h", "--step", "5")
    text = readable(run(*args, cwd=tmp_path))
    assert "incidents" in text and "{" not in text
    assert isinstance(json.loads(readable(run(*args, "--json", cwd=tmp_path))), dict)


def _agent_refusal(
    tmp_path: Path, prefix: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    argv = [*prefix, FLEETGUARD, "agent", "--simulate", "1x1", "--duration", "5"]
    argv += ["--store", str(tmp_path / "agent.duckdb"), "--metrics-port", "0", "--no-runtime"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, **env})


def test_an_agent_named_like_the_fleet_wide_incidents_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    named = _agent_refusal(tmp_path, [], {"FLEETGUARD_AGENT_HOST": "fleet"})
    assert named.returncode == 1
    assert named.stderr.strip().splitlines() == [
        "Error: invalid configuration: agent.host: host name 'fleet' is reserved for fleet-wide incidents; "
        "give this host another name"
    ]
    assert not (tmp_path / "agent.duckdb").exists()


def _own_uts_namespace() -> bool:
    """Whether this process may give a child a hostname of its own (root, util-linux, CAP_SYS_ADMIN)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--uts", "true"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _own_uts_namespace(), reason="a hostname of its own needs a UTS namespace (root)")
def test_an_agent_on_a_machine_whose_hostname_is_reserved_says_so_and_how_to_name_it(tmp_path: Path) -> None:
    # Its own UTS namespace: the machine's hostname is "fleet" for this agent alone.
    shell = ["unshare", "--uts", "sh", "-c", 'hostname fleet && exec "$@"', "sh"]
    hostname = _agent_refusal(tmp_path, shell, {})
    assert hostname.returncode == 1, hostname.stderr
    (line,) = hostname.stderr.strip().splitlines()
    assert line.startswith("Error: invalid configuration: this machine's hostname (agent.host): ")
    assert line.endswith("'fleet' is reserved for fleet-wide incidents; give this host another name")
    # with a name of its own the same machine's agent starts
    ok = _agent_refusal(tmp_path, shell, {"FLEETGUARD_AGENT_HOST": "gpu-017"})
    assert ok.returncode == 0, ok.stderr


@pytest.mark.skipif(not _own_uts_namespace(), reason="a hostname of its own needs a UTS namespace (root)")
def test_up_on_a_machine_whose_hostname_is_reserved_refuses_to_start_too(tmp_path: Path) -> None:
    """`up` is an agent too (its rows, runtime findings and repairs go by this host's name): on a machine
    called "fleet" every batch of its own would be refused at its in-process ingest and dropped, flush after
    flush, while the banner said all was well."""
    shell = ["unshare", "--uts", "sh", "-c", 'hostname fleet && exec "$@"', "sh"]
    argv = [*shell, FLEETGUARD, "up", "--simulate", "1x1", "--duration", "5", "--no-predict", "--no-runtime"]
    argv += ["--store", str(tmp_path / "up.duckdb"), "--metrics-port", "0", "--dashboard-port", "0"]
    env = {
        **os.environ,
        "FLEETGUARD_DASHBOARD_ENABLED": "false",
        "FLEETGUARD_CONTROLLER_LISTEN": "127.0.0.1:0",
    }
    up = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert up.returncode == 1, up.stdout + up.stderr
    (line,) = up.stderr.strip().splitlines()
    assert line.startswith("Error: invalid configuration: this machine's hostname (agent.host): ")
    assert line.endswith("'fleet' is reserved for fleet-wide incidents; give this host another name")
    assert not (tmp_path / "up.duckdb").exists()
