"""What the agent exposes on /metrics: the latest reading of everything plus cumulative counts.

A custom prometheus_client collector renders the agent's state on a scrape thread, so sampling never formats
text; the text is rendered at most once per sampling round (`round_done`) and served from bytes however
many scrapers ask (`exposition`). While someone scrapes at least every FAST_SCRAPE_ROUNDS rounds, the
/metrics server renders each round's text on its worker as the round completes (`on_round`,
`wants_rendering`), so a scrape only copies bytes; slower scrapers (Prometheus every 15-60 s) have their
text rendered when they ask, and an agent nobody scrapes renders nothing. Cumulative sources (ECC, PCIe
replay, NVLink, NIC counters, XIDs, energy) are counters; they can reset (driver reload), which Prometheus'
rate() handles. Every XID occurrence is counted, including repeats that the store folds into one row. Each
XID arrives from one collector only (`fleetguard.agent.sources` takes them from the kernel log, or from NVML
where the kernel log cannot be read), so nothing here matches two reports.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector as PromCollector

from fleetguard.agent.gpu_directory import GpuDirectory, GpuName, bus_key
from fleetguard.agent.nic_families import nic_counter_families
from fleetguard.records.prediction import Prediction
from fleetguard.records.telemetry import Batch, Event, EventKind, GpuSample, NicSample

# Render each round's text ahead only for scrapers this fast: the rounds between the last two scrapes (in
# different rounds), and since the last one, at most this many. Prometheus scrapes every 15-60 s and rounds
# come every second or few: rendering ahead for it made 15 texts for each one served (~3 ms a round); a
# scraper every round or two is served from bytes, as fifty dashboards polling every second are.
FAST_SCRAPE_ROUNDS = 2

# NVML clocks-event reason bits (nvmlClocksEventReason*), exported as one 0/1 series per reason.
CLOCKS_EVENT_REASONS: Mapping[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}

_GPU_LABELS = ["host", "gpu", "uuid"]
_NIC_LABELS = ["host", "device", "port"]


@dataclass(frozen=True)
class _GpuMetric:
    name: str
    doc: str
    field: str
    scale: float = 1.0
    counter: bool = False


_GPU_METRICS: tuple[_GpuMetric, ...] = (
    _GpuMetric(
        "fleetguard_gpu_utilization_ratio",
        "GPU busy time ratio (nvmlDeviceGetUtilizationRates.gpu)",
        "utilization_gpu_percent",
        0.01,
    ),
    _GpuMetric(
        "fleetguard_gpu_memory_utilization_ratio",
        "Memory controller busy ratio (utilization.memory)",
        "utilization_memory_percent",
        0.01,
    ),
    _GpuMetric("fleetguard_gpu_memory_used_bytes", "Framebuffer memory used", "memory_used_bytes"),
    _GpuMetric("fleetguard_gpu_memory_total_bytes", "Framebuffer memory total", "memory_total_bytes"),
    _GpuMetric("fleetguard_gpu_temperature_celsius", "GPU die temperature", "temperature_celsius"),
    _GpuMetric("fleetguard_gpu_power_watts", "Power draw", "power_watts"),
    _GpuMetric(
        "fleetguard_gpu_energy_joules", "Energy consumed since driver load", "energy_joules", counter=True
    ),
    _GpuMetric("fleetguard_gpu_sm_clock_hertz", "SM clock", "sm_clock_mhz", 1e6),
    _GpuMetric("fleetguard_gpu_memory_clock_hertz", "Memory clock", "memory_clock_mhz", 1e6),
    _GpuMetric(
        "fleetguard_gpu_performance_state", "Performance state (0 = P0, maximum)", "performance_state"
    ),
    _GpuMetric(
        "fleetguard_gpu_pcie_replay_errors", "PCIe replay counter", "pcie_replay_errors", counter=True
    ),
    _GpuMetric("fleetguard_gpu_pcie_tx_bytes_per_second", "PCIe TX throughput", "pcie_tx_bytes_per_second"),
    _GpuMetric("fleetguard_gpu_pcie_rx_bytes_per_second", "PCIe RX throughput", "pcie_rx_bytes_per_second"),
    _GpuMetric("fleetguard_gpu_pcie_link_generation", "Current PCIe link generation", "pcie_link_gen"),
    _GpuMetric(
        "fleetguard_gpu_pcie_link_generation_max", "Maximum PCIe link generation", "pcie_link_gen_max"
    ),
    _GpuMetric("fleetguard_gpu_pcie_link_width", "Current PCIe link width (lanes)", "pcie_link_width"),
    _GpuMetric(
        "fleetguard_gpu_pcie_link_width_max", "Maximum PCIe link width (lanes)", "pcie_link_width_max"
    ),
    _GpuMetric("fleetguard_gpu_nvlink_links_active", "NVLink links in ACTIVE state", "nvlink_links_active"),
    _GpuMetric(
        "fleetguard_gpu_retired_pages_pending",
        "Retired pages pending a reboot (1 = yes)",
        "retired_pages_pending",
    ),
    _GpuMetric(
        "fleetguard_gpu_remapped_rows_pending",
        "Row remapping pending a reset (1 = yes)",
        "remapped_rows_pending",
    ),
    _GpuMetric(
        "fleetguard_gpu_remapped_rows_failure", "Row remapping failed (1 = yes)", "remapped_rows_failure"
    ),
    # GPM profiling metrics (Hopper and later; absent on older GPUs), averaged over the sampling round
    _GpuMetric("fleetguard_gpu_sm_activity_ratio", "SMs busy (GPM SM_UTIL)", "gpm_sm_activity_percent", 0.01),
    _GpuMetric(
        "fleetguard_gpu_sm_occupancy_ratio",
        "Resident warps of the maximum (GPM SM_OCCUPANCY)",
        "gpm_sm_occupancy_percent",
        0.01,
    ),
    _GpuMetric(
        "fleetguard_gpu_tensor_activity_ratio",
        "Tensor cores busy (GPM ANY_TENSOR_UTIL)",
        "gpm_tensor_activity_percent",
        0.01,
    ),
    _GpuMetric(
        "fleetguard_gpu_dram_bandwidth_ratio",
        "DRAM bandwidth used of the maximum (GPM DRAM_BW_UTIL)",
        "gpm_dram_bandwidth_percent",
        0.01,
    ),
    _GpuMetric(
        "fleetguard_gpu_nvlink_tx_bytes_per_second",
        "NVLink TX, all links (GPM)",
        "nvlink_tx_bytes_per_second",
    ),
    _GpuMetric(
        "fleetguard_gpu_nvlink_rx_bytes_per_second",
        "NVLink RX, all links (GPM)",
        "nvlink_rx_bytes_per_second",
    ),
    # read every collectors.nvml_slow_interval_seconds; the timestamp says how old these readings are
    _GpuMetric(
        "fleetguard_gpu_power_violation_seconds",
        "Time clocks were held down by the power limit (nvmlDeviceGetViolationStatus)",
        "violation_power_seconds",
        counter=True,
    ),
    _GpuMetric(
        "fleetguard_gpu_thermal_violation_seconds",
        "Time clocks were held down by temperature (nvmlDeviceGetViolationStatus)",
        "violation_thermal_seconds",
        counter=True,
    ),
    _GpuMetric(
        "fleetguard_gpu_slow_fields_read_timestamp_seconds",
        "When the slow fields (PCIe replay and link, NVLink, violation times) were last read",
        "slow_read_ts",
    ),
)

# (metric, label value, field) for counter families split by a label.
_ECC_FIELDS = (
    ("corrected", "volatile", "ecc_corrected_volatile"),
    ("uncorrected", "volatile", "ecc_uncorrected_volatile"),
    ("corrected", "aggregate", "ecc_corrected_aggregate"),
    ("uncorrected", "aggregate", "ecc_uncorrected_aggregate"),
)
_NVLINK_FIELDS = (
    ("crc_flit", "nvlink_crc_flit_errors"),
    ("crc_data", "nvlink_crc_data_errors"),
    ("replay", "nvlink_replay_errors"),
    ("recovery", "nvlink_recovery_errors"),
)
_REMAPPED_FIELDS = (("corrected", "remapped_rows_corrected"), ("uncorrected", "remapped_rows_uncorrected"))
_RETIRED_FIELDS = (("single_bit", "retired_pages_sbe"), ("double_bit", "retired_pages_dbe"))


@dataclass
class AgentStats:
    """The agent's own health, exported beside the signals."""

    rounds: int = 0
    round_cpu_seconds: float = 0.0
    rows_written: dict[str, int] = field(default_factory=dict)
    store_write_errors: int = 0
    buffered_rows: int = 0
    collector_errors: dict[str, int] = field(default_factory=dict)  # exceptions escaping a collector
    dropped_rows: int = 0  # oldest rows dropped while the store failed and the buffer was full
    rejected_rows: int = 0  # rows the store refused one by one (set aside in rejected.jsonl)


