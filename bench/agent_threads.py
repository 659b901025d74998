"""Threads and memory of a real `fleetguard agent` process, and of a process that opens DuckDB as it is by
default: what the agent's bounds (fleetguard/agent/limits.py) keep fixed whatever the core count.

Runs `fleetguard agent --simulate 1x8` for --seconds, reads /proc/PID/status (Threads, VmHWM, RssAnon,
RssFile) near the end. Then a fresh Python process opens a DuckDB store with DuckDB's defaults, writes and
multiplies numpy matrices, and reports its threads the same way.
Usage: python bench/agent_threads.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULTS_PROBE = """
import os, sys, duckdb, numpy
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE t AS SELECT * FROM range(200000)")
numpy.ones((256, 256)) @ numpy.ones((256, 256))
print(len(os.listdir("/proc/self/task")))
"""


def status(pid: int) -> dict[str, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    out = {}
    for key in ("Threads", "VmHWM", "RssAnon", "RssFile"):
        match = re.search(rf"^{key}:\s+(\d+)", text, re.MULTILINE)
        out[key] = int(match.group(1)) if match else -1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    exe = Path(sys.executable).with_name("fleetguard")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    env["FLEETGUARD_RUNTIME_PORT"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(exe), "agent", "--simulate", "1x8", "--store", f"{tmp}/s.duckdb", "--metrics-port", "0"]
        proc = subprocess.Popen(
            [*cmd, "--duration", str(args.seconds + 5)], env=env, stdout=subprocess.DEVNULL
        )
        time.sleep(args.seconds)
        agent = status(proc.pid)
        proc.wait(timeout=60)
        default = subprocess.run(
            [sys.executable, "-c", DEFAULTS_PROBE, f"{tmp}/d.duckdb"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    print(f"{os.cpu_count()} cores")
    print("| process | threads | peak RSS (MB) | anon RSS (MB) | file-backed RSS (MB) |")
    print("|---|---|---|---|---|")
    mb = {key: f"{value / 1024:.0f}" for key, value in agent.items()}
    print(
        f"| fleetguard agent --simulate 1x8 (runtime on) | {agent['Threads']} | {mb['VmHWM']} | "
        f"{mb['RssAnon']} | {mb['RssFile']} |"
    )
    print(f"| DuckDB and numpy with their defaults (no agent) | {default.stdout.strip()} | | | |")


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
