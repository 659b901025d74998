"""What an agent takes from its pool's wire advertisement: the versions of a well-formed one, bounded; None
(version 1) for anything else it finds in the bucket (hostile or stale data never raises)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetguard.shipping.wire_advert import MAX_ADVERT_BYTES, advert_bytes, parse_advert


def test_a_controllers_advertisement_reads_back_as_its_versions() -> None:
    assert parse_advert(advert_bytes([1, 2])) == [1, 2]
    assert parse_advert(advert_bytes([1])) == [1]


@pytest.mark.parametrize(
    "data",
    [
        None,
        "text, not bytes",
        b"",
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",  # the list without its object
        b'{"wire": 2}',
        b'{"wire": "1,2"}',
        b'{"wire": [1, "2"]}',
        b'{"wire": [1, true]}',  # a bool is not a version
        b'{"wire": [1, 2.0]}',
        b'{"wire": [' + b"1," * 20 + b"2]}",  # more versions than there will ever be
        b'{"wire": [1, 2], "pad": "' + b"x" * MAX_ADVERT_BYTES + b'"}',  # too large to read
        b'{"wire": ' + b"[" * 90 + b"]}",  # nests
        b"[" * 200,
    ],
)
def test_anything_else_is_no_advertisement(data: object) -> None:
    assert parse_advert(data) is None


@given(
    st.binary(max_size=300)
    | st.builds(
        lambda v: json.dumps({"wire": v}).encode(),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
            lambda inner: (
                st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
            ),
            max_leaves=20,
        ),
    )
)
@settings(max_examples=300, deadline=None)
def test_any_bytes_give_a_list_of_ints_or_none(data: bytes) -> None:
    got = parse_advert(data)
    assert got is None or (isinstance(got, list) and all(type(v) is int for v in got))
