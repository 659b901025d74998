"""Where a reader of one table got to, in ingest sequence values (fleetguard.store.ingest_order).

Values rise in the order INSERT statements began, but two writer transactions can commit in the other order,
and a rolled-back one leaves its values unused for ever. So a single "highest value read" would skip the rows
of a statement that commits after a later one. The mark keeps instead:
- `floor`: every value at or below it was handed on, or given up;
- `seen`: ranges above the floor already handed on (the holes between them may still fill);
- `horizon`: (time, highest value handed on by then) per round. A hole below the highest value read `grace`
  seconds ago belongs to a statement that began before that value's and has not committed since: rolled
  back, or in flight for longer than any writer holds a transaction. It is given up.
Pure: the feed passes the time and the values each round read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

GRACE_SECONDS = 120.0  # far past the longest commit group a controller holds open
MAX_HORIZON = 4096  # rounds remembered (at one round a second, over an hour: more than any grace)


@dataclass
class SeqMark:
    floor: int = 0
    seen: list[tuple[int, int]] = field(default_factory=list)  # sorted, disjoint, all above floor
    horizon: list[tuple[float, int]] = field(default_factory=list)

    def exclusions(self) -> list[tuple[int, int]]:
        """Ranges above the floor that must not be read again."""
        return list(self.seen)

    def handed_on(self, value: int) -> bool:
        return value <= self.floor or any(lo <= value <= hi for lo, hi in self.seen)

    def take(self, values: Iterable[int], now: float, grace: float = GRACE_SECONDS) -> None:
        """Record a round's values (those read, all above the floor and outside `seen`)."""
        merged = _coalesce([*self.seen, *((v, v) for v in values)])
        top = merged[-1][1] if merged else self.floor
        if not self.horizon or top > self.horizon[-1][1]:
            self.horizon.append((now, top))
        given_up = max((v for t, v in self.horizon if t <= now - grace), default=self.floor)
        self.horizon = [(t, v) for t, v in self.horizon if t > now - grace][-MAX_HORIZON:]
        floor = max(self.floor, given_up)
        kept: list[tuple[int, int]] = []
        for lo, hi in merged:
            if hi <= floor:
                continue
            if lo <= floor + 1:
                floor = hi
            else:
                kept.append((lo, hi))
        self.floor, self.seen = floor, kept

    def to_json(self) -> tuple[str, str]:
        return json.dumps(self.seen), json.dumps(self.horizon)

    @classmethod
    def from_json(cls, floor: int, seen: str, horizon: str) -> SeqMark:
        return cls(
            floor=int(floor),
            seen=[(int(lo), int(hi)) for lo, hi in json.loads(seen)],
            horizon=[(float(t), int(v)) for t, v in json.loads(horizon)],
        )


def _coalesce(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out
