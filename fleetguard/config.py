"""Configuration: one TOML file, `FLEETGUARD_<SECTION>_<KEY>` environment overrides, defaults for one host.

An invalid config is a ConfigError naming the key and why; the CLI turns it into a non-zero exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import math
import os
import re
import socket
import tomllib
import typing
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetguard.settings.actions import ActionsConfig, parse_actions
from fleetguard.settings.alerts import AlertsConfig, parse_alerts
from fleetguard.settings.diagnosis import DiagnosisConfig, PolicyOverrides, parse_policy_section


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
    # Shipping to a fleet controller (docs/controller.md); empty controller_url: store locally instead.
    controller_url: str = ""
    controller_token_file: str = ""
    spool_dir: str = "var/spool"
    spool_max_bytes: int = 1 << 30
    # Or through NATS JetStream (docs/scale-out.md): transport = "nats" publishes the spooled batches to
    # subject fleetguard.<pool>.<host> on nats_url, as NATS user nats_user (default: the host's name).
    transport: str = "http"  # "http" (controller_url) or "nats" (nats_url)
    pool: str = "default"
    nats_url: str = ""  # nats://HOST:PORT or tls://HOST:PORT, several separated by commas
    nats_user: str = ""
    nats_password_file: str = ""
    nats_creds_file: str = ""  # a NATS .creds file (JWT + nkey seed) instead of user and password

    @property
    def ships_to_controller(self) -> bool:
        """The agent's data goes to a fleet controller (over HTTP or NATS) rather than a local store."""
        return bool(self.controller_url) or self.transport == "nats"


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
    # NVML fields costing 35 us-4 ms of CPU a call (PCIe replay/throughput, violation times, NVLink) are read
    # this often; energy is integrated from power between counter reads (collectors/gpu_sampling.py)
    nvml_slow_interval_seconds: float = 30.0


@dataclass(frozen=True)
class SimulateConfig:
    fleet: str = ""  # "HOSTSxGPUS"; empty = real collectors
    seed: int = 0
    faults: bool = True
    # The fleet starts as if it had run this long: the scripted faults due by then have happened, so a short
    # demo or a test sees incidents at once instead of waiting out the script's first 20-40 s of real time.
    head_start_seconds: float = 0.0


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
    # What local users can make the agent hold (docs/runtime.md, "Limits"): a uid's share is below the total,
    # so one user cannot lock another out; a job silent for job_idle_seconds is forgotten.
    max_jobs_per_uid: int = 16
    max_ranks_per_uid: int = 512
    max_jobs: int = 128
    max_ranks: int = 4096
    job_idle_seconds: float = 900.0


@dataclass(frozen=True)
class PredictorConfig:
    model_dir: str = ""  # empty: no live scoring (with --simulate a demo model is trained)
    score_interval_seconds: float = 60.0
    # Only what the dashboard highlights: which GPUs become at-risk findings is the model's selection rule.
    risk_threshold: float = 0.5
    budget_k: int = 0  # at-risk GPUs per period fleet-wide; 0: the model's own K (its training budget)
    # R: rank each step by the serving model and the R - 1 registry models that served before it, each GPU's
    # within-step rank averaged (the backtest's `xgboost_avg`); 1: the serving model alone
    average_retrains: int = 1
    # Retraining on the store (docs/prediction.md, "Retraining"): every retrain_every a child process trains
    # a candidate on the last train_window and the gate compares it with the serving model on the last
    # evaluate_window of known labels; 0: never. Needs model_dir (models are written and loaded only there).
    retrain_every_seconds: float = 0.0
    train_window_seconds: float = 7 * 86400.0
    evaluate_window_seconds: float = 86400.0
    retrain_model: str = "xgboost"
    # what counts as a failure in the labels: XIDs (comma list; empty: the fatal ones) and event kinds
    failure_xids: str = ""
    failure_kinds: list[str] = field(default_factory=lambda: ["gpu_fallen_off_bus", "gpu_lost"])
    # the training child's bounds: address space, CPU time, wall clock (then it is killed)
    retrain_max_memory_mb: int = 4096
    retrain_max_cpu_seconds: int = 3600
    retrain_timeout_seconds: float = 3600.0


