"""NCCL and PyTorch-distributed error lines from training logs, parsed and classified. Pure functions.

NCCL prefixes its debug lines (NCCL_DEBUG=WARN/INFO) with ``host:pid:tid [cudaDev]``, optionally a source
location, then ``NCCL <LEVEL>``; NCCL >= 2.23 can put a ``[YYYY-MM-DD HH:MM:SS]`` timestamp in front. The
bracketed number is the CUDA device of the process, not its rank. PyTorch error lines carry ``[rankN]:``.

Only WARN and worse NCCL lines are classified (INFO lines such as ``transport/net.cc:1302 -> 6`` only trace
the error back up the stack). Lines without an NCCL prefix are classified only by the PyTorch phrases for an
NCCL system error, a remote error and a watchdog timeout, so a framework exception quoting "Last error:
NET/IB : Got completion ..." counts as the remote error it reports, and the NCCL WARN line above it as the
completion error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Final

MAX_LINE_CHARS: Final = 4096

# Categories (NcclFault.category) and what Event.code means for each.
IB_COMPLETION_ERROR: Final = "ib_completion_error"  # code = ibv_wc_status (12 = transport retry exceeded)
IB_ASYNC_EVENT: Final = "ib_async_event"  # code None
IBV_CALL_FAILED: Final = "ibv_call_failed"  # code = errno when printed
SOCKET_ERROR: Final = "socket_error"  # code None
SYSTEM_ERROR: Final = "system_error"  # code = 2 (ncclSystemError)
REMOTE_ERROR: Final = "remote_error"  # code = 6 (ncclRemoteError)
COLLECTIVE_TIMEOUT: Final = "collective_timeout"  # code None

NCCL_SYSTEM_ERROR: Final = 2
NCCL_REMOTE_ERROR: Final = 6
IBV_WC_RETRY_EXC_ERR: Final = 12  # transport retry counter exceeded: ~30 s of retries with NCCL defaults

_SEVERE_LEVELS: Final = frozenset({"WARN", "ERROR", "ABORT"})


@dataclass(frozen=True, slots=True)
class NcclLine:
    """One log line that NCCL or PyTorch-distributed wrote; fields are None where the line does not say."""

    message: str  # after "NCCL <LEVEL> ", or the whole line for lines without an NCCL prefix
    level: str | None = None  # WARN, INFO, ...
    host: str | None = None
    pid: int | None = None
    tid: int | None = None
    cuda_device: int | None = None
    rank: int | None = None  # from PyTorch's "[rankN]:" prefix
    location: str | None = None  # NCCL source location, e.g. transport/net_ib.cc:1295
    ts: float | None = None  # from an NCCL_DEBUG_TIMESTAMP_FORMAT prefix


@dataclass(frozen=True, slots=True)
class NcclFault:
    category: str
    code: int | None = None
    hca: str | None = None  # "mlx5_0:1" when the line names the IB device and port
    peer: str | None = None  # "10.0.0.7<port>" for completion errors


_PREFIX = re.compile(
    r"(?:\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:\.\d+)?\] )?"
    r"([\w.\-]{1,253}):(\d{1,10}):(\d{1,10}) \[(\d{1,4})\] (?:([\w./\-]{1,200}:\d{1,7}) )?NCCL ([A-Z]{4,5}) ?"
)
_RANK = re.compile(r"\[rank(\d{1,9})\]")
_COMPLETION = re.compile(
    r"Got completion from peer (\S{1,300}?)<(\d{1,5})> with (?:status=|error )(\d{1,5})"
    r"(?:.*? hca (\S{1,64}))?"
)
_ASYNC = re.compile(r"NET/IB ?: ?(?:(\w[\w.\-]{0,63}):(\d{1,3}) )?(?:async fatal event|Got async event)")
_IBV_CALL = re.compile(r"Call to (ibv_\w{1,64}) failed(?: with (?:error )?(\d{1,5}))?")
_SOCKET = re.compile(
    r"Call to (?:recv|send|connect|accept)\b.{0,300}? failed|Connection closed by remote peer"
)
_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout")


def parse_nccl_line(line: str, tz: tzinfo | None = None) -> NcclLine:
    """Split one log line into its NCCL prefix fields and message; any text is accepted."""
    line = line[:MAX_LINE_CHARS].rstrip("\r\n")
    rank_match = _RANK.search(line, 0, 200)
    rank = int(rank_match.group(1)) if rank_match else None
    if "NCCL" not in line:
        return NcclLine(message=line.strip(), rank=rank)
    prefix = _PREFIX.search(line)
    if prefix is None:
        return NcclLine(message=line.strip(), rank=rank)
    ts: float | None = None
    if prefix.group(1):
        ts = _local_time(prefix.group(1), tz)
    return NcclLine(
        message=line[prefix.end() :].strip(),
        level=prefix.group(7),
        host=prefix.group(2),
        pid=int(prefix.group(3)),
        tid=int(prefix.group(4)),
        cuda_device=int(prefix.group(5)),
        rank=rank,
        location=prefix.group(6),
        ts=ts,
    )


def classify_nccl_line(line: NcclLine) -> NcclFault | None:
    """The NCCL fault a line reports, or None (INFO lines, unrelated output)."""
    if line.level is None:
        return _classify_framework(line.message)
    if line.level not in _SEVERE_LEVELS:
        return None
    return classify_nccl_message(line.message)


def classify_nccl_message(message: str) -> NcclFault | None:
    """Classify the text of an NCCL WARN line (after ``NCCL WARN``)."""
    message = message[:MAX_LINE_CHARS]
    if "completion" in message:
        completion = _COMPLETION.search(message)
        if completion is not None:
            return NcclFault(
                IB_COMPLETION_ERROR,
                code=int(completion.group(3)),
                hca=completion.group(4),
                peer=f"{completion.group(1)}<{completion.group(2)}>",
            )
    if "async" in message:
        event = _ASYNC.search(message)
        if event is not None:
            hca = f"{event.group(1)}:{event.group(2)}" if event.group(1) else None
            return NcclFault(IB_ASYNC_EVENT, hca=hca)
    if "ibv_" in message:
        call = _IBV_CALL.search(message)
        if call is not None:
            return NcclFault(IBV_CALL_FAILED, code=int(call.group(2)) if call.group(2) else None)
    if _SOCKET.search(message):
        return NcclFault(SOCKET_ERROR)
    return _classify_framework(message)


def _classify_framework(message: str) -> NcclFault | None:
    if "unhandled system error" in message:
        return NcclFault(SYSTEM_ERROR, code=NCCL_SYSTEM_ERROR)
    if "remote process exited or there was a network error" in message:
        return NcclFault(REMOTE_ERROR, code=NCCL_REMOTE_ERROR)
    if _TIMEOUT.search(message):
        return NcclFault(COLLECTIVE_TIMEOUT)
    return None


def _local_time(text: str, tz: tzinfo | None) -> float | None:
    try:
        naive = datetime.strptime(text.replace("T", " "), "%Y-%m-%d %H:%M:%S")
        return (naive.replace(tzinfo=tz) if tz is not None else naive.astimezone()).timestamp()
    except (ValueError, OverflowError, OSError):  # impossible dates, or years 1 / 9999 moved across zones
        return None
