"""Kernel-log lines in any of the forms a host produces, parsed into one record: time, level, sequence, text.

Forms, detected per line:
- raw /dev/kmsg: ``6,3973,227996636,-;message`` (PRIORITY,SEQ,USEC_SINCE_BOOT,FLAGS[,...];MESSAGE); dictionary
  continuation lines (`` SUBSYSTEM=pci``) start with a space and carry no message of their own;
- plain ``dmesg``: ``[  227.996636] message`` (seconds since boot);
- ``dmesg -T``: ``[Sun Feb 23 16:24:18 2025] message`` (local time of the host that printed it);
- ``dmesg --time-format=iso``: ``2025-01-21T04:41:44,285060+00:00 message``;
- any of the dmesg forms after a ``--decode`` prefix: ``kern  :warn  : ...``.
Pure functions: no clock, no files. A line that fits no form is an `Unparsed` with a reason, never an error.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Final

from fleetguard.records.bounds import INT64_MAX, SqlType, fits

LEVEL_NAMES: Final = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")
FACILITY_NAMES: Final = (
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news",
    "uucp", "cron", "authpriv", "ftp", "res0", "res1", "res2", "res3",
    "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
)  # fmt: skip

FORM_KMSG: Final = "kmsg"
FORM_DMESG: Final = "dmesg"
FORM_DMESG_CTIME: Final = "dmesg_ctime"
FORM_DMESG_ISO: Final = "dmesg_iso"


@dataclass(frozen=True, slots=True)
class KernelLine:
    """One kernel-log record. Exactly one of `ts` (wall clock) and `uptime_seconds` (since boot) is set."""

    message: str
    form: str  # FORM_* constant
    ts: float | None = None  # UTC epoch seconds, when the line carries wall time
    uptime_seconds: float | None = None  # seconds since boot, for raw kmsg and plain dmesg
    level: int | None = None  # syslog level 0 (emerg) .. 7 (debug), when the line says
    facility: int | None = None  # syslog facility 0 (kern) .., when the line says
    seq: int | None = None  # /dev/kmsg sequence number


@dataclass(frozen=True, slots=True)
class Unparsed:
    """A line that is not a kernel-log record in any known form; `reason` is the problem counter's name."""

    reason: str


_KMSG_HEADER = re.compile(r"(\d{1,10}),(\d{1,20}),(\d{1,20}),([^,;]*)(?:,[^;]*)?;")
_DECODE_PREFIX = re.compile(r"([a-z0-9]{2,8})\s*:\s*([a-z]{3,6})\s*: ")
_UPTIME = re.compile(r"\[\s*(\d{1,12}\.\d{1,9})\] ?")
_CTIME = re.compile(r"\[[A-Z][a-z]{2} ([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\] ?")
_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_ISO = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[,.]\d{1,9})?(?:[+-]\d\d:?\d\d|Z)) ")


def parse_kernel_line(line: str, tz: tzinfo | None = None) -> KernelLine | Unparsed | None:
    """Parse one line in any supported form.

    Returns None for lines that carry nothing (blank, /dev/kmsg dictionary continuation). `tz` is the zone of
    ``dmesg -T`` times (which dmesg prints in the local zone of its host); None means this machine's zone.
    """
    line = line.rstrip("\r\n")
    if not line.strip():
        return None
    if line[0] in " \t":
        # /dev/kmsg dictionary entries (" SUBSYSTEM=pci"): metadata of the record above, not a record.
        return None
    if line[0].isdigit():
        header = _KMSG_HEADER.match(line)
        if header is not None:
            return _parse_kmsg(line, header)
        iso = _ISO.match(line)
        if iso is not None:
            return _parse_iso(line, iso, None, None)
        if "," in line.partition(";")[0] and ";" in line:
            return Unparsed("bad_kmsg_header")
        return Unparsed("unknown_format")
    facility: int | None = None
    level: int | None = None
    rest_start = 0
    decode = _DECODE_PREFIX.match(line)
    if decode is not None:
        facility = _index_or_none(FACILITY_NAMES, decode.group(1))
        level = _index_or_none(LEVEL_NAMES, decode.group(2))
        if facility is None or level is None:
            return Unparsed("bad_decode_prefix")
        rest_start = decode.end()
    uptime = _UPTIME.match(line, rest_start)
    if uptime is not None:
        return KernelLine(
            message=line[uptime.end() :],
            form=FORM_DMESG,
            uptime_seconds=float(uptime.group(1)),
            level=level,
            facility=facility,
        )
    ctime = _CTIME.match(line, rest_start)
    if ctime is not None:
        ts = _ctime_epoch(ctime.group(1, 2, 3, 4, 5, 6), tz)
        if ts is None:
            return Unparsed("bad_timestamp")
        return KernelLine(
            message=line[ctime.end() :],
            form=FORM_DMESG_CTIME,
            ts=ts,
            level=level,
            facility=facility,
        )
    iso = _ISO.match(line, rest_start)
    if iso is not None:
        return _parse_iso(line, iso, level, facility)
    return Unparsed("unknown_format")


