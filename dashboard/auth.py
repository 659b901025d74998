"""The operator token: write actions (acknowledge, silence, resolve) need it; reads never do."""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Final

MIN_TOKEN_CHARS: Final = 16


class TokenFileError(Exception):
    """The configured token file cannot be used; the message says which file and why."""


def read_operator_token(path: str) -> str | None:
    """The token in `path` (first line, stripped); None when no file is configured: read-only dashboard."""
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"dashboard.operator_token_file {path}: cannot read it: {exc}") from exc
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
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
