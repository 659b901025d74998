"""Agent cost at 1 Hz: CPU time per sampling round and peak RSS of a real `fleetguard agent` process.

Runs `fleetguard agent --simulate 1x8` (8 simulated GPUs, 8 IB ports, kernel-log faults) as a subprocess
with a DuckDB store, lets it warm up, then measures the process's CPU time (utime + stime from /proc, all
threads, flushes and /metrics scrapes included) over the steady-state rounds, and its peak RSS (VmHWM).
With --scrape-every N, /metrics is also scraped every N seconds of the measured window, as Prometheus would
(15: its common interval); without it, only at the window's two ends.
Usage: python bench/agent_cost.py [--seconds 60] [--warmup 10] [--fleet 1x8] [--scrape-every 15]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def peak_rss_mb(pid: int) -> float:
    match = re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert match
    return int(match.group(1)) / 1024


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text: str = resp.read().decode()
        return text


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def warm_page_cache() -> None:
    """Read DuckDB's library through the page cache first: the kernel maps a file's cached pages around each
    fault, so an agent started after its pages were evicted (by another agent's reclaim, or memory pressure)
    shows less RSS than one started with them cached. Every run starts cached, the worst case."""
    import importlib.util

    for name in ("_duckdb", "duckdb"):
        spec = importlib.util.find_spec(name)
        if spec and spec.origin and spec.origin.endswith(".so"):
            with open(spec.origin, "rb") as f:
                while f.read(1 << 20):
                    pass


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--fleet", default="1x8")
    parser.add_argument("--scrape-every", type=float, default=0.0, help="seconds between scrapes (0: none)")
    args = parser.parse_args()
    exe = Path(sys.executable).with_name("fleetguard")
    warm_page_cache()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [
                str(exe),
                "agent",
                "--simulate",
                args.fleet,
                "--metrics-port",
                "0",
                "--store",
                f"{tmp}/a.duckdb",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "FLEETGUARD_COLLECTORS_KMSG_STATE_PATH": f"{tmp}/kmsg.seq",
                # The runtime endpoint on a free port: 9477 may be another agent's on a shared machine.
                "FLEETGUARD_RUNTIME_PORT": "0",
            },
        )
        assert proc.stderr is not None
        line = proc.stderr.readline()
        # The banner names the bound address (".../metrics at http://0.0.0.0:PORT/metrics"); older: "port N".
        port_match = re.search(r":(\d+)/metrics", line) or re.search(r"metrics.*port (\d+)", line)
        if port_match is None:
            proc.kill()
            proc.wait()
            sys.exit(f"the agent did not start: {line.strip()}")
        port = int(port_match.group(1))
        time.sleep(args.warmup)
        m0 = scrape(port)
        cpu0, rounds0 = cpu_seconds(proc.pid), metric(m0, "fleetguard_agent_rounds_total")
        end = time.monotonic() + args.seconds
        scrapes = 2
        while args.scrape_every > 0 and time.monotonic() + args.scrape_every < end:
            time.sleep(args.scrape_every)
            scrape(port)
            scrapes += 1
        time.sleep(max(0.0, end - time.monotonic()))
        m1 = scrape(port)
        cpu1, rounds1 = cpu_seconds(proc.pid), metric(m1, "fleetguard_agent_rounds_total")
        rss = peak_rss_mb(proc.pid)
        in_round = metric(m1, "fleetguard_agent_round_cpu_seconds_total") - metric(
            m0, "fleetguard_agent_round_cpu_seconds_total"
        )
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    rounds = rounds1 - rounds0
    per_round_ms = 1000 * (cpu1 - cpu0) / rounds
    print(
        "| fleet | rounds | process CPU per round (ms) | of which in the sampling round (ms) "
        "| CPU share of one core | peak RSS (MB) | scrapes |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {args.fleet} + 8 ports/host | {rounds:.0f} | {per_round_ms:.2f} | {1000 * in_round / rounds:.2f} "
        f"| {per_round_ms / 10:.2f}% | {rss:.0f} | {scrapes} |"
    )
    print(f"shutdown summary: {out.strip()}", file=sys.stderr)


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
