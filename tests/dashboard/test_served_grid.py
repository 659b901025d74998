"""Every GPU scored (`/predictions?list=all`) served in blocks: the rows stay on the server, the grid asks
for the block it shows, sorted and filtered there, and a request the grid could not have sent is answered
with an empty block. Over a real store of 250 scored GPUs and the dashboard served on loopback."""

from __future__ import annotations

import functools
import json
import logging
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from dashboard.components import grid_id
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
GRID = f"#{TABLE_ID}"
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


def _ask(dashboard: DashboardServer, request: object, round_key: object = "") -> tuple[int, Any]:
    """A block request posted as Dash's renderer posts the grid's `getRowsRequest`."""
    body = {
        "output": f"{grid_id(TABLE_ID)}.getRowsResponse",
        "outputs": {"id": grid_id(TABLE_ID), "property": "getRowsResponse"},
        "inputs": [{"id": grid_id(TABLE_ID), "property": "getRowsRequest", "value": request}],
        "state": [{"id": BLOCKS_ID, "property": "data", "value": round_key}],
        "changedPropIds": [f"{grid_id(TABLE_ID)}.getRowsRequest"],
    }
    posted = urllib.request.Request(
        dashboard.url.rstrip("/") + "/_dash-update-component",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(posted, timeout=10) as answer:
        status, text = answer.status, answer.read().decode()
    assert "Traceback" not in text
    return status, json.loads(text)["response"][grid_id(TABLE_ID)]["getRowsResponse"]


def _block(start: int = 0, end: int = 100, **fields: Any) -> dict[str, Any]:
    return {"startRow": start, "endRow": end, "sortModel": [], "filterModel": {}} | fields


def test_a_block_request_sorted_by_risk_is_answered_from_every_gpu_scored(dashboard: DashboardServer) -> None:
    status, answer = _ask(dashboard, _block(0, 5, sortModel=[{"colId": "risk", "sort": "asc"}]))
    assert status == 200 and answer["rowCount"] == SCORED
    assert [r["risk"] for r in answer["rowData"]] == [0.0, 0.004, 0.008, 0.012, 0.016]
    assert answer["rowData"][0]["rank"] == SCORED


def test_a_block_request_filtered_by_host_counts_that_hosts_gpus(dashboard: DashboardServer) -> None:
    model = {"host": {"filterType": "text", "type": "equals", "filter": "NODE-07"}}
    _, answer = _ask(dashboard, _block(filterModel=model))
    assert answer["rowCount"] == GPUS_PER_HOST
    assert {r["host"] for r in answer["rowData"]} == {"node-07"}


@pytest.mark.parametrize(
    "forged",
    [
        _block(sortModel=[{"colId": "explanations", "sort": "asc"}]),
        _block(start=-100, end=0),
        _block(start=0, end=10**12),
        _block(filterModel={"host": ["node-07"]}),
        _block(filterModel={"risk": {"filterType": "number", "type": "greaterThan", "filter": "1 OR 1=1"}}),
        "SELECT * FROM predictions",
        None,
    ],
)
def test_a_forged_block_request_is_answered_with_an_empty_block(
    dashboard: DashboardServer, forged: object, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="dashboard.served_grid"):
        assert _ask(dashboard, forged, round_key={"not": "a round"}) == (200, {"rowData": [], "rowCount": 0})
    said = [r for r in caplog.records if r.name == "dashboard.served_grid"]
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


# Chromium: the grid as an operator uses it.
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
    texts: list[str] = page.locator(
        f"{GRID} .ag-center-cols-container .ag-row [col-id='{column}']"
    ).all_inner_texts()
    return texts


def _summary(page: Any) -> str:
    text: str = page.inner_text(f"{GRID} .ag-paging-row-summary-panel")
    return " ".join(text.split())


_CELL_JS = """([grid, row, column, text]) => {
  const cell = document.querySelector(`${grid} .ag-row[row-index='${row}'] [col-id='${column}']`);
  return cell !== null && cell.innerText === text;
}"""
_SUMMARY_JS = """([grid, text]) => {
  const panel = document.querySelector(`${grid} .ag-paging-row-summary-panel`);
  return panel !== null && panel.innerText.replace(/\\s+/g, ' ').trim() === text;
}"""


def _wait_cell(page: Any, row: int, column: str, text: str) -> None:
    page.wait_for_function(_CELL_JS, arg=[GRID, row, column, text], timeout=TIMEOUT_MS)


def _wait_summary(page: Any, text: str) -> None:
    page.wait_for_function(_SUMMARY_JS, arg=[GRID, text], timeout=TIMEOUT_MS)


def _asks_server(page: Any) -> Any:
    return page.expect_request(
        lambda r: "/_dash-update-component" in r.url and "getRowsRequest" in (r.post_data or ""),
        timeout=TIMEOUT_MS,
    )


@pytestmark_browser
def test_the_grid_shows_the_first_block_most_at_risk_first_with_the_count(
    browser: Browser, dashboard: DashboardServer
) -> None:
    page = _open(browser, dashboard)
    assert _cells(page, "rank")[:3] == ["1", "2", "3"]
    assert len(_cells(page, "rank")) == 20  # a page of the first block
    assert _summary(page) == f"1 to 20 of {SCORED}"
    gpu = page.locator(f"{GRID} .ag-row[row-index='0'] [col-id='gpu'] a")
    assert gpu.get_attribute("href") == f"/gpus/{gpu.inner_text()}"
    page.close()


@pytestmark_browser
def test_sorting_by_risk_asks_the_server_for_the_least_at_risk_first(
    browser: Browser, dashboard: DashboardServer
) -> None:
    page = _open(browser, dashboard)
    with _asks_server(page):
        page.click(f"{GRID} .ag-header-cell[col-id='risk'] .ag-header-cell-label")
    _wait_cell(page, 0, "rank", str(SCORED))
    assert _cells(page, "risk")[:3] == ["0.0000", "0.0040", "0.0080"]
    page.close()


@pytestmark_browser
def test_a_refresh_with_a_new_round_keeps_the_page_and_the_sort(
    browser: Browser, dashboard: DashboardServer, store: Store, clock: list[float]
) -> None:
    page = _open(browser, dashboard)
    page.click(f"{GRID} .ag-header-cell[col-id='risk'] .ag-header-cell-label")  # ascending
    _wait_cell(page, 0, "rank", str(SCORED))
    page.click(f"{GRID} .ag-paging-button[aria-label='Next Page']")
    page.wait_for_selector(f"{GRID} .ag-row[row-index='20']", timeout=TIMEOUT_MS)
    store.append(_round(END_TS + 30, flip=True))  # the next round: every order reversed
    clock[0] = END_TS + 60
    try:
        with _asks_server(page):
            page.click("#predictions-refresh")
        _wait_cell(page, 20, "risk", "0.0840")
        wait_drawn(page, TIMEOUT_MS)
    finally:
        clock[0] = END_TS
    assert _summary(page) == f"21 to 40 of {SCORED}"
    # The 21st least at risk of the new round: 1 - 229/250 (the old round's 21st was 0.0800).
    assert _cells(page, "risk")[0] == "0.0840"
    page.close()


@pytestmark_browser
def test_filtering_by_host_asks_the_server_for_that_hosts_gpus(
    browser: Browser, dashboard: DashboardServer
) -> None:
    page = _open(browser, dashboard)
    host_filter = page.locator(f"{GRID} .ag-floating-filter[col-id='host'] input")
    with _asks_server(page):
        host_filter.fill("node-07")
    _wait_summary(page, f"1 to {GPUS_PER_HOST} of {GPUS_PER_HOST}")
    assert set(_cells(page, "host")) == {"node-07"} and len(_cells(page, "host")) == GPUS_PER_HOST
    host_filter.fill("")  # the filter is kept in the browser's storage: leave none for another test
    _wait_summary(page, f"1 to 20 of {SCORED}")
    assert not browser.errors, browser.errors[:3]
    page.close()
