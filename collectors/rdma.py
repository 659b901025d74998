"""RDMA collector: state of every InfiniBand / RoCE port and every port counter from sysfs, each round.

Per port and round: one NicSample (state, phys_state, rate, link layer) and one NicCounterSample per file
in counters/ and hw_counters/, with delta and rate since the previous reading (`collectors.counter_delta`).
A port that leaves ACTIVE, or whose link_downed counter rises (the link went down and came back between two
reads), yields one LINK_DOWN event for that round.

``port_xmit_data`` / ``port_rcv_data`` count octets divided by 4 (IBTA PortCounters): their value, delta and
rate are stored as read, in those 4-octet units, like every other counter; multiply by `DATA_COUNTER_BYTES`
for bytes (`data_counter_bytes`). No derived rows are added: one row per file keeps the table a faithful copy
of sysfs and the simulated NIC, which reports the same raw units. IBTA counters that are not 64-bit saturate
at their maximum instead of wrapping; a saturated counter shows as delta 0. A counter that jumps by 2**63 or
more between two reads (garbage, or a value planted in a fake sysfs) is stored as a reset and counted as
``counter_jump``: its delta would not fit the stored column.

A file that cannot be read (permission, vanished, a folder, I/O error) or holds no number is counted in
`problems()` by reason and skipped; the file list is scanned again every `rescan_seconds` and at the next
round after a file vanished (driver reload), which also picks up new devices.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from collectors.counter_delta import CounterTracker
from collectors.protocol import CollectorUnavailable
from collectors.sysfs_ib import (
    DEFAULT_MAX_OPEN_FILES,
    VANISHED,
    BadValue,
    PortFiles,
    SysfsFile,
    parse_counter,
    parse_rate_gbps,
    parse_state,
    parse_words,
    read_failure_reason,
    scan_ports,
)
from fleetguard.records.telemetry import Batch, Event, EventKind, NicCounterSample, NicSample

SOURCE: Final = "rdma"
ACTIVE: Final = "ACTIVE"
DATA_COUNTERS: Final = frozenset({"port_xmit_data", "port_rcv_data"})
DATA_COUNTER_BYTES: Final = 4
LINK_DOWNED: Final = ("counters", "link_downed")

T = TypeVar("T")


def data_counter_bytes(value: int) -> int:
    """Bytes for a port_xmit_data / port_rcv_data value (or delta), which counts 4-octet units."""
    return value * DATA_COUNTER_BYTES


class RdmaCollector:
    """Reads <sysfs_root>/class/infiniband. Raises CollectorUnavailable when there is nothing to read there,
    unless `allow_empty` (then it keeps looking at each rescan, for a driver loaded later)."""

    name = "rdma"

    def __init__(
        self,
        host: str,
        sysfs_root: str = "/sys",
        *,
        allow_empty: bool = False,
        rescan_seconds: float = 300.0,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
    ) -> None:
        self.host = host
        self.class_dir = os.path.join(sysfs_root, "class", "infiniband")
        self.rescan_seconds = rescan_seconds
        self.max_open_files = max_open_files
        self._problems: Counter[str] = Counter()
        self._tracker: CounterTracker[tuple[str, int, str, str]] = CounterTracker()
        self._states: dict[tuple[str, int], str] = {}
        self._ports: list[PortFiles] = []
        self._scanned_at: float | None = None
        self._rescan_soon = False
        if not os.path.isdir(self.class_dir):
            if not allow_empty:
                raise CollectorUnavailable(
                    f"no RDMA devices: {self.class_dir} does not exist (no InfiniBand/RoCE driver loaded on "
                    "this host); disable the rdma collector (collectors.rdma = false) on hosts without one"
                )
            return
        self._scan()
        if not self._ports and not allow_empty:
            raise CollectorUnavailable(
                f"no RDMA ports: {self.class_dir} lists no device with ports; disable the rdma collector "
                "(collectors.rdma = false) on hosts without InfiniBand/RoCE"
            )

    @property
    def ports(self) -> list[tuple[str, int]]:
        """(device, port) of every port found by the last scan."""
        return [(p.device, p.port) for p in self._ports]

    def collect(self, now: float) -> Batch:
        batch = Batch()
        if self._rescan_due(now):
            self._scan()
            self._scanned_at = now
        for port in self._ports:
            self._read_port(port, now, batch)
        return batch

    def problems(self) -> Mapping[str, int]:
        return dict(self._problems)

    def close(self) -> None:
        for port in self._ports:
            port.close()
        self._ports = []

    # ---- scanning --------------------------------------------------------------------------------------

    def _rescan_due(self, now: float) -> bool:
        if self._scanned_at is None:  # the constructor scanned; the schedule starts with the first round
            self._scanned_at = now
            return False
        elapsed = now - self._scanned_at
        return self._rescan_soon or elapsed >= self.rescan_seconds or elapsed < 0

    def _scan(self) -> None:
        self.close()
        self._rescan_soon = False
        if os.path.isdir(self.class_dir):
            self._ports = scan_ports(self.class_dir, self._problems, self.max_open_files)
        keys = {file.key for port in self._ports for file in port.counters}
        self._tracker.retain(keys)
        present = {(p.device, p.port) for p in self._ports}
        self._states = {k: v for k, v in self._states.items() if k in present}

    # ---- reading ---------------------------------------------------------------------------------------

    def _read_port(self, port: PortFiles, now: float, batch: Batch) -> None:
        host, device, number = self.host, port.device, port.port
        attributes = port.attributes
        state = self._attribute(attributes.get("state"), parse_state)
        phys_state = self._attribute(attributes.get("phys_state"), parse_state)
        rate = self._attribute(attributes.get("rate"), parse_rate_gbps)
        link_layer = self._attribute(attributes.get("link_layer"), parse_words)
        batch.nic_samples.append(NicSample(now, host, device, number, state, phys_state, rate, link_layer))

        rows = batch.nic_counters
        update = self._tracker.update
        downed: int | None = None
        for file in port.counters:
            try:
                value = parse_counter(file.read())
            except OSError as exc:
                self._failed(exc)
                continue
            except BadValue as bad:
                self._problems[bad.reason] += 1
                continue
            delta, rate_per_second, reset, jumped = update(file.key, value, now)
            if jumped:
                self._problems["counter_jump"] += 1  # stored as a reset: no delta, no rate
            rows.append(
                NicCounterSample(
                    now, host, device, number, file.name, file.group, value, delta, rate_per_second, reset
                )
            )
            if delta and (file.group, file.name) == LINK_DOWNED:
                downed = delta
        self._link_event(port, state, phys_state, downed, now, batch)

    def _attribute(self, file: SysfsFile | None, parse: Callable[[bytes], T]) -> T | None:
        if file is None:
            return None
        try:
            return parse(file.read())
        except OSError as exc:
            self._failed(exc)
        except BadValue as bad:
            self._problems[bad.reason] += 1
        return None

    def _failed(self, error: OSError) -> None:
        reason = read_failure_reason(error)
        self._problems[reason] += 1
        if reason == VANISHED:
            self._rescan_soon = True

    def _link_event(
        self,
        port: PortFiles,
        state: str | None,
        phys_state: str | None,
        downed: int | None,
        now: float,
        batch: Batch,
    ) -> None:
        key = (port.device, port.port)
        before = self._states.get(key)
        if state is not None:
            self._states[key] = state
        where = f"{port.device} port {port.port}"
        left_active = before == ACTIVE and state is not None and state != ACTIVE
        if left_active and downed:
            message = f"{where}: state ACTIVE -> {state} (phys_state {phys_state}), link_downed +{downed}"
        elif left_active:
            message = f"{where}: state ACTIVE -> {state} (phys_state {phys_state})"
        elif downed:
            message = f"{where}: link_downed +{downed}, link went down and recovered between reads"
        else:
            return
        batch.events.append(
            Event(
                ts=now,
                host=self.host,
                kind=EventKind.LINK_DOWN,
                source=SOURCE,
                message=message,
                device=port.device,
            )
        )
