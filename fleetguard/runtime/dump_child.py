"""The child process that reads one flight-recorder dump, and the small JSON summary it answers with.

A dump is a pickle anyone who can write the dump directory controls: unpickling 120 MB of it took 150 s and
~1 GB inside the agent. So the agent never unpickles: it opens the file (no link followed, owner checked),
hands the descriptor to ``python -m fleetguard.runtime.dump_child`` as stdin, and reads back at most
`MAX_SUMMARY_BYTES` of JSON. The child caps its own address space and CPU time (`setrlimit`) before it reads
a byte, so a hostile dump costs one bounded, killable process, never the agent's memory or its tick.

Wire format (one line on stdout)::

    {"ok": true, "groups": [{"process_group": "0", "last_enqueued": 5, "last_started": 5,
                             "last_completed": 4, "op": "nccl:all_reduce", "size": 1024}, ...],
     "problems": {"value_out_of_range": 1}, "reader_uid": 65534}
    {"ok": false, "reason": "memory_limit" | "too_large" | "unreadable", "message": "..."}
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from collections import Counter
from enum import StrEnum
from typing import Any, Final, TypeGuard

from collectors.flight_recorder import (
    MAX_GROUPS,
    MAX_NAME_CHARS,
    SOURCE,
    FlightRecorderError,
    load_dump_bytes,
    progress_from_dump,
)
from fleetguard.records.bounds import SqlType, fits
from fleetguard.records.runtime import CollectiveProgress

MAX_SUMMARY_BYTES: Final = 1 << 20  # 256 groups of short names fit many times over
MAX_PROBLEM_KINDS: Final = 16


class DumpRefusal(StrEnum):
    """Why a dump file was not read (counted per reason by the watcher)."""

    NOT_REGULAR = "not_regular"  # a link, FIFO, directory: could point the agent at what it must not read
    WRONG_OWNER = "wrong_owner"  # not written by the job's owner
    OWNER_CAP = "owner_cap"  # one owner has more dump files than the watcher tracks per owner
    TOO_LARGE = "too_large"  # over the byte limit, refused before reading
    UNREADABLE = "unreadable"  # not a plain-data flight-recorder pickle (corrupt or hostile)
    MEMORY_LIMIT = "memory_limit"  # the child ran out of its address-space limit
    CPU_LIMIT = "cpu_limit"  # the child used up its CPU-time limit
    TIMEOUT = "timeout"  # the child ran past its wall-clock limit and was killed
    QUEUE_FULL = "queue_full"  # more dumps waiting than the reader queues (read on a later tick)
    CHILD_FAILED = "child_failed"  # the child could not start or answered something else


class SummaryError(ValueError):
    """The child's answer is not a summary this module writes."""


def summary_of(dump: dict[str, Any]) -> dict[str, Any]:
    """The JSON answer for one parsed dump: its process groups' progress, names and numbers as the store
    takes them (progress_from_dump already bounds them)."""
    problems: Counter[str] = Counter()
    progress = progress_from_dump(dump, host="", job_id="", rank=0, ts=0.0, problems=problems)
    groups = [
        {
            "process_group": p.process_group,
            "last_enqueued": p.last_enqueued,
            "last_started": p.last_started,
            "last_completed": p.last_completed,
            "op": p.op,
            "size": p.size,
        }
        for p in progress
    ]
    problem_counts = dict(problems.most_common(MAX_PROBLEM_KINDS))
    return {"ok": True, "groups": groups, "problems": problem_counts, "reader_uid": os.getuid()}


