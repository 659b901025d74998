"""Start-up failures as operators see them: one line naming the key, path or port, and a non-zero exit.

Light on purpose (the CLI imports it before anything heavy)."""

from __future__ import annotations

import os


class StartupError(Exception):
    """A daemon cannot start. The message is one line naming the key, path or port at fault."""


def one_line(text: str) -> str:
    """An error message as one line (DuckDB's span several)."""
    return " ".join(text.split())


def os_reason(exc: OSError) -> str:
    """What the system said ("Address already in use"), without the call's own decoration."""
    return os.strerror(exc.errno) if exc.errno else one_line(str(exc))
