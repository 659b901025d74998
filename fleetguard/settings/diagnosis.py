"""The [diagnosis] config section (how incidents run, how repairs are carried out) and [policy]."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DiagnosisConfig:
    enabled: bool = True
    policy_file: str = ""  # a whole or partial policy overlaid on data/policy.toml; empty: none
    interval_seconds: float = 5.0  # how often new records are turned into incidents
    # Commands (argv, run without a shell) that carry out repairs; {host} and {component} are filled in each
    # argument (fleetguard.argv.REPAIR_PLACEHOLDERS; any other placeholder is refused when the config loads).
    # Without one, the action is recorded in the ledger as skipped (nothing is done).
    reset_gpu_command: list[str] = field(default_factory=list)
    reboot_node_command: list[str] = field(default_factory=list)
    drain_command: list[str] = field(default_factory=list)
    command_timeout_seconds: float = 120.0


@dataclass(frozen=True)
class PolicyOverrides:
    """[policy] tables of the config, the same layout as data/policy.toml; validated by the policy loader."""

    tables: Mapping[str, Any] = field(default_factory=dict)


def parse_policy_section(values: Mapping[str, Any]) -> PolicyOverrides:
    return PolicyOverrides(tables=dict(values))
