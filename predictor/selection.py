"""Causal choice of predictions: at each instance time, only the scores known at that time decide.

A prediction is one device picked once in a scoring period. The instances of one time step are ranked
among themselves (never against later steps), and a device already picked in the period is passed over.
With K per period and a period of several steps, the budget is spent as the period runs: after step j of n,
at most ceil(K * (j + 1) / n) picks in all, so a pick never waits to see a better candidate later in the
period. With period = step (the default) this is simply the K best devices of each step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
ObjArray = npt.NDArray[np.object_]
# (period index, step index within the period, picks already made in the period) -> picks allowed now
Quota = Callable[[int, int, int], int]


def _walk(
    period: IntArray,
    ts: FloatArray,
    device_id: ObjArray,
    score: FloatArray,
    step_of: IntArray,
    quota: Quota,
) -> IntArray:
    """Visit the time steps in order; at each, pick the best not-yet-picked devices the quota allows."""
    if len(score) == 0:
        return np.zeros(0, dtype=np.int64)
    # NaN scores (an instance a model could not score) rank last.
    s = np.where(np.isnan(score), -np.inf, score)
    order = np.lexsort((device_id.astype(str), -s, ts))
    ts_sorted = ts[order]
    bounds = np.flatnonzero(np.diff(ts_sorted)) + 1
    picked: dict[int, set[object]] = {}
    used: dict[int, int] = {}
    out: list[int] = []
    for group in np.split(order, bounds):
        p = int(period[group[0]])
        want = quota(p, int(step_of[group[0]]), used.get(p, 0))
        if want <= 0:
            continue
        seen = picked.setdefault(p, set())
        for i in group.tolist():
            if want <= 0:
                break
            d = device_id[i]
            if d in seen:
                continue
            seen.add(d)
            out.append(i)
            want -= 1
            used[p] = used.get(p, 0) + 1
    return np.sort(np.asarray(out, dtype=np.int64))


def step_in_period(
    ts: FloatArray, period_starts: FloatArray, period: IntArray, step_seconds: float
) -> IntArray:
    """Index of each instance's time step within its period (0 = the first step)."""
    if len(ts) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.floor((ts - period_starts[period]) / step_seconds + 1e-9).astype(np.int64)


@dataclass(frozen=True)
class SelectionRule:
    """Which scored devices become predictions: at most K per period fleet-wide, the budget spent as the
    period runs (by step j of n, at most ceil(K (j + 1) / n) in all), a device at most once per period, and
    (when `min_risk` > 0) only devices whose calibrated risk reaches `min_risk`, a level fixed on the
    training window's out-of-fold scores for `target_precision`. The backtest and live scoring apply it
    through the same `pick_step`."""

    k: int
    period_seconds: float
    step_seconds: float
    min_risk: float = 0.0
    target_precision: float | None = None

    @property
    def n_steps(self) -> int:
        return max(1, math.ceil(self.period_seconds / self.step_seconds - 1e-9))

    def quota(self, step: int, used: int) -> int:
        """Picks allowed at step `step` of a period when `used` were made earlier in it."""
        return math.ceil(self.k * (min(step, self.n_steps - 1) + 1) / self.n_steps) - used

    def place(self, ts: float) -> tuple[int, int]:
        """(period index, step index within it) of an instance at `ts`, periods aligned to the epoch."""
        period = math.floor(ts / self.period_seconds + 1e-9)
        step = math.floor((ts - period * self.period_seconds) / self.step_seconds + 1e-9)
        return period, step

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "k": self.k,
            "period_seconds": self.period_seconds,
            "step_seconds": self.step_seconds,
            "min_risk": self.min_risk,
            "target_precision": self.target_precision,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SelectionRule:
        rule = cls(
            k=int(d["k"]),
            period_seconds=float(d["period_seconds"]),
            step_seconds=float(d["step_seconds"]),
            min_risk=float(d.get("min_risk", 0.0)),
            target_precision=None if d.get("target_precision") is None else float(d["target_precision"]),
        )
        if rule.k < 0 or not rule.period_seconds > 0 or not rule.step_seconds > 0:
            raise ValueError("selection rule: k >= 0, period_seconds > 0 and step_seconds > 0 needed")
        if not 0.0 <= rule.min_risk <= 1.0:
            raise ValueError("selection rule: min_risk must be within 0..1")
        return rule


@dataclass
class PeriodPicks:
    """What a period has picked so far: the state `pick_step` carries from one step to the next."""

    period: int | None = None
    picked: set[str] = field(default_factory=set)
    used: int = 0


