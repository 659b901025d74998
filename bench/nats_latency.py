"""End-to-end latency and loss, agent flush -> controller commit, through NATS JetStream and through direct
HTTP, in the same run against the same controller process.

A real nats-server (JetStream, file store, one user for the hosts and one for the controller) and one
`fleetguard controller --pool bench` process (started through this script's --serve mode, which adds a
hook recording each batch's commit time on the writer thread; the controller is otherwise the shipped one).
Simulated hosts flush one batch each per interval (5 s), spread over the interval: the agents' steady-state
batch (bench/controller_load.py's template: 8 GPUs, 8 IB ports, 5 rounds, compacted). First the HTTP phase
(POST /v1/ingest with each host's token), then the NATS phase (JetStream publish with Nats-Msg-Id to
fleetguard.bench.<host>, over a few shared connections: one process cannot hold 2,048 agents' own).

Latency = commit time (controller's clock) - flush time (the batch's sent_ts); same machine, same clock. With
the controller's ingest journal (the default), also journal time - flush time: when the controller answered
the POST or acked the NATS message (durable from then on); the commit makes the rows visible to readers.
Loss = batches flushed whose (host, seq) never committed.

`--wire 2` sends wire version 2 bodies (msgpack, gzip) on both paths, as agents do once the controller says
it reads them (in its HTTP answers; over NATS in its pool's key-value advertisement, which the controller
here puts as in production, docs/scale-out.md). The simulated hosts read neither: `--wire` chooses for
them. The NATS consumer reads either version from the body itself.

Usage: python bench/nats_latency.py [--hosts 2048] [--seconds 30] [--interval 5] [--wire 1|2]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gzip
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fleetguard.controller.tokens import add_tokens  # noqa: E402
from fleetguard.shipping.nats_subjects import MSG_ID_HEADER, msg_id, subject_for  # noqa: E402

POOL = "bench"
BOOT_ID = "BOOTID"  # the boot_id of controller_load.template's batch: a message id must name it
NATS_CONNECTIONS = 8


def _controller_load() -> Any:
    spec = importlib.util.spec_from_file_location("controller_load", ROOT / "bench" / "controller_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["controller_load"] = module
    spec.loader.exec_module(module)
    return module


# ---- --serve: the controller with a commit-time hook ------------------------------------------------


def serve(config_path: str, out_path: str) -> None:
    from fleetguard.config import load_config
    from fleetguard.controller.process import start_controller

    commits: list[tuple[str, int, float, float]] = []
    journaled: list[tuple[str, int, float]] = []
    running = start_controller(load_config(config_path))
    running.writer.on_committed.append(lambda b: commits.append((b.host, b.seq, time.time(), b.sent_ts)))
    accept = running.writer.accept

    def accept_timed(items: list[Any], **options: Any) -> list[Any]:
        # When each batch was answered (HTTP) or acked (NATS): in the journal, before its commit.
        answers = accept(items, **options)
        now = time.time()
        fresh = [
            b for (b, _), a in zip(items, answers, strict=True) if getattr(a, "duplicate", True) is False
        ]
        journaled.extend((b.host, b.seq, now) for b in fresh)
        return answers

    running.writer.accept = accept_timed  # type: ignore[method-assign]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"port {running.port}", flush=True)
    stop.wait()
    consumer = getattr(running.sources[0], "__self__", None) if running.sources else None
    running.stop()
    stats = vars(consumer.stats) if consumer is not None else {}
    Path(out_path).write_text(json.dumps({"commits": commits, "journaled": journaled, "consumer": stats}))


# ---- the run -----------------------------------------------------------------------------------------


def nats_config(root: Path, port: int, passwords: dict[str, str]) -> Path:
    users = [
        {
            "user": "controller",
            "password": passwords["controller"],
            # $KV: the pool's wire advertisement (fleetguard.shipping.wire_advert)
            "permissions": {"publish": ["$JS.API.>", "$JS.ACK.>", "$KV.>"], "subscribe": ["_INBOX.>"]},
        },
        {
            "user": "hosts",
            "password": passwords["hosts"],
            "permissions": {"publish": [f"fleetguard.{POOL}.*"], "subscribe": ["_INBOX.>"]},
        },
    ]
    path = root / "nats.conf"
    path.write_text(
        f"listen: 127.0.0.1:{port}\n"
        f"jetstream {{ store_dir: {json.dumps(str(root / 'js'))}, "
        "max_memory_store: 64MB, max_file_store: 4GB }\n"
        "max_payload: 8MB\n"
        f"authorization {{ users: {json.dumps(users)} }}\n"
    )
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def body(text: str, host: str, seq: int, sent: float) -> bytes:
    filled = text.replace("HOSTNAME", host).replace("SEQNUM", str(seq)).replace("SENTTS", f"{sent:.6f}")
    return gzip.compress(filled.encode(), compresslevel=1)


def schedule(hosts: list[str], seconds: float, interval: float) -> list[tuple[float, str]]:
    import random

    offsets = {h: random.uniform(0, interval) for h in hosts}
    return sorted((offsets[h] + k * interval, h) for h in hosts for k in range(int(seconds / interval)))


def http_phase(
    cl: Any, port: int, tokens: dict[str, str], text: str, hosts: list[str], args: Any
) -> dict[str, Any]:
    """The hosts' batches through bench/controller_load.py's generator (its own processes, pre-built bodies
    whose sent_ts is the time each is due: the flush time)."""
    gen = cl.Generator(port, tokens, text, workers=512, v2_template=args.v2_template)
    seqs: dict[str, int] = {}
    result = gen.run_step(hosts, args.seconds, args.interval, seqs)
    gen.stop()
    keys = {(h, k) for h, n in seqs.items() for k in range(1, n + 1)}
    return {"keys": keys, "ok": result.ok, "failed": result.failed, "refused": result.refused}


async def nats_phase_async(url: str, password: str, text: str, hosts: list[str], args: Any) -> dict[str, Any]:
    import nats

    conns = [
        await nats.connect(url, user="hosts", password=password, max_reconnect_attempts=-1)
        for _ in range(NATS_CONNECTIONS)
    ]
    keys: set[tuple[str, int]] = set()
    acked = failed = duplicates = 0
    seqs: dict[str, int] = {}
    tasks: list[asyncio.Task[None]] = []

    async def publish(js: Any, host: str, seq: int, flushed: float) -> None:
        nonlocal acked, failed, duplicates
        for _attempt in range(5):
            try:
                ack = await js.publish(
                    subject_for(POOL, host),
                    args.make_body(host, seq, flushed),
                    timeout=30,
                    headers={MSG_ID_HEADER: msg_id(subject_for(POOL, host), BOOT_ID, seq)},
                )
                acked += 1
                duplicates += int(bool(ack.duplicate))
                return
            except Exception:
                await asyncio.sleep(1)
        failed += 1

    start = time.monotonic()
    jss = [c.jetstream() for c in conns]
    for i, (offset, host) in enumerate(schedule(hosts, args.seconds, args.interval)):
        delay = start + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        seqs[host] = seqs.get(host, 0) + 1
        flushed = time.time()  # the body's sent_ts
        keys.add((host, seqs[host]))
        tasks.append(asyncio.create_task(publish(jss[i % len(jss)], host, seqs[host], flushed)))
    await asyncio.gather(*tasks)
    for c in conns:
        await c.close()
    return {"keys": keys, "ok": acked, "failed": failed, "duplicates": duplicates}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(
    name: str,
    phase: dict[str, Any],
    commits: dict[tuple[str, int], tuple[float, float]],
    journaled: dict[tuple[str, int], float],
) -> str:
    """Latency = commit time - the batch's sent_ts (its flush time), both on this machine's clock; and, with
    the controller's ingest journal, journal time (when it was answered or acked) - sent_ts."""
    lat = [commits[k][0] - commits[k][1] for k in phase["keys"] if k in commits]
    missing = [k for k in phase["keys"] if k not in commits]
    lost = len(missing)
    if missing:
        print(f"{name}: never committed: {sorted(missing)[:10]}", file=sys.stderr)
    jlat = [journaled[k] - commits[k][1] for k in phase["keys"] if k in journaled and k in commits]
    to_journal = f"{quantile(jlat, 0.5) * 1000:.0f} | {quantile(jlat, 0.99) * 1000:.0f}" if jlat else "- | -"
    return (
        f"| {name} | {len(phase['keys'])} | {to_journal} | {quantile(lat, 0.5) * 1000:.0f} "
        f"| {quantile(lat, 0.99) * 1000:.0f} | {max(lat) * 1000 if lat else float('nan'):.0f} | {lost} |"
    )


