"""The training runtime under hostile local input (issue 7): report round trip on a kept-alive connection
(p50/p99, alone and with 600 half-open slowloris connections held open), and 100k fake ranks offered by
another user (uid 65534, a real process over real HTTP): what is admitted, the agent's RSS, the analysis
tick's time, and how soon a real rank's crash is still found.

Usage: python bench/runtime_attack.py [--round-trips 2000] [--fake-ranks 100000] [--slowloris 600]
Run as root (the flood comes from a process that drops to uid 65534). The "before" round trip, against an
older tree: git archive 9e506b8 fleetguard collectors straggler diagnosis | tar -x -C /tmp/fg_old &&
FLEETGUARD_BENCH_TREE=/tmp/fg_old python bench/runtime_attack.py --round-trip-only --round-trips 500"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, os.environ.get("FLEETGUARD_BENCH_TREE") or str(Path(__file__).resolve().parents[1]))

from fleetguard.clock import SystemClock
from fleetguard.records.findings import Finding
from fleetguard.runtime.service import RuntimeService, RuntimeServiceConfig

NOBODY = 65534

FLOOD = """
import encodings.idna, http.client, json, os, sys
port, count, uid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
os.setgroups([]); os.setgid(uid); os.setuid(uid)
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
statuses = {}
for i in range(count):
    body = json.dumps({"job_id": f"fake-{i % 1000}", "rank": i, "local_rank": 0, "world_size": count,
                       "pid": os.getpid(), "step": 1}).encode()
    conn.request("POST", "/v1/report", body=body)
    r = conn.getresponse(); r.read()
    statuses[r.status] = statuses.get(r.status, 0) + 1
print(json.dumps(statuses))
"""


class Sink:
    def __init__(self) -> None:
        self.findings: list[Finding] = []

    def __call__(self, batch: Sequence[object]) -> None:
        self.findings.extend(r for r in batch if isinstance(r, Finding))


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def report_body(rank: int, step: int) -> bytes:
    return json.dumps(
        {
            "job_id": "bench",
            "rank": rank,
            "local_rank": rank,
            "world_size": 8,
            "pid": os.getpid(),
            "step": step,
            "section": "compute",
            "timings": [[time.time(), step, "compute", 0.1]],
            "collectives": [["world", time.time(), step, step, step - 1, "nccl:all_reduce", 1024]],
        },
        separators=(",", ":"),
    ).encode()


def round_trips(port: int, n: int) -> tuple[float, float]:
    """p50 and p99 in ms of POST /v1/report on one kept-alive connection, as the client sends them."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    samples: list[float] = []
    for i in range(n):
        body = report_body(0, i)
        t0 = time.perf_counter()
        conn.request("POST", "/v1/report", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        samples.append((time.perf_counter() - t0) * 1e3)
        assert response.status == 200, response.status
    conn.close()
    samples.sort()
    return statistics.median(samples), samples[int(0.99 * (len(samples) - 1))]


def post_once(port: int, body: bytes) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/v1/report", body=body)
    conn.getresponse().read()
    conn.close()


def slowloris(port: int, count: int) -> list[socket.socket]:
    held = []
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if i % 2:
            s.sendall(b"POST /v1/report HTTP/1.1\r\nHost: x\r\nContent-Le")
        held.append(s)
    return held


def tick_ms(service: RuntimeService, ticks: int = 20) -> float:
    samples = []
    for _ in range(ticks):
        t0 = time.perf_counter()
        service.tick_once()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--round-trips", type=int, default=2000)
    parser.add_argument("--fake-ranks", type=int, default=100_000)
    parser.add_argument("--slowloris", type=int, default=600)
    parser.add_argument("--round-trip-only", action="store_true")
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
    sink = Sink()
    config = RuntimeServiceConfig(host="bench", port=0, tick_interval_seconds=3600.0)  # ticks driven here
    service = RuntimeService(config, SystemClock(), sink)
    service.start()
    try:
        p50, p99 = round_trips(service.port, args.round_trips)
        print(f"report round trip, kept-alive connection: p50 {p50:.3f} ms  p99 {p99:.3f} ms")
        if args.round_trip_only:
            return
        held = slowloris(service.port, args.slowloris)
        p50s, p99s = round_trips(service.port, args.round_trips // 4)
        print(
            f"  with {len(held)} half-open connections held: p50 {p50s:.3f} ms  p99 {p99s:.3f} ms, "
            f"threads {len(os.listdir('/proc/self/task'))}"
        )
        for s in held:
            s.close()
        finish = json.loads(report_body(0, args.round_trips))
        finish["status"] = "finished"  # the bench's rank is this process: it must not look hung later
        post_once(service.port, json.dumps(finish).encode())
        rss_before, tick_before = rss_mib(), tick_ms(service)
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", FLOOD, str(service.port), str(args.fake_ranks), str(NOBODY)],
            capture_output=True,
            text=True,
            check=True,
        )
        flood_s = time.perf_counter() - t0
        statuses = json.loads(done.stdout)
        rss_after, tick_after = rss_mib(), tick_ms(service)
        print(
            f"{args.fake_ranks} fake ranks offered by uid {NOBODY} over HTTP in {flood_s:.1f} s: "
            f"answers {statuses}, ranks held {service.ranks.rank_count()}, jobs {len(service.ranks.jobs())}"
        )
        print(
            f"  agent RSS {rss_before:.1f} -> {rss_after:.1f} MiB; "
            f"tick {tick_before:.2f} -> {tick_after:.2f} ms"
        )
        crash_found_ms = real_crash(service, sink)
        print(
            f"  a real rank of root killed after the flood: dead_rank {crash_found_ms:.0f} ms after its exit"
        )
    finally:
        service.stop()


def real_crash(service: RuntimeService, sink: Sink) -> float:
    """A root rank (this process reporting for a real child it starts) is SIGKILLed; ms to its dead_rank."""
    code = (
        "import os, sys\nfrom fleetguard import client as fg\n"
        "me = fg.Identity('real', 0, 0, 1, 'h', os.getpid())\n"
        "fg.Client(me, endpoint=sys.argv[1], start=False).report_once()\n"
        "print('up', flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, service.endpoint],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    proc.kill()  # not reaped until it is found: the watcher reads its exit code from the zombie
    killed = time.perf_counter()
    try:
        while time.perf_counter() - killed < 30:
            service.tick_once()
            if any(
                f.kind == "dead_rank" and f.rank == 0 and "real" in (f.job_id or "") for f in sink.findings
            ):
                return (time.perf_counter() - killed) * 1e3
            time.sleep(0.01)
        raise SystemExit("the real rank's crash was not found within 30 s")
    finally:
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
