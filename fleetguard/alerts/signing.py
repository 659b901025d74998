"""Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`."""

from __future__ import annotations

import base64
import hashlib
import hmac

from fleetguard import secret_files

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
MAX_SECRET_FILE_BYTES = 4096


class SecretError(Exception):
    """The secret file is missing, unreadable or malformed; the message names the file."""


def read_secret_text(path: str, key: str = "alerts.webhooks[].secret_file") -> str:
    """The secret in `path`, read through the project's one secret-file reader (no link, this user's or
    root's, closed to group/other); `key` names the setting in the refusal."""
    try:
        return secret_files.read_secret_text(key, path, MAX_SECRET_FILE_BYTES)
    except secret_files.SecretFileError as exc:
        raise SecretError(str(exc)) from exc


def signing_key(secret: str) -> bytes:
    """The HMAC key of a `whsec_<base64>` secret (Standard Webhooks); any other text is used as it is."""
    if secret.startswith(SECRET_PREFIX):
        try:
            return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
        except ValueError as exc:
            raise SecretError("a whsec_ secret must be base64 after the prefix") from exc
    return secret.encode()


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(key: bytes, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(key, msg_id, timestamp, body),
    }
