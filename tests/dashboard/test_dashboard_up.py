"""`fleetguard up` serves the dashboard: a real process on a simulated fleet, its banner prints the URL, and
the fleet page in Chromium shows the simulated hosts and GPUs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.dashboard.browser import chromium

pytestmark = [pytest.mark.integration, pytest.mark.slow]
DEADLINE_SECONDS = 120.0


def _banner_url(out: Path, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        match = re.search(r"dashboard (http://\S+)", out.read_text())
        if match:
            return match.group(1)
        assert proc.poll() is None, out.read_text()
        time.sleep(0.2)  # polling a real fleetguard up process: it offers no event to wait on
    raise AssertionError(f"no dashboard URL in the banner:\n{out.read_text()}")


def test_up_serves_the_dashboard_of_its_simulated_fleet(tmp_path: Path) -> None:
    out = tmp_path / "up.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fleetguard",
                "up",
                "--simulate",
                "2x4",
                "--store",
                str(tmp_path / "s.duckdb"),
                "--metrics-port",
                "0",
                "--dashboard-port",
                "0",
                "--no-runtime",
                "--no-predict",
                "--duration",
                "90",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env={**os.environ, "FLEETGUARD_CONTROLLER_LISTEN": "127.0.0.1:0"},  # up's read API: any free port
        )
    try:
        url = _banner_url(out, proc)
        assert url.startswith("http://127.0.0.1:")
        with chromium() as browser:
            page = browser.new_page()
            page.goto(url)
            page.wait_for_selector("#card-gpus", timeout=60_000)
            # The first flush brings the samples; the refresh button redraws without reloading.
            deadline = time.monotonic() + DEADLINE_SECONDS
            while page.inner_text("#card-gpus .card-value") != "8" and time.monotonic() < deadline:
                page.click(".refresh")
                page.wait_for_timeout(1000)
            assert page.inner_text("#card-hosts .card-value") == "2"
            assert page.inner_text("#card-gpus .card-value") == "8"
            assert browser.errors == []
    finally:
        proc.terminate()
        proc.wait(timeout=60)
