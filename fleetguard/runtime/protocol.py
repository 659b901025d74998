"""The wire format between the training client and the agent: one JSON report per heartbeat, validated and
turned into Heartbeat / StepTiming / CollectiveProgress records. Bad input is a ReportError naming the field,
never a crash: every integer is checked against the BIGINT column it lands in and every time against the
TIMESTAMP range when it is parsed, so the store never refuses a batch because of a report, and every list is
bounded."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fleetguard.httpserve import JsonBodyError, loads_json
from fleetguard.jobcontrol.trust import ProcessIdentity, job_key
from fleetguard.records.bounds import OutOfRange, check_finite, check_int64
from fleetguard.records.runtime import CollectiveProgress, Heartbeat, StepTiming

MAX_REPORT_BYTES = 1 << 20
MAX_JSON_DEPTH = 8  # a report nests 3 deep (report, list, item)
MAX_NAME_CHARS = 128
MAX_TIMINGS = 8192  # the client's queue: one report drains it
MAX_COLLECTIVES = 256  # process groups per rank
MAX_ACKED = 256
# Times land in TIMESTAMP columns (microseconds in an int64): epoch seconds up to the year 9999.
MAX_EPOCH_SECONDS = 253_402_300_799.0
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=/-]*")
# exiting: the rank is ending on an uncaught exception (sent from the client's excepthook); its exit decides
STATUSES = frozenset({"running", "finished", "error", "exiting"})
MAX_MESSAGE_CHARS = 1024


class ReportError(ValueError):
    """A report that cannot be used; the message says which field and why."""


@dataclass(frozen=True, slots=True)
class RankError:
    """The exception a rank is failing with, as it reported it (or as torchelastic's error file says)."""

    ts: float  # when it was raised, on the rank's clock (the same host's)
    error_type: str
    message: str


@dataclass(frozen=True, slots=True)
class RankReport:
    """One report from one rank, as records, plus what the policy needs (the latest complete checkpoint)."""

    heartbeat: Heartbeat
    timings: tuple[StepTiming, ...]
    collectives: tuple[CollectiveProgress, ...]
    checkpoint_step: int | None
    dropped_timings: int
    local_world_size: int | None = None  # ranks on the sender's host (torchrun's LOCAL_WORLD_SIZE)
    acked: tuple[str, ...] = ()  # command ids the rank has received (they are not sent again)
    # the reporting process when its pid is the sender's own (trust.trusted_pid): only then is it watched
    # and signalled; None: the rank is judged by its heartbeats alone
    process: ProcessIdentity | None = None
    error: RankError | None = None  # the exception it is failing with, when it is

    @property
    def pid_trusted(self) -> bool:
        return self.process is not None

    @property
    def key(self) -> tuple[str, int]:
        return (self.heartbeat.job_id, self.heartbeat.rank)

    def local_ranks(self) -> range:
        """The global ranks on the sender's host (torchrun numbers a node's ranks consecutively); just the
        sender when its host's rank count is unknown."""
        hb = self.heartbeat
        first = hb.rank - hb.local_rank
        if self.local_world_size is None or first < 0 or hb.local_rank >= self.local_world_size:
            return range(hb.rank, hb.rank + 1)
        return range(first, first + self.local_world_size)


def parse_report(body: bytes, host: str, received_ts: float, *, owner_uid: int) -> RankReport:
    """Decode and validate one report. `host` is the agent's host name (ranks report to their own host's
    agent); the heartbeat is stamped with `received_ts` so timeouts run on the agent's clock; `owner_uid`
    is the sender's uid, part of the job's identity (trust.job_key)."""
    if len(body) > MAX_REPORT_BYTES:
        raise ReportError(f"report is {len(body)} bytes, more than {MAX_REPORT_BYTES}")
    try:
        doc = loads_json(body, MAX_JSON_DEPTH)
    except JsonBodyError as exc:
        raise ReportError(f"report: {exc}") from exc
    return report_from_doc(doc, host, received_ts, owner_uid=owner_uid)


def report_from_doc(doc: object, host: str, received_ts: float, *, owner_uid: int) -> RankReport:
    """Validate one decoded report (see parse_report)."""
    if not isinstance(doc, dict):
        raise ReportError("report must be a JSON object")
    try:
        return _report(doc, host, received_ts, owner_uid)
    except OutOfRange as exc:
        raise ReportError(str(exc)) from exc


def _report(doc: dict[str, Any], host: str, received_ts: float, owner_uid: int) -> RankReport:
    job_id = job_key(owner_uid, _job_id(_name(doc, "job_id")))
    heartbeat = _heartbeat(doc, host, job_id, received_ts)
    rank = heartbeat.rank
    timings = tuple(
        _timing(item, i, host, job_id, rank) for i, item in enumerate(_list(doc, "timings", MAX_TIMINGS))
    )
    collectives = tuple(
        _collective(item, i, host, job_id, rank, received_ts)
        for i, item in enumerate(_list(doc, "collectives", MAX_COLLECTIVES))
    )
    local_world_size = _positive_or_none(_optional_int(doc, "local_world_size"), "local_world_size")
    if local_world_size is not None and local_world_size > heartbeat.world_size:
        raise ReportError("local_world_size: must be <= world_size")
    return RankReport(
        heartbeat=heartbeat,
        timings=timings,
        collectives=collectives,
        checkpoint_step=_optional_int(doc, "checkpoint_step"),
        dropped_timings=_optional_int(doc, "dropped_timings") or 0,
        local_world_size=local_world_size,
        acked=tuple(_as_name(item, f"acked[{i}]") for i, item in enumerate(_list(doc, "acked", MAX_ACKED))),
        error=_error(doc.get("error")),
    )


def _error(value: Any) -> RankError | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ReportError("error: expected an object {ts, type, message}")
    message = value.get("message", "")
    if not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS:
        raise ReportError(f"error.message: expected a string of at most {MAX_MESSAGE_CHARS} characters")
    return RankError(
        ts=_timestamp(value.get("ts"), "error.ts"),
        error_type=_as_name(value.get("type"), "error.type"),
        message=_one_line(message),
    )


def _heartbeat(doc: dict[str, Any], host: str, job_id: str, received_ts: float) -> Heartbeat:
    rank = _int(doc, "rank", minimum=0)
    world_size = _int(doc, "world_size", minimum=1)
    if rank >= world_size:
        raise ReportError(f"rank: must be < world_size ({world_size}), got {rank}")
    local_rank = _int(doc, "local_rank", minimum=0)
    if local_rank > rank:
        raise ReportError(f"local_rank: must be <= rank ({rank}), got {local_rank}")
    return Heartbeat(
        ts=received_ts,
        host=host,
        job_id=job_id,
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        pid=_int(doc, "pid", minimum=1),
        step=_optional_int(doc, "step"),
        section=_optional_name(doc, "section"),
        status=_status(doc),
    )


def _timing(item: Any, i: int, host: str, job_id: str, rank: int) -> StepTiming:
    where = f"timings[{i}]"
    if not isinstance(item, list) or len(item) != 4:
        raise ReportError(f"{where}: expected [ts, step, section, duration_seconds]")
    ts, step, section, duration = item
    return StepTiming(
        ts=_timestamp(ts, f"{where}.ts"),
        host=host,
        job_id=job_id,
        rank=rank,
        step=_as_int(step, f"{where}.step"),
        section=_as_name(section, f"{where}.section"),
        duration_seconds=_non_negative(_finite(duration, f"{where}.duration_seconds"), f"{where}.duration"),
    )


def _collective(
    item: Any, i: int, host: str, job_id: str, rank: int, received_ts: float
) -> CollectiveProgress:
    where = f"collectives[{i}]"
    if not isinstance(item, list) or len(item) != 7:
        raise ReportError(f"{where}: expected [group, ts, enqueued, started, completed, op, size]")
    group, ts, enqueued, started, completed, op, size = item
    return CollectiveProgress(
        ts=min(_timestamp(ts, f"{where}.ts"), received_ts),
        host=host,
        job_id=job_id,
        rank=rank,
        process_group=_as_name(group, f"{where}.group"),
        last_enqueued=_as_int(enqueued, f"{where}.enqueued"),
        last_started=_as_int(started, f"{where}.started"),
        last_completed=_as_int(completed, f"{where}.completed"),
        op=None if op is None else _as_name(op, f"{where}.op"),
        size=None if size is None else _as_int(size, f"{where}.size"),
        source="client",
    )


def _name(doc: dict[str, Any], key: str) -> str:
    if key not in doc:
        raise ReportError(f"{key}: missing")
    return _as_name(doc[key], key)


def _job_id(value: str) -> str:
    # The job id fills {job} in restart and cordon commands (scancel, kubectl ...): an argument that starts
    # with "-" would be read as an option, and odd characters have no business in a scheduler's job id.
    if not _JOB_ID.fullmatch(value):
        raise ReportError("job_id: letters, digits and . _ : @ + = / - only, starting with a letter or digit")
    return value


def _positive_or_none(value: int | None, key: str) -> int | None:
    if value is not None and value < 1:
        raise ReportError(f"{key}: must be >= 1")
    return value


def _optional_name(doc: dict[str, Any], key: str) -> str | None:
    value = doc.get(key)
    return None if value is None else _as_name(value, key)


def _as_name(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise ReportError(f"{key}: expected a non-empty string of at most {MAX_NAME_CHARS} characters")
    if _CONTROL.search(value):
        # names reach log lines, finding summaries and the dashboard: a newline would forge a log line
        raise ReportError(f"{key}: control characters are not allowed in a name")
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _one_line(text: str) -> str:
    """`text` with its control characters written out (a newline as \\n): one line in any log."""
    return _CONTROL.sub(lambda m: _ESCAPES.get(m.group(0)) or f"\\x{ord(m.group(0)):02x}", text)


def _int(doc: dict[str, Any], key: str, minimum: int) -> int:
    if key not in doc:
        raise ReportError(f"{key}: missing")
    value = _as_int(doc[key], key)
    if value < minimum:
        raise ReportError(f"{key}: must be >= {minimum}, got {value}")
    return value


def _optional_int(doc: dict[str, Any], key: str) -> int | None:
    value = doc.get(key)
    return None if value is None else _as_int(value, key)


def _as_int(value: Any, key: str) -> int:
    # bool is an int subclass in Python; a JSON true is not a step number
    if isinstance(value, bool) or not isinstance(value, int):
        raise ReportError(f"{key}: expected an integer, got {type(value).__name__}")
    return check_int64(key, value)  # every integer of a report lands in a BIGINT column


def _finite(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportError(f"{key}: expected a finite number")
    return check_finite(key, value)


def _timestamp(value: Any, key: str) -> float:
    ts = _finite(value, key)
    if not 0.0 <= ts <= MAX_EPOCH_SECONDS:
        raise ReportError(f"{key}: {ts!r} is not a time (epoch seconds from 0 to {MAX_EPOCH_SECONDS:.0f})")
    return ts


def _non_negative(value: float, key: str) -> float:
    if value < 0:
        raise ReportError(f"{key}: must be >= 0")
    return value


def _status(doc: dict[str, Any]) -> str:
    status = doc.get("status", "running")
    if not isinstance(status, str) or status not in STATUSES:  # a list is not hashable: check the type
        raise ReportError(f"status: expected one of {sorted(STATUSES)}, got {str(status)[:40]!r}")
    return str(status)


def _list(doc: dict[str, Any], key: str, max_items: int) -> list[Any]:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise ReportError(f"{key}: expected a list")
    if len(value) > max_items:
        raise ReportError(f"{key}: at most {max_items} items, got {len(value)}")
    return value
