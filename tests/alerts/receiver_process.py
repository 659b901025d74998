"""A Standard Webhooks receiver as a process of its own: answers 503 while a "down" file exists (an
outage the caller starts and ends), 200 otherwise; verifies every signature; logs each request as one JSON
line (time, status, webhook-id, type, incident, valid, duplicate). Stops on SIGTERM.

    python tests/alerts/receiver_process.py SECRET_FILE DOWN_FILE LOG_FILE PORT_FILE
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType

from standardwebhooks import Webhook, WebhookVerificationError


def main(secret_file: str, down_file: str, log_file: str, port_file: str) -> None:
    verifier = Webhook(Path(secret_file).read_text().strip())
    down = Path(down_file)
    accepted: set[str] = set()
    lock = threading.Lock()
    log = Path(log_file).open("a", buffering=1)  # noqa: SIM115 - open for the server's whole life

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            status = 503 if down.exists() else 200
            try:
                verifier.verify(body, headers)
                valid = True
            except WebhookVerificationError:
                valid = False
            document = json.loads(body)
            msg_id = headers.get("webhook-id", "")
            with lock:
                duplicate = status == 200 and msg_id in accepted
                if status == 200 and valid:
                    accepted.add(msg_id)
                line = {
                    "t": time.time(),
                    "status": status,
                    "id": msg_id,
                    "type": document.get("type"),
                    "incident_id": document.get("data", {}).get("incident_id"),
                    "valid": valid,
                    "duplicate": duplicate,
                }
                log.write(json.dumps(line) + "\n")
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    tmp = Path(port_file + ".tmp")
    tmp.write_text(str(server.server_address[1]))
    tmp.replace(port_file)
    server.serve_forever()
    server.server_close()
    log.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
