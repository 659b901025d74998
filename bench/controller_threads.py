"""Where a controller's CPU goes under load, and whether its interpreter lock is the limit.

The shipped controller (`start_controller`) runs in this process, fed by bench/controller_load.py's generator
(its own processes, pre-built bodies). Printed: CPU per batch of each group of threads (the HTTP loop, the
handler workers that gunzip, decode and check, each writer lane, DuckDB's own threads, maintenance), and the
GIL's wait: a probe thread here and a probe process beside it each sleep 1 ms in a loop; the extra delay the
thread sees over the process is time spent waiting for this interpreter's lock (the machine's load delays
both alike).

Usage: python bench/controller_threads.py [--hosts 2048] [--seconds 20] [--edge-processes N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.controller_load import Generator, cpu_seconds, quantile, template
from bench.machine_load import LoadWindow
from fleetguard.config import load_config
from fleetguard.controller.edge_pool import EdgePool
from fleetguard.controller.process import start_controller
from fleetguard.controller.tokens import add_tokens

TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads, by group (Python's thread name, else the kernel's)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            comm = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:
            continue  # the thread ended
        name = names.get(int(tid), f"native ({comm})")
        if "-worker" in name or name.startswith("Thread-"):
            name = name.split("_")[0]
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICKS
    return out


def probe(stop: threading.Event | None, lags: list[float], seconds: float) -> None:
    """Sleep 1 ms at a time; record how late each wake-up came."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not (stop is not None and stop.is_set()):
        t0 = time.perf_counter()
        time.sleep(0.001)
        lags.append(time.perf_counter() - t0 - 0.001)


def _probe_process(seconds: float, out: multiprocessing.Queue[list[float]]) -> None:
    lags: list[float] = []
    probe(None, lags, seconds)
    out.put(lags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=2048)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--port", type=int, default=19590)
    parser.add_argument("--edge-processes", type=int, default=0, help="[controller] edge_processes")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fg-controller-threads-"))
    text, _rows = template(int(args.interval))
    hosts = [f"host-{i:05d}" for i in range(args.hosts)]
    tokens = add_tokens(root / "tokens.json", hosts)
    config = load_config(
        overrides={
            "controller.listen": f"127.0.0.1:{args.port}",
            "controller.tokens_file": str(root / "tokens.json"),
            "store.path": str(root / "ctl.duckdb"),
            "dashboard.enabled": False,
            "controller.edge_processes": args.edge_processes,
        }
    )
    running = start_controller(config)

    def edge_cpu() -> float:
        edge = running.api.edge
        return sum(cpu_seconds(pid) for pid in edge.processes) if isinstance(edge, EdgePool) else 0.0

    ctx = multiprocessing.get_context("fork")
    lags_out: multiprocessing.Queue[list[float]] = ctx.Queue()
    in_lags: list[float] = []
    stop = threading.Event()
    marks: dict[str, object] = {}

    def at_start() -> None:
        marks["cpu"], marks["t"], marks["edge"] = thread_cpu(), time.monotonic(), edge_cpu()
        ctx.Process(target=_probe_process, args=(args.seconds, lags_out), daemon=True).start()
        threading.Thread(target=probe, args=(stop, in_lags, args.seconds), name="gil-probe").start()

    window = LoadWindow()
    try:
        result = Generator(args.port, tokens, text, 512, 2).run_step(
            hosts, args.seconds, args.interval, {}, at_start
        )
        wall = time.monotonic() - marks["t"]  # type: ignore[operator]
        after = thread_cpu()
        if args.edge_processes:
            after["edge processes (gunzip, decode, checks)"] = edge_cpu() - marks["edge"]  # type: ignore[operator]
        stop.set()
        out_lags = lags_out.get(timeout=60)
    finally:
        running.stop()
    before: dict[str, float] = marks["cpu"]  # type: ignore[assignment]
    ok = max(1, result.ok)
    print(
        f"{args.hosts} hosts: {result.ok} batches answered 200 of {result.sent}, "
        f"p99 {1000 * quantile(result.latencies, 0.99):.0f} ms, load {window.close().cell()}"
    )
    print("| threads | cores | CPU ms per batch |\n|---|---:|---:|")
    total = 0.0
    for name in sorted(after, key=lambda k: before.get(k, 0.0) - after[k]):
        spent = after[name] - before.get(name, 0.0)
        total += spent
        if spent >= 0.01:
            print(f"| {name} | {spent / wall:.2f} | {1000 * spent / ok:.2f} |")
    print(f"| all | {total / wall:.2f} | {1000 * total / ok:.2f} |")
    gil = quantile(in_lags, 0.5) - quantile(out_lags, 0.5)
    print(
        f"GIL wait of a thread waking up (median): {1000 * gil:.2f} ms (probe thread "
        f"{1000 * quantile(in_lags, 0.5):.2f} ms late, probe process {1000 * quantile(out_lags, 0.5):.2f} "
        f"ms; p90 {1000 * quantile(in_lags, 0.9):.2f} vs {1000 * quantile(out_lags, 0.9):.2f} ms)"
    )


if __name__ == "__main__":
    main()
