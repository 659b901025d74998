"""Pages that read right, in a real Chromium: GPUs named by host and index beside their UUIDs, evidence values
on screen, the heat map centred on the job's median step time, dead ranks counted as deaths, a filter row
whose icons render, headers on every table, and a live refresh that changes data in place and says when it
last changed."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any

import pytest

from dashboard.pages.live import clock_text
from dashboard.server import DashboardServer, serve_dashboard
from fleetguard.config import load_config
from fleetguard.store import Store
from tests.dashboard.browser import Browser, wait_drawn
from tests.dashboard.fleet_store import DEAD_RANK, JOB_ID, BuiltFleet

pytestmark = pytest.mark.integration
TIMEOUT_MS = 60_000


def _open(browser: Browser, server: DashboardServer, path: str) -> Any:
    page = browser.new_page()
    page.goto(server.url.rstrip("/") + path)
    page.wait_for_selector(".page-tools", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    return page


@pytest.fixture(scope="module")
def moving(fleet: BuiltFleet, fleet_store: Store) -> Iterator[tuple[DashboardServer, list[float]]]:
    """A dashboard whose clock the test moves: ages and states in its tables change between refreshes."""
    clock = [fleet.end_ts]
    config = load_config(env={}, overrides={"dashboard.refresh_seconds": 3600.0})
    server = serve_dashboard(fleet_store, config, port=0, now=lambda: clock[0])
    yield server, clock
    server.close()


def test_incidents_name_a_gpu_by_host_and_index_beside_its_uuid(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet
) -> None:
    page = _open(browser, dashboard, "/incidents")
    listed = page.inner_text("#incidents-list")
    assert f"GPU 2 · {fleet.failed_gpu_uuid}" in listed
    page.close()


def test_incident_evidence_values_are_on_screen_not_cut_off(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet, fleet_store: Store
) -> None:
    row = (
        fleet_store.cursor()
        .execute("SELECT incident_id FROM incidents WHERE component_id = ?", [fleet.failed_gpu_uuid])
        .fetchone()
    )
    assert row is not None
    page = _open(browser, dashboard, f"/incidents/{row[0]}")
    assert page.inner_text("#card-incident-component .card-value") == "GPU 2"
    cells = page.locator("#incident-evidence-table td.dash-cell[data-dash-column='detail']")
    assert cells.count() > 0
    width = page.viewport_size["width"]
    for i in range(cells.count()):
        box = cells.nth(i).bounding_box()
        assert box is not None and box["x"] + box["width"] <= width
        # Wrapped, not clipped: the cell is as wide as its text needs.
        assert cells.nth(i).evaluate("c => c.scrollWidth <= c.clientWidth + 1")
    assert "temperature_celsius=" in cells.first.inner_text()
    page.close()


def test_the_heat_map_is_centred_on_the_jobs_median_step_time(
    browser: Browser, dashboard: DashboardServer
) -> None:
    page = _open(browser, dashboard, f"/jobs/{JOB_ID}")
    page.wait_for_selector("#job-heatmap-graph .main-svg", timeout=TIMEOUT_MS)
    trace = page.evaluate(
        "() => { const t = document.querySelector('#job-heatmap-graph .js-plotly-plot').data[0];"
        " return {z: t.z, zmin: t.zmin, zmax: t.zmax}; }"
    )
    median = statistics.median(v for row in trace["z"] for v in row if v is not None)
    assert trace["zmin"] + trace["zmax"] == pytest.approx(2 * median)
    assert trace["zmax"] - median >= 0.1 * median - 1e-9
    page.close()


def test_a_dead_rank_is_counted_under_deaths_not_hangs(browser: Browser, dashboard: DashboardServer) -> None:
    page = _open(browser, dashboard, f"/jobs/{JOB_ID}")
    assert page.inner_text("#card-job-deaths .card-value") == "1"
    assert page.inner_text("#card-job-hangs .card-value") == "0"
    assert str(DEAD_RANK) in page.inner_text("#job-hangs") and "dead_rank" in page.inner_text("#job-hangs")
    page.close()


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/incidents",
        f"/jobs/{JOB_ID}",
        "/network",
        "/alerts",
        "/policy",
        "/predictions",
        "/predictions?list=all",
    ],
)
def test_every_table_has_headers_and_a_filter_row_without_a_case_toggle(
    browser: Browser, dashboard: DashboardServer, path: str
) -> None:
    browser.errors.clear()
    page = _open(browser, dashboard, path)
    tables = page.locator(".table")
    assert tables.count() > 0
    for i in range(tables.count()):
        if tables.nth(i).locator(".empty-table").count():  # no rows: headers, nothing to filter
            headers = tables.nth(i).locator(".empty-table th").all_inner_texts()
            filters = len(headers)
            assert "nothing to show" in tables.nth(i).inner_text()
        else:
            headers = tables.nth(i).locator("th.dash-header .column-header-name").all_inner_texts()
            filters = tables.nth(i).locator("th.dash-filter").count()
        assert headers and all(h.strip() for h in headers)
        assert filters == len(headers)
    # DataTable's case toggle ("Aa" in a font never shipped) is not shown: its filters ignore case.
    toggles = page.locator(".dash-filter--case")
    assert all(not toggles.nth(i).is_visible() for i in range(toggles.count()))
    assert browser.errors == []
    page.close()


def test_every_gpu_scored_is_a_table_served_in_pages_and_no_page_fetches_a_grid_bundle(
    browser: Browser, dashboard: DashboardServer
) -> None:
    browser.errors.clear()
    page = _open(browser, dashboard, "/jobs")
    fetched = "() => performance.getEntriesByType('resource').some(r => r.name.includes('dash_ag_grid'))"
    page.click(".nav-link:text-is('Predictions')")
    page.wait_for_selector("#predictions-table .dash-table-container th.dash-header", timeout=TIMEOUT_MS)
    # In-app navigation to every GPU scored, a row per GPU of the fleet: its first page asked for and drawn.
    page.click("#predictions-other-list")
    page.wait_for_selector("#predictions-table td.dash-cell[data-dash-column='gpu']", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    assert not page.evaluate(fetched)
    assert browser.errors == []
    page.close()


def test_a_filter_ignores_case(browser: Browser, dashboard: DashboardServer) -> None:
    page = _open(browser, dashboard, f"/jobs/{JOB_ID}")
    rows = page.locator("#job-ranks-table td.dash-cell[data-dash-column='host']")
    host = rows.first.inner_text()
    before = rows.count()
    box = page.locator("#job-ranks-table th.dash-filter[data-dash-column='host'] input[type='text']")
    box.fill(host.upper())
    box.press("Enter")
    page.wait_for_function(
        "(n) => document.querySelectorAll(\"#job-ranks-table td[data-dash-column='host']\").length < n",
        arg=before,
        timeout=TIMEOUT_MS,
    )
    shown = rows.all_inner_texts()
    assert shown and all(h == host for h in shown)
    page.close()


def test_a_live_refresh_changes_rows_in_place_and_says_when_the_data_changed(
    browser: Browser, moving: tuple[DashboardServer, list[float]]
) -> None:
    server, clock = moving
    page = _open(browser, server, "/jobs")
    assert page.inner_text("#jobs-stamp").startswith("loaded")
    page.evaluate(
        "() => { window.__grid = document.querySelector('#jobs-table .dash-table-container');"
        " window.__card = document.querySelector('#card-jobs-count'); }"
    )
    last = page.locator("#jobs-table td.dash-cell[data-dash-column='last']").first
    before = last.inner_text()
    clock[0] += 600
    page.click("#jobs-refresh")
    page.wait_for_selector("#jobs-stamp [data-refresh='1']", timeout=TIMEOUT_MS)
    page.wait_for_function(
        "(was) => document.querySelector(\"#jobs-table td[data-dash-column='last']\").textContent !== was",
        arg=before,
        timeout=TIMEOUT_MS,
    )
    # The same table and card elements: updated where they stand, not mounted anew.
    assert page.evaluate("document.querySelector('#jobs-table .dash-table-container') === window.__grid")
    assert page.evaluate("document.querySelector('#card-jobs-count') === window.__card")
    assert f"data changed {clock_text(clock[0])}" in page.inner_text("#jobs-stamp")
    page.close()


def test_a_sort_survives_a_live_refresh(
    browser: Browser, moving: tuple[DashboardServer, list[float]]
) -> None:
    server, clock = moving
    page = _open(browser, server, f"/jobs/{JOB_ID}")
    icon = "#job-ranks-table th.dash-header[data-dash-column='rank'] .column-header--sort svg"
    first = "#job-ranks-table td.dash-cell[data-dash-column='rank']"
    for _ in range(2):  # DataTable's cycle from unsorted: one direction, then the other
        was = page.get_attribute(icon, "class")
        page.click(icon)
        page.wait_for_function(
            "([sel, was]) => document.querySelector(sel).getAttribute('class') !== was",
            arg=[icon, was],
            timeout=TIMEOUT_MS,
        )
        if page.locator(first).first.inner_text() == "7":
            break
    assert page.locator(first).first.inner_text() == "7"  # descending
    clock[0] += 30
    page.click("#job-refresh")
    page.wait_for_selector("#job-stamp [data-refresh='1']", timeout=TIMEOUT_MS)
    assert page.locator(first).first.inner_text() == "7"
    page.close()
