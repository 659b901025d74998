"""What capturing an opening incident's evidence costs once the store holds the whole 10-minute window.

The store: `--hosts` hosts x 8 GPUs x 8 IB ports (20 counters each) every second for `--seconds`, committed
with the controller's own INSERT (bench/diagnosis_round.py's fleet). Then, `--runs` times, the evidence of
one round's openings (20 GPU incidents, 5 port incidents, 10 host incidents from XIDs, on hosts spread over
the fleet) is captured twice, alternating: by `capture_many` as built (the newest RECENT_SECONDS of each
window first, the older part only for incidents it left short), and by one query per kind over each whole
window (what capture did before). Median and p95 wall ms of each, and whether they captured the same rows.

Usage: python bench/evidence_capture.py [--hosts 256] [--seconds 600] [--runs 7] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.diagnosis_round import commit, round_columns
from diagnosis.incident import ChangeKind, Incident, IncidentChange, IncidentState
from diagnosis.model import ComponentKind, IncidentKey, RepairAction, Severity
from fleetguard.incidents import evidence
from fleetguard.incidents.evidence import BEFORE_SECONDS, MAX_ROWS, capture_many
from fleetguard.store import Store


def incidents(hosts: int, now: float) -> list[IncidentChange]:
    out = []
    for n in range(35):
        h = (n * 7919) % hosts
        host = f"h{h:05d}"
        if n < 20:
            kind, component = ComponentKind.GPU, f"GPU-{h:05d}-{n % 8}"
        elif n < 25:
            kind, component = ComponentKind.PORT, f"mlx5_{n % 8}/1"
        else:
            kind, component = ComponentKind.HOST, host
        incident = Incident(
            f"inc-{n}", IncidentKey(host, kind, component, "bench"), IncidentState.OPEN, Severity.CRITICAL,
            RepairAction.NONE, "bench", "", now, now, 1, now,
        )  # fmt: skip
        out.append(IncidentChange(incident, (ChangeKind.OPENED,)))
    return out


def whole_window(con: object, changes: list[IncidentChange], now: float) -> list[tuple[str, float, str]]:
    """One query per kind over every whole window (the capture before the newest part was read first)."""
    rows = []
    for kind in evidence._ORDER:
        wanted = [c.incident for c in changes if evidence._wants(kind, c.incident)]
        if wanted:
            since = [i.first_seen - BEFORE_SECONDS for i in wanted]
            found = evidence._query(con, kind, wanted, since, [MAX_ROWS] * len(wanted), now)  # type: ignore[arg-type]
            rows += [(r.incident_id, r.ts, r.kind) for _, r in found]
    return sorted(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", type=int, default=256)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--dir", default="")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="fg-evidence-"))
    rng = random.Random(1)
    t0 = 1_790_000_000.0
    print(f"load before: {os.getloadavg()[0]:.1f}")
    started = time.monotonic()
    with Store.open(work / "store.duckdb") as store:
        for s in range(args.seconds):
            commit(store, round_columns(args.hosts, t0 + s, rng))
        print(f"built {args.hosts} hosts x {args.seconds} s in {time.monotonic() - started:.0f} s")
        now = t0 + args.seconds - 1
        changes = incidents(args.hosts, now)
        new_ms, old_ms = [], []
        same = True
        for _ in range(args.runs):
            t = time.perf_counter()
            got = capture_many(store.cursor(), changes, now)
            new_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            ref = whole_window(store.cursor(), changes, now)
            old_ms.append((time.perf_counter() - t) * 1000)
            same &= sorted((r.incident_id, r.ts, r.kind) for r in got if r.kind != "observation") == ref
    for name, ms in (("newest part first", new_ms), ("whole window", old_ms)):
        q = statistics.quantiles(ms, n=20)[-1] if len(ms) > 1 else ms[0]
        print(f"| {name} | {statistics.median(ms):.1f} | {q:.1f} |")
    print(f"same rows: {same}; load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