MAX_EDGE_PROCESSES = 16  # [controller] edge_processes: more than the cores of a controller's host is waste


@dataclass(frozen=True)
class ControllerConfig:
    """The fleet controller (`fleetguard controller`): ingest from agents, read API, cross-host analysis."""

    listen: str = "127.0.0.1:9480"  # host:port
    tokens_file: str = "var/controller-tokens.json"
    tls_cert: str = ""  # both or neither: HTTPS with the stdlib's ssl
    tls_key: str = ""
    max_body_bytes: int = 8 << 20  # compressed request body
    max_queue_batches: int = 1024  # accepted, not committed (~250 KB each parsed); past it: 503 + Retry-After
    # Processes that gunzip, decode and check ingest bodies beside the controller's interpreter (0: on its
    # handler threads). Each is ~42 MB; more CPU in all, less under the one interpreter's lock: it made a
    # 2-core controller dearer (BENCHMARKS.md, "The edge in worker processes"), hence off by default.
    edge_processes: int = 0
    # Answer a batch once it is in the controller's ingest journal (controller/journal.py), not once DuckDB
    # has committed it: a commit waits for DuckDB's checkpoints (0.3-1 s at 2,048 hosts), a journal append
    # for one shared fdatasync. Equally durable; the rows reach the store a moment after the answer.
    journal: bool = True
    journal_dir: str = ""  # "": the store's path + ".journal"
    silent_after_seconds: float = 0.0  # 0: three of the host's flush intervals plus 10 s
    correlation_window_seconds: float = 300.0
    correlation_min_hosts: int = 3
    # With pool and nats_url: also ingest pool's batches from NATS JetStream (docs/scale-out.md).
    pool: str = ""
    nats_url: str = ""
    nats_user: str = ""
    nats_password_file: str = ""
    nats_creds_file: str = ""
    nats_stream: str = "FLEETGUARD"
    # The newest wire version this controller tells its pool's NATS agents to send (fleetguard.shipping.
    # wire_advert). 1 keeps the pool on version 1: set it, and let the stream drain, before replacing this
    # controller with a release that reads version 1 only (it would terminate version-2 messages).
    nats_wire: int = 2


@dataclass(frozen=True)
class DashboardConfig:
    """The operators' web dashboard; reads the store, writes only operator actions (with the token)."""

    enabled: bool = True
    address: str = "127.0.0.1"  # loopback unless configured: the pages show the whole fleet
    port: int = 9481
    operator_token_file: str = ""  # empty: read-only (acknowledge / silence / resolve refused)
    refresh_seconds: float = 5.0
    # /policy replays recorded history with this policy beside the one in force (empty: no comparison)
    candidate_policy_file: str = ""
    replay_hours: float = 1.0  # how much history that replay reads (it runs on demand, one at a time)


