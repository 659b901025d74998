"""RuntimeService: reports -> records in the sink; exits and silences -> findings -> policy -> actions."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pytest

from fleetguard import client as fg
from fleetguard.actions.executor import ActionRequest
from fleetguard.argv import ArgvTemplateError
from fleetguard.clock import FakeClock
from fleetguard.config import Config, RuntimeConfig
from fleetguard.jobcontrol.runtime_slot import RuntimeSlot
from fleetguard.jobcontrol.trust import job_key
from fleetguard.records.action_requests import ActionKind
from fleetguard.records.findings import ActionOutcome, ActionRecord, Finding, FindingKind, Severity
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming
from fleetguard.runtime.pid_watcher import ProcessExit
from fleetguard.runtime.protocol import parse_report
from fleetguard.runtime.server import NonLoopbackBindError
from fleetguard.runtime.service import RuntimeService, RuntimeServiceConfig, runtime_config_from
from tests.runtime.helpers import JOB, report_body, root_report, sleeper


class Sink:
    def __init__(self) -> None:
        self.records: list[object] = []

    def __call__(self, batch: Sequence[object]) -> None:
        self.records.extend(batch)

    def of(self, kind: type) -> list[Any]:
        return [r for r in self.records if isinstance(r, kind)]


def make_service(clock: FakeClock, sink: Sink, **config: object) -> RuntimeService:
    settings = {"host": "node1", "port": 0, "restart_grace_seconds": 0.5, **config}
    return RuntimeService(RuntimeServiceConfig(**settings), clock, sink)  # type: ignore[arg-type]


def report(
    service: RuntimeService, clock: FakeClock, rank: int, pid: int, step: int, **fields: object
) -> None:
    body = report_body(rank=rank, local_rank=rank, pid=pid, step=step, timings=[], collectives=[], **fields)
    service.handle_report(root_report(body, clock.time()))


def run_queued_actions(service: RuntimeService) -> list[ActionRecord]:
    records: list[ActionRecord] = []
    for _finding, requests in service.take_planned():
        records.extend(service.run_actions(requests))
    return records


def carried_out(
    service: RuntimeService, clock: FakeClock, requests: Sequence[ActionRequest], outcome: ActionOutcome
) -> None:
    """Tell the planner each request ran with `outcome`, without running it."""
    for r in requests:
        record = ActionRecord(clock.time(), "act-test", r.action, f"job/{r.job_id}", r.finding_id, outcome)
        service.planner.action_done(r, record, service.ranks.job(r.job_id))


@pytest.fixture
def ranks():
    procs = [sleeper() for _ in range(4)]
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_reports_reach_the_sink_as_runtime_records() -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    service.handle_report(root_report(report_body(), clock.time()))
    service.flush()
    assert (
        len(sink.of(Heartbeat)) == 1
        and len(sink.of(StepTiming)) == 1
        and len(sink.of(CollectiveProgress)) == 1
    )
    service.stop()


def test_a_dead_rank_is_named_and_the_rest_of_the_worker_group_is_restarted(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5)
    ranks[2].send_signal(signal.SIGKILL)
    ranks[2].wait()
    service.handle_exit(ProcessExit(ranks[2].pid, (JOB, 2), -9))
    findings = service.tick_once()
    assert [(f.kind, f.rank) for f in findings] == [("dead_rank", 2)]
    actions = run_queued_actions(service)
    assert [(a.action, a.outcome, a.finding_id) for a in actions] == [
        ("restart", "succeeded", findings[0].finding_id)
    ]
    assert [p.wait(timeout=5) for p in (ranks[0], ranks[1], ranks[3])] == [-signal.SIGTERM] * 3
    service.stop()


def test_exits_the_service_caused_are_not_crashes(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5)
    service.run_actions([ActionRequest(ActionKind.RESTART, JOB, "f-1", "test")])
    for r, p in enumerate(ranks):
        service.handle_exit(ProcessExit(p.pid, (JOB, r), -15))
    assert service.tick_once() == []
    assert service.stats.expected_exits == 4
    service.stop()


def test_exits_after_the_first_crash_are_collateral_not_new_findings(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5)
    service.handle_exit(ProcessExit(ranks[3].pid, (JOB, 3), -9))
    for r in (0, 1, 2):
        service.handle_exit(ProcessExit(ranks[r].pid, (JOB, r), -15))
    assert [(f.kind, f.rank) for f in service.tick_once()] == [("dead_rank", 3)]
    assert service.stats.collateral_exits == 3
    service.stop()


def test_a_rank_that_said_finished_exits_without_a_finding(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    report(service, clock, 0, ranks[0].pid, step=9, status="finished")
    service.handle_exit(ProcessExit(ranks[0].pid, (JOB, 0), None))
    assert service.tick_once() == []
    service.stop()


def test_a_silent_rank_is_found_hung_after_its_adaptive_timeout(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    for second in range(10):
        for r, p in enumerate(ranks):
            if r != 1 or second < 5:
                report(service, clock, r, p.pid, step=second)
        clock.advance(1.0)
        service.tick_once()
    hung = [f for f in sink.of(Finding) if f.kind == "hung_rank"]
    assert [f.rank for f in hung] == [1]
    assert any(f.kind == "hang_localised" for f in sink.of(Finding))
    service.stop()


class CheckpointingClock(FakeClock):
    """Advances like FakeClock; the first sleep runs `during_sleep` (the ranks finishing their checkpoint)."""

    def __init__(self) -> None:
        super().__init__()
        self.during_sleep: Callable[[], None] | None = None

    def sleep(self, seconds: float) -> None:
        hook, self.during_sleep = self.during_sleep, None
        if hook is not None:
            hook()
        super().sleep(seconds)


def test_a_restart_after_a_checkpoint_request_waits_for_that_checkpoint(ranks) -> None:
    clock, sink = CheckpointingClock(), Sink()
    service = make_service(clock, sink, checkpoint_timeout_seconds=60.0)
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5, checkpoint_step=0)
    seen_at_restart: list[int | None] = []

    def checkpoint_completes() -> None:
        for r, p in enumerate(ranks):
            report(service, clock, r, p.pid, step=6, checkpoint_step=6)

    clock.during_sleep = checkpoint_completes
    execute = service.executor.execute

    def watching_execute(request: ActionRequest) -> ActionRecord:
        if request.action == "restart":
            job = service.ranks.job(JOB)
            seen_at_restart.append(job.checkpoint_step if job else None)
            restart_started.append(clock.monotonic())
        return execute(request)

    restart_started: list[float] = []
    service.executor.execute = watching_execute  # type: ignore[method-assign]
    start = clock.monotonic()
    records = service.run_actions(
        [
            ActionRequest(ActionKind.CHECKPOINT, JOB, "f-9", "slow"),
            ActionRequest(ActionKind.RESTART, JOB, "f-9", "slow"),
        ],
    )
    assert [(a.action, a.outcome) for a in records] == [("checkpoint", "requested"), ("restart", "succeeded")]
    assert seen_at_restart == [6]
    assert restart_started[0] - start < 1.0  # it did not sit out the 60 s timeout
    service.stop()


def test_a_checkpoint_that_never_completes_delays_the_restart_only_until_the_timeout(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink, checkpoint_timeout_seconds=30.0)
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5)
    start = clock.monotonic()
    records = service.run_actions(
        [
            ActionRequest(ActionKind.CHECKPOINT, JOB, "f-9", "slow"),
            ActionRequest(ActionKind.RESTART, JOB, "f-9", "slow"),
        ],
    )
    assert [a.action for a in records] == ["checkpoint", "restart"]
    assert 30.0 <= clock.monotonic() - start < 31.0
    service.stop()


def test_the_policy_keeps_per_job_state_so_one_fault_restarts_once(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5)
    dead = Finding(
        clock.time(),
        "f-1",
        FindingKind.DEAD_RANK,
        Severity.CRITICAL,
        f"job/{JOB}/rank/0",
        "dead",
        job_id=JOB,
        rank=0,
    )
    first = service.planner(dead, service.ranks.job(JOB))
    clock.advance(5)
    again = Finding(
        clock.time(),
        "f-2",
        FindingKind.DEAD_RANK,
        Severity.CRITICAL,
        f"job/{JOB}/rank/1",
        "dead",
        job_id=JOB,
        rank=1,
    )
    second = service.planner(again, service.ranks.job(JOB))
    assert [r.action for r in first] == ["restart"]
    assert [r.action for r in second] == ["none"]
    service.stop()


def test_a_started_service_takes_reports_over_http_and_stops_cleanly() -> None:
    sink = Sink()
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), FakeClock(), sink)
    service.start()
    try:
        client = fg.Client(fg.Identity("job-h", 0, 0, 1, "h", 1), endpoint=service.endpoint, start=False)
        client.step(1)
        client.step(2)
        assert client.report_once()
    finally:
        service.stop()
    assert [h.job_id for h in sink.of(Heartbeat)] == [job_key(os.getuid(), "job-h")]
    assert [t.step for t in sink.of(StepTiming)] == [1]


def test_the_config_section_maps_onto_the_service_config() -> None:
    config = Config(
        runtime=RuntimeConfig(
            port=9999, restart_grace_seconds=3.0, cordon_command=["kubectl", "cordon", "{host}"]
        )
    )
    cfg = runtime_config_from(config)
    assert (cfg.port, cfg.restart_grace_seconds, cfg.cordon_command) == (
        9999,
        3.0,
        ("kubectl", "cordon", "{host}"),
    )
    assert cfg.host == config.host


def test_a_non_loopback_bind_address_is_refused_at_config_time() -> None:
    with pytest.raises(NonLoopbackBindError):
        RuntimeServiceConfig(host="n", bind_address="0.0.0.0")


def test_a_bad_command_template_is_refused_at_config_time() -> None:
    with pytest.raises(ArgvTemplateError):
        RuntimeServiceConfig(host="n", restart_command=("scancel", "{jobid}"))


def test_a_job_never_seen_has_an_empty_action_state() -> None:
    service = make_service(FakeClock(), Sink())
    assert service.planner.state("nope").restarts == ()  # type: ignore[attr-defined]
    assert service.ranks.job("nope") is None
    service.stop()


def test_a_crash_loop_is_stopped_with_a_stop_command_instead_of_a_fourth_restart(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink, policy={"cooldown_seconds": 10.0})
    planned: list[str] = []
    for attempt in range(4):
        # every incarnation reports the same checkpoint: no progress between restarts
        report(service, clock, 0, ranks[attempt].pid, step=3, checkpoint_step=20)
        crash = Finding(
            clock.time(),
            f"f-{attempt}",
            FindingKind.DEAD_RANK,
            Severity.CRITICAL,
            f"job/{JOB}/rank/0",
            "dead",
            job_id=JOB,
            rank=0,
        )
        requests = service.planner(crash, service.ranks.job(JOB))
        planned.extend(r.action for r in requests)
        carried_out(service, clock, requests, ActionOutcome.SUCCEEDED)
        clock.advance(60.0)
    assert planned == ["restart", "restart", "restart", "stop_crash_loop"]
    [record] = service.run_actions([ActionRequest(ActionKind.STOP_CRASH_LOOP, JOB, "f-s", "crash loop")])
    assert record.outcome == "requested"
    assert [c.kind for c in service.commands.take(JOB, 0)] == ["stop"]
    service.stop()


def test_a_worker_of_a_replaced_group_dying_late_is_not_a_new_crash(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    old, new = ranks[:2], ranks[2:]
    for r, p in enumerate(old):
        report(service, clock, r, p.pid, step=5)
    service.handle_exit(ProcessExit(old[0].pid, (JOB, 0), -9))
    assert [(f.kind, f.rank) for f in service.tick_once()] == [("dead_rank", 0)]
    report(service, clock, 0, new[0].pid, step=5)  # torchrun's next worker group starts reporting ...
    service.handle_exit(ProcessExit(old[1].pid, (JOB, 1), -15))  # ... before the old rank 1 is gone
    assert service.tick_once() == []
    assert service.stats.collateral_exits == 1
    report(service, clock, 1, new[1].pid, step=5)
    service.handle_exit(ProcessExit(new[1].pid, (JOB, 1), -9))  # the new group's own crash still counts
    assert [(f.kind, f.rank) for f in service.tick_once()] == [("dead_rank", 1)]
    service.stop()


class ScriptedAnalyzer:
    """An analyzer that reports the findings a test hands it at the next tick and nothing else."""

    def __init__(self) -> None:
        self.next: list[Finding] = []

    def register_job(
        self, job_id: str, world_size: int, started_at: float, *, local_ranks: Iterable[int] = ()
    ) -> None:
        pass

    def forget_job(self, job_id: str) -> None:
        pass

    def observe(self, record: object) -> None:
        pass

    def process_exited(
        self,
        job_id: str,
        rank: int,
        exit_code: int | None,
        now: float,
        detail: Mapping[str, object] | None = None,
    ) -> None:
        pass

    def tick(self, now: float) -> list[Finding]:
        out, self.next = self.next, []
        return out


def hang(clock: FakeClock) -> Finding:
    return Finding(
        clock.time(),
        f"hang-{clock.time()}",
        FindingKind.HANG_LOCALISED,
        Severity.CRITICAL,
        f"job/{JOB}/group/world",
        "hung",
        job_id=JOB,
        evidence_json='{"hang_kind": "host_stuck"}',
    )


def restarted_at_the_start(service: RuntimeService, clock: FakeClock, ranks) -> None:
    """Four ranks reporting, and a restart of the job that has just succeeded."""
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5)
    dead = Finding(
        clock.time(),
        "f-0",
        FindingKind.DEAD_RANK,
        Severity.CRITICAL,
        f"job/{JOB}/rank/0",
        "dead",
        job_id=JOB,
        rank=0,
    )
    carried_out(service, clock, service.planner(dead, service.ranks.job(JOB)), ActionOutcome.SUCCEEDED)


def queued(service: RuntimeService) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    for _finding, requests in service.take_planned():
        out.extend((r.finding_id, r.action) for r in requests)
    return out


def test_a_hang_put_off_by_the_cooldown_is_restarted_when_the_cooldown_ends(ranks) -> None:
    clock, analyzer = FakeClock(), ScriptedAnalyzer()
    service = RuntimeService(RuntimeServiceConfig(host="node1", port=0), clock, Sink(), analyzer=analyzer)
    restarted_at_the_start(service, clock, ranks)
    clock.advance(35.0)
    analyzer.next = [finding := hang(clock)]
    service.tick_once()
    assert queued(service) == [(finding.finding_id, "none")]  # within the 120 s cooldown
    clock.advance(90.0)
    service.tick_once()
    assert queued(service) == [(finding.finding_id, "restart")]
    service.stop()


def test_a_crash_after_a_failed_restart_is_still_a_finding(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink, restart_command=("false",))
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5)
    [record] = service.run_actions([ActionRequest(ActionKind.RESTART, JOB, "f-1", "test")])
    assert record.outcome == "failed"
    ranks[2].send_signal(signal.SIGKILL)
    ranks[2].wait()
    service.handle_exit(ProcessExit(ranks[2].pid, (JOB, 2), -9))
    assert [(f.kind, f.rank) for f in service.tick_once()] == [("dead_rank", 2)]
    service.stop()


def test_a_failed_restart_is_not_counted_as_a_restart(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink, restart_command=("false",))
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5)
    dead = Finding(
        clock.time(),
        "f-1",
        FindingKind.DEAD_RANK,
        Severity.CRITICAL,
        f"job/{JOB}/rank/0",
        "dead",
        job_id=JOB,
        rank=0,
    )
    service.run_actions(service.planner(dead, service.ranks.job(JOB)))
    assert service.planner.state(JOB).restarts == ()  # type: ignore[attr-defined]
    service.stop()


def test_a_checkpoint_timeout_is_written_into_the_restart_record(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink, checkpoint_timeout_seconds=30.0)
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5, checkpoint_step=4)
    _, restart = service.run_actions(
        [
            ActionRequest(ActionKind.CHECKPOINT, JOB, "f-9", "slow"),
            ActionRequest(ActionKind.RESTART, JOB, "f-9", "slow"),
        ],
    )
    assert "checkpoint did not complete within 30 s: restarted from checkpoint step 4" in restart.detail
    service.stop()


def test_the_stop_record_says_when_the_ranks_receive_the_stop(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    report(service, clock, 0, ranks[0].pid, step=3)
    [record] = service.run_actions([ActionRequest(ActionKind.STOP_CRASH_LOOP, JOB, "f-s", "crash loop")])
    assert "next step boundary" in record.detail
    service.stop()


def test_the_stop_record_warns_that_a_restart_command_has_no_stop_counterpart(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink, restart_command=("scontrol", "requeue", "{job}"))
    report(service, clock, 0, ranks[0].pid, step=3)
    [record] = service.run_actions([ActionRequest(ActionKind.STOP_CRASH_LOOP, JOB, "f-s", "crash loop")])
    assert "runtime.stop_command is not: the scheduler may restart" in record.detail
    service.stop()


def test_the_policy_settings_of_the_config_section_reach_the_policy() -> None:
    rt = RuntimeConfig(
        port=0, cooldown_seconds=30.0, cordon_stragglers=True, cordon_command=["kubectl", "cordon", "{host}"]
    )  # port 0: another agent on this machine may hold the default port
    service = RuntimeService(runtime_config_from(Config(runtime=rt)), FakeClock(), Sink())
    policy = service.planner.policy_config  # type: ignore[attr-defined]
    assert (policy.cooldown_seconds, policy.cordon_stragglers, policy.cordon_command_configured) == (
        30.0,
        True,
        True,
    )
    service.stop()


def test_a_multi_node_job_is_not_hung_for_ranks_that_report_to_other_hosts(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    for _ in range(120):  # two minutes of this host's ranks 4..7 of a 2 x 4 job, stepping every second
        for local, p in enumerate(ranks):
            body = report_body(
                rank=4 + local,
                local_rank=local,
                world_size=8,
                local_world_size=4,
                pid=p.pid,
                step=int(clock.time()),
            )
            service.handle_report(root_report(body, clock.time()))
        assert service.tick_once() == []
        clock.advance(1.0)
    service.stop()


def test_flight_recorder_dumps_feed_hang_localisation_while_one_job_runs(ranks, tmp_path) -> None:
    import shutil
    from pathlib import Path

    dump = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "nccl_trace_rank_0"
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink, flight_recorder_dir=str(tmp_path))
    report(service, clock, 0, ranks[0].pid, step=5)
    shutil.copy(dump, tmp_path / "nccl_trace_rank_0")
    service.tick_once()  # queues the dump: a child reads it off the tick
    assert service.wait_for_dumps(60)
    service.tick_once()  # picks up what it read
    from_dumps = [c for c in sink.of(CollectiveProgress) if c.source == "flight_recorder"]
    assert from_dumps and {(c.job_id, c.rank) for c in from_dumps} == {(JOB, 0)}
    service.stop()


def test_a_pid_that_is_not_the_senders_is_neither_watched_nor_signalled(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    victim = ranks[0]  # a process the sender named but does not own (another user's, or another namespace's)
    report = parse_report(
        report_body(rank=0, local_rank=0, pid=victim.pid), "node1", clock.time(), owner_uid=0
    )
    service.handle_report(report)
    assert victim.pid not in service.watcher.watched()
    [record] = service.run_actions([ActionRequest(ActionKind.RESTART, JOB, "f-1", "test")])
    assert record.outcome != "succeeded"
    assert victim.poll() is None  # still running: nothing was signalled
    service.flush()
    assert len(sink.of(Heartbeat)) >= 1  # the report itself was kept as telemetry
    service.stop()


def test_a_checkpoint_asked_of_a_group_that_was_replaced_is_dropped_but_a_stop_is_kept(ranks) -> None:
    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    old, new = ranks[:2], ranks[2:]
    for r, p in enumerate(old):
        report(service, clock, r, p.pid, step=5)
    service.commands.push(JOB, [0, 1], "checkpoint")
    service.commands.push(JOB, [0, 1], "stop")
    report(service, clock, 0, new[0].pid, step=5)  # torchrun's next worker group starts reporting
    assert [c.kind for c in service.commands.pending(JOB, 1)] == ["stop"]
    service.stop()


def test_a_controller_command_runs_as_a_typed_request_and_the_ledger_names_the_command(ranks) -> None:
    from fleetguard.records.action_requests import ActionKind
    from fleetguard.shipping.agent_side import runtime_runner
    from fleetguard.shipping.commands import CommandKind, CommandOutcome, HostCommand

    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    for r, p in enumerate(ranks):
        report(service, clock, r, p.pid, step=5)
    run = runtime_runner(RuntimeSlot(service), "node1")
    outcome, detail = run(HostCommand("c-1", CommandKind.CHECKPOINT, JOB, "the controller asks"))
    assert outcome is CommandOutcome.DONE and "the controller asks" in detail
    [record] = sink.of(ActionRecord)
    assert (record.action, record.outcome, record.finding_id) == ("checkpoint", "requested", "controller:c-1")
    # no made-up finding stands in for the command: the command is the evidence
    assert not [f for f in sink.of(Finding) if f.kind == "controller_command"]
    assert (
        ActionRequest.for_command(ActionKind.RESTART, JOB, "c-2", "r", "node1").evidence_id
        == "controller:c-2"
    )


def test_a_controller_command_without_a_job_is_refused_before_it_reaches_the_runtime() -> None:
    from fleetguard.shipping.agent_side import runtime_runner
    from fleetguard.shipping.commands import CommandKind, CommandOutcome, HostCommand

    clock, sink = FakeClock(), Sink()
    service = make_service(clock, sink)
    run = runtime_runner(RuntimeSlot(service), "node1")
    outcome, detail = run(HostCommand("c-1", CommandKind.RESTART, None, "why"))
    assert outcome is CommandOutcome.REFUSED and "needs a job id" in detail
    assert sink.of(ActionRecord) == []
    outcome, _ = runtime_runner(RuntimeSlot(), "node1")(
        HostCommand("c-2", CommandKind.CHECKPOINT, JOB, "why")
    )
    assert outcome is CommandOutcome.REFUSED


def test_an_action_request_answers_a_finding_or_a_command_not_both() -> None:
    from fleetguard.records.action_requests import ActionKind

    with pytest.raises(ValueError, match="not both"):
        ActionRequest(ActionKind.RESTART, JOB, "f-1", "r", command_id="c-1")
    assert ActionRequest(ActionKind.RESTART, JOB, "f-1", "r").evidence_id == "f-1"
