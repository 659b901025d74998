"""The RDMA port counters on /metrics, one family per unit, so that a sum over a family's series means
something: bytes, packets, error events, congestion packets, wait ticks.

Only counters whose unit is known are exported; the store keeps every sysfs counter as read
(`nic_counters`). Within a family no series overlaps another (port_xmit_packets is exported, not its
unicast/multicast breakdown), so summing over ports or counters counts nothing twice."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric

from collectors.rdma import DATA_COUNTER_BYTES

NIC_LABELS = ["host", "device", "port"]


@dataclass(frozen=True)
class NicFamily:
    name: str  # without _total (prometheus_client adds it to counters)
    doc: str
    label: str  # the label telling the family's series of one port apart; "" for one series per port


DATA = NicFamily(
    "fleetguard_nic_port_data_bytes", "Bytes sent or received (port_xmit_data/port_rcv_data x 4)", "direction"
)
PACKETS = NicFamily(
    "fleetguard_nic_port_packets",
    "Packets sent or received (port_xmit_packets/port_rcv_packets)",
    "direction",
)
ERRORS = NicFamily(
    "fleetguard_nic_port_errors",
    "Error events by counter (IBTA PortCounters, mlx5 hw_counters); each counts events",
    "counter",
)
CONGESTION = NicFamily(
    "fleetguard_nic_port_congestion_packets",
    "RoCE congestion control packets by counter (CNPs sent and handled, ECN-marked packets)",
    "counter",
)
XMIT_WAIT = NicFamily(
    "fleetguard_nic_port_xmit_wait_ticks",
    "Ticks the port had data to send but no flow-control credits (port_xmit_wait)",
    "",
)
FAMILIES = (DATA, PACKETS, ERRORS, CONGESTION, XMIT_WAIT)

_ERROR_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
)
_HW_ERROR_COUNTERS = (
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "req_transport_retries_exceeded",
    "out_of_buffer",
    "duplicate_request",
    "implied_nak_seq_err",
    "req_cqe_error",
    "resp_cqe_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rx_icrc_encapsulated",
)
_HW_CONGESTION_COUNTERS = ("np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "np_ecn_marked_roce_packets")

# (sysfs group, counter file) -> (family, label value, scale to the family's unit)
CLASSIFICATION: Mapping[tuple[str, str], tuple[NicFamily, str, int]] = {
    ("counters", "port_xmit_data"): (DATA, "tx", DATA_COUNTER_BYTES),
    ("counters", "port_rcv_data"): (DATA, "rx", DATA_COUNTER_BYTES),
    ("counters", "port_xmit_packets"): (PACKETS, "tx", 1),
    ("counters", "port_rcv_packets"): (PACKETS, "rx", 1),
    ("counters", "port_xmit_wait"): (XMIT_WAIT, "", 1),
    **{("counters", name): (ERRORS, name, 1) for name in _ERROR_COUNTERS},
    **{("hw_counters", name): (ERRORS, name, 1) for name in _HW_ERROR_COUNTERS},
    **{("hw_counters", name): (CONGESTION, name, 1) for name in _HW_CONGESTION_COUNTERS},
}

CounterKey = tuple[str, str, int, str, str]  # host, device, port, group, counter


def nic_counter_families(counters: Mapping[CounterKey, int]) -> Iterator[Metric]:
    """One counter family per unit from the latest value of every (port, group, counter)."""
    families = {
        f: CounterMetricFamily(f.name, f.doc, labels=[*NIC_LABELS, f.label] if f.label else NIC_LABELS)
        for f in FAMILIES
    }
    for (host, device, port, group, counter), value in sorted(counters.items()):
        known = CLASSIFICATION.get((group, counter))
        if known is None:
            continue
        family, label_value, scale = known
        labels = [host, device, str(port)]
        families[family].add_metric([*labels, label_value] if family.label else labels, value * scale)
    yield from families.values()
