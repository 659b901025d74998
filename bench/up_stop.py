"""How long Ctrl-C takes to stop a real `fleetguard up --simulate 1x2`, sent at three moments: while it
imports, while the demo model still trains (abandoned), while it samples (--no-predict). The target is 2 s.

Usage: .venv/bin/python bench/up_stop.py [--repeat 3]
Prints one line per run and the worst per moment, with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.integration

from tests.integration.up_process import Moment, stop_up_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    worst: dict[Moment, float] = {}
    for moment in Moment:
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="fg-up-stop-") as tmp:
                stopped = stop_up_at(Path(tmp), moment)
            abandoned = "abandoned" in stopped.output
            print(
                f"{moment.value:30s} stop {stopped.stop_seconds:5.2f} s  exit {stopped.returncode}"
                f"  trainer seen {stopped.trainer_seen} left {stopped.trainer_left}"
                f"  abandoned said {abandoned}"
            )
            worst[moment] = max(worst.get(moment, 0.0), stopped.stop_seconds)
    load_after = os.getloadavg()
    for moment, seconds in worst.items():
        print(f"worst {moment.value:30s} {seconds:5.2f} s")
    print(f"load average before {load_before[0]:.2f} after {load_after[0]:.2f} (1 min; 2-core machine)")


if __name__ == "__main__":
    main()
