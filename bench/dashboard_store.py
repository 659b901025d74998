"""A dashboard benchmark store: 2,048 simulated hosts x 8 GPUs x 8 IB ports over 24 h, written through the
store's bulk `append_columns` path, with the controller's rollups computed over it.

Host names, GPU UUIDs and PCI addresses come from the simulator (`SimulatedFleet`); the values are drawn
vectorised with numpy (stepping 16,384 simulated GPUs through 86,400 seconds in Python would take hours),
with the simulator's fault kinds scripted on a share of the fleet: thermal throttling, ECC ramps ending in a
double-bit error, GPUs falling off the bus, application XID storms, IB link flaps and symbol errors, silent
hosts, stragglers. Incidents, their evidence and action ledger and the alert outbox are written as rows.

Cadence (what a 24 h dashboard reads; the 1-minute rollup is the finest grain a 24 h view needs):
GPU samples every 60 s (23.6 M rows), NIC port state and traffic counters every 5 min, error counters only
where they moved (the controller's compaction), predictions every 15 min, heartbeats and step timings every
30 s for the last 6 h of 16 jobs x 256 ranks.

Usage: python bench/dashboard_store.py OUT.duckdb
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.simulated import SimulatedFleet
from fleetguard.store import Store

HOSTS = int(os.environ.get("FLEETGUARD_BENCH_HOSTS", "2048"))  # fewer for a quick look
GPUS, PORTS = 8, 8
END_TS = 1_790_006_400.0  # a whole hour, so rollup buckets line up
SPAN = 86_400.0
GPU_STEP = 60.0
NIC_STEP = 300.0
RISK_STEP = 900.0
JOB_STEP = 30.0
JOB_SPAN = 6 * 3600.0
JOBS, JOB_HOSTS = min(16, HOSTS // 32 or 1), min(32, HOSTS)
SILENT_HOSTS = min(5, HOSTS)  # stop reporting 30 minutes before the end
LOST_SHARE, ECC_SHARE, HOT_SHARE = 0.002, 0.005, 0.01
SEED = 1


@dataclass(frozen=True)
class Fleet:
    hosts: np.ndarray  # per GPU (host-major)
    gpu_index: np.ndarray
    uuid: np.ndarray
    pci: np.ndarray
    port_host: np.ndarray  # per port
    port_device: np.ndarray


def fleet_identity() -> Fleet:
    sim = SimulatedFleet(HOSTS, GPUS, ports_per_host=PORTS, seed=SEED, start_ts=END_TS - SPAN)
    hosts = np.array([h.name for h in sim.hosts for _ in h.gpus])
    return Fleet(
        hosts=hosts,
        gpu_index=np.array([g.index for h in sim.hosts for g in h.gpus], dtype=np.int64),
        uuid=np.array([g.uuid for h in sim.hosts for g in h.gpus]),
        pci=np.array([g.pci_bus_id for h in sim.hosts for g in h.gpus]),
        port_host=np.array([h.name for h in sim.hosts for _ in h.ports]),
        port_device=np.array([p.device for h in sim.hosts for p in h.ports]),
    )


def _strings(values: np.ndarray) -> pa.Array:
    return pa.array(values.tolist(), type=pa.string())


def write_gpu_samples(store: Store, fleet: Fleet, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = len(fleet.uuid)
    order = rng.permutation(n)
    # At least one GPU of each fault, so a small store (FLEETGUARD_BENCH_HOSTS) has every page to show.
    lost = order[: max(1, int(n * LOST_SHARE))]
    ecc = order[len(lost) : len(lost) + max(1, int(n * ECC_SHARE))]
    hot = order[len(lost) + len(ecc) : len(lost) + len(ecc) + max(1, int(n * HOT_SHARE))]
    lost_at = END_TS - rng.uniform(600, SPAN / 2, len(lost))
    silent_hosts = np.array([f"sim-host-{i:03d}" for i in rng.choice(HOSTS, SILENT_HOSTS, replace=False)])
    silent = np.isin(fleet.hosts, silent_hosts)
    base_util = rng.uniform(70, 99, n)
    base_temp = rng.uniform(55, 70, n)
    ecc_rate = np.zeros(n)
    ecc_rate[ecc] = rng.uniform(0.5, 5.0, len(ecc))  # corrected errors a minute, rising
    lost_time = np.full(n, np.inf)
    lost_time[lost] = lost_at
    hot_mask = np.zeros(n, dtype=bool)
    hot_mask[hot] = True
    steps = np.arange(END_TS - SPAN, END_TS + 1, GPU_STEP)
    for chunk in np.array_split(steps, 24):
        t = np.repeat(chunk, n)
        idx = np.tile(np.arange(n), len(chunk))
        keep = (t < lost_time[idx]) & ~(silent[idx] & (t > END_TS - 1800))
        t, idx = t[keep], idx[keep]
        m = len(t)
        phase = (t - (END_TS - SPAN)) / SPAN
        throttling = hot_mask[idx] & (np.sin(t / 1800.0 + idx) > 0.3)
        temp = base_temp[idx] + rng.normal(0, 1.0, m) + np.where(throttling, 26.0, 0.0)
        corrected = (ecc_rate[idx] * (phase * SPAN / 60.0) ** 1.3).astype(np.int64)
        uncorrected = ((ecc_rate[idx] > 0) & (phase > 0.9)).astype(np.int64)
        table = pa.table(
            {
                "ts": pa.array(t),
                "host": _strings(fleet.hosts[idx]),
                "gpu_index": pa.array(fleet.gpu_index[idx]),
                "uuid": _strings(fleet.uuid[idx]),
                "name": pa.array(["NVIDIA H100 80GB HBM3"] * m),
                "pci_bus_id": _strings(fleet.pci[idx]),
                "driver_version": pa.array(["550.90.07"] * m),
                "utilization_gpu_percent": pa.array(np.clip(base_util[idx] + rng.normal(0, 3, m), 0, 100)),
                "memory_used_bytes": pa.array((rng.uniform(60, 78, m) * 2**30).astype(np.int64)),
                "memory_total_bytes": pa.array(np.full(m, 85_520_809_984, dtype=np.int64)),
                "temperature_celsius": pa.array(temp),
                "power_watts": pa.array(
                    np.clip(rng.normal(600, 40, m) - np.where(throttling, 200, 0), 80, 700)
                ),
                "sm_clock_mhz": pa.array(np.where(throttling, 990, 1980).astype(np.int64)),
                "clocks_event_reasons": pa.array(np.where(throttling, 0x20 | 0x40, 0).astype(np.int64)),
                "ecc_corrected_volatile": pa.array(corrected),
                "ecc_uncorrected_volatile": pa.array(uncorrected),
                "ecc_corrected_aggregate": pa.array(corrected),
                "ecc_uncorrected_aggregate": pa.array(uncorrected),
                "remapped_rows_corrected": pa.array(np.minimum(corrected // 100, 8)),
                "remapped_rows_uncorrected": pa.array(uncorrected),
                "remapped_rows_pending": pa.array(uncorrected > 0),
                "remapped_rows_failure": pa.array(np.zeros(m, dtype=bool)),
                "pcie_replay_errors": pa.array(np.zeros(m, dtype=np.int64)),
            }
        )
        store.append_columns("gpu_samples", table)
    return {"lost": lost, "ecc": ecc, "hot": hot, "lost_at": lost_at, "silent_hosts": silent_hosts}


def write_events(store: Store, fleet: Fleet, faults: dict[str, np.ndarray], rng: np.random.Generator) -> int:
    rows: dict[str, list[object]] = {
        k: [] for k in ("ts", "host", "kind", "source", "message", "code", "pci_bus_id", "gpu_index", "count")
    }

    def add(ts: float, i: int, kind: str, code: int | None, message: str, count: int = 1) -> None:
        for key, value in (
            ("ts", ts),
            ("host", str(fleet.hosts[i])),
            ("kind", kind),
            ("source", "simulated"),
            ("message", message),
            ("code", code),
            ("pci_bus_id", str(fleet.pci[i])),
            ("gpu_index", int(fleet.gpu_index[i])),
            ("count", count),
        ):
            rows[key].append(value)

    for i, at in zip(faults["lost"], faults["lost_at"], strict=True):
        add(float(at), int(i), "xid", 79, f"NVRM: Xid (PCI:{fleet.pci[i]}): 79, GPU has fallen off the bus.")
        add(
            float(at),
            int(i),
            "gpu_fallen_off_bus",
            None,
            f"NVRM: GPU at PCI:{fleet.pci[i]}: GPU has fallen off the bus.",
        )
        add(float(at) + 1, int(i), "gpu_lost", None, "NVML: GPU is lost")
    for i in faults["ecc"]:
        at = END_TS - SPAN * 0.1 + rng.uniform(0, 600)
        add(
            at,
            int(i),
            "xid",
            63,
            f"NVRM: Xid (PCI:{fleet.pci[i]}): 63, Row Remapper: New row marked for remapping",
        )
        add(
            at + 60,
            int(i),
            "xid",
            48,
            f"NVRM: Xid (PCI:{fleet.pci[i]}): 48, An uncorrectable double bit error (DBE)",
        )
    for _ in range(5000):  # application XIDs: user bugs, folded repeats
        i = int(rng.integers(len(fleet.uuid)))
        code = int(rng.choice([13, 31, 43]))
        add(
            float(END_TS - rng.uniform(0, SPAN)),
            i,
            "xid",
            code,
            f"NVRM: Xid (PCI:{fleet.pci[i]}): {code}, app fault",
            int(rng.integers(1, 20)),
        )
    flapped = rng.choice(len(fleet.port_host), 50, replace=False)
    for p in flapped:
        rows["ts"].append(float(END_TS - rng.uniform(0, SPAN)))
        rows["host"].append(str(fleet.port_host[p]))
        rows["kind"].append("link_down")
        rows["source"].append("rdma")
        rows["message"].append(f"{fleet.port_device[p]} port 1: state ACTIVE -> DOWN")
        rows["code"].append(None)
        rows["pci_bus_id"].append(None)
        rows["gpu_index"].append(None)
        rows["count"].append(1)
    store.append_columns("events", pa.table({k: pa.array(v) for k, v in rows.items()}))
    return len(rows["ts"])


def write_nics(store: Store, fleet: Fleet, rng: np.random.Generator) -> None:
    n = len(fleet.port_host)
    steps = np.arange(END_TS - SPAN, END_TS + 1, NIC_STEP)
    noisy = rng.choice(n, n // 50, replace=False)
    flappy = rng.choice(n, 50, replace=False)
    for chunk in np.array_split(steps, 12):
        t = np.repeat(chunk, n)
        idx = np.tile(np.arange(n), len(chunk))
        m = len(t)
        down = np.isin(idx, flappy) & (t > END_TS - 600)
        store.append_columns(
            "nic_samples",
            pa.table(
                {
                    "ts": pa.array(t),
                    "host": _strings(fleet.port_host[idx]),
                    "device": _strings(fleet.port_device[idx]),
                    "port": pa.array(np.ones(m, dtype=np.int64)),
                    "state": pa.array(np.where(down, "DOWN", "ACTIVE").tolist()),
                    "phys_state": pa.array(np.where(down, "Polling", "LinkUp").tolist()),
                    "rate_gbps": pa.array(np.full(m, 400.0)),
                    "link_layer": pa.array(["InfiniBand"] * m),
                }
            ),
        )
        frames = []
        for counter in ("port_xmit_data", "port_rcv_data"):
            rate = rng.uniform(5e9, 1.2e10, m)  # 4-byte words a second
            frames.append(
                (
                    counter,
                    idx,
                    t,
                    (rate * (t - (END_TS - SPAN))).astype(np.uint64),
                    (rate * NIC_STEP).astype(np.int64),
                    rate,
                )
            )
        moved = np.isin(idx, noisy)
        if moved.any():
            d = rng.integers(1, 50, int(moved.sum()))
            frames.append(
                ("symbol_error", idx[moved], t[moved], np.cumsum(d).astype(np.uint64), d, d / NIC_STEP)
            )
        flap = np.isin(idx, flappy) & (t > END_TS - 600) & (t <= END_TS - 300)
        if flap.any():
            k = int(flap.sum())
            frames.append(
                (
                    "link_downed",
                    idx[flap],
                    t[flap],
                    np.ones(k, dtype=np.uint64),
                    np.ones(k, dtype=np.int64),
                    np.full(k, 1 / NIC_STEP),
                )
            )
        for counter, i, ts, value, delta, rate in frames:
            k = len(ts)
            store.append_columns(
                "nic_counters",
                pa.table(
                    {
                        "ts": pa.array(ts),
                        "host": _strings(fleet.port_host[i]),
                        "device": _strings(fleet.port_device[i]),
                        "port": pa.array(np.ones(k, dtype=np.int64)),
                        "counter": pa.array([counter] * k),
                        "group": pa.array(["counters"] * k),
                        "value": pa.array(value, type=pa.uint64()),
                        "delta": pa.array(delta),
                        "rate_per_second": pa.array(rate),
                    }
                ),
            )


def write_predictions(
    store: Store, fleet: Fleet, faults: dict[str, np.ndarray], rng: np.random.Generator
) -> None:
    n = len(fleet.uuid)
    base = rng.beta(1, 30, n)
    base[faults["ecc"]] = rng.uniform(0.6, 0.95, len(faults["ecc"]))
    why = json.dumps(
        [
            {"feature": "ecc_corrected_aggregate_slope", "value": 3.2, "contribution": 0.41},
            {"feature": "temperature_celsius_max", "value": 71.0, "contribution": 0.05},
        ]
    )
    for ts in np.arange(END_TS - SPAN + RISK_STEP, END_TS + 1, RISK_STEP):
        risk = np.clip(base + rng.normal(0, 0.01, n), 0, 1)
        order = np.argsort(-risk)
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(1, n + 1)
        store.append_columns(
            "predictions",
            pa.table(
                {
                    "ts": pa.array(np.full(n, ts)),
                    "host": _strings(fleet.hosts),
                    "device_id": _strings(fleet.uuid),
                    "risk": pa.array(risk),
                    "rank": pa.array(rank),
                    "model_id": pa.array(["bench-model"] * n),
                    "horizon_hours": pa.array(np.full(n, 24.0)),
                    "explanations": pa.array([why if r >= 0.5 else "[]" for r in risk]),
                }
            ),
        )


def write_jobs(store: Store, rng: np.random.Generator) -> None:
    steps = np.arange(END_TS - JOB_SPAN, END_TS + 1, JOB_STEP)
    ranks = JOB_HOSTS * GPUS
    findings: dict[str, list[object]] = {
        k: []
        for k in ("ts", "finding_id", "kind", "severity", "subject", "summary", "host", "job_id", "rank")
    }
    for j in range(JOBS):
        job = f"train-{j:02d}"
        slow = int(rng.integers(ranks))
        t = np.repeat(steps, ranks)
        rank = np.tile(np.arange(ranks), len(steps))
        host_of = np.array([f"sim-host-{(j * JOB_HOSTS + r // GPUS):03d}" for r in range(ranks)])
        step = np.repeat(np.arange(len(steps)), ranks)
        m = len(t)
        common = {
            "ts": pa.array(t),
            "host": _strings(host_of[rank]),
            "job_id": pa.array([job] * m),
            "rank": pa.array(rank),
        }
        store.append_columns(
            "heartbeats",
            pa.table(
                common
                | {
                    "local_rank": pa.array(rank % GPUS),
                    "world_size": pa.array(np.full(m, ranks)),
                    "pid": pa.array(1000 + rank),
                    "step": pa.array(step),
                    "section": pa.array(["step"] * m),
                }
            ),
        )
        seconds = rng.normal(1.0, 0.02, m) * np.where(rank == slow, 1.5, 1.0)
        store.append_columns(
            "step_timings",
            pa.table(
                common
                | {
                    "step": pa.array(step),
                    "section": pa.array(["forward_backward"] * m),
                    "duration_seconds": pa.array(seconds),
                }
            ),
        )
        for ts in np.arange(END_TS - JOB_SPAN, END_TS + 1, 300.0):
            for key, value in (
                ("ts", float(ts)),
                ("finding_id", f"straggler/{job}/{slow}/{int(ts)}"),
                ("kind", "straggler"),
                ("severity", "warning"),
                ("subject", f"job/{job}/rank/{slow}"),
                ("summary", f"rank {slow} of job {job} is 1.50x its peers' median"),
                ("host", str(host_of[slow])),
                ("job_id", job),
                ("rank", slow),
            ):
                findings[key].append(value)
    store.append_columns("findings", pa.table({k: pa.array(v) for k, v in findings.items()}))


def write_incidents(
    store: Store, fleet: Fleet, faults: dict[str, np.ndarray], rng: np.random.Generator
) -> int:
    """One incident per faulty GPU (as the engine keys them), with evidence, a ledger line and an alert."""
    cur = store.cursor()
    gpus = np.concatenate([faults["lost"], faults["ecc"], faults["hot"]])
    kinds = (
        ["xid:79"] * len(faults["lost"])
        + ["xid:48"] * len(faults["ecc"])
        + ["throttle:thermal"] * len(faults["hot"])
    )
    incidents, evidence, actions, outbox, deliveries = [], [], [], [], []
    for n, (i, fault) in enumerate(zip(gpus, kinds, strict=True)):
        iid = f"bench{n:06d}"
        first = float(END_TS - rng.uniform(600, SPAN / 2))
        severity = "warning" if fault.startswith("throttle") else "critical"
        state = "acting" if n % 3 else "open"
        incidents.append(
            (
                iid,
                f"{fleet.hosts[i]}|gpu|{fleet.uuid[i]}|{fault}",
                str(fleet.hosts[i]),
                "gpu",
                str(fleet.uuid[i]),
                fault,
                state,
                severity,
                "reset_gpu",
                f"bench.{fault}",
                f"{fault} on GPU {fleet.gpu_index[i]}",
                first,
                END_TS - 60.0,
                int(rng.integers(1, 50)),
                first,
                "",
                0,
                0,
                0.0,
                END_TS,
            )
        )
        for k in range(20):
            evidence.append(
                (
                    iid,
                    first - 60 + 3 * k,
                    "gpu_sample",
                    json.dumps({"uuid": str(fleet.uuid[i]), "temperature_celsius": 70 + k}),
                )
            )
        actions.append(
            (f"a{iid}", iid, str(fleet.hosts[i]), "reset_gpu", f"bench.{fault}", first, "requested", "")
        )
        status = ("delivered", "pending", "dead")[n % 3]
        outbox.append(
            (f"al{iid}", "oncall", iid, "opened", severity, first, "{}", status, 1 + n % 3, first + 30)
        )
        deliveries.append(
            (
                f"al{iid}",
                "oncall",
                1,
                first + 1,
                200 if status == "delivered" else 503,
                "delivered" if status == "delivered" else "retry",
                "",
                0.05,
            )
        )
    ts = "make_timestamp(CAST(round(? * 1000000) AS BIGINT))"
    cur.executemany(
        # Columns named: a later migration's column (flaps) takes its default.
        "INSERT INTO incidents (incident_id, incident_key, host, component_kind, component_id, fault, state, "
        "severity, action, rule, summary, first_seen, last_seen, occurrences, opened_at, resolved_at, "
        "closed_at, resolution, returns, escalation_step, sticky_seconds, updated_at) "
        f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {ts}, {ts}, ?, {ts}, NULL, NULL, ?, ?, ?, ?, {ts})",
        incidents,
    )
    cur.executemany(f"INSERT INTO incident_evidence VALUES (?, {ts}, ?, ?)", evidence)
    cur.executemany(
        # Columns named: a later migration's column (breaker_counted) takes its default.
        "INSERT INTO incident_actions (action_id, incident_id, host, action, rule, requested_at, outcome, "
        f"finished_at, detail, fault_returned) VALUES (?, ?, ?, ?, ?, {ts}, ?, NULL, ?, false)",
        actions,
    )
    cur.executemany(
        "INSERT INTO alert_outbox (alert_id, endpoint, incident_id, event, severity, created_at, body_json, "
        f"status, attempts, next_attempt_at, delivered_at, last_error) "
        f"VALUES (?, ?, ?, ?, ?, {ts}, ?, ?, ?, {ts}, NULL, '')",
        outbox,
    )
    cur.executemany(f"INSERT INTO alert_deliveries VALUES (?, ?, ?, {ts}, ?, ?, ?, ?)", deliveries)
    cur.close()
    return len(incidents)


def build(path: Path) -> dict[str, object]:
    from fleetguard.controller.rollups import Rollups

    rng = np.random.default_rng(SEED)
    started = time.perf_counter()
    fleet = fleet_identity()
    with Store.open(path) as store:
        faults = write_gpu_samples(store, fleet, rng)
        write_events(store, fleet, faults, rng)
        write_nics(store, fleet, rng)
        write_predictions(store, fleet, faults, rng)
        write_jobs(store, rng)
        incidents = write_incidents(store, fleet, faults, rng)
        minutes = set(range(int((END_TS - SPAN) // 60), int(END_TS // 60) + 1))
        with store.cursor() as cur:
            Rollups.recompute(cur, minutes)
        counts = store.counts()
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "rows": counts,
        "incidents": incidents,
        "bytes": path.stat().st_size,
        "silent_hosts": faults["silent_hosts"].tolist(),
        "ecc_gpu": str(fleet.uuid[faults["ecc"][0]]),
        "hot_gpu": str(fleet.uuid[faults["hot"][0]]),
        "host": str(fleet.hosts[faults["ecc"][0]]),
    }


if __name__ == "__main__":
    out = Path(sys.argv[1])
    if out.exists():
        sys.exit(f"{out} exists; give a new path")
    print(json.dumps(build(out), indent=2))
