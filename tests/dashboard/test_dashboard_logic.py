"""The dashboard's pure parts and its query layer, without a browser: health rules, views over a real store,
URL parameters, the operator token and the [dashboard] config section."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dashboard.auth import TokenFileError, read_operator_token, token_accepted
from dashboard.components import href, md_link
from dashboard.figures import bar, gpu_over_time
from dashboard.fleet_view import gpu_views, host_views, port_views
from dashboard.health import (
    SILENT_AFTER_SECONDS,
    GpuSignals,
    Health,
    PortSignals,
    gpu_health,
    port_health,
    worst,
)
from dashboard.pages.gpu import PAGE as GPU_PAGE
from dashboard.pages.live import MAX_PARAM_CHARS, clean_params, stored_params
from dashboard.queries.events import EventRow, event_counts
from dashboard.queries.gpus import GpuSeries, bucket_seconds, gpu_series, latest_gpu_states
from dashboard.queries.jobs import jobs, step_grid
from dashboard.queries.network import port_counters, port_states
from dashboard.queries.predictions import risk_by_device
from dashboard.snapshot import MAX_BUILD_SHARE, FleetModel, SnapshotCache, health_inputs
from fleetguard.config import ConfigError, load_config
from fleetguard.store import Store
from tests.dashboard.fleet_store import JOB_ID, SLOW_RANK, BuiltFleet

HEALTHY_GPU = GpuSignals(
    age_seconds=1.0,
    lost=False,
    fatal_xids=0,
    other_xids=0,
    ecc_uncorrected_volatile=0,
    remapped_rows_failure=False,
    remapped_rows_pending=False,
    clocks_event_reasons=0,
    temperature_celsius=60.0,
    risk=0.1,
    risk_threshold=0.5,
)


def _with(**changes: object) -> GpuSignals:
    from dataclasses import replace

    return replace(HEALTHY_GPU, **changes)  # type: ignore[arg-type]


def test_a_gpu_with_nothing_wrong_is_healthy() -> None:
    assert gpu_health(HEALTHY_GPU) == (Health.HEALTHY, "")


@pytest.mark.parametrize(
    ("change", "state"),
    [
        ({"lost": True}, Health.FAILED),
        ({"fatal_xids": 1}, Health.FAILED),
        ({"ecc_uncorrected_volatile": 2}, Health.FAILED),
        ({"remapped_rows_failure": True}, Health.FAILED),
        ({"age_seconds": SILENT_AFTER_SECONDS + 1}, Health.SILENT),
        ({"remapped_rows_pending": True}, Health.DEGRADED),
        ({"clocks_event_reasons": 0x40}, Health.DEGRADED),
        ({"other_xids": 3}, Health.DEGRADED),
        ({"temperature_celsius": 90.0}, Health.DEGRADED),
        ({"risk": 0.7}, Health.DEGRADED),
        ({"clocks_event_reasons": 0x1}, Health.HEALTHY),  # GPU idle is not throttling
    ],
)
def test_gpu_health_rules(change: dict[str, object], state: Health) -> None:
    assert gpu_health(_with(**change))[0] == state


def test_a_lost_gpu_is_failed_even_though_it_stopped_sampling() -> None:
    assert gpu_health(_with(lost=True, age_seconds=10_000.0))[0] == Health.FAILED


def test_port_health_rules() -> None:
    assert port_health(PortSignals(1.0, "ACTIVE", 0, 0))[0] == Health.HEALTHY
    assert port_health(PortSignals(1.0, "DOWN", 0, 0))[0] == Health.FAILED
    assert port_health(PortSignals(1.0, "ACTIVE", 1, 0))[0] == Health.DEGRADED
    assert port_health(PortSignals(1.0, "ACTIVE", 0, 5))[0] == Health.DEGRADED
    assert port_health(PortSignals(SILENT_AFTER_SECONDS + 1, "ACTIVE", 0, 0))[0] == Health.SILENT


def test_a_host_is_as_bad_as_its_worst_part() -> None:
    assert worst([Health.HEALTHY, Health.DEGRADED, Health.SILENT]) == Health.SILENT
    assert worst([Health.HEALTHY, Health.FAILED, Health.SILENT]) == Health.FAILED
    assert worst([]) == Health.SILENT


def test_views_over_the_built_store_find_each_scripted_fault(fleet: BuiltFleet) -> None:
    now = fleet.end_ts
    with Store.open(fleet.path, read_only=True) as store:
        cur = store.cursor()
        incidents, liveness = health_inputs(cur, now, 0.0)
        gpus = gpu_views(
            latest_gpu_states(cur, now),
            event_counts(cur, now - 3600, now),
            risk_by_device(cur, now),
            now,
            0.5,
            incidents,
            liveness,
        )
        ports = port_views(
            port_states(cur, now - 600, now), port_counters(cur, now - 3600, now), now, incidents, liveness
        )
    by_uuid = {g.state.uuid: g for g in gpus}
    assert by_uuid[fleet.failed_gpu_uuid].health == Health.FAILED
    assert by_uuid[fleet.lost_gpu_uuid].health == Health.FAILED
    assert by_uuid[fleet.hot_gpu_uuid].health == Health.DEGRADED
    assert by_uuid[fleet.at_risk_uuid].risk == pytest.approx(fleet.at_risk_score)
    flapping = [p for p in ports if (p.state.host, p.state.device) == fleet.flapping_port]
    # Its flaps observed (degraded) and its open incident (critical in the shipped policy): the worse wins.
    assert flapping
    where = (flapping[0].state.host, f"{flapping[0].state.device}/{flapping[0].state.port}")
    port_incidents = [i for i in incidents if (i.host, i.component_id) == where]
    expected = Health.FAILED if any(i.severity == "critical" for i in port_incidents) else Health.DEGRADED
    assert flapping[0].health == expected
    hosts = {h.host: h for h in host_views(gpus, ports, incidents, liveness, now)}
    assert hosts["sim-host-silent"].health == Health.SILENT
    assert hosts["sim-host-silent"].reason.startswith("no data for")
    # The host's health is its worst open incident's (the incident engine ran over this history).
    assert hosts["sim-host-001"].health == Health.FAILED
    worst_open = hosts["sim-host-001"].incidents[0]
    assert hosts["sim-host-001"].reason.startswith(worst_open.summary)
    # A GPU with an open incident is never healthy, whatever its newest sample shows.
    by_gpu = {(i.host, i.component_id) for i in incidents if i.component_kind == "gpu"}
    assert by_gpu
    for g in gpus:
        if (g.state.host, g.state.uuid) in by_gpu:
            assert g.health != Health.HEALTHY, g


def test_gpu_series_is_bucketed_to_a_bounded_number_of_points(fleet: BuiltFleet) -> None:
    with Store.open(fleet.path, read_only=True) as store:
        host = fleet.hosts[1]  # the ECC ramp's GPU is GPU 2 of the second host
        series = gpu_series(store.cursor(), fleet.failed_gpu_uuid, host, fleet.end_ts - 86400, fleet.end_ts)
    assert 0 < len(series.ts) <= 360
    assert series.ts == sorted(series.ts)
    assert max(v for v in series.ecc_uncorrected_aggregate if v is not None) >= 1
    assert bucket_seconds(86400) == 240.0 and bucket_seconds(60) == 1.0


def test_step_grid_shows_the_slow_rank_as_the_hot_row(fleet: BuiltFleet) -> None:
    with Store.open(fleet.path, read_only=True) as store:
        cur = store.cursor()
        grid = step_grid(cur, JOB_ID, fleet.end_ts - 600, fleet.end_ts)
        summary = jobs(cur, fleet.end_ts)
    means = {
        r: sum(v for v in row if v is not None) / len([v for v in row if v is not None])
        for r, row in zip(grid.ranks, grid.seconds, strict=True)
    }
    assert max(means, key=lambda r: means[r]) == SLOW_RANK
    assert [j.job_id for j in summary] == [JOB_ID] and summary[0].ranks == 8 and summary[0].hosts == 2


def test_url_parameters_are_decoded_once_and_bounded() -> None:
    params = clean_params(GPU_PAGE, {"uuid": "GPU-a%2Fb", "window": "24h", "other": "x"})
    assert params == {"uuid": "GPU-a/b", "window": "24h"}
    assert len(clean_params(GPU_PAGE, {"uuid": "x" * 10_000})["uuid"]) == MAX_PARAM_CHARS
    # What the page stored is already decoded: a refresh must not decode it again.
    assert stored_params(GPU_PAGE, {"uuid": "a%2Fb"})["uuid"] == "a%2Fb"
    assert stored_params(GPU_PAGE, ["not", "a", "dict"]) == {"uuid": "", "window": ""}


def test_links_keep_names_inside_their_path_segment() -> None:
    assert href("hosts", "a/b?c") == "/hosts/a%2Fb%3Fc"
    assert md_link("x](javascript:alert(1))", "/hosts/x") == "[x\\]\\(javascript:alert\\(1\\)\\)](/hosts/x)"


def test_operator_token_is_read_from_its_file_and_compared_exactly(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret-operator-token-value\n")
    path.chmod(0o600)
    token = read_operator_token(str(path))
    assert token == "s3cret-operator-token-value"
    assert token_accepted(token, "s3cret-operator-token-value")
    assert not token_accepted(token, "s3cret-operator-token-valuX")
    assert not token_accepted(token, "")
    assert not token_accepted(None, "anything")
    assert read_operator_token("") is None


def test_a_short_or_missing_token_file_is_a_clear_error(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("abc")
    short.chmod(0o600)
    with pytest.raises(TokenFileError, match="at least"):
        read_operator_token(str(short))
    with pytest.raises(TokenFileError, match="does not exist"):
        read_operator_token(str(tmp_path / "missing"))


def test_dashboard_config_defaults_to_loopback_on_9481() -> None:
    config = load_config(env={})
    assert (config.dashboard.address, config.dashboard.port) == ("127.0.0.1", 9481)
    with pytest.raises(ConfigError, match=r"dashboard\.port"):
        load_config(env={}, overrides={"dashboard.port": 70000})
    with pytest.raises(ConfigError, match=r"dashboard\.address"):
        load_config(env={}, overrides={"dashboard.address": "example.com"})


def test_queries_take_integer_epoch_seconds_as_well_as_floats(fleet: BuiltFleet) -> None:
    with Store.open(fleet.path, read_only=True) as store:
        cur = store.cursor()
        as_int = latest_gpu_states(cur, int(fleet.end_ts))
        as_float = latest_gpu_states(cur, float(fleet.end_ts))
    assert as_int == as_float and as_int


def test_fleet_model_is_built_once_then_rebuilt_in_the_background_when_old() -> None:
    built: list[float] = []

    def build() -> FleetModel:
        built.append(float(len(built)))
        return FleetModel(built[-1], [], [], [], [])

    # The clock reads 10 s, as the monotonic clock does just after boot: a model must still go stale.
    now = [10.0]
    cache = SnapshotCache(build, max_age_seconds=3600.0, clock=lambda: now[0])
    assert cache.get().now == 0.0 and cache.get().now == 0.0
    now[0] += 3599.0
    assert cache.get().now == 0.0
    assert len(built) == 1  # young enough: no rebuild
    now[0] += 2.0
    assert cache.get().now == 0.0  # the old model at once; the new one is built beside
    _wait_until_rebuilt(cache, 1.0)
    cache.invalidate()
    assert cache.get().now == 1.0  # invalidated: still served at once, rebuilt beside
    _wait_until_rebuilt(cache, 2.0)
    assert len(built) == 3


def test_the_model_at_hand_is_only_looked_at_never_built_or_waited_for() -> None:
    built: list[float] = []

    def build() -> FleetModel:
        built.append(float(len(built)))
        return FleetModel(built[-1], [], [], [], [])

    now = [10.0]
    cache = SnapshotCache(build, max_age_seconds=60.0, clock=lambda: now[0])
    assert cache.at_hand() is None and built == []  # no model yet: a GPU page seeks by uuid instead
    model = cache.get()
    now[0] += 3600.0  # stale: `get` would have it rebuilt, a look does not
    assert cache.at_hand() is model and built == [0.0]


class _Builds:
    """A fleet-model builder that records which thread built each model and can be held at a gate."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self) -> FleetModel:
        self.gate.wait()
        self.threads.append(threading.current_thread().name)
        return FleetModel(float(len(self.threads)), [], [], [], [])