@dataclass(frozen=True)
class Config:
    agent: AgentConfig = field(default_factory=AgentConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    collectors: CollectorsConfig = field(default_factory=CollectorsConfig)
    simulate: SimulateConfig = field(default_factory=SimulateConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    predictor: PredictorConfig = field(default_factory=PredictorConfig)
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    diagnosis: DiagnosisConfig = field(default_factory=DiagnosisConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    actions: ActionsConfig = field(default_factory=ActionsConfig)
    policy: PolicyOverrides = field(default_factory=PolicyOverrides)

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


# FLEETGUARD_* variables that are not config keys: the training client's (fleetguard/client.py).
# Any other FLEETGUARD_* variable must name a config key, so a typo is refused instead of silently ignored.
NOT_CONFIG_VARIABLES = frozenset({"FLEETGUARD_AGENT_URL", "FLEETGUARD_JOB_ID"})


def _env_overrides(env: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and name not in NOT_CONFIG_VARIABLES:
            out[_env_key(name)] = value
    return out


def _env_key(name: str) -> str:
    """The key ("section.key") FLEETGUARD_<SECTION>_<KEY> sets, or a ConfigError naming the variable."""
    hints = typing.get_type_hints(Config)
    rest = name[len(ENV_PREFIX) :].lower()
    # The longest matching section wins, so a section whose name holds "_" is still found.
    sections = sorted((s for s in hints if rest.startswith(s + "_")), key=len, reverse=True)
    if not sections:
        raise ConfigError(
            f"{name}: no such setting (FLEETGUARD_<SECTION>_<KEY>; sections: {', '.join(sorted(hints))})"
        )
    section = sections[0]
    key = rest[len(section) + 1 :]
    known = sorted(f.name for f in dataclasses.fields(hints[section]))
    if key not in known:
        raise ConfigError(f"{name}: [{section}] has no key {key!r} (known: {', '.join(known)})")
    return f"{section}.{key}"


_TABLE_SECTIONS: dict[str, Any] = {
    "alerts": parse_alerts,
    "actions": parse_actions,
    "policy": parse_policy_section,
}


def _build(raw: Mapping[str, Mapping[str, Any]]) -> Config:
    section_types = {f.name: f for f in dataclasses.fields(Config)}
    built: dict[str, Any] = {}
    for section, values in raw.items():
        if section not in section_types:
            raise ConfigError(f"{section}: unknown section (known: {', '.join(sorted(section_types))})")
        if section in _TABLE_SECTIONS:  # nested tables: [[alerts.webhooks]], [policy.xid.31]
            try:
                built[section] = _TABLE_SECTIONS[section](values)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
            continue
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


def _no_nul(key: str, value: str) -> str:
    # No path, argv word or address holds a NUL; one would pass here and fail later, at run time.
    if "\x00" in value:
        raise ConfigError(f"{key}: contains a NUL character")
    return value


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
            with contextlib.suppress(ValueError):
                value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise ConfigError(f"{key}: {value} is out of range")
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if expected is float:
        number = _as_float(value, from_env)
        if number is None:
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        if not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        return number
    if expected is str:
        if isinstance(value, str):
            return _no_nul(key, value)
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if typing.get_origin(expected) is list:
        if from_env:
            # Environment lists are whitespace-separated argv-like words.
            return value.split()
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [_no_nul(key, v) for v in value]
        raise ConfigError(f"{key}: expected a list of strings, got {value!r}")
    raise ConfigError(f"{key}: unsupported type {expected!r}")


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _as_float(value: Any, from_env: bool) -> float | None:
    if from_env:
        try:
            return float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an integer beyond float's range
            return math.inf
    return None


_DAY = 86400.0
_PORT = (0, 65535)
# Sane ranges of numeric keys ("section.key": (lowest, highest), both allowed): a value outside is a typo or a
# unit slip (1e-9 would spin a core, 1e308 or inf never happens), refused at load. Every float is finite.
BOUNDS: dict[str, tuple[float, float]] = {
    "agent.sample_interval_seconds": (0.01, 3600.0),
    "agent.flush_interval_seconds": (0.1, 3600.0),
    "agent.metrics_port": _PORT,
    "agent.event_dedup_window_seconds": (0.0, _DAY),
    "store.retention_days": (0.01, 36500.0),
    "collectors.nvml_slow_interval_seconds": (0.0, _DAY),
    "simulate.seed": (0, 2**32 - 1),
    "simulate.head_start_seconds": (0.0, _DAY),
    "runtime.port": _PORT,
    "runtime.restart_grace_seconds": (0.0, 3600.0),
    "runtime.restart_cost_seconds": (0.0, 7 * _DAY),
    "runtime.checkpoint_timeout_seconds": (0.0, _DAY),
    "runtime.command_timeout_seconds": (0.1, _DAY),
    "runtime.cooldown_seconds": (0.0, 7 * _DAY),
    "runtime.max_restarts_without_progress": (1, 1000),
    "runtime.crash_loop_window_seconds": (1.0, 30 * _DAY),
    "runtime.max_jobs_per_uid": (1, 100_000),
    "runtime.max_ranks_per_uid": (1, 1_000_000),
    "runtime.max_jobs": (1, 100_000),
    "runtime.max_ranks": (1, 1_000_000),
    "runtime.job_idle_seconds": (1.0, 30 * _DAY),
    "predictor.score_interval_seconds": (1.0, _DAY),
    "predictor.risk_threshold": (0.0, 1.0),
    "predictor.budget_k": (0, 1_000_000),
    "predictor.average_retrains": (1, 10),
    "predictor.retrain_every_seconds": (0.0, 365 * _DAY),
    "predictor.train_window_seconds": (60.0, 3650 * _DAY),
    "predictor.evaluate_window_seconds": (60.0, 365 * _DAY),
    "predictor.retrain_max_memory_mb": (64, 1 << 22),
    "predictor.retrain_max_cpu_seconds": (1, 7 * 86400),
    "predictor.retrain_timeout_seconds": (1.0, 7 * _DAY),
    "dashboard.port": _PORT,
    "dashboard.refresh_seconds": (1.0, 3600.0),
    "dashboard.replay_hours": (0.1, 168.0),
}


def _check_bounds(config: Config) -> None:
    for key, (low, high) in BOUNDS.items():
        section, _, name = key.partition(".")
        value = getattr(getattr(config, section), name)
        if not low <= value <= high:
            raise ConfigError(f"{key}: must be within {low:g}..{high:g}, got {value!r}")


def _check_listen_address(key: str, address: str) -> None:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise ConfigError(
            f"{key}: {address!r} is not an IP address to listen on (0.0.0.0 or :: for every interface, "
            "127.0.0.1 for this host only)"
        ) from None


def _check_commands(rt: RuntimeConfig, diagnosis: DiagnosisConfig) -> None:
    """Command templates are checked here, so an unknown {placeholder} fails at start-up, not at the first
    action (or repair) hours later."""
    from fleetguard.argv import PLACEHOLDERS, REPAIR_PLACEHOLDERS, ArgvTemplateError, check_template

    commands: list[tuple[str, object, str, frozenset[str]]] = [
        ("runtime", rt, n, PLACEHOLDERS) for n in ("restart_command", "cordon_command", "stop_command")
    ]
    repairs = ("reset_gpu_command", "reboot_node_command", "drain_command")
    commands += [("diagnosis", diagnosis, n, REPAIR_PLACEHOLDERS) for n in repairs]
    for section, values, name, placeholders in commands:
        template = getattr(values, name)
        if not template:
            continue
        try:
            check_template(template, placeholders)
        except ArgvTemplateError as exc:
            raise ConfigError(f"{section}.{name}: {exc}") from exc


def _validate_policy(config: Config) -> None:
    from diagnosis.policy_load import PolicyError
    from fleetguard.settings.policy_files import load_policy

    try:
        load_policy(config.diagnosis.policy_file or None, config.policy.tables)
    except PolicyError as exc:
        raise ConfigError(str(exc)) from exc


def _check_agent_host(key: str, host: str) -> None:
    from diagnosis.rules_events import reserved_host_name

    reserved = reserved_host_name(host)
    if reserved is not None:
        raise ConfigError(f"{key}: {reserved}")


def check_agent_host(config: Config) -> str:
    """The name this host's agent goes by, or a ConfigError when no host may take it (a hostname is
    checked here, at the agent's start, rather than in every command that loads a config)."""
    key = "agent.host" if config.agent.host else "this machine's hostname (agent.host)"
    _check_agent_host(key, config.host)
    return config.host


def _validate(config: Config) -> None:
    def need(ok: bool, key: str, why: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {why}")

    rt = config.runtime
    need(rt.max_jobs_per_uid <= rt.max_jobs, "runtime.max_jobs_per_uid", "must be <= runtime.max_jobs")
    need(rt.max_ranks_per_uid <= rt.max_ranks, "runtime.max_ranks_per_uid", "must be <= runtime.max_ranks")

    _validate_policy(config)
    if config.agent.host:  # this machine's hostname, when it is the name, is checked where the agent starts
        _check_agent_host("agent.host", config.agent.host)

    _check_bounds(config)
    _check_listen_address("agent.metrics_address", config.agent.metrics_address)
    _check_listen_address("dashboard.address", config.dashboard.address)
    need(bool(config.store.path), "store.path", "must not be empty")
    rt = config.runtime
    need(
        not rt.enabled or rt.port == 0 or rt.port != config.agent.metrics_port,
        "runtime.port",
        f"{rt.port} is agent.metrics_port as well; give each its own port",
    )
    _check_commands(rt, config.diagnosis)
    for switch in ("cordon_at_risk_gpu", "cordon_gpu_hang", "cordon_stragglers"):
        need(
            not getattr(rt, switch) or bool(rt.cordon_command),
            f"runtime.{switch}",
            "needs runtime.cordon_command (without it nothing is cordoned)",
        )
    need(0.0 <= config.predictor.risk_threshold <= 1.0, "predictor.risk_threshold", "must be within 0..1")
    need(config.predictor.score_interval_seconds > 0, "predictor.score_interval_seconds", "must be > 0")
    _validate_retraining(config.predictor, need)
    _validate_shipping(config)
    if config.simulate.fleet:
        from collectors.simulated import parse_fleet_spec

        try:
            parse_fleet_spec(config.simulate.fleet)
        except ValueError as exc:
            raise ConfigError(f"simulate.fleet: {exc}") from exc


def _validate_shipping(config: Config) -> None:
    agent, ctl = config.agent, config.controller
    _check_nats_settings(config)
    if agent.controller_url and not agent.controller_url.startswith(("http://", "https://")):
        raise ConfigError("agent.controller_url: must start with http:// or https://")
    if agent.controller_url and not agent.spool_dir:
        raise ConfigError("agent.spool_dir: must not be empty when agent.controller_url is set")
    if not 1 << 20 <= agent.spool_max_bytes <= 1 << 40:
        raise ConfigError("agent.spool_max_bytes: must be from 1 MiB to 1 TiB")
    host, sep, port = ctl.listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"controller.listen: expected HOST:PORT, got {ctl.listen!r}")
    if bool(ctl.tls_cert) != bool(ctl.tls_key):
        raise ConfigError("controller.tls_cert: tls_cert and tls_key go together")
    if not 1024 <= ctl.max_body_bytes <= 1 << 30:
        raise ConfigError("controller.max_body_bytes: must be from 1 KiB to 1 GiB")
    if not 1 <= ctl.max_queue_batches <= 1_000_000:
        raise ConfigError("controller.max_queue_batches: must be from 1 to 1000000")
    if not 0 <= ctl.edge_processes <= MAX_EDGE_PROCESSES:
        raise ConfigError(f"controller.edge_processes: must be from 0 to {MAX_EDGE_PROCESSES}")
    if not 0 <= ctl.silent_after_seconds <= 86400:
        raise ConfigError("controller.silent_after_seconds: must be within 0..86400")
    if not 1 <= ctl.correlation_window_seconds <= 86400:
        raise ConfigError("controller.correlation_window_seconds: must be within 1..86400")
    if not 2 <= ctl.correlation_min_hosts <= 100_000:
        raise ConfigError("controller.correlation_min_hosts: must be within 2..100000")


# NATS names (docs/scale-out.md): a pool and a stream are subject tokens, the servers nats:// or tls:// URLs.
_NATS_POOL = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NATS_STREAM = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NATS_URL_SCHEMES = ("nats://", "tls://")


def split_urls(urls: str) -> list[str]:
    """`agent.nats_url` and `controller.nats_url`: comma-separated server URLs, blanks dropped."""
    return [u.strip() for u in urls.split(",") if u.strip()]


def _check_nats_settings(config: Config) -> None:
    """ConfigError for NATS settings that cannot work."""
    agent, ctl = config.agent, config.controller
    if agent.transport not in ("http", "nats"):
        raise ConfigError(f'agent.transport: expected "http" or "nats", got {agent.transport!r}')
    if not _NATS_POOL.fullmatch(agent.pool):
        raise ConfigError("agent.pool: 1-64 characters of A-Z a-z 0-9 _ -")
    if agent.transport == "nats":
        _check_nats_urls("agent.nats_url", agent.nats_url)
        if not agent.spool_dir:
            raise ConfigError('agent.spool_dir: must not be empty when agent.transport is "nats"')
        if agent.nats_password_file and agent.nats_creds_file:
            raise ConfigError("agent.nats_creds_file: give a password file or a creds file, not both")
    if ctl.pool or ctl.nats_url:
        if not _NATS_POOL.fullmatch(ctl.pool):
            raise ConfigError("controller.pool: 1-64 characters of A-Z a-z 0-9 _ -")
        _check_nats_urls("controller.nats_url", ctl.nats_url)
        if not _NATS_STREAM.fullmatch(ctl.nats_stream):
            raise ConfigError("controller.nats_stream: 1-64 characters of A-Z a-z 0-9 _ -")
        if ctl.nats_password_file and ctl.nats_creds_file:
            raise ConfigError("controller.nats_creds_file: give a password file or a creds file, not both")
        if ctl.nats_wire not in (1, 2):
            raise ConfigError("controller.nats_wire: 1 or 2")


def _check_nats_urls(key: str, urls: str) -> None:
    parts = split_urls(urls)
    if not parts:
        raise ConfigError(f"{key}: required (nats://HOST:PORT)")
    for url in parts:
        parsed = urllib.parse.urlsplit(url)
        if not url.startswith(_NATS_URL_SCHEMES) or not parsed.hostname:
            raise ConfigError(f"{key}: {url!r} is not nats://HOST:PORT or tls://HOST:PORT")
        if parsed.username or parsed.password:
            raise ConfigError(f"{key}: credentials go in the password or creds file, not the URL")


# `[predictor] retrain_model`: the models a retrain can fit (predictor.registry.ALL_MODELS; kept here so that
# loading the configuration never imports numpy; tests/predict/test_retraining.py checks they agree).
RETRAIN_MODELS = ("xgboost", "mlp", "logistic", "random_forest", "parallel", "cascade")


def _validate_retraining(p: PredictorConfig, need: Callable[[bool, str, str], None]) -> None:
    need(
        p.retrain_every_seconds == 0 or bool(p.model_dir),
        "predictor.retrain_every_seconds",
        "needs predictor.model_dir (retrained models are written and loaded only there)",
    )
    need(
        p.retrain_model in RETRAIN_MODELS,
        "predictor.retrain_model",
        f"one of {', '.join(RETRAIN_MODELS)}",
    )
    words = [w.strip() for w in p.failure_xids.split(",") if w.strip()]
    need(
        all(w.isascii() and w.isdigit() and int(w) < 100_000 for w in words),
        "predictor.failure_xids",
        f"expected XID numbers separated by commas, got {p.failure_xids!r}",
    )
    need(
        all(0 < len(k) <= 64 and k.replace("_", "").isalnum() for k in p.failure_kinds),
        "predictor.failure_kinds",
        "expected event kinds such as gpu_lost",
    )