def run(args: argparse.Namespace) -> None:
    cl = _controller_load()
    text, rows = cl.template(int(args.interval))
    args.v2_template = cl.template_v2(int(args.interval)) if args.wire == 2 else None
    args.make_body = (
        functools.partial(cl.body_v2, args.v2_template)
        if args.v2_template is not None
        else functools.partial(body, text)
    )
    root = Path(tempfile.mkdtemp(prefix="fg-nats-bench-"))
    nats_port = free_port()
    passwords = {"controller": os.urandom(12).hex(), "hosts": os.urandom(12).hex()}
    (root / "controller.password").write_text(passwords["controller"])
    (root / "controller.password").chmod(0o600)
    nats_server = shutil.which("nats-server") or "/usr/sbin/nats-server"
    natsd = subprocess.Popen(
        [nats_server, "-c", str(nats_config(root, nats_port, passwords))],
        stdout=(root / "nats.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    http_hosts = [f"http-{i:05d}" for i in range(args.hosts)]
    nats_hosts = [f"nats-{i:05d}" for i in range(args.hosts)]
    tokens = add_tokens(root / "tokens.json", http_hosts)
    config = root / "controller.toml"
    config.write_text(
        f'[controller]\nlisten = "127.0.0.1:0"\ntokens_file = "{root}/tokens.json"\npool = "{POOL}"\n'
        f'nats_url = "nats://127.0.0.1:{nats_port}"\nnats_user = "controller"\n'
        f'nats_password_file = "{root}/controller.password"\n[store]\npath = "{root}/controller.duckdb"\n'
        "[dashboard]\nenabled = false\n"
    )
    commits_path = root / "commits.json"
    time.sleep(0.5)
    ctl = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(config), str(commits_path)],
        stdout=subprocess.PIPE,
        stderr=(root / "controller.log").open("w"),
        text=True,
    )
    try:
        assert ctl.stdout is not None
        port = int(ctl.stdout.readline().split()[1])
        time.sleep(2)  # the consumer connects and creates the stream
        print(
            f"{args.hosts} hosts per path, {args.seconds:.0f} s per phase, batch of {rows} rows every "
            f"{args.interval:.0f} s per host, wire version {args.wire}",
            flush=True,
        )
        http = http_phase(cl, port, tokens, text, http_hosts, args)
        url = f"nats://127.0.0.1:{nats_port}"
        nats_result = asyncio.run(nats_phase_async(url, passwords["hosts"], text, nats_hosts, args))
        time.sleep(max(10.0, args.interval * 2))  # the consumer drains what is in the stream
    finally:
        ctl.send_signal(signal.SIGTERM)
        ctl.wait(timeout=300)
        natsd.send_signal(signal.SIGTERM)
        natsd.wait(timeout=60)
    commits: dict[tuple[str, int], tuple[float, float]] = {}
    served = json.loads(commits_path.read_text())
    for host, seq, ts, sent_ts in served["commits"]:
        # the first commit (a duplicate is not stored again)
        commits.setdefault((host, int(seq)), (float(ts), float(sent_ts)))
    journaled: dict[tuple[str, int], float] = {}
    for host, seq, ts in served.get("journaled", []):
        journaled.setdefault((host, int(seq)), float(ts))
    print(
        "| path | batches | to the journal (answered / acked) p50 ms | p99 ms | to the commit p50 ms "
        "| p99 ms | max ms | lost |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(report("HTTP POST /v1/ingest", http, commits, journaled))
    print(report("NATS JetStream", nats_result, commits, journaled))
    print(
        f"HTTP: {http['ok']} ok, {http['failed']} failed, refused {http['refused']}; "
        f"NATS: {nats_result['ok']} acked, {nats_result['failed']} failed, "
        f"{nats_result['duplicates']} duplicate acks; consumer {served['consumer']}"
    )
    shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=2048)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--wire", type=int, choices=(1, 2), default=1)
    run(parser.parse_args())


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
