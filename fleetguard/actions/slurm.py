"""Slurm as an action target: drain, down and resume a node with `scontrol`, confirmed by reading it back.

Rules that keep fleetguard from fighting the people who run the cluster:
- A drain reason fleetguard writes starts with `fleetguard <incident id>:`; a node drained or downed with any
  other reason is someone else's decision, and fleetguard never resumes it (nor overwrites its reason).
- Every change is idempotent: a node already drained for the same incident is left as it is, and a change
  counts as done only once `scontrol show node` says so.
- `scontrol` runs as an argv list, never through a shell; the reason is cleaned to one printable line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from fleetguard.argv import CommandResult, run_argv

REASON_PREFIX = "fleetguard "
REASON_MAX = 180  # Slurm keeps the reason in a short field; it also appends [user@time]
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]+")
# `scontrol -o show node` prints Key=Value pairs on one line; values may hold spaces (Reason, OS), so a pair
# ends where the next `Key=` begins.
_PAIR = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")
_REASON_SUFFIX = re.compile(r"\s*\[[^\]@]*@[^\]]*\]\s*$")  # "[root@2026-11-25T02:13:37]"

Runner = Callable[[Sequence[str], float, Mapping[str, str] | None], CommandResult]


def run_scontrol(argv: Sequence[str], timeout_seconds: float, env: Mapping[str, str] | None) -> CommandResult:
    return run_argv(argv, timeout_seconds, extra_env=env)


class SlurmOutcome(StrEnum):
    DRAINED = "drained"  # fleetguard drained it now (running jobs finish first)
    DOWNED = "downed"  # fleetguard set it DOWN now (running jobs are killed)
    ALREADY = "already"  # already in that state for this incident: nothing to do
    OTHERS = "others"  # drained or down for a reason fleetguard did not write: left alone
    RESUMED = "resumed"
    NOT_OURS = "not_ours"  # asked to resume a node fleetguard did not take out: refused
    NOT_DRAINED = "not_drained"  # asked to resume a node that is in service: nothing to do
    FAILED = "failed"  # scontrol failed, timed out, or the node did not read back as asked

    @property
    def ok(self) -> bool:
        return self not in (SlurmOutcome.FAILED, SlurmOutcome.NOT_OURS)


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    states: frozenset[str]  # IDLE, MIXED, ALLOCATED, DRAIN, DOWN, NOT_RESPONDING, ... (base + flags)
    reason: str  # without Slurm's "[user@time]" suffix; "" when none

    @property
    def out_of_service(self) -> bool:
        return bool(self.states & {"DRAIN", "DOWN", "DRAINED", "DRAINING", "FAIL"})

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)

    def incident_id(self) -> str | None:
        """The incident whose drain reason this is, when fleetguard wrote it."""
        if not self.ours:
            return None
        head = self.reason[len(REASON_PREFIX) :].split(":", 1)[0].strip()
        return head or None

    @property
    def jobs_running(self) -> bool:
        """DRAINING in Slurm's words: still has jobs (MIXED or ALLOCATED) while draining."""
        return bool(self.states & {"MIXED", "ALLOCATED", "COMPLETING"})


@dataclass(frozen=True, slots=True)
class SlurmResult:
    outcome: SlurmOutcome
    node: str
    detail: str
    state: NodeState | None = None


class SlurmError(Exception):
    """`scontrol` could not be run or did not answer with a node."""


def drain_reason(incident_id: str, summary: str) -> str:
    """`fleetguard <incident id>: <summary>` on one printable line, short enough for Slurm. `=` becomes `:`
    so that `scontrol -o show node` reads the reason back whole (it prints Key=Value pairs)."""
    clean = _UNPRINTABLE.sub(" ", summary).replace("=", ":").strip()
    text = f"{REASON_PREFIX}{_UNPRINTABLE.sub('', incident_id).replace('=', ':')}: {clean}"
    return text[:REASON_MAX].rstrip()


