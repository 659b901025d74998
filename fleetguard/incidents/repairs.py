"""Carries out requested repairs with the commands the config names (argv, no shell), or says why not."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from diagnosis.incident import ActionEntry, ActionOutcome
from diagnosis.model import IncidentKey, RepairAction
from fleetguard.settings.diagnosis import DiagnosisConfig

Runner = Callable[[Sequence[str], float], tuple[int, str]]


def run_argv(argv: Sequence[str], timeout_seconds: float) -> tuple[int, str]:
    """Exit status and the tail of the output; 124 on timeout, like timeout(1)."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_seconds, check=False
        )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout_seconds:g} s"
    except OSError as exc:
        return 127, str(exc)
    return done.returncode, (done.stderr or done.stdout)[-400:]


@dataclass
class RepairExecutor:
    config: DiagnosisConfig
    run: Runner = run_argv

    def carry_out(self, entry: ActionEntry, key: IncidentKey) -> tuple[ActionOutcome, str]:
        if entry.action is RepairAction.RESTART_APP:
            return ActionOutcome.SKIPPED, "the training runtime restarts jobs itself (see the actions table)"
        if entry.action is RepairAction.INSPECT:
            return ActionOutcome.SKIPPED, "needs a person: alerted"
        template = self._command(entry.action)
        if not template:
            return ActionOutcome.SKIPPED, f"no diagnosis.{entry.action.value}_command configured"
        argv = [w.replace("{host}", key.host).replace("{component}", key.component_id) for w in template]
        code, output = self.run(argv, self.config.command_timeout_seconds)
        if code == 0:
            return ActionOutcome.SUCCEEDED, output.strip()[-200:]
        return ActionOutcome.FAILED, f"exit {code}: {output.strip()}"[-400:]

    def _command(self, action: RepairAction) -> list[str]:
        if action is RepairAction.RESET_GPU:
            return self.config.reset_gpu_command
        if action is RepairAction.REBOOT_NODE:
            return self.config.reboot_node_command
        if action is RepairAction.DRAIN:
            return self.config.drain_command
        return []
