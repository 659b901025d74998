"""The controller's /metrics, scraped from a live controller after real ingest, passes `promtool check
metrics`, and its ingest latency is a histogram Prometheus can aggregate."""

from __future__ import annotations

import shutil
import subprocess

from tests.controller.helpers import Controller, batch, metric_value


def test_the_controller_metrics_pass_promtool_with_latency_as_a_histogram(controller: Controller) -> None:
    for seq in (1, 2, 3):
        assert controller.ship(batch("node-a", seq)).status == 200
    text = controller.metrics()
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make test` installs Debian's prometheus package"
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "# TYPE fleetguard_controller_ingest_latency_seconds histogram" in text
    assert 'quantile="' not in text
    assert metric_value(text, "fleetguard_controller_ingest_latency_seconds_count") == 3
    assert metric_value(text, 'fleetguard_controller_ingest_latency_seconds_bucket{le="+Inf"}') == 3
    assert metric_value(text, "fleetguard_controller_ingest_latency_seconds_sum") > 0
    # Every latency is a histogram: the commit of a group of batches too (no summary left on the page).
    assert "# TYPE fleetguard_controller_commit_seconds histogram" in text
    assert " summary" not in "".join(line for line in text.splitlines() if line.startswith("# TYPE"))
    commits = metric_value(text, "fleetguard_controller_commit_seconds_count")
    assert 1 <= commits <= 3  # three batches, committed in one to three groups
    assert metric_value(text, 'fleetguard_controller_commit_seconds_bucket{le="+Inf"}') == commits
