"""Failure-risk predictions: the latest score of each GPU and one GPU's risk history."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from dashboard.queries.base import TS, Cursor, fetch, host_rows

# A scoring round runs every minute by default; a score older than this is stale and not shown as live.
RISK_WINDOW_SECONDS: Final = 3 * 3600.0


@dataclass(frozen=True, slots=True)
class Risk:
    host: str
    device_id: str
    ts: float
    risk: float
    model_id: str
    horizon_hours: float
    explanations: str  # JSON [{"feature", "value", "contribution", "percentile"}, ...]
    base_rate: float | None = None  # the model's base rate, what the risk is read against


_LATEST_SQL: Final = f"""
SELECT host, device_id, epoch(ts), risk, model_id, horizon_hours, explanations, base_rate
FROM predictions WHERE ts >= {TS} AND ts <= {TS} AND (? IS NULL OR host = ?)
QUALIFY row_number() OVER (PARTITION BY device_id ORDER BY ts DESC) = 1
ORDER BY risk DESC
"""


def latest_risks(cur: Cursor, now: float, host: str | None = None, limit: int | None = None) -> list[Risk]:
    """Each GPU's newest score, most at risk first (the first `limit`)."""
    sql = _LATEST_SQL if limit is None else f"{_LATEST_SQL} LIMIT {int(limit)}"
    rows = fetch(cur, sql, [now - RISK_WINDOW_SECONDS, now, host, host])
    return [
        Risk(
            str(r[0]),
            str(r[1]),
            float(r[2]),
            float(r[3]),
            str(r[4]),
            float(r[5]),
            str(r[6] or "[]"),
            None if r[7] is None else float(r[7]),
        )
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class Driver:
    feature: str
    value: float | None
    contribution: float
    percentile: float | None = None  # the value's place in the fleet scored with it, when recorded

    def label(self) -> str:
        """`feature = value (p97)`: the value and where it sits in the fleet."""
        if self.value is None:
            return self.feature
        where = "" if self.percentile is None else f" (p{self.percentile:.0f})"
        return f"{self.feature} = {self.value:g}{where}"


def drivers(explanations: str) -> list[Driver]:
    """The features behind a score, largest contribution first; malformed entries are skipped."""
    try:
        items = json.loads(explanations)
    except ValueError:
        return []
    out = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("contribution"), int | float):
            continue
        value, pct = item.get("value"), item.get("percentile")
        out.append(
            Driver(
                str(item.get("feature", "?"))[:80],
                float(value) if isinstance(value, int | float) else None,
                float(item["contribution"]),
                float(pct) if isinstance(pct, int | float) and 0 <= pct <= 100 else None,
            )
        )
    return sorted(out, key=lambda d: -abs(d.contribution))


_RISK_SQL: Final = f"""
SELECT device_id, arg_max(risk, ts) FROM predictions WHERE ts >= {TS} AND ts <= {TS} GROUP BY device_id
"""


def risk_by_device(cur: Cursor, now: float) -> dict[str, float]:
    """Each GPU's newest score only: what the fleet page needs for 16,384 GPUs, without building records."""
    return {str(r[0]): float(r[1]) for r in fetch(cur, _RISK_SQL, [now - RISK_WINDOW_SECONDS, now])}


@dataclass(frozen=True, slots=True)
class RiskSummary:
    scored: int
    above: int  # at or above the threshold
    newest_ts: float | None
    histogram: list[int]  # GPUs per bin of width 1 / len(histogram)


_SUMMARY_SQL: Final = f"""
WITH latest AS (
  SELECT device_id, arg_max(risk, ts) AS risk, max(ts) AS ts FROM predictions
  WHERE ts >= {TS} AND ts <= {TS} GROUP BY device_id
)
SELECT least(CAST(floor(risk * ?) AS BIGINT), ? - 1) AS bin, count(*), count(*) FILTER (WHERE risk >= ?),
       epoch(max(ts))
FROM latest GROUP BY bin
"""


def risk_summary(cur: Cursor, now: float, threshold: float, bins: int) -> RiskSummary:
    """How many GPUs were scored, how many are at risk, and the distribution, counted in SQL."""
    rows = fetch(cur, _SUMMARY_SQL, [now - RISK_WINDOW_SECONDS, now, bins, bins, threshold])
    histogram = [0] * bins
    for r in rows:
        histogram[max(0, min(bins - 1, int(r[0])))] += int(r[1])
    newest = max((float(r[3]) for r in rows), default=None)
    return RiskSummary(sum(histogram), sum(int(r[2]) for r in rows), newest, histogram)


_HISTORY_SQL: Final = f"""
{host_rows("predictions", "ts", "ts, device_id, risk")}
SELECT epoch(ts), risk FROM host_rows WHERE device_id = ? ORDER BY ts LIMIT 5000
"""


def risk_history(
    cur: Cursor, device_id: str, host: str, since: float, until: float
) -> list[tuple[float, float]]:
    """The GPU's scores over the window, oldest first, read among its host's (`host`: where it reports)."""
    rows = fetch(cur, _HISTORY_SQL, [since, until, host, device_id])
    return [(float(r[0]), float(r[1])) for r in rows]
