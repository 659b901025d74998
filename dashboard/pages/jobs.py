"""`/jobs` and `/jobs/<job>`: training jobs, their ranks by host, the rank x time step heat map, stragglers,
hangs and restarts."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

from dash import dcc, html

from dashboard import figures
from dashboard.components import Col, ago, graph, href, md_link, section, stat_card, table, when
from dashboard.context import DashboardContext
from dashboard.pages.live import PageSpec, Params
from dashboard.queries.findings import FindingRow, recent_findings
from dashboard.queries.jobs import JobSummary, RankRow, Restart, job_actions, job_ranks, jobs, step_grid
from fleetguard.records.evidence import HangEvidence, StragglerEvidence, readable

LIST_WINDOW_SECONDS: Final = 3600.0
WINDOWS: Final = {"15m": 900.0, "1h": 3600.0, "6h": 6 * 3600.0}
DEFAULT_WINDOW: Final = "1h"
QUIET_SECONDS: Final = 60.0
# Finding kinds by what happened to the rank: a hang (stopped, still there) and a death (the process is
# gone) ask different things of an operator, so they are counted apart.
HANG_KINDS: Final = frozenset({"hang_localised", "hung_rank"})
DEATH_KINDS: Final = frozenset({"dead_rank"})


@dataclass(frozen=True)
class JobTroubles:
    stragglers: list[FindingRow]
    hangs: list[FindingRow]
    deaths: list[FindingRow]


def troubles(findings: list[FindingRow]) -> JobTroubles:
    """A job's findings split into stragglers, hangs and deaths (dead ranks), each newest first."""
    return JobTroubles(
        [f for f in findings if f.kind == "straggler"],
        [f for f in findings if f.kind in HANG_KINDS],
        [f for f in findings if f.kind in DEATH_KINDS],
    )


def job_state(j: JobSummary, now: float) -> str:
    if j.errors:
        return f"error ({j.errors} ranks)"
    if j.finished >= j.ranks:
        return "finished"
    if now - j.last_ts > QUIET_SECONDS:
        return "quiet"
    return "running"


def render_list(ctx: DashboardContext, _params: Params) -> Any:
    now = ctx.now()
    with ctx.cursor() as cur:
        job_rows = jobs(cur, now, window=LIST_WINDOW_SECONDS)
        findings = recent_findings(cur, now - LIST_WINDOW_SECONDS, now)
    by_job = Counter((f.job_id, f.kind) for f in findings if f.job_id)
    rows = [
        {
            "job": md_link(j.job_id, href("jobs", j.job_id)),
            "state": job_state(j, now),
            "ranks": j.ranks,
            "world": j.world_size,
            "hosts": j.hosts,
            "step": j.last_step,
            "stragglers": by_job[(j.job_id, "straggler")],
            "hangs": sum(by_job[(j.job_id, k)] for k in HANG_KINDS),
            "deaths": sum(by_job[(j.job_id, k)] for k in DEATH_KINDS),
            "last": ago(now - j.last_ts),
        }
        for j in job_rows
    ]
    cols = [
        Col("job", "job", "link"),
        Col("state", "state"),
        Col("ranks", "ranks", "int"),
        Col("world size", "world", "int"),
        Col("hosts", "hosts", "int"),
        Col("step", "step", "int"),
        Col("straggler findings", "stragglers", "int"),
        Col("hang findings", "hangs", "int"),
        Col("dead rank findings", "deaths", "int"),
        Col("last heartbeat", "last"),
    ]
    running = sum(1 for j in job_rows if job_state(j, now) == "running")
    return [
        html.Div(
            [
                stat_card("Jobs (1 h)", str(len(job_rows)), f"{running} running", card_id="card-jobs-count"),
                stat_card("Ranks", str(sum(j.ranks for j in job_rows)), "reporting heartbeats"),
            ],
            className="cards",
        ),
        section("Jobs", table("jobs-table", cols, rows), section_id="jobs-list"),
    ]


