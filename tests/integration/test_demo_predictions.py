"""The demo tells the truth: three minutes of `fleetguard up --simulate 2x8` score every GPU, flag at most one
of the 11 GPUs the fault script leaves alone, and no prediction acts or counts toward the repair breaker.

The scripted faults run over the first three minutes of the fleet's clock (collectors/simulated_faults.py).
`up` runs in-process on a FakeClock (tests/integration/inprocess.py): the same daemon, store, scoring and
incident loops as the command line, each round made at the time a real run makes it, without waiting three
real minutes. The demo model is trained once per session (tests/conftest.py) and handed over as
`predictor.model_dir` (the same model `up --simulate` trains at start-up).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from collectors.simulated_faults import default_demo_faults
from fleetguard.config import load_config
from tests.integration.inprocess import InProcessUp

pytestmark = [pytest.mark.integration]

HOSTS, GPUS = 2, 8
RUN_SECONDS = 185  # the fault script's last fault starts at 170 s
# The loops of `up` that wait on its clock: the agent's, the --duration timer, live scoring, incidents.
CLOCK_LOOPS = 4


class _Shape:
    host_count, gpus_per_host, ports_per_host = HOSTS, GPUS, 8


def test_three_minutes_of_the_demo_flag_faulty_gpus_not_quiet_ones(tmp_path: Path, demo_model: Path) -> None:
    store = tmp_path / "fleetguard.duckdb"
    config = load_config(
        env={},  # the test's own settings only, whatever the environment holds
        overrides={
            "simulate.fleet": f"{HOSTS}x{GPUS}",
            "store.path": str(store),
            "agent.metrics_port": 0,
            "predictor.model_dir": str(demo_model),
            "predictor.score_interval_seconds": 5,
            "agent.flush_interval_seconds": 1,
            "runtime.port": 0,
            "controller.listen": "127.0.0.1:0",  # up's read API: any free port
            "dashboard.enabled": False,
            "collectors.kmsg_state_path": str(tmp_path / "kmsg.seq"),
        },
    )
    up = InProcessUp(config, duration_seconds=RUN_SECONDS)
    up.start()
    try:
        up.run(step_seconds=config.agent.sample_interval_seconds, loops=CLOCK_LOOPS)
    finally:
        up.stop()
    assert up.exit_code == 0, up.out.getvalue()
    scripted = {(f"sim-host-{f.host:03d}", f.gpu) for f in default_demo_faults(_Shape()) if hasattr(f, "gpu")}
    assert len(scripted) == 5
    con = duckdb.connect(str(store), read_only=True)
    uuid_of = dict(
        ((str(h), int(i)), str(u))
        for h, i, u in con.execute("SELECT DISTINCT host, gpu_index, uuid FROM gpu_samples").fetchall()
    )
    assert len(uuid_of) == HOSTS * GPUS
    faulty = {uuid_of[k] for k in scripted}
    quiet = set(uuid_of.values()) - faulty

    # every GPU scored, with a calibrated risk
    scored = con.execute("SELECT DISTINCT device_id FROM predictions").fetchall()
    assert {str(r[0]) for r in scored} == set(uuid_of.values())
    assert con.execute("SELECT min(risk) >= 0 AND max(risk) <= 1 FROM predictions").fetchone() == (True,)

    # at most one quiet GPU flagged; every at-risk finding a warning naming its risk and the base rate
    flagged = con.execute(
        "SELECT gpu_uuid, severity, evidence_json FROM findings WHERE kind = 'at_risk_gpu'"
    ).fetchall()
    assert all(sev == "warning" for _, sev, _ in flagged)
    assert all("base_rate" in json.loads(ev) for _, _, ev in flagged)
    assert len({str(g) for g, _, _ in flagged} & quiet) <= 1
    # the budget: at most K per period fleet-wide (a 3-minute run lies in at most two hourly periods)
    k = json.loads(flagged[0][2])["selection"]["k"] if flagged else 0
    assert len(flagged) <= 2 * k

    # a prediction opens a warning incident that only watches: no action, nothing for the breaker to count
    rows = con.execute(
        "SELECT i.severity, i.action, count(a.action_id) FROM incidents i "
        "LEFT JOIN incident_actions a USING (incident_id) "
        "WHERE i.fault = 'finding:at_risk_gpu' GROUP BY ALL"
    ).fetchall()
    assert all(sev == "warning" and action == "watch" and n == 0 for sev, action, n in rows)
    reason = con.execute("SELECT reason FROM breaker_state WHERE tripped").fetchall()
    acted = con.execute(
        "SELECT count(*) FROM incident_actions a JOIN incidents i USING (incident_id) "
        "WHERE i.fault = 'finding:at_risk_gpu'"
    ).fetchone()
    assert acted == (0,), reason
    con.close()
