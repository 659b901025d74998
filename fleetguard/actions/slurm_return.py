"""The way back to service: a node fleetguard drained returns to Slurm only when the incident that drained it
has resolved, no other open incident on the host asks for a host-level repair, and a self-check passes.

It reconciles what Slurm says with what the store says, rather than reacting to one event, so that it holds
through restarts of fleetguard or slurmctld: each pass reads the node, reads the incidents, and either does
nothing, says what it waits for, or runs the self-check and resumes. A node fleetguard did not drain is never
touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import duckdb

from diagnosis.incident import ACTIVE_STATES
from diagnosis.model import RepairAction
from fleetguard.actions.slurm import SlurmError, SlurmNodes, SlurmOutcome
from fleetguard.settings.actions import SlurmConfig

# Open incidents with these actions keep a host out of service, whoever drained it.
HOST_REPAIRS = frozenset(
    {
        RepairAction.DRAIN,
        RepairAction.DOWN,
        RepairAction.REBOOT_NODE,
        RepairAction.RESET_GPU,
        RepairAction.INSPECT,
    }
)


@dataclass(frozen=True)
class SelfcheckVerdict:
    """What the way back needs of a self-check (fleetguard.selfcheck runs it): fit or not, and why not."""

    passed: bool
    failure: str = ""  # the first failed check, for the drain reason


# A failed self-check is asked again after this long (a node may have been fixed by hand meanwhile), on the
# controller's fleet loop and on `up`'s own node alike; a pass older than this is not trusted for a resume.
SELFCHECK_RECHECK_SECONDS = 900.0


@dataclass
class ThrottledSelfcheck:
    """A self-check that, once failed, answers with that failure until SELFCHECK_RECHECK_SECONDS have passed
    instead of running its GPU and collective tests again on every pass of the way back."""

    run: Callable[[], SelfcheckVerdict]
    now: Callable[[], float]
    recheck_seconds: float = SELFCHECK_RECHECK_SECONDS
    _failed: tuple[float, SelfcheckVerdict] | None = None

    def __call__(self) -> SelfcheckVerdict:
        if self._failed is not None:
            at, verdict = self._failed
            if self.now() - at < self.recheck_seconds:
                return verdict
        verdict = self.run()
        self._failed = None if verdict.passed else (self.now(), verdict)
        return verdict


class ReturnStep(StrEnum):
    IN_SERVICE = "in_service"  # nothing to do
    NOT_OURS = "not_ours"  # drained by someone else: left alone
    INCIDENT_OPEN = "incident_open"  # the incident that drained it is still open
    OTHERS_OPEN = "others_open"  # another open incident on the host asks for a host-level repair
    JOBS_RUNNING = "jobs_running"  # drained while jobs run: the self-check waits for them (it uses the GPUs)
    SELFCHECK_PENDING = "selfcheck_pending"  # asked of the host's agent (the controller): not answered yet
    SELFCHECK_FAILED = "selfcheck_failed"  # stays drained; the reason says why
    RESUMED = "resumed"
    FAILED = "failed"  # Slurm could not be read or did not resume: tried again next pass


@dataclass(frozen=True)
class ReturnResult:
    node: str
    step: ReturnStep
    detail: str
    incident_id: str | None = None
    selfcheck: SelfcheckVerdict | None = None


def incident_state(con: duckdb.DuckDBPyConnection, incident_id: str) -> str | None:
    row = con.execute("SELECT state FROM incidents WHERE incident_id = ?", [incident_id]).fetchone()
    return None if row is None else str(row[0])


def blocking_incidents(con: duckdb.DuckDBPyConnection, host: str, except_id: str) -> list[str]:
    """Open incidents on `host` (other than `except_id`) whose action is a host-level repair."""
    rows = con.execute(
        "SELECT incident_id, fault, action FROM incidents WHERE host = ? AND incident_id <> ? "
        "AND state IN (SELECT unnest(?::VARCHAR[])) ORDER BY first_seen",
        [host, except_id, sorted(s.value for s in ACTIVE_STATES)],
    ).fetchall()
    return [f"{i} ({fault})" for i, fault, action in rows if action in {a.value for a in HOST_REPAIRS}]


@dataclass
class NodeReturner:
    config: SlurmConfig
    selfcheck: Callable[[], SelfcheckVerdict]
    nodes: SlurmNodes | None = None

    def __post_init__(self) -> None:
        if self.nodes is None:
            c = self.config
            self.nodes = SlurmNodes(c.scontrol, c.slurm_conf, c.timeout_seconds)

    def reconcile(
        self,
        con: duckdb.DuckDBPyConnection,
        host: str,
        selfcheck: Callable[[str], SelfcheckVerdict | None] | None = None,
    ) -> ReturnResult:
        """One pass for `host`'s node. `selfcheck`: the verdict for the incident that drained it, or None
        while it is not in yet (the controller asks the host's agent for it); default: run `self.selfcheck`
        here."""
        assert self.nodes is not None
        node = self.config.node_for(host)
        try:
            state = self.nodes.state(node)
        except SlurmError as exc:
            return ReturnResult(node, ReturnStep.FAILED, str(exc))
        if not state.out_of_service:
            return ReturnResult(node, ReturnStep.IN_SERVICE, "in service")
        incident_id = state.incident_id()
        if incident_id is None:
            return ReturnResult(node, ReturnStep.NOT_OURS, f"taken out by someone else: {state.reason}")
        status = incident_state(con, incident_id)
        if status is not None and status in {s.value for s in ACTIVE_STATES}:
            return ReturnResult(node, ReturnStep.INCIDENT_OPEN, f"{incident_id} is {status}", incident_id)
        others = blocking_incidents(con, host, incident_id)
        if others:
            detail = f"waits for {', '.join(others[:5])}"
            return ReturnResult(node, ReturnStep.OTHERS_OPEN, detail, incident_id)
        if state.jobs_running:
            # A drain lets running jobs finish; the self-check's compute and all-reduce would compete with
            # them for the GPUs (and slow or fail either), so it waits until they are gone.
            detail = "waits for its running jobs to finish before the self-check"
            return ReturnResult(node, ReturnStep.JOBS_RUNNING, detail, incident_id)
        report = self.selfcheck() if selfcheck is None else selfcheck(incident_id)
        if report is None:
            return ReturnResult(node, ReturnStep.SELFCHECK_PENDING, "self-check asked for", incident_id)
        if not report.passed:
            first = report.failure or "not passed"
            # The drain reason tells whoever looks at the node why it is still out.
            self.nodes.annotate(node, incident_id, f"self-check failed: {first}")
            return ReturnResult(node, ReturnStep.SELFCHECK_FAILED, first, incident_id, report)
        resumed = self.nodes.resume(node, incident_id)
        if resumed.outcome is SlurmOutcome.RESUMED:
            return ReturnResult(node, ReturnStep.RESUMED, "self-check passed; resumed", incident_id, report)
        return ReturnResult(node, ReturnStep.FAILED, resumed.detail, incident_id, report)
