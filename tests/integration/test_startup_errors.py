"""Every start-up failure an operator can cause is one line naming the key, path or port, and a non-zero exit:
the real `fleetguard` command in a subprocess, against real ports and real (broken) DuckDB files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

pytestmark = pytest.mark.integration

FLEETGUARD = str(Path(sys.executable).with_name("fleetguard"))
DAEMONS = {
    "agent": ["agent", "--simulate", "1x2", "--metrics-port", "0", "--duration", "30"],
    "up": ["up", "--simulate", "1x2", "--no-predict", "--metrics-port", "0", "--duration", "30"],
}
# Commands that read a store given with --store (the offline ones read it, the daemons write it).
STORE_READERS = {
    "export": lambda tmp: ["export", "--parquet", str(tmp / "parquet")],
    "train": lambda tmp: ["train", "--out", str(tmp / "model")],
    "evaluate": lambda tmp: ["evaluate"],
}


def run(args: list[str], tmp: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGUARD_")}
    base |= {
        "FLEETGUARD_COLLECTORS_KMSG_STATE_PATH": str(tmp / "kmsg.seq"),
        "FLEETGUARD_RUNTIME_PORT": "0",
        "FLEETGUARD_CONTROLLER_LISTEN": "127.0.0.1:0",  # up's read API: any free port
        "FLEETGUARD_DASHBOARD_PORT": "0",  # a taken dashboard port stops `up`: any free one
    }
    return subprocess.run(
        [FLEETGUARD, *args], capture_output=True, text=True, timeout=120, env=base | (env or {}), cwd=tmp
    )


def one_line_failure(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The failure's only line; it names every needle (key, path, port)."""
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode != 0, result
    assert len(lines) == 1, lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in lines[0]
    return lines[0]


@pytest.fixture
def model_dir(demo_model: Path) -> Path:
    """A real model directory, for `predict` (which reads the model before the store): the session's."""
    return demo_model


def test_predict_with_a_corrupt_or_locked_store(
    tmp_path: Path, model_dir: Path, corrupt_store: Path, locked_store: Path
) -> None:
    for store, why in ((corrupt_store, "not a valid DuckDB database file"), (locked_store, "lock")):
        result = run(["predict", "--model", str(model_dir), "--store", str(store)], tmp_path)
        one_line_failure(result, str(store), why)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.fixture
def corrupt_store(tmp_path: Path) -> Path:
    path = tmp_path / "corrupt.duckdb"
    path.write_bytes(b"not a DuckDB file\n" * 4096)
    return path


@pytest.fixture
def locked_store(tmp_path: Path) -> Iterator[Path]:
    """A store a writer (this process) holds open: DuckDB locks the file against other processes."""
    path = tmp_path / "locked.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (x INTEGER)")
    yield path
    con.close()


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_metrics_port_in_use(tmp_path: Path, busy_port: int, daemon: str) -> None:
    args = [*DAEMONS[daemon], "--metrics-port", str(busy_port), "--store", str(tmp_path / "s.duckdb")]
    line = one_line_failure(run(args, tmp_path), "agent.metrics_port", str(busy_port), "--metrics-port")
    assert "Address already in use" in line


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_a_metrics_address_not_on_this_host(tmp_path: Path, daemon: str) -> None:
    env = {"FLEETGUARD_AGENT_METRICS_ADDRESS": "192.0.2.1"}  # TEST-NET-1: on no interface here
    result = run([*DAEMONS[daemon], "--store", str(tmp_path / "s.duckdb")], tmp_path, env)
    one_line_failure(result, "agent.metrics_address", "192.0.2.1")


def test_a_metrics_address_that_is_not_an_address(tmp_path: Path) -> None:
    env = {"FLEETGUARD_AGENT_METRICS_ADDRESS": "metrics.example"}
    result = run([*DAEMONS["agent"], "--store", str(tmp_path / "s.duckdb")], tmp_path, env)
    one_line_failure(result, "agent.metrics_address", "metrics.example")


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_a_corrupt_store_for_a_daemon(tmp_path: Path, corrupt_store: Path, daemon: str) -> None:
    result = run([*DAEMONS[daemon], "--store", str(corrupt_store)], tmp_path)
    one_line_failure(result, "store.path", str(corrupt_store), "not a valid DuckDB database file")


