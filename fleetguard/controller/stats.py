"""The controller's counters, and their Prometheus text for its /metrics."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from diagnosis.health import SEVERITY_ORDER, Health
from fleetguard.controller.hosts import HostState

# Ingest latency is a histogram, not precomputed quantiles: quantiles cannot be aggregated across controllers
# or over time, buckets can (histogram_quantile over rate(..._bucket)). Upper bounds in seconds, around the
# 250 ms ingest target.
LATENCY_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class ControllerStats:
    batches_committed: int = 0
    duplicates: int = 0
    rows_committed: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    # Per bucket of LATENCY_BUCKETS (the last one is +Inf), as latency_counts below: commits of a group.
    commit_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    commit_seconds_sum: float = 0.0
    queue_depth: int = 0
    commands_queued: int = 0
    commands_delivered: int = 0
    commands_acked: int = 0
    commands_acked_again: int = 0  # an ack of a command acked before
    commands_ack_unknown: int = 0  # an ack naming no command of its host's: acknowledges nothing
    # Per bucket (the last one is +Inf): requests whose latency fell at or below that bound and above the one
    # before; cumulated when rendered.
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    latency_sum: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # More exposition lines from other ingest sources (the NATS consumer), appended as they render them.
    extra: list[Callable[[], list[str]]] = field(default_factory=list)

    def refuse(self, reason: str) -> None:
        with self.lock:
            self.refused[reason] = self.refused.get(reason, 0) + 1

    def observe_latency(self, seconds: float) -> None:
        index = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        with self.lock:
            self.latency_counts[index] += 1
            self.latency_sum += seconds

    def observe_commit(self, seconds: float) -> None:
        """One group of batches committed in `seconds` (the caller holds no lock of ours)."""
        index = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        with self.lock:
            self.commit_counts[index] += 1
            self.commit_seconds_sum += seconds

    def latency_histogram(self) -> tuple[list[tuple[str, int]], float, int]:
        """Cumulative (le, count) pairs ending with +Inf, the sum and the count."""
        with self.lock:
            counts, total = list(self.latency_counts), self.latency_sum
        return _cumulative(counts), total, sum(counts)

    def commit_histogram(self) -> tuple[list[tuple[str, int]], float, int]:
        with self.lock:
            counts, total = list(self.commit_counts), self.commit_seconds_sum
        return _cumulative(counts), total, sum(counts)


def _cumulative(counts: list[int]) -> list[tuple[str, int]]:
    """Per-bucket counts as Prometheus's cumulative (le, count) pairs, ending with +Inf."""
    cumulative, running = [], 0
    for bound, n in zip([*(f"{b:g}" for b in LATENCY_BUCKETS), "+Inf"], counts, strict=True):
        running += n
        cumulative.append((bound, running))
    return cumulative


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(
    stats: ControllerStats,
    hosts: list[HostState],
    now: float,
    silent_after: float,
    health: Mapping[str, Health] | None = None,
) -> bytes:
    """Prometheus text exposition (version 0.0.4). `health`: each host's state in the one health model
    (diagnosis.health, as `fleetguard status` and the dashboard show it)."""
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
    commit_buckets, commit_sum, commit_count = stats.commit_histogram()
    metric(
        "fleetguard_controller_commit_seconds",
        "histogram",
        "Time to commit one group of batches.",
        [
            *((f'_bucket{{le="{le}"}}', n) for le, n in commit_buckets),
            ("_sum", commit_sum),
            ("_count", commit_count),
        ],
    )

    buckets, latency_sum, latency_count = stats.latency_histogram()
    metric(
        "fleetguard_controller_ingest_latency_seconds",
        "histogram",
        "Ingest request latency, received to committed.",
        [
            *((f'_bucket{{le="{le}"}}', n) for le, n in buckets),
            ("_sum", latency_sum),
            ("_count", latency_count),
        ],
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
    if health is not None:
        states = list(SEVERITY_ORDER)
        metric(
            "fleetguard_controller_hosts_by_health",
            "gauge",
            "Hosts in each health state (healthy, degraded, failed, silent), as `fleetguard status` counts.",
            [(f'{{state="{s.value}"}}', sum(1 for v in health.values() if v is s)) for s in states],
        )
        metric(
            "fleetguard_controller_host_health",
            "gauge",
            "Per host and state: 1 for the host's health now (from its open incidents and liveness), else 0.",
            [
                (f'{{host="{_label(host)}",state="{s.value}"}}', 1.0 if state is s else 0.0)
                for host, state in sorted(health.items())
                for s in states
            ],
        )
    for lines in stats.extra:
        out.extend(lines())
    return ("\n".join(out) + "\n").encode()
