"""The local agent gives back DuckDB's start-up pages: only clean read-only mappings of the library are
advised, the pages leave the process, and the store works as before afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fleetguard.agent.cold_pages import Mapping, parse_smaps, reclaimable

LIB = "/venv/site-packages/_duckdb.cpython-311-x86_64-linux-gnu.so"

# The shape of /proc/self/smaps (fields trimmed): DuckDB's four segments, with RELRO holding anonymous copies.
SMAPS = f"""\
7f0000000000-7f0000e1c000 r--p 00000000 fd:01 123                        {LIB}
Size:              14448 kB
Rss:                9728 kB
Anonymous:             0 kB
7f0000e1c000-7f0003fe5000 r-xp 00e1c000 fd:01 123                        {LIB}
Size:              52100 kB
Rss:               39144 kB
Anonymous:             0 kB
7f0003fe5000-7f000407b000 r--p 03fe5000 fd:01 123                        {LIB}
Size:                600 kB
Anonymous:           600 kB
7f000407b000-7f0004090000 rw-p 0407b000 fd:01 123                        {LIB}
Size:                 84 kB
Anonymous:            84 kB
7f0005000000-7f0005001000 r-xp 00000000 fd:01 456                        /usr/lib/libc.so.6
Anonymous:             0 kB
7f0006000000-7f0006400000 rw-p 00000000 00:00 0
Anonymous:          4096 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
"""


def test_smaps_is_read_into_mappings() -> None:
    mappings = parse_smaps(SMAPS)
    assert len(mappings) == 7
    assert mappings[0] == Mapping(0x7F0000000000, 0x7F0000E1C000, "r--p", LIB, 0)
    assert mappings[2].anonymous_kib == 600
    assert mappings[5].path == "" and mappings[5].anonymous_kib == 4096
    assert mappings[6] == Mapping(0x7FFD00000000, 0x7FFD00021000, "rw-p", "[stack]", 0)


def test_only_clean_read_only_mappings_of_the_library_are_chosen() -> None:
    # Not the relocated read-only segment (anonymous copies), not the writable one, not another library.
    assert reclaimable(parse_smaps(SMAPS), LIB) == [
        (0x7F0000000000, 0xE1C000),
        (0x7F0000E1C000, 0x7F0003FE5000 - 0x7F0000E1C000),
    ]
    assert reclaimable(parse_smaps(SMAPS), "/other.so") == []


# A fresh process opens a store as the agent's sink does and reports the pages of DuckDB's library it maps
# before and after the sink's reclaim, then writes and reads through the store. Pages another process maps
# too (this test runner's, once an earlier test used DuckDB) are shared, and the kernel leaves them mapped.
PROBE = """
import json, re, sys
from pathlib import Path
from fleetguard.agent.local_sink import LocalStoreSink, duckdb_library, release_start_up_pages, open_store
from fleetguard.records.telemetry import GpuSample

def pages_kib(library):
    text, inside = Path("/proc/self/smaps").read_text(), False
    kib = {"Rss": 0, "Private_Clean": 0, "Private_Dirty": 0, "Shared_Clean": 0}
    for line in text.splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = line.endswith(library)
        elif inside and line.split(":")[0] in kib:
            kib[line.split(":")[0]] += int(line.split()[1])
    return kib

store = open_store(sys.argv[1])
library = duckdb_library()
before = pages_kib(library)
advised = release_start_up_pages()
after = pages_kib(library)
sink = LocalStoreSink(store, None)
rows = [GpuSample(ts=1.0e9 + i, host="h", gpu_index=0, uuid="GPU-0", utilization_gpu_percent=float(i))
        for i in range(100)]
store.append(rows)
got = store.connection.execute("SELECT count(*), sum(utilization_gpu_percent) FROM gpu_samples").fetchone()
sink.close()
print(json.dumps({"library": library, "advised": advised, "before": before, "after": after, "got": got}))
"""


def test_the_sink_reclaims_the_library_pages_and_the_store_still_works(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir(mode=0o700)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "store" / "a.duckdb")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["library"].endswith(".so")
    assert report["got"] == [100, sum(range(100))]
    assert report["advised"] > 10 * 2**20, report  # the text and read-only data segments: tens of MB
    before, after = report["before"], report["after"]
    assert before["Rss"] > 10 * 1024, report  # connecting and migrating touched tens of MB of the library
    # Every clean page only this process mapped was given back; what stays mapped is shared with another
    # process, or the relocated segments' private copies (never advised).
    assert after["Private_Clean"] <= before["Private_Clean"] // 10, report
    kept = before["Shared_Clean"] + before["Private_Dirty"] + before["Private_Clean"] // 10
    assert after["Rss"] <= kept, report
