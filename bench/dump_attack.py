"""Issue 16 attacks #5 and #6 on the flight-recorder dump watcher, timed from the caller's side (the agent's
analysis tick calls DumpWatcher.poll):

#5 a large plain-data pickle (a list of ints: ~7x its size once unpickled) written as a rank's dump: how long
   each poll takes, how much the calling process's peak RSS grows, and what becomes of the dump.
#6 200,000 dump-named files from another user in the dump directory: each poll's time and, where the tree
   has the incremental scanner, how many listings were started.

Usage: python bench/dump_attack.py [--dump-mb 120] [--files 200000] [--polls 60] [--dir /var/tmp/x]
Run as root (the flood is chowned to uid 65534, the job is root's). The "before", against an older tree:
git archive d950343 fleetguard collectors | tar -x -C /tmp/fg_old &&
FLEETGUARD_BENCH_TREE=/tmp/fg_old python bench/dump_attack.py --dump-mb 24 --polls 3"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("FLEETGUARD_BENCH_TREE") or str(Path(__file__).resolve().parents[1]))

from fleetguard.jobcontrol.trust import job_key
from fleetguard.runtime.dump_watcher import DumpWatcher

NOBODY = 65534
JOB = job_key(0, "bench-job")


def write_int_pickle(path: Path, size_bytes: int) -> None:
    """{"entries": [ints...]} of about `size_bytes`, streamed: PROTO 2, dict, key, list, APPENDS batches."""
    batch = 10_000
    with path.open("wb") as f:
        f.write(b"\x80\x02}X\x07\x00\x00\x00entries]")
        written, value = 0, 1 << 20
        while written < size_bytes:
            f.write(b"(" + b"".join(b"J" + struct.pack("<i", value + i) for i in range(batch)) + b"e")
            written += batch * 5 + 2
            value += batch
        f.write(b"s.")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def attack_dump(directory: Path, size_mb: int, polls: int) -> None:
    watcher = DumpWatcher(directory, host="bench")
    path = directory / "nccl_trace_rank_0"
    write_int_pickle(path, size_mb << 20)
    before = peak_rss_mb()
    times, out = [], []
    started = time.monotonic()
    for _ in range(polls):
        t = time.perf_counter()
        out += watcher.poll(JOB)
        times.append(time.perf_counter() - t)
        reader = getattr(watcher, "reader", None)
        if reader is None or not reader.busy():
            break
        time.sleep(0.5)
    done = time.monotonic() - started
    refused = dict(getattr(watcher, "refused", {}))
    close = getattr(watcher, "close", None)
    if close is not None:
        close()
    print(
        f"| #5 {size_mb} MB pickle | polls {len(times)} | longest poll {max(times):.3f} s | "
        f"dump settled after {done:.1f} s | caller's peak RSS +{peak_rss_mb() - before:.0f} MB | "
        f"records {len(out)} | refused {refused or errors_of(watcher)} |",
        flush=True,
    )
    path.unlink()


def errors_of(watcher: DumpWatcher) -> str:
    return "; ".join(v[-60:] for v in watcher.errors.values()) or "-"


def attack_directory(directory: Path, files: int, polls: int) -> None:
    t = time.monotonic()
    for r in range(files):
        path = directory / f"nccl_trace_rank_{1_000_000 + r}"
        if not path.exists():  # a kept --flood-dir is filled once
            path.touch()
            os.chown(path, NOBODY, NOBODY)
    print(f"({files} files made in {time.monotonic() - t:.1f} s)", flush=True)
    watcher = DumpWatcher(directory, host="bench")  # its start-up listing is not timed
    os.utime(directory)  # then the flood goes on: the directory changes after the watcher's first look
    times = []
    for _ in range(polls):
        t = time.perf_counter()
        watcher.poll(JOB)
        times.append(time.perf_counter() - t)
    scanner = getattr(watcher, "scanner", None)
    listings = f"{scanner.listings} listings, {scanner.entries_read} entries read" if scanner else "n/a"
    close = getattr(watcher, "close", None)
    if close is not None:
        close()
    print(
        f"| #6 {files:,} files | polls {polls} | median poll {statistics.median(times) * 1000:.1f} ms | "
        f"longest {max(times) * 1000:.1f} ms | sum {sum(times):.2f} s | {listings} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump-mb", type=int, default=120)
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--polls", type=int, default=60)
    parser.add_argument("--dir", default=None, help="where to make the dump directories (default: temp)")
    parser.add_argument("--flood-dir", default=None, help="the #6 directory, kept between runs")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fg-dump-attack-", dir=args.dir))
    try:
        (root / "dump").mkdir()
        flood = Path(args.flood_dir) if args.flood_dir else root / "flood"
        flood.mkdir(exist_ok=True)
        attack_dump(root / "dump", args.dump_mb, max(args.polls, 400))
        attack_directory(flood, args.files, args.polls)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
