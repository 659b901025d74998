"""A real process appending from several threads, killed with SIGKILL mid-stream: the next Journal.open
replays every entry it acknowledged and had not released, once, with its id."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fleetguard.controller.journal import Journal, JournalEntry

REPO = Path(__file__).resolve().parents[2]

# Four threads append; each acknowledged entry is printed as "<id> <n>" only once append returned, and every
# third one is released at once (as the writer would once it is stored). Small segments: rotation and
# deletion happen while it is killed.
_CHILD = """
import sys, threading
from pathlib import Path
from fleetguard.controller.journal import Journal, JournalEntry

journal = Journal.open(Path(sys.argv[1]), segment_bytes=2048)
lock = threading.Lock()

def run(lane):
    n = lane
    while True:
        entry_id = journal.append(JournalEntry(f"host-{n}", b"%d" % n * 9, n % 2 == 0, float(n)))
        if n % 3 == 0:
            journal.release([entry_id])
        with lock:
            print(entry_id, n, "released" if n % 3 == 0 else "held", flush=True)
        n += 4

for lane in range(4):
    threading.Thread(target=run, args=(lane,), daemon=True).start()
threading.Event().wait()
"""


def entry(n: int) -> JournalEntry:
    return JournalEntry(f"host-{n}", b"%d" % n * 9, n % 2 == 0, float(n))


def test_a_process_killed_mid_append_replays_every_entry_it_acknowledged_and_held(tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(directory)], stdout=subprocess.PIPE, env=env, cwd=REPO
    )
    acknowledged: dict[int, tuple[int, bool]] = {}
    try:
        assert child.stdout is not None
        for line in child.stdout:
            given, number, state = line.split()
            acknowledged[int(given)] = (int(number), state == b"held")
            if len(acknowledged) >= 400:
                break
        child.kill()  # SIGKILL: no close, appends in flight
    finally:
        child.kill()
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    assert len(acknowledged) >= 400  # it ran: a child that died at start acknowledges nothing
    journal = Journal.open(directory)
    replayed = journal.replay()
    journal.close()
    ids = [entry_id for entry_id, _ in replayed]
    assert len(ids) == len(set(ids))
    by_id = dict(replayed)
    for entry_id, (n, held) in acknowledged.items():
        if held:
            assert by_id.get(entry_id) == entry(n), entry_id
        elif entry_id in by_id:  # released: it may replay while its segment holds another entry
            assert by_id[entry_id] == entry(n)
