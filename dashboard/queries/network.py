"""IB / RoCE ports: latest state and rate, error counts and traffic in a window, link flaps over time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dashboard.queries.base import BUCKET, TS, Cursor, as_int, fetch

# Counters that count faults (IBTA and mlx5 driver names); a port whose counter moved is not clean.
ERROR_COUNTERS: Final = (
    "symbol_error",
    "link_error_recovery",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "req_transport_retries_exceeded",
    "out_of_buffer",
    "implied_nak_seq_err",
)
FLAP_COUNTER: Final = "link_downed"
# port_xmit_data / port_rcv_data count 4-byte words (IBTA).
DATA_COUNTERS: Final = ("port_xmit_data", "port_rcv_data")
WORD_BYTES: Final = 4


@dataclass(frozen=True, slots=True)
class PortState:
    host: str
    device: str
    port: int
    last_ts: float
    state: str | None
    phys_state: str | None
    rate_gbps: float | None
    link_layer: str | None


_STATE_SQL: Final = f"""
SELECT host, device, port, epoch(ts), state, phys_state, rate_gbps, link_layer
FROM nic_samples WHERE ts >= {TS} AND ts <= {TS} AND (? IS NULL OR host = ?)
QUALIFY row_number() OVER (PARTITION BY host, device, port ORDER BY ts DESC) = 1
ORDER BY host, device, port
"""


def port_states(cur: Cursor, since: float, until: float, host: str | None = None) -> list[PortState]:
    rows = fetch(cur, _STATE_SQL, [since, until, host, host])
    return [PortState(*r) for r in rows]  # typed by the table; rate_gbps may be NULL (None)


@dataclass(frozen=True, slots=True)
class PortCounters:
    """One port's error and flap counts and its mean traffic over a window."""

    host: str
    device: str
    port: int
    errors: int
    link_downed: int
    tx_bytes_per_second: float
    rx_bytes_per_second: float


_ERROR_PARAMS: Final = ", ".join("?" * len(ERROR_COUNTERS))
_COUNTERS_SQL: Final = f"""
SELECT host, device, port,
       CAST(coalesce(sum(delta) FILTER (WHERE counter IN ({_ERROR_PARAMS})), 0) AS BIGINT),
       CAST(coalesce(sum(delta) FILTER (WHERE counter = ?), 0) AS BIGINT),
       coalesce(avg(rate_per_second) FILTER (WHERE counter = ?), 0) * {WORD_BYTES},
       coalesce(avg(rate_per_second) FILTER (WHERE counter = ?), 0) * {WORD_BYTES}
FROM nic_counters WHERE ts >= {TS} AND ts <= {TS} AND (? IS NULL OR host = ?)
GROUP BY host, device, port
"""


def port_counters(cur: Cursor, since: float, until: float, host: str | None = None) -> list[PortCounters]:
    params: list[object] = [*ERROR_COUNTERS, FLAP_COUNTER, *DATA_COUNTERS, since, until, host, host]
    rows = fetch(cur, _COUNTERS_SQL, params)
    return [PortCounters(*r) for r in rows]  # typed and NULL-free from the SQL (coalesce)


_FLAPS_SQL: Final = f"""
SELECT {BUCKET} AS b, sum(count), count(DISTINCT host)
FROM events WHERE kind = 'link_down' AND ts >= {TS} AND ts <= {TS}
GROUP BY b ORDER BY b
"""


def link_flaps(cur: Cursor, since: float, until: float, bucket: float) -> list[tuple[float, int, int]]:
    """(bucket start, link-down events, hosts hit) per bucket, from the link_down events."""
    return [(float(r[0]), as_int(r[1]), as_int(r[2])) for r in fetch(cur, _FLAPS_SQL, [bucket, since, until])]
