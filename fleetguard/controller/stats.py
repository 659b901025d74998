"""The controller's counters, and their Prometheus text for its /metrics."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetguard.controller.hosts import HostState

LATENCY_WINDOW = 10_000  # the last this-many ingest requests make the latency quantiles


@dataclass
class ControllerStats:
    batches_committed: int = 0
    duplicates: int = 0
    rows_committed: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    commit_seconds_sum: float = 0.0
    commits: int = 0
    queue_depth: int = 0
    commands_queued: int = 0
    commands_delivered: int = 0
    commands_acked: int = 0
    commands_acked_again: int = 0  # an ack of a command acked before
    commands_ack_unknown: int = 0  # an ack naming no command of its host's: acknowledges nothing
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    lock: threading.Lock = field(default_factory=threading.Lock)
    # More exposition lines from other ingest sources (the NATS consumer), appended as they render them.
    extra: list[Callable[[], list[str]]] = field(default_factory=list)

    def refuse(self, reason: str) -> None:
        with self.lock:
            self.refused[reason] = self.refused.get(reason, 0) + 1

    def observe_latency(self, seconds: float) -> None:
        with self.lock:
            self.latencies.append(seconds)

    def latency_quantile(self, q: float) -> float:
        with self.lock:
            values = sorted(self.latencies)
        if not values:
            return 0.0
        return values[min(len(values) - 1, int(q * len(values)))]


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(stats: ControllerStats, hosts: list[HostState], now: float, silent_after: float) -> bytes:
    """Prometheus text exposition (version 0.0.4)."""
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{labels} {value:.17g}" for labels, value in samples)

    metric(
        "fleetguard_controller_batches_committed_total",
        "counter",
        "Batches stored.",
        [("", stats.batches_committed)],
    )
    metric(
        "fleetguard_controller_batches_duplicate_total",
        "counter",
        "Batches received again after they were stored (a lost reply): answered, not stored twice.",
        [("", stats.duplicates)],
    )
    metric(
        "fleetguard_controller_rows_committed_total",
        "counter",
        "Rows stored, by table.",
        [(f'{{table="{_label(t)}"}}', n) for t, n in sorted(stats.rows_committed.items())],
    )
    metric(
        "fleetguard_controller_batches_refused_total",
        "counter",
        "Ingest requests refused, by reason.",
        [(f'{{reason="{_label(r)}"}}', n) for r, n in sorted(stats.refused.items())],
    )
    metric(
        "fleetguard_controller_commit_seconds",
        "summary",
        "Time to commit one group of batches.",
        [("_sum", stats.commit_seconds_sum), ("_count", stats.commits)],
    )

    metric(
        "fleetguard_controller_ingest_latency_seconds",
        "gauge",
        "Ingest request latency (received to committed) over the last requests, by quantile.",
        [(f'{{quantile="{q}"}}', stats.latency_quantile(q)) for q in (0.5, 0.99)],
    )
    metric(
        "fleetguard_controller_queue_batches",
        "gauge",
        "Batches accepted and waiting to be committed.",
        [("", stats.queue_depth)],
    )
    metric(
        "fleetguard_controller_commands_total",
        "counter",
        "Host commands, by stage (acks naming no command of their host's are ack_unknown, not acked).",
        [
            ('{stage="queued"}', stats.commands_queued),
            ('{stage="delivered"}', stats.commands_delivered),
            ('{stage="acked"}', stats.commands_acked),
            ('{stage="acked_again"}', stats.commands_acked_again),
            ('{stage="ack_unknown"}', stats.commands_ack_unknown),
        ],
    )
    silent = [h for h in hosts if h.is_silent(now, silent_after)]
    metric(
        "fleetguard_controller_hosts",
        "gauge",
        "Hosts that ever shipped to this controller.",
        [("", len(hosts))],
    )
    metric(
        "fleetguard_controller_hosts_silent",
        "gauge",
        "Hosts not heard for longer than expected.",
        [("", len(silent))],
    )
    metric(
        "fleetguard_controller_host_lag_seconds",
        "gauge",
        "Per host: commit time minus the send time of its newest batch (clock skew included).",
        [(f'{{host="{_label(h.host)}"}}', h.last_seen - h.last_sent) for h in hosts],
    )
    metric(
        "fleetguard_controller_host_last_seen_seconds",
        "gauge",
        "Per host: seconds since it was last heard.",
        [(f'{{host="{_label(h.host)}"}}', max(0.0, now - h.last_seen)) for h in hosts],
    )
    for lines in stats.extra:
        out.extend(lines())
    return ("\n".join(out) + "\n").encode()
