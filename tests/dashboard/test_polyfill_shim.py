"""The Babel polyfill replaced by its regenerator runtime (dashboard/polyfill_shim.py): the runtime taken
from the polyfill Dash ships, the page's tag swapped (pure), the runtime served for a year over real
loopback HTTP, and in Chromium a page with a table and a figure drawn with the runtime and no polyfill."""

from __future__ import annotations

import re
import urllib.request

from dashboard.polyfill_shim import regenerator_runtime, replace_polyfill, shipped_polyfill
from dashboard.server import DashboardServer
from tests.dashboard.browser import Browser, wait_drawn
from tests.dashboard.fleet_store import JOB_ID

TIMEOUT_MS = 60_000  # generous: a loaded 2-core machine
POLYFILL_TAG = '<script src="/_dash-component-suites/dash/deps/~v4_4_1m17/polyfill@7.12.1.min.js"></script>'


def test_the_runtime_is_theshipped_polyfill_s_regenerator_module_and_much_smaller() -> None:
    polyfill = shipped_polyfill()
    assert polyfill is not None
    runtime = regenerator_runtime(polyfill)
    assert runtime is not None
    assert len(runtime) < len(polyfill) / 10
    assert "regeneratorRuntime=e" in runtime and "function wrap(" in runtime


def test_a_polyfill_without_the_runtime_leaves_the_page_its_polyfill() -> None:
    assert regenerator_runtime("[function(t,n,r){var e=1}]") is None
    assert replace_polyfill(POLYFILL_TAG, None) == POLYFILL_TAG


def test_the_polyfill_tag_and_only_it_is_replaced() -> None:
    react = '<script src="/_dash-component-suites/dash/deps/~v4_4_1m17/react@18.3.1.min.js"></script>'
    shim = '<script src="/_fleetguard/regenerator-runtime.0123.js"></script>'
    assert replace_polyfill(POLYFILL_TAG + "\n" + react, shim) == shim + "\n" + react


def test_the_page_loads_the_runtime_kept_a_year_instead_of_the_polyfill(dashboard: DashboardServer) -> None:
    base = dashboard.url.rstrip("/")
    with urllib.request.urlopen(base + "/", timeout=60) as response:
        html = response.read().decode()
    assert "polyfill@" not in html
    found = re.search(r'<script src="(/_fleetguard/regenerator-runtime\.[0-9a-f]+\.js)"></script>', html)
    assert found is not None
    with urllib.request.urlopen(base + found.group(1), timeout=60) as response:
        assert "max-age=31536000" in response.headers["Cache-Control"]
        assert response.headers["Content-Type"].startswith("application/javascript")
        assert b"regeneratorRuntime" in response.read()


def test_a_page_with_tables_and_a_figure_draws_on_the_runtime_alone(
    browser: Browser, dashboard: DashboardServer
) -> None:
    browser.errors.clear()
    page = browser.new_page()
    page.goto(dashboard.url.rstrip("/") + f"/jobs/{JOB_ID}")  # a heat map and DataTables
    page.wait_for_selector("#job-heatmap .main-svg", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    names: list[str] = page.evaluate("() => performance.getEntriesByType('resource').map(r => r.name)")
    assert not [n for n in names if "polyfill@" in n]
    assert page.evaluate("typeof window.regeneratorRuntime.wrap") == "function"
    assert page.locator(".dash-table-container th.dash-header").count() > 0
    assert browser.errors == []
    page.close()
