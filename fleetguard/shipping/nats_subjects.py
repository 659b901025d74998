"""Names on the NATS side of shipping (docs/scale-out.md): subjects and message ids.

A host publishes to `fleetguard.<pool>.<host token>`; NATS permissions let it publish there only, so the
subject is the host's authenticated identity, as the bearer token is over HTTP. A host name may hold dots
(FQDNs), which split NATS subjects, so the token escapes every character outside [A-Za-z0-9_-] as %XX of
its UTF-8 bytes: one host, one token, and back.
"""

from __future__ import annotations

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


def msg_id(host: str, boot_id: str, seq: int) -> str:
    """JetStream drops a message whose id it has seen inside the stream's duplicate window."""
    return f"{host}/{boot_id}/{seq}"
