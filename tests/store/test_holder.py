"""The store's holder file: a writer says who it is beside the store, a locked store's error names it, and
a file that could have been planted (a link, writable by others, a dead pid, nonsense) is not believed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetguard.store import Store, StoreLocked
from fleetguard.store.holder import HolderKind, announce, holder_path, read_holder, withdraw


def test_announce_read_withdraw(tmp_path: Path) -> None:
    store = str(tmp_path / "s.duckdb")
    announce(store, HolderKind.CONTROLLER, "http://127.0.0.1:9480")
    held = read_holder(store)
    assert held is not None and held.kind is HolderKind.CONTROLLER and held.pid == os.getpid()
    assert "`fleetguard controller`" in held.describe() and "http://127.0.0.1:9480" in held.describe()
    withdraw(store)
    assert read_holder(store) is None and not holder_path(store).exists()


def _plant(tmp_path: Path, doc: object, mode: int = 0o644) -> str:
    store = str(tmp_path / "s.duckdb")
    path = holder_path(store)
    path.write_text(json.dumps(doc))
    path.chmod(mode)
    return store


@pytest.mark.parametrize(
    ("doc", "mode"),
    [
        ({"kind": "up", "pid": os.getpid(), "url": "http://127.0.0.1:1"}, 0o666),  # others may write it
        ({"kind": "up", "pid": os.getpid(), "url": "file:///etc/shadow"}, 0o644),  # not a read API
        ({"kind": "nobody", "pid": os.getpid(), "url": ""}, 0o644),
        ({"kind": "up", "pid": "1", "url": ""}, 0o644),
        ([1, 2], 0o644),
    ],
)
def test_a_file_not_to_be_believed_is_ignored(tmp_path: Path, doc: object, mode: int) -> None:
    assert read_holder(_plant(tmp_path, doc, mode)) is None


def test_a_dead_holder_and_a_link_are_ignored(tmp_path: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(child.stdout)
    assert read_holder(_plant(tmp_path, {"kind": "up", "pid": dead, "url": ""})) is None
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"kind": "up", "pid": os.getpid(), "url": "http://127.0.0.1:1"}))
    store = str(tmp_path / "t.duckdb")
    holder_path(store).symlink_to(elsewhere)
    assert read_holder(store) is None


def test_a_locked_store_names_its_holder(tmp_path: Path) -> None:
    path = str(tmp_path / "s.duckdb")
    script = (
        "import sys, time\n"
        "from fleetguard.store import Store\n"
        "from fleetguard.store.holder import HolderKind, announce\n"
        f"s = Store.open({path!r})\n"
        f"announce({path!r}, HolderKind.UP, 'http://127.0.0.1:9')\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLocked) as locked:
            Store.open(path, read_only=True)
        assert f"a running `fleetguard up` (pid {proc.pid} serving http://127.0.0.1:9)" in str(locked.value)
        assert locked.value.holder is not None and locked.value.holder.url == "http://127.0.0.1:9"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()
