"""The training runtime as a daemon extension: both `fleetguard agent` and `fleetguard up` run it beside the
agent, so the ranks on a host always have their loopback endpoint, PID watcher and actions."""

from __future__ import annotations

from fleetguard.agent.agent import Agent
from fleetguard.agent.daemon import Extension
from fleetguard.config import Config
from fleetguard.store import Store


def runtime_extension(config: Config, holder: dict[str, object] | None = None) -> Extension:
    """The extension; `holder["service"]` is the running RuntimeService once started (for banners, tests)."""
    parts = holder if holder is not None else {}

    def start(agent: Agent, store: Store) -> None:
        from fleetguard.runtime.service import RuntimeService, runtime_config_from

        service = RuntimeService(runtime_config_from(config), agent.clock, sink=agent.submit)
        service.start()
        parts["service"] = service

    def stop() -> None:
        service = parts.get("service")
        if service is not None:
            service.stop()  # type: ignore[attr-defined]

    # Required: an agent whose ranks cannot reach it must not look healthy (runtime.enabled = false opts out).
    key = f"runtime.port {config.runtime.port}"
    return Extension("training runtime", start, stop, key=key, off_switch="runtime.enabled = false")
