"""The shipped Prometheus alert rules and Grafana dashboard: promtool accepts the rules and their unit tests
pass, the dashboard is a well-formed Grafana model, every query parses as PromQL, and every metric that a rule
or a panel names is one a simulated agent's real /metrics exposes (or, for a rule, a real controller's)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.daemon import Daemon

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "data" / "prometheus" / "alerts.yml"
ALERT_TESTS = Path(__file__).with_name("alerts_test.yml")
DASHBOARD = REPO / "data" / "grafana" / "fleetguard.json"
METRIC = re.compile(r"\bfleetguard_[a-z0-9_]+\b")
# Grafana's own variables, replaced by what Grafana would put there before PromQL sees the query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$host": ".*"}
PANEL_TYPES = {"row", "stat", "table", "timeseries", "state-timeline"}


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: `make test` installs Debian's prometheus package"
    return path


def dashboard() -> dict[str, Any]:
    doc = json.loads(DASHBOARD.read_text())
    assert isinstance(doc, dict)
    return doc


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def dashboard_queries() -> list[str]:
    return [t["expr"] for p in panels() for t in p["targets"]]


def alert_queries() -> list[str]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in doc["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def exposed_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every metric name (families and their samples) on the /metrics of a real simulated agent."""
    daemon = Daemon(["agent", "--simulate", "1x2"], tmp_path_factory.mktemp("agent"))
    try:
        daemon.wait_for_rounds(2)
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    finally:
        daemon.stop()
    names = _names(text)
    assert "fleetguard_gpu_up" in names  # the scrape is what the checks below compare against
    return names


def test_promtool_accepts_the_alert_rules() -> None:
    result = subprocess.run([promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alert_rules_fire_as_their_unit_tests_expect() -> None:
    result = subprocess.run(
        [promtool(), "test", "rules", ALERT_TESTS.name],
        capture_output=True,
        text=True,
        cwd=ALERT_TESTS.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_is_a_well_formed_grafana_model() -> None:
    doc = dashboard()
    assert doc["title"] and doc["uid"] and isinstance(doc["schemaVersion"], int)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in doc["panels"]:
        assert p["type"] in PANEL_TYPES, p["type"]
        grid = p["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"panel {p['title']!r} overlaps another"
        cells |= area
    for p in panels():
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), p["title"]


def test_every_variable_a_query_uses_is_defined() -> None:
    defined = {f"${v['name']}" for v in dashboard()["templating"]["list"]} | set(GRAFANA_VARIABLES)
    used = {m for q in dashboard_queries() for m in re.findall(r"\$[A-Za-z_]+", q)}
    assert used <= defined, used - defined


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    """promtool parses each dashboard query, as a recording rule, with Grafana's variables filled in."""
    rules = []
    for i, query in enumerate(dashboard_queries()):
        for variable, value in GRAFANA_VARIABLES.items():
            query = query.replace(variable, value)
        rules.append({"record": f"fleetguard_dashboard_query_{i}", "expr": query})
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def controller_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every metric name on the /metrics of a real controller (journal on) that one host has shipped to."""
    from tests.controller.helpers import batch, start_test_controller

    controller = start_test_controller(tmp_path_factory.mktemp("controller"))
    try:
        assert controller.ship(batch("node-a", 1)).status == 200
        text = controller.metrics()
    finally:
        controller.running.stop()
    names = _names(text)
    assert "fleetguard_controller_journal_hosts_held" in names  # the scrape is of a journaling controller
    return names


def _names(text: str) -> set[str]:
    lines = text.splitlines()
    names = {line.split()[2] for line in lines if line.startswith("# TYPE ")}
    return names | {re.split(r"[{ ]", line, maxsplit=1)[0] for line in lines if line and line[0] != "#"}


@pytest.mark.integration
@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_metric_named_is_one_the_agent_or_the_controller_exports(
    exposed_names: set[str], controller_names: set[str], source: str
) -> None:
    queries = dashboard_queries() if source == "dashboard" else alert_queries()
    named = {m for q in queries for m in METRIC.findall(q)}
    assert named, "no fleetguard metric named at all"
    exported = exposed_names if source == "dashboard" else exposed_names | controller_names
    assert named <= exported, sorted(named - exported)
    assert all(METRIC.search(q) for q in queries)  # no query watches nothing of fleetguard's


def test_the_dashboard_covers_what_the_dcgm_board_lacks() -> None:
    named = {m for q in dashboard_queries() for m in METRIC.findall(q)}
    for metric in (
        "fleetguard_gpu_xid_errors_total",
        "fleetguard_nvswitch_sxid_errors_total",
        "fleetguard_gpu_ecc_errors_total",
        "fleetguard_gpu_remapped_rows",
        "fleetguard_gpu_clocks_event_active",
        "fleetguard_gpu_nvlink_errors_total",
        "fleetguard_gpu_pcie_replay_errors_total",
        "fleetguard_nic_port_errors_total",
        "fleetguard_gpu_up",
    ):
        assert metric in named, metric
