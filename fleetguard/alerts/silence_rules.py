"""Silences as records: what they match, and whether one mutes an alert now. Pure.

A silence is a set of `key=value` matchers over an alert's identity (host, component, fault, incident_id,
severity, endpoint), all of which must match, and a time it ends. Matching is exact: a silence says what
it mutes, and no pattern can mute more than its author read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MATCH_KEYS = ("host", "component", "fault", "incident_id", "severity", "endpoint")
# Keys that are Alertmanager labels of our alerts too: a silence on these alone is mirrored there.
ALERTMANAGER_KEYS = frozenset({"host", "component", "fault", "incident_id"})
MAX_MATCHERS = 8
MAX_VALUE_CHARS = 256
MAX_REASON_CHARS = 500
MIN_SILENCE_SECONDS = 60.0
MAX_SILENCE_SECONDS = 30 * 86400.0
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

Matchers = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Silence:
    silence_id: str
    matchers: Matchers
    created_by: str
    reason: str
    created_at: float
    expires_at: float
    ended_at: float | None = None

    def active(self, now: float) -> bool:
        return self.ended_at is None and self.created_at <= now < self.expires_at

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.matchers)

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.matchers)


def parse_matchers(texts: Sequence[str]) -> Matchers:
    """`key=value` texts; ValueError naming the bad one. At least one; keys from MATCH_KEYS."""
    if not texts:
        raise ValueError("a silence needs at least one --match key=value")
    if len(texts) > MAX_MATCHERS:
        raise ValueError(f"at most {MAX_MATCHERS} matchers")
    out: dict[str, str] = {}
    for text in texts:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or key not in MATCH_KEYS:
            known = ", ".join(MATCH_KEYS)
            raise ValueError(f"--match {text[:80]!r}: expected key=value with key one of {known}")
        if not value or len(value) > MAX_VALUE_CHARS or not value.isprintable():
            raise ValueError(f"--match {key}: the value must be 1-{MAX_VALUE_CHARS} printable characters")
        if key in out and out[key] != value:
            raise ValueError(f"--match {key}: given twice with different values (all matchers must hold)")
        out[key] = value
    return tuple(sorted(out.items()))


def parse_duration(text: str) -> float:
    """`90m`, `2h`, `1h30m`, `3d` as seconds, within a minute to 30 days; ValueError otherwise."""
    text = text.strip().lower()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"--for {text[:40]!r}: expected a duration like 30m, 2h, 1h30m or 3d")
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if not MIN_SILENCE_SECONDS <= seconds <= MAX_SILENCE_SECONDS:
        raise ValueError("--for: a silence lasts from 1 minute to 30 days")
    return seconds


def silencing(silences: Iterable[Silence], labels: Mapping[str, str], now: float) -> Silence | None:
    """The first active silence that matches the alert, or None."""
    for silence in silences:
        if silence.active(now) and silence.matches(labels):
            return silence
    return None


def alertmanager_matchers(silence: Silence) -> list[dict[str, object]] | None:
    """The silence as Alertmanager matchers, or None when it matches on something that is not a label
    there (severity, endpoint): such a silence mutes at the relay only."""
    if any(key not in ALERTMANAGER_KEYS for key, _ in silence.matchers):
        return None
    matchers: list[dict[str, object]] = [
        {"name": "alertname", "value": "FleetguardIncident", "isRegex": False, "isEqual": True}
    ]
    matchers += [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in silence.matchers]
    return matchers
