"""The dashboard as a part of `fleetguard up`: served from the process's own store (the single writer), so
operator actions are stored by the process that owns the store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetguard.agent.extension import Extension
from fleetguard.config import Config

if TYPE_CHECKING:
    from fleetguard.agent.agent import Agent
    from fleetguard.store import Store


@dataclass
class DashboardPlace:
    """Where the dashboard listens once started (`url`), or why it is off (`off`): for `up`'s banner."""

    url: str | None = None
    off: str | None = None


def dashboard_extension(config: Config, place: DashboardPlace) -> Extension:
    """Starts the dashboard once the store is open; `place.url` is then where it listens (for the banner).

    The configuration asked for it (dashboard.enabled), so a port it cannot listen on stops `up` with one line
    naming the key and the flag, as it stops the controller. Dash is an optional extra (`pip install
    fleetguard[dashboard]`): without it `up` runs on and `place.off` says why."""
    servers: list[object] = []

    def start(_agent: Agent, store: Store) -> None:
        try:
            from dashboard.server import serve_dashboard
        except ImportError as exc:
            place.off = f"{exc.name} is not installed (pip install 'fleetguard[dashboard]')"
            return
        server = serve_dashboard(store, config)
        servers.append(server)
        place.url = server.url

    def stop() -> None:
        from dashboard.server import DashboardServer

        for server in servers:
            if isinstance(server, DashboardServer):
                server.close()

    where = f"{config.dashboard.address}:{config.dashboard.port}"
    return Extension(
        "dashboard",
        start,
        stop,
        key=f"dashboard.port {where}",
        off_switch="dashboard.enabled = false",
        hint="choose another with --dashboard-port PORT (0: any free one), or set dashboard.enabled = false",
    )
