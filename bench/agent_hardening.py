"""Agent hardening, data plane: /metrics under concurrent scrapers, and sampling during a kernel-log storm,
for a baseline revision and the working tree side by side in one run.

Each agent is a real `fleetguard agent` process whose code comes from its tree (PYTHONPATH), one at a time:
- scrapers: `--simulate 1x8`; N scrapers each scrape /metrics once every `--scrape-interval` seconds, all at
  the same instant (N concurrent connections per tick, a new connection each time, as N Prometheus servers),
  for `--scrape-seconds`. Latency p50/p99/max per scrape (connect to last byte), and sampling rounds per
  second over the same window (from the agent's own rounds counter). The load average is printed: on a
  shared 2-core machine it dominates the tail.
- storm: the kernel log is a FIFO (kmsg_path); a writer pushes `--storm-lines` XID records into it as fast as
  the agent takes them; rounds per second while the storm lasts, the longest time without a new round, and the
  time until every XID is counted in /metrics.

Usage: .venv/bin/python bench/agent_hardening.py [--baseline 9e506b8] [--scrapers 50] [--scrape-seconds 20]
       [--storm-lines 2000000] [--storm-timeout 400]
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
XID = "NVRM: Xid (PCI:0000:9b:00): 79, pid=7, name=python3, GPU has fallen off the bus."


@dataclass
class ScrapeResult:
    scrapes: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    rounds_per_second: float
    agent_cpu_ms_per_scrape: float  # the agent's whole CPU over the window (sampling included) / scrapes


@dataclass
class StormResult:
    lines: int
    seconds_to_count_all: float | None
    rounds_per_second: float
    longest_gap_seconds: float
    xids_counted: float


def baseline_tree(revision: str, into: Path) -> Path:
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


@contextmanager
def agent(tree: Path, work: Path, args: list[str], env: dict[str, str]) -> Iterator[tuple[int, int]]:
    """A running agent from `tree`; yields its /metrics port and pid; SIGTERM at the end."""
    full_env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "FLEETGUARD_RUNTIME_ENABLED": "false",
        "FLEETGUARD_COLLECTORS_KMSG_STATE_PATH": str(work / "kmsg.seq"),
        **env,
    }
    cmd = [
        sys.executable,
        "-m",
        "fleetguard",
        "agent",
        "--metrics-port",
        "0",
        "--store",
        str(work / "a.duckdb"),
    ]
    proc = subprocess.Popen(
        cmd + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=full_env, cwd=work
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    # "port N" (older banners) or the bound URL's ":N/metrics"
    match = re.search(r"port (\d+)", line) or re.search(r":(\d+)/metrics", line)
    if match is None:
        proc.kill()
        raise RuntimeError(f"agent from {tree} did not start: {line}{proc.stderr.read()}")
    try:
        yield int(match.group(1)), proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def scrape(port: int, timeout: float = 60.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:
        return str(resp.read().decode())


def metric(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}(\{{[^}}]*{re.escape(labels)}[^}}]*\}})? (\S+)$"
    return sum(float(m.group(2)) for m in re.finditer(pattern, text, re.MULTILINE))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_scrapers(tree: Path, work: Path, scrapers: int, seconds: float, interval: float) -> ScrapeResult:
    with agent(tree, work, ["--simulate", "1x8"], {}) as (port, pid):
        time.sleep(5)  # warm up: first rounds, first flush
        latencies: list[float] = []
        errors = 0
        rounds0, t0 = metric(scrape(port), "fleetguard_agent_rounds_total"), time.monotonic()
        cpu0 = cpu_seconds(pid)
        tick = time.monotonic()
        while tick < t0 + seconds:
            time.sleep(max(0.0, tick - time.monotonic()))
            done, failed = burst(port, scrapers)
            latencies += done
            errors += failed
            tick += interval
        cpu1 = cpu_seconds(pid)
        rounds1, t1 = metric(scrape(port), "fleetguard_agent_rounds_total"), time.monotonic()
    ms = [1000 * v for v in latencies]
    return ScrapeResult(
        len(ms),
        errors,
        statistics.median(ms),
        percentile(ms, 0.99),
        max(ms),
        (rounds1 - rounds0) / (t1 - t0),
        1000 * (cpu1 - cpu0) / max(1, len(ms)),
    )


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def burst(port: int, n: int, timeout: float = 60.0) -> tuple[list[float], int]:
    """`n` scrapes started at once, each on a new connection, driven by one thread (a thread per scraper
    would measure the client's own scheduling on two loaded cores); (seconds each took, failures)."""
    request = b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    selector = selectors.DefaultSelector()
    started: dict[socket.socket, float] = {}
    replies: dict[socket.socket, bytes] = {}
    for _ in range(n):
        sock = socket.socket()
        sock.setblocking(False)
        started[sock] = time.perf_counter()
        sock.connect_ex(("127.0.0.1", port))
        selector.register(sock, selectors.EVENT_WRITE)
        replies[sock] = b""
    took: list[float] = []
    deadline = time.monotonic() + timeout
    while selector.get_map() and time.monotonic() < deadline:
        for key, mask in selector.select(timeout=1.0):
            fileobj = key.fileobj
            assert isinstance(fileobj, socket.socket)
            sock = fileobj
            if mask & selectors.EVENT_WRITE:
                sock.sendall(request)
                selector.modify(sock, selectors.EVENT_READ)
                continue
            try:
                chunk = sock.recv(1 << 20)
            except OSError:
                chunk = b""
            replies[sock] += chunk
            if not chunk:
                selector.unregister(sock)
                if replies[sock].startswith(b"HTTP/1.1 200") or replies[sock].startswith(b"HTTP/1.0 200"):
                    took.append(time.perf_counter() - started[sock])
    for sock in started:
        sock.close()
    return took, n - len(took)


def write_storm(fifo: Path, lines: int, done: threading.Event) -> None:
    with open(fifo, "wb", buffering=1 << 20) as out:  # blocks until the agent has it open
        batch = 10_000
        for start in range(0, lines, batch):
            chunk = "".join(
                f"4,{seq + 1},{300_000_000 + seq},-;{XID}\n"
                for seq in range(start, min(lines, start + batch))
            )
            out.write(chunk.encode())
    done.set()


def run_storm(tree: Path, work: Path, lines: int, timeout: float) -> StormResult:
    fifo = work / "kmsg.fifo"
    os.mkfifo(fifo)
    env = {
        "FLEETGUARD_COLLECTORS_KMSG_PATH": str(fifo),
        "FLEETGUARD_COLLECTORS_NVML": "false",
        "FLEETGUARD_COLLECTORS_RDMA": "false",
    }
    with agent(tree, work, [], env) as (port, _):
        time.sleep(3)
        written = threading.Event()
        writer = threading.Thread(target=write_storm, args=(fifo, lines, written), daemon=True)
        samples: list[tuple[float, float, float]] = []  # (time, rounds, xids)
        start = time.monotonic()
        writer.start()
        counted_at: float | None = None
        while time.monotonic() - start < timeout:
            text = scrape(port)
            now = time.monotonic() - start
            xids = metric(text, "fleetguard_events_total", 'kind="xid"')
            samples.append((now, metric(text, "fleetguard_agent_rounds_total"), xids))
            if xids >= lines:
                counted_at = now
                break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - start - now)))
    end_t, end_rounds, xids = samples[-1]
    first_t, first_rounds, _ = samples[0]
    return StormResult(
        lines,
        counted_at,
        (end_rounds - first_rounds) / (end_t - first_t) if end_t > first_t else 0.0,
        longest_gap(samples),
        xids,
    )


