"""The one secret-file reader: each refusal is one line naming the setting, the path and the fix."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fleetguard.secret_files import SecretFileError, read_secret_bytes, read_secret_text

KEY = "agent.nats_password_file"


def private(path: Path, text: str = "s3cret\n", mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_private_file_of_this_user_is_read_and_stripped(tmp_path: Path) -> None:
    assert read_secret_text(KEY, private(tmp_path / "pw", "  s3cret \n")) == "s3cret"
    assert read_secret_text(KEY, private(tmp_path / "ro", mode=0o400)) == "s3cret"


def test_a_link_is_refused_even_to_a_private_file(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(private(tmp_path / "target"))
    with pytest.raises(SecretFileError) as err:
        read_secret_text(KEY, link)
    assert str(err.value) == f"{KEY}: {link} is a symbolic link; refused (point {KEY} at the file itself)"


@pytest.mark.parametrize(
    ("mode", "what"),
    [
        (0o644, "readable"),
        (0o640, "readable"),
        (0o604, "readable"),
        (0o620, "writable"),
        (0o610, "executable"),
    ],
)
def test_any_group_or_other_bit_is_refused_with_the_chmod(tmp_path: Path, mode: int, what: str) -> None:
    path = private(tmp_path / "pw", mode=mode)
    with pytest.raises(SecretFileError) as err:
        read_secret_text(KEY, path)
    assert str(err.value) == f"{KEY}: {path} is {what} by others (mode {mode:04o}); chmod 600 {path}"


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(SecretFileError, match="not a regular file"):
        read_secret_text(KEY, fifo)


def test_missing_empty_binary_and_oversized_files_are_one_line_each(tmp_path: Path) -> None:
    cases = {
        tmp_path / "missing": "does not exist",
        private(tmp_path / "empty", "\n\n"): "is empty",
        private(tmp_path / "bin", "\u00e9t\u00e9"): "not ASCII",
        private(tmp_path / "ctl", "a\x1bb"): "control characters",
        private(tmp_path / "big", "x" * 5000): "larger than 4096 bytes",
    }
    for path, expected in cases.items():
        with pytest.raises(SecretFileError) as err:
            read_secret_text(KEY, path, 4096)
        assert str(err.value).startswith(f"{KEY}: {path} ") and expected in str(err.value)
        assert "\n" not in str(err.value)
    with pytest.raises(SecretFileError, match=f"^{KEY}: no file given$"):
        read_secret_bytes(KEY, "")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_file_is_refused_even_when_private(tmp_path: Path) -> None:
    path = private(tmp_path / "pw")
    os.chown(path, 65534, 65534)
    with pytest.raises(SecretFileError) as err:
        read_secret_text(KEY, path)
    expected = f"{KEY}: {path} belongs to uid 65534, not to this user (uid 0) or root; chown 0 {path}"
    assert str(err.value) == expected


_UNREADABLE_AS_NOBODY = """
import sys
from fleetguard.secret_files import SecretFileError, read_secret_text
import os
os.setgroups([])
os.setgid(65534)
os.setuid(65534)  # everything is imported above: the interpreter's own files may not be readable by nobody
try:
    read_secret_text(sys.argv[1], sys.argv[2])
except SecretFileError as err:
    print(err)
else:
    print("read it")
"""


def test_an_unreadable_file_says_so(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        path = private(tmp_path / "pw", mode=0o000)
        with pytest.raises(SecretFileError, match="cannot be read by uid"):
            read_secret_text(KEY, path)
        return
    # Root reads any file: the reader that cannot is another user, in a child that drops to uid 65534 and
    # finds its own file (so the owner check passes) in a directory it may enter, with no read permission.
    with tempfile.TemporaryDirectory() as shared:
        os.chmod(shared, 0o755)
        path = private(Path(shared) / "pw", mode=0o000)
        os.chown(path, 65534, 65534)
        child = subprocess.run(
            [sys.executable, "-c", _UNREADABLE_AS_NOBODY, KEY, str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith(f"{KEY}: {path} ") and "cannot be read by uid 65534" in child.stdout
