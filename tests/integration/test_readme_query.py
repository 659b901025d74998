"""The README's "Querying the store" commands, run as written by a new user from a fresh directory: while
`fleetguard up` holds the store (asked through its read API) and after it stopped (the file itself). On a
fleet without faults the `events` table has no rows yet: the query answers none, it does not fail."""

from __future__ import annotations

import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.up_process import FLEETGUARD, up_env

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_commands(export_dir: Path) -> list[list[str]]:
    text = README.read_text()
    section = text[text.index("### Querying the store") :]
    start = section.index("```sh") + len("```sh")
    block = section[start : section.index("```", start)]
    commands = [shlex.split(line, comments=True) for line in block.strip().splitlines()]
    assert [c[:2] for c in commands] == [["fleetguard", "query"], ["fleetguard", "export"]]
    return [[FLEETGUARD, *(str(export_dir) if a == "/tmp/fg" else a for a in c[1:])] for c in commands]


def _run_all(commands: list[list[str]], cwd: Path, env: dict[str, str]) -> list[str]:
    outputs = []
    for argv in commands:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr and "{'" not in done.stdout, done.stdout
        outputs.append(done.stdout)
    return outputs


def _wait_for_stored_samples(cwd: Path, env: dict[str, str]) -> None:
    """Until the running `up` has stored its first samples (asked of it, as the README's commands ask it)."""
    deadline = time.monotonic() + 60
    while True:
        argv = [FLEETGUARD, "query", "SELECT count(*) AS n FROM gpu_samples", "--format", "csv"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)
        assert done.returncode == 0, done.stderr
        if done.stdout.split()[-1] != "0":
            return
        assert time.monotonic() < deadline, "up stored no sample in 60 s"
        time.sleep(0.5)


def test_the_readmes_query_and_export_work_while_up_runs_and_after(tmp_path: Path) -> None:
    env = up_env(tmp_path)
    argv = [
        FLEETGUARD,
        "up",
        "--simulate",
        "1x2",
        "--no-faults",
        "--no-predict",
        "--metrics-port",
        "0",
        "--dashboard-port",
        "0",
        "--duration",
        "120",
    ]
    up = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=env
    )
    lines: list[str] = []
    try:
        assert up.stdout is not None
        for line in up.stdout:
            lines.append(line)
            if "] rounds " in line:
                break
        else:
            raise AssertionError("up never sampled:\n" + "".join(lines))
        _wait_for_stored_samples(tmp_path, env)  # sampled is not yet stored: the first flush comes later
        held = _run_all(_readme_commands(tmp_path / "fg-held"), tmp_path, env)
    finally:
        up.send_signal(signal.SIGINT)
        rest, _ = up.communicate(timeout=60)
    assert up.returncode == 0, "".join(lines) + rest
    free = _run_all(_readme_commands(tmp_path / "fg-free"), tmp_path, env)
    for query, export in (held, free):
        assert query.splitlines() == ["host  code  n"], (
            query
        )  # the header, and no XID on a fleet without faults
        assert export.splitlines()[0].split() == ["TABLE", "ROWS"]
        assert "gpu_samples" in export
