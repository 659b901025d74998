"""Cross-host runtime analysis: the straggler and hang detectors (straggler/, pure) fed with the heartbeats,
step timings and collective progress of every host of a job, so a multi-node job is one job and a hang is
localised to the host and rank that caused it.

The detectors are clock-free; they tick at the job's watermark: the oldest send time among the hosts it
runs on, up to which every one of them has shipped. So shipping delay (a flush interval) never looks like a
hang, and a host gone silent stops its jobs' clock instead of making all its ranks "hung" (host_silent says
that). Findings get a `fleet:` id prefix: the agents' own findings about their local ranks are kept too.

Whose records count: a host's records are claims about the ranks it runs (its token proves only its name).
Each rank's owner is decided from every host's claims together (straggler.membership): a host that reports a
job's whole world runs it alone, whatever another host claims; a rank two hosts claim is no one's. Only a
job whose membership is corroborated (several hosts, disjoint ranks, one world size) lets the controller act
on one host because of another host's records.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import duckdb

from diagnosis.fleet_policy import FleetMembership, FleetVerdict, decide_fleet_restart, with_decision
from fleetguard.controller.columns import insert_records
from fleetguard.controller.hosts import HostState
from fleetguard.controller.validate import IngestBatch
from fleetguard.records.findings import FLEET_COPY_PREFIX, Finding
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from fleetguard.shipping.commands import CommandKind
from straggler.membership import JobClaims

if TYPE_CHECKING:
    from straggler.analysis import RuntimeAnalyzer

log = logging.getLogger(__name__)

RUNTIME_TABLES: dict[str, type] = {
    "heartbeats": Heartbeat,
    "step_timings": StepTiming,
    "collective_progress": CollectiveProgress,
}
MAX_QUEUED_RECORDS = 500_000
MAX_JOBS = 10_000
# Jobs one host may open (be the first to report): one compromised host inventing job ids must not fill
# MAX_JOBS and leave every other host's new jobs unwatched.
MAX_JOBS_PER_HOST = 256
JOB_IDLE_SECONDS = 600.0
MAX_WORLD_SIZE = 1 << 20
# Hosts one job's claims are kept for: a real job spans at most a few thousand hosts.
MAX_HOSTS_PER_JOB = 8192


@dataclass
class _Job:
    last_ts: float
    # One analyzer per job, ticked at the job's own watermark: a host that lags (or lies about its send
    # time) stops the clock of the jobs it runs ranks of, never the whole fleet's.
    analyzer: RuntimeAnalyzer
    opened_by: str = ""
    # What each host reported of the job, and so whose records count (straggler.membership)
    claims: JobClaims = field(default_factory=lambda: JobClaims(MAX_HOSTS_PER_JOB))

    @property
    def hosts(self) -> frozenset[str]:
        """The hosts whose records count (they own ranks): the job's clock waits for them."""
        return self.claims.hosts


@dataclass(frozen=True)
class FleetAction:
    """A command the controller's own analysis asks for: to the host that owns the culprit rank."""

    host: str
    kind: CommandKind
    job_id: str
    reason: str


def records_of(batch: IngestBatch) -> Iterator[object]:
    """The runtime records of a checked batch, as record dataclasses."""
    for name, record_type in RUNTIME_TABLES.items():
        columns = batch.tables.get(name)
        if not columns:
            continue
        names = [f.name for f in dataclasses.fields(record_type) if f.name in columns]
        for values in zip(*(columns[n] for n in names), strict=True):
            yield record_type(**dict(zip(names, values, strict=True)))


