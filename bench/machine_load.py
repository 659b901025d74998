"""How busy the machine was around a benchmark, so every row can say it (a busy run is marked, not hidden).

A figure taken while other work shares the cores measures the sharing as much as the code. Benchmarks print
the one-minute load average before and after their measured part; `busy` marks a run whose load, less what the
benchmark itself adds, passed a fraction of the cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field


def one_minute() -> float:
    return os.getloadavg()[0]


@dataclass
class LoadWindow:
    """The load average at the start and at the end of a measured part."""

    own_load: float = 0.0  # the load the benchmark itself puts on the machine (its processes, busy)
    before: float = field(default_factory=one_minute)
    after: float | None = None

    def close(self) -> LoadWindow:
        self.after = one_minute()
        return self

    @property
    def busy(self) -> bool:
        """Other work held more than half the cores at the start or the end."""
        cores = os.cpu_count() or 1
        worst = max(self.before, self.after if self.after is not None else self.before)
        return worst - self.own_load > 0.5 * cores

    def cell(self) -> str:
        after = f"{self.after:.1f}" if self.after is not None else "?"
        return f"{self.before:.1f} -> {after}" + (" (busy)" if self.busy else "")


def measured(main: Callable[[], object], own_load: float = 0.0) -> None:
    """Run a benchmark's main and print the load average around it, so its rows can be judged."""
    window = LoadWindow(own_load=own_load)
    try:
        main()
    finally:
        print(f"\nload average (1 min) before -> after: {window.close().cell()}", flush=True)
