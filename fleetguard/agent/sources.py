"""Which collectors run on this host: real or simulated, built from the config; unavailable ones say why."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from collectors.gpu_sampling import SamplingPlan
from collectors.protocol import Collector, CollectorUnavailable
from fleetguard.agent.agent import EventFolder
from fleetguard.clock import Clock, SystemClock
from fleetguard.config import Config

log = logging.getLogger(__name__)


class NoSources(Exception):
    """Nothing to sample on this host; the message says why and suggests --simulate."""


@dataclass
class Sources:
    collectors: list[Collector]
    folder: EventFolder | None
    unavailable: list[str] = field(default_factory=list)  # one operator-readable sentence each
    simulated: bool = False
    gpus: int = 0
    xid_source: str | None = None  # name of the one collector that reports XIDs (see build_sources)


def build_folder(config: Config) -> EventFolder | None:
    if config.agent.event_dedup_window_seconds <= 0:
        return None
    from collectors.event_dedup import EventDeduplicator

    return EventDeduplicator(window_seconds=config.agent.event_dedup_window_seconds)


def build_sources(
    config: Config, *, kmsg_file: str | None = None, require_gpu: bool = False, clock: Clock | None = None
) -> Sources:
    """Collectors for this config. Raises NoSources when nothing at all can be sampled. A simulated fleet
    starts at `clock`'s time (the daemon's: a FakeClock's in tests)."""
    if config.simulate.fleet:
        # a head start moves the fault script's origin back, never the clock: samples are stamped now
        return _simulated(config, (clock or SystemClock()).time() - config.simulate.head_start_seconds)
    collectors: list[Collector] = []
    unavailable: list[str] = []
    host = config.host
    gpus = 0
    # The driver reports every XID twice: to NVML's event set and as an `NVRM: Xid` kernel-log line. Taking
    # both would count each XID twice, in /metrics and in the stored count. The kernel log is the richer
    # report (pid, process name, the driver's text) and also holds XIDs from before the agent started, so
    # when a kernel-log collector opens, XIDs come from it alone; NVML XID events are asked for only when it
    # cannot (not root, no /dev/kmsg, switched off). Opened first, so that NVML knows before it registers.
    kernel_log, kernel_log_unavailable = _kernel_log(config, kmsg_file)
    xid_source = kernel_log.name if kernel_log is not None else None
    if config.collectors.nvml:
        try:
            from collectors.nvml import NvmlCollector, StoppableLog

            nvml = NvmlCollector(host, plan=_sampling_plan(config), xid_events=kernel_log is None)
            if isinstance(kernel_log, StoppableLog):  # it may stop mid-run: NVML then reports XIDs
                nvml.take_over_xids_if_stopped(kernel_log)
            unavailable.extend(f"nvml: {note}" for note in nvml.notes)  # GPUs without GPM metrics
            collectors.append(nvml)
            gpus = len(getattr(nvml, "gpu_indices", []) or []) or 1
            xid_source = xid_source or nvml.name
        except CollectorUnavailable as exc:
            unavailable.append(f"nvml: {exc}")
    if require_gpu and gpus == 0:
        if kernel_log is not None:
            kernel_log.close()
        raise NoSources(
            "no NVIDIA GPU can be read on this host "
            f"({'; '.join(unavailable) or 'NVML disabled'}). "
            "To see fleetguard work without one, run it on a simulated fleet: fleetguard up --simulate 2x8"
        )
    if config.collectors.rdma:
        try:
            from collectors.rdma import RdmaCollector

            collectors.append(RdmaCollector(host, sysfs_root=config.collectors.sysfs_root))
        except CollectorUnavailable as exc:
            unavailable.append(f"rdma: {exc}")
    if kernel_log is not None:
        collectors.append(kernel_log)
    if kernel_log_unavailable is not None:
        unavailable.append(f"kmsg: {kernel_log_unavailable}")
    if config.collectors.nccl_logs:
        from collectors.nccl import NcclLogCollector

        collectors.append(NcclLogCollector(host, config.collectors.nccl_logs))
    if not collectors:
        raise NoSources(
            "nothing to sample on this host: "
            + "; ".join(unavailable)
            + ". To try fleetguard without GPUs: fleetguard up --simulate 2x8"
        )
    return Sources(
        collectors, build_folder(config), unavailable, simulated=False, gpus=gpus, xid_source=xid_source
    )


def _sampling_plan(config: Config) -> SamplingPlan:
    return SamplingPlan.every(config.collectors.nvml_slow_interval_seconds)


