"""Latency from an event stored to its alert delivered to a webhook receiver, through the `up` pipeline:
the incident round (every --interval s) reads the store, opens the incident, writes the outbox row in the
same transaction and wakes the relay, which signs and POSTs it to a real loopback HTTP receiver.

In `fleetguard up` add the agent's flush interval (agent.flush_interval_seconds, 5 s by default) before
the event is in the store. Usage: python bench/diagnosis_alert_latency.py [--events 40] [--interval 1]
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fleetguard.alerts.relay import AlertRelay
from fleetguard.clock import SystemClock
from fleetguard.incidents.feed import StoreFeed
from fleetguard.incidents.rounds import incident_round
from fleetguard.incidents.service import IncidentService
from fleetguard.records.telemetry import Event, EventKind
from fleetguard.settings.alerts import AlertsConfig, WebhookConfig, WebhookKind
from fleetguard.settings.policy_files import load_policy
from fleetguard.store import Store

SECRET = "whsec_" + base64.b64encode(b"bench-secret-bench-secret-32byte").decode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=40)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    arrived: dict[str, float] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            arrived.setdefault(body["data"]["host"], time.time())
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    folder = Path(tempfile.mkdtemp(prefix="fg-latency-"))
    (folder / "secret").write_text(SECRET)
    hook = WebhookConfig(
        "bench",
        f"http://127.0.0.1:{server.server_address[1]}/",
        WebhookKind.GENERIC,
        str(folder / "secret"),
        rate_per_second=100,
    )
    config = AlertsConfig(webhooks=(hook,), poll_seconds=1.0)
    clock = SystemClock()
    stop = threading.Event()
    with Store.open(folder / "s.duckdb") as store:
        policy = load_policy(overrides={"breaker": {"max_host_fraction": 1.0, "repairs_per_hour": 100000}})
        service = IncidentService.open(store.cursor(), policy, clock.time(), webhooks=[hook])
        feed = StoreFeed.open(store.cursor())
        relay = AlertRelay(store.cursor(), config, clock)

        def rounds() -> None:
            while not stop.is_set():
                incident_round(service, feed, relay, str(folder / "s.duckdb"), clock.time())
                stop.wait(args.interval)

        threads = [threading.Thread(target=rounds), threading.Thread(target=relay.run, args=(stop,))]
        for t in threads:
            t.start()
        stored: dict[str, float] = {}
        for i in range(args.events):
            host = f"n{i:04d}"
            now = time.time()
            store.append(
                [
                    Event(
                        ts=now,
                        host=host,
                        kind=EventKind.XID,
                        source="kmsg",
                        message="NVRM: Xid 79",
                        code=79,
                        pci_bus_id="0000:18:00.0",
                    )
                ]
            )
            stored[host] = time.time()
            time.sleep(0.37)
        deadline = time.time() + 30
        while len(arrived) < args.events and time.time() < deadline:
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join()
    server.shutdown()
    lat = sorted(arrived[h] - stored[h] for h in stored if h in arrived)
    print("| diagnosis interval s | alerts | delivered | p50 ms | p95 ms | max ms |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {args.interval:g} | {args.events} | {len(lat)} | {statistics.median(lat) * 1000:.0f} "
        f"| {lat[int(0.95 * (len(lat) - 1))] * 1000:.0f} | {lat[-1] * 1000:.0f} |"
    )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
