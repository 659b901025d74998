"""Per-host tokens: only hashes on disk, in a file only its owner reads."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleetguard.controller import tokens
from fleetguard.controller.tokens import Identity, Role, TokenBook, TokenFileError, add_token, hash_token


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


def test_a_symlinked_tokens_file_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    add_token(real, "node-a")
    link = tmp_path / "tokens.json"
    link.symlink_to(real)
    with pytest.raises(TokenFileError, match="symbolic link"):
        TokenBook(link)


def test_a_tokens_file_other_users_can_write_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    add_token(path, "node-a")
    path.chmod(0o666)
    with pytest.raises(TokenFileError, match="readable by others"):
        TokenBook(path)


def test_a_tokens_file_made_writable_after_start_adds_no_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    good = add_token(path, "node-a")
    book = TokenBook(path)
    # Another user rewrites the now world-writable file with a token of their own.
    path.chmod(0o666)
    forged = "forged-token"
    path.write_text(json.dumps({"version": 1, "tokens": [{"host": "node-b", "sha256": hash_token(forged)}]}))
    assert book.identify(f"Bearer {forged}") is None
    assert book.identify(f"Bearer {good}") is not None  # the tokens read while the file was trusted


def test_a_tokens_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file away")
    path = tmp_path / "tokens.json"
    add_token(path, "node-a")
    os.chown(path, 65534, 65534)
    with pytest.raises(TokenFileError, match="belongs to uid 65534"):
        TokenBook(path)


def _frozen_monotonic(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """tokens' monotonic clock, held at the value in the list returned (the test moves it)."""
    now = [1000.0]
    monkeypatch.setattr(tokens, "time", SimpleNamespace(time=time.time, monotonic=lambda: now[0]))
    return now


def test_a_known_token_does_not_look_at_the_file_on_every_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = _frozen_monotonic(monkeypatch)
    path = tmp_path / "tokens.json"
    known = add_token(path, "node-a")
    book = TokenBook(path)
    looks: list[int] = []
    real = book.reload

    def counted() -> None:
        looks.append(1)
        real()

    monkeypatch.setattr(book, "reload", counted)
    for _ in range(200):
        assert book.identify(f"Bearer {known}") is not None
    assert len(looks) == 1, "one look for the first request, none for the 199 within the second"
    assert book.identify("Bearer not-a-token") is None
    assert len(looks) == 2, "a token not known makes it look at once"
    now[0] += tokens.RECHECK_SECONDS - 0.01
    assert book.identify(f"Bearer {known}") is not None
    assert len(looks) == 2
    now[0] += 0.01
    assert book.identify(f"Bearer {known}") is not None
    assert len(looks) == 3, "a second on, a known token looks again"


def test_a_revoked_token_stops_working_once_the_file_is_looked_at_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens, "RECHECK_SECONDS", 0.0)  # every request looks: the second has passed
    path = tmp_path / "tokens.json"
    old = add_token(path, "node-a")
    book = TokenBook(path)
    assert book.identify(f"Bearer {old}") is not None
    add_token(path, "node-a", replace=True)
    assert book.identify(f"Bearer {old}") is None


def test_known_answers_from_the_tokens_read_and_never_looks_at_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.json"
    agent = add_token(path, "node-a")
    book = TokenBook(path)
    looked: list[int] = []
    monkeypatch.setattr(book, "reload", lambda: looked.append(1))
    assert book.known(f"Bearer {agent}") is None, "a look at the file is due: ask identify"
    assert book.identify(f"Bearer {agent}") == Identity("node-a", Role.AGENT)
    assert looked == [1]
    assert book.known(f"Bearer {agent}") == Identity("node-a", Role.AGENT)
    assert book.known("Bearer not-a-token") is None and book.known(None) is None
    assert looked == [1], "known never looks at the file"


def test_while_a_due_look_at_the_file_is_under_way_known_still_says_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large tokens file being read after a rotation: the loop must not take a token it may revoke in
    # the meantime, so the second is not restarted until the look is done.
    now = _frozen_monotonic(monkeypatch)
    path = tmp_path / "tokens.json"
    agent = add_token(path, "node-a")
    book = TokenBook(path)
    assert book.identify(f"Bearer {agent}") is not None
    now[0] += tokens.RECHECK_SECONDS
    reading, finish = threading.Event(), threading.Event()
    real = book.reload

    def slow() -> None:
        reading.set()
        assert finish.wait(10)
        real()

    monkeypatch.setattr(book, "reload", slow)
    looking = threading.Thread(target=book.identify, args=(f"Bearer {agent}",))
    looking.start()
    try:
        assert reading.wait(10)
        assert book.known(f"Bearer {agent}") is None, "due until the look is done"
    finally:
        finish.set()
        looking.join(10)
    assert book.known(f"Bearer {agent}") == Identity("node-a", Role.AGENT)


def test_no_agent_token_is_made_for_the_name_fleet_wide_incidents_are_filed_under(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    add_token(path, "node-a")
    before = path.read_text()
    with pytest.raises(TokenFileError, match="reserved"):
        add_token(path, "fleet")
    with pytest.raises(TokenFileError, match="reserved"):  # provisioning: none of the batch is written
        tokens.add_tokens(path, ["node-b", "fleet"])
    assert path.read_text() == before
    assert tokens.add_tokens(path, ["node-b"]).keys() == {"node-b"}
