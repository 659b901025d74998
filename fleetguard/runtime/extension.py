"""The training runtime as a daemon extension: both `fleetguard agent` and `fleetguard up` run it beside the
agent, so the ranks on a host always have their loopback endpoint, PID watcher and actions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetguard.agent.agent import Agent
from fleetguard.agent.extension import Extension
from fleetguard.config import Config
from fleetguard.jobcontrol.runtime_slot import RuntimeSlot

if TYPE_CHECKING:
    from fleetguard.store import Store  # an agent that ships keeps none, and must not load DuckDB


def runtime_extension(config: Config, slot: RuntimeSlot | None = None) -> Extension:
    """The extension; `slot.service` is the running RuntimeService while it runs (banners, commands)."""
    held = slot if slot is not None else RuntimeSlot()

    def begin(agent: Agent) -> None:  # reads no store: it runs on an agent that ships, too
        from fleetguard.runtime.host_signals import HostSignals
        from fleetguard.runtime.service import RuntimeService, runtime_config_from

        # The agent's own kernel-log and NVML faults: what a host action (cordon) needs besides ranks' word.
        signals = HostSignals.of(agent.collectors)
        agent.event_taps.append(signals.observe)
        service = RuntimeService(
            runtime_config_from(config), agent.clock, sink=agent.submit, host_signals=signals
        )
        service.start()
        held.service = service

    def start(agent: Agent, _store: Store) -> None:
        begin(agent)

    def stop() -> None:
        service, held.service = held.service, None
        if service is not None:
            service.stop()

    # Required: an agent whose ranks cannot reach it must not look healthy (runtime.enabled = false opts out).
    key = f"runtime.port {config.runtime.port}"
    off = "runtime.enabled = false"
    return Extension("training runtime", start, stop, key=key, off_switch=off, start_without_store=begin)
