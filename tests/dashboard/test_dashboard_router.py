"""The dashboard's own router: which page a path names (pure), the layout served with that page in it over
real loopback HTTP, and, in Chromium, a first render that needs no callback and navigation that still draws
every page (back to the first one included)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from dashboard.app import PAGES
from dashboard.router import PAGE_HEADER
from dashboard.routes import MAX_PATH_CHARS, route
from dashboard.server import DashboardServer
from tests.dashboard.browser import Browser, wait_drawn
from tests.dashboard.fleet_store import JOB_ID

TIMEOUT_MS = 60_000  # generous: a loaded 2-core machine


@pytest.mark.parametrize(
    ("path", "search", "page_id", "given"),
    [
        ("/", "", "fleet", {}),
        ("/jobs", "", "jobs", {}),
        ("/jobs/", "", "jobs", {}),
        ("/jobs/train%2F7", "?window=24h&other=1", "job", {"job": "train%2F7", "window": "24h"}),
        ("/gpus/GPU-1", "", "gpu", {"uuid": "GPU-1"}),
        ("/incidents", "", "incidents", {}),
        ("/incidents/inc-9", "", "incident", {"incident": "inc-9"}),
        ("/hosts/node-1", "?window=24h", "host", {"host": "node-1"}),  # the host page reads no query
    ],
)
def test_a_path_names_its_page_and_only_that_page_s_parameters(
    path: str, search: str, page_id: str, given: dict[str, str]
) -> None:
    found = route(PAGES, path, search)
    assert found is not None
    assert (found.spec.page_id, found.given) == (page_id, given)


@pytest.mark.parametrize("path", ["/nope", "/jobs/a/b", "/hosts/a/b/c", "/" + "x" * MAX_PATH_CHARS])
def test_a_path_of_no_page_names_none(path: str) -> None:
    assert route(PAGES, path) is None


def _get(dashboard: DashboardServer, path: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    request = urllib.request.Request(dashboard.url.rstrip("/") + path, headers=headers)
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read().decode(), dict(response.headers)


def _ids(tree: Any) -> set[str]:
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            ident = node.get("props", {}).get("id") if "props" in node else None
            if isinstance(ident, str):
                found.add(ident)
            stack.extend(node.values())
    return found


def test_the_layout_holds_the_page_its_request_names_and_no_page_without_one(
    dashboard: DashboardServer,
) -> None:
    named, headers = _get(dashboard, "/_dash-layout", {PAGE_HEADER: f"/jobs/{JOB_ID}?window=24h"})
    ids = _ids(json.loads(named))
    assert {"job-body", "job-stamp", "fg-served"} <= ids
    assert headers["Cache-Control"] == "no-store"
    bare, _ = _get(dashboard, "/_dash-layout", {})
    assert "fg-page" in _ids(json.loads(bare)) and not any(
        i.startswith("job-") for i in _ids(json.loads(bare))
    )
    missing, _ = _get(dashboard, "/_dash-layout", {PAGE_HEADER: "/no/such/page"})
    assert "no page at /no/such/page" in json.dumps(json.loads(missing))


def test_the_html_names_its_page_in_the_title_and_asks_for_the_layout_early(
    dashboard: DashboardServer,
) -> None:
    html, _ = _get(dashboard, f"/jobs/{JOB_ID}", {})
    assert "<title>Job · fleetguard</title>" in html
    head = html[: html.index("</head>")]
    assert PAGE_HEADER in head and "_dash-layout" in head
    lost, _ = _get(dashboard, "/nope", {})
    assert "<title>not found · fleetguard</title>" in lost


def test_a_first_render_needs_no_callback_and_navigation_draws_every_page_again(
    browser: Browser, dashboard: DashboardServer
) -> None:
    browser.errors.clear()
    page = browser.new_page()
    page.goto(dashboard.url.rstrip("/") + "/network")
    page.wait_for_selector("#network-body .section", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    requests = "() => performance.getEntriesByType('resource').map(r => r.name)"
    names: list[str] = page.evaluate(requests)
    assert sum(n.endswith("/_dash-layout") for n in names) == 1
    assert not any("_dash-update-component" in n for n in names)  # the page came with the layout
    assert page.title() == "Network · fleetguard"
    page.click(".nav-link:text-is('Jobs')")
    page.wait_for_selector("#jobs-body .section", timeout=TIMEOUT_MS)
    assert page.title() == "Jobs · fleetguard"
    page.go_back()  # to the page the layout was served with: drawn again, not skipped by the gate
    page.wait_for_selector("#network-body .section", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    assert page.title() == "Network · fleetguard"
    assert browser.errors == []
    page.close()
