"""The [actions] config section: where host-level actions go. Today one target, Slurm ([actions.slurm])."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_SLURM_KEYS = frozenset(
    {"enabled", "scontrol", "slurm_conf", "nodes", "timeout_seconds", "resume", "return_interval_seconds"}
)


@dataclass(frozen=True)
class SlurmConfig:
    enabled: bool = False
    scontrol: str = "scontrol"  # path or name of scontrol (run as an argv, never through a shell)
    slurm_conf: str = ""  # SLURM_CONF for scontrol; empty: Slurm's default (/etc/slurm/slurm.conf)
    # Host name -> Slurm node name, where they differ; any other host is its short name (Slurm's convention).
    nodes: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: float = 10.0
    resume: bool = True  # return a node fleetguard drained once its incident resolved and a self-check passed
    # How often the controller walks its drained nodes back (each pass reads their Slurm state).
    return_interval_seconds: float = 30.0

    def node_for(self, host: str) -> str:
        return self.nodes.get(host) or host.split(".", 1)[0]


@dataclass(frozen=True)
class ActionsConfig:
    slurm: SlurmConfig = field(default_factory=SlurmConfig)


def parse_actions(values: Mapping[str, Any]) -> ActionsConfig:
    """The [actions] table; ValueError("actions.<key>: why") for anything unusable."""
    unknown = sorted(set(values) - {"slurm"})
    if unknown:
        raise ValueError(f"actions.{unknown[0]}: unknown key (known: slurm)")
    raw = values.get("slurm", {})
    if not isinstance(raw, Mapping):
        raise ValueError("actions.slurm: expected a table ([actions.slurm])")
    return ActionsConfig(slurm=_parse_slurm(raw))


def _parse_slurm(raw: Mapping[str, Any]) -> SlurmConfig:
    unknown = sorted(set(raw) - _SLURM_KEYS)
    if unknown:
        raise ValueError(f"actions.slurm.{unknown[0]}: unknown key (known: {', '.join(sorted(_SLURM_KEYS))})")
    base = SlurmConfig()
    for key in ("enabled", "resume"):
        if not isinstance(raw.get(key, False), bool):
            raise ValueError(f"actions.slurm.{key}: expected true or false")
    for key in ("scontrol", "slurm_conf"):
        value = raw.get(key, "")
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"actions.slurm.{key}: expected a path")
    scontrol = raw.get("scontrol", base.scontrol)
    if not scontrol:
        raise ValueError("actions.slurm.scontrol: must not be empty")
    timeout = raw.get("timeout_seconds", base.timeout_seconds)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout):
        raise ValueError("actions.slurm.timeout_seconds: expected a number of seconds")
    if not 0.5 <= float(timeout) <= 600:
        raise ValueError("actions.slurm.timeout_seconds: must be between 0.5 and 600")
    interval = raw.get("return_interval_seconds", base.return_interval_seconds)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not math.isfinite(interval):
        raise ValueError("actions.slurm.return_interval_seconds: expected a number of seconds")
    if not 0.5 <= float(interval) <= 86400:
        raise ValueError("actions.slurm.return_interval_seconds: must be between 0.5 and 86400")
    nodes = raw.get("nodes", {})
    if not isinstance(nodes, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v and "\x00" not in v and "=" not in v
        for k, v in nodes.items()
    ):
        raise ValueError('actions.slurm.nodes: expected a table of host = "node name"')
    return SlurmConfig(
        enabled=bool(raw.get("enabled", base.enabled)),
        scontrol=scontrol,
        slurm_conf=raw.get("slurm_conf", base.slurm_conf),
        nodes=dict(nodes),
        timeout_seconds=float(timeout),
        resume=bool(raw.get("resume", base.resume)),
        return_interval_seconds=float(interval),
    )
