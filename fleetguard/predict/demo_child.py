"""The demo model trained in a child process (`python -m fleetguard.predict.demo_child --out DIR --seed N`),
so that `up` stopped while it trains abandons it at once.

In a thread it could not be: XGBoost and DuckDB do not return to Python until they are done (tens of seconds
on a loaded host), and a thread still inside them when the interpreter exits aborts the process. A child is
killed. It runs in a session of its own, so a Ctrl-C at the terminal reaches `up` alone, which says that it
abandoned the training and kills the child."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final

POLL_SECONDS: Final = 0.1  # how soon a stop is noticed while the child trains (real time: the child's)
ERROR_TAIL_BYTES: Final = 4096  # what of the child's stderr a failure quotes (its last line)


class TrainingAbandoned(Exception):
    """`stop` was set while the demo model was still training; the child is gone."""


class TrainingFailed(Exception):
    """The child exited without a model; the message is its last line of stderr."""


def train_in_child(out_dir: Path, seed: int, stop: threading.Event) -> Path:
    """Train the demo model into `out_dir` in a child process and return `out_dir`; TrainingAbandoned (the
    child killed and reaped) once `stop` is set, TrainingFailed if the child fails."""
    argv = [sys.executable, "-m", "fleetguard.predict.demo_child", "--out", str(out_dir), "--seed", str(seed)]
    with tempfile.TemporaryFile() as errors:
        # Our own interpreter and module, a path and a number: no shell, nothing from data.
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True
        )
        try:
            while child.poll() is None:
                if stop.wait(POLL_SECONDS):
                    raise TrainingAbandoned("the demo model was still training")
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        if child.returncode != 0:
            raise TrainingFailed(f"training the demo model failed: {_last_line(errors, child.returncode)}")
    return out_dir


def _last_line(errors: IO[bytes], returncode: int) -> str:
    size = errors.seek(0, 2)
    errors.seek(max(0, size - ERROR_TAIL_BYTES))
    lines = [line for line in errors.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else f"exit status {returncode}"


def main(argv: Sequence[str] | None = None) -> int:
    # The parent decides when training stops; a terminal's Ctrl-C is for it (the session is our own anyway).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parser = argparse.ArgumentParser(prog="fleetguard.predict.demo_child")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from fleetguard.predict.demo_model import train_demo_model

    train_demo_model(args.out, seed=args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