def test_a_started_fleet_model_is_built_before_any_request_and_never_by_one() -> None:
    builds = _Builds()
    now = [10.0]
    cache = SnapshotCache(builds, max_age_seconds=5.0, clock=lambda: now[0], idle_seconds=3600.0)
    cache.start()
    try:
        assert cache.wait_ready(60.0)
        assert cache.get().now == 1.0
        assert builds.threads == ["fleetguard-dashboard-model"]  # the keeper's, not this request's
    finally:
        cache.close()
    assert not any(t.name == "fleetguard-dashboard-model" for t in threading.enumerate())


def test_a_request_before_the_first_model_waits_for_the_build_under_way_rather_than_building_again() -> None:
    builds = _Builds()
    builds.gate.clear()
    cache = SnapshotCache(builds, max_age_seconds=3600.0, clock=lambda: 10.0, idle_seconds=3600.0)
    cache.start()
    got: list[float] = []
    visitor = threading.Thread(target=lambda: got.append(cache.get().now))
    try:
        visitor.start()
        builds.gate.set()
        visitor.join()
    finally:
        cache.close()
    assert got == [1.0]
    assert builds.threads == ["fleetguard-dashboard-model"]


def test_a_request_before_the_keeper_first_runs_waits_for_its_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first build is claimed by `start`, so a request that comes before the keeper thread is scheduled
    at all (here: its start held back until the request is waiting) waits for it and builds nothing."""
    held = threading.Event()
    real_thread = threading.Thread

    class _HeldThread(threading.Thread):
        def start(self) -> None:
            if self.name != "fleetguard-dashboard-model":
                real_thread.start(self)
                return

            def start_when_let() -> None:
                held.wait()
                real_thread.start(self)

            real_thread(target=start_when_let, daemon=True).start()

    monkeypatch.setattr(threading, "Thread", _HeldThread)  # what `dashboard.snapshot` starts its keeper as
    builds = _Builds()
    cache = SnapshotCache(builds, max_age_seconds=3600.0, clock=lambda: 10.0, idle_seconds=3600.0)
    cache.start()
    got: list[float] = []
    visitor = threading.Thread(target=lambda: got.append(cache.get().now))
    try:
        visitor.start()
        visitor.join(0.5)
        assert visitor.is_alive() and builds.threads == []  # waiting for the keeper, not building itself
        held.set()
        visitor.join(60.0)
    finally:
        held.set()
        cache.close()
    assert got == [1.0]
    assert builds.threads == ["fleetguard-dashboard-model"]


def test_a_stale_model_is_served_at_once_and_the_keeper_rebuilds_it_off_the_request() -> None:
    builds = _Builds()
    now = [10.0]
    # Refresh and idle periods of an hour: only a request that finds the model stale wakes the keeper.
    cache = SnapshotCache(builds, max_age_seconds=3600.0, clock=lambda: now[0], idle_seconds=3600.0)
    cache.start()
    try:
        assert cache.wait_ready(60.0)
        now[0] += 3601.0
        builds.gate.clear()
        assert cache.get().now == 1.0  # the old model, while the keeper builds the next
        builds.gate.set()
        deadline = time.monotonic() + 60
        while cache.get().now != 2.0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        cache.close()
    assert builds.threads == ["fleetguard-dashboard-model"] * 2


def test_the_fleet_page_says_when_its_shared_model_was_taken() -> None:
    from dashboard.components import as_of

    assert as_of(1_800_000_000.0, 1_800_000_000.0).children == "fleet health as of 2027-01-15 08:00:00 UTC"
    assert as_of(1_800_000_000.0, 1_800_000_042.0).children == (
        "fleet health as of 2027-01-15 08:00:00 UTC (42 s ago)"
    )


def _wait_until_rebuilt(cache: SnapshotCache, model_now: float) -> None:
    """Wait (on the condition, not a fixed time) until the background rebuild is in and its thread is done."""
    deadline = time.monotonic() + 60

    def rebuilding() -> bool:
        return any(t.name == "fleetguard-dashboard-model" for t in threading.enumerate())

    while cache.get().now != model_now or rebuilding():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_page_over_a_store_older_than_the_dashboard_says_so_in_one_line(tmp_path: Path) -> None:
    """A read-only dashboard does not bring a store forward: the predictions page's query of a column added
    at schema 17 fails, and the page says the store's version and what to do, not a binder error."""
    from dashboard.app import create_app
    from dashboard.pages.live import render_safely
    from dashboard.pages.predictions import PAGE as PREDICTIONS_PAGE
    from fleetguard.store.migrations import CURRENT_VERSION

    path = tmp_path / "old.duckdb"
    with Store.open(path, schema_version_target=16) as old:
        # A new store has every column from its CREATE; one made by the version before 17 lacked this one.
        old.connection.execute("ALTER TABLE predictions DROP COLUMN base_rate")
        old.connection.execute(
            "INSERT INTO predictions VALUES "
            "(to_timestamp(1790000000 - 60), 'n1', 'GPU-1', 0.9, 1, 'm', 24, '{}')"
        )
    with Store.open(path, read_only=True) as store:
        ctx = create_app(store, load_config(None), now=lambda: 1_790_000_000.0).server.config[
            "fleetguard.dashboard"
        ]
        body = render_safely(PREDICTIONS_PAGE, ctx, {})
    text = str(body.children)
    assert text.startswith("this page could not be drawn: the store is at schema version 16")
    assert f"older than this fleetguard's {CURRENT_VERSION}" in text and "Binder" not in text


