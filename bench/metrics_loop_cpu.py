"""The /metrics server's own CPU per scrape: the thread time of the HTTP server's loop thread (where every
connection waits) over N bursts of 50 concurrent scrapes, for a baseline revision and the working tree in
one run. The whole agent's CPU per scrape (`bench/agent_hardening.py`) also holds sampling, flushing and
rendering; this isolates the part every scraper waits behind.

How: the agent runs with a sitecustomize on its path that wraps `HttpServer._run` (the loop thread's body)
and writes `time.thread_time()` and the requests served when the server stops. Same scrapers as
agent_hardening (one client thread, a new connection each, `Connection: close`).

Usage: .venv/bin/python bench/metrics_loop_cpu.py [--baseline 16e9299] [--bursts 20] [--scrapers 50]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from agent_hardening import (  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run
    ROOT,
    agent,
    baseline_tree,
    burst,
    percentile,
)

SHIM = """
import time
import fleetguard.httpserve as h
_run = h.HttpServer._run
def run(self, ready):
    try:
        _run(self, ready)
    finally:
        with open({out!r}, "a") as out:
            print(self._name, time.thread_time(), self.stats.requests, file=out)
h.HttpServer._run = run
"""


def measure(tree: Path, work: Path, bursts: int, scrapers: int) -> tuple[float, float, float]:
    """(loop-thread CPU per request in ms, p50 ms, p99 ms) of `bursts` bursts, one a second."""
    shim, out = work / "shim", work / "loop.out"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM.format(out=str(out)))
    latencies: list[float] = []
    with agent(tree, work, ["--simulate", "1x8"], {"PYTHONPATH": f"{shim}{os.pathsep}{tree}"}) as (port, _):
        time.sleep(5)  # warm up: first rounds, first flush
        tick = time.monotonic()
        for _ in range(bursts):
            time.sleep(max(0.0, tick - time.monotonic()))
            latencies += burst(port, scrapers)[0]
            tick += 1.0
    cpu, requests = next(
        (float(f[1]), int(f[2]))
        for f in (line.split() for line in out.read_text().splitlines())
        if f[0] == "fleetguard-metrics"
    )
    ms = sorted(1000 * v for v in latencies)
    return 1000 * cpu / max(1, requests), percentile(ms, 0.5), percentile(ms, 0.99)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", default="16e9299")
    parser.add_argument("--bursts", type=int, default=20)
    parser.add_argument("--scrapers", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = [("this tree", ROOT)]
        if args.baseline:
            trees.insert(
                0, (f"baseline {args.baseline}", baseline_tree(args.baseline, Path(tmp) / "baseline"))
            )
        print("| code | scrapes | loop-thread CPU per scrape (ms) | p50 (ms) | p99 (ms) | load average |")
        print("|---|---|---|---|---|---|")
        for label, tree in trees:
            cpu, p50, p99 = measure(tree, Path(tempfile.mkdtemp(dir=tmp)), args.bursts, args.scrapers)
            row = f"| {label} | {args.bursts * args.scrapers} | {cpu:.3f} | {p50:.1f} | {p99:.1f} "
            print(row + f"| {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
