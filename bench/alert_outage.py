"""Catch-up after a webhook outage, the issue's scenario in full: `fleetguard up --simulate 2x8` with its
Standard Webhooks receiver (a separate process, verifying signatures) answering 503 for 60 s from the first
alert it refuses, then 200. Default [alerts] settings (probe backoff 1 s doubling to 15 s); the agent
flushes every second. Prints the BENCHMARKS.md row: alerts raised during the outage, how many arrived,
the catch-up time (the endpoint's return to the last of them delivered), duplicates, bad signatures, and
whether every incident's alerts arrived in order.

Usage: .venv/bin/python bench/alert_outage.py [--outage 60] [--after 45]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.alerts

from tests.alerts.outage_scenario import run_outage


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--outage", type=float, default=60.0)
    ap.add_argument("--after", type=float, default=45.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fg-outage-") as folder:
        run = run_outage(Path(folder), outage_seconds=args.outage, after_seconds=args.after)
    during = run.raised_during_outage()
    accepted = [r for r in run.log if r["status"] == 200]
    sent: dict[str, list[str]] = defaultdict(list)
    for r in accepted:
        sent[r["incident_id"]].append(r["id"])
    written: dict[str, list[str]] = defaultdict(list)
    for alert_id, incident, _event, _created, delivered, _status in run.outbox:
        if delivered is not None:
            written[incident].append(alert_id)
    delivered = sum(1 for *_, status in during if status == "delivered")
    duplicates = len(accepted) - len({r["id"] for r in accepted})
    bad = sum(1 for r in run.log if not r["valid"])
    print("| outage s | raised during it | delivered | catch-up s | duplicates | bad signatures | in order |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {args.outage:g} | {len(during)} | {delivered} | {run.catch_up_seconds():.1f} | {duplicates} "
        f"| {bad} | {'yes' if sent == written else 'NO'} |"
    )
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
