"""The operator token: write actions (acknowledge, silence, resolve) need it; reads never do."""

from __future__ import annotations

import hmac
from typing import Final

from fleetguard.secret_files import SecretFileError, read_secret_text

MIN_TOKEN_CHARS: Final = 16


class TokenFileError(Exception):
    """The configured token file cannot be used; the message says which file and why."""


def read_operator_token(path: str) -> str | None:
    """The token in `path` (first line, stripped); None when no file is configured: read-only dashboard."""
    if not path:
        return None
    try:
        text = read_secret_text("dashboard.operator_token_file", path, 4096)
    except SecretFileError as exc:
        raise TokenFileError(str(exc)) from exc
    token = text.splitlines()[0].strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenFileError(
            f"dashboard.operator_token_file {path}: the token must be at least {MIN_TOKEN_CHARS} characters"
        )
    return token


def token_accepted(expected: str | None, given: object) -> bool:
    """Constant-time comparison; no configured token refuses everything."""
    if expected is None or not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.strip().encode())
