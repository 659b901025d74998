"""The repairs page in a real headless Chromium over a real store: per fault kind the hours hosts spent out
of service and how often a repair held, and the nodes still out with why."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dashboard.server import DashboardServer, serve_dashboard
from fleetguard.config import load_config
from fleetguard.store import Store
from tests.dashboard.browser import Browser, wait_drawn
from tests.incidents.repair_rows import write_repairs

pytestmark = pytest.mark.integration
TIMEOUT_MS = 60_000
NOW = time.time()


@pytest.fixture(scope="module")
def repairs_dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DashboardServer]:
    path = tmp_path_factory.mktemp("repairs") / "fleet.duckdb"
    with Store.open(path) as store:
        with store.transaction() as con:
            write_repairs(con, NOW)
        config = load_config(env={}, overrides={"dashboard.refresh_seconds": 3600.0})
        server = serve_dashboard(store, config, port=0, now=lambda: NOW)
        try:
            yield server
        finally:
            server.close()


@pytest.fixture(scope="module")
def empty_dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DashboardServer]:
    with Store.open(Path(tmp_path_factory.mktemp("none")) / "fleet.duckdb") as store:
        server = serve_dashboard(store, load_config(env={}), port=0, now=lambda: NOW)
        try:
            yield server
        finally:
            server.close()


def _open(browser: Browser, dashboard: DashboardServer) -> Any:
    page = browser.new_page()
    page.goto(dashboard.url.rstrip("/") + "/repairs")
    page.wait_for_selector(".page-tools", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    return page


def test_the_repairs_page_shows_time_out_of_service_and_how_often_a_repair_held(
    browser: Browser, repairs_dashboard: DashboardServer
) -> None:
    browser.errors.clear()
    page = _open(browser, repairs_dashboard)
    page.wait_for_selector("#repairs-by-fault", timeout=TIMEOUT_MS)
    assert page.inner_text("#card-repairs .card-value") == "3"
    assert page.inner_text("#card-held .card-value") == "50%"  # xid:79: one held, one came back
    assert page.inner_text("#card-out .card-value") == "1"
    rows = page.locator("#repairs-by-fault .dash-spreadsheet tbody tr:has(td.dash-cell)")
    table = [rows.nth(i).locator("td.dash-cell").all_inner_texts() for i in range(rows.count())]
    cells = next(r for r in table if "xid:79" in r)
    assert "50% (1 of 2)" in cells and "6.00" in cells  # 2 h + 4 h out
    out = page.inner_text("#repairs-out")
    assert "node3-slurm" in out and "selfcheck_failed" in out and "compute gpu:0: mismatch" in out
    assert browser.errors == []
    page.close()


def test_the_repairs_page_says_when_there_is_nothing_to_show(
    browser: Browser, empty_dashboard: DashboardServer
) -> None:
    page = _open(browser, empty_dashboard)
    assert "no Slurm repairs in the last 30 days" in page.inner_text("body")
    page.close()
