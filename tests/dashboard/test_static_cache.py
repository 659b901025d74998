"""Scripts at versioned URLs (dashboard/static_cache.py, plotly_bundle.VERSIONED_PATH): the tags rewritten
(pure), the versioned files served for a year over real loopback HTTP, and, in Chromium, the chunks a table
and a figure load on first use asked for at versioned URLs."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

from dashboard.plotly_bundle import BUNDLE, VERSIONED_PATH
from dashboard.server import DashboardServer
from dashboard.static_cache import fingerprinted_path, versioned_tags
from tests.dashboard.browser import Browser, wait_drawn
from tests.dashboard.fleet_store import JOB_ID

TIMEOUT_MS = 60_000  # generous: a loaded 2-core machine
SUITES = "/_dash-component-suites/"


def test_a_fingerprinted_tag_names_its_file_under_its_fingerprint_and_back() -> None:
    tags = (
        f'<script src="{SUITES}dash/dash_table/bundle.v7_4_1m1795796272.js"></script>\n'
        f'<script src="{SUITES}dash/deps/react@18.v4_4_1m17.3.1.min.js"></script>\n'
        f'<script type="text/plain" id="g" data-src="{SUITES}dash_ag_grid/dash_ag_grid.v35_3_0m1a.min.js">'
        "</script>\n"
        '<script src="/assets/router.js?m=1795796363.95"></script>'
    )
    assert versioned_tags(tags).splitlines() == [
        f'<script src="{SUITES}dash/dash_table/~v7_4_1m1795796272/bundle.js"></script>',
        f'<script src="{SUITES}dash/deps/~v4_4_1m17/react@18.3.1.min.js"></script>',
        f'<script type="text/plain" id="g" data-src="{SUITES}dash_ag_grid/~v35_3_0m1a/dash_ag_grid.min.js">'
        "</script>",
        '<script src="/assets/router.js?m=1795796363.95"></script>',
    ]
    assert fingerprinted_path("dash/dash_table/~v7_4_1m1795796272/async-table.js") == (
        "dash",
        "dash_table/async-table.v7_4_1m1795796272.js",
    )
    assert fingerprinted_path("dash/deps/~v4_4_1m17/react@18.3.1.min.js") == (
        "dash",
        "deps/react@18.v4_4_1m17.3.1.min.js",
    )
    for other in ("dash/dash_table/async-table.js", "dash/~vxm1/a/b.js", "dash/~1.2/async-table.js"):
        assert fingerprinted_path(other) is None


def _fetch(url: str) -> tuple[int, bytes, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as refused:
        return refused.code, b"", dict(refused.headers)


def test_the_page_names_versioned_scripts_that_are_kept_a_year(dashboard: DashboardServer) -> None:
    base = dashboard.url.rstrip("/")
    _, html, _ = _fetch(base + "/")
    table_dir = re.search(rf'src="({SUITES}dash/dash_table/~v[^/"]+/)bundle\.js"', html.decode())
    assert table_dir is not None
    status, chunk, headers = _fetch(base + table_dir.group(1) + "async-table.js")
    assert status == 200 and len(chunk) > 100_000
    assert "max-age=31536000" in headers["Cache-Control"]
    status, body, headers = _fetch(base + "/" + VERSIONED_PATH)
    assert status == 200 and body == BUNDLE.read_bytes()
    assert "max-age=31536000" in headers["Cache-Control"] and "no-cache" not in headers["Cache-Control"]
    missing, _, _ = _fetch(base + table_dir.group(1) + "async-none.js")
    assert missing == 404


def test_a_table_s_and_a_figure_s_chunks_load_from_versioned_urls(
    browser: Browser, dashboard: DashboardServer
) -> None:
    browser.errors.clear()
    page = browser.new_page()
    page.goto(dashboard.url.rstrip("/") + f"/jobs/{JOB_ID}")  # a heat map and DataTables
    page.wait_for_selector("#job-body .section", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    names: list[str] = page.evaluate("() => performance.getEntriesByType('resource').map(r => r.name)")
    scripts = [n for n in names if SUITES in n]
    table_chunk = [n for n in scripts if n.endswith("/async-table.js")]
    graph_chunk = [n for n in scripts if n.endswith("/async-graph.js")]
    assert table_chunk and graph_chunk
    assert all("/~v" in n for n in table_chunk + graph_chunk)
    assert any(n.endswith(VERSIONED_PATH) for n in scripts)
    assert browser.errors == []
    page.close()
