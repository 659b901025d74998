"""A store is written only where no other user can put a link in its place (the agent writes it as root)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetguard.store.store import Store, StoreError


def test_a_store_in_a_directory_others_can_write_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # world-writable, even with the sticky bit: another user can create the .wal link
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (shared / "fleetguard.duckdb.wal").symlink_to(victim)
    with pytest.raises(StoreError, match="writable by other users"):
        Store.open(shared / "fleetguard.duckdb")
    assert victim.read_text() == "precious"
    assert not (shared / "fleetguard.duckdb").exists()


def test_a_store_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "fleetguard.duckdb").symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link"):
        Store.open(tmp_path / "fleetguard.duckdb")
    assert victim.read_text() == "precious"


def test_a_directory_above_the_store_that_another_user_owns_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    home = tmp_path / "home"
    (home / "var").mkdir(parents=True)
    os.chown(home, 65534, 65534)  # the user could rename var/ away and put their own in its place
    with pytest.raises(StoreError, match="can be changed by another user"):
        Store.open(home / "var" / "fleetguard.duckdb")


def test_a_private_directory_takes_the_store(tmp_path: Path) -> None:
    with Store.open(tmp_path / "var" / "fleetguard.duckdb") as store:
        assert store.schema_version > 0


def test_the_agent_says_which_directory_in_one_line(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    fleetguard = Path(sys.executable).with_name("fleetguard")
    result = subprocess.run(
        [
            str(fleetguard),
            "agent",
            "--simulate",
            "1x1",
            "--duration",
            "5",
            "--metrics-port",
            "0",
            "--store",
            str(shared / "s.duckdb"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and str(shared) in lines[0] and "writable by other users" in lines[0], lines
