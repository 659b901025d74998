"""Subject names, message ids and the NATS config checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetguard.config import ConfigError, load_config
from fleetguard.shipping.batch_key import batch_key
from fleetguard.shipping.nats_subjects import (
    host_from_subject,
    host_token,
    msg_id,
    msg_id_is_publishers,
    subject_for,
)
from fleetguard.shipping.wire import encode
from tests.controller.helpers import batch


@given(st.text(min_size=1, max_size=80))
def test_any_host_name_is_one_subject_token_and_back(host: str) -> None:
    subject = subject_for("red", host)
    assert subject.count(".") == 2
    assert not any(c in host_token(host) for c in " *>\t\r\n")
    assert host_from_subject(subject, "red") == host
    assert host_from_subject(subject, "blue") is None


def test_fqdn_hosts_do_not_split_the_subject() -> None:
    assert subject_for("red", "gpu-01.dc1.example.com") == "fleetguard.red.gpu-01%2Edc1%2Eexample%2Ecom"
    assert host_from_subject("fleetguard.red.a.b", "red") is None
    assert host_from_subject("other.red.a", "red") is None


def test_batch_key_reads_host_boot_and_seq_from_the_compressed_body() -> None:
    b = batch('we"ird\\host', 42, boot_id="boot-7")
    assert batch_key(encode(b)) == ('we"ird\\host', "boot-7", 42)
    with pytest.raises(ValueError):
        batch_key(b"\x1f\x8b" + b"\x00" * 20)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"agent.transport": "carrier-pigeon"}, "agent.transport"),
        ({"agent.transport": "nats"}, "agent.nats_url: required"),
        ({"agent.transport": "nats", "agent.nats_url": "http://x:4222"}, "agent.nats_url"),
        ({"agent.transport": "nats", "agent.nats_url": "nats://u:p@x:4222"}, "not the URL"),
        ({"agent.pool": "a.b"}, "agent.pool"),
        ({"controller.pool": "red"}, "controller.nats_url: required"),
        ({"controller.nats_url": "nats://x:4222"}, "controller.pool"),
        (
            {"controller.pool": "red", "controller.nats_url": "nats://x", "controller.nats_stream": "a b"},
            "stream",
        ),
        (
            {"controller.pool": "red", "controller.nats_url": "nats://x", "controller.nats_wire": 3},
            "controller.nats_wire",
        ),
    ],
)
def test_unusable_nats_settings_are_refused_naming_the_key(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides)


def test_usable_nats_settings_load() -> None:
    config = load_config(
        overrides={
            "agent.transport": "nats",
            "agent.nats_url": "nats://a:4222, tls://b:4222",
            "agent.pool": "red",
        }
    )
    assert config.agent.transport == "nats"


def test_a_message_id_is_its_publishers_only_when_it_names_its_subject_and_batch() -> None:
    a1, a2 = subject_for("red", "a1"), subject_for("red", "a2")
    ok = msg_id_is_publishers
    assert ok(msg_id(a1, "boot", 7), a1, "a1", "boot", 7)
    assert ok(msg_id(a1, "boot", 7, "0123abcd"), a1, "a1", "boot", 7)  # a retry after "duplicate"
    assert ok("a1/boot/7", a1, "a1", "boot", 7)  # as earlier agents wrote it
    assert ok(None, a1, "a1", "boot", 7)
    # a2's subject carrying ids that would suppress a1's batch in the stream's duplicate window
    assert not ok(msg_id(a1, "boot", 7), a2, "a2", "boot", 7)
    assert not ok("a1/boot/7", a2, "a2", "boot", 7)
    # its own subject, another batch's id (a later seq, another incarnation), or a retry that is not a nonce
    assert not ok(msg_id(a1, "boot", 8), a1, "a1", "boot", 7)
    assert not ok(msg_id(a1, "other", 7), a1, "a1", "boot", 7)
    assert not ok(msg_id(a1, "boot", 7) + "/x/y", a1, "a1", "boot", 7)
