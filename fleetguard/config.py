"""Configuration: one TOML file, `FLEETGUARD_<SECTION>_<KEY>` environment overrides, defaults for one host.

An invalid config is a ConfigError naming the key and why; the CLI turns it into a non-zero exit.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key (section.key) and the reason."""


@dataclass(frozen=True)
class AgentConfig:
    host: str = ""  # empty: this machine's hostname
    sample_interval_seconds: float = 1.0
    flush_interval_seconds: float = 5.0
    # /metrics is read-only telemetry, so like other Prometheus exporters it listens on every interface.
    metrics_address: str = "0.0.0.0"  # noqa: S104
    metrics_port: int = 9476
    event_dedup_window_seconds: float = 60.0


@dataclass(frozen=True)
class StoreConfig:
    path: str = "var/fleetguard.duckdb"
    retention_days: float = 30.0


@dataclass(frozen=True)
class CollectorsConfig:
    nvml: bool = True
    rdma: bool = True
    kmsg: bool = True
    sysfs_root: str = "/sys"
    kmsg_path: str = "/dev/kmsg"
    kmsg_state_path: str = "var/kmsg.seq"
    nccl_logs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SimulateConfig:
    fleet: str = ""  # "HOSTSxGPUS"; empty = real collectors
    seed: int = 0
    faults: bool = True


@dataclass(frozen=True)
class RuntimeConfig:
    """The training-runtime endpoint (heartbeats from local ranks); loopback only."""

    enabled: bool = True
    port: int = 9477
    restart_grace_seconds: float = 10.0
    restart_command: list[str] = field(default_factory=list)  # argv; empty = kill the local worker group
    cordon_command: list[str] = field(default_factory=list)
    stop_command: list[str] = field(
        default_factory=list
    )  # crash loop: end the job (scancel, kubectl delete job)
    restart_cost_seconds: float = 300.0  # a straggler is acted on once the time it cost exceeds this
    checkpoint_timeout_seconds: float = 120.0  # a restart after a checkpoint request waits at most this
    command_timeout_seconds: float = 60.0  # restart_command / cordon_command / stop_command
    # action policy (diagnosis.runtime_policy.ActionPolicyConfig)
    cooldown_seconds: float = 120.0  # no second restart of a job within this (one fault, one restart)
    max_restarts_without_progress: int = 3  # crash loop: restarts without the checkpoint step advancing
    crash_loop_window_seconds: float = 1800.0  # job without checkpoints: that many restarts within this
    cordon_at_risk_gpu: bool = False  # these three need cordon_command
    cordon_gpu_hang: bool = False
    cordon_stragglers: bool = False
    # PyTorch's flight-recorder dumps (TORCH_NCCL_DEBUG_INFO_TEMP_FILE's directory): read for hang
    # localisation while one job runs on the host; empty: not read
    flight_recorder_dir: str = ""


@dataclass(frozen=True)
class PredictorConfig:
    model_dir: str = ""  # empty: no live scoring (with --simulate a demo model is trained)
    score_interval_seconds: float = 60.0
    risk_threshold: float = 0.5


