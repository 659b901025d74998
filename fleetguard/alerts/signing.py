"""Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
MAX_SECRET_FILE_BYTES = 4096


class SecretError(Exception):
    """The secret file is missing, unreadable or malformed; the message names the file."""


def read_secret_text(path: str) -> str:
    source = Path(path)
    try:
        with source.open("rb") as fh:
            data = fh.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise SecretError(f"cannot read secret file {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise SecretError(f"secret file {path} is larger than {MAX_SECRET_FILE_BYTES} bytes")
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise SecretError(f"secret file {path} is not ASCII text") from exc
    if not text:
        raise SecretError(f"secret file {path} is empty")
    return text


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
