"""Names on the NATS side of shipping (docs/scale-out.md): subjects and message ids.

A host publishes to `fleetguard.<pool>.<host token>`; NATS permissions let it publish there only, so the
subject is the host's authenticated identity, as the bearer token is over HTTP. A host name may hold dots
(FQDNs), which split NATS subjects, so the token escapes every character outside [A-Za-z0-9_-] as %XX of
its UTF-8 bytes: one host, one token, and back.
"""

from __future__ import annotations

import re
import urllib.parse

SUBJECT_ROOT = "fleetguard"
MSG_ID_HEADER = "Nats-Msg-Id"
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def host_token(host: str) -> str:
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in host.encode())


def host_from_token(token: str) -> str:
    return urllib.parse.unquote(token, errors="strict")


def subject_for(pool: str, host: str) -> str:
    return f"{SUBJECT_ROOT}.{pool}.{host_token(host)}"


def pool_filter(pool: str) -> str:
    return f"{SUBJECT_ROOT}.{pool}.*"


def host_from_subject(subject: str, pool: str) -> str | None:
    """The host a message was published as, or None if the subject is not one of `pool`'s."""
    root, _, rest = subject.partition(".")
    got_pool, _, token = rest.partition(".")
    if root != SUBJECT_ROOT or got_pool != pool or not token or "." in token:
        return None
    try:
        return host_from_token(token)
    except UnicodeDecodeError:
        return None


def command_subject(pool: str, host: str) -> str:
    """Where the controller publishes `host`'s commands: four tokens, so no host's batch subject (three)
    is ever one, and the ingest stream (`fleetguard.*.*`) does not capture them."""
    return f"{SUBJECT_ROOT}.{pool}.cmd.{host_token(host)}"


def command_stream(pool: str) -> str:
    """The JetStream stream holding a pool's commands (created by its controller)."""
    return f"FLEETGUARD_CMD_{pool}"


def command_consumer(host: str) -> str:
    """The durable consumer, one per host, that the host pulls its commands from. NATS permissions let a
    host's user pull from and ack on this consumer only (docs/scale-out.md), so it reads no other host's
    commands. `%` is not special in consumer names; `.` `*` `>` (escaped by host_token) are."""
    return f"cmd-{host_token(host)}"


def advert_bucket(pool: str) -> str:
    """The key-value bucket where a pool's controller says which wire versions it reads
    (fleetguard.shipping.wire_advert); a pool name is a valid bucket name (config: A-Z a-z 0-9 _ -)."""
    return f"FLEETGUARD_CTL_{pool}"


def advert_stream(pool: str) -> str:
    """The JetStream stream that holds `advert_bucket(pool)` (nats-py and the server name it so)."""
    return f"KV_{advert_bucket(pool)}"


def advert_subject(pool: str, key: str) -> str:
    return f"$KV.{advert_bucket(pool)}.{key}"


def msg_id(subject: str, boot_id: str, seq: int, retry: str = "") -> str:
    """JetStream drops a message whose id it has seen inside the stream's duplicate window, whoever published
    it; so the id starts with the publisher's subject (the controller refuses one that names another) and a
    publish whose answer is "duplicate" is made again under a `retry` nonce nobody else can know
    (fleetguard.shipping.nats_shipper)."""
    base = f"{subject}/{boot_id}/{seq}"
    return f"{base}/{retry}" if retry else base


_RETRY = re.compile(r"[0-9a-f]{1,64}")


def msg_id_is_publishers(mid: str | None, subject: str, host: str, boot_id: str, seq: int) -> bool:
    """Whether a message's id is one its publisher (the host its subject names) may use for this batch: the
    batch's own subject/boot_id/seq (with a retry nonce or not), or host/boot_id/seq as earlier agents
    wrote it. Any other id could suppress another publisher's batch in the stream's duplicate window."""
    if mid is None:
        return True  # no id: the stream deduplicates nothing on it
    base = msg_id(subject, boot_id, seq)
    if mid == base or mid == f"{host}/{boot_id}/{seq}":
        return True
    head, _, retry = mid.rpartition("/")
    return head == base and _RETRY.fullmatch(retry) is not None
