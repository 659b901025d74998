"""Every /metrics a fleetguard process serves passes `promtool check metrics`, scraped from the real process
after it has sampled: the agent's, and `up`'s two (the agent's port and its read API's). The controller's
is checked in tests/controller/test_metrics_promtool.py. Latencies are histograms, never summaries with a
`quantile` label: quantiles cannot be aggregated across hosts or over time."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.daemon import Daemon
from tests.integration.up_process import Moment, up_argv, up_env

pytestmark = pytest.mark.integration


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def _promtool_accepts(text: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make test` installs Debian's prometheus package"
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'quantile="' not in text
    assert "# TYPE" in text  # a page with families, not an empty one


def test_a_sampling_agent_serves_metrics_promtool_accepts(tmp_path: Path) -> None:
    agent = Daemon(["agent", "--simulate", "1x2", "--duration", "120"], tmp_path)
    try:
        agent.wait_for_rounds(3)
        text = _get(f"http://127.0.0.1:{agent.port}/metrics")
    finally:
        agent.stop()
    _promtool_accepts(text)
    assert "fleetguard_agent_rounds_total" in text


def _wait_for(lines: list[str], proc: subprocess.Popen[str], pattern: str) -> re.Match[str]:
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"up never printed {pattern!r}:\n" + "".join(lines))


def test_up_serves_metrics_promtool_accepts_on_both_of_its_ports(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        up_argv(tmp_path, Moment.SAMPLING),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=up_env(tmp_path),
        cwd=tmp_path,
    )
    lines: list[str] = []
    try:
        metrics_port = int(_wait_for(lines, proc, r"metrics +http://\S+:(\d+)/metrics").group(1))
        api = _wait_for(lines, proc, r"read API +http://\S+:(\d+)/v1/fleet")
        _wait_for(lines, proc, r"\] rounds \d+")
        deadline = time.monotonic() + 60
        agent_text = _get(f"http://127.0.0.1:{metrics_port}/metrics")
        while "fleetguard_incidents" not in agent_text and time.monotonic() < deadline:
            time.sleep(0.5)  # polling a real process until its incident loop has run, bounded
            agent_text = _get(f"http://127.0.0.1:{metrics_port}/metrics")
        api_text = _get(f"http://127.0.0.1:{api.group(1)}/metrics")
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, "".join(lines) + rest
    _promtool_accepts(agent_text)
    _promtool_accepts(api_text)
    assert "fleetguard_controller_ingest_latency_seconds_bucket" in api_text
