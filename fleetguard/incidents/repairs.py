"""Carries out requested repairs with the commands the config names (argv, no shell), or says why not."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from diagnosis.incident import ActionEntry, ActionOutcome
from diagnosis.model import IncidentKey, RepairAction
from diagnosis.rules_events import FINDING_FLEET_HOST
from fleetguard.actions.slurm import SlurmNodes, SlurmOutcome
from fleetguard.argv import REPAIR_PLACEHOLDERS, CommandResult, render_argv, run_argv
from fleetguard.settings.actions import SlurmConfig
from fleetguard.settings.diagnosis import DiagnosisConfig

# The one runner of operator commands (fleetguard.argv): no shell, output bounded, a timed-out command's whole
# session killed. A test passes its own.
Runner = Callable[[Sequence[str], float], CommandResult]


@dataclass
class RepairExecutor:
    config: DiagnosisConfig
    run: Runner = run_argv
    # Drain and down go to Slurm when [actions.slurm] is on (instead of diagnosis.drain_command).
    slurm: SlurmConfig | None = None

    def carry_out(self, entry: ActionEntry, key: IncidentKey, summary: str = "") -> tuple[ActionOutcome, str]:
        if key.host == FINDING_FLEET_HOST:
            # No host's name (refused at token issue, agent start and ingest), yet one a command or Slurm
            # could resolve to a machine: `ssh fleet` through a search domain, a case-blind node name.
            return (
                ActionOutcome.SKIPPED,
                "a fleet-wide incident names no host to repair: alerted for a person",
            )
        if entry.action in (RepairAction.DRAIN, RepairAction.DOWN) and self.slurm and self.slurm.enabled:
            return self._slurm(entry, key, summary)
        if entry.action is RepairAction.RESTART_APP:
            return ActionOutcome.SKIPPED, "the training runtime restarts jobs itself (see the actions table)"
        if entry.action is RepairAction.INSPECT:
            return ActionOutcome.SKIPPED, "needs a person: alerted"
        template = self._command(entry.action)
        if not template:
            return ActionOutcome.SKIPPED, f"no diagnosis.{entry.action.value}_command configured"
        # Checked when the config loaded (fleetguard.config), filled per argument: a host or component name
        # stays one argument whatever it holds, and is never read for placeholders itself.
        values = {"host": key.host, "component": key.component_id}
        argv = render_argv(template, values, REPAIR_PLACEHOLDERS)
        result = self.run(argv, self.config.command_timeout_seconds)
        output = result.output.strip()
        if result.ok:
            return ActionOutcome.SUCCEEDED, output[-200:]
        if result.returncode is None:  # it could not start, or timed out: the output says which
            return ActionOutcome.FAILED, output[-400:]
        return ActionOutcome.FAILED, f"exit {result.returncode}: {output}"[-400:]

    def _slurm(self, entry: ActionEntry, key: IncidentKey, summary: str) -> tuple[ActionOutcome, str]:
        assert self.slurm is not None
        nodes = SlurmNodes(self.slurm.scontrol, self.slurm.slurm_conf, self.slurm.timeout_seconds)
        node = self.slurm.node_for(key.host)
        result = nodes.take_out(
            node, entry.incident_id, summary or key.text(), down=entry.action is RepairAction.DOWN
        )
        detail = f"slurm node {node}: {result.detail}"[-400:]
        if result.outcome is SlurmOutcome.OTHERS:
            return ActionOutcome.SKIPPED, detail
        return (ActionOutcome.SUCCEEDED if result.outcome.ok else ActionOutcome.FAILED), detail

    def _command(self, action: RepairAction) -> list[str]:
        if action is RepairAction.RESET_GPU:
            return self.config.reset_gpu_command
        if action is RepairAction.REBOOT_NODE:
            return self.config.reboot_node_command
        if action is RepairAction.DRAIN:
            return self.config.drain_command
        return []
