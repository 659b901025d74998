"""Cost of the controller's diagnosis round over a real store: what the round reads, not just the rules.

Each simulated second every host's rows (8 GPU samples, 8 IB ports with state and 20 counters each, XIDs on
~1% of hosts; the same fleet as bench/diagnosis_rules.py) are committed through the controller's own INSERT
(`fleetguard.controller.columns`, one ingest sequence value per statement), then one `IncidentTask` round
runs inside a writer transaction as the controller runs it: the feed reads the rows new since the last
round, the rules and the incident engine run, changes, marks and pending faults are stored, and it commits.
Wall and CPU (the whole process: DuckDB's threads too) per round, after warm-up rounds. The controller paces
its rounds (fleetguard/pacing.py: they rest so that the request handlers go first), and so does this bench:
the wall is given whole, with what of it was rest and the rest of it, the round's own time (the figure that
rows before the pacer, session 7, gave as the wall).

`--seconds-per-round N` commits N seconds of the fleet (one commit a second) before each round, as a
controller whose rounds come every N seconds sees them (its default interval is 5 s): each GPU then has N
rows in a round.

Usage: python bench/diagnosis_round.py [--hosts 2048] [--rounds 20] [--seconds-per-round 1] [--dir DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fleetguard.config import load_config
from fleetguard.controller.columns import concat, insert_sql
from fleetguard.controller.process import collect_less
from fleetguard.incidents.controller_task import IncidentTask
from fleetguard.records.telemetry import EventKind
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store
from fleetguard.store.schema import TABLES

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


def round_columns(hosts: int, now: float, rng: random.Random) -> dict[str, dict[str, list[Any]]]:
    """One second of the fleet, column-major per table (as a controller's commit group holds it)."""
    gpu: dict[str, list[Any]] = {k: [] for k in ("ts", "host", "gpu_index", "uuid", "pci_bus_id")}
    gpu |= {k: [] for k in ("temperature_celsius", "clocks_event_reasons", "ecc_corrected_volatile")}
    gpu |= {k: [] for k in ("ecc_uncorrected_volatile", "remapped_rows_pending")}
    gpu |= {k: [] for k in ("nvlink_crc_flit_errors", "pcie_replay_errors")}
    port: dict[str, list[Any]] = {k: [] for k in ("ts", "host", "device", "port", "state")}
    ctr: dict[str, list[Any]] = {k: [] for k in ("ts", "host", "device", "port", "counter", "group")}
    ctr |= {k: [] for k in ("value", "delta", "rate_per_second")}
    ev: dict[str, list[Any]] = {k: [] for k in ("ts", "host", "kind", "source", "message", "code")}
    ev["pci_bus_id"] = []
    for h in range(hosts):
        host = f"h{h:05d}"
        for g in range(8):
            for k, v in (
                ("ts", now),
                ("host", host),
                ("gpu_index", g),
                ("uuid", f"GPU-{h:05d}-{g}"),
                ("pci_bus_id", f"0000:{0x18 + g:02x}:00.0"),
                ("temperature_celsius", 60.0),
                ("clocks_event_reasons", 0x40 if (h == 7 and g == 0) else 0x4),
                ("ecc_corrected_volatile", 5),
                ("ecc_uncorrected_volatile", 0),
                ("remapped_rows_pending", False),
                ("nvlink_crc_flit_errors", 0),
                ("pcie_replay_errors", 0),
            ):
                gpu[k].append(v)
            device = f"mlx5_{g}"
            for k, v in (("ts", now), ("host", host), ("device", device), ("port", 1), ("state", "ACTIVE")):
                port[k].append(v)
            for c in COUNTERS:
                delta = 2000 if (c == "symbol_error" and h % 97 == 0 and g == 0) else 0
                for k, v in (
                    ("ts", now),
                    ("host", host),
                    ("device", device),
                    ("port", 1),
                    ("counter", c),
                    ("group", "counters"),
                    ("value", delta),
                    ("delta", delta),
                    ("rate_per_second", float(delta)),
                ):
                    ctr[k].append(v)
        if rng.random() < 0.01:
            for k, v in (
                ("ts", now),
                ("host", host),
                ("kind", EventKind.XID.value),
                ("source", "kmsg"),
                ("message", "NVRM: Xid 79"),
                ("code", 79),
                ("pci_bus_id", "0000:18:00.0"),
            ):
                ev[k].append(v)
    tables = {"gpu_samples": gpu, "nic_samples": port, "nic_counters": ctr}
    return tables | ({"events": ev} if ev["ts"] else {})


def commit(store: Store, tables: dict[str, dict[str, list[Any]]]) -> int:
    """The controller writer's statements: one INSERT per table, in one transaction."""
    rows = 0
    with store.transaction() as con:
        for name, columns in tables.items():
            arrays = concat(TABLES[name], [columns])
            view = f"__bench_{name}"
            con.register(view, arrays)
            con.execute(insert_sql(TABLES[name], view, arrays))
            con.unregister(view)
            rows += len(columns["ts"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seconds-per-round", type=int, default=1)
    ap.add_argument("--dir", default="")
    args = ap.parse_args()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="fg-round-"))
    path = folder / "round.duckdb"
    rng = random.Random(0)
    config = load_config(overrides={"store.path": str(path)})
    task = IncidentTask(config)
    task.policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0}})
    t0 = 1_700_000_000.0
    walls, cpus, rests, records = [], [], [], 0
    collect_less()  # as the controller process runs
    with Store.open(path) as store:
        for r in range(args.warmup + args.rounds):
            records = 0
            for second in range(args.seconds_per_round):
                now = t0 + r * args.seconds_per_round + second
                records += commit(store, round_columns(args.hosts, now, rng))
            w0, c0 = time.perf_counter(), time.process_time()
            with store.transaction() as con:
                task(con, now)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if r >= args.warmup:
                walls.append(wall)
                cpus.append(cpu)
                rests.append(task.pacer.rested)
        active = len(task.service.engine.active()) if task.service else 0
    own = [w - r for w, r in zip(walls, rests, strict=True)]
    print(
        "| hosts | records/round | open incidents | median wall ms, paced | of which rest | "
        "median wall less rest ms | p95 wall less rest ms | median CPU ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    p95 = sorted(own)[int(0.95 * (len(own) - 1))]
    print(
        f"| {args.hosts:,} | {records:,} | {active:,} | {statistics.median(walls) * 1000:.0f} "
        f"| {statistics.median(rests) * 1000:.0f} | {statistics.median(own) * 1000:.0f} | {p95 * 1000:.0f} "
        f"| {statistics.median(cpus) * 1000:.0f} |"
    )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
