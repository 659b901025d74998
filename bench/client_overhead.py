"""Training-client cost: import time, and time per hot-path call (step boundary, section enter/exit,
collective progress, checkpoint_requested) measured with timeit while the background thread reports to a
real loopback RuntimeServer every second. Budget: import < 50 ms, every hot-path call < 50 µs.
Usage: python bench/client_overhead.py [--calls 200000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetguard import client as fg
from fleetguard.clock import SystemClock
from fleetguard.jobcontrol.commands import Command, CommandQueue
from fleetguard.runtime.protocol import RankReport
from fleetguard.runtime.server import RuntimeServer


def import_ms(runs: int = 7) -> float:
    code = "import time; t=time.perf_counter(); import fleetguard.client; print((time.perf_counter()-t)*1e3)"
    samples = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        for _ in range(runs)
    ]
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    commands = CommandQueue()
    received: list[int] = []

    def on_report(report: RankReport) -> list[Command]:
        received.append(len(report.timings))
        return commands.take(*report.key)

    server = RuntimeServer(on_report, host="bench", clock=SystemClock(), port=0)
    server.start()
    client = fg.attach(job_id="bench", endpoint=f"127.0.0.1:{server.port}", heartbeat_interval_seconds=1.0)
    state = {"step": 0}

    def step() -> None:
        state["step"] += 1
        fg.step(state["step"])

    def section() -> None:
        with fg.section("compute"):
            pass

    def collective() -> None:
        fg.collective("world", enqueued=1, started=1, completed=0, op="nccl:all_reduce", size=1024)

    cases = {
        "fg.step(n)": step,
        "with fg.section(...)": section,
        "fg.collective(...)": collective,
        "fg.checkpoint_requested()": fg.checkpoint_requested,
        "empty loop (reference)": lambda: None,
    }
    rows = [("import fleetguard.client", f"{import_ms():.1f} ms")]
    for name, fn in cases.items():
        best = min(timeit.repeat(fn, number=args.calls, repeat=5)) / args.calls
        rows.append((name, f"{best * 1e6:.2f} µs/call"))
    fg.close()
    server.stop()
    rows.append(("reports accepted by the server", str(server.stats.reports_accepted)))
    rows.append(
        (
            "client report failures / dropped timings",
            f"{client.stats.reports_failed} / {client.stats.dropped_timings}",
        )
    )
    width = max(len(r[0]) for r in rows)
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name:<{width}} | {value} |")


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