def _series(n: int) -> GpuSeries:
    ts = [1_800_000_000.0 + 60 * i for i in range(n)]
    ones: list[float | None] = [1.0] * n
    counts: list[int | None] = [0] * n
    return GpuSeries(ts, ones, ones, ones, ones, ones, [0] * n, counts, counts, counts, counts)


def test_the_gpu_figure_puts_every_subject_on_one_shared_time_axis() -> None:
    xid = EventRow(1_800_000_120.0, "h", "xid", 48, 0, None, 1, "kmsg", "double bit ECC")
    figure = gpu_over_time(_series(5), [xid], [(1_800_000_000.0, 0.2), (1_800_000_240.0, 0.7)], 0.5)
    layout = figure["layout"]
    rows = [k for k in layout if k.startswith("yaxis")]
    # 5 telemetry rows, throttle, ECC, remapped rows, risk: one plot, every x axis zooming with the first.
    assert len(rows) == 9
    assert all(layout[f"xaxis{i}"]["matches"] == "x" for i in range(2, 10))
    assert {t["yaxis"] for t in figure["data"]} == {"y", *(f"y{i}" for i in range(2, 10))}
    risk = [t for t in figure["data"] if t["name"] == "risk"]
    assert risk[0]["yaxis"] == "y9" and risk[0]["y"] == [0.2, 0.7]
    threshold = [s for s in layout["shapes"] if s.get("yref") == "y9"]
    assert threshold[0]["y0"] == 0.5
    # The XID's marker crosses every row.
    assert [s["yref"] for s in layout["shapes"] if s["x0"] == "2027-01-15 08:02:00"] == ["paper"]
    # No x axis grows the margin (plotly_white's automargin would lay out and draw the figure twice); the
    # bottom margin holds the labelled axis's two lines (times, and the date under the first).
    assert [layout[f"xaxis{i or ''}"]["automargin"] for i in (0, *range(2, 10))] == [False] * 9
    assert layout["margin"]["b"] >= 45


