"""The ingest edge: every value checked against its column before the writer sees it."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from fleetguard.controller.validate import BatchRefused, Refusal, decompress, parse_batch
from tests.controller.helpers import batch


def _doc(**changes: Any) -> dict[str, Any]:
    doc = batch("node-a", 1).to_json()
    doc.update(changes)
    return doc


def _refusal(doc: dict[str, Any], host: str = "node-a") -> Refusal:
    with pytest.raises(BatchRefused) as caught:
        parse_batch(json.dumps(doc).encode(), host, compressed=False)
    return caught.value.reason


def test_a_good_batch_passes_with_its_row_count() -> None:
    checked = parse_batch(gzip.compress(json.dumps(_doc()).encode()), "node-a")
    assert (checked.host, checked.boot_id, checked.seq, checked.rows) == ("node-a", "boot-1", 1, 3)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("gpu_index", 2**63),
        ("gpu_index", True),
        ("gpu_index", "3"),
        ("gpu_index", 1.5),
        ("utilization_gpu_percent", "50"),
        ("ts", 10**12),
        ("ts", -1.0),
        ("uuid", "\ud800"),
        ("uuid", "x" * 70_000),
    ],
)
def test_a_value_its_column_cannot_hold_is_refused(column: str, value: object) -> None:
    doc = _doc()
    doc["tables"]["gpu_samples"][column][0] = value
    assert _refusal(doc) is Refusal.INVALID_VALUE


def test_nan_is_refused_even_though_python_json_reads_it() -> None:
    text = json.dumps(_doc()).replace('"utilization_gpu_percent": [50.0', '"utilization_gpu_percent": [NaN')
    with pytest.raises(BatchRefused) as caught:
        parse_batch(text.encode(), "node-a", compressed=False)
    assert caught.value.reason is Refusal.INVALID_VALUE


def test_an_unsigned_counter_may_use_the_whole_uint64_range_but_not_more() -> None:
    doc = _doc()
    doc["tables"]["nic_counters"]["value"][0] = 2**64 - 1
    parse_batch(json.dumps(doc).encode(), "node-a", compressed=False)
    doc["tables"]["nic_counters"]["value"][0] = 2**64
    assert _refusal(doc) is Refusal.INVALID_VALUE


def test_null_in_a_not_null_column_is_refused() -> None:
    doc = _doc()
    doc["tables"]["gpu_samples"]["uuid"][0] = None
    assert _refusal(doc) is Refusal.INVALID_VALUE


def test_shape_errors_are_malformed() -> None:
    doc = _doc()
    doc["tables"]["gpu_samples"]["gpu_index"].append(3)  # one column longer than the others
    assert _refusal(doc) is Refusal.MALFORMED
    assert _refusal(_doc(extra=1)) is Refusal.MALFORMED
    assert _refusal(_doc(v=2)) is Refusal.MALFORMED
    doc = _doc()
    doc["tables"]["gpu_samples"]["no_such_column"] = [1, 2]
    assert _refusal(doc) is Refusal.MALFORMED
    doc = _doc()
    del doc["tables"]["gpu_samples"]["uuid"]
    assert _refusal(doc) is Refusal.MALFORMED


def test_sequence_numbers_start_at_one_and_fit_bigint() -> None:
    assert _refusal(_doc(seq=0)) is Refusal.INVALID_VALUE
    assert _refusal(_doc(seq=2**63)) is Refusal.INVALID_VALUE


def test_a_batch_for_another_host_is_wrong_host() -> None:
    assert _refusal(_doc(), host="node-b") is Refusal.WRONG_HOST


def test_decompression_stops_at_its_limit_without_inflating_everything() -> None:
    bomb = gzip.compress(b"\0" * (4 << 20))
    with pytest.raises(BatchRefused) as caught:
        decompress(bomb, limit=1 << 20)
    assert caught.value.reason is Refusal.TOO_LARGE
    with pytest.raises(BatchRefused):
        decompress(gzip.compress(b"{}")[:-3])


def test_times_past_the_controllers_clock_plus_an_hour_are_refused_when_it_gives_its_clock() -> None:
    doc = _doc()
    now = doc["sent_ts"]
    body = json.dumps(doc).encode()
    assert parse_batch(body, "node-a", compressed=False, now=now).seq == 1
    ahead = json.dumps(_doc(sent_ts=now + 7200)).encode()
    with pytest.raises(BatchRefused) as caught:
        parse_batch(ahead, "node-a", compressed=False, now=now)
    assert caught.value.reason is Refusal.INVALID_VALUE
    doc = _doc()
    doc["tables"]["gpu_samples"]["ts"] = [now + 86400 * 365] * len(doc["tables"]["gpu_samples"]["ts"])
    with pytest.raises(BatchRefused):
        parse_batch(json.dumps(doc).encode(), "node-a", compressed=False, now=now)


def test_a_lone_surrogate_anywhere_in_the_batch_is_refused_before_it_reaches_the_writer() -> None:
    # not only in a text column: a command's acknowledgement is stored too (its detail is free text)
    ack = {"id": "cmd-1", "outcome": "done", "detail": "killed \ud800"}
    assert _refusal(_doc(acks=[ack])) is Refusal.MALFORMED
