"""Collectors with scripted output, for testing the agent loop without any signal source."""

from __future__ import annotations

from collections.abc import Mapping

from fleetguard.records.telemetry import Batch, Event, EventKind, GpuSample


class ScriptedCollector:
    """Yields `gpus` GPU samples per round, plus any events queued with `emit`; can be told to fail."""

    def __init__(self, name: str = "scripted", host: str = "h", gpus: int = 2) -> None:
        self.name = name
        self.host = host
        self.gpus = gpus
        self.fail_next = 0
        self.queued: list[Event] = []
        self.rounds = 0
        self.closed = False
        self._problems: dict[str, int] = {}

    def emit(self, event: Event) -> None:
        self.queued.append(event)

    def collect(self, now: float) -> Batch:
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("collector bug")
        self.rounds += 1
        batch = Batch(
            gpu_samples=[
                GpuSample(ts=now, host=self.host, gpu_index=i, uuid=f"GPU-{i}", power_watts=300.0 + i)
                for i in range(self.gpus)
            ],
            events=self.queued,
        )
        self.queued = []
        return batch

    def problems(self) -> Mapping[str, int]:
        return dict(self._problems)

    def close(self) -> None:
        self.closed = True


class ResumableStream(ScriptedCollector):
    """A stream like the kernel log: each emitted event gets the next sequence number; commits are kept."""

    def __init__(self, name: str = "stream", host: str = "h") -> None:
        super().__init__(name, host, gpus=0)
        self.last_seq: int | None = None
        self.commits: list[int] = []

    def emit_xid(self, ts: float, code: int) -> None:
        self.last_seq = 1 if self.last_seq is None else self.last_seq + 1
        self.emit(Event(ts, self.host, EventKind.XID, "kmsg", f"Xid {code}", code=code, seq=self.last_seq))

    def commit(self, seq: int) -> None:
        self.commits.append(seq)
