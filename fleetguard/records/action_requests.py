"""What the runtime's executor is asked to do, and on whose word: the host's own policy (a finding is the
evidence) or the fleet controller (a command is). Not a table of its own: each request ends as one
`ActionRecord` row in the action ledger, whose `finding_id` names that evidence."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# The ledger's `finding_id` for an action a controller command asked for: "controller:<command id>". Kept as
# the controller and the dashboard already read it (the ledger's rows are unchanged).
CONTROLLER_EVIDENCE_PREFIX = "controller:"


class ActionKind(StrEnum):
    CHECKPOINT = "checkpoint"
    RESTART = "restart"
    CORDON = "cordon"
    STOP_CRASH_LOOP = "stop_crash_loop"
    NONE = "none"  # the policy chose not to act; recorded with why


@dataclass(frozen=True, slots=True)
class ActionRequest:
    """What to do, to which job, and why. `finding_id`: the finding that is the evidence (the host's own
    policy); `command_id`: the controller command that asked for it (its evidence is on the controller)."""

    action: ActionKind
    job_id: str
    finding_id: str | None
    reason: str
    rank: int | None = None  # the rank the finding names, for {rank}/{pid}
    host: str | None = None  # cordon: the host to cordon (default: this agent's host)
    command_id: str | None = None

    def __post_init__(self) -> None:
        if self.command_id is not None and self.finding_id is not None:
            raise ValueError("an action request answers a finding or a controller command, not both")

    @classmethod
    def for_command(
        cls, action: ActionKind, job_id: str | None, command_id: str, reason: str, host: str
    ) -> ActionRequest:
        """The request a controller command makes of this host's runtime."""
        return cls(action, job_id or "", None, reason, host=host, command_id=command_id)

    @property
    def evidence_id(self) -> str | None:
        """The ledger's `finding_id`: the finding, or "controller:<command id>" for a controller's command."""
        if self.command_id is not None:
            return f"{CONTROLLER_EVIDENCE_PREFIX}{self.command_id}"
        return self.finding_id
