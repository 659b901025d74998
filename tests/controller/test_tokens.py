"""Per-host tokens: only hashes on disk, in a file only its owner reads."""

from __future__ import annotations

import stat
from pathlib import Path

from fleetguard.controller.tokens import Role, TokenBook, add_token


def test_the_file_holds_only_hashes_and_is_0600(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    token = add_token(path, "node-a")
    assert token not in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_token_identifies_its_host_and_role(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    agent = add_token(path, "node-a")
    operator = add_token(path, "*", Role.OPERATOR)
    book = TokenBook(path)
    identity = book.identify(f"Bearer {agent}")
    assert identity is not None and (identity.host, identity.role) == ("node-a", Role.AGENT)
    op = book.identify(f"Bearer {operator}")
    assert op is not None and op.role is Role.OPERATOR
    assert book.identify("Bearer nope") is None
    assert book.identify(agent) is None  # no scheme
    assert book.identify(None) is None


def test_a_new_token_takes_effect_without_a_restart_and_replace_revokes_the_old(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    old = add_token(path, "node-a")
    book = TokenBook(path)
    new = add_token(path, "node-a", replace=True)
    assert book.identify(f"Bearer {new}") is not None
    assert book.identify(f"Bearer {old}") is None
