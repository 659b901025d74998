"""NATS passwords and creds come through the one secret-file reader; a creds file is read once, checked, and
handed to nats-py as text (nats-py would loop for ever on a creds text without a user JWT)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetguard.shipping.nats_connect import NatsSettingsError, make_login

CREDS = """-----BEGIN NATS USER JWT-----
eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln
------END NATS USER JWT------

-----BEGIN USER NKEY SEED-----
SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4
------END USER NKEY SEED------
"""


def private(path: Path, text: str, mode: int = 0o600) -> str:
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def test_a_private_creds_file_is_read_as_text(tmp_path: Path) -> None:
    login = make_login("agent", "nats://127.0.0.1:4222", "", "", private(tmp_path / "h.creds", CREDS), "h")
    assert login.creds == CREDS.strip() and "SUAIB" not in repr(login)


def test_a_password_file_others_can_read_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = private(tmp_path / "pw", "s3cret\n", 0o644)
    with pytest.raises(NatsSettingsError) as err:
        make_login("controller", "nats://127.0.0.1:4222", "ctl", path, "")
    assert str(err.value) == (
        f"controller.nats_password_file: {path} is readable by others (mode 0644); chmod 600 {path}"
    )


def test_a_creds_link_or_a_file_that_is_not_creds_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "link.creds"
    link.symlink_to(private(tmp_path / "real.creds", CREDS))
    with pytest.raises(NatsSettingsError, match=r"^agent\.nats_creds_file: .* is a symbolic link"):
        make_login("agent", "nats://127.0.0.1:4222", "", "", str(link))
    with pytest.raises(NatsSettingsError, match="not a NATS creds file"):
        make_login("agent", "nats://127.0.0.1:4222", "", "", private(tmp_path / "x.creds", "just text\n"))
    with pytest.raises(NatsSettingsError, match="does not exist"):
        make_login("agent", "nats://127.0.0.1:4222", "", "", str(tmp_path / "missing.creds"))
