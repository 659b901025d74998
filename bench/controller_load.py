"""Fleet controller under load: one `fleetguard controller` process fed by a load generator that sends what
real agents send, for a growing number of hosts.

Each simulated host ships one batch per flush interval (5 s): 5 rounds at 1 Hz of 8 GPU samples and 8 IB
ports' counters, compacted as the agent compacts them (counters that did not move are not sent), taken from
the simulator. Bodies are the agents' real wire format (gzip JSON), built before each step starts, and sent
from separate generator processes (--processes, default 2), each from worker threads holding one keep-alive
connection apiece, so the generator's own CPU per request is small and not the limit being measured.

Per step: ingest latency p50/p99 (send to reply, client side), batches sent / refused / failed, rows stored
vs rows sent (loss), controller CPU (share of one core) and RSS, and the store's bytes and rows per
host-day. The load generator runs on the same machine: its CPU (while sending) is printed beside the
controller's, and each row carries the load average before and after it (busy: other work held half the
cores).

Each row also gives the controller's CPU per batch answered and its ratio to the raw floor (gunzip + parse
+ DuckDB append of the same batches with no checks: bench/ingest_floor.py) measured at the start of the run,
and whether the step kept up (sent on schedule, every batch answered 200, p99 < 250 ms), and how many
batches the writer's lanes committed per commit over the step (from the controller's /metrics).

Usage: python bench/controller_load.py [--hosts 256,1024,2048,4096] [--seconds 40] [--interval 5]
       python bench/controller_load.py --compare-src /tmp/before   # the same steps for a controller run
                                                                   # from another tree, interleaved
       python bench/controller_load.py --footprint   # rows and bytes per host-day, raw vs compacted
       python bench/controller_load.py --agent-cost --seconds 60   # agent CPU/RSS, local store vs shipping
       python bench/controller_load.py --cpu-per-batch   # controller CPU per batch by stage, in-process
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import json
import os
import queue
import random
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine_load import LoadWindow
from fleetguard.controller.tokens import add_tokens
from fleetguard.shipping.compact import Compactor
from fleetguard.shipping.wire import OutgoingBatch, columns_by_table

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The CPU `pid` has spent (its own threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def tree_cpu_seconds(pid: int) -> float:
    """The CPU of `pid` and of every process below it (a controller's edge processes): the live ones', and
    what its reaped children spent."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    own = sum(int(f) for f in fields[11:15]) / TICKS  # utime, stime, cutime, cstime
    return own + sum(tree_cpu_seconds(child) for child in children(pid))


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    """`key` of `pid` and of every process below it, summed (MB)."""
    try:
        match = re.search(rf"{key}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    except OSError:
        return 0.0
    own = int(match.group(1)) / 1024 if match else 0.0
    return own + sum(rss_mb(child, key) for child in children(pid))


def simulated_rounds(rounds: int, compact: bool, start: float = 1_795_000_000.0) -> list[list[object]]:
    """What one 1x8 agent buffers per round, for `rounds` rounds at 1 Hz (compacted as shipped, or raw)."""
    from fleetguard.agent.sources import build_sources
    from fleetguard.config import load_config

    sources = build_sources(load_config(overrides={"simulate.fleet": "1x8", "agent.host": "HOSTNAME"}))
    compactor = Compactor()
    out = []
    for r in range(rounds):
        rows: list[object] = []
        for collector in sources.collectors:
            b = collector.collect(start + r)
            rows += [*b.gpu_samples, *b.nic_samples, *b.nic_counters, *b.events]
        out.append(compactor.keep(rows) if compact else rows)
    return out


def template(interval: int) -> tuple[str, int]:
    """A steady-state batch (after the first, which carries every counter once) as JSON text with HOSTNAME,
    SEQNUM and the send time to fill in; and its row count."""
    rounds = simulated_rounds(2 * interval, compact=True)
    rows = [r for rnd in rounds[interval:] for r in rnd]
    batch = OutgoingBatch(
        "HOSTNAME", "BOOTID", 999_999_999, 1_795_000_000.5, float(interval), "bench", columns_by_table(rows)
    )
    text = json.dumps(batch.to_json(), separators=(",", ":"))
    return text.replace("999999999", "SEQNUM").replace("1795000000.5", "SENTTS"), len(rows)


# Wire version 2's template: msgpack with a host name as long as the generator's, and a sequence number and a
# send time whose encodings (uint64 and float64, 8 bytes each) are patched per body.
_V2_HOST, _V2_SEQ, _V2_SENT = "host-XXXXX", 999_999_999_999, 1_795_000_000.5


def template_v2(interval: int) -> bytes:
    """The same batch as `template`, in wire version 2 (uncompressed): the host, sequence number and send
    time are patched per body by `body_v2`."""
    import msgspec

    from fleetguard.shipping.wire_v2 import encode_v2

    rounds = simulated_rounds(2 * interval, compact=True)
    rows = [r for rnd in rounds[interval:] for r in rnd]
    batch = OutgoingBatch(
        _V2_HOST, "BOOTID", _V2_SEQ, _V2_SENT, float(interval), "bench", columns_by_table(rows)
    )
    for records in batch.tables.values():
        if "host" in records:
            records["host"] = [_V2_HOST] * len(records["host"])
    raw = msgspec.msgpack.decode(gzip.decompress(encode_v2(batch)))  # plain types: re-encoded below
    return msgspec.msgpack.encode(raw)


def body_v2(template: bytes, host: str, seq: int, sent: float) -> bytes:
    assert len(host) == len(_V2_HOST)
    raw = (
        template.replace(_V2_HOST.encode(), host.encode())
        .replace(b"\xcf" + struct.pack(">Q", _V2_SEQ), b"\xcf" + struct.pack(">Q", seq))
        .replace(b"\xcb" + struct.pack(">d", _V2_SENT), b"\xcb" + struct.pack(">d", sent))
    )
    return gzip.compress(raw, compresslevel=1)


@dataclass
class StepResult:
    hosts: int
    sent: int = 0
    ok: int = 0
    refused: dict[int, int] = field(default_factory=dict)
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    late_sends: int = 0  # the generator could not send on schedule (its own limit, not the controller's)


class Generator:
    """Sends the hosts' batches from `processes` child processes, so the generator's own interpreter is not
    the limit being measured. Each child builds its gzip bodies before the step starts (the send time in a
    body is its scheduled time), then sends them on schedule from worker threads, each holding one
    keep-alive connection; it reports its result and the CPU it spent sending."""

    def __init__(
        self,
        port: int,
        tokens: dict[str, str],
        text: str,
        workers: int,
        processes: int = 2,
        v2_template: bytes | None = None,
    ) -> None:
        self.port = port
        self.tokens = tokens
        self.text = text
        self.v2_template = v2_template  # set: send wire version 2 bodies made from it
        self.workers = workers
        self.processes = max(1, processes)
        self.cpu_seconds = 0.0  # the children's CPU while sending, summed over the steps so far

    def run_step(
        self,
        hosts: list[str],
        seconds: float,
        interval: float,
        seqs: dict[str, int],
        at_start: Callable[[], None] | None = None,
    ) -> StepResult:
        """Send every host's batches for `seconds`; `at_start` is called when the first send is due (after
        the bodies were built), so a caller measures the sending part only."""
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        results: multiprocessing.Queue[tuple[StepResult, float]] = ctx.Queue()
        per = [hosts[i :: self.processes] for i in range(self.processes)]
        sends = len(hosts) * max(1, int(seconds / interval))
        # time for the children to build their bodies (~0.3 ms each at gzip level 1) before the first send
        start_wall = time.time() + 2.0 + 0.0004 * sends / self.processes
        children = [
            ctx.Process(
                target=_drive,
                args=(
                    self.port,
                    {h: self.tokens[h] for h in group},
                    self.text,
                    self.v2_template,
                    group,
                    {h: seqs.get(h, 0) for h in group},
                    seconds,
                    interval,
                    max(1, self.workers // self.processes),
                    start_wall,
                    results,
                ),
            )
            for group in per
            if group
        ]
        for child in children:
            child.start()
        time.sleep(max(0.0, start_wall - time.time()))
        if at_start is not None:
            at_start()
        total = StepResult(len(hosts))
        for _ in children:
            r, cpu = results.get(timeout=seconds + 600)
            self.cpu_seconds += cpu
            total.sent += r.sent
            total.ok += r.ok
            total.failed += r.failed
            total.late_sends += r.late_sends
            total.latencies += r.latencies
            for code, n in r.refused.items():
                total.refused[code] = total.refused.get(code, 0) + n
        for child in children:
            child.join()
        per_host = max(1, int(seconds / interval))
        for h in hosts:
            seqs[h] = seqs.get(h, 0) + per_host
        return total

    def stop(self) -> None:
        """Nothing outlives a step: each step's children exit when it ends."""


def _drive(
    port: int,
    tokens: dict[str, str],
    text: str,
    v2_template: bytes | None,
    hosts: list[str],
    seqs: dict[str, int],
    seconds: float,
    interval: float,
    workers: int,
    start_wall: float,
    results: queue.Queue[tuple[StepResult, float]],
) -> None:
    """One generator process: pre-built bodies, sent on schedule by `workers` threads."""
    per_host = max(1, int(seconds / interval))
    rng = random.Random(hash(tuple(hosts[:4])))
    schedule: list[tuple[float, bytes, str]] = []
    for h in hosts:
        offset = rng.uniform(0, interval)
        for k in range(per_host):
            due = start_wall + offset + k * interval
            if v2_template is not None:
                body = body_v2(v2_template, h, seqs[h] + k + 1, round(due, 3))
            else:
                body = gzip.compress(
                    text.replace("HOSTNAME", h)
                    .replace("SEQNUM", str(seqs[h] + k + 1))
                    .replace("SENTTS", f"{due:.3f}")
                    .encode(),
                    compresslevel=1,
                )
            schedule.append((due, body, f"Bearer {tokens[h]}"))
    schedule.sort(key=lambda item: item[0])
    result = StepResult(len(hosts))
    jobs: queue.Queue[tuple[bytes, str] | None] = queue.Queue()
    lock = threading.Lock()

    def work() -> None:
        conn: http.client.HTTPConnection | None = None
        while (job := jobs.get()) is not None:
            body, auth = job
            headers = {"Content-Encoding": "gzip", "Authorization": auth}
            t0 = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("POST", "/v1/ingest", body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                conn = None
                status = 0
            elapsed = time.monotonic() - t0
            with lock:
                result.sent += 1
                if status == 200:
                    result.ok += 1
                    result.latencies.append(elapsed)
                elif status == 0:
                    result.failed += 1
                else:
                    result.refused[status] = result.refused.get(status, 0) + 1
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    before = resource.getrusage(resource.RUSAGE_SELF)
    for due, body, auth in schedule:
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        elif delay < -0.5:
            result.late_sends += 1
        jobs.put((body, auth))
    for _ in threads:
        jobs.put(None)
    for t in threads:
        t.join()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    results.put((result, cpu))


def mark_start(marks: dict[str, float], pid: int) -> None:
    marks["cpu"], marks["t"] = cpu_seconds(pid), time.monotonic()


def mark_step(marks: dict[str, float], pid: int, port: int) -> None:
    """A controller step's start: its process tree's CPU, the time, its commit counts."""
    marks["cpu"], marks["t"] = tree_cpu_seconds(pid), time.monotonic()
    marks["batches"], marks["commits"] = commit_counts(port)


def commit_counts(port: int) -> tuple[float, float]:
    """The controller's batches committed and commits (groups) so far, from its /metrics (loopback: no
    token needed); zeros if it cannot be read."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            text = response.read().decode()
    except (OSError, http.client.HTTPException):
        return 0.0, 0.0
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in (
            "fleetguard_controller_batches_committed_total",
            "fleetguard_controller_commit_seconds_count",
        ):
            values[name] = float(value)
    return (
        values.get("fleetguard_controller_batches_committed_total", 0.0),
        values.get("fleetguard_controller_commit_seconds_count", 0.0),
    )


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def store_stats(path: Path) -> tuple[int, int]:
    """(rows in the record tables, file bytes) of a store (opened read-only after the controller stopped)."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = sum(
            int(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index,misc]
            for t in ("gpu_samples", "nic_samples", "nic_counters", "events")
        )
    finally:
        con.close()
    return rows, path.stat().st_size


@dataclass
class Controller:
    """One controller under test: its process, store, generator and the batches it answered 200."""

    label: str
    root: Path
    proc: subprocess.Popen[bytes]
    gen: Generator
    seqs: dict[str, int] = field(default_factory=dict)
    sent_ok: int = 0


def start_controller(
    label: str,
    root: Path,
    port: int,
    tokens: dict[str, str],
    text: str,
    args: argparse.Namespace,
    src: str,
    edge_processes: int | None = None,
    v2_template: bytes | None = None,
) -> Controller:
    """`fleetguard controller` on `port`, run from this tree, or from source tree `src` (a before/after
    comparison in one run: the same machine, load and generator); `edge_processes`: that setting (None: the
    default)."""
    root.mkdir(parents=True)
    edge = "" if edge_processes is None else f"edge_processes = {edge_processes}\n"
    # --no-diagnosis: ingest alone, without the incident rounds that share its interpreter (what they cost)
    diagnosis = "[diagnosis]\nenabled = false\n" if args.no_diagnosis else ""
    (root / "ctl.toml").write_text(
        f'[controller]\nlisten = "127.0.0.1:{port}"\ntokens_file = "{root.parent}/tokens.json"\n{edge}'
        f'[store]\npath = "{root}/ctl.duckdb"\n[dashboard]\nenabled = false\n{diagnosis}'
    )
    env = {**os.environ, "PYTHONPATH": src} if src else None
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetguard", "controller", "--config", str(root / "ctl.toml")],
        stdout=subprocess.DEVNULL,
        stderr=(root / "ctl.log").open("w"),
        env=env,
        cwd=src or None,
    )
    return Controller(
        label, root, proc, Generator(port, tokens, text, args.workers, args.processes, v2_template)
    )


def first_bodies(text: str, hosts: Sequence[str]) -> list[bytes]:
    """Each host's first batch from the template, gzipped as an agent sends it."""
    return [
        gzip.compress(
            text.replace("HOSTNAME", host).replace("SEQNUM", "1").replace("SENTTS", "1795000000.0").encode(),
            1,
        )
        for host in hosts
    ]


def measure_floor(text: str, hosts: int = 512) -> float:
    """The raw floor (bench/ingest_floor.py) over `hosts` bodies like the generator's, in this process."""
    from bench.ingest_floor import floor_cpu_ms

    bodies = first_bodies(text, [f"host-{i:05d}" for i in range(hosts)])
    window = LoadWindow()
    ms = floor_cpu_ms(bodies)
    print(
        f"raw floor: {ms:.2f} ms CPU per batch (gunzip + JSON parse + DuckDB append in groups of 64, no "
        f"checks; load {window.close().cell()})",
        flush=True,
    )
    return ms


def measure_floor_v2(template: bytes, hosts: int = 512) -> float:
    """The raw floor for wire-version-2 bodies like the generator's (gunzip + msgpack + arrays + append)."""
    from bench.ingest_floor import floor_cpu_ms_v2

    bodies = [body_v2(template, f"host-{i:05d}", 1, 1_795_000_000.0) for i in range(hosts)]
    window = LoadWindow()
    ms = floor_cpu_ms_v2(bodies)
    print(
        f"raw floor, wire v2: {ms:.2f} ms CPU per batch (gunzip + msgpack + arrays over its bytes + the same "
        f"append, no checks; load {window.close().cell()}); the wire-v2 row's ratio is to this",
        flush=True,
    )
    return ms


def load(args: argparse.Namespace) -> None:
    steps = [int(x) for x in args.hosts.split(",")]
    text, rows_per_batch = template(args.interval)
    print(
        f"batch: {rows_per_batch} rows, {len(text)} bytes JSON, "
        f"{len(gzip.compress(text.encode(), 1))} bytes gzip",
        flush=True,
    )
    floor_ms = measure_floor(text)
    wires = args.wire.split(",")
    v2 = template_v2(args.interval) if "2" in wires else None
    floor_v2_ms = measure_floor_v2(v2) if v2 is not None else floor_ms
    root = Path(tempfile.mkdtemp(prefix="fg-controller-load-"))
    hosts_all = [f"host-{i:05d}" for i in range(max(steps))]
    tokens = add_tokens(root / "tokens.json", hosts_all)
    sources: list[tuple[str, str, int | None, bytes | None]] = []
    if "1" in wires:
        sources.append(("this tree", "", None, None))
    if v2 is not None:
        sources.append(("this tree, wire v2", "", None, v2))
    sources += [(f"this tree, edge_processes = {n}", "", n, None) for n in args.edge_processes]
    sources += [(f"before ({src})", src, None, None) for src in args.compare_src]
    if args.no_diagnosis:
        sources = [(f"{label}, diagnosis off", src, edge, body) for label, src, edge, body in sources]
    ctls = [
        start_controller(label, root / f"ctl{k}", args.port + k, tokens, text, args, src, edge, body)
        for k, (label, src, edge, body) in enumerate(sources)
    ]
    time.sleep(3)
    print(
        "| controller | hosts | GPUs | batches/s (needed) | p50 ms | p99 ms | refused | failed | "
        "controller CPU (cores) | CPU ms per batch | vs raw floor | batches per commit | controller RSS MB | "
        "generator CPU (cores) | late sends | kept up, p99 < 250 ms | load before -> after |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    try:
        for n in steps:
            # Interleaved per step: every controller meets the same moment's load, one at a time.
            # A controller fed version 2 is set against version 2's own floor (the same rows, read the
            # cheapest way that format allows), so its ratio is not flattered by version 1's dearer parse.
            over = [
                run_step(c, hosts_all[:n], args, floor_v2_ms if c.gen.v2_template else floor_ms) for c in ctls
            ]
            if all(p99 > args.stop_p99 for p99 in over):
                print(f"p99 passed {args.stop_p99:.1f} s at {n} hosts: stopping", flush=True)
                break
    finally:
        for c in ctls:
            stop_controller(c, rows_per_batch, args.interval)
        # A controller's store is 100-500 MB a run: kept only when asked (runs left behind filled a disk).
        if args.keep_dir:
            print(f"(work dir {root})")
        else:
            shutil.rmtree(root, ignore_errors=True)


def run_step(c: Controller, hosts: list[str], args: argparse.Namespace, floor_ms: float) -> float:
    """One step of `c` at len(hosts) hosts; prints its row and returns its p99 in seconds."""
    n = len(hosts)
    load_window = LoadWindow(own_load=0.0)
    g0 = c.gen.cpu_seconds
    marks: dict[str, float] = {}
    r = c.gen.run_step(
        hosts, args.seconds, args.interval, c.seqs, partial(mark_step, marks, c.proc.pid, c.gen.port)
    )
    wall = time.monotonic() - marks["t"]
    ctl_cpu = tree_cpu_seconds(c.proc.pid) - marks["cpu"]
    batches, commits = commit_counts(c.gen.port)
    per_commit = (batches - marks["batches"]) / max(1.0, commits - marks["commits"])
    gcpu = (c.gen.cpu_seconds - g0) / wall
    c.sent_ok += r.ok
    p99 = quantile(r.latencies, 0.99)
    per_batch_ms = 1000 * ctl_cpu / max(1, r.ok)
    needed = n / args.interval
    kept_up = r.sent / wall >= 0.97 * needed and r.ok == r.sent and p99 < 0.25
    print(
        f"| {c.label} | {n} | {8 * n} | {r.sent / wall:.0f} ({needed:.0f}) | "
        f"{1000 * quantile(r.latencies, 0.5):.0f} | {1000 * p99:.0f} | {sum(r.refused.values())} "
        f"{dict(r.refused) or ''} | {r.failed} | {ctl_cpu / wall:.2f} | {per_batch_ms:.2f} | "
        f"{per_batch_ms / floor_ms:.1f}x | {per_commit:.1f} | {rss_mb(c.proc.pid):.0f} | {gcpu:.2f} | "
        f"{r.late_sends} | "
        f"{'yes' if kept_up else 'no'} | {load_window.close().cell()} |",
        flush=True,
    )
    return p99


def stop_controller(c: Controller, rows_per_batch: int, interval: float) -> None:
    c.gen.stop()
    peak = rss_mb(c.proc.pid, "VmHWM")
    c.proc.send_signal(signal.SIGTERM)
    c.proc.wait(timeout=300)
    rows, size = store_stats(c.root / "ctl.duckdb")
    expected = c.sent_ok * rows_per_batch
    print(
        f"{c.label}: peak RSS {peak:.0f} MB; rows stored {rows}, rows in batches answered 200 {expected} "
        f"(loss {expected - rows}); store {size / 1e6:.1f} MB"
    )
    host_seconds = sum(c.seqs.values()) * interval
    if host_seconds:
        print(
            f"{c.label}: per host-day {rows / host_seconds * 86400:,.0f} rows, "
            f"{size / host_seconds * 86400 / 1e6:.1f} MB"
        )


def footprint(args: argparse.Namespace) -> None:
    """Rows and bytes per host-day for one 1x8 host, raw (every counter every second) and compacted."""
    from fleetguard.store import Store

    seconds = args.footprint_seconds
    for compact in (False, True):
        root = Path(tempfile.mkdtemp(prefix="fg-footprint-"))
        rounds = simulated_rounds(seconds, compact)
        rows = sum(len(r) for r in rounds)
        with Store.open(root / "s.duckdb") as store:
            for k in range(0, seconds, 5):
                store.append([row for rnd in rounds[k : k + 5] for row in rnd])
            store.connection.execute("CHECKPOINT")
        size = (root / "s.duckdb").stat().st_size
        scale = 86400 / seconds
        print(
            f"| {'compacted (shipped)' if compact else 'raw (local store today)'} | {rows * scale:,.0f} | "
            f"{size * scale / 1e6:,.0f} |",
            flush=True,
        )
    # What stays after raw retention: the 1-minute and 1-hour rollups of the compacted data.
    from fleetguard.controller.rollups import Rollups

    with Store.open(root / "s.duckdb") as store:
        con = store.connection
        first = min(r.ts for r in rounds[0])  # type: ignore[attr-defined]
        start = int(first // 60)
        Rollups.recompute(con, set(range(start, start + seconds // 60 + 1)))
        # A day of rollups: the measured stretch repeated, shifted in time (a small file is mostly overhead).
        con.execute(f"ATTACH '{root / 'rollups.duckdb'}' AS r")
        rollup_rows = 0
        copies = round(scale)
        for table in ("gpu_rollup_1m", "nic_rollup_1m", "gpu_rollup_1h", "nic_rollup_1h"):
            con.execute(f"CREATE TABLE r.{table} AS SELECT * FROM {table} LIMIT 0")
            for k in range(copies):
                con.execute(
                    f"INSERT INTO r.{table} SELECT * REPLACE (bucket + INTERVAL {k * seconds} SECOND "
                    f"AS bucket) FROM {table}"
                )
            rollup_rows += int(con.execute(f"SELECT count(*) FROM r.{table}").fetchone()[0])  # type: ignore[index]
        con.execute("CHECKPOINT r")
        con.execute("DETACH r")
    rsize = (root / "rollups.duckdb").stat().st_size
    print(f"| rollups (1 min + 1 h) | {rollup_rows:,.0f} | {rsize / 1e6:,.1f} |")


def agent_cost(args: argparse.Namespace) -> None:
    """The agent's CPU per round and peak RSS (bench/agent_cost.py), storing locally and shipping."""
    root = Path(tempfile.mkdtemp(prefix="fg-agent-ship-"))
    token = add_tokens(root / "tokens.json", ["bench-host"])["bench-host"]
    (root / "token").write_text(token)
    (root / "token").chmod(0o600)
    (root / "ctl.toml").write_text(
        f'[controller]\nlisten = "127.0.0.1:{args.port}"\ntokens_file = "{root}/tokens.json"\n'
        f'[store]\npath = "{root}/ctl.duckdb"\n[dashboard]\nenabled = false\n'
    )
    ctl = subprocess.Popen(
        [sys.executable, "-m", "fleetguard", "controller", "--config", str(root / "ctl.toml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cost = [sys.executable, str(Path(__file__).with_name("agent_cost.py")), "--seconds", str(args.seconds)]
    shipping_env = {
        "FLEETGUARD_AGENT_HOST": "bench-host",
        "FLEETGUARD_AGENT_CONTROLLER_URL": f"http://127.0.0.1:{args.port}",
        "FLEETGUARD_AGENT_CONTROLLER_TOKEN_FILE": str(root / "token"),
        "FLEETGUARD_AGENT_SPOOL_DIR": str(root / "spool"),
    }
    try:
        time.sleep(3)
        for label, extra in (("local store", {}), ("shipping to a controller", shipping_env)):
            out = subprocess.run(cost, env={**os.environ, **extra}, capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{label}: agent_cost.py failed: {out.stdout} {out.stderr}", flush=True)
                continue
            print(label, out.stdout.strip().splitlines()[-1], flush=True)
    finally:
        ctl.send_signal(signal.SIGTERM)
        ctl.wait(timeout=60)


def cpu_per_batch(args: argparse.Namespace) -> None:
    """CPU per batch of the controller's two stages, in this process: the edge (gunzip, JSON, checks) and the
    writer (groups of 64 batches into a store file). What a quiet machine's cores bound ingest by. With
    `--wire 2`, the same batches in wire version 2."""
    from fleetguard.clock import SystemClock
    from fleetguard.controller.ingest import IngestWriter, Pending
    from fleetguard.controller.stats import ControllerStats
    from fleetguard.controller.validate import parse_batch
    from fleetguard.store import Store

    text, rows = template(args.interval)
    if args.wire == "2":  # the same batches in wire version 2 (host names as long as the template's)
        v2 = template_v2(args.interval)
        hosts = [f"host-{i:05d}" for i in range(64)]
        bodies = [body_v2(v2, h, 1, 1_795_000_000.0) for h in hosts]
    else:
        hosts = [f"h{i}" for i in range(64)]
        bodies = [
            gzip.compress(
                text.replace("HOSTNAME", h).replace("SEQNUM", "1").replace("SENTTS", "1795000000.0").encode(),
                1,
            )
            for h in hosts
        ]
    t0 = time.thread_time()
    parsed = [parse_batch(b, hosts[i]) for i, b in enumerate(bodies) for _ in range(5)][::5]
    parse_ms = (time.thread_time() - t0) / (5 * len(bodies)) * 1000
    with tempfile.TemporaryDirectory(prefix="fg-cpu-") as work, Store.open(Path(work) / "s.duckdb") as store:
        store.connection.execute("SET checkpoint_threshold = '256MB'")
        writer = IngestWriter(store, SystemClock(), ControllerStats())
        seq, groups = 0, 60
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(groups):
            group = []
            for b in parsed:
                seq += 1
                b.seq = seq
                group.append(Pending(b, 0.0))
            writer.commit_group(group)
        commit_ms = (time.process_time() - c0) / (groups * len(parsed)) * 1000
        wall_ms = (time.perf_counter() - w0) / (groups * len(parsed)) * 1000
        # A commit's fixed cost: the writer's CPU per batch when groups hold 1, 4, 16 or 64 batches.
        by_size = []
        for size in (1, 4, 16, 64):
            c0 = time.process_time()
            for start in range(0, 256, size):
                group = []
                for b in (parsed * 4)[start : start + size]:
                    seq += 1
                    b.seq = seq
                    group.append(Pending(b, 0.0))
                writer.commit_group(group)
            by_size.append(f"{size}: {(time.process_time() - c0) / 256 * 1000:.2f}")
    per_batch = parse_ms + commit_ms
    print(
        f"| {rows} | {parse_ms:.2f} | {commit_ms:.2f} | {wall_ms:.2f} | {per_batch:.2f} | "
        f"{2048 / args.interval * per_batch / 1000:.2f} |"
    )
    print(f"writer CPU ms per batch by batches per group: {', '.join(by_size)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", default="256,1024,2048,4096")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--interval", type=int, default=5)
    parser.add_argument("--workers", type=int, default=512)
    parser.add_argument(
        "--processes", type=int, default=2, help="load generator processes (threads split over them)"
    )
    parser.add_argument("--port", type=int, default=19580)
    parser.add_argument("--stop-p99", type=float, default=1.0)
    parser.add_argument(
        "--compare-src",
        action="append",
        default=[],
        metavar="DIR",
        help="also run a controller from this source tree (e.g. `git archive` of the commit before), step "
        "by step beside this tree's: before and after in one run",
    )
    parser.add_argument(
        "--edge-processes",
        action="append",
        type=int,
        default=[],
        metavar="N",
        help="also run this tree's controller with [controller] edge_processes = N, step by step beside "
        "the default one (CPU and RSS count its edge processes)",
    )
    parser.add_argument(
        "--wire",
        default="1",
        choices=["1", "2", "1,2"],
        help="the wire version(s) this tree's controller is fed: 1, 2 (the same batches in version 2), or "
        "1,2 (two controllers, step by step; each other controller's background work is load on the one "
        "measured, so alternate single runs for a fair pair)",
    )
    parser.add_argument(
        "--no-diagnosis",
        action="store_true",
        help="run the controller(s) with [diagnosis] enabled = false: ingest without the incident rounds "
        "beside it (rows labelled so; the default rows are the whole controller)",
    )
    parser.add_argument("--footprint", action="store_true")
    parser.add_argument("--keep-dir", action="store_true", help="keep the controllers' stores and logs")
    parser.add_argument("--footprint-seconds", type=int, default=1800)
    parser.add_argument(
        "--agent-cost", action="store_true", help="agent CPU and RSS, local store vs shipping"
    )
    parser.add_argument("--cpu-per-batch", action="store_true", help="controller CPU per batch, in-process")
    args = parser.parse_args()
    if args.cpu_per_batch:
        cpu_per_batch(args)
    elif args.agent_cost:
        agent_cost(args)
    elif args.footprint:
        footprint(args)
    else:
        load(args)


if __name__ == "__main__":
    main()
