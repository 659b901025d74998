"""Cross-host runtime analysis: one job over two hosts is watched whole; a hang names the host and rank."""

from __future__ import annotations

import json

from fleetguard.controller.fleet_runtime import MAX_JOBS_PER_HOST, FleetAction, FleetRuntime
from fleetguard.controller.hosts import HostState
from fleetguard.controller.validate import IngestBatch
from fleetguard.records.runtime import CollectiveProgress, Heartbeat
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


def _progress(t: float, host: str, rank: int, seq: int) -> CollectiveProgress:
    return CollectiveProgress(t, host, "job-7", rank, "world", seq, seq, seq)


def _runtime_batch(host: str, seq: int, records: list[object]) -> IngestBatch:
    ts = max(float(getattr(r, "ts", T0)) for r in records)
    return IngestBatch(host, "boot", seq, ts, 1.0, "t", columns_by_table(records))


def test_a_host_that_claims_a_rank_first_cannot_get_another_hosts_single_host_job_restarted() -> None:
    # Attack #1 of issue 16: evil ships a heartbeat for job-7 (rank 0 of 4) before node-a, whose job it is,
    # then freezes its rank's step and reports collective counters far past everyone's.
    fleet = Fleet()
    fleet.runtime.feed(
        _runtime_batch("evil", 1, [Heartbeat(T0 - 1, "evil", "job-7", 0, 0, 4, 66, step=0, section="step")])
    )
    fleet.runtime.step(T0 - 1)
    findings = []
    for i in range(240):
        t = T0 + i
        records: list[object] = []
        for r in range(4):
            records.append(Heartbeat(t, "node-a", "job-7", r, r, 4, 1000 + r, step=i, section="step"))
            records.append(_progress(t, "node-a", r, i))
        fleet.runtime.feed(_runtime_batch("node-a", i + 1, records))
        # in step with node-a for a minute, then frozen, with counters far past everyone's
        forged = [
            Heartbeat(t, "evil", "job-7", 0, 0, 4, 66, step=min(i, 60), section="step"),
            _progress(t, "evil", 0, i if i < 60 else 10**15),
        ]
        fleet.runtime.feed(_runtime_batch("evil", i + 2, forged))
        fleet.sent.update({"node-a": t, "evil": t})
        findings += fleet.runtime.step(t)
    assert fleet.actions == []
    assert findings == []  # node-a's healthy job is healthy; evil's records decided nothing
    assert fleet.runtime.foreign_records >= 2 * 240


def test_a_rank_claimed_by_two_hosts_withholds_the_fleet_restart_and_says_why() -> None:
    # A real two-host job (node-a: 0, 1; node-b: 2, 3) and a third host claiming rank 1: whose rank 1 is
    # cannot be told, so no host's records may decide a restart on another; the finding says so.
    fleet = Fleet()
    fleet.runtime.feed(
        _batch("evil", 1, [Heartbeat(T0, "evil", "job-7", 1, 1, 4, 66, step=0, section="step")])
    )
    findings = []
    for i in range(120):
        fleet.second(T0 + i, silent_rank=3 if i >= 60 else None)
        fleet.sent["evil"] = T0 + i
        findings += fleet.runtime.step(T0 + i)
    assert fleet.actions == []
    assert fleet.runtime.withheld_restarts == 1
    [localised] = [f for f in findings if f.kind == "hang_localised"]
    assert "claimed by more than one host" in json.loads(localised.evidence_json)["restart_withheld"]


def test_a_host_reporting_counters_far_ahead_of_its_peers_is_blamed_itself() -> None:
    # A corroborated two-host job where node-b reports rank 2's collectives orders of magnitude past the
    # others' (to make node-a's ranks look behind): those reports run ahead of time and are left out, so
    # rank 2 is the one behind and the restart goes to node-b, never to node-a.
    fleet = Fleet()
    findings = []
    for i in range(120):
        t = T0 + i
        for host, ranks in RANKS.items():
            records: list[object] = []
            for r in ranks:
                step = i if not (r == 2 and i >= 60) else 60
                records.append(Heartbeat(t, host, "job-7", r, r % 2, 4, 1000 + r, step=step, section="step"))
                seq = 10**15 if (r == 2 and i >= 60) else i
                records.append(_progress(t, host, r, seq))
            fleet.seq += 1
            fleet.runtime.feed(_runtime_batch(host, fleet.seq, records))
            fleet.sent[host] = t
        findings += fleet.runtime.step(t)
    [localised] = [f for f in findings if f.kind == "hang_localised"]
    evidence = json.loads(localised.evidence_json)
    assert evidence["suspect_ranks"] == [2]
    assert evidence["progress"]["2"][0] < 10**15
    assert [a.host for a in fleet.actions] == ["node-b"]
