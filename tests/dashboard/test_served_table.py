"""Every GPU scored (`/predictions?list=all`) served in pages: the rows stay on the server, the table asks
for the page it shows, sorted and filtered there, and a request the table could not have sent is answered
with no rows. Over a real store of 250 scored GPUs and the dashboard served on loopback."""

from __future__ import annotations

import functools
import json
import logging
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from dashboard.components import count_id, rows_id
from dashboard.listing_cache import Listing, ListingCache
from dashboard.pages.predictions import TABLE_ID
from dashboard.server import DashboardServer, serve_dashboard
from fleetguard.config import load_config
from fleetguard.records.prediction import Prediction
from fleetguard.store import Store
from tests.dashboard.browser import Browser, chromium, chromium_available, wait_drawn

END_TS = 1_790_000_000.0
HOSTS, GPUS_PER_HOST = 25, 10
SCORED = HOSTS * GPUS_PER_HOST
TIMEOUT_MS = 20_000
TABLE = f"#{TABLE_ID}"
PAGES = -(-SCORED // 20)
BLOCKS_ID = {"slot": "blocks", "page": "predictions", "name": TABLE_ID}


def _round(ts: float, flip: bool = False) -> list[Prediction]:
    """One scoring round: a distinct risk per GPU (reversed when `flip`), so every order is one answer."""
    out = []
    for i in range(SCORED):
        risk = ((i * 97) % SCORED) / SCORED
        host = f"node-{i // GPUS_PER_HOST:02d}"
        why = json.dumps([{"feature": "ecc__max", "value": float(i), "contribution": 0.1}])
        out.append(Prediction(ts, host, f"GPU-{i:03d}", 1 - risk if flip else risk, 0, "m-1", 24.0, why))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    opened = Store.open(tmp_path_factory.mktemp("served") / "risk.duckdb")
    opened.append(_round(END_TS - 30))
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def clock() -> list[float]:
    return [END_TS]


@pytest.fixture(scope="module")
def dashboard(store: Store, clock: list[float]) -> Iterator[DashboardServer]:
    config = load_config(env={}, overrides={"dashboard.refresh_seconds": 3600.0})
    server = serve_dashboard(store, config, port=0, now=lambda: clock[0])
    yield server
    server.close()


def _ask(
    dashboard: DashboardServer,
    page: object = 0,
    sort_by: object = None,
    query: object = "",
    round_key: object = "",
) -> tuple[int, Any, Any]:
    """A page of rows asked for as Dash's renderer asks when the table's page, sort or filter changes."""
    rows, count = rows_id(TABLE_ID), count_id(TABLE_ID)
    body = {
        "output": f"..{rows}.data...{rows}.page_count...{count}.children..",
        "outputs": [
            {"id": rows, "property": "data"},
            {"id": rows, "property": "page_count"},
            {"id": count, "property": "children"},
        ],
        "inputs": [
            {"id": BLOCKS_ID, "property": "data", "value": round_key},
            {"id": rows, "property": "page_current", "value": page},
            {"id": rows, "property": "sort_by", "value": sort_by},
            {"id": rows, "property": "filter_query", "value": query},
        ],
        "changedPropIds": [f"{rows}.page_current"],
    }
    posted = urllib.request.Request(
        dashboard.url.rstrip("/") + "/_dash-update-component",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(posted, timeout=10) as answer:
        status, text = answer.status, answer.read().decode()
    assert "Traceback" not in text
    response = json.loads(text)["response"]
    return status, response[rows], response[count]["children"]


def test_a_page_sorted_by_risk_is_answered_from_every_gpu_scored(dashboard: DashboardServer) -> None:
    status, table, count = _ask(dashboard, 0, [{"column_id": "risk", "direction": "asc"}])
    assert status == 200 and count == f"{SCORED} rows" and table["page_count"] == PAGES
    assert [r["risk"] for r in table["data"][:5]] == [0.0, 0.004, 0.008, 0.012, 0.016]
    assert len(table["data"]) == 20 and table["data"][0]["rank"] == SCORED
    gpu = table["data"][0]["gpu"]
    assert gpu.startswith("[GPU-") and gpu.endswith(")") and "](/gpus/GPU-" in gpu  # drawn as a link


def test_a_page_filtered_by_host_counts_that_hosts_gpus(dashboard: DashboardServer) -> None:
    _, table, count = _ask(dashboard, 0, None, "{host} icontains NODE-07")
    assert count == f"{GPUS_PER_HOST} of {SCORED} rows match" and table["page_count"] == 1
    assert {r["host"] for r in table["data"]} == {"[node-07](/hosts/node-07)"}


@pytest.mark.parametrize(
    ("page", "sort_by", "query"),
    [
        (-1, None, ""),
        (10**9, None, ""),
        ("0", None, ""),
        (True, None, ""),
        (0, [{"column_id": "explanations", "direction": "asc"}], ""),
        (0, {"column_id": "risk", "direction": "asc"}, ""),
        (0, [{"column_id": "risk", "direction": "sideways"}], ""),
        (0, None, "{explanations} icontains x"),
        (0, None, "{risk} i> 1 OR 1=1"),
        (0, None, "{risk} i> nan"),
        (0, None, "{host} icontains a || {risk} i> 0.5"),
        (0, None, "{risk} i> 0.5 && {risk} i< 0.9"),
        (0, None, "{host} i> node"),
        (0, None, "x" * 3000),
        (0, None, 12),
    ],
)
def test_a_forged_page_request_is_answered_with_no_rows(
    dashboard: DashboardServer, page: object, sort_by: object, query: object, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="dashboard.served_rows"):
        status, table, count = _ask(dashboard, page, sort_by, query, round_key={"not": "a round"})
    assert (status, table) == (200, {"data": [], "page_count": 1})
    assert count == "no rows: the request could not be read"
    said = [r for r in caplog.records if r.name == "dashboard.served_rows"]
    assert len(said) == 1 and said[0].exc_info is None and "answered empty" in said[0].getMessage()


def test_a_round_is_loaded_once_and_only_the_newest_rounds_are_kept() -> None:
    loads: list[str] = []

    def load(key: str) -> Listing:
        loads.append(key)
        return Listing(key, ({"gpu": key},))

    cache = ListingCache(rounds=2)
    for key in ("r1", "r1", "r2", "r1", "r3", "r2", "r1"):
        cache.listing(key, functools.partial(load, key))
    # r3 evicts r2 (r1 was read after it), r2 then evicts r1, which is loaded again.
    assert loads == ["r1", "r2", "r3", "r2", "r1"]


def test_a_block_request_for_a_round_not_kept_reads_nothing_while_one_is_kept() -> None:
    loads: list[str] = []

    def load(key: str) -> Listing:
        loads.append(key)
        return Listing(key, ({"gpu": key},))

    cache = ListingCache(rounds=2)
    assert cache.shown("", functools.partial(load, "r1")).round_key == "r1"  # none kept: read
    for key in ("r2", "r3"):  # renders of new rounds: r1 leaves the cache
        cache.listing(key, functools.partial(load, key))
    # A forged key, a round that left, a key from before a restart: the newest kept, each without a read.
    shown = [cache.shown(key, functools.partial(load, "r4")).round_key for key in ("x" * 128, "r1", "", "r2")]
    assert shown == ["r3", "r3", "r3", "r2"] and loads == ["r1", "r2", "r3"]


# Chromium: the table as an operator uses it.
pytestmark_browser = pytest.mark.skipif(
    not chromium_available(), reason="needs Debian's chromium and playwright"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


def _open(browser: Browser, dashboard: DashboardServer) -> Any:
    page = browser.new_page()
    page.goto(dashboard.url.rstrip("/") + "/predictions?list=all")
    wait_drawn(page, TIMEOUT_MS)
    return page


def _cells(page: Any, column: str) -> list[str]:
    texts: list[str] = page.locator(f"{TABLE} td.dash-cell[data-dash-column='{column}']").all_inner_texts()
    return texts


_FIRST_CELL_JS = """([table, column, text]) => {
  const cell = document.querySelector(`${table} td.dash-cell[data-dash-column='${column}']`);
  return cell !== null && cell.innerText.trim() === text;
}"""
_COUNT_JS = """([table, text]) => {
  const line = document.querySelector(`${table} .table-count`);
  return line !== null && line.innerText.trim() === text;
}"""


def _wait_first(page: Any, column: str, text: str) -> None:
    page.wait_for_function(_FIRST_CELL_JS, arg=[TABLE, column, text], timeout=TIMEOUT_MS)


def _wait_count(page: Any, text: str) -> None:
    page.wait_for_function(_COUNT_JS, arg=[TABLE, text], timeout=TIMEOUT_MS)


def _asks_server(page: Any, prop: str) -> Any:
    return page.expect_request(
        lambda r: "/_dash-update-component" in r.url and f'"{prop}"' in (r.post_data or ""),
        timeout=TIMEOUT_MS,
    )


def _sort_by_risk(page: Any) -> None:
    with _asks_server(page, "sort_by"):
        page.click(f"{TABLE} th.dash-header[data-dash-column='risk'] .column-header--sort")
    _wait_first(page, "rank", str(SCORED))


@pytestmark_browser
def test_the_table_shows_the_first_page_most_at_risk_first_with_the_count(
    browser: Browser, dashboard: DashboardServer
) -> None:
    page = _open(browser, dashboard)
    assert _cells(page, "rank")[:3] == ["1", "2", "3"]
    assert len(_cells(page, "rank")) == 20
    assert page.inner_text(f"{TABLE} .table-count").strip() == f"{SCORED} rows"
    gpu = page.locator(f"{TABLE} td.dash-cell[data-dash-column='gpu'] a").first
    assert gpu.get_attribute("href") == f"/gpus/{gpu.inner_text()}"
    page.close()


@pytestmark_browser
def test_sorting_by_risk_asks_the_server_for_the_least_at_risk_first(
    browser: Browser, dashboard: DashboardServer
) -> None:
    page = _open(browser, dashboard)
    _sort_by_risk(page)
    assert _cells(page, "risk")[:3] == ["0.0000", "0.0040", "0.0080"]
    page.close()


@pytestmark_browser
def test_a_refresh_with_a_new_round_keeps_the_page_and_the_sort(
    browser: Browser, dashboard: DashboardServer, store: Store, clock: list[float]
) -> None:
    page = _open(browser, dashboard)
    _sort_by_risk(page)
    page.click(f"{TABLE} button.next-page")
    _wait_first(page, "risk", "0.0800")  # the 21st least at risk
    store.append(_round(END_TS + 30, flip=True))  # the next round: every order reversed
    clock[0] = END_TS + 60
    try:
        page.click("#predictions-refresh")
        # The 21st least at risk of the new round: 1 - 229/250.
        _wait_first(page, "risk", "0.0840")
        wait_drawn(page, TIMEOUT_MS)
    finally:
        clock[0] = END_TS
    risks = [float(r) for r in _cells(page, "risk")]
    assert risks == sorted(risks) and len(risks) == 20  # still sorted, still the second page
    assert page.get_attribute(f"{TABLE} input.current-page", "placeholder") == "2"
    page.close()


@pytestmark_browser
def test_filtering_by_host_asks_the_server_for_that_hosts_gpus(
    browser: Browser, dashboard: DashboardServer
) -> None:
    page = _open(browser, dashboard)
    box = page.locator(f"{TABLE} th.dash-filter[data-dash-column='host'] input[type='text']")
    box.fill("node-07")
    with _asks_server(page, "filter_query"):
        box.press("Enter")
    _wait_count(page, f"{GPUS_PER_HOST} of {SCORED} rows match")
    assert set(_cells(page, "host")) == {"node-07"} and len(_cells(page, "host")) == GPUS_PER_HOST
    assert not browser.errors, browser.errors[:3]
    page.close()