def test_figures_leave_room_for_their_labels() -> None:
    # Margins that hold the labels: plotly's automargin then finds nothing to grow, and does not lay out
    # and draw the figure a second time.
    short = bar(["a"], [1.0], "red", horizontal=True)["layout"]["margin"]
    long = bar(["sim-host-1269 mlx5_4/1"], [1.0], "red", horizontal=True)["layout"]["margin"]
    assert short["l"] == 60 and long["l"] >= 7 * len("sim-host-1269 mlx5_4/1")
    # A name an agent chose at any length takes at most a bounded share of the figure.
    hostile = bar(["h" * 10_000], [1.0], "red", horizontal=True)["layout"]["margin"]
    assert long["l"] < hostile["l"] <= 320


def test_the_gpu_figure_has_no_risk_row_without_scores() -> None:
    layout = gpu_over_time(_series(3), [])["layout"]
    assert len([k for k in layout if k.startswith("yaxis")]) == 8
    assert layout["annotations"][-1]["text"].startswith("remapped rows")


def test_a_model_that_takes_long_to_build_stays_fresh_longer_so_builds_keep_to_their_share() -> None:
    """The dashboard shares the controller's interpreter with ingest: a build of 3 s (a large fleet, a busy
    machine) every 5 s refresh would take 60% of it. A model stays fresh for its build's time divided by
    MAX_BUILD_SHARE when that is longer than the refresh period."""
    now = [10.0]
    took = [3.0]
    built: list[float] = []

    def build() -> FleetModel:
        now[0] += took[0]  # the build's time passes on the clock the cache reads
        built.append(now[0])
        return FleetModel(now[0], [], [], [], [])

    cache = SnapshotCache(build, max_age_seconds=5.0, clock=lambda: now[0])
    first = cache.get()
    fresh_for = took[0] / MAX_BUILD_SHARE
    assert fresh_for > 5.0
    now[0] += fresh_for - 1.0  # past the refresh period, within the paced one: no rebuild
    assert cache.get() is first and len(built) == 1
    now[0] += 2.0
    assert cache.get() is first  # stale now: served at once, rebuilt beside
    _wait_until_rebuilt(cache, built[0] + fresh_for + 1.0 + took[0])
    assert len(built) == 2
    took[0] = 0.5  # quick builds again: the refresh period paces them
    cache.invalidate()
    cache.get()
    _wait_until_rebuilt(cache, built[1] + took[0])
    now[0] += 6.0  # past the 5 s refresh period (0.5 s / MAX_BUILD_SHARE is less)
    cache.get()
    _wait_until_rebuilt(cache, built[2] + 6.0 + took[0])
    assert len(built) == 4


