"""Ctrl-C stops `fleetguard up` at any moment: a real process sent SIGINT while it imports, while the demo
model still trains (abandoned, said in one line, its trainer gone), and while it samples. A hang fails the
test (the process is killed after tests/integration/up_process.HANG_SECONDS); how long a stop takes is a
figure in BENCHMARKS.md (bench/up_stop.py), not an assertion here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.up_process import Moment, stop_up_at

pytestmark = pytest.mark.integration


def test_sigint_while_importing_ends_up_without_a_traceback(tmp_path: Path) -> None:
    stopped = stop_up_at(tmp_path, Moment.IMPORTING)
    assert "Traceback" not in stopped.output, stopped.output
    assert stopped.returncode in (0, 130), stopped.output


def test_sigint_while_the_demo_model_trains_abandons_it_and_says_so(tmp_path: Path) -> None:
    stopped = stop_up_at(tmp_path, Moment.TRAINING)
    assert stopped.returncode == 0, stopped.output
    assert stopped.trainer_seen, "the demo model was not training when the signal was sent"
    assert not stopped.trainer_left, "the demo model's trainer outlived up"
    said = [line for line in stopped.output.splitlines() if "abandoned" in line]
    assert said == ["fleetguard up: stopped while the demo model was still training; abandoned it"], said
    assert '"stopped": true' in stopped.output  # the final flush ran and said what it stored
    assert "Traceback" not in stopped.output


def test_sigint_while_sampling_flushes_and_exits_zero(tmp_path: Path) -> None:
    stopped = stop_up_at(tmp_path, Moment.SAMPLING)
    assert stopped.returncode == 0, stopped.output
    assert '"stopped": true' in stopped.output
    assert "Traceback" not in stopped.output
