"""fleetguard.private_files: the agent's own small files, safe in a directory another user can write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetguard.private_files import UnsafeFileError, append_line, read_own_file, replace_file


def test_append_to_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "rejected.jsonl"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # with a reader the open itself would succeed
    try:
        with pytest.raises(UnsafeFileError, match="not a regular file"):
            append_line(fifo, "row")
    finally:
        os.close(reader)


def test_replace_leaves_no_temporary_file_and_the_owner_only_can_read(tmp_path: Path) -> None:
    target = tmp_path / "state"
    replace_file(target, b"one")
    replace_file(target, b"two")
    assert read_own_file(target) == b"two"
    assert os.listdir(tmp_path) == ["state"] and target.stat().st_mode & 0o077 == 0


def test_reading_a_link_or_an_oversized_file_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100)
    (tmp_path / "link").symlink_to(big)
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        read_own_file(tmp_path / "link")
    with pytest.raises(UnsafeFileError, match="larger"):
        read_own_file(big, max_bytes=10)
    with pytest.raises(FileNotFoundError):
        read_own_file(tmp_path / "missing")
