"""The executor does each action and records it with the finding that caused it and the outcome."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import cast

import pytest

from fleetguard.actions.executor import ActionExecutor, ActionRequest, ExecutorConfig
from fleetguard.clock import FakeClock, SystemClock
from fleetguard.jobcontrol.commands import CommandQueue
from fleetguard.jobcontrol.trust import ProcessIdentity, identify, job_key
from fleetguard.records.action_requests import ActionKind
from tests.runtime.helpers import sleeper

JOB = job_key(os.getuid(), "job-a")  # the sleepers below are this user's: the job's owner


def process(pid: int) -> ProcessIdentity | None:
    """A real process's identity; a made-up one for a pid that is only a number in the test."""
    return identify(pid) or ProcessIdentity(pid, os.getuid(), 0, pid, 0)


def executor(ranks: dict[int, int], **config: object) -> tuple[ActionExecutor, CommandQueue]:
    commands = CommandQueue()
    cfg = ExecutorConfig(host="node1", **config)  # type: ignore[arg-type]
    known = {rank: process(pid) for rank, pid in ranks.items()}
    return ActionExecutor(cfg, SystemClock(), commands, lambda job: known), commands


def request(action: str, rank: int | None = 2) -> ActionRequest:
    return ActionRequest(action=ActionKind(action), job_id=JOB, finding_id="f-1", reason="because", rank=rank)


def test_a_checkpoint_request_is_queued_for_every_local_rank_and_recorded() -> None:
    ex, commands = executor({0: 100, 1: 101})
    record = ex.execute(request("checkpoint"))
    assert (record.action, record.outcome, record.finding_id) == ("checkpoint", "requested", "f-1")
    assert [c.kind for c in commands.take(JOB, 0)] == ["checkpoint"]
    assert [c.kind for c in commands.take(JOB, 1)] == ["checkpoint"]
    assert "because" in record.detail


def test_a_crash_loop_stop_asks_the_ranks_to_stop() -> None:
    ex, commands = executor({0: 100})
    record = ex.execute(request("stop_crash_loop"))
    assert record.outcome == "requested"
    assert [c.kind for c in commands.take(JOB, 0)] == ["stop"]


def test_a_crash_loop_stop_also_ends_the_job_through_the_configured_stop_command(tmp_path: Path) -> None:
    out = tmp_path / "argv.txt"
    script = f"import sys; open({str(out)!r}, 'w').write(' '.join(sys.argv[1:]))"
    ex, commands = executor({0: 100}, stop_command=(sys.executable, "-c", script, "scancel", "{job}"))
    record = ex.execute(request("stop_crash_loop"))
    assert record.outcome == "succeeded" and out.read_text() == "scancel job-a"
    assert [c.kind for c in commands.take(JOB, 0)] == ["stop"]  # the ranks are asked as well


def test_a_stop_command_ends_a_job_even_when_no_rank_is_alive_to_ask(tmp_path: Path) -> None:
    ex, _ = executor({}, stop_command=(sys.executable, "-c", "pass", "{job}"))
    record = ex.execute(request("stop_crash_loop"))
    assert record.outcome == "succeeded" and "no live local ranks" in record.detail


def test_restart_kills_the_local_worker_group() -> None:
    workers = [sleeper(), sleeper(ignore_sigterm=True)]
    ex, _ = executor({0: workers[0].pid, 1: workers[1].pid}, restart_grace_seconds=0.3)
    record = ex.execute(request("restart"))
    assert [w.wait(timeout=5) for w in workers] == [-signal.SIGTERM, -signal.SIGKILL]
    assert (record.action, record.outcome, record.target) == ("restart", "succeeded", f"job/{JOB}@node1")


def test_restart_runs_the_configured_command_with_placeholders(tmp_path: Path) -> None:
    out = tmp_path / "argv.txt"
    script = f"import sys; open({str(out)!r}, 'w').write(' '.join(sys.argv[1:]))"
    ex, _ = executor(
        {2: 4321}, restart_command=(sys.executable, "-c", script, "{job}", "{host}", "{rank}", "{pid}")
    )
    record = ex.execute(request("restart"))
    assert record.outcome == "succeeded"
    assert out.read_text() == "job-a node1 2 4321"  # {job} is the id the ranks reported


def test_a_failing_command_is_recorded_as_failed() -> None:
    ex, _ = executor({}, cordon_command=(sys.executable, "-c", "import sys; sys.exit(3)"))
    record = ex.execute(request("cordon"))
    assert (record.outcome, record.target) == ("failed", "host/node1")
    assert "rc=3" in record.detail


def test_cordon_without_a_command_is_skipped_and_says_why() -> None:
    ex, _ = executor({})
    record = ex.execute(request("cordon"))
    assert record.outcome == "skipped" and "cordon_command" in record.detail


def test_restart_with_no_live_ranks_is_skipped() -> None:
    ex, _ = executor({})
    assert ex.execute(request("restart")).outcome == "skipped"


def test_an_unknown_action_is_refused_by_its_type_and_recorded_as_failed_if_it_slips_through() -> None:
    with pytest.raises(ValueError):
        ActionKind("reboot")  # where requests are built from outside (commands, policy), the enum refuses it
    ex, _ = executor({})
    slipped = ActionRequest(action=cast(ActionKind, "reboot"), job_id=JOB, finding_id="f-1", reason="because")
    assert ex.execute(slipped).outcome == "failed"


def test_records_carry_the_clock_time_and_unique_ids() -> None:
    clock = FakeClock(start=1000.0)
    ex = ActionExecutor(ExecutorConfig(host="n"), clock, CommandQueue(), lambda job: {})
    a, b = ex.execute(request("none")), ex.execute(request("none"))
    assert a.ts == 1000.0 and a.outcome == "skipped"
    assert a.action_id != b.action_id


def test_a_rank_judged_by_heartbeats_alone_is_asked_to_checkpoint_but_never_signalled() -> None:
    worker = sleeper()
    try:
        commands = CommandQueue()
        ex = ActionExecutor(ExecutorConfig(host="n"), SystemClock(), commands, lambda job: {0: None})
        assert ex.execute(request("checkpoint")).outcome == "requested"
        assert ex.execute(request("restart")).outcome == "skipped"
        assert worker.poll() is None
    finally:
        worker.kill()
        worker.wait()