@dataclass(frozen=True)
class Config:
    agent: AgentConfig = field(default_factory=AgentConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    collectors: CollectorsConfig = field(default_factory=CollectorsConfig)
    simulate: SimulateConfig = field(default_factory=SimulateConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    predictor: PredictorConfig = field(default_factory=PredictorConfig)

    @property
    def host(self) -> str:
        return self.agent.host or socket.gethostname()


ENV_PREFIX = "FLEETGUARD_"


def load_config(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Defaults, then the TOML file, then FLEETGUARD_* variables, then `overrides` ("section.key": value)."""
    raw: dict[str, dict[str, Any]] = {}
    if path is not None:
        p = Path(path)
        try:
            with p.open("rb") as fh:
                doc = tomllib.load(fh)
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {p} does not exist") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p} is not valid TOML: {exc}") from exc
        for section, values in doc.items():
            if not isinstance(values, dict):
                raise ConfigError(f"{section}: expected a [{section}] table, got a {type(values).__name__}")
            raw.setdefault(section, {}).update(values)
    for key, text in _env_overrides(os.environ if env is None else env).items():
        section, _, name = key.partition(".")
        raw.setdefault(section, {})[name] = _ENV_TEXT(text)
    for key, value in (overrides or {}).items():
        section, _, name = key.partition(".")
        raw.setdefault(section, {})[name] = value
    return _build(raw)


class _EnvText(str):
    """A value that came from the environment: still text, converted to the key's type when validated."""


def _ENV_TEXT(text: str) -> _EnvText:
    return _EnvText(text)


def _env_overrides(env: Mapping[str, str]) -> dict[str, str]:
    hints = typing.get_type_hints(Config)
    out = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        section, _, key = name[len(ENV_PREFIX) :].lower().partition("_")
        # Only variables naming a config key count: the training client shares the prefix
        # (FLEETGUARD_AGENT_URL, FLEETGUARD_JOB_ID), so anything else is not ours to reject.
        if section in hints and key in {f.name for f in dataclasses.fields(hints[section])}:
            out[f"{section}.{key}"] = value
    return out


def _build(raw: Mapping[str, Mapping[str, Any]]) -> Config:
    section_types = {f.name: f for f in dataclasses.fields(Config)}
    built: dict[str, Any] = {}
    for section, values in raw.items():
        if section not in section_types:
            raise ConfigError(f"{section}: unknown section (known: {', '.join(sorted(section_types))})")
        cls = typing.get_type_hints(Config)[section]
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in values.items():
            if key not in known:
                raise ConfigError(f"{section}.{key}: unknown key (known: {', '.join(sorted(known))})")
            kwargs[key] = _coerce(f"{section}.{key}", value, hints[key])
        built[section] = cls(**kwargs)
    config = Config(**built)
    _validate(config)
    return config


def _coerce(key: str, value: Any, expected: Any) -> Any:
    from_env = isinstance(value, _EnvText)
    if expected is bool:
        if from_env:
            lowered = value.strip().lower()
            if lowered in {"1", "true", "yes", "on"}:
                return True
            if lowered in {"0", "false", "no", "off"}:
                return False
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if expected is int:
        if from_env:
            try:
                return int(value)
            except ValueError:
                pass
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if expected is float:
        if from_env:
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if expected is str:
        if isinstance(value, str):
            return str(value)
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if typing.get_origin(expected) is list:
        if from_env:
            # Environment lists are whitespace-separated argv-like words.
            return value.split()
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise ConfigError(f"{key}: expected a list of strings, got {value!r}")
    raise ConfigError(f"{key}: unsupported type {expected!r}")


def _validate(config: Config) -> None:
    def need(ok: bool, key: str, why: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {why}")

    need(config.agent.sample_interval_seconds > 0, "agent.sample_interval_seconds", "must be > 0")
    need(config.agent.flush_interval_seconds > 0, "agent.flush_interval_seconds", "must be > 0")
    need(0 <= config.agent.metrics_port <= 65535, "agent.metrics_port", "must be a TCP port, 0-65535")
    need(config.agent.event_dedup_window_seconds >= 0, "agent.event_dedup_window_seconds", "must be >= 0")
    need(config.store.retention_days > 0, "store.retention_days", "must be > 0")
    need(bool(config.store.path), "store.path", "must not be empty")
    need(0 <= config.runtime.port <= 65535, "runtime.port", "must be a TCP port, 0-65535")
    rt = config.runtime
    need(rt.restart_grace_seconds >= 0, "runtime.restart_grace_seconds", "must be >= 0")
    need(rt.restart_cost_seconds >= 0, "runtime.restart_cost_seconds", "must be >= 0")
    need(rt.checkpoint_timeout_seconds >= 0, "runtime.checkpoint_timeout_seconds", "must be >= 0")
    need(rt.command_timeout_seconds > 0, "runtime.command_timeout_seconds", "must be > 0")
    need(rt.cooldown_seconds >= 0, "runtime.cooldown_seconds", "must be >= 0")
    need(rt.max_restarts_without_progress >= 1, "runtime.max_restarts_without_progress", "must be >= 1")
    need(rt.crash_loop_window_seconds > 0, "runtime.crash_loop_window_seconds", "must be > 0")
    for switch in ("cordon_at_risk_gpu", "cordon_gpu_hang", "cordon_stragglers"):
        need(
            not getattr(rt, switch) or bool(rt.cordon_command),
            f"runtime.{switch}",
            "needs runtime.cordon_command (without it nothing is cordoned)",
        )
    need(0.0 <= config.predictor.risk_threshold <= 1.0, "predictor.risk_threshold", "must be within 0..1")
    need(config.predictor.score_interval_seconds > 0, "predictor.score_interval_seconds", "must be > 0")
    if config.simulate.fleet:
        from collectors.simulated import parse_fleet_spec

        try:
            parse_fleet_spec(config.simulate.fleet)
        except ValueError as exc:
            raise ConfigError(f"simulate.fleet: {exc}") from exc