def render_job(ctx: DashboardContext, params: Params) -> Any:
    job_id = params["job"]
    window = params.get("window") if params.get("window") in WINDOWS else DEFAULT_WINDOW
    span = WINDOWS[str(window)]
    now = ctx.now()
    with ctx.cursor() as cur:
        ranks = job_ranks(cur, job_id, now - span, now)
        grid = step_grid(cur, job_id, now - span, now)
        findings = recent_findings(cur, now - span, now, job_id=job_id)
        actions = job_actions(cur, job_id, now - span, now)
    if not ranks:
        return html.Div(
            [
                html.H1(job_id),
                html.Div(f"no heartbeats from job {job_id} in the last {window}", className="empty"),
            ]
        )
    hosts = Counter(r.host for r in ranks)
    found = troubles(findings)
    stragglers = found.stragglers
    restarts = [a for a in actions if a.action in ("restart", "stop_crash_loop")]
    return [
        html.Div(
            [
                html.H1(f"job {job_id}"),
                html.Span(f"{len(ranks)} ranks on {len(hosts)} hosts", className="reason"),
            ],
            className="title-row",
        ),
        html.Div(
            [
                stat_card(
                    "Ranks",
                    str(len(ranks)),
                    ", ".join(f"{h}: {n}" for h, n in sorted(hosts.items())[:4]),
                    card_id="card-job-ranks",
                ),
                stat_card("Step", str(max((r.step or 0) for r in ranks)), "newest reported"),
                stat_card(
                    "Stragglers",
                    str(len({f.rank for f in stragglers})),
                    f"{len(stragglers)} findings",
                    card_id="card-job-stragglers",
                ),
                stat_card(
                    "Hangs", str(len(found.hangs)), "localised or hung ranks", card_id="card-job-hangs"
                ),
                stat_card(
                    "Deaths",
                    str(len({f.rank for f in found.deaths})),
                    f"dead ranks ({len(found.deaths)} findings)",
                    card_id="card-job-deaths",
                ),
                stat_card("Restarts", str(len(restarts)), f"{len(actions)} actions in {window}"),
            ],
            className="cards",
        ),
        html.Div(
            [
                dcc.Link(
                    w,
                    href=f"{href('jobs', job_id)}?window={w}",
                    className="window" + (" active" if w == window else ""),
                )
                for w in WINDOWS
            ],
            className="windows",
        ),
        section(f"Step time per rank ({window})", _heatmap(grid), section_id="job-heatmap"),
        html.Div(
            [
                section("Straggler scores", _stragglers_table(stragglers, now), section_id="job-stragglers"),
                section(
                    "Hangs and dead ranks",
                    _hangs_table([*found.hangs, *found.deaths], now),
                    section_id="job-hangs",
                ),
            ],
            className="two-col",
        ),
        section("Actions and restarts", _actions_table(actions), section_id="job-actions"),
        section("Ranks", _ranks_table(ranks, now), section_id="job-ranks"),
    ]


def _heatmap(grid: Any) -> Any:
    if not grid.ranks:
        return html.Div("no step timings in this window", className="empty")
    return graph(figures.step_heatmap(grid), "job-heatmap-graph")


def _stragglers_table(findings: list[FindingRow], now: float) -> Any:
    newest: dict[int | None, FindingRow] = {}
    for f in findings:
        newest.setdefault(f.rank, f)
    rows = []
    for f in newest.values():
        ev = StragglerEvidence.read(readable(f.evidence_json))
        rows.append(
            {
                "rank": f.rank,
                "host": f.host or "",
                "score": ev.score,
                "slowdown": ev.slowdown,
                "lost": ev.lost_seconds,
                "when": ago(now - f.ts),
            }
        )
    cols = [
        Col("rank", "rank", "int"),
        Col("host", "host"),
        Col("score", "score", "number", 3),
        Col("x peers", "slowdown", "number", 2),
        Col("lost s", "lost", "number", 1),
        Col("when", "when"),
    ]
    return table("job-stragglers-table", cols, rows, page_size=8)


def _hangs_table(findings: list[FindingRow], now: float) -> Any:
    rows = []
    for f in findings:
        hang = HangEvidence.read(readable(f.evidence_json))
        rows.append(
            {
                "when": ago(now - f.ts),
                "kind": hang.hang_kind or f.kind,
                "rank": f.rank if f.rank is not None else ", ".join(str(r) for r in hang.suspect_ranks),
                "host": f.host or "",
                "summary": f.summary,
            }
        )
    cols = [
        Col("when", "when"),
        Col("kind", "kind"),
        Col("rank(s)", "rank"),
        Col("host", "host"),
        Col("summary", "summary", wide=True),
    ]
    return table("job-hangs-table", cols, rows, page_size=8)


def _actions_table(actions: list[Restart]) -> Any:
    rows = [
        {
            "time": when(a.ts),
            "action": a.action,
            "target": a.target,
            "outcome": a.outcome,
            "resumed": a.resumed_step,
            "detail": a.detail[:200],
        }
        for a in actions
    ]
    cols = [
        Col("time (UTC)", "time"),
        Col("action", "action"),
        Col("target", "target"),
        Col("outcome", "outcome"),
        Col("resumed at step", "resumed", "int"),
        Col("detail", "detail", wide=True),
    ]
    return table("job-actions-table", cols, rows, page_size=8)


def _ranks_table(ranks: list[RankRow], now: float) -> Any:
    rows = [
        {
            "rank": r.rank,
            "host": md_link(r.host, href("hosts", r.host)),
            "local": r.local_rank,
            "pid": r.pid,
            "step": r.step,
            "section": r.section or "",
            "status": r.status,
            "last": ago(now - r.last_ts),
        }
        for r in ranks
    ]
    cols = [
        Col("rank", "rank", "int"),
        Col("host", "host", "link"),
        Col("local rank", "local", "int"),
        Col("pid", "pid", "int"),
        Col("step", "step", "int"),
        Col("section", "section"),
        Col("status", "status"),
        Col("last heartbeat", "last"),
    ]
    return table("job-ranks-table", cols, rows, page_size=16)


LIST_PAGE = PageSpec(page_id="jobs", name="Jobs", path="/jobs", render=render_list)
JOB_PAGE = PageSpec(
    page_id="job",
    name="Job",
    path="/jobs/job",
    path_template="/jobs/<job>",
    render=render_job,
    path_vars=("job",),
    query=("window",),
    nav=False,
)
