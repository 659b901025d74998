"""Commands the controller queues for a host, and the agent's acknowledgements of them (both directions)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class CommandKind(StrEnum):
    CHECKPOINT = "checkpoint"  # ask a job's ranks on this host to checkpoint
    RESTART = "restart"  # restart a job's local worker group
    STOP = "stop"  # stop a job (its ranks here, and its scheduler's stop_command)
    CORDON = "cordon"  # run the host's cordon_command
    # Run `fleetguard selfcheck` on the host: the repair loop's check before a drained node returns; the
    # ack carries the verdict (done: passed, failed: the first failure), findings carry the evidence.
    SELFCHECK = "selfcheck"


class CommandOutcome(StrEnum):
    DONE = "done"
    FAILED = "failed"
    REFUSED = "refused"  # not runnable here (no such job, no command configured, unknown kind)
    INTERRUPTED = "interrupted"  # the agent died while running it; not run again (executed at most once)


@dataclass(frozen=True, slots=True)
class HostCommand:
    command_id: str
    kind: CommandKind
    job_id: str | None
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"id": self.command_id, "kind": self.kind.value, "job_id": self.job_id, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class CommandAck:
    command_id: str
    outcome: CommandOutcome
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return {"id": self.command_id, "outcome": self.outcome.value, "detail": self.detail}


MAX_ID_CHARS = 64
MAX_TEXT_CHARS = 1024


def command_from_json(doc: object) -> HostCommand:
    """A command from a reply; ValueError naming what is wrong (the agent skips and counts such a command)."""
    if not isinstance(doc, dict):
        raise ValueError("command: expected an object")
    command_id, kind, job_id, reason = (
        doc.get("id"),
        doc.get("kind"),
        doc.get("job_id"),
        doc.get("reason", ""),
    )
    if not isinstance(command_id, str) or not 0 < len(command_id) <= MAX_ID_CHARS:
        raise ValueError("command.id: expected a short string")
    if kind not in {k.value for k in CommandKind}:
        raise ValueError(f"command.kind: unknown {str(kind)[:32]!r}")
    if job_id is not None and (not isinstance(job_id, str) or len(job_id) > MAX_TEXT_CHARS):
        raise ValueError("command.job_id: expected a string or null")
    if not isinstance(reason, str) or len(reason) > MAX_TEXT_CHARS:
        raise ValueError("command.reason: expected a string")
    return HostCommand(command_id, CommandKind(kind), job_id, reason)


def ack_from_json(doc: object) -> CommandAck:
    """An acknowledgement from a batch; ValueError naming what is wrong (the batch is then refused, 400)."""
    if not isinstance(doc, dict) or set(doc) - {"id", "outcome", "detail"}:
        raise ValueError("acks[]: expected {id, outcome, detail}")
    command_id, outcome, detail = doc.get("id"), doc.get("outcome"), doc.get("detail", "")
    if not isinstance(command_id, str) or not 0 < len(command_id) <= MAX_ID_CHARS:
        raise ValueError("acks[].id: expected a short string")
    if not isinstance(outcome, str) or outcome not in {o.value for o in CommandOutcome}:  # a list: unhashable
        raise ValueError("acks[].outcome: unknown outcome")
    if not isinstance(detail, str) or len(detail) > MAX_TEXT_CHARS:
        raise ValueError("acks[].detail: expected a string")
    return CommandAck(command_id, CommandOutcome(outcome), detail)
