"""Issue 20 item 1: while `fleetguard up` holds its store, the operator commands that read the store ask it
(its read API, named in the holder file beside the store) instead of refusing: `repairs` and `model
list|show`; a command that cannot ask (training reads the whole history) and a store held by an agent (which
serves no read API) name the process and say what to do. With nothing running they read the file."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetguard.store import Store
from fleetguard.store.holder import read_holder
from fleetguard.store.model_registry import BASE_MODEL
from tests.controller.fleet_processes import FLEETGUARD, free_port, stop

pytestmark = [pytest.mark.integration, pytest.mark.slow]

THIRTY_DAYS = 30 * 86400.0
AGENT_ARGS = ("--metrics-port", "0", "--no-runtime", "--duration", "300")


@dataclass(frozen=True)
class RunningUp:
    config: Path
    store: Path
    base: str
    pid: int


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FLEETGUARD, *args], capture_output=True, text=True, timeout=120)


def _wait_for_api(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120  # a wait, not a target: up starts slowly on a loaded machine
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/v1/fleet", timeout=10) as response:
                if json.loads(response.read())["hosts"] >= 1:
                    return
        except OSError:
            assert proc.poll() is None, log.read_text()
        time.sleep(0.3)  # polling a real process: it offers no event to wait on
    raise AssertionError(f"up never served its read API:\n{log.read_text()}")


@pytest.fixture(scope="module")
def running_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningUp]:
    root = tmp_path_factory.mktemp("up")
    port = free_port()
    config, store = root / "up.toml", root / "up.duckdb"
    config.write_text(
        f"[agent]\nmetrics_port = 0\nsample_interval_seconds = 0.5\nflush_interval_seconds = 1.0\n"
        f'[controller]\nlisten = "127.0.0.1:{port}"\ntokens_file = "{root}/tokens.json"\n'
        f'[store]\npath = "{store}"\n[dashboard]\nenabled = false\n[runtime]\nenabled = false\n'
        '[simulate]\nfleet = "1x2"\nseed = 3\n'
    )
    log = root / "up.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*FLEETGUARD, "up", "--config", str(config), "--no-predict", "--duration", "600"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for_api(base, proc, log)
        yield RunningUp(config, store, base, proc.pid)
    finally:
        stop(proc)


def test_repairs_asks_the_running_up_for_the_same_document(running_up: RunningUp) -> None:
    holder = read_holder(str(running_up.store))
    assert holder is not None and holder.kind == "up" and holder.url == running_up.base
    text = _cli("repairs", "--config", str(running_up.config))
    assert text.returncode == 0, text.stderr
    assert text.stdout.strip() == "no Slurm repairs in the last 30d"
    asked = _cli("repairs", "--config", str(running_up.config), "--json", "--since", "2h")
    assert asked.returncode == 0, asked.stderr
    with urllib.request.urlopen(running_up.base + "/v1/repairs?since_seconds=7200", timeout=30) as response:
        served = json.loads(response.read())
    assert json.loads(asked.stdout) == served == {"since_seconds": 7200.0, "faults": [], "out": []}


def test_the_read_api_refuses_a_repairs_window_out_of_range(running_up: RunningUp) -> None:
    request = urllib.request.Request(running_up.base + "/v1/repairs?since_seconds=1e11")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 400


def test_model_list_and_show_ask_the_running_up(running_up: RunningUp) -> None:
    listed = _cli("model", "list", "--config", str(running_up.config), "--json")
    assert listed.returncode == 0, listed.stderr
    with urllib.request.urlopen(running_up.base + "/v1/models", timeout=30) as response:
        served = json.loads(response.read())
    assert json.loads(listed.stdout) == served == {"active": BASE_MODEL, "models": [], "log": []}
    text = _cli("model", "list", "--config", str(running_up.config))
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == [f"serving: {BASE_MODEL}", "no retrained models yet"]
    missing = _cli("model", "show", "m-20990101-000000", "--config", str(running_up.config))
    assert missing.returncode == 1
    (line,) = missing.stderr.strip().splitlines()
    assert f"a running `fleetguard up` (pid {running_up.pid}" in line
    assert "answered 404" in line and "Traceback" not in missing.stderr


def test_training_on_a_store_up_holds_names_it_and_what_to_do(running_up: RunningUp, tmp_path: Path) -> None:
    trained = _cli("train", "--store", str(running_up.store), "--out", str(tmp_path / "model"))
    assert trained.returncode == 1
    (line,) = trained.stderr.strip().splitlines()
    assert f"a running `fleetguard up` (pid {running_up.pid}" in line
    assert "retrain_every_seconds" in line


def test_a_store_held_by_an_agent_names_it_and_says_to_stop_it(tmp_path: Path) -> None:
    store = tmp_path / "agent.duckdb"
    log = tmp_path / "agent.log"
    with log.open("ab") as out:
        agent = subprocess.Popen(
            [*FLEETGUARD, "agent", "--simulate", "1x1", "--store", str(store), *AGENT_ARGS],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while read_holder(str(store)) is None:
            assert agent.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)  # polling a real process: it offers no event to wait on
        for args in (["repairs"], ["model", "list"]):
            refused = _cli(*args, "--store", str(store))
            assert refused.returncode == 1, refused.stdout
            (line,) = refused.stderr.strip().splitlines()
            assert f"a running `fleetguard agent` (pid {agent.pid})" in line
            assert "stop it first" in line
    finally:
        stop(agent)


def test_repairs_and_model_list_read_the_file_when_nothing_runs(tmp_path: Path) -> None:
    store = tmp_path / "idle.duckdb"
    Store.open(str(store)).close()  # made and migrated, then nobody holds it
    repairs = _cli("repairs", "--store", str(store), "--json")
    assert repairs.returncode == 0, repairs.stderr
    assert json.loads(repairs.stdout) == {"since_seconds": THIRTY_DAYS, "faults": [], "out": []}
    models = _cli("model", "list", "--store", str(store), "--json")
    assert models.returncode == 0, models.stderr
    assert json.loads(models.stdout) == {"active": BASE_MODEL, "models": [], "log": []}
