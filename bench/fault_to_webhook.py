"""Fault-to-webhook latency through `fleetguard up`'s own pieces at default settings: the agent loop (a
collector that reads one XID for a new host every --gap s), its write buffer and store, the incidents
extension (the controller's incidents task) and the alert relay, POSTing signed Standard Webhooks to a
loopback receiver. Latency is the receiver's arrival time minus the event's timestamp (when the agent read
it). Default [agent], [diagnosis] and [alerts] settings: a fault is flushed and evaluated as soon as it is
read, not at the 5 s flush or diagnosis interval.

Usage: .venv/bin/python bench/fault_to_webhook.py [--events 60] [--gap 0.37]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fleetguard.agent.daemon import run_daemon
from fleetguard.config import load_config
from fleetguard.incidents.extension import incidents_extension
from fleetguard.records.telemetry import Batch, Event, EventKind

SECRET = "whsec_" + base64.b64encode(b"bench-secret-bench-secret-32byte").decode()


class XidReader:
    """A collector that reads one fatal XID for a new host every `gap` seconds."""

    name = "xid-reader"

    def __init__(self, events: int, gap: float) -> None:
        self.left, self.gap, self.next_at = events, gap, time.time() + 3.0  # after start-up
        self.read_at: dict[str, float] = {}

    def collect(self, now: float) -> Batch:
        events = []
        while self.left and time.time() >= self.next_at:
            host = f"n{len(self.read_at):04d}"
            ts = time.time()
            self.read_at[host] = ts
            events.append(
                Event(
                    ts=ts,
                    host=host,
                    kind=EventKind.XID,
                    source="kmsg",
                    message="NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus",
                    code=79,
                    pci_bus_id="0000:18:00.0",
                )
            )
            self.left -= 1
            self.next_at += self.gap
        return Batch(events=events)

    def problems(self) -> Mapping[str, int]:
        return {}

    def close(self) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=60)
    ap.add_argument("--gap", type=float, default=0.37)
    args = ap.parse_args()
    arrived: dict[str, float] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if body["type"] == "incident.opened":
                arrived.setdefault(body["data"]["host"], time.time())
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serving = threading.Thread(target=server.serve_forever)
    serving.start()
    folder = Path(tempfile.mkdtemp(prefix="fg-f2w-"))
    (folder / "secret").write_text(SECRET)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    config = load_config(
        overrides={
            "store.path": str(folder / "s.duckdb"),
            "agent.metrics_port": 0,
            "alerts.webhooks": [
                {"name": "bench", "url": url, "secret_file": str(folder / "secret"), "rate_per_second": 100}
            ],
        }
    )
    reader = XidReader(args.events, args.gap)
    run_daemon(
        config,
        [reader],
        None,
        extensions=[incidents_extension(config)],
        duration_seconds=3.0 + args.events * args.gap + 15.0,
        out=io.StringIO(),
    )
    server.shutdown()
    serving.join()
    server.server_close()
    lat = sorted(arrived[h] - t for h, t in reader.read_at.items() if h in arrived)
    print("| faults | delivered | p50 ms | p95 ms | max ms | load average |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {len(reader.read_at)} | {len(lat)} | {statistics.median(lat) * 1000:.0f} "
        f"| {lat[int(0.95 * (len(lat) - 1))] * 1000:.0f} | {lat[-1] * 1000:.0f} | {os.getloadavg()[0]:.1f} |"
    )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