def pick_step(
    rule: SelectionRule,
    state: PeriodPicks,
    period: int,
    step: int,
    device_id: ObjArray,
    score: FloatArray,
    eligible: npt.NDArray[np.bool_] | None = None,
) -> IntArray:
    """The picks among one time step's instances (indices into its arrays, best first); updates `state`.
    A NaN score ranks last; a device not `eligible` (below the rule's risk floor) is never picked."""
    if state.period != period:
        state.period, state.picked, state.used = period, set(), 0
    want = rule.quota(step, state.used)
    if want <= 0 or len(score) == 0:
        return np.zeros(0, dtype=np.int64)
    s = np.where(np.isnan(score), -np.inf, score)
    ids = device_id.astype(str)
    out: list[int] = []
    for i in np.lexsort((ids, -s)).tolist():
        if want <= 0:
            break
        if ids[i] in state.picked or (eligible is not None and not eligible[i]):
            continue
        state.picked.add(ids[i])
        out.append(i)
        want -= 1
    state.used += len(out)
    return np.asarray(out, dtype=np.int64)


class StepSelector:
    """The selection rule applied live, one scored step at a time: the step's period and place in it from
    its time, the period's picks carried between calls, and a step scored twice picked from once."""

    def __init__(self, rule: SelectionRule) -> None:
        self.rule = rule
        self._state = PeriodPicks()
        self._last_ts: float | None = None

    def pick(
        self,
        ts: float,
        device_id: ObjArray,
        score: FloatArray,
        eligible: npt.NDArray[np.bool_] | None = None,
    ) -> IntArray:
        if self._last_ts is not None and ts <= self._last_ts:
            return np.zeros(0, dtype=np.int64)
        self._last_ts = ts
        period, step = self.rule.place(ts)
        return pick_step(self.rule, self._state, period, step, device_id, score, eligible)


def select_causal_k(
    period: IntArray,
    ts: FloatArray,
    device_id: ObjArray,
    score: FloatArray,
    k: int,
    period_starts: FloatArray,
    period_seconds: float,
    step_seconds: float,
    eligible: npt.NDArray[np.bool_] | None = None,
) -> IntArray:
    """K predictions per period, the budget spent step by step (K per step when period = step): the time
    steps visited in order, each through `pick_step`, exactly as live scoring visits them."""
    if k <= 0 or len(score) == 0:
        return np.zeros(0, dtype=np.int64)
    rule = SelectionRule(k, period_seconds, step_seconds)
    step_of = step_in_period(ts, period_starts, period, step_seconds)
    order = np.argsort(ts, kind="stable")
    bounds = np.flatnonzero(np.diff(ts[order])) + 1
    states: dict[int, PeriodPicks] = {}
    out: list[IntArray] = []
    for group in np.split(order, bounds):
        p = int(period[group[0]])
        picks = pick_step(
            rule,
            states.setdefault(p, PeriodPicks()),
            p,
            int(step_of[group[0]]),
            device_id[group],
            score[group],
            None if eligible is None else eligible[group],
        )
        out.append(group[picks])
    return np.sort(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def volume_by_step(period: IntArray, ts: FloatArray, chosen: IntArray) -> dict[tuple[int, float], int]:
    """How many predictions a selection made at each (period, instance time)."""
    out: dict[tuple[int, float], int] = {}
    for p, t in zip(period[chosen].tolist(), ts[chosen].tolist(), strict=True):
        out[(int(p), float(t))] = out.get((int(p), float(t)), 0) + 1
    return out


def select_at_volume(
    period: IntArray,
    ts: FloatArray,
    device_id: ObjArray,
    score: FloatArray,
    volume: dict[tuple[int, float], int],
) -> IntArray:
    """As many picks at each time step as another selection made there (the baseline at equal volume)."""
    if len(score) == 0:
        return np.zeros(0, dtype=np.int64)
    # The quota callback sees steps, not times: number the distinct times once.
    times, step_of = np.unique(ts, return_inverse=True)

    def quota(p: int, j: int, _used: int) -> int:
        return volume.get((p, float(times[j])), 0)

    return _walk(period, ts, device_id, score, step_of.astype(np.int64), quota)


def intersect_causal(
    selections: Sequence[IntArray], period: IntArray, ts: FloatArray, device_id: ObjArray
) -> IntArray:
    """Devices every member picked in a period; the prediction is made when the last member picked it
    (the latest of their instances), so it waits for nothing unknown at that time."""
    if not selections:
        return np.zeros(0, dtype=np.int64)
    latest: dict[tuple[int, object], int] = {}
    count: dict[tuple[int, object], int] = {}
    for sel in selections:
        for i in sel.tolist():
            key = (int(period[i]), device_id[i])
            count[key] = count.get(key, 0) + 1
            if key not in latest or ts[i] > ts[latest[key]]:
                latest[key] = i
    keep = [i for key, i in latest.items() if count[key] == len(selections)]
    return np.sort(np.asarray(keep, dtype=np.int64))


def ranks_within_steps(scores: FloatArray, ts: FloatArray) -> FloatArray:
    """Each score's normalised rank among the scores of its own time step (ties share their average)."""
    from predictor.ensembles import normalised_rank

    out = np.empty(len(scores), dtype=np.float64)
    if len(scores) == 0:
        return out
    order = np.argsort(ts, kind="stable")
    bounds = np.flatnonzero(np.diff(ts[order])) + 1
    for group in np.split(order, bounds):
        out[group] = normalised_rank(np.where(np.isnan(scores[group]), -np.inf, scores[group]))
    return out