class MetricsState(PromCollector):
    """Latest readings and cumulative counts, updated by the agent, rendered at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gpus: dict[tuple[str, int], GpuSample] = {}
        self._nics: dict[tuple[str, str, int], NicSample] = {}
        self._nic_counters: dict[tuple[str, str, int, str, str], int] = {}
        # (host, normalised pci_bus_id, gpu index or -1, xid) -> occurrences; named by GPU when rendered
        self._xids: dict[tuple[str, str, int, int], int] = {}
        self._sxids: dict[tuple[str, str, str, int], int] = {}  # (host, nvswitch, pci_bus_id, sxid) -> n
        self._directory = GpuDirectory()  # which GPUs are up; names GPUs that events know by bus id only
        self._events: dict[tuple[str, str], int] = {}  # (host, kind) -> occurrences
        self._problems: dict[tuple[str, str], int] = {}
        self._collectors_up: dict[str, bool] = {}
        self._risk: dict[tuple[str, str], float] = {}
        self.stats = AgentStats()
        self._round = 0  # bumped by round_done: the exposition text of an earlier round is stale
        self._render_lock = threading.Lock()
        self._rendered: tuple[int, bytes] | None = None
        self._scraped_round: int | None = None  # the round of the last scrape
        self._scrape_gap: int | None = None  # rounds between the last two scrapes in different rounds
        # Called (agent thread, outside the locks) after each round_done: the /metrics server's "render now".
        self.on_round: list[Callable[[], None]] = []
        # More families rendered with these (the shipping spool's counters on an agent with a controller).
        self.extra: list[PromCollector] = []

    # ---- updates (agent thread) ---------------------------------------------------------------------

    def observe(self, batch: Batch) -> None:
        with self._lock:
            for s in batch.gpu_samples:
                self._gpus[(s.host, s.gpu_index)] = s
            for missing in self._directory.seen(batch.gpu_samples):
                self._gpus.pop(missing, None)  # its last reading must not look live
            for n in batch.nic_samples:
                self._nics[(n.host, n.device, n.port)] = n
            for c in batch.nic_counters:
                self._nic_counters[(c.host, c.device, c.port, c.group, c.counter)] = c.value
            self._count_events(batch.events)

    def _count_events(self, events: Iterable[Event]) -> None:
        for e in events:
            key = (e.host, e.kind)
            self._events[key] = self._events.get(key, 0) + e.count
            if e.kind == EventKind.XID and e.code is not None:
                index = e.gpu_index if e.gpu_index is not None else -1
                xkey = (e.host, bus_key(e.pci_bus_id), index, e.code)
                self._xids[xkey] = self._xids.get(xkey, 0) + e.count
            elif e.kind == EventKind.SXID and e.code is not None:
                skey = (e.host, e.device or "", bus_key(e.pci_bus_id), e.code)
                self._sxids[skey] = self._sxids.get(skey, 0) + e.count

    def forget_gpu(self, host: str, gpu_index: int) -> None:
        """Stop exporting a GPU's last reading (it was lost): stale values must not look live. Its
        fleetguard_gpu_up series stays, at 0."""
        with self._lock:
            self._gpus.pop((host, gpu_index), None)
            self._directory.lost(host, gpu_index)

    def set_problems(self, collector: str, problems: Mapping[str, int]) -> None:
        with self._lock:
            for reason, count in problems.items():
                self._problems[(collector, reason)] = count

    def set_collector_up(self, collector: str, up: bool) -> None:
        with self._lock:
            self._collectors_up[collector] = up

    def set_predictions(self, predictions: Iterable[Prediction]) -> None:
        with self._lock:
            self._risk = {(p.host, p.device_id): p.risk for p in predictions}
            self._round += 1

    def round_done(self) -> None:
        """A sampling round (or a new set of predictions) is in: the next scrape renders the state afresh."""
        with self._lock:
            self._round += 1
        for listener in list(self.on_round):
            listener()

    def wants_rendering(self) -> bool:
        """Whether someone scrapes often enough (FAST_SCRAPE_ROUNDS) that rendering each round's text as it
        completes saves the next scrape the wait instead of rendering text nobody reads."""
        with self._lock:
            last, gap = self._scraped_round, self._scrape_gap
            return (
                last is not None
                and gap is not None
                and gap <= FAST_SCRAPE_ROUNDS
                and self._round - last <= FAST_SCRAPE_ROUNDS
            )

    def _scraped(self) -> None:
        """Someone scrapes the current round (hold `_lock`). Scrapes within one round (fifty scrapers at
        once) are one: the gap is between rounds scraped."""
        last = self._scraped_round
        if last is not None and self._round > last:
            self._scrape_gap = self._round - last
        self._scraped_round = self._round

    # ---- rendering (scrape thread) ------------------------------------------------------------------

    def exposition(self, scrape: bool = True) -> bytes:
        """The Prometheus text of the state as of the last completed round. Rendered by the first caller
        after `round_done`; concurrent and later callers of the same round share those bytes. scrape=False:
        rendering ahead, which does not count as someone scraping."""
        with self._render_lock:
            with self._lock:
                current = self._round
                if scrape:
                    self._scraped()
            if self._rendered is None or self._rendered[0] != current:
                self._rendered = (current, generate_latest(self))
            return self._rendered[1]

    def rendered_now(self) -> bytes | None:
        """The text of the last completed round if it is already rendered (a scrape, without waiting or
        rendering: for an event loop's thread); None otherwise."""
        rendered = self._rendered  # one read of an immutable tuple: no lock needed to see a whole one
        with self._lock:
            self._scraped()
            if rendered is None or rendered[0] != self._round:
                return None
        return rendered[1]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            gpus = list(self._gpus.values())
            nics = list(self._nics.values())
            nic_counters = dict(self._nic_counters)
            gpu_states = list(self._directory.states())
            xids = _xid_rows(self._xids, self._directory)
            sxids = dict(self._sxids)
            events = dict(self._events)
            problems = dict(self._problems)
            up = dict(self._collectors_up)
            risk = _risk_rows(self._risk, self._directory)
            stats = AgentStats(
                self.stats.rounds,
                self.stats.round_cpu_seconds,
                dict(self.stats.rows_written),
                self.stats.store_write_errors,
                self.stats.buffered_rows,
                dict(self.stats.collector_errors),
                self.stats.dropped_rows,
                self.stats.rejected_rows,
            )
        yield _gpu_up_family(gpu_states)
        yield from _gpu_families(gpus)
        yield from _nic_families(nics, nic_counters)
        xid = CounterMetricFamily(
            "fleetguard_gpu_xid_errors",
            "XID errors reported by the NVIDIA driver (gpu and uuid empty while the bus id names no GPU)",
            labels=[*_GPU_LABELS, "pci_bus_id", "xid"],
        )
        for labels, n in sorted(xids.items()):
            xid.add_metric(list(labels), n)
        yield xid
        sxid = CounterMetricFamily(
            "fleetguard_nvswitch_sxid_errors",
            "SXID errors reported by the NVSwitch driver",
            labels=["host", "nvswitch", "pci_bus_id", "sxid"],
        )
        for (host, switch, bus, code), n in sorted(sxids.items()):
            sxid.add_metric([host, switch, bus, str(code)], n)
        yield sxid
        ev = CounterMetricFamily(
            "fleetguard_events", "Fault events by kind (every occurrence)", labels=["host", "kind"]
        )
        for (host, kind), n in sorted(events.items()):
            ev.add_metric([host, kind], n)
        yield ev
        risk_family = GaugeMetricFamily(
            "fleetguard_gpu_failure_risk",
            "Predicted risk that the GPU fails within the model horizon",
            labels=_GPU_LABELS,
        )
        for labels, value in sorted(risk.items()):
            risk_family.add_metric(list(labels), value)
        yield risk_family
        yield from _agent_families(stats, problems, up)
        for extra in self.extra:
            yield from extra.collect()


def _gpu_up_family(states: list[tuple[GpuName, bool]]) -> Metric:
    up = GaugeMetricFamily(
        "fleetguard_gpu_up",
        "GPU reporting (1) or lost: gone from its host's sampling round or fallen off the bus (0)",
        labels=_GPU_LABELS,
    )
    for name, is_up in states:
        up.add_metric(name.labels, 1.0 if is_up else 0.0)
    return up


def _xid_rows(
    xids: Mapping[tuple[str, str, int, int], int], directory: GpuDirectory
) -> dict[tuple[str, ...], int]:
    """Label values (host, gpu, uuid, pci_bus_id, xid) -> occurrences: one XID that NVML reported by index
    and the kernel log by bus id lands in one series."""
    rows: dict[tuple[str, ...], int] = {}
    for (host, bus, index, code), n in xids.items():
        name = directory.by_index(host, index) if index >= 0 else directory.by_bus(host, bus)
        gpu, uuid = (str(name.index), name.uuid) if name else (str(index) if index >= 0 else "", "")
        key = (host, gpu, uuid, bus or (name.pci_bus_id if name else ""), str(code))
        rows[key] = rows.get(key, 0) + n
    return rows


def _risk_rows(
    risk: Mapping[tuple[str, str], float], directory: GpuDirectory
) -> dict[tuple[str, ...], float]:
    """(host, gpu, uuid) -> risk; gpu is empty for a device this agent has not sampled."""
    rows: dict[tuple[str, ...], float] = {}
    for (host, uuid), value in risk.items():
        name = directory.by_uuid(host, uuid)
        rows[(host, str(name.index) if name else "", uuid)] = value
    return rows


def _gpu_families(gpus: list[GpuSample]) -> Iterator[Metric]:
    def labels(s: GpuSample) -> list[str]:
        return [s.host, str(s.gpu_index), s.uuid]

    info = GaugeMetricFamily(
        "fleetguard_gpu_info",
        "GPU identity (value is always 1)",
        labels=[*_GPU_LABELS, "name", "pci_bus_id", "driver_version"],
    )
    for s in gpus:
        info.add_metric([*labels(s), s.name or "", s.pci_bus_id or "", s.driver_version or ""], 1)
    yield info
    for m in _GPU_METRICS:
        family: GaugeMetricFamily | CounterMetricFamily = (
            CounterMetricFamily(m.name, m.doc, labels=_GPU_LABELS)
            if m.counter
            else GaugeMetricFamily(m.name, m.doc, labels=_GPU_LABELS)
        )
        for s in gpus:
            value = getattr(s, m.field)
            if value is not None:  # not supported on this GPU: no series, rather than a fake 0
                family.add_metric(labels(s), float(value) * m.scale)
        yield family
    ecc = CounterMetricFamily(
        "fleetguard_gpu_ecc_errors",
        "ECC errors (NVML total ECC errors)",
        labels=[*_GPU_LABELS, "type", "scope"],
    )
    for s in gpus:
        for kind, scope, name in _ECC_FIELDS:
            value = getattr(s, name)
            if value is not None:
                ecc.add_metric([*labels(s), kind, scope], value)
    yield ecc
    yield _split_family(
        gpus,
        labels,
        "fleetguard_gpu_nvlink_errors",
        "NVLink errors summed over links",
        "type",
        _NVLINK_FIELDS,
        counter=True,
    )
    yield _split_family(
        gpus,
        labels,
        "fleetguard_gpu_remapped_rows",
        "Rows remapped (Ampere and later)",
        "type",
        _REMAPPED_FIELDS,
        counter=False,
    )
    yield _split_family(
        gpus,
        labels,
        "fleetguard_gpu_retired_pages",
        "Pages retired (before Ampere)",
        "cause",
        _RETIRED_FIELDS,
        counter=False,
    )
    reasons = GaugeMetricFamily(
        "fleetguard_gpu_clocks_event_active",
        "Clocks held down for this reason (1 = active)",
        labels=[*_GPU_LABELS, "reason"],
    )
    for s in gpus:
        if s.clocks_event_reasons is not None:
            for reason, bit in CLOCKS_EVENT_REASONS.items():
                reasons.add_metric([*labels(s), reason], 1.0 if s.clocks_event_reasons & bit else 0.0)
    yield reasons


def _split_family(
    gpus: list[GpuSample],
    labels: Callable[[GpuSample], list[str]],
    name: str,
    doc: str,
    label: str,
    fields: tuple[tuple[str, str], ...],
    counter: bool,
) -> Metric:
    family: GaugeMetricFamily | CounterMetricFamily = (
        CounterMetricFamily(name, doc, labels=[*_GPU_LABELS, label])
        if counter
        else GaugeMetricFamily(name, doc, labels=[*_GPU_LABELS, label])
    )
    for s in gpus:
        for value_label, field_name in fields:
            value = getattr(s, field_name)
            if value is not None:
                family.add_metric([*labels(s), value_label], value)
    return family


def _nic_families(
    nics: list[NicSample], counters: Mapping[tuple[str, str, int, str, str], int]
) -> Iterator[Metric]:
    up = GaugeMetricFamily(
        "fleetguard_nic_port_up", "Port state is ACTIVE (1) or not (0)", labels=_NIC_LABELS
    )
    rate = GaugeMetricFamily(
        "fleetguard_nic_port_rate_bytes_per_second", "Port link rate", labels=_NIC_LABELS
    )
    info = GaugeMetricFamily(
        "fleetguard_nic_port_info",
        "Port state and link layer (value is always 1)",
        labels=[*_NIC_LABELS, "state", "phys_state", "link_layer"],
    )
    for n in nics:
        port_labels = [n.host, n.device, str(n.port)]
        up.add_metric(port_labels, 1.0 if n.state == "ACTIVE" else 0.0)
        if n.rate_gbps is not None:
            rate.add_metric(port_labels, n.rate_gbps * 1e9 / 8)
        info.add_metric([*port_labels, n.state or "", n.phys_state or "", n.link_layer or ""], 1)
    yield up
    yield rate
    yield info
    yield from nic_counter_families(counters)


def _agent_families(
    stats: AgentStats, problems: Mapping[tuple[str, str], int], up: Mapping[str, bool]
) -> Iterator[Metric]:
    yield CounterMetricFamily("fleetguard_agent_rounds", "Sampling rounds completed", value=stats.rounds)
    yield CounterMetricFamily(
        "fleetguard_agent_round_cpu_seconds",
        "CPU time spent in sampling rounds",
        value=stats.round_cpu_seconds,
    )
    yield GaugeMetricFamily(
        "fleetguard_agent_buffered_rows", "Rows waiting to be written to the store", value=stats.buffered_rows
    )
    written = CounterMetricFamily(
        "fleetguard_store_rows_written", "Rows written to the store", labels=["table"]
    )
    for table, n in sorted(stats.rows_written.items()):
        written.add_metric([table], n)
    yield written
    yield CounterMetricFamily(
        "fleetguard_store_write_errors",
        "Failed store writes (rows kept and retried)",
        value=stats.store_write_errors,
    )
    yield CounterMetricFamily(
        "fleetguard_store_dropped_rows",
        "Rows lost: the store kept failing and the write buffer was full (oldest first)",
        value=stats.dropped_rows,
    )
    yield CounterMetricFamily(
        "fleetguard_store_rejected_rows",
        "Rows the store refused one by one, set aside in rejected.jsonl",
        value=stats.rejected_rows,
    )
    errors = CounterMetricFamily(
        "fleetguard_collector_errors",
        "Unexpected exceptions inside a collector (the round went on without it)",
        labels=["collector"],
    )
    for name, n in sorted(stats.collector_errors.items()):
        errors.add_metric([name], n)
    yield errors
    skipped = CounterMetricFamily(
        "fleetguard_collector_skipped_inputs",
        "Inputs a collector skipped (unreadable file, garbage value, bad line)",
        labels=["collector", "reason"],
    )
    for (collector, reason), n in sorted(problems.items()):
        skipped.add_metric([collector, reason], n)
    yield skipped
    collector_up = GaugeMetricFamily(
        "fleetguard_collector_up", "Collector is running (1) or unavailable (0)", labels=["collector"]
    )
    for name, is_up in sorted(up.items()):
        collector_up.add_metric([name], 1.0 if is_up else 0.0)
    yield collector_up
