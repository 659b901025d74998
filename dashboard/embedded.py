"""The dashboard as a part of `fleetguard up`: served from the process's own store (the single writer), so
operator actions are stored by the process that owns the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetguard.agent.extension import Extension
from fleetguard.config import Config

if TYPE_CHECKING:
    from fleetguard.agent.agent import Agent
    from fleetguard.store import Store


def dashboard_extension(config: Config, parts: dict[str, object]) -> Extension:
    """Starts the dashboard once the store is open; `parts["url"]` is then where it listens (for the banner).

    Dash is an optional extra (`pip install fleetguard[dashboard]`): without it `up` runs on and says why."""
    servers: list[object] = []

    def start(_agent: Agent, store: Store) -> None:
        try:
            from dashboard.server import serve_dashboard
        except ImportError as exc:
            raise RuntimeError(f"{exc.name} is not installed (pip install 'fleetguard[dashboard]')") from exc
        server = serve_dashboard(store, config)
        servers.append(server)
        parts["url"] = server.url

    def stop() -> None:
        from dashboard.server import DashboardServer

        for server in servers:
            if isinstance(server, DashboardServer):
                server.close()

    return Extension("dashboard", start, stop)
