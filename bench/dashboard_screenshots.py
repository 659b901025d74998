"""The README's dashboard screenshots (docs/dashboard-*.png), taken in headless Chromium over the test suite's
simulated fleet store (4 hosts x 4 GPUs with scripted faults, a job with a straggler, incidents and alerts).

Usage: python bench/dashboard_screenshots.py [--out docs]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboard.server import serve_dashboard
from fleetguard.config import load_config
from fleetguard.store import Store
from tests.dashboard.browser import chromium
from tests.dashboard.fleet_store import JOB_ID, build_fleet_store


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="docs")
    out = Path(parser.parse_args().out)
    with tempfile.TemporaryDirectory() as tmp:
        fleet = build_fleet_store(Path(tmp) / "fleet.duckdb")
        with Store.open(fleet.path) as store:
            incident = (
                store.cursor()
                .execute("SELECT incident_id FROM incidents WHERE fault = 'xid:48' LIMIT 1")
                .fetchone()
            )
            assert incident is not None
            shots = {
                "fleet": "/",
                "host": "/hosts/sim-host-001",
                "gpu": f"/gpus/{fleet.failed_gpu_uuid}",
                "network": "/network",
                "job": f"/jobs/{JOB_ID}",
                "incident": f"/incidents/{incident[0]}",
            }
            config = load_config(env={}, overrides={"dashboard.refresh_seconds": 3600.0})
            server = serve_dashboard(store, config, port=0, now=lambda: fleet.end_ts)
            try:
                with chromium() as browser:
                    for name, path in shots.items():
                        page = browser.new_page(width=1440, height=900)
                        page.goto(server.url.rstrip("/") + path)
                        page.wait_for_selector(".page-tools", timeout=60_000)
                        page.wait_for_timeout(1500)  # plots finish drawing
                        target = out / f"dashboard-{name}.png"
                        page.screenshot(path=str(target), full_page=True)
                        print(target)
                        page.close()
                    assert not browser.errors, browser.errors
            finally:
                server.close()


if __name__ == "__main__":
    main()