def progress_from_summary(
    text: bytes, *, host: str, job_id: str, rank: int, ts: float, problems: Counter[str]
) -> list[CollectiveProgress]:
    """The child's answer as progress records; SummaryError when it is not shaped as `summary_of` writes
    (every field is checked again: the child ran on hostile input)."""
    if len(text) > MAX_SUMMARY_BYTES:
        raise SummaryError(f"summary over {MAX_SUMMARY_BYTES} bytes")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SummaryError(f"summary is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("ok") is not True or not isinstance(doc.get("groups"), list):
        raise SummaryError("summary is not an ok answer with groups")
    if len(doc["groups"]) > MAX_GROUPS:
        raise SummaryError(f"summary holds more than {MAX_GROUPS} groups")
    counts = doc.get("problems")
    if isinstance(counts, dict):
        for kind, count in list(counts.items())[:MAX_PROBLEM_KINDS]:
            if isinstance(kind, str) and len(kind) <= 32 and _bigint(count) and count > 0:
                problems[kind] += count
    return [_group(g, host=host, job_id=job_id, rank=rank, ts=ts) for g in doc["groups"]]


def reader_uid_of(text: bytes) -> int | None:
    """The uid the child ran as, from its answer (None when it does not say)."""
    try:
        uid = json.loads(text[:MAX_SUMMARY_BYTES]).get("reader_uid")
    except (ValueError, AttributeError):
        return None
    return uid if isinstance(uid, int) and not isinstance(uid, bool) and 0 <= uid < 1 << 32 else None


def refusal_of(text: bytes) -> tuple[DumpRefusal, str] | None:
    """A not-ok answer's reason and message; None when `text` is not one."""
    try:
        doc = json.loads(text[:MAX_SUMMARY_BYTES])
        reason = DumpRefusal(doc["reason"])
    except (ValueError, TypeError, KeyError):
        return None
    if doc.get("ok") is not False or reason not in _CHILD_REASONS:
        return None
    message = doc.get("message")
    return reason, (message[:400] if isinstance(message, str) else reason.value)


_CHILD_REASONS: Final = frozenset({DumpRefusal.TOO_LARGE, DumpRefusal.UNREADABLE, DumpRefusal.MEMORY_LIMIT})


def _group(g: object, *, host: str, job_id: str, rank: int, ts: float) -> CollectiveProgress:
    if not isinstance(g, dict):
        raise SummaryError("a group is not an object")
    name, op, size = g.get("process_group"), g.get("op"), g.get("size")
    enqueued, started, completed = g.get("last_enqueued"), g.get("last_started"), g.get("last_completed")
    if not _name(name) or not (op is None or _name(op)) or not (size is None or _bigint(size)):
        raise SummaryError("a group's name, op or size is out of bounds")
    if not (_bigint(enqueued) and _bigint(started) and _bigint(completed)):
        raise SummaryError("a group's collective counters are out of bounds")
    return CollectiveProgress(
        ts=ts,
        host=host,
        job_id=job_id,
        rank=rank,
        process_group=name,
        last_enqueued=enqueued,
        last_started=started,
        last_completed=completed,
        op=op,
        size=size,
        source=SOURCE,
    )


def _name(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS


def _bigint(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and fits(SqlType.BIGINT, value)


# ---- the child ---------------------------------------------------------------------------------------------


def _limit(kind: int, value: int) -> None:
    # hard limit a little above the soft one: at the soft CPU limit the kernel sends SIGXCPU, at the hard
    # one SIGKILL, so a child that ignores the first still ends
    resource.setrlimit(kind, (value, value + 1 if kind == resource.RLIMIT_CPU else value))


def _answer(doc: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def _over_memory(memory_bytes: int) -> dict[str, Any]:
    message = f"needs more than the {memory_bytes}-byte memory limit for reading a dump"
    return {"ok": False, "reason": DumpRefusal.MEMORY_LIMIT, "message": message}


def _read(max_bytes: int, memory_bytes: int) -> dict[str, Any]:
    data = sys.stdin.buffer.read(max_bytes + 1)
    if len(data) > max_bytes:
        return {"ok": False, "reason": DumpRefusal.TOO_LARGE, "message": f"over the {max_bytes}-byte limit"}
    try:
        dump = load_dump_bytes(data)
    except FlightRecorderError as exc:
        if isinstance(exc.__cause__, MemoryError):
            return _over_memory(memory_bytes)
        return {"ok": False, "reason": DumpRefusal.UNREADABLE, "message": str(exc)[:400]}
    del data
    return summary_of(dump)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Summarise one flight-recorder dump read from stdin.")
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--memory-bytes", type=int, required=True)
    parser.add_argument("--cpu-seconds", type=int, required=True)
    args = parser.parse_args(argv)
    # before a byte of the dump is read: no core file, no files written, bounded memory and CPU
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_FSIZE, 0)
    _limit(resource.RLIMIT_AS, args.memory_bytes)
    _limit(resource.RLIMIT_CPU, args.cpu_seconds)
    try:
        doc = _read(args.max_bytes, args.memory_bytes)
    except MemoryError:
        doc = _over_memory(args.memory_bytes)
    _answer(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
