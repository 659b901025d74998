"""Where the host's training runtime is found once it runs.

The runtime starts with the agent's daemon (fleetguard.runtime.extension), after the parts that need it were
built: the banner names its endpoint, a controller's commands run through it (fleetguard.shipping.agent_side),
`up`'s scoring asks it to checkpoint. They share one slot, filled at start and emptied at stop; it sits in
the ground layer so that none of them imports another to reach the service.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from fleetguard.records.action_requests import ActionRequest
from fleetguard.records.findings import ActionRecord


class HostRuntime(Protocol):
    """The running runtime as its neighbours use it (fleetguard.runtime.service.RuntimeService)."""

    @property
    def endpoint(self) -> str: ...

    def run_actions(self, requests: Sequence[ActionRequest]) -> list[ActionRecord]: ...

    def stop(self) -> None: ...


@dataclass
class RuntimeSlot:
    """The runtime while it runs; None before it started and after it stopped."""

    service: HostRuntime | None = None