@pytest.mark.parametrize("command", sorted(STORE_READERS))
def test_a_corrupt_store_for_a_reader(tmp_path: Path, corrupt_store: Path, command: str) -> None:
    result = run([*STORE_READERS[command](tmp_path), "--store", str(corrupt_store)], tmp_path)
    one_line_failure(result, str(corrupt_store), "not a valid DuckDB database file")


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_a_locked_store_for_a_daemon(tmp_path: Path, locked_store: Path, daemon: str) -> None:
    result = run([*DAEMONS[daemon], "--store", str(locked_store)], tmp_path)
    one_line_failure(result, "store.path", str(locked_store), "open for writing by another process")


@pytest.mark.parametrize("command", sorted(STORE_READERS))
def test_a_locked_store_for_a_reader(tmp_path: Path, locked_store: Path, command: str) -> None:
    result = run([*STORE_READERS[command](tmp_path), "--store", str(locked_store)], tmp_path)
    line = one_line_failure(result, str(locked_store))
    assert "lock" in line.lower()


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_a_store_whose_directory_cannot_be_made(tmp_path: Path, daemon: str) -> None:
    (tmp_path / "a-file").write_text("")
    store = tmp_path / "a-file" / "fleet.duckdb"
    result = run([*DAEMONS[daemon], "--store", str(store)], tmp_path)
    one_line_failure(result, "store.path", str(store), f"{store.parent} exists and is not a directory")


# Runs the CLI as uid 65534. The interpreter lives under /root (not readable by that user), so everything the
# agent imports is imported first, as root; then the process drops to uid 65534 and runs the command.
AS_NOBODY = """
import os, sys
import duckdb, numpy
import fleetguard.agent.daemon, fleetguard.agent.sources
import fleetguard.runtime.extension, fleetguard.runtime.service, collectors.simulated, fleetguard.cli
from fleetguard.cli import main
os.setgroups([]); os.setgid(65534); os.setuid(65534)
sys.argv = ["fleetguard", *sys.argv[1:]]
main()
"""


