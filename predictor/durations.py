"""Durations as operators write them ('7d', '12h', '30m', '45s', '2w' or plain seconds), both ways."""

from __future__ import annotations

import math

_UNITS = {"w": 7 * 86400.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """'7d', '12h', '30m', '45s', '2w' or plain seconds -> seconds (positive, finite)."""
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * _UNITS[t[-1]] if t and t[-1] in _UNITS else float(t)
    except ValueError as exc:
        raise ValueError(f"not a duration: {text!r} (use e.g. 7d, 12h, 30m)") from exc
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"duration must be positive: {text!r}")
    return value


def format_duration(seconds: float) -> str:
    """The largest whole unit of days, hours or minutes that writes `seconds` exactly ('18d', '90m')."""
    for unit in ("d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
