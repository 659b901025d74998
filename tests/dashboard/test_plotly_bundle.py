"""The dashboard's plotly.js is the vendored cartesian bundle (dashboard/plotly_bundle.py): served where
Dash's renderer asks for the full one, and holding every trace type a page of the dashboard draws, checked in
real Chromium over every page that has figures."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

from dashboard.plotly_bundle import BUNDLE, FULL_BUNDLE_PATH, TRACE_TYPES, VERSION
from dashboard.server import DashboardServer
from tests.dashboard.browser import Browser, wait_drawn
from tests.dashboard.fleet_store import JOB_ID, BuiltFleet

pytestmark = pytest.mark.integration
TIMEOUT_MS = 60_000  # generous: a loaded 2-core machine

# Every figure in Dash's layout of the page: its trace types (plotly's default is scatter).
FIGURE_TRACES_JS = """() => {
  const types = [];
  // Dash 4 keeps the layout under {components: ...}; a component is an object with a namespace and props.
  const walk = (node) => {
    if (Array.isArray(node)) { node.forEach(walk); return; }
    if (!node || typeof node !== 'object') return;
    if (typeof node.namespace === 'string' && node.props) {
      if (node.type === 'Graph' && node.props.figure) {
        for (const t of node.props.figure.data || []) types.push(t.type || 'scatter');
      }
      for (const [k, v] of Object.entries(node.props)) if (k !== 'figure' && k !== 'data') walk(v);
      return;
    }
    Object.values(node).forEach(walk);
  };
  walk(window.store.getState().layout);
  return types;
}"""


def test_dash_gets_the_cartesian_bundle_and_a_new_tab_revalidates_it(dashboard: DashboardServer) -> None:
    url = dashboard.url.rstrip("/") + "/" + FULL_BUNDLE_PATH
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
        etag = response.headers["ETag"]
        assert response.headers["Content-Type"].startswith("application/javascript")
    assert body == BUNDLE.read_bytes()
    assert f"plotly.js (cartesian - minified) v{VERSION}" in body[:200].decode()
    revalidate = urllib.request.Request(url, headers={"If-None-Match": etag})
    with pytest.raises(urllib.error.HTTPError) as not_modified:
        urllib.request.urlopen(revalidate, timeout=30)
    assert not_modified.value.code == 304


def test_the_bundle_registers_the_trace_types_it_is_said_to(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet
) -> None:
    page = browser.new_page()
    # A page with figures (the fleet and network pages draw theirs in HTML).
    page.goto(dashboard.url.rstrip("/") + f"/gpus/{fleet.failed_gpu_uuid}")
    wait_drawn(page, TIMEOUT_MS)
    page.wait_for_function("() => window.Plotly && window.Plotly.PlotSchema", timeout=TIMEOUT_MS)
    registered = page.evaluate("() => Object.keys(window.Plotly.PlotSchema.get().traces)")
    assert page.evaluate("() => window.Plotly.version") == VERSION
    assert set(registered) == TRACE_TYPES
    page.close()


def test_every_figure_of_every_page_is_drawn_by_the_bundle(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet
) -> None:
    browser.errors.clear()
    paths = [
        "/",
        "/hosts/sim-host-002",
        f"/gpus/{fleet.failed_gpu_uuid}",
        f"/gpus/{fleet.failed_gpu_uuid}?window=24h",
        f"/gpus/{fleet.at_risk_uuid}",
        "/network",
        "/jobs",
        f"/jobs/{JOB_ID}",
        "/incidents",
        "/predictions",
        "/repairs",
        "/alerts",
        "/policy",
    ]
    drawn: dict[str, list[str]] = {}
    for path in paths:
        page: Any = browser.new_page()
        page.goto(dashboard.url.rstrip("/") + path)
        wait_drawn(page, TIMEOUT_MS)
        drawn[path] = page.evaluate(FIGURE_TRACES_JS)
        # Each figure drew its SVG with this bundle (wait_drawn waits for every graph's).
        assert page.locator(".dash-graph .main-svg").count() >= (1 if drawn[path] else 0)
        page.close()
    every = {t for types in drawn.values() for t in types}
    assert every <= TRACE_TYPES, {p: sorted(set(t) - TRACE_TYPES) for p, t in drawn.items()}
    # The kinds the dashboard draws today were all seen, so the check above covered them.
    assert {"scatter", "bar", "heatmap"} <= every
    assert browser.errors == []
