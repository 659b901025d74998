"""Cross-host runtime analysis: one job over two hosts is watched whole; a hang names the host and rank."""

from __future__ import annotations

import json

from fleetguard.controller.fleet_runtime import MAX_JOBS_PER_HOST, FleetAction, FleetRuntime
from fleetguard.controller.hosts import HostState
from fleetguard.controller.validate import IngestBatch
from fleetguard.records.runtime import Heartbeat
from fleetguard.shipping.commands import CommandKind
from fleetguard.shipping.wire import columns_by_table

T0 = 1_795_000_000.0
RANKS = {"node-a": (0, 1), "node-b": (2, 3)}


def _batch(host: str, seq: int, heartbeats: list[Heartbeat]) -> IngestBatch:
    return IngestBatch(
        host, "boot", seq, heartbeats[-1].ts if heartbeats else T0, 1.0, "t", columns_by_table(heartbeats)
    )


def _state(host: str, last_sent: float) -> HostState:
    return HostState(host, "boot", T0, last_sent, last_sent, 1, 1.0, 1, 1, 8, "t")


class Fleet:
    def __init__(self) -> None:
        self.sent = {h: T0 for h in RANKS}
        self.actions: list[FleetAction] = []
        self.runtime = FleetRuntime(lambda: [_state(h, t) for h, t in self.sent.items()], self.actions.append)
        self.seq = 0

    def second(self, t: float, silent_rank: int | None = None, hosts: tuple[str, ...] = tuple(RANKS)) -> None:
        for host in hosts:
            ranks = RANKS[host]
            beats = [
                Heartbeat(t, host, "job-7", r, r % 2, 4, 1000 + r, step=int(t - T0), section="step")
                for r in ranks
                if r != silent_rank
            ]
            self.seq += 1
            self.runtime.feed(_batch(host, self.seq, beats))
            self.sent[host] = t


def test_a_silent_rank_on_one_host_is_localised_to_that_host_and_its_agent_is_asked_to_restart() -> None:
    fleet = Fleet()
    findings = []
    for i in range(60):
        fleet.second(T0 + i)
        findings += fleet.runtime.step(T0 + i)
    assert findings == []  # healthy: nothing, although each host ships its own half
    for i in range(60, 120):
        fleet.second(T0 + i, silent_rank=3)
        findings += fleet.runtime.step(T0 + i)
    kinds = {f.kind for f in findings}
    assert "hang_localised" in kinds or "hung_rank" in kinds
    hung = [f for f in findings if f.kind == "hung_rank"]
    assert {(f.rank, f.host) for f in hung} == {(3, "node-b")}
    assert all(f.finding_id.startswith("fleet:") for f in findings)
    localised = [f for f in findings if f.kind == "hang_localised"]
    assert len(localised) == 1
    assert json.loads(localised[0].evidence_json)["suspect_ranks"] == [3]
    assert fleet.actions == [FleetAction("node-b", CommandKind.RESTART, "job-7", fleet.actions[0].reason)]


def test_a_host_that_ships_late_does_not_make_its_ranks_look_hung() -> None:
    fleet = Fleet()
    findings = []
    for i in range(120):
        # after a minute node-b's batches stop arriving (a slow agent or network): its ranks' clock stops
        fleet.second(T0 + i, hosts=("node-a", "node-b") if i <= 60 else ("node-a",))
        findings += fleet.runtime.step(T0 + i)
    assert findings == []


def test_a_host_with_an_ancient_send_time_does_not_stop_other_jobs_clocks() -> None:
    # A compromised (or badly lagging) host runs a job of its own and reports a send time from year 2000:
    # only its own job's clock stops; job-7's hang on node-b is still found and acted on.
    fleet = Fleet()
    fleet.runtime.feed(
        _batch("evil", 1, [Heartbeat(T0, "evil", "evil-job", 0, 0, 1, 99, step=0, section="step")])
    )
    sent = fleet.sent
    findings = []
    for i in range(120):
        fleet.second(T0 + i, silent_rank=3 if i >= 60 else None)
        sent["evil"] = 946_684_800.0
        findings += fleet.runtime.step(T0 + i)
    assert {(f.rank, f.host) for f in findings if f.kind == "hung_rank"} == {(3, "node-b")}
    assert [a.host for a in fleet.actions] == ["node-b"]


def test_a_host_cannot_join_another_hosts_job_to_get_its_ranks_restarted() -> None:
    # job-7 runs on node-a alone (ranks 0-3): its own agent handles its hangs. A compromised host reports
    # heartbeats for the same job id and a rank of node-a's, to make the job look multi-host (so the
    # controller would queue restarts on node-a) and to take rank 1's blame.
    fleet = Fleet()
    solo = {"node-a": (0, 1, 2, 3)}
    findings = []
    for i in range(120):
        t = T0 + i
        beats = [
            Heartbeat(t, "node-a", "job-7", r, r, 4, 1000 + r, step=i, section="step")
            for r in solo["node-a"]
            if not (i >= 60 and r == 3)
        ]
        fleet.runtime.feed(_batch("node-a", i + 1, beats))
        forged = Heartbeat(t, "evil", "job-7", 1, 1, 4, 66, step=i, section="step")
        fleet.runtime.feed(_batch("evil", i + 1, [forged]))
        fleet.sent.update({"node-a": t, "evil": t})
        findings += fleet.runtime.step(t)
    assert fleet.actions == []  # a one-host job: the controller queues nothing, node-a's agent acts
    assert fleet.runtime.foreign_records == 120
    assert {f.host for f in findings} <= {"node-a"}


def test_one_host_inventing_job_ids_cannot_fill_the_job_table_for_everyone() -> None:
    fleet = Fleet()
    spam = [
        Heartbeat(T0, "evil", f"fake-{i}", 0, 0, 1, 66, step=0, section="step")
        for i in range(MAX_JOBS_PER_HOST + 50)
    ]
    fleet.runtime.feed(_batch("evil", 1, spam))
    fleet.runtime.step(T0)
    assert fleet.runtime.foreign_records == 50
    findings = []
    for i in range(120):
        fleet.second(T0 + i, silent_rank=3 if i >= 60 else None)
        fleet.sent["evil"] = T0 + i
        findings += fleet.runtime.step(T0 + i)
    assert [a.host for a in fleet.actions] == ["node-b"]  # the real job is still watched
