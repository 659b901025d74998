"""Runs the self-check's test processes: all at once, under one deadline, each in its own session so that a
timeout kills whatever it started; the answer is the JSON line each printed last."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChildResult:
    answer: dict[str, Any] | None  # the last JSON object it printed; None when it printed none
    returncode: int | None  # None: killed at the deadline
    error: str  # the tail of stderr, for the report

    @property
    def problem(self) -> str:
        if self.returncode is None:
            return "timed out"
        if self.answer is None:
            return f"exit {self.returncode}: {self.error or 'no answer'}"
        return ""


def run_modules(
    module: str, argvs: Sequence[Sequence[str]], envs: Sequence[Mapping[str, str]], timeout_seconds: float
) -> list[ChildResult]:
    """`python -m module *argv` once per argv (with its extra environment), all started together."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", module, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
            start_new_session=True,
        )
        for argv, env in zip(argvs, envs, strict=True)
    ]
    deadline = time.monotonic() + timeout_seconds
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            results.append(ChildResult(_last_json(out), proc.returncode, " ".join(err.split())[-300:]))
        except subprocess.TimeoutExpired:
            results.append(ChildResult(None, None, "timed out"))
    for proc in procs:  # a timed-out child, and anything it started, go now
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    return results


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None
