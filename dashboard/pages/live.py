"""How a page is drawn: a layout rendered fresh per request (`page_layout`, served by `dashboard.router`)
and a callback that re-renders its body on every refresh tick, both from the same `render(ctx, params)`."""

from __future__ import annotations

import contextlib
import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import dash
import duckdb
from dash import Input, Output, State, html

from dashboard.components import live_page
from dashboard.context import DashboardContext, current
from dashboard.live_slots import PROPERTY, SlotKind, mark, pattern
from fleetguard.store import schema_behind

log = logging.getLogger(__name__)

Params = Mapping[str, str]
MAX_PARAM_CHARS: Final = 256


@dataclass(frozen=True)
class PageSpec:
    page_id: str  # also the prefix of the page's component ids
    name: str
    path: str
    render: Callable[[DashboardContext, Params], Any]
    path_template: str | None = None
    path_vars: tuple[str, ...] = ()  # from path_template; Dash hands them over still percent-encoded
    query: tuple[str, ...] = ()  # query-string keys the page reads (Dash decodes those)
    nav: bool = True
    static: Callable[[DashboardContext, Params], Any] | None = None  # drawn once, outside the refreshed body
    callbacks: Callable[[dash.Dash], None] | None = None  # the page's own callbacks (forms)


def clean_params(spec: PageSpec, given: Mapping[str, Any]) -> dict[str, str]:
    """Only the page's own parameters, as bounded text: anything else in the URL is ignored."""
    out = {}
    for name in (*spec.path_vars, *spec.query):
        value = given.get(name)
        text = value if isinstance(value, str) else ""
        if name in spec.path_vars:
            text = urllib.parse.unquote(text)
        out[name] = text[:MAX_PARAM_CHARS]
    return out


def stored_params(spec: PageSpec, key: object) -> dict[str, str]:
    """The params the layout stored in the page (already decoded), bounded again: the browser sent them."""
    given = key if isinstance(key, dict) else {}
    return {
        n: v[:MAX_PARAM_CHARS] if isinstance(v := given.get(n), str) else ""
        for n in (*spec.path_vars, *spec.query)
    }


def render_safely(spec: PageSpec, ctx: DashboardContext, params: Params) -> Any:
    """The page body, or one line saying why it could not be drawn (the traceback goes to the log only)."""
    try:
        return spec.render(ctx, params)
    except Exception as exc:
        log.exception("dashboard page %s failed", spec.page_id)
        why = f"{type(exc).__name__}: {exc}"[:300]
        if isinstance(exc, duckdb.Error):
            with contextlib.suppress(duckdb.Error), ctx.cursor() as cur:
                why = schema_behind(cur) or why  # a read-only dashboard on an older store: say so
        return html.Div(f"this page could not be drawn: {why}", className="error")


def stamp(text: str, refreshes: int) -> html.Span:
    shown = html.Span(text)
    # Which refresh this is: tests and the benchmark tell one answer from the next by it.
    setattr(shown, "data-refresh", str(refreshes))  # a data-* attribute has no keyword argument
    return shown


def clock_text(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ts)) + " UTC"


@dataclass(frozen=True)
class Refresh:
    """What one refresh sends: the whole body (None: keep it) or the changed slots, and what the browser
    keeps for the next one."""

    body: Any
    updates: dict[tuple[SlotKind, str], Any]
    held: dict[str, Any]
    changed: bool


def plan_refresh(page_id: str, rendered: Any, held: object, now: float) -> Refresh:
    """Compare a new render with what the browser holds (`held`: the page's shape store) and say what to
    send: the changed slots when the shape is the same, else the whole body."""
    live = mark(rendered, page_id)
    before = held if isinstance(held, dict) else {}
    held_slots = before.get("slots")
    old: dict[str, str] = held_slots if isinstance(held_slots, dict) else {}
    new = live.digests()
    changed_at = before.get("changed")
    same_shape = before.get("shape") == live.shape and set(old) == set(new)
    changed = not same_shape or old != new
    kept = {
        "shape": live.shape,
        "slots": new,
        "changed": now if changed or not isinstance(changed_at, int | float) else changed_at,
    }
    if not same_shape:
        return Refresh(rendered, {}, kept, True)
    updates: dict[tuple[SlotKind, str], Any] = {}
    for key, slot in live.slots.items():
        was = old.get(f"{key[0].value}/{key[1]}", "")
        if was == slot.digest + slot.layout_digest:
            continue
        if slot.kind == SlotKind.FIGURE and was.endswith(slot.layout_digest) and slot.layout_digest:
            traces = dash.Patch()
            traces["data"] = slot.value["data"]  # same layout: only the traces change, zoom stays
            updates[key] = traces
        else:
            updates[key] = slot.value
    return Refresh(None, updates, kept, changed)


def _slot_outputs(page_id: str) -> list[Output]:
    return [Output(pattern(kind, page_id, dash.ALL), PROPERTY[kind]) for kind in SlotKind]


def _slot_values(refresh: Refresh, listed: list[Any]) -> list[list[Any]]:
    """The value of each slot the browser has (in the order Dash lists them), or no_update."""
    out = []
    for kind, outputs in zip(SlotKind, listed, strict=True):
        out.append([refresh.updates.get((kind, str(o["id"].get("name"))), dash.no_update) for o in outputs])
    return out


def page_layout(spec: PageSpec, ctx: DashboardContext, params: Params) -> html.Div:
    """The page as first drawn (`params` from `clean_params`): its body, what the browser keeps of it for
    the first refresh, and the refresh's controls."""
    static = spec.static(ctx, params) if spec.static is not None else None
    body = render_safely(spec, ctx, params)
    now = ctx.now()
    held = plan_refresh(spec.page_id, body, None, now).held
    shown = stamp(f"loaded {clock_text(now)}", 0)
    return live_page(spec.page_id, params, body, held, shown, ctx.refresh_seconds, static)


def register(app: dash.Dash, spec: PageSpec) -> None:
    """The page's refresh callback and its own (forms); its first drawing is `page_layout`, called by the
    router (`dashboard.router`)."""

    @app.callback(  # type: ignore[misc]
        Output(f"{spec.page_id}-body", "children"),
        Output(f"{spec.page_id}-stamp", "children"),
        Output(f"{spec.page_id}-shape", "data"),
        *_slot_outputs(spec.page_id),
        Input(f"{spec.page_id}-tick", "n_intervals"),
        Input(f"{spec.page_id}-refresh", "n_clicks"),
        State(f"{spec.page_id}-key", "data"),
        State(f"{spec.page_id}-shape", "data"),
        prevent_initial_call=True,
    )
    def refresh(ticks: int, clicks: int, key: Any, held: Any) -> tuple[Any, ...]:
        ctx = current()
        now = ctx.now()
        plan = plan_refresh(spec.page_id, render_safely(spec, ctx, stored_params(spec, key)), held, now)
        changed = plan.held["changed"]
        text = f"checked {clock_text(now)} · data changed {clock_text(changed)}"
        shown = stamp(text, (ticks or 0) + (clicks or 0))
        body = dash.no_update if plan.body is None else plan.body
        listed = dash.callback_context.outputs_list[3:]
        return (body, shown, plan.held, *_slot_values(plan, listed))

    if spec.callbacks is not None:
        spec.callbacks(app)