def parse_node(line: str) -> NodeState:
    """One node from `scontrol -o show node NAME`; SlurmError when the line holds none."""
    fields: dict[str, str] = {}
    matches = list(_PAIR.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        fields.setdefault(m.group(1), line[m.end() : end].strip())
    name = fields.get("NodeName", "")
    if not name or "State" not in fields:
        raise SlurmError(f"no node in scontrol's answer: {line.strip()[:200]!r}")
    states = frozenset(s for s in re.split(r"[+*~#%$@!^-]+", fields["State"].upper()) if s)
    reason = _REASON_SUFFIX.sub("", fields.get("Reason", "")).strip()
    return NodeState(name, states, "" if reason in ("(null)", "None") else reason)


@dataclass
class SlurmNodes:
    """The `scontrol` side of one cluster."""

    scontrol: str = "scontrol"
    slurm_conf: str = ""  # SLURM_CONF for scontrol; empty: Slurm's default
    timeout_seconds: float = 10.0
    run: Runner = run_scontrol

    def _scontrol(self, *args: str) -> CommandResult:
        env = {"SLURM_CONF": self.slurm_conf} if self.slurm_conf else None
        return self.run([self.scontrol, *args], self.timeout_seconds, env)

    def state(self, node: str) -> NodeState:
        result = self._scontrol("-o", "show", "node", node)
        if not result.ok:
            raise SlurmError(f"scontrol show node {node}: {_tail(result)}")
        lines = [line for line in result.output.splitlines() if line.startswith("NodeName=")]
        if not lines:
            raise SlurmError(f"scontrol show node {node}: no such node ({_tail(result)})")
        return parse_node(lines[0])

    def take_out(self, node: str, incident_id: str, summary: str, *, down: bool = False) -> SlurmResult:
        """Drain (running jobs finish) or, with `down`, set DOWN (they are killed) for this incident."""
        reason = drain_reason(incident_id, summary)
        try:
            before = self.state(node)
        except SlurmError as exc:
            return SlurmResult(SlurmOutcome.FAILED, node, str(exc))
        if before.out_of_service and not before.ours:
            return SlurmResult(
                SlurmOutcome.OTHERS, node, f"already out of service by someone else: {before.reason}", before
            )
        wanted = "DOWN" if down else "DRAIN"
        if before.incident_id() == incident_id and wanted in before.states:
            return SlurmResult(SlurmOutcome.ALREADY, node, f"already {wanted} for {incident_id}", before)
        result = self._scontrol("update", f"NodeName={node}", f"State={wanted}", f"Reason={reason}")
        if not result.ok:
            return SlurmResult(SlurmOutcome.FAILED, node, f"scontrol update: {_tail(result)}")
        return self._confirm(node, lambda s: wanted in s.states and s.reason == reason, wanted, down)

    def annotate(self, node: str, incident_id: str, summary: str) -> SlurmResult:
        """Rewrite the reason of a node fleetguard took out for `incident_id` (why it is still out); any
        other node is left as it is."""
        try:
            before = self.state(node)
        except SlurmError as exc:
            return SlurmResult(SlurmOutcome.FAILED, node, str(exc))
        if not before.out_of_service or before.incident_id() != incident_id:
            return SlurmResult(SlurmOutcome.NOT_OURS, node, f"not out for {incident_id}: left alone", before)
        reason = drain_reason(incident_id, summary)
        if before.reason == reason:  # said already (a loop pass repeats it): no update, no read back
            return SlurmResult(SlurmOutcome.ALREADY, node, f"reason: {reason}", before)
        result = self._scontrol("update", f"NodeName={node}", f"Reason={reason}")
        if not result.ok:
            return SlurmResult(SlurmOutcome.FAILED, node, f"scontrol update: {_tail(result)}")
        return self._confirm(node, lambda s: s.reason == reason, "REASON", False)

    def resume(self, node: str, incident_id: str | None = None) -> SlurmResult:
        """Return a node fleetguard took out (for `incident_id`, when given) to service; never anyone
        else's."""
        try:
            before = self.state(node)
        except SlurmError as exc:
            return SlurmResult(SlurmOutcome.FAILED, node, str(exc))
        if not before.out_of_service:
            return SlurmResult(SlurmOutcome.NOT_DRAINED, node, "in service already", before)
        if not before.ours or (incident_id is not None and before.incident_id() != incident_id):
            return SlurmResult(
                SlurmOutcome.NOT_OURS, node, f"taken out by someone else, left alone: {before.reason}", before
            )
        result = self._scontrol("update", f"NodeName={node}", "State=RESUME")
        if not result.ok:
            return SlurmResult(SlurmOutcome.FAILED, node, f"scontrol update: {_tail(result)}")
        return self._confirm(node, lambda s: not s.out_of_service, "RESUME", False)

    def _confirm(self, node: str, done: Callable[[NodeState], bool], wanted: str, down: bool) -> SlurmResult:
        try:
            after = self.state(node)
        except SlurmError as exc:
            return SlurmResult(SlurmOutcome.FAILED, node, f"{wanted} sent, not confirmed: {exc}")
        if not done(after):
            states = "+".join(sorted(after.states))
            return SlurmResult(SlurmOutcome.FAILED, node, f"{wanted} sent, node reads {states}", after)
        if wanted == "RESUME":
            return SlurmResult(SlurmOutcome.RESUMED, node, "resumed", after)
        if wanted == "REASON":
            return SlurmResult(SlurmOutcome.ALREADY, node, f"reason: {after.reason}", after)
        outcome = SlurmOutcome.DOWNED if down else SlurmOutcome.DRAINED
        jobs = " (running jobs finish first)" if after.jobs_running else ""
        return SlurmResult(outcome, node, f"{wanted}: {after.reason}{jobs}", after)


def _tail(result: CommandResult) -> str:
    text = " ".join(result.output.split())
    code = "timed out or could not start" if result.returncode is None else f"exit {result.returncode}"
    return f"{code}: {text[-300:]}" if text else code