def longest_gap(samples: list[tuple[float, float, float]]) -> float:
    """The longest stretch between two scrapes that saw a new round (scrapes are 1 s apart)."""
    longest, last_change, last_rounds = 0.0, samples[0][0], samples[0][1]
    for t, rounds, _ in samples[1:]:
        if rounds > last_rounds:
            longest = max(longest, t - last_change)
            last_change, last_rounds = t, rounds
    return max(longest, samples[-1][0] - last_change)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", default="9e506b8")
    parser.add_argument("--scrapers", type=int, default=50)
    parser.add_argument("--scrape-seconds", type=float, default=20.0)
    parser.add_argument("--scrape-interval", type=float, default=1.0)
    parser.add_argument("--storm-lines", type=int, default=2_000_000)
    parser.add_argument("--storm-timeout", type=float, default=400.0)
    parser.add_argument("--skip", choices=["scrape", "storm"], action="append", default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = (
            [
                (f"baseline {args.baseline}", baseline_tree(args.baseline, Path(tmp) / "baseline")),
                ("this tree", ROOT),
            ]
            if args.baseline
            else [("this tree", ROOT)]
        )
        scrape_rows, storm_rows = [], []
        for label, tree in trees:
            if "scrape" not in args.skip:
                work = Path(tempfile.mkdtemp(dir=tmp))
                r = run_scrapers(tree, work, args.scrapers, args.scrape_seconds, args.scrape_interval)
                scrape_rows.append(
                    f"| {label} | {args.scrapers} every {args.scrape_interval:g} s | {r.scrapes} "
                    f"| {r.errors} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.max_ms:.0f} "
                    f"| {r.agent_cpu_ms_per_scrape:.2f} | {r.rounds_per_second:.2f} "
                    f"| {os.getloadavg()[0]:.1f} |"
                )
                print(scrape_rows[-1], file=sys.stderr, flush=True)
            if "storm" not in args.skip:
                work = Path(tempfile.mkdtemp(dir=tmp))
                s = run_storm(tree, work, args.storm_lines, args.storm_timeout)
                counted = (
                    f"{s.seconds_to_count_all:.0f}" if s.seconds_to_count_all is not None else "not within"
                )
                storm_rows.append(
                    f"| {label} | {s.lines:,} | {s.rounds_per_second:.2f} | {s.longest_gap_seconds:.0f} "
                    f"| {counted} | {s.xids_counted:,.0f} | {os.getloadavg()[0]:.1f} |"
                )
                print(storm_rows[-1], file=sys.stderr, flush=True)
    if scrape_rows:
        print(
            "| code | scrapers | scrapes | errors | p50 (ms) | p99 (ms) | max (ms) "
            "| agent CPU per scrape (ms) | sampling rounds/s | load average |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        print("\n".join(scrape_rows))
    if storm_rows:
        print()
        print(
            "| code | storm lines | sampling rounds/s | longest gap without a round (s) "
            "| seconds until every XID counted | XIDs counted | load average |"
        )
        print("|---|---|---|---|---|---|---|")
        print("\n".join(storm_rows))


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
