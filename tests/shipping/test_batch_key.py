"""batch_key: the (host, boot_id, seq) the NATS shipper names a message by, from either wire version's
compressed body; any other body is a ValueError, never another exception (the drain loop drops a batch on
BatchRefused, which it makes of a ValueError only)."""

from __future__ import annotations

import contextlib
import gzip
import zlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetguard.shipping.batch_key import batch_key
from fleetguard.shipping.wire import encode
from fleetguard.shipping.wire_v2 import encode_v2
from tests.controller.helpers import batch

HOSTS = st.text(min_size=1, max_size=200)
SEQS = st.integers(min_value=0, max_value=2**64 - 1)


@given(host=HOSTS, boot_id=st.text(max_size=200), seq=SEQS)
@settings(max_examples=200, deadline=None)
def test_a_v2_body_is_read_as_the_batch_it_names(host: str, boot_id: str, seq: int) -> None:
    try:
        body = encode_v2(batch(host, seq, boot_id=boot_id))
    except ValueError:  # a lone surrogate: such a batch goes as version 1
        return
    assert batch_key(body) == (host, boot_id, seq)


def test_each_wire_version_of_one_batch_has_the_same_key() -> None:
    b = batch('we"ird\\host.dc1', 2**40, boot_id="boot-\u00e9")
    assert batch_key(encode(b)) == batch_key(encode_v2(b)) == ('we"ird\\host.dc1', "boot-\u00e9", 2**40)


def _gz(raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0)  # the same bytes each run: they name the test cases


def _v2(doc: object) -> bytes:
    return _gz(msgspec.msgpack.encode(doc))


HEAD = {"v": 2, "host": "h", "boot_id": "b", "seq": 7}


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not gzip",
        _gz(b""),
        _gz(b"\x80"),  # an empty msgpack map
        _gz(b'{"v":1,"host":"\\ud800x","boot_id":"b","seq":1}'[:20]),
        _gz(b'{"v":1,"host":"\\u12","boot_id":"b","seq":1}'),  # a bad escape
        _v2([2, "h", "b", 7]),  # a list, not a map
        _v2({"v": 1, "host": "h", "boot_id": "b", "seq": 7}),  # version 1 in msgpack
        _v2({"host": "h", "v": 2, "boot_id": "b", "seq": 7}),  # out of order
        _v2({**HEAD, "seq": -1}),
        _v2({**HEAD, "seq": 7.0}),
        _v2({**HEAD, "host": b"h"}),  # bytes, not a string
        _v2({**HEAD, "host": 5}),
        _v2({"v": 2, "host": "h", "boot_id": "b"}),  # no seq
        _v2({**HEAD, "host": "x" * 5000}),  # past the head's prefix
        _gz(msgspec.msgpack.encode(HEAD)[:-1]),  # cut short
        _gz(b"\xdf\xff\xff\xff\xff\xa1v\x02\xa4host\xdb\xff\xff\xff\xffxx"),  # lengths past the end
        _gz(b"\x84\xa1v\x02\xa4host\xa1\xff\xa7boot_id\xa1b\xa3seq\x07"),  # not UTF-8
        encode_v2(batch("h", 1))[:30],  # a truncated gzip stream
    ],
)
def test_what_is_not_a_batch_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        batch_key(body)


@given(st.binary(max_size=400))
@settings(max_examples=500, deadline=None)
def test_any_inflated_bytes_give_a_key_or_a_value_error(raw: bytes) -> None:
    for body in (gzip.compress(raw), gzip.compress(b"\x84\xa1v\x02\xa4host" + raw)):
        with contextlib.suppress(ValueError):
            batch_key(body)


@given(st.integers(min_value=0, max_value=200), st.binary(min_size=1, max_size=8))
@settings(max_examples=300, deadline=None)
def test_a_damaged_v2_body_gives_a_key_or_a_value_error(at: int, junk: bytes) -> None:
    raw = zlib.decompress(encode_v2(batch("host-1", 9)), wbits=31)
    damaged = raw[:at] + junk + raw[at + len(junk) :]
    with contextlib.suppress(ValueError):
        batch_key(gzip.compress(damaged))
