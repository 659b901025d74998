"""The dashboard in a real headless Chromium over a store the test built: pages show the store's numbers,
drill down from the fleet to a host to a GPU, refresh live, and log no browser error."""

from __future__ import annotations

import urllib.parse
from typing import Any

import pytest

from dashboard.server import DashboardServer
from fleetguard.store import Store
from tests.dashboard.browser import Browser, wait_drawn
from tests.dashboard.fleet_store import JOB_ID, SILENT_HOST, SLOW_RANK, BuiltFleet

pytestmark = pytest.mark.integration
TIMEOUT_MS = 60_000  # generous: a loaded 2-core machine


def _open(browser: Browser, dashboard: DashboardServer, path: str) -> Any:
    page = browser.new_page()
    page.goto(dashboard.url.rstrip("/") + path)
    page.wait_for_selector(".page-tools", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    return page


def _live_counts(store: Store, fleet: BuiltFleet) -> tuple[int, int]:
    """Hosts and GPUs that sampled in the dashboard's live window (10 min), straight from the store."""
    row = (
        store.cursor()
        .execute(
            "SELECT count(DISTINCT host), count(DISTINCT uuid) FROM gpu_samples "
            "WHERE ts >= make_timestamp(CAST(? * 1e6 AS BIGINT))",
            [fleet.end_ts - 600],
        )
        .fetchone()
    )
    assert row is not None
    return int(row[0]), int(row[1])


def test_fleet_page_shows_the_hosts_and_gpus_of_the_store(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet, fleet_store: Store
) -> None:
    hosts, gpus = _live_counts(fleet_store, fleet)
    page = _open(browser, dashboard, "/")
    assert page.inner_text("#card-hosts .card-value") == str(hosts)
    assert page.inner_text("#card-gpus .card-value") == str(gpus)
    # The ECC ramp ended in a double-bit error and one GPU fell off the bus: two failed GPUs.
    assert "2 failed" in page.inner_text("#card-gpus")
    attention = page.inner_text("#fleet-attention")
    assert SILENT_HOST in attention and "silent" in attention
    assert f"{fleet.at_risk_score:.3f}" in page.inner_text("#fleet-at-risk")
    assert JOB_ID in page.inner_text("#fleet-jobs")
    # The double-bit error's XID, in the chart drawn in HTML: the page loads no plotly.js for it.
    assert "XID 48" in page.inner_text("#fleet-xids")
    assert page.evaluate("typeof window.Plotly") == "undefined"
    page.close()


def test_drill_down_from_fleet_to_host_to_gpu(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet
) -> None:
    page = _open(browser, dashboard, "/")
    page.click("#fleet-attention a:text-is('sim-host-001')", timeout=TIMEOUT_MS)
    page.wait_for_url("**/hosts/sim-host-001", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    page.wait_for_selector("#host-gpus", timeout=TIMEOUT_MS)
    gpu_table = page.inner_text("#host-gpus")
    assert fleet.failed_gpu_uuid in gpu_table and "failed" in gpu_table
    page.click("#host-gpus a:text-is('GPU 2')", timeout=TIMEOUT_MS)
    page.wait_for_url(f"**/gpus/{fleet.failed_gpu_uuid}", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    page.wait_for_selector("#gpu-timeseries .main-svg", timeout=TIMEOUT_MS)
    title = page.inner_text(".title-row")
    assert "GPU 2" in title and "failed" in title and "fatal XID" in title
    page.close()


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/hosts/sim-host-002",
        "/hosts/sim-host-silent",
        "/gpus/{hot}",
        "/gpus/{lost}",
        "/hosts/no-such-host",
        "/network",
        "/jobs",
        f"/jobs/{JOB_ID}",
        "/jobs/no-such-job",
        "/incidents",
        "/incidents/no-such-incident",
        "/predictions",
        "/predictions?list=all",
        "/alerts",
        "/policy",
        "/gpus/{at_risk}",
    ],
)
def test_page_loads_and_refreshes_without_browser_errors(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet, path: str
) -> None:
    browser.errors.clear()
    page = _open(
        browser,
        dashboard,
        path.format(hot=fleet.hot_gpu_uuid, lost=fleet.lost_gpu_uuid, at_risk=fleet.at_risk_uuid),
    )
    page.wait_for_timeout(500)  # plots draw after the layout arrives
    page.evaluate("window.__not_reloaded = true")
    page.click(".refresh")
    page.wait_for_function(
        "document.querySelector('.stamp').textContent.startsWith('checked')", timeout=TIMEOUT_MS
    )
    assert page.evaluate("window.__not_reloaded === true")
    assert "could not be drawn" not in page.inner_text("body")
    assert browser.errors == []
    page.close()


def test_gpu_page_marks_the_fault_on_the_time_axis_and_shows_its_events(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet
) -> None:
    page = _open(browser, dashboard, f"/gpus/{fleet.failed_gpu_uuid}?window=1h")
    page.wait_for_selector("#gpu-timeseries .main-svg", timeout=TIMEOUT_MS)
    # A vertical event marker per XID, drawn as shapes across the subplots.
    assert page.locator("#gpu-timeseries .shapelayer path").count() > 0
    events = page.inner_text("#gpu-events-table")
    assert "48" in events and "double bit" in events.lower()
    page.close()


def test_host_name_from_the_url_is_text_not_markup(browser: Browser, dashboard: DashboardServer) -> None:
    hostile = "<img src=x onerror=window.__pwned=1>"
    page = _open(browser, dashboard, "/hosts/" + urllib.parse.quote(hostile, safe=""))
    assert hostile in page.inner_text("h1")
    assert page.evaluate("window.__pwned === undefined")
    page.close()


def test_network_page_counts_the_flap_and_names_the_port(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet
) -> None:
    page = _open(browser, dashboard, "/network")
    assert page.inner_text("#card-flaps .card-value") == "1"
    host, device = fleet.flapping_port
    bad = page.inner_text("#network-bad")
    # The reason is the port's open incident (the one health model: its summary, not the observation's).
    assert host in bad and f"{device}/1" in bad and "link_downed +1" in bad
    page.close()


def test_job_page_shows_ranks_by_host_and_the_straggler(browser: Browser, dashboard: DashboardServer) -> None:
    page = _open(browser, dashboard, f"/jobs/{JOB_ID}")
    assert page.inner_text("#card-job-ranks .card-value") == "8"
    page.wait_for_selector("#job-heatmap .main-svg", timeout=TIMEOUT_MS)
    stragglers = page.inner_text("#job-stragglers")
    assert str(SLOW_RANK) in stragglers and "sim-host-001" in stragglers
    assert "checkpoint" in page.inner_text("#job-actions")
    page.close()


def test_predictions_page_ranks_the_at_risk_gpu_first(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet, fleet_store: Store
) -> None:
    row = fleet_store.cursor().execute("SELECT count(DISTINCT device_id) FROM predictions").fetchone()
    assert row is not None
    page = _open(browser, dashboard, "/predictions")
    assert page.inner_text("#card-scored .card-value") == str(row[0])
    assert page.inner_text("#card-at-risk .card-value") == "1"
    first_gpu = page.locator("#predictions-table td.dash-cell[data-dash-column='gpu']").first
    assert fleet.at_risk_uuid in first_gpu.inner_text()
    assert first_gpu.locator("a").get_attribute("href") == f"/gpus/{fleet.at_risk_uuid}"
    page.close()


def test_every_gpu_scored_links_each_gpu_and_host_to_its_page(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet
) -> None:
    page = _open(browser, dashboard, "/predictions?list=all")
    first = page.locator("#predictions-table tr:has(td.dash-cell)").first
    gpu, host = first.locator("td[data-dash-column='gpu'] a"), first.locator("td[data-dash-column='host'] a")
    assert gpu.inner_text() == fleet.at_risk_uuid
    assert gpu.get_attribute("href") == f"/gpus/{fleet.at_risk_uuid}"
    assert host.get_attribute("href") == f"/hosts/{host.inner_text()}"
    gpu.click()
    page.wait_for_url(f"**/gpus/{fleet.at_risk_uuid}", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    page.close()


def test_policy_page_shows_the_shipped_xid_rules(browser: Browser, dashboard: DashboardServer) -> None:
    page = _open(browser, dashboard, "/policy")
    rules = page.inner_text("#policy-xid")
    assert "79" in rules and "fallen off the bus" in rules.lower()
    page.close()


def test_policy_replay_shows_what_the_candidate_would_not_have_raised(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet
) -> None:
    page = _open(browser, dashboard, "/policy")
    page.click("#policy-replay")
    page.wait_for_selector("#policy-replay-result [data-attempt='1']", timeout=TIMEOUT_MS)
    only = page.inner_text("#policy-replay-only")
    # The hot GPU's thermal-throttling and temperature incidents are raised by the current policy only.
    assert f"{fleet.hot_gpu_uuid}|throttle:thermal" in only and "current only" in only
    assert f"{fleet.hot_gpu_uuid}|temperature:high" in only
    assert "candidate only" not in only
    page.close()


def test_network_page_draws_its_charts_without_plotly(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet
) -> None:
    """Both charts are HTML (`dashboard.bar_chart`, `dashboard.column_chart`): the page never loads
    plotly.js, and the worst ports chart names the port that flapped."""
    page = _open(browser, dashboard, "/network")
    assert page.evaluate("window.Plotly === undefined")
    assert page.locator(".js-plotly-plot").count() == 0
    host, device = fleet.flapping_port
    assert f"{host} {device}/1" in page.inner_text("#network-worst-ports")
    page.close()
