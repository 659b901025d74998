"""Kernel-log line forms: raw /dev/kmsg, plain dmesg, dmesg -T, dmesg --time-format=iso, with --decode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from collectors.kmsg_parse import (
    FORM_DMESG,
    FORM_DMESG_CTIME,
    FORM_DMESG_ISO,
    FORM_KMSG,
    KernelLine,
    Unparsed,
    parse_kernel_line,
    parse_kmsg_record,
)


def _epoch(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()  # type: ignore[misc,arg-type]


def test_raw_kmsg_record_gives_level_facility_sequence_and_uptime() -> None:
    line = parse_kernel_line("4,3964,206764307,-;NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, t")
    assert line == KernelLine(
        message="NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, t",
        form=FORM_KMSG,
        uptime_seconds=206.764307,
        level=4,
        facility=0,
        seq=3964,
    )


def test_raw_kmsg_priority_splits_into_facility_and_level() -> None:
    line = parse_kernel_line("14,100,5,-;user space message")  # facility 1 (user), level 6 (info)
    assert isinstance(line, KernelLine)
    assert (line.facility, line.level) == (1, 6)


def test_raw_kmsg_header_may_carry_extra_fields_after_the_flags() -> None:
    line = parse_kernel_line("6,339,5140900,-,caller=T1;random: crng init done")
    assert isinstance(line, KernelLine)
    assert (line.seq, line.message) == (339, "random: crng init done")


def test_raw_kmsg_message_may_contain_semicolons() -> None:
    line = parse_kernel_line("6,1,2,-;a; b; c")
    assert isinstance(line, KernelLine)
    assert line.message == "a; b; c"


def test_kmsg_dictionary_continuation_lines_are_skipped_not_counted() -> None:
    assert parse_kernel_line(" SUBSYSTEM=pci") is None
    assert parse_kernel_line(" DEVICE=+pci:0000:00:01.0") is None


def test_blank_lines_are_skipped() -> None:
    assert parse_kernel_line("") is None
    assert parse_kernel_line("\n") is None


def test_raw_kmsg_with_unknown_flag_is_a_bad_header() -> None:
    assert parse_kernel_line("6,1,2,X;message") == Unparsed("bad_kmsg_header")


def test_plain_dmesg_gives_seconds_since_boot() -> None:
    line = parse_kernel_line("[  227.996636] NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003")
    assert line == KernelLine(
        message="NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003", form=FORM_DMESG, uptime_seconds=227.996636
    )


def test_dmesg_ctime_is_read_in_the_given_zone() -> None:
    line = parse_kernel_line("[Sun Feb 23 16:24:18 2025] hello", tz=UTC)
    assert line == KernelLine(message="hello", form=FORM_DMESG_CTIME, ts=_epoch(2025, 2, 23, 16, 24, 18))


def test_dmesg_ctime_in_another_zone_shifts_the_epoch() -> None:
    plus_two = timezone(timedelta(hours=2))
    line = parse_kernel_line("[Sun Feb 23 16:24:18 2025] hello", tz=plus_two)
    assert isinstance(line, KernelLine)
    assert line.ts == _epoch(2025, 2, 23, 14, 24, 18)


def test_dmesg_ctime_accepts_a_space_padded_day() -> None:
    line = parse_kernel_line("[Sun Feb  2 03:04:05 2025] x", tz=UTC)
    assert isinstance(line, KernelLine)
    assert line.ts == _epoch(2025, 2, 2, 3, 4, 5)


def test_dmesg_ctime_with_an_impossible_date_is_a_bad_timestamp() -> None:
    assert parse_kernel_line("[Sun Feb 31 03:04:05 2025] x", tz=UTC) == Unparsed("bad_timestamp")


def test_dmesg_iso_with_decode_prefix_gives_wall_time_facility_and_level() -> None:
    line = parse_kernel_line("kern  :warn  : 2025-01-21T04:41:44,285060+00:00 NVRM: something")
    assert line == KernelLine(
        message="NVRM: something",
        form=FORM_DMESG_ISO,
        ts=_epoch(2025, 1, 21, 4, 41, 44) + 0.285060,
        level=4,
        facility=0,
    )


def test_dmesg_iso_without_decode_prefix() -> None:
    line = parse_kernel_line("2025-01-21T04:41:44,285060+01:00 hi")
    assert isinstance(line, KernelLine)
    assert line.ts == pytest.approx(_epoch(2025, 1, 21, 3, 41, 44) + 0.28506)
    assert line.level is None


@pytest.mark.parametrize(
    "stamp", ["2025-01-21T04:41:44+0000", "2025-01-21T04:41:44Z", "2025-01-21T04:41:44.0+00:00"]
)
def test_dmesg_iso_offset_spellings(stamp: str) -> None:
    line = parse_kernel_line(f"{stamp} hi")
    assert isinstance(line, KernelLine)
    assert line.ts == _epoch(2025, 1, 21, 4, 41, 44)


def test_dmesg_iso_with_nanoseconds_is_truncated_to_microseconds() -> None:
    line = parse_kernel_line("2025-01-21T04:41:44.123456789+00:00 hi")
    assert isinstance(line, KernelLine)
    assert line.ts == pytest.approx(_epoch(2025, 1, 21, 4, 41, 44) + 0.123456)


def test_decode_prefix_also_fronts_plain_uptime() -> None:
    line = parse_kernel_line("kern  :err   : [  228.000001] pcieport 0000:00:1c.0: AER: x")
    assert isinstance(line, KernelLine)
    assert (line.form, line.level, line.uptime_seconds) == (FORM_DMESG, 3, 228.000001)


def test_decode_prefix_with_unknown_level_is_unparsed() -> None:
    assert parse_kernel_line("kern  :loud  : [  1.0] x") == Unparsed("bad_decode_prefix")


@pytest.mark.parametrize(
    "garbage", ["hello world", "]]]", "12345", "<6>message", "Feb 23 16:24:18 host kernel: x"]
)
def test_lines_in_no_known_form_are_unknown_format(garbage: str) -> None:
    assert parse_kernel_line(garbage) == Unparsed("unknown_format")


def test_trailing_newline_and_carriage_return_are_not_part_of_the_message() -> None:
    line = parse_kernel_line("[    1.5] msg\r\n")
    assert isinstance(line, KernelLine)
    assert line.message == "msg"


@pytest.mark.parametrize(
    "line",
    [
        "4,3964,206764307,-;NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=x, t",
        "6,3961,206200002,-,caller=T1;nvidia-nvlink: Nvlink Core is being initialized",
        "4,12,5,c;a message; with a semicolon\r\n",
        "4,12,5,+;",
        "4,12,5,x;bad flags",
        "4,9223372036854775808,5,-;sequence past BIGINT",
        "4,9223372036854775807,5,-;the largest sequence a BIGINT holds",
        " SUBSYSTEM=pci",
        "",
        "[  227.996636] NVRM: Xid (PCI:0000:9b:00): 79, pid=7, name=p, GPU has fallen off the bus.",
        "2025-01-21T04:41:44,285060+00:00 kernel line",
        "12,34 not a header; at all",
    ],
)
def test_the_raw_record_shortcut_agrees_with_the_general_parser(line: str) -> None:
    """parse_kmsg_record (the collector's storm path) takes only well-formed raw records, and for those
    gives what parse_kernel_line gives."""
    record = parse_kmsg_record(line)
    parsed = parse_kernel_line(line)
    if record is None:
        assert not (isinstance(parsed, KernelLine) and parsed.form == FORM_KMSG)
        return
    assert isinstance(parsed, KernelLine)
    assert record == (parsed.seq, parsed.uptime_seconds, parsed.message)
