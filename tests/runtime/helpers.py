"""Shared bits for runtime tests: a JSON report body builder and real child processes."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def report_body(**overrides: Any) -> bytes:
    doc: dict[str, Any] = {
        "v": 1,
        "job_id": "job-a",
        "rank": 1,
        "local_rank": 1,
        "world_size": 4,
        "pid": 999,
        "host": "client-host",
        "step": 10,
        "section": "compute",
        "status": "running",
        "checkpoint_step": None,
        "timings": [[1.0, 9, "compute", 0.25]],
        "collectives": [["world", 1.0, 9, 9, 8, "gloo:all_reduce", 128]],
    }
    doc.update(overrides)
    return json.dumps(doc).encode()


def sleeper(
    seconds: float = 30.0, ignore_sigterm: bool = False, new_session: bool = True
) -> subprocess.Popen[bytes]:
    """A real child that sleeps (optionally ignoring SIGTERM), in its own session like a torchrun worker."""
    code = "import signal,sys,time\n"
    if ignore_sigterm:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
    code += f"time.sleep({seconds})\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=new_session
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # the signal disposition is in place
    return proc