def test_export_to_a_directory_that_cannot_be_made(tmp_path: Path) -> None:
    from fleetguard.store import Store

    Store.open(tmp_path / "s.duckdb").close()
    (tmp_path / "a-file").write_text("")
    target = tmp_path / "a-file" / "parquet"
    result = run(["export", "--parquet", str(target), "--store", str(tmp_path / "s.duckdb")], tmp_path)
    one_line_failure(result, "--parquet", str(target))


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to uid 65534, which needs root")
def test_a_store_in_a_directory_the_user_cannot_write(tmp_path: Path) -> None:
    """The agent run as an unprivileged user against a store in root's directory."""
    store_dir = tmp_path / "root-only"
    store_dir.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)  # uid 65534 may reach the directory, not write it
    store = store_dir / "fleet.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGUARD_")} | {
        "FLEETGUARD_COLLECTORS_KMSG_STATE_PATH": "/nonexistent/kmsg.seq",
        "FLEETGUARD_RUNTIME_PORT": "0",
        "FLEETGUARD_CONTROLLER_LISTEN": "127.0.0.1:0",  # up's read API: any free port
        "FLEETGUARD_DASHBOARD_PORT": "0",  # a taken dashboard port stops `up`: any free one
    }
    result = subprocess.run(
        [sys.executable, "-c", AS_NOBODY, *DAEMONS["agent"], "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd="/",
    )
    line = one_line_failure(result, "store.path", str(store))
    assert "Permission denied" in line


def test_failure_xids_that_are_not_numbers(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    duckdb.connect(str(store)).close()
    result = run(
        ["train", "--store", str(store), "--out", str(tmp_path / "m"), "--failure-xids", "abc"], tmp_path
    )
    one_line_failure(result, "--failure-xids", "abc")


@pytest.mark.parametrize("daemon", sorted(DAEMONS))
def test_the_runtime_port_in_use_is_fatal(tmp_path: Path, busy_port: int, daemon: str) -> None:
    env = {"FLEETGUARD_RUNTIME_PORT": str(busy_port)}
    result = run([*DAEMONS[daemon], "--store", str(tmp_path / "s.duckdb")], tmp_path, env)
    line = one_line_failure(result, "runtime.port", str(busy_port), "runtime.enabled = false")
    assert "Address already in use" in line


def test_without_the_runtime_a_busy_runtime_port_does_not_matter(tmp_path: Path, busy_port: int) -> None:
    env = {"FLEETGUARD_RUNTIME_PORT": str(busy_port), "FLEETGUARD_RUNTIME_ENABLED": "false"}
    args = ["agent", "--simulate", "1x2", "--metrics-port", "0", "--duration", "1"]
    result = run([*args, "--store", str(tmp_path / "s.duckdb")], tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert "training ranks" not in result.stderr  # no banner naming a port nobody serves


def test_the_banner_names_the_runtime_port_actually_bound(tmp_path: Path) -> None:
    args = ["agent", "--simulate", "1x2", "--metrics-port", "0", "--duration", "1"]
    result = run([*args, "--store", str(tmp_path / "s.duckdb")], tmp_path)  # runtime.port 0: any free
    assert result.returncode == 0, result.stderr
    banner = next(line for line in result.stderr.splitlines() if "training ranks report to" in line)
    port = int(banner.rsplit(":", 1)[1])
    assert port != 0


def test_up_with_its_dashboard_port_taken_names_the_key_and_the_flag(tmp_path: Path, busy_port: int) -> None:
    args = [*DAEMONS["up"], "--dashboard-port", str(busy_port), "--store", str(tmp_path / "s.duckdb")]
    line = one_line_failure(run(args, tmp_path), "dashboard.port", str(busy_port), "--dashboard-port")
    assert "Address already in use" in line


def test_the_controller_with_its_dashboard_port_taken_names_the_key_and_the_flag(
    tmp_path: Path, busy_port: int
) -> None:
    args = ["controller", "--listen", "127.0.0.1:0", "--dashboard-port", str(busy_port), "--duration", "30"]
    env = {"FLEETGUARD_CONTROLLER_TOKENS_FILE": str(tmp_path / "tokens.json")}
    result = run([*args, "--store", str(tmp_path / "c.duckdb")], tmp_path, env)
    line = one_line_failure(result, "dashboard.port", str(busy_port), "--dashboard-port")
    assert "Address already in use" in line


def test_the_banners_print_the_address_bound_and_the_port_it_got(tmp_path: Path) -> None:
    """Bound to 0.0.0.0 (agent.metrics_address's default), /metrics is not shown as 127.0.0.1; asked for
    port 0, the banner names the port the system gave."""
    args = ["agent", "--simulate", "1x2", "--metrics-port", "0", "--duration", "1"]
    agent = run([*args, "--store", str(tmp_path / "a.duckdb")], tmp_path)
    assert agent.returncode == 0, agent.stderr
    banner = next(line for line in agent.stderr.splitlines() if "/metrics at" in line)
    assert "http://0.0.0.0:" in banner and "every interface" in banner and ":0/" not in banner
    args = ["controller", "--listen", "127.0.0.1:0", "--dashboard-port", "0", "--duration", "1"]
    env = {"FLEETGUARD_CONTROLLER_TOKENS_FILE": str(tmp_path / "tokens.json")}
    controller = run([*args, "--store", str(tmp_path / "c.duckdb")], tmp_path, env)
    assert controller.returncode == 0, controller.stderr
    first, dashboard = controller.stdout.splitlines()[:2]
    assert first.startswith("fleetguard controller: http://127.0.0.1:") and ":0/" not in first, first
    assert dashboard.startswith("  dashboard http://127.0.0.1:") and ":0/" not in dashboard, dashboard


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"FLEETGUARD_RUNTIME_RESTART_COMMAND": "scancel {jobid}"}, "runtime.restart_command"),
        ({"FLEETGUARD_AGENT_SAMPLE_INTERVAL_SECONDS": "inf"}, "agent.sample_interval_seconds"),
        ({"FLEETGUARD_AGENT_SAMPLE_INTERVAL_SECONDS": "1e-9"}, "agent.sample_interval_seconds"),
        ({"FLEETGUARD_AGENT_FLUSH_INTERVAL_SECONDS": "1e308"}, "agent.flush_interval_seconds"),
        ({"FLEETGUARD_AGENT_METRICS_PROT": "9100"}, "FLEETGUARD_AGENT_METRICS_PROT"),
    ],
)
def test_config_refusals_reach_the_operator_as_one_line(
    tmp_path: Path, env: dict[str, str], needle: str
) -> None:
    for daemon in sorted(DAEMONS):
        result = run([*DAEMONS[daemon], "--store", str(tmp_path / "s.duckdb")], tmp_path, env)
        one_line_failure(result, needle)
