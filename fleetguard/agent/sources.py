"""Which collectors run on this host: real or simulated, built from the config; unavailable ones say why."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from collectors.protocol import Collector, CollectorUnavailable
from fleetguard.agent.agent import EventFolder
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


def build_folder(config: Config) -> EventFolder | None:
    if config.agent.event_dedup_window_seconds <= 0:
        return None
    from collectors.event_dedup import EventDeduplicator

    return EventDeduplicator(window_seconds=config.agent.event_dedup_window_seconds)


def build_sources(config: Config, *, kmsg_file: str | None = None, require_gpu: bool = False) -> Sources:
    """Collectors for this config. Raises NoSources when nothing at all can be sampled."""
    if config.simulate.fleet:
        return _simulated(config)
    collectors: list[Collector] = []
    unavailable: list[str] = []
    host = config.host
    gpus = 0
    if config.collectors.nvml:
        try:
            from collectors.nvml import NvmlCollector

            nvml = NvmlCollector(host)
            collectors.append(nvml)
            gpus = len(getattr(nvml, "gpu_indices", []) or []) or 1
        except CollectorUnavailable as exc:
            unavailable.append(f"nvml: {exc}")
    if require_gpu and gpus == 0:
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
    if kmsg_file is not None or config.collectors.kmsg:
        try:
            from collectors.kmsg import KmsgCollector, KmsgFileCollector

            if kmsg_file is not None:
                collectors.append(KmsgFileCollector(host, kmsg_file))
            else:
                collectors.append(
                    KmsgCollector(
                        host,
                        path=config.collectors.kmsg_path,
                        state_path=config.collectors.kmsg_state_path or None,
                    )
                )
        except CollectorUnavailable as exc:
            unavailable.append(f"kmsg: {exc}")
    if config.collectors.nccl_logs:
        from collectors.nccl import NcclLogCollector

        collectors.append(NcclLogCollector(host, config.collectors.nccl_logs))
    if not collectors:
        raise NoSources(
            "nothing to sample on this host: "
            + "; ".join(unavailable)
            + ". To try fleetguard without GPUs: fleetguard up --simulate 2x8"
        )
    return Sources(collectors, build_folder(config), unavailable, simulated=False, gpus=gpus)


def _simulated(config: Config) -> Sources:
    from collectors.simulated import (
        SimulatedFleet,
        SimulatedGpuCollector,
        SimulatedKmsgCollector,
        SimulatedNicCollector,
        default_demo_faults,
        parse_fleet_spec,
    )

    hosts, gpus = parse_fleet_spec(config.simulate.fleet)
    fleet = SimulatedFleet(hosts, gpus, seed=config.simulate.seed, start_ts=time.time())
    if config.simulate.faults:
        fleet = SimulatedFleet(
            hosts, gpus, seed=config.simulate.seed, start_ts=time.time(), faults=default_demo_faults(fleet)
        )
    collectors: list[Collector] = [
        SimulatedGpuCollector(fleet),
        SimulatedNicCollector(fleet),
        SimulatedKmsgCollector(fleet),
    ]
    return Sources(collectors, build_folder(config), [], simulated=True, gpus=hosts * gpus)


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
