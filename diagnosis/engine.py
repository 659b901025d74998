"""The incident engine: observations in, incidents out. One incident per (host, component, fault), however
many lines the fault prints; opened once its thresholds are met, resolved when healthy (or cancelled, or by
an operator), closed later; escalated when it keeps coming back; every action passes the circuit breaker.

Pure and single-threaded: the caller passes `now` (a fake clock in tests, the simulated clock in replay) and
persists what `observe` / `tick` return. `restore` rebuilds the state from the store after a restart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from diagnosis.breaker import BreakerHeadroom, BreakerState, CircuitBreaker
from diagnosis.escalation import escalation_step, repair_did_not_hold, unheld_escalation
from diagnosis.incident import (
    ACTIVE_STATES,
    ActionEntry,
    ActionOutcome,
    ChangeKind,
    Incident,
    IncidentChange,
    IncidentState,
    Resolution,
    action_id,
    incident_id,
)
from diagnosis.model import ComponentKind, IncidentKey, Observation, RepairAction, Severity, worst
from diagnosis.pending import Pending
from diagnosis.policy import Policy
from diagnosis.rules import Rules, Signals
from diagnosis.rules_events import FINDING_FLEET_HOST

BREAKER_KEY = IncidentKey(FINDING_FLEET_HOST, ComponentKind.HOST, FINDING_FLEET_HOST, "breaker:tripped")
MAX_PENDING = 200_000  # keys seen but below their threshold; the oldest go first beyond this
MAX_EVIDENCE_OBSERVATIONS = 20
_READ_RULES = ("gpu.", "counters.")  # faults read from GPU samples or port counters


@dataclass(slots=True)
class _Round:
    """Changes of one call, one entry per incident."""

    kinds: dict[str, list[ChangeKind]] = field(default_factory=dict)
    evidence: dict[str, tuple[Observation, ...]] = field(default_factory=dict)
    actions: dict[str, list[ActionEntry]] = field(default_factory=dict)

    def mark(self, incident: str, kind: ChangeKind) -> None:
        kinds = self.kinds.setdefault(incident, [])
        if kind not in kinds:
            kinds.append(kind)

    def action(self, entry: ActionEntry) -> None:
        self.actions.setdefault(entry.incident_id, []).append(entry)
        self.kinds.setdefault(entry.incident_id, [])


class IncidentEngine:
    def __init__(self, policy: Policy, breaker: BreakerState | None = None) -> None:
        self.policy = policy
        self.rules = Rules(policy)
        self.breaker = CircuitBreaker(policy.breaker, breaker)
        self.incidents: dict[IncidentKey, Incident] = {}  # open, acting or resolved (not closed)
        self.by_id: dict[str, IncidentKey] = {}
        self.actions: dict[str, ActionEntry] = {}  # latest ledger line per incident
        self.history: dict[IncidentKey, list[float]] = {}  # open / reopen times within the escalation window
        # Incident key text -> when a repair of that fault last returned the host to service (the store's
        # repair outcomes, refreshed each round): the fault back within the window escalates.
        self.returned: dict[str, float] = {}
        self.hosts: dict[str, float] = {}  # host -> when last heard: the breaker's fleet (`fleet_size`)
        self._pending: dict[IncidentKey, Pending] = {}
        self._cancels: dict[
            str, tuple[str, ...]
        ] = {}  # policy.cancels, cached: called for every healthy sample
        # Damping: incident id -> when its fault was cleared; resolved once clear for the flap window.
        self._clearing: dict[str, float] = {}
        # Incident id -> attempts of its latest repair that failed in a row (policy.retry).
        self._failed: dict[str, int] = {}
        # Components with a pending fault or an incident (a superset, rebuilt each round): a healthy
        # observation of any other component changes nothing, and nearly every observation is one.
        self._busy: set[tuple[str, ComponentKind, str]] = set()
        # What changed in the two above since `take_soft_changes`: the caller stores it with the round.
        self._dirty_pending: set[IncidentKey] = set()
        self._dirty_clearing: set[str] = set()

    # ---- state from the store -------------------------------------------------------------------------

    def restore(
        self,
        incidents: Iterable[Incident],
        actions: Iterable[ActionEntry],
        history: Iterable[tuple[IncidentKey, float]],
    ) -> None:
        """Take back the incidents that were not closed, their latest actions and the recent open times."""
        for incident in incidents:
            if incident.state is not IncidentState.CLOSED:
                self.incidents[incident.key] = incident
                self.by_id[incident.incident_id] = incident.key
                if incident.key != BREAKER_KEY:  # "fleet" is no host: counted, it would dilute the breaker
                    self.heard((incident.key.host,), incident.last_seen)
        for entry in actions:  # in the order they were requested
            if entry.incident_id in self.by_id:
                self.actions[entry.incident_id] = entry
                # Attempts that failed in a row; one still requested (a retry the restart interrupted) keeps
                # the count, so a restart never grants a failing repair more attempts.
                count = self._failed.get(entry.incident_id, 0)
                if entry.outcome is ActionOutcome.FAILED:
                    self._failed[entry.incident_id] = count + 1
                elif entry.outcome is not ActionOutcome.REQUESTED:
                    self._failed[entry.incident_id] = 0
        for key, ts in history:
            self.history.setdefault(key, []).append(ts)

    def restore_soft(
        self, pending: Iterable[tuple[IncidentKey, Pending]], clearing: Iterable[tuple[str, float]]
    ) -> None:
        """Take back the faults below their thresholds and the incidents clearing (`take_soft_changes`)."""
        self._pending.update(pending)
        self._clearing.update(clearing)

    def take_soft_changes(
        self,
    ) -> tuple[dict[IncidentKey, Pending | None], dict[str, float | None]]:
        """Pending faults and clearing incidents changed since the last call (None: gone), to be stored."""
        pending = {k: self._pending.get(k) for k in self._dirty_pending}
        clearing = {i: self._clearing.get(i) for i in self._dirty_clearing}
        self._dirty_pending.clear()
        self._dirty_clearing.clear()
        return pending, clearing

    # ---- the two entry points -------------------------------------------------------------------------

    def observe(self, signals: Signals, now: float, *, tick: bool = True) -> list[IncidentChange]:
        """Apply a round of records, then (with `tick`) the passage of time up to `now`."""
        busy = {(k.host, k.component_kind, k.component_id) for k in (*self._pending, *self.incidents)}
        observations = self.rules.observations(signals, busy)
        self.heard(self.rules.heard, now)
        self.rules.heard.clear()
        return self.observe_many(observations, now, tick=tick)

    def observe_many(
        self, observations: Iterable[Observation], now: float, *, tick: bool = True
    ) -> list[IncidentChange]:
        round_ = _Round()
        self._busy = {(k.host, k.component_kind, k.component_id) for k in (*self._pending, *self.incidents)}
        observations = list(observations)
        # Every host heard in this round is in the fleet before any repair of the round is weighed: the
        # breaker's fraction must not depend on the order a round's records come in.
        self.heard({o.key.host for o in observations if o.key != BREAKER_KEY}, now)
        for obs in observations:
            self._observe(obs, now, round_)
        if tick:
            self._tick(now, round_)
        return self._changes(round_)

    def tick(self, now: float) -> list[IncidentChange]:
        round_ = _Round()
        self._tick(now, round_)
        return self._changes(round_)

    # ---- operator and executor ------------------------------------------------------------------------

    def resolve(self, incident: str, now: float) -> list[IncidentChange]:
        """An operator says it is fixed."""
        round_ = _Round()
        key = self.by_id.get(incident)
        current = self.incidents.get(key) if key is not None else None
        if current is not None and current.state in ACTIVE_STATES:
            self._resolve(current, now, Resolution.OPERATOR, round_)
        return self._changes(round_)

    def action_finished(
        self, action: str, outcome: ActionOutcome, detail: str, now: float
    ) -> list[IncidentChange]:
        round_ = _Round()
        for entry in list(self.actions.values()):
            if entry.action_id == action and entry.finished_at is None:
                done = replace(
                    entry, outcome=outcome, finished_at=now, detail=self._finished(entry, outcome, detail)
                )
                self.actions[entry.incident_id] = done
                round_.action(done)
        return self._changes(round_)

    def _finished(self, entry: ActionEntry, outcome: ActionOutcome, detail: str) -> str:
        """Count the attempt; the ledger's detail, saying which attempt it was where there were several."""
        if outcome is ActionOutcome.SKIPPED and entry.counted:
            # It never ran. Only a counted request is uncounted: a retry skipped at the instant another
            # repair on its host was counted must not take that one's count away.
            self.breaker.forget(entry.host, entry.action, entry.requested_at)
        before = self._failed.get(entry.incident_id, 0)
        retry = self.policy.retry
        retried = entry.action in retry.actions and retry.attempts > 1
        prefix = f"attempt {before + 1} of {retry.attempts}: " if retried and before else ""
        if outcome is not ActionOutcome.FAILED:
            self._failed.pop(entry.incident_id, None)
            return (prefix + detail)[:500]
        self._failed[entry.incident_id] = before + 1
        if not retried:
            return (prefix + detail)[:500]
        if before + 1 >= retry.attempts:
            suffix = " (no more attempts: a person must look)"
        else:
            suffix = f" (tried again in {retry.delay_seconds(before + 1):.0f} s)"
        return (prefix + detail)[: 500 - len(suffix)] + suffix

    def reset_breaker(self, now: float, process_backlog: bool) -> list[IncidentChange]:
        """Close the breaker; with `process_backlog`, request the actions it held back."""
        round_ = _Round()
        self.breaker.reset(now)
        tripped = self.incidents.get(BREAKER_KEY)
        if tripped is not None and tripped.state in ACTIVE_STATES:
            self._resolve(tripped, now, Resolution.OPERATOR, round_)
        if process_backlog:
            for entry in list(self.actions.values()):
                incident = self._incident_by_id(entry.incident_id)
                if (
                    entry.outcome is ActionOutcome.HELD
                    and incident is not None
                    and incident.state is IncidentState.OPEN
                ):
                    self._request(incident, now, round_, released=True)
        return self._changes(round_)

    def active(self) -> list[Incident]:
        return [i for i in self.incidents.values() if i.state in ACTIVE_STATES]

    def heard(self, hosts: Iterable[str], at: float) -> None:
        """These hosts were heard from at `at` (a later time never moves back). The name fleet-wide
        incidents are filed under is no host's: counted, it would make the breaker's fleet one larger."""
        for host in hosts:
            if host != FINDING_FLEET_HOST and self.hosts.get(host, -math.inf) < at:
                self.hosts[host] = at

    def fleet_size(self, now: float) -> int:
        """The hosts heard within the breaker's `fleet_seconds`: the fleet its fractions are of. Hosts heard
        before that are forgotten here, so the map holds no more than the fleet of the last day."""
        since = now - self.policy.breaker.fleet_seconds
        gone = [h for h, at in self.hosts.items() if at < since]
        for host in gone:
            del self.hosts[host]
        return len(self.hosts)

    def breaker_headroom(self, now: float) -> BreakerHeadroom:
        """How near the breaker and the rate limit are, weighed as the next repair would be."""
        return self.breaker.headroom(now, self.fleet_size(now))

    # ---- internals ------------------------------------------------------------------------------------

    def _incident_by_id(self, ident: str) -> Incident | None:
        key = self.by_id.get(ident)
        return self.incidents.get(key) if key is not None else None

    def _observe(self, obs: Observation, now: float, round_: _Round) -> None:
        self.heard((obs.key.host,), now)
        if obs.healthy:
            self._healthy(obs, round_)
            return
        current = self.incidents.get(obs.key)
        if current is not None and current.state in ACTIVE_STATES:
            self._update(current, obs, round_)
        elif current is not None:
            self._reopen(current, obs, now, round_)
        else:
            self._pend(obs, now, round_)

    def _healthy(self, obs: Observation, round_: _Round) -> None:
        if (obs.key.host, obs.key.component_kind, obs.key.component_id) not in self._busy:
            return
        cancels = self._cancels.get(obs.key.fault)
        if cancels is None:
            cancels = self._cancels[obs.key.fault] = self.policy.cancels(obs.key.fault)
        for fault in cancels:
            key = IncidentKey(obs.key.host, obs.key.component_kind, obs.key.component_id, fault)
            if self._pending.pop(key, None) is not None:
                self._dirty_pending.add(key)
            current = self.incidents.get(key)
            if current is not None and current.state in ACTIVE_STATES and obs.ts >= current.last_seen:
                if self.policy.lifecycle.flap_window_seconds > 0:
                    if current.incident_id not in self._clearing:
                        self._clearing[current.incident_id] = obs.ts
                        self._dirty_clearing.add(current.incident_id)
                else:
                    self._resolve(current, obs.ts, Resolution.CANCELLED, round_)

    def _update(self, current: Incident, obs: Observation, round_: _Round) -> None:
        severity = worst(current.severity, obs.severity)
        # Back while it was clearing: a flap of this incident, not a new page.
        flapped = self._clearing.pop(current.incident_id, None) is not None
        if flapped:
            self._dirty_clearing.add(current.incident_id)
        updated = replace(
            current,
            last_seen=max(current.last_seen, obs.ts),
            occurrences=current.occurrences + obs.count,
            severity=severity,
            flaps=current.flaps + int(flapped),
        )
        self._put(updated)
        every = self.policy.lifecycle.update_alert_every
        crossed = every and current.occurrences // every != updated.occurrences // every
        round_.mark(
            current.incident_id,
            ChangeKind.ESCALATED if severity is not current.severity else ChangeKind.UPDATED,
        )
        if crossed:
            round_.mark(current.incident_id, ChangeKind.ESCALATED)

    def _pend(self, obs: Observation, now: float, round_: _Round) -> None:
        pending = self._pending.get(obs.key)
        if pending is None:
            if len(self._pending) >= MAX_PENDING:
                oldest = next(iter(self._pending))
                del self._pending[oldest]
                self._dirty_pending.add(oldest)
            pending = self._pending[obs.key] = Pending(first_seen=obs.ts)
            self._busy.add((obs.key.host, obs.key.component_kind, obs.key.component_id))
        self._dirty_pending.add(obs.key)
        window = obs.window_seconds
        pending.bursts = [b for b in pending.bursts if window <= 0 or obs.ts - b[1] <= window]
        if pending.bursts and obs.ts - pending.bursts[-1][1] <= self.policy.burst_seconds:
            pending.bursts[-1] = (pending.bursts[-1][0], obs.ts)
        else:
            pending.bursts.append((obs.ts, obs.ts))
        pending.count += obs.count
        if len(pending.seen) < MAX_EVIDENCE_OBSERVATIONS:
            pending.seen.append(obs)
        needed = max(obs.min_count, 2) if obs.needs_company else obs.min_count
        company = obs.needs_company and self._has_company(obs.key)
        storm = obs.storm_count > 0 and pending.count >= obs.storm_count
        if len(pending.bursts) >= needed or company or storm:
            del self._pending[obs.key]
            self._open(obs, pending, now, round_)

    def _has_company(self, key: IncidentKey) -> bool:
        return any(
            i.state in ACTIVE_STATES
            and i.key.host == key.host
            and i.key.component == key.component
            and i.key != key
            for i in self.incidents.values()
        )

    def _open(self, obs: Observation, pending: Pending, now: float, round_: _Round) -> None:
        times = self._recurrence(obs.key, obs.ts)
        unheld = self._repair_did_not_hold(obs)
        step, action, severity = unheld_escalation(
            obs.action,
            escalation_step(times, obs.ts, self.policy.escalation),
            unheld,
            max((o.severity for o in pending.seen), key=lambda s: s.rank, default=obs.severity),
            self.policy.escalation,
        )
        first = pending.bursts[0][0] if pending.bursts else obs.ts
        incident = Incident(
            incident_id=incident_id(obs.key, obs.ts),
            key=obs.key,
            state=IncidentState.OPEN,
            severity=severity,
            action=action,
            rule=obs.rule,
            summary=_unheld_summary(obs.message, unheld),
            first_seen=min(first, pending.first_seen),
            last_seen=obs.ts,
            occurrences=pending.count,
            opened_at=obs.ts,
            escalation_step=step,
            sticky_seconds=obs.sticky_seconds,
        )
        self._put(incident)
        round_.mark(incident.incident_id, ChangeKind.OPENED)
        if unheld:
            round_.mark(incident.incident_id, ChangeKind.ESCALATED)
        round_.evidence[incident.incident_id] = tuple(pending.seen)
        self._request(incident, obs.ts, round_)

    def _reopen(self, current: Incident, obs: Observation, now: float, round_: _Round) -> None:
        times = self._recurrence(obs.key, obs.ts)
        unheld = self._repair_did_not_hold(obs)
        step, action, severity = unheld_escalation(
            _base_action(current, obs),
            escalation_step(times, obs.ts, self.policy.escalation),
            unheld,
            worst(current.severity, obs.severity),
            self.policy.escalation,
        )
        base = replace(current, action=current.action)
        reopened = replace(
            base,
            state=IncidentState.OPEN,
            severity=severity,
            action=action,
            last_seen=obs.ts,
            occurrences=current.occurrences + obs.count,
            resolved_at=None,
            resolution=Resolution.NONE,
            returns=current.returns + 1,
            escalation_step=step,
            summary=_unheld_summary(obs.message, unheld),
        )
        self._put(reopened)
        round_.mark(current.incident_id, ChangeKind.REOPENED)
        if step > current.escalation_step or unheld:
            round_.mark(current.incident_id, ChangeKind.ESCALATED)
        round_.evidence[current.incident_id] = (obs,)
        last = self.actions.get(current.incident_id)
        if last is not None and not last.fault_returned:
            marked = replace(last, fault_returned=True)
            self.actions[current.incident_id] = marked
            round_.action(marked)
        self._request(reopened, obs.ts, round_)

    def _request(self, incident: Incident, now: float, round_: _Round, released: bool = False) -> None:
        """Ask for the incident's action through the breaker (`released`: held, and let go by an operator's
        reset with the backlog)."""
        if not incident.action.acts or incident.key == BREAKER_KEY:
            return
        self._failed.pop(incident.incident_id, None)  # a new request, not a retry: its attempts start afresh
        if released:
            permit = self.breaker.permit_backlog(incident.key.host, incident.action, now)
        else:
            permit = self.breaker.permit(incident.key.host, incident.action, now, self.fleet_size(now))
        entry = ActionEntry(
            action_id=action_id(incident.incident_id, now, incident.action),
            incident_id=incident.incident_id,
            host=incident.key.host,
            action=incident.action,
            rule=incident.rule,
            requested_at=now,
            outcome=permit.outcome,
            detail=permit.reason,
            counted=permit.counted,
        )
        self.actions[incident.incident_id] = entry
        round_.action(entry)
        if permit.outcome is ActionOutcome.REQUESTED:
            self._put(replace(incident, state=IncidentState.ACTING))
        if permit.tripped_now:
            self._trip(permit.reason, now, round_)

    def _trip(self, reason: str, now: float, round_: _Round) -> None:
        obs = Observation(now, BREAKER_KEY, Severity.CRITICAL, RepairAction.NONE, "breaker", reason)
        current = self.incidents.get(BREAKER_KEY)
        if current is not None and current.state not in ACTIVE_STATES:
            self._reopen(current, obs, now, round_)
        elif current is None:
            self._open(obs, Pending(first_seen=now, count=1, seen=[obs]), now, round_)

    def _resolve(self, current: Incident, now: float, how: Resolution, round_: _Round) -> None:
        if self._clearing.pop(current.incident_id, None) is not None:
            self._dirty_clearing.add(current.incident_id)
        self._put(replace(current, state=IncidentState.RESOLVED, resolved_at=now, resolution=how))
        round_.mark(current.incident_id, ChangeKind.RESOLVED)

    def _tick(self, now: float, round_: _Round) -> None:
        life = self.policy.lifecycle
        for incident in list(self.incidents.values()):
            if incident.key == BREAKER_KEY:
                continue
            self._retry_deferred(incident, now, round_)
            self._retry_failed(incident, now, round_)
            if incident.state in ACTIVE_STATES:
                self._resolve_if_cleared(incident, now, round_)
            if self.incidents[incident.key].state in ACTIVE_STATES:
                self._resolve_if_healthy(self.incidents[incident.key], now, round_)
            elif (
                incident.state is IncidentState.RESOLVED
                and incident.resolved_at is not None
                and now - incident.resolved_at >= life.close_after_seconds
            ):
                round_.mark(incident.incident_id, ChangeKind.CLOSED)
                self._put(replace(incident, state=IncidentState.CLOSED, closed_at=now))
        self._forget_closed()
        horizon = max(self.policy.escalation.window_seconds, 1.0)
        if len(self.history) > MAX_PENDING:
            self.history = {k: v for k, v in self.history.items() if v and now - v[-1] <= horizon}

    def _resolve_if_cleared(self, incident: Incident, now: float, round_: _Round) -> None:
        """Cleared and stayed clear for the flap window: resolved as of when it cleared."""
        cleared = self._clearing.get(incident.incident_id)
        if cleared is not None and now - cleared >= self.policy.lifecycle.flap_window_seconds:
            self._resolve(incident, cleared, Resolution.CANCELLED, round_)

    def _resolve_if_healthy(self, incident: Incident, now: float, round_: _Round) -> None:
        """Not seen for the quiet time; for a fault read from samples or counters, also read again since."""
        quiet = max(self.policy.lifecycle.resolve_healthy_seconds, incident.sticky_seconds)
        at = incident.last_seen + quiet
        if now < at:
            return
        if incident.rule.startswith(_READ_RULES):
            read = self.rules.read_since(incident.key.host, incident.key.component, incident.last_seen)
            if read is None:
                return  # no reading since: not known to be healthy (a lost GPU, a sparse history)
            at = max(at, read)
        self._resolve(incident, at, Resolution.HEALTHY, round_)

    def _retry_deferred(self, incident: Incident, now: float, round_: _Round) -> None:
        """A repair the rate limit deferred is asked for again once the limit allows it."""
        last = self.actions.get(incident.incident_id)
        if (
            incident.state is IncidentState.OPEN
            and last is not None
            and last.outcome is ActionOutcome.DEFERRED
            and not self.breaker.tripped
            and not self.breaker.rate_limited(now, self.fleet_size(now))
        ):
            self._request(incident, now, round_)

    def _retry_failed(self, incident: Incident, now: float, round_: _Round) -> None:
        """A repair that failed (Slurm down) is asked for again after the policy's delay, while the incident
        still acts and the breaker is closed, up to the policy's attempts; the ledger says which attempt."""
        last = self.actions.get(incident.incident_id)
        retry = self.policy.retry
        if (
            incident.state is not IncidentState.ACTING
            or last is None
            or last.outcome is not ActionOutcome.FAILED
            or last.finished_at is None
            or last.action not in retry.actions
        ):
            return
        failed = self._failed.get(incident.incident_id, 1)
        if failed >= retry.attempts or now < last.finished_at + retry.delay_seconds(failed):
            return
        if self.breaker.permit_retry(last.action).outcome is not ActionOutcome.REQUESTED:
            return  # the breaker opened meanwhile: nothing is asked for until an operator resets it
        entry = replace(
            last,
            action_id=action_id(incident.incident_id, now, last.action),
            requested_at=now,
            outcome=ActionOutcome.REQUESTED,
            finished_at=None,
            detail=f"retry {failed} of {retry.attempts - 1}: the last attempt failed: {last.detail}"[:500],
            fault_returned=False,
            counted=False,  # a retry is weighed by its first attempt's count (`permit_retry`)
        )
        self.actions[incident.incident_id] = entry
        round_.action(entry)

    def _forget_closed(self) -> None:
        closed = [k for k, i in self.incidents.items() if i.state is IncidentState.CLOSED]
        self._closed_snapshots = {self.incidents[k].incident_id: self.incidents[k] for k in closed}
        for key in closed:
            incident = self.incidents.pop(key)
            self.by_id.pop(incident.incident_id, None)
            self.actions.pop(incident.incident_id, None)
            self._failed.pop(incident.incident_id, None)

    def _repair_did_not_hold(self, obs: Observation) -> bool:
        return repair_did_not_hold(self.returned.get(obs.key.text()), obs.ts, self.policy.escalation)

    def _recurrence(self, key: IncidentKey, ts: float) -> list[float]:
        window = self.policy.escalation.window_seconds
        times = [t for t in self.history.get(key, []) if ts - t <= window]
        times.append(ts)
        self.history[key] = times
        return times

    def _put(self, incident: Incident) -> None:
        self._busy.add((incident.key.host, incident.key.component_kind, incident.key.component_id))
        self.incidents[incident.key] = incident
        self.by_id[incident.incident_id] = incident.key

    def _changes(self, round_: _Round) -> list[IncidentChange]:
        closed = getattr(self, "_closed_snapshots", {})
        out = []
        for ident, kinds in round_.kinds.items():
            incident = self._incident_by_id(ident) or closed.get(ident)
            if incident is None:
                continue
            out.append(
                IncidentChange(
                    incident=incident,
                    kinds=tuple(kinds),
                    evidence=round_.evidence.get(ident, ()),
                    actions=tuple(round_.actions.get(ident, ())),
                )
            )
        self._closed_snapshots = {}
        return out


def _unheld_summary(message: str, unheld: bool) -> str:
    return f"{message} (back after a repair that did not hold)" if unheld else message


def _base_action(current: Incident, obs: Observation) -> RepairAction:
    """The rung the ladder starts from: the rule's own action, not the one a past escalation chose."""
    return obs.action if obs.action.acts else current.action