def test_a_build_that_fails_is_tried_again_no_sooner_than_a_good_one_would_be() -> None:
    """A failing build (the store locked, a query timing out) leaves the model stale; were every request to
    start another, builds would run back to back at the pages' polling rate, whatever MAX_BUILD_SHARE says.
    A failed build paces the next try as a good one paces the next refresh."""
    now = [10.0]
    failing = [False]
    tries: list[float] = []

    def build() -> FleetModel:
        now[0] += 3.0  # the build's time passes on the clock the cache reads, good or not
        tries.append(now[0])
        if failing[0]:
            raise RuntimeError("the store is locked")
        return FleetModel(now[0], [], [], [], [])

    cache = SnapshotCache(build, max_age_seconds=5.0, clock=lambda: now[0])
    first = cache.get()
    fresh_for = 3.0 / MAX_BUILD_SHARE
    failing[0] = True
    now[0] += fresh_for + 1.0
    assert cache.get() is first  # stale: served, and a build tried beside (it fails)
    _wait_no_rebuild()
    assert len(tries) == 2
    for _ in range(5):  # the pages poll: the model is still the old one, but a try was just made
        assert cache.get() is first
        _wait_no_rebuild()
    assert len(tries) == 2
    now[0] += fresh_for + 1.0
    failing[0] = False
    assert cache.get() is first  # tried again, paced, and this time it is built
    _wait_no_rebuild()
    assert len(tries) == 3 and cache.get().now == tries[-1]


def _wait_no_rebuild() -> None:
    deadline = time.monotonic() + 60
    while any(t.name == "fleetguard-dashboard-model" for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