_KMSG_FLAGS: Final = frozenset(("-", "c", "+", ""))


def parse_kmsg_record(line: str) -> tuple[int, float, str] | None:
    """A raw /dev/kmsg record as (sequence number, seconds since boot, message), without building a
    KernelLine: what the kernel-log collector needs of each line of a storm. None for anything that is not
    a well-formed raw record (then `parse_kernel_line` says what it is); for every line it does take, the
    answer is the one `parse_kernel_line` gives."""
    line = line.rstrip("\r\n")
    header = _KMSG_HEADER.match(line)
    if header is None or header.group(4) not in _KMSG_FLAGS:
        return None
    seq = int(header.group(2))
    if seq > INT64_MAX:  # as in _parse_kmsg: the stored column is BIGINT
        return None
    return seq, int(header.group(3)) / 1_000_000, line[header.end() :]


@functools.lru_cache(maxsize=4096)
def _ctime_epoch(fields: tuple[str, ...], tz: tzinfo | None) -> float | None:
    """("Feb", "23", "16", "24", "18", "2025") -> epoch seconds. Cached: a storm repeats the same second
    thousands of times, and building datetimes was most of the cost of a ``dmesg -T`` line."""
    month, day, hour, minute, second, year = fields
    if month not in _MONTHS:
        return None
    try:
        naive = datetime(int(year), _MONTHS.index(month) + 1, int(day), int(hour), int(minute), int(second))
        # Dates at the ends of the calendar overflow when moved to UTC (year 1 east of Greenwich).
        return (naive.replace(tzinfo=tz) if tz is not None else naive.astimezone()).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def _parse_kmsg(line: str, header: re.Match[str]) -> KernelLine | Unparsed:
    prival = int(header.group(1))
    flags = header.group(4)
    if flags not in _KMSG_FLAGS:
        return Unparsed("bad_kmsg_header")
    seq = int(header.group(2))
    if not fits(SqlType.BIGINT, seq):  # the kernel's u64 never gets there; the stored column is BIGINT
        return Unparsed("value_out_of_range")
    return KernelLine(
        message=line[header.end() :],
        form=FORM_KMSG,
        uptime_seconds=int(header.group(3)) / 1_000_000,
        level=prival & 7,
        facility=prival >> 3,
        seq=seq,
    )


def _parse_iso(
    line: str, iso: re.Match[str], level: int | None, facility: int | None
) -> KernelLine | Unparsed:
    text = iso.group(1).replace(",", ".")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    # fromisoformat takes at most 6 fraction digits; dmesg prints 6, other tools may print 9.
    text = re.sub(r"\.(\d{6})\d+", r".\1", text)
    try:
        ts = datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        return Unparsed("bad_timestamp")
    return KernelLine(message=line[iso.end() :], form=FORM_DMESG_ISO, ts=ts, level=level, facility=facility)


def _index_or_none(names: tuple[str, ...], name: str) -> int | None:
    try:
        return names.index(name)
    except ValueError:
        return None
