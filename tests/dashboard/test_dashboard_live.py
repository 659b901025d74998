"""What a live refresh sends (only the slots that changed, the whole body when the page's shape changed),
and the pure parts that make pages read right: the heat map's scale, dead ranks apart from hangs, GPUs
named by their index beside their UUIDs."""

from __future__ import annotations

from typing import Any

import dash
import pytest
from dash import html

from dashboard.components import Col, gpu_text, graph, served_table, stat_card, table
from dashboard.figures import MAX_LABELLED_RANKS, STEP_DECIMALS, centred_range, rank_ticks, step_heatmap
from dashboard.live_slots import SlotKind, mark
from dashboard.pages.jobs import troubles
from dashboard.pages.live import plan_refresh
from dashboard.queries.findings import FindingRow
from dashboard.queries.jobs import StepGrid

COLS = [Col("host", "host"), Col("GPUs", "gpus", "int")]


def _page(rows: list[dict[str, Any]], hosts: str = "3", title: str = "Hosts", y: float = 1.0) -> Any:
    figure = {"data": [{"type": "scatter", "x": [1, 2], "y": [y, y]}], "layout": {"height": 200}}
    return [
        html.H1(title),
        stat_card("Hosts", hosts, "reporting"),
        table("hosts-table", COLS, rows),
        graph(figure, "plot"),
    ]


ROWS = [{"host": "a", "gpus": 8}, {"host": "b", "gpus": 8}]


def test_a_page_unchanged_since_the_last_refresh_sends_nothing_and_keeps_when_its_data_changed() -> None:
    first = plan_refresh("p", _page(ROWS), None, now=100.0)
    again = plan_refresh("p", _page(ROWS), first.held, now=160.0)
    assert again.body is None and again.updates == {} and not again.changed
    assert again.held["changed"] == 100.0


def test_changed_rows_are_sent_to_their_table_alone() -> None:
    first = plan_refresh("p", _page(ROWS), None, now=100.0)
    rows = [*ROWS, {"host": "c", "gpus": 4}]
    again = plan_refresh("p", _page(rows), first.held, now=160.0)
    assert again.body is None and again.changed
    assert again.updates == {(SlotKind.TABLE, "hosts-table"): rows}
    assert again.held["changed"] == 160.0


def test_a_card_value_is_sent_as_text() -> None:
    first = plan_refresh("p", _page(ROWS), None, now=100.0)
    again = plan_refresh("p", _page(ROWS, hosts="4"), first.held, now=160.0)
    assert again.body is None
    assert list(again.updates.values()) == ["4"]
    assert next(iter(again.updates))[0] == SlotKind.TEXT


def test_new_traces_under_the_same_layout_are_a_patch_of_the_figure_data_only() -> None:
    first = plan_refresh("p", _page(ROWS), None, now=100.0)
    again = plan_refresh("p", _page(ROWS, y=2.0), first.held, now=160.0)
    patch = again.updates[(SlotKind.FIGURE, "plot")]
    assert isinstance(patch, dash.Patch)
    operations = patch.to_plotly_json()["operations"]
    assert [(o["operation"], o["location"]) for o in operations] == [("Assign", ["data"])]
    assert operations[0]["params"]["value"][0]["y"] == [2.0, 2.0]


def test_a_page_whose_shape_changed_is_sent_whole() -> None:
    first = plan_refresh("p", _page(ROWS), None, now=100.0)
    body = _page(ROWS, title="Hosts (1 silent)")
    again = plan_refresh("p", body, first.held, now=160.0)
    assert again.body is body and again.updates == {}


def test_a_browser_holding_nothing_or_garbage_gets_the_whole_body() -> None:
    for held in (None, "x", {"shape": 3, "slots": "y"}):
        assert plan_refresh("p", _page(ROWS), held, now=1.0).body is not None


def test_slots_are_named_by_page_and_table_id() -> None:
    body = _page(ROWS)
    live = mark(body, "fleet")
    assert set(live.slots) == {
        (SlotKind.TEXT, "text-1"),
        (SlotKind.TEXT, "text-2"),
        (SlotKind.TABLE, "hosts-table"),
        (SlotKind.FIGURE, "plot"),
    }
    rows = body[2].children
    assert rows.id == {"slot": "table", "page": "fleet", "name": "hosts-table"}
    assert rows.data == ROWS  # the value is back in place after the shape was digested


def test_a_served_table_holds_no_rows_and_its_slot_is_the_round_it_shows() -> None:
    live = mark([served_table("risks", COLS, "round-1")], "predictions")
    assert set(live.slots) == {(SlotKind.BLOCKS, "risks")}
    assert live.slots[(SlotKind.BLOCKS, "risks")].value == "round-1"
    rows = served_table("risks", COLS, "round-1").children[1]
    assert rows.data == [] and (rows.page_action, rows.sort_action, rows.filter_action) == ("custom",) * 3


