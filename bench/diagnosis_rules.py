"""Cost of one diagnosis round for a large fleet: rules + incident engine over every host's records.

Each simulated second every host reports 8 GPU samples, 8 IB ports (state and 20 counters each) and, on a
few hosts, XIDs and counter faults; one `IncidentEngine.observe` is timed per round (wall and CPU), after a
warm-up that fills the per-GPU state. Usage: python bench/diagnosis_rules.py [--hosts 2048] [--rounds 30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from diagnosis.engine import IncidentEngine
from diagnosis.rules import Signals
from fleetguard.records.telemetry import Event, EventKind, GpuSample, NicCounterSample, NicSample
from fleetguard.settings.policy_files import load_policy

COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_wait",
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "out_of_sequence",
    "packet_seq_err",
    "np_cnp_sent",
    "rp_cnp_handled",
    "out_of_buffer",
)


def round_signals(hosts: int, now: float, rng: random.Random) -> Signals:
    gpus, ports, counters, events = [], [], [], []
    for h in range(hosts):
        host = f"h{h:05d}"
        for g in range(8):
            gpus.append(
                GpuSample(
                    ts=now,
                    host=host,
                    gpu_index=g,
                    uuid=f"GPU-{h:05d}-{g}",
                    pci_bus_id=f"0000:{0x18 + g:02x}:00.0",
                    temperature_celsius=60.0,
                    clocks_event_reasons=0x40 if (h == 7 and g == 0) else 0x4,
                    ecc_corrected_volatile=5,
                    ecc_uncorrected_volatile=0,
                    remapped_rows_pending=False,
                    nvlink_crc_flit_errors=0,
                    pcie_replay_errors=0,
                )
            )
            ports.append(NicSample(ts=now, host=host, device=f"mlx5_{g}", port=1, state="ACTIVE"))
            for c in COUNTERS:
                bad = c == "symbol_error" and h % 97 == 0 and g == 0
                delta = 2000 if bad else 0
                counters.append(
                    NicCounterSample(
                        ts=now,
                        host=host,
                        device=f"mlx5_{g}",
                        port=1,
                        counter=c,
                        group="counters",
                        value=delta,
                        delta=delta,
                        rate_per_second=float(delta),
                    )
                )
        if rng.random() < 0.01:
            events.append(
                Event(
                    ts=now,
                    host=host,
                    kind=EventKind.XID,
                    source="kmsg",
                    message="NVRM: Xid 79",
                    code=79,
                    pci_bus_id="0000:18:00.0",
                )
            )
    return Signals(events=events, gpu_samples=gpus, nic_samples=ports, nic_counters=counters)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(0)
    engine = IncidentEngine(load_policy(overrides={"breaker": {"max_host_fraction": 1.0}}))
    t0 = 1_700_000_000.0
    walls, cpus, records = [], [], 0
    for r in range(args.warmup + args.rounds):
        signals = round_signals(args.hosts, t0 + r, rng)
        n = sum(
            len(list(x))
            for x in (signals.gpu_samples, signals.nic_samples, signals.nic_counters, signals.events)
        )  # type: ignore[arg-type]
        w0, c0 = time.perf_counter(), time.process_time()
        engine.observe(signals, t0 + r)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if r >= args.warmup:
            walls.append(wall)
            cpus.append(cpu)
            records = n
    print("| hosts | records/round | open incidents | median wall ms | p95 wall ms | median CPU ms |")
    print("|---|---|---|---|---|---|")
    p95 = sorted(walls)[int(0.95 * (len(walls) - 1))]
    print(
        f"| {args.hosts:,} | {records:,} | {len(engine.active()):,} | {statistics.median(walls) * 1000:.0f} "
        f"| {p95 * 1000:.0f} | {statistics.median(cpus) * 1000:.0f} |"
    )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
