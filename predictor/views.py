"""The three DuckDB views every feature query reads, whatever the source (files or fleetguard's store):
`fg_samples(device_id, ts, <features>)`, `fg_failures(device_id, ts, kind)`, `fg_events(device_id, ts, kind)`,
times as epoch seconds. The shell's readers register them; the SQL here only reads them."""

from __future__ import annotations

SAMPLES_VIEW = "fg_samples"
FAILURES_VIEW = "fg_failures"
EVENTS_VIEW = "fg_events"


def quote(name: str) -> str:
    """A DuckDB identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'