def test_a_new_round_in_a_served_table_sends_only_its_slot() -> None:
    first = plan_refresh("p", [served_table("risks", COLS, "round-1")], None, now=100.0)
    again = plan_refresh("p", [served_table("risks", COLS, "round-2")], first.held, now=160.0)
    assert again.body is None and again.changed
    assert again.updates == {(SlotKind.BLOCKS, "risks"): "round-2"}


def test_every_table_has_its_headers_even_with_no_rows() -> None:
    small = table("empty", COLS, [])
    assert [th.children for th in small.children[0].children.children.children] == ["host", "GPUs"]
    served = served_table("empty", COLS, "").children[1]
    assert [c["name"] for c in served.columns] == ["host", "GPUs"]


def test_rows_arriving_in_an_empty_table_send_the_page_whole() -> None:
    first = plan_refresh("p", _page([]), None, now=100.0)
    again = plan_refresh("p", _page(ROWS), first.held, now=160.0)
    assert again.body is not None and again.changed


def test_identical_ranks_fill_a_tenth_of_the_median_each_way_not_the_whole_scale() -> None:
    # The case: 0.1026-0.1032 s, noise, coloured from one end of the scale to the other before.
    zmin, zmax = centred_range([0.1026, 0.1029, 0.1032, 0.1028])
    median = 0.10285
    assert zmin == pytest.approx(median * 0.9) and zmax == pytest.approx(median * 1.1)


def test_a_straggler_sets_the_span_and_the_median_stays_in_the_middle() -> None:
    zmin, zmax = centred_range([1.0, 1.0, 1.0, 1.6, None])
    assert (zmin, zmax) == pytest.approx((0.4, 1.6))


def test_a_rank_far_slower_than_the_median_saturates_rather_than_push_the_scale_below_zero() -> None:
    assert centred_range([1.0, 1.0, 5.0]) == pytest.approx((0.0, 2.0))
    assert centred_range([]) == (0.0, 1.0)


def test_the_heat_map_uses_the_centred_range() -> None:
    grid = StepGrid([0, 1], [0.0, 60.0], [[1.0, 1.0], [1.0, 1.3]])
    trace = step_heatmap(grid)["data"][0]
    assert (trace["zmin"], trace["zmax"], trace["zauto"]) == (pytest.approx(0.7), pytest.approx(1.3), False)


def test_a_small_job_labels_every_rank_a_large_one_every_kth() -> None:
    assert rank_ticks(MAX_LABELLED_RANKS) == {}
    ticks = rank_ticks(256)
    assert ticks == {"tickmode": "linear", "tick0": 0, "dtick": 4}
    assert 256 / ticks["dtick"] <= MAX_LABELLED_RANKS
    assert rank_ticks(MAX_LABELLED_RANKS + 1)["dtick"] == 2
    grid = StepGrid(list(range(256)), [0.0, 60.0], [[1.0, 1.0] for _ in range(256)])
    axis = step_heatmap(grid)["layout"]["yaxis"]
    assert (axis["type"], axis["dtick"]) == ("category", 4)


def _finding(kind: str, rank: int) -> FindingRow:
    return FindingRow(
        ts=1.0,
        finding_id=f"{kind}/{rank}",
        kind=kind,
        severity="critical",
        subject=f"job/j/rank/{rank}",
        summary="",
        host="h",
        job_id="j",
        rank=rank,
        gpu_uuid=None,
        evidence_json="{}",
    )


def test_a_dead_rank_is_a_death_not_a_hang() -> None:
    found = troubles([_finding("dead_rank", 3), _finding("hung_rank", 1), _finding("straggler", 2)])
    assert [f.rank for f in found.deaths] == [3]
    assert [f.rank for f in found.hangs] == [1]
    assert [f.rank for f in found.stragglers] == [2]


def test_a_gpu_is_named_by_its_index_beside_its_uuid() -> None:
    assert gpu_text("GPU-abc", {"GPU-abc": "GPU 2"}) == "GPU 2 · GPU-abc"
    assert gpu_text("GPU-gone", {}) == "GPU-gone"


def test_the_heat_map_sends_step_times_to_the_decimals_its_hover_shows() -> None:
    grid = StepGrid([0], [0.0, 60.0], [[1.234567891, None]])
    trace = step_heatmap(grid)["data"][0]
    assert trace["z"] == [[1.2346, None]]
    assert f"%{{z:.{STEP_DECIMALS}f}}" in trace["hovertemplate"]
