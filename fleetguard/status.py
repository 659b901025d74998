"""The live status `fleetguard up` prints: a summary line every few seconds, notable events at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from fleetguard.agent.agent import RoundReport
from fleetguard.records.telemetry import Event, EventKind


def describe_event(event: Event, xid_names: dict[int, str]) -> str:
    where = event.host + (f" gpu {event.gpu_index}" if event.gpu_index is not None else "")
    where += f" {event.pci_bus_id}" if event.pci_bus_id and event.gpu_index is None else ""
    where += f" {event.device}" if event.device else ""
    repeats = f" (x{event.count})" if event.count > 1 else ""
    if event.kind == EventKind.XID and event.code is not None:
        name = xid_names.get(event.code, "")
        return f"{where}: XID {event.code}{' ' + name if name else ''}{repeats}"
    return f"{where}: {event.kind}{' ' + str(event.code) if event.code is not None else ''}{repeats}"


class StatusPrinter:
    """Feeds on round reports; writes to `out`. `extra` adds text (e.g. at-risk GPUs, jobs) to each line."""

    def __init__(
        self,
        out: TextIO,
        every_seconds: float = 5.0,
        xid_names: dict[int, str] | None = None,
        extra: Callable[[], str] | None = None,
    ) -> None:
        self.out = out
        self.every_seconds = every_seconds
        self.xid_names = xid_names or {}
        self.extra = extra
        self.started = time.monotonic()
        self.last_line = 0.0
        self.rounds = 0
        self.rows = 0
        self.events = 0
        self.cpu_seconds = 0.0

    def __call__(self, report: RoundReport) -> None:
        self.rounds += 1
        self.rows += report.rows
        self.cpu_seconds += report.cpu_seconds
        for event in report.events:
            self.events += event.count
            self.out.write(f"  ! {describe_event(event, self.xid_names)}\n")
        if report.failed:
            self.out.write(f"  ! collector failed this round: {', '.join(report.failed)}\n")
        now = time.monotonic()
        if now - self.last_line >= self.every_seconds:
            self.last_line = now
            cpu_ms = 1000 * self.cpu_seconds / max(1, self.rounds)
            line = (
                f"[{now - self.started:6.0f}s] rounds {self.rounds} | rows {self.rows:,} | "
                f"events {self.events:,} | {cpu_ms:.1f} ms CPU/round"
            )
            if self.extra is not None:
                line += " | " + self.extra()
            self.out.write(line + "\n")
        self.out.flush()
