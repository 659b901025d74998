"""Incidents in the browser: the list shows the engine's active incidents, the drill-down reaches one from
the fleet page, and operator actions are refused without the token and recorded with it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dashboard.operator import DASHBOARD_OPERATOR
from dashboard.server import DashboardServer
from fleetguard.store import Store
from tests.dashboard.browser import Browser, fill_dash_input, wait_drawn
from tests.dashboard.conftest import OPERATOR_TOKEN
from tests.dashboard.fleet_store import BuiltFleet

pytestmark = pytest.mark.integration
TIMEOUT_MS = 60_000


def _open(browser: Browser, dashboard: DashboardServer, path: str) -> Any:
    page = browser.new_page()
    page.goto(dashboard.url.rstrip("/") + path)
    page.wait_for_selector(".page-tools", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    return page


def _active_count(store: Store) -> int:
    row = (
        store.cursor().execute("SELECT count(*) FROM incidents WHERE state IN ('open', 'acting')").fetchone()
    )
    assert row is not None
    return int(row[0])


def _incident_of(store: Store, uuid: str, fault: str) -> str:
    row = (
        store.cursor()
        .execute("SELECT incident_id FROM incidents WHERE component_id = ? AND fault = ?", [uuid, fault])
        .fetchone()
    )
    assert row is not None
    return str(row[0])


def test_incidents_page_counts_the_active_incidents_of_the_store(
    browser: Browser, dashboard: DashboardServer, fleet_store: Store
) -> None:
    active = _active_count(fleet_store)
    assert active > 0
    page = _open(browser, dashboard, "/incidents")
    assert page.inner_text("#card-incidents-active .card-value") == str(active)
    assert "xid:48" in page.inner_text("#incidents-list")
    page.close()
    fleet_page = _open(browser, dashboard, "/")
    assert fleet_page.inner_text("#card-problems .card-value") == str(active)
    fleet_page.close()


def test_drill_down_from_fleet_to_host_to_gpu_to_incident(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet, fleet_store: Store
) -> None:
    browser.errors.clear()
    page = _open(browser, dashboard, "/")
    page.click("#fleet-attention a:text-is('sim-host-001')", timeout=TIMEOUT_MS)
    page.wait_for_url("**/hosts/sim-host-001", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    page.click("#host-gpus a:text-is('GPU 2')", timeout=TIMEOUT_MS)
    page.wait_for_url(f"**/gpus/{fleet.failed_gpu_uuid}", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    incident_id = _incident_of(fleet_store, fleet.failed_gpu_uuid, "xid:48")
    page.click(f"#gpu-incidents a:text-is('{incident_id}')", timeout=TIMEOUT_MS)
    page.wait_for_url(f"**/incidents/{incident_id}", timeout=TIMEOUT_MS)
    wait_drawn(page, TIMEOUT_MS)
    page.wait_for_selector("#incident-evidence", timeout=TIMEOUT_MS)
    assert "xid:48" in page.inner_text(".cards")
    assert "drain" in page.inner_text("#incident-ledger")
    assert "gpu_sample" in page.inner_text("#incident-evidence")
    assert browser.errors == []
    page.close()


def _act(page: Any, button: str, token: str | None) -> str:
    """Click an action button; the answer to this click is the one carrying the next attempt number."""
    attempt = int(page.evaluate("window.__attempts = (window.__attempts || 0) + 1"))
    fill_dash_input(page, "incident-token", token or "", TIMEOUT_MS)
    fill_dash_input(page, "incident-note", "looking at it", TIMEOUT_MS)
    page.click(button)
    answer = page.wait_for_selector(f"#incident-action-result [data-attempt='{attempt}']", timeout=TIMEOUT_MS)
    return str(answer.inner_text())


def _recorded(store: Store, incident_id: str) -> list[tuple[Any, ...]]:
    return (
        store.cursor()
        .execute(
            "SELECT action, note, outcome FROM operator_actions WHERE incident_id = ? ORDER BY ts",
            [incident_id],
        )
        .fetchall()
    )


def test_acknowledge_is_refused_without_the_token_and_recorded_with_it(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet, fleet_store: Store
) -> None:
    incident_id = _incident_of(fleet_store, fleet.hot_gpu_uuid, "temperature:high")
    page = _open(browser, dashboard, f"/incidents/{incident_id}")
    assert _act(page, "#incident-ack", None).startswith("refused")
    assert _act(page, "#incident-ack", "not-the-operator-token-0000") == "refused: wrong operator token"
    assert _recorded(fleet_store, incident_id) == []
    assert _act(page, "#incident-ack", OPERATOR_TOKEN) == "acknowledge: recorded"
    assert _recorded(fleet_store, incident_id) == [("acknowledge", "looking at it", "recorded")]
    page.wait_for_function(
        "document.querySelector('#incident-operator-state').textContent === 'acknowledged'",
        timeout=TIMEOUT_MS,
    )
    assert "acknowledge" in page.inner_text("#incident-operator")
    page.close()


def test_silence_is_recorded_with_its_end_and_resolve_needs_the_engine(
    browser: Browser, dashboard: DashboardServer, fleet: BuiltFleet, fleet_store: Store
) -> None:
    incident_id = _incident_of(fleet_store, fleet.lost_gpu_uuid, "xid:79")
    page = _open(browser, dashboard, f"/incidents/{incident_id}")
    assert _act(page, "#incident-silence", OPERATOR_TOKEN) == "silence: recorded"
    page.wait_for_function(
        "document.querySelector('#incident-operator-state').textContent.startsWith('silenced until')",
        timeout=TIMEOUT_MS,
    )
    # This server runs no incident engine (the test gives it no resolver): resolving is refused, not faked.
    assert _act(page, "#incident-resolve", OPERATOR_TOKEN).startswith("refused: no incident engine")
    assert [r[0] for r in _recorded(fleet_store, incident_id)] == ["silence"]
    # ... and is a silence the alert relay reads: the incident's alerts are muted until it ends.
    rows = fleet_store.connection.execute(
        "SELECT matchers_json, created_by, epoch(expires_at) - epoch(created_at) FROM alert_silences"
    ).fetchall()
    assert [(json.loads(m), by) for m, by, _ in rows] == [
        ([["incident_id", incident_id]], DASHBOARD_OPERATOR)
    ]
    assert rows[0][2] > 0
    page.close()
    # ... and /alerts shows what is silenced.
    alerts = _open(browser, dashboard, "/alerts")
    listed = alerts.inner_text("#alerts-silences-table")
    assert f"incident_id={incident_id}" in listed and "looking at it" in listed
    alerts.close()


def test_alerts_page_counts_deliveries_and_replays_dead_letters_only_with_the_token(
    browser: Browser, dashboard: DashboardServer, fleet_store: Store
) -> None:
    def count(status: str) -> int:
        row = (
            fleet_store.cursor()
            .execute("SELECT count(*) FROM alert_outbox WHERE status = ?", [status])
            .fetchone()
        )
        assert row is not None
        return int(row[0])

    dead, pending = count("dead"), count("pending")
    assert dead == 1
    page = _open(browser, dashboard, "/alerts")
    assert page.inner_text("#card-alerts-dead .card-value") == str(dead)
    assert page.inner_text("#card-alerts-pending .card-value") == str(pending)
    assert "410" in page.inner_text("#alerts-attempts")
    fill_dash_input(page, "alerts-token", "not-the-operator-token-0000", TIMEOUT_MS)
    page.click("#alerts-replay")
    answer = page.wait_for_selector("#alerts-replay-result [data-attempt='1']", timeout=TIMEOUT_MS)
    assert answer.inner_text().startswith("refused")
    assert count("dead") == dead
    fill_dash_input(page, "alerts-token", OPERATOR_TOKEN, TIMEOUT_MS)
    page.click("#alerts-replay")
    answer = page.wait_for_selector("#alerts-replay-result [data-attempt='2']", timeout=TIMEOUT_MS)
    assert answer.inner_text() == "1 alert(s) queued again"
    assert (count("dead"), count("pending")) == (0, pending + 1)
    page.close()
