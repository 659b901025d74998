"""A repair that failed is asked for again (policy.retry): only idempotent ones, after a doubling delay, while
its incident acts and the breaker is closed, a bounded number of times, the ledger saying which attempt."""

from __future__ import annotations

from diagnosis.engine import IncidentEngine
from diagnosis.incident import ActionEntry, ActionOutcome
from diagnosis.rules import Signals
from fleetguard.settings.policy_files import load_policy
from tests.diagnosis.records import T0, xid

DRAIN_ON_79 = {"xid": {"79": {"action": "drain"}}}


def _engine(**overrides: object) -> IncidentEngine:
    return IncidentEngine(load_policy(overrides={**DRAIN_ON_79, **overrides}))


def _requested(changes: list) -> list[ActionEntry]:  # type: ignore[type-arg]
    return [a for c in changes for a in c.actions if a.outcome is ActionOutcome.REQUESTED]


def _fail(eng: IncidentEngine, entry: ActionEntry, now: float) -> ActionEntry:
    (change,) = eng.action_finished(entry.action_id, ActionOutcome.FAILED, "scontrol: Unable to contact", now)
    return change.actions[0]


def test_a_failed_drain_is_asked_for_again_after_the_delay_and_the_ledger_says_so() -> None:
    eng = _engine()
    (first,) = _requested(eng.observe(Signals(events=[xid(79, T0)]), T0))
    failed = _fail(eng, first, T0 + 1)
    assert failed.detail == "scontrol: Unable to contact (tried again in 60 s)"
    assert _requested(eng.tick(T0 + 60)) == []  # not before the delay
    (retry,) = _requested(eng.tick(T0 + 61))
    assert retry.action_id != first.action_id and retry.action is first.action
    assert retry.detail == "retry 1 of 4: the last attempt failed: " + failed.detail
    (change,) = eng.action_finished(retry.action_id, ActionOutcome.SUCCEEDED, "slurm node n: DRAIN", T0 + 62)
    assert change.actions[0].detail == "attempt 2 of 5: slurm node n: DRAIN"
    assert _requested(eng.tick(T0 + 10_000)) == []  # done: nothing more


def test_the_delay_doubles_and_the_attempts_end_with_a_line_for_a_person() -> None:
    eng = _engine(retry={"attempts": 3, "first_delay_seconds": 10})
    (entry,) = _requested(eng.observe(Signals(events=[xid(79, T0)]), T0))
    now = T0
    details = []
    for delay in (10, 20):
        details.append(_fail(eng, entry, now).detail)
        assert _requested(eng.tick(now + delay - 1)) == []
        (entry,) = _requested(eng.tick(now + delay))
        now += delay
    last = _fail(eng, entry, now)
    assert details[0].endswith("(tried again in 10 s)") and details[1].endswith("(tried again in 20 s)")
    assert last.detail.startswith("attempt 3 of 3: ") and last.detail.endswith("a person must look)")
    assert _requested(eng.tick(now + 86400)) == []


def test_a_failed_reboot_is_not_retried_a_person_looks_first() -> None:
    eng = IncidentEngine(load_policy())  # the shipped policy reboots on XID 79
    (entry,) = _requested(eng.observe(Signals(events=[xid(79, T0)]), T0))
    assert entry.action.value == "reboot_node"
    assert _fail(eng, entry, T0 + 1).detail == "scontrol: Unable to contact"
    assert _requested(eng.tick(T0 + 3600)) == []


def test_no_retry_while_the_breaker_is_open_and_none_counted_against_it() -> None:
    eng = _engine(breaker={"max_host_fraction": 0.5, "min_hosts": 2, "repairs_per_hour": 100})
    eng.observe(Signals(events=[xid(43, T0, host=h) for h in ("a", "b", "c", "d")]), T0)  # 4 hosts
    (entry,) = _requested(eng.observe(Signals(events=[xid(79, T0 + 1, host="a")]), T0 + 1))
    _fail(eng, entry, T0 + 2)
    (retry,) = _requested(eng.tick(T0 + 62))
    _fail(eng, retry, T0 + 63)
    # retries are not counted again: one more host acted on is two of four, not past half
    assert _requested(eng.observe(Signals(events=[xid(79, T0 + 64, host="b")]), T0 + 64))
    assert not eng.breaker.tripped
    eng.observe(Signals(events=[xid(79, T0 + 65, host="c")]), T0 + 65)
    assert eng.breaker.tripped
    assert _requested(eng.tick(T0 + 10_000)) == []  # a's third attempt waits for the reset
    eng.reset_breaker(T0 + 10_001, process_backlog=False)
    assert [e.host for e in _requested(eng.tick(T0 + 10_002))] == ["a"]


def test_a_restarted_engine_counts_the_attempts_the_ledger_holds() -> None:
    eng = _engine(retry={"attempts": 2})
    (entry,) = _requested(eng.observe(Signals(events=[xid(79, T0)]), T0))
    first = _fail(eng, entry, T0 + 1)
    (retry,) = _requested(eng.tick(T0 + 61))
    ledger = [first, _fail(eng, retry, T0 + 62)]
    restarted = _engine(retry={"attempts": 2})
    restarted.restore(eng.incidents.values(), ledger, [])
    assert _requested(restarted.tick(T0 + 86400)) == []  # both attempts spent before the restart


def test_a_retry_a_restart_interrupted_keeps_its_count() -> None:
    eng = _engine(retry={"attempts": 2})
    (entry,) = _requested(eng.observe(Signals(events=[xid(79, T0)]), T0))
    first = _fail(eng, entry, T0 + 1)
    (retry,) = _requested(eng.tick(T0 + 61))  # requested, and the process stops before it is carried out
    restarted = _engine(retry={"attempts": 2})
    restarted.restore(eng.incidents.values(), [first, retry], [])
    (change,) = restarted.action_finished(retry.action_id, ActionOutcome.FAILED, "scontrol: down", T0 + 70)
    assert change.actions[0].detail == "attempt 2 of 2: scontrol: down (no more attempts: a person must look)"


def test_a_retry_is_not_counted_and_skipping_it_leaves_anothers_count_alone() -> None:
    """The breaker counted the first attempt only. A retry recorded skipped at the very instant another repair
    on its host was counted must not take that one's count (both are (time, host) in the breaker)."""
    eng = _engine(breaker={"max_host_fraction": 1.0, "repairs_per_hour": 10})
    (first,) = _requested(eng.observe(Signals(events=[xid(79, T0)]), T0))
    assert first.counted
    _fail(eng, first, T0 + 1)
    changes = eng.observe(Signals(events=[xid(79, T0 + 61, pci="0000:3b:00")]), T0 + 61)
    other, retry = sorted(_requested(changes), key=lambda a: a.detail.startswith("retry"))
    assert other.counted and not retry.counted and other.requested_at == retry.requested_at
    eng.action_finished(retry.action_id, ActionOutcome.SKIPPED, "no diagnosis.drain_command", T0 + 62)
    assert list(eng.breaker.state.repairs) == [T0, T0 + 61]
