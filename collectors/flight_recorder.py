"""PyTorch NCCL flight-recorder dumps (``nccl_trace_rank_<r>``) read safely into CollectiveProgress records.

PyTorch (torch/csrc/distributed/c10d/FlightRecorderDetail.hpp, dump version "2.x") writes a protocol-2 pickle
of plain containers::

    {"version": "2.10", "comm_lib_version": "...", "pg_config": {name: {"name", "desc", "ranks"}},
     "pg_status": {"<pg_id>": {"last_enqueued_collective", "last_started_collective",
                               "last_completed_collective"}},
     "entries": [{"pg_id", "process_group": (name, desc), "collective_seq_id", "profiling_name",
                  "input_sizes": [[dims...]], "state": "scheduled|started|completed", ...}]}

Every number read lands in a BIGINT column: a sequence number or size past its range (a dump saying
10**30) drops that process group's row and is counted as ``value_out_of_range``, never stored.

A pickle can run code when loaded, and a dump is a file anyone who can write the dump directory controls. The
loader therefore refuses every global: the real dump needs none (dict, list, tuple, str, int, float, bool and
None are built by opcodes alone), and anything that asks for one (``os.system`` via ``__reduce__``) is a
FlightRecorderError before any of it runs. Stdlib only; torch is not imported.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import re
import stat
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from fleetguard.records.bounds import INT64_MAX, SqlType, fits
from fleetguard.records.runtime import CollectiveProgress

DEFAULT_PREFIX: Final = "nccl_trace_rank_"
MAX_DUMP_BYTES: Final = 256 * 1024 * 1024
MAX_GROUPS: Final = 256  # process groups kept from one dump (as from one report: protocol.MAX_COLLECTIVES)
MAX_NAME_CHARS: Final = 128  # as a report's names
SOURCE: Final = "flight_recorder"


class FlightRecorderError(Exception):
    """The dump cannot be used: too large, not a pickle, unsafe, or not shaped like a flight-recorder dump."""


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise FlightRecorderError(
            f"refusing to load {module}.{name}: a flight-recorder dump holds only plain data, "
            "so this file is corrupt or hostile"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise FlightRecorderError("refusing a persistent id: a flight-recorder dump has none")


# Opcodes that store into the unpickler's memo at an index the file names. The C unpickler grows its memo
# array to twice the largest index it is given, zeroed: a 1.2 kB dump with one index flipped to 610 M made it
# allocate and clear ~10 GB (31 s in the fuzz test; a process without the dump child's memory cap can be
# taken down by it). A plain dump numbers its memo entries from 0, one per object, so an index at or past the
# file's length is no dump's.
_MEMO_PUTS: Final = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


def _check_memo_indices(data: bytes) -> None:
    """Walk the opcodes (no object built); refuse a memo index no dump of this size can hold."""
    try:
        for opcode, arg, _ in pickletools.genops(data):
            if opcode.name in _MEMO_PUTS and isinstance(arg, int) and not 0 <= arg < len(data):
                raise FlightRecorderError(f"memo index {arg} in a {len(data)}-byte dump: corrupt or hostile")
    except FlightRecorderError:
        raise
    except Exception as exc:  # an unknown opcode, a truncated argument, ...: not a pickle
        raise FlightRecorderError(f"not a readable pickle: {type(exc).__name__}: {exc}"[:300]) from exc


def load_dump_bytes(data: bytes) -> dict[str, Any]:
    """Unpickle a dump with every global refused and every memo index checked first; the top level must be a
    dict with an "entries" or "pg_status" key."""
    _check_memo_indices(data)
    try:
        obj = _PlainDataUnpickler(io.BytesIO(data)).load()
    except FlightRecorderError:
        raise
    except RecursionError as exc:
        raise FlightRecorderError("dump is nested too deeply to be a flight-recorder dump") from exc
    except MemoryError as exc:
        raise FlightRecorderError("dump needs more memory than a flight-recorder dump can") from exc
    except Exception as exc:  # UnpicklingError, EOFError, ValueError, TypeError, ... from malformed input
        raise FlightRecorderError(f"not a readable pickle: {type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, dict) or not ({"entries", "pg_status"} & obj.keys()):
        raise FlightRecorderError("not a flight-recorder dump: expected a dict with 'entries' or 'pg_status'")
    return obj


def load_dump(path: str | Path, max_bytes: int = MAX_DUMP_BYTES) -> dict[str, Any]:
    """Read and safely unpickle one dump file; larger than `max_bytes` is refused before reading."""
    try:
        # No link is followed and nothing but a regular file is read: a dump directory is writable by the
        # training user, and a link to a FIFO would block the reader (the agent's analysis tick) for good.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise FlightRecorderError(f"{path} is not a regular file")
            size = info.st_size
            if size > max_bytes:
                raise FlightRecorderError(
                    f"{path} is {size} bytes, over the {max_bytes}-byte limit for a dump"
                )
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise FlightRecorderError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:  # grew while we read it
        raise FlightRecorderError(f"{path} is over the {max_bytes}-byte limit for a dump")
    try:
        return load_dump_bytes(data)
    except FlightRecorderError as exc:
        raise FlightRecorderError(f"{path}: {exc}") from exc


def rank_from_path(path: str | Path, prefix: str = DEFAULT_PREFIX) -> int | None:
    """``.../nccl_trace_rank_12`` -> 12; None when the name does not end in the prefix and a number."""
    match = re.fullmatch(re.escape(prefix) + r"(\d{1,9})", Path(path).name)
    return int(match.group(1)) if match else None


def progress_from_dump(
    dump: Mapping[str, Any],
    *,
    host: str,
    job_id: str,
    rank: int,
    ts: float,
    problems: Counter[str] | None = None,
) -> list[CollectiveProgress]:
    """One CollectiveProgress per process group of one rank's dump, with op and size of the last enqueued
    collective where the entry is still in the ring buffer. Malformed parts are skipped, never raised;
    numbers past BIGINT are counted in `problems` (``value_out_of_range``) and their group skipped."""
    problems = problems if problems is not None else Counter()
    entries = [e for e in _list(dump.get("entries")) if isinstance(e, dict)]
    names: dict[str, str] = {}
    by_seq: dict[tuple[str, int], dict[Any, Any]] = {}  # (group, collective number) -> its latest entry
    for entry in entries:
        pg_key = _group_key(entry.get("pg_id"), problems)
        if pg_key is None:
            continue
        group = entry.get("process_group")
        if pg_key not in names and isinstance(group, tuple | list) and group:
            name = _name(group[0], problems)
            if name is not None:
                names[pg_key] = name
        seq = _int(entry.get("collective_seq_id"))
        if seq is not None and entry.get("is_p2p") is not True:
            by_seq[(pg_key, seq)] = entry
    status = dump.get("pg_status")
    per_group = _status_by_group(status, problems) if isinstance(status, dict) else {}
    if not per_group:
        per_group = _status_from_entries(entries, problems)
    keys = sorted(per_group, key=_sort_key)
    if len(keys) > MAX_GROUPS:
        problems["groups_over_limit"] += len(keys) - MAX_GROUPS
        keys = keys[:MAX_GROUPS]
    out: list[CollectiveProgress] = []
    for pg_key in keys:
        enqueued, started, completed = per_group[pg_key]
        last = by_seq.get((pg_key, enqueued))
        out.append(
            CollectiveProgress(
                ts=ts,
                host=host,
                job_id=job_id,
                rank=rank,
                process_group=names.get(pg_key, pg_key),
                last_enqueued=enqueued,
                last_started=started,
                last_completed=completed,
                op=_name(last.get("profiling_name"), problems) if last else None,
                size=_elements(last.get("input_sizes"), problems) if last else None,
                source=SOURCE,
            )
        )
    return out


@dataclass
class DumpReport:
    progress: list[CollectiveProgress] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # file -> why it was skipped
    problems: Counter[str] = field(default_factory=Counter)  # values skipped inside readable dumps


def read_dump_dir(
    directory: str | Path,
    *,
    host: str,
    job_id: str,
    ts: float,
    prefix: str = DEFAULT_PREFIX,
    max_bytes: int = MAX_DUMP_BYTES,
) -> DumpReport:
    """Every ``<prefix><rank>`` file in `directory`; bad files are listed in `errors`, the rest still read."""
    report = DumpReport()
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        report.errors[str(directory)] = f"cannot list: {exc.strerror or exc}"
        return report
    for name in names:
        path = Path(directory) / name
        rank = rank_from_path(path, prefix)
        if rank is None or not path.is_file():
            continue
        try:
            dump = load_dump(path, max_bytes)
        except FlightRecorderError as exc:
            report.errors[str(path)] = str(exc)
            continue
        report.progress.extend(
            progress_from_dump(dump, host=host, job_id=job_id, rank=rank, ts=ts, problems=report.problems)
        )
    return report


# ---- helpers over untrusted plain data ---------------------------------------------------------------------


def _status_by_group(status: dict[Any, Any], problems: Counter[str]) -> dict[str, tuple[int, int, int]]:
    out: dict[str, tuple[int, int, int]] = {}
    for pg_id, values in status.items():
        if not isinstance(values, dict):
            continue
        pg_key = _group_key(pg_id, problems)
        if pg_key is None:
            continue
        enqueued = _bigint(values.get("last_enqueued_collective"), problems)
        started = _bigint(values.get("last_started_collective"), problems)
        completed = _bigint(values.get("last_completed_collective"), problems)
        if enqueued is None or started is None or completed is None:
            continue
        out[pg_key] = (enqueued, started, completed)
    return out


def _status_from_entries(
    entries: list[dict[Any, Any]], problems: Counter[str]
) -> dict[str, tuple[int, int, int]]:
    """Older dumps (no pg_status): the highest sequence number seen in each state; -1 for none, as PyTorch."""
    out: dict[str, list[int]] = {}
    for entry in entries:
        pg_key = _group_key(entry.get("pg_id"), problems)
        seq = _bigint(entry.get("collective_seq_id"), problems)
        if pg_key is None or seq is None or entry.get("is_p2p") is True:
            continue
        marks = out.setdefault(pg_key, [-1, -1, -1])
        state = entry.get("state")
        marks[0] = max(marks[0], seq)
        if state in ("started", "completed"):
            marks[1] = max(marks[1], seq)
        if state == "completed":
            marks[2] = max(marks[2], seq)
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def _elements(sizes: Any, problems: Counter[str]) -> int | None:
    """Total elements over the input tensors (``[[1024, 4], [8]]`` -> 4104); None when unknown, empty or
    past BIGINT (counted; the product is cut short rather than computed on huge numbers)."""
    if not isinstance(sizes, list) or not sizes:
        return None
    total = 0
    for dims in sizes:
        if not isinstance(dims, list | tuple) or not all(_int(d) is not None and d >= 0 for d in dims):
            return None
        product = 1
        for d in dims:
            product *= d
            if product > INT64_MAX:
                break
        total += product
        if total > INT64_MAX:
            problems["value_out_of_range"] += 1
            return None
    return total


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bigint(value: Any, problems: Counter[str]) -> int | None:
    """An int a BIGINT column holds, else None; an int past its range is counted."""
    number = _int(value)
    if number is not None and not fits(SqlType.BIGINT, number):
        problems["value_out_of_range"] += 1
        return None
    return number


def _name(value: Any, problems: Counter[str]) -> str | None:
    """A name (process group, op) as a VARCHAR holds it: a str of at most MAX_NAME_CHARS that encodes as
    UTF-8 (pickle keeps lone surrogates, which the store refuses); anything else is counted and dropped."""
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= MAX_NAME_CHARS:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            pass
        else:
            return value
    problems["bad_name"] += 1
    return None


def _group_key(pg_id: Any, problems: Counter[str]) -> str | None:
    """A process group's id as text: an int a BIGINT holds (str() of a 5,000-digit one raises) or a name."""
    if isinstance(pg_id, int) and not isinstance(pg_id, bool):
        if fits(SqlType.BIGINT, pg_id):
            return str(pg_id)
        problems["bad_name"] += 1
        return None
    return _name(pg_id, problems) if pg_id is not None else None


def _sort_key(pg_key: str) -> tuple[int, str]:
    if pg_key.isascii() and pg_key.isdigit() and len(pg_key) <= 18:
        return (int(pg_key), "")
    return (1 << 62, pg_key)