class FleetRuntime:
    def __init__(
        self,
        host_states: Callable[[], list[HostState]],
        act: Callable[[FleetAction], None] | None = None,
    ) -> None:
        self._host_states = host_states
        self._act = act
        self._queue: deque[tuple[str, object]] = deque()
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self.dropped_records = 0
        # Records about a rank this host does not own (another host runs the whole job, or the rank is
        # contested), or outside the world: a host's token proves which host it is, not which ranks it runs
        # (see docs/controller.md, cross-host trust).
        self.foreign_records = 0
        # Restarts the analysis asked for and the controller withheld: the job's membership is not
        # corroborated (one host's records must not decide an action on another).
        self.withheld_restarts = 0
        self._opened: dict[str, int] = {}  # host -> jobs it opened that are still watched

    def exposition(self) -> list[str]:
        """This analysis's counters for the controller's /metrics."""
        foreign = "fleetguard_controller_runtime_foreign_records_total"
        withheld = "fleetguard_controller_runtime_restarts_withheld_total"
        return [
            f"# HELP {foreign} Runtime records dropped: about a rank the sending host does not own (another "
            "host runs the whole job, or the rank is contested) or outside its world.",
            f"# TYPE {foreign} counter",
            f"{foreign} {self.foreign_records}",
            f"# HELP {withheld} Restarts across hosts the analysis asked for and the controller withheld "
            "(the job's membership was not corroborated).",
            f"# TYPE {withheld} counter",
            f"{withheld} {self.withheld_restarts}",
        ]

    def feed(self, batch: IngestBatch) -> None:
        """On the writer thread, per committed batch: queue its runtime records (bounded)."""
        records = [(batch.host, r) for r in records_of(batch)]
        if not records:
            return
        with self._lock:
            self._queue.extend(records)
            while len(self._queue) > MAX_QUEUED_RECORDS:
                self._queue.popleft()
                self.dropped_records += 1

    def __call__(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        findings = self.step(now)
        if findings:
            insert_records(con, findings)

    def step(self, now: float) -> list[Finding]:
        with self._lock:
            queued, self._queue = self._queue, deque()
        for host, record in queued:
            self._observe(host, record)
        self._forget_idle(now)
        if not self._jobs:
            return []
        sent = {h.host: h.last_sent for h in self._host_states()}
        findings: list[Finding] = []
        for job in list(self._jobs.values()):
            watermark = min((sent.get(h, now) for h in job.hosts), default=now)
            findings += [self._fleet(f) for f in job.analyzer.tick(watermark)]
        return findings

    def _observe(self, host: str, record: object) -> None:
        assert isinstance(record, Heartbeat | StepTiming | CollectiveProgress)
        job = self._jobs.get(record.job_id)
        if job is None:
            if not isinstance(record, Heartbeat) or len(self._jobs) >= MAX_JOBS:
                return  # a job starts with a heartbeat (it carries the world size)
            if self._opened.get(host, 0) >= MAX_JOBS_PER_HOST:
                self.foreign_records += 1
                return
            self._opened[host] = self._opened.get(host, 0) + 1
            from straggler.analysis import RuntimeAnalyzer  # numpy and the detectors: loaded when needed

            job = _Job(record.ts, RuntimeAnalyzer(), opened_by=host)
            self._jobs[record.job_id] = job
            world = _world(record)
            # The whole world is expected to report, through its hosts' agents; until other claims say
            # otherwise, the first heartbeat's world is the job's.
            job.analyzer.register_job(record.job_id, world, record.ts, local_ranks=range(world))
        if isinstance(record, Heartbeat) and not self._claim(job, host, record):
            self.foreign_records += 1
            return
        if job.claims.owner(record.rank) != host:
            # Another host runs the whole job, or the rank is contested, or this host never claimed it with
            # a heartbeat: its records decide nothing.
            self.foreign_records += 1
            return
        job.last_ts = max(job.last_ts, record.ts)
        job.analyzer.observe(record)

    def _claim(self, job: _Job, host: str, hb: Heartbeat) -> bool:
        """Note what `host` says of the job (bounded); when that changes whose records count, the job's
        analysis starts afresh under the new membership. False for a claim that cannot be held."""
        held, reassigned = job.claims.claim(host, hb.rank, _world(hb))
        if reassigned:
            # Records fed under the old owners (a host that spoke first about a rank it does not run) must
            # not linger in the detectors: the job is watched afresh; learned timeouts are kept. A contested
            # rank is not expected to report: no host's word about it counts, so its silence is no hang.
            claims = job.claims
            world, contested = claims.world_size, claims.contested
            expected = (r for r in range(world) if r not in contested)
            job.analyzer.register_job(hb.job_id, world, hb.ts, local_ranks=expected)
        return held

    def _forget_idle(self, now: float) -> None:
        for job_id, job in list(self._jobs.items()):
            if now - job.last_ts > JOB_IDLE_SECONDS:
                del self._jobs[job_id]
                left = self._opened.get(job.opened_by, 0) - 1
                if left > 0:
                    self._opened[job.opened_by] = left
                else:
                    self._opened.pop(job.opened_by, None)

    def _fleet(self, finding: Finding) -> Finding:
        job = self._jobs.get(finding.job_id or "")
        host = finding.host
        if job is not None and finding.rank is not None:
            host = job.claims.owner(finding.rank) or host
        out = replace(finding, finding_id=f"{FLEET_COPY_PREFIX}{finding.finding_id}", host=host)
        decision = decide_fleet_restart(out, _membership(job), controller_acts=self._act is not None)
        if decision.verdict is FleetVerdict.RESTART and self._act is not None:
            # A hang across hosts: only the controller sees which host holds the culprit; that host's agent
            # restarts its part of the job (the others' agents see only ranks waiting in a collective).
            assert decision.host is not None and decision.job_id is not None
            self._act(FleetAction(decision.host, CommandKind.RESTART, decision.job_id, decision.reason))
        elif decision.verdict is FleetVerdict.WITHHELD:
            self.withheld_restarts += 1
            log.warning("job %s: no fleet restart: %s", decision.job_id, decision.reason)
        return with_decision(out, decision)


def _membership(job: _Job | None) -> FleetMembership | None:
    """The job's membership as the fleet policy reads it."""
    if job is None:
        return None
    membership = job.claims.membership()
    return FleetMembership(
        reporting_hosts=len(job.claims.by_host),
        hosts=membership.hosts,
        corroborated=membership.corroborated_multi_host,
        why_not=membership.why_not_corroborated(),
    )


def _world(hb: Heartbeat) -> int:
    return max(1, min(hb.world_size, MAX_WORLD_SIZE))