def _kernel_log(config: Config, kmsg_file: str | None) -> tuple[Collector | None, str | None]:
    """The kernel-log collector (a saved file when given, else /dev/kmsg) and None; (None, why) when it cannot
    open; (None, None) when switched off."""
    if kmsg_file is None and not config.collectors.kmsg:
        return None, None
    from collectors.kmsg import KmsgCollector, KmsgFileCollector

    try:
        if kmsg_file is not None:
            return KmsgFileCollector(config.host, kmsg_file), None
        collector = KmsgCollector(
            config.host,
            path=config.collectors.kmsg_path,
            state_path=config.collectors.kmsg_state_path or None,
        )
    except CollectorUnavailable as exc:
        return None, str(exc)
    return collector, None


def _simulated(config: Config, start_ts: float) -> Sources:
    from collectors.simulated import (
        SimulatedFleet,
        SimulatedGpuCollector,
        SimulatedKmsgCollector,
        SimulatedNicCollector,
        default_demo_faults,
        parse_fleet_spec,
    )

    hosts, gpus = parse_fleet_spec(config.simulate.fleet)
    # One simulated host with agent.host set is that host (each agent of a test fleet ships as itself).
    names = [config.agent.host] if hosts == 1 and config.agent.host else []
    fleet = SimulatedFleet(hosts, gpus, seed=config.simulate.seed, start_ts=start_ts, host_names=names)
    if config.simulate.faults:
        fleet = SimulatedFleet(
            hosts,
            gpus,
            seed=config.simulate.seed,
            start_ts=start_ts,
            faults=default_demo_faults(fleet),
            host_names=names,
        )
    collectors: list[Collector] = [
        SimulatedGpuCollector(fleet, _sampling_plan(config)),
        SimulatedNicCollector(fleet),
        SimulatedKmsgCollector(fleet),
    ]
    return Sources(
        collectors,
        build_folder(config),
        [],
        simulated=True,
        gpus=hosts * gpus,
        xid_source=SimulatedKmsgCollector.name,  # the simulated GPUs raise XIDs only in the kernel log
    )


def collect_once(config: Config, *, kmsg_file: str | None = None) -> dict[str, Any]:
    """One round of every collector, as plain data, for `fleetguard collect --once`."""
    try:
        sources = build_sources(config, kmsg_file=kmsg_file)
    except NoSources as exc:
        return {"host": config.host, "ts": time.time(), "collectors": {}, "error": str(exc)}
    now = time.time()
    report: dict[str, Any] = {
        "host": config.host,
        "ts": now,
        "simulated": sources.simulated,
        "unavailable": sources.unavailable,
        "xid_source": sources.xid_source,
        "collectors": {},
        "gpu_samples": [],
        "nic_samples": [],
        "nic_counters": [],
        "events": [],
    }
    for collector in sources.collectors:
        try:
            batch = collector.collect(now)
        except Exception as exc:  # report it; one broken source must not hide the others
            report["collectors"][collector.name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        for kind in ("gpu_samples", "nic_samples", "nic_counters", "events"):
            report[kind].extend(asdict(r) for r in getattr(batch, kind))
        report["collectors"][collector.name] = {
            "gpu_samples": len(batch.gpu_samples),
            "nic_samples": len(batch.nic_samples),
            "nic_counters": len(batch.nic_counters),
            "events": len(batch.events),
            "problems": dict(collector.problems()),
        }
        collector.close()
    return report


def render_collect(report: dict[str, Any]) -> str:
    """`collect --once` for a person: one row per collector under a header, then what could not be read."""
    if "error" in report:
        return f"{report['host']}: nothing collected: {report['error']}"
    header = (
        f"{'collector':16s} {'gpu samples':>11s} {'nic samples':>11s} {'counters':>8s} {'events':>6s}  notes"
    )
    lines = [f"{report['host']}: one round{' (simulated)' if report.get('simulated') else ''}", header]
    for name, info in report["collectors"].items():
        if "error" in info:
            lines.append(f"{name:16s} {'-':>11s} {'-':>11s} {'-':>8s} {'-':>6s}  failed: {info['error']}")
            continue
        problems = ", ".join(f"{k} x{v}" for k, v in sorted(info["problems"].items()))
        lines.append(
            f"{name:16s} {info['gpu_samples']:>11d} {info['nic_samples']:>11d} {info['nic_counters']:>8d} "
            f"{info['events']:>6d}  {problems}".rstrip()
        )
    lines.extend(f"unavailable: {note}" for note in report["unavailable"])
    if report.get("xid_source"):
        lines.append(f"XIDs from: {report['xid_source']}")
    return "\n".join(lines)
