"""Store-side cost of a GPU page's last hour at true 1 Hz across a large fleet (issue 22 item 7).

Builds (once, in SQL) a store whose `gpu_samples` hold one hour of 1 Hz samples for `--gpus` GPUs in the
order a controller stores them (time-major: each second's commit group holds every GPU), then times the
GPU page's own query functions (`dashboard.queries.gpus.gpu_series` and `gpu_now`) for GPUs spread
over the fleet, on a read cursor. Usage:
    python bench/gpu_series_store.py --store /tmp/fg-1hz/s.duckdb [--gpus 16384] [--seconds 3600] [--runs 10]
                                     [--browser 5]

With --browser N, the GPU page itself is then timed over the same store: served by `serve_dashboard` on
loopback (read-only, the clock at the hour's end), three GPUs spread over the fleet each loaded N times in a
new tab of headless Chromium until drawn (first render) and refreshed twice (live refresh, the clock moving
15 s), as bench/dashboard_render.py times every page over the 24 h store; and the page's server-side render.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from dashboard.queries.gpus import gpu_now, gpu_series
from fleetguard.store import Store

T0 = 1_700_000_000.0


def build(store: Store, gpus: int, seconds: int) -> None:
    """One INSERT per minute of samples: every GPU every second, plausible values, no Python per row."""
    con = store.connection
    for minute in range(0, seconds, 60):
        con.execute(
            f"""INSERT INTO gpu_samples (ts, host, gpu_index, uuid, pci_bus_id, utilization_gpu_percent,
                memory_used_bytes, memory_total_bytes, temperature_celsius, power_watts, sm_clock_mhz,
                clocks_event_reasons, ecc_corrected_aggregate, ecc_uncorrected_aggregate)
            SELECT make_timestamp(CAST(({T0} + s) * 1000000 AS BIGINT)),
                   printf('h%05d', g // 8), g % 8, printf('GPU-%05d-%d', g // 8, g % 8),
                   printf('0000:%02x:00.0', 24 + g % 8), (g * 7 + s) % 100, 40000000000 + (s % 1000) * 1000,
                   85899345920, 40 + (g + s) % 40, 300 + (g * 3 + s) % 400, 1980 - (s % 7) * 15,
                   CASE WHEN (g + s) % 997 = 0 THEN 64 ELSE 4 END, g % 13, 0
            FROM range({minute}, {min(minute + 60, seconds)}) r(s), range({gpus}) q(g)"""
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--store", required=True)
    ap.add_argument("--gpus", type=int, default=16384)
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--browser", type=int, default=0, help="time the GPU page in Chromium, N loads per GPU")
    args = ap.parse_args()
    path = Path(args.store)
    fresh = not path.exists()
    with Store.open(path) as store:
        if fresh:
            t = time.perf_counter()
            build(store, args.gpus, args.seconds)
            print(f"built {args.gpus:,} GPUs x {args.seconds:,} s in {time.perf_counter() - t:.0f} s")
        rows = store.connection.execute("SELECT count(*) FROM gpu_samples").fetchone()
        cur = store.cursor()
        until = T0 + args.seconds - 1
        since = until - 3600.0
        series, identity = [], []
        for run in range(args.runs):
            g = (run * 1637) % args.gpus
            uuid = f"GPU-{g // 8:05d}-{g % 8}"
            t = time.perf_counter()
            ident = gpu_now(cur, uuid, since, until)  # with no word from a fleet model: sought by its uuid
            identity.append(time.perf_counter() - t)
            assert ident is not None, uuid
            t = time.perf_counter()
            got = gpu_series(cur, uuid, ident.identity.host, since, until)
            series.append(time.perf_counter() - t)
            assert got.ts, uuid
    print("| rows | query | median ms | p95 ms | points |")
    print("|---|---|---|---|---|")
    for name, times in (("gpu_series (1 h)", series), ("gpu_now", identity)):
        p95 = sorted(times)[int(0.95 * (len(times) - 1))]
        print(
            f"| {rows[0] if rows else 0:,} | {name} | {statistics.median(times) * 1000:.0f} "
            f"| {p95 * 1000:.0f} | {len(got.ts)} |"
        )
    if args.browser:
        time_page(path, args.gpus, args.seconds, args.browser)


def time_page(path: Path, gpus: int, seconds: int, runs: int) -> None:
    """The GPU page over this store in real Chromium, and its server-side render, for three GPUs."""
    from dashboard_render import print_rows, time_served  # type: ignore[import-not-found]  # sibling script

    targets = [("gpu", f"/gpus/GPU-{g // 8:05d}-{g % 8}") for g in (0, gpus // 2 + 3, gpus - 1)]
    with Store.open(path, read_only=True) as store:
        browser, server_p95 = time_served(store, targets, runs, T0 + seconds)
    print_rows("page (1 h at 1 Hz)", [(t, t) for _, t in targets], browser, server_p95)


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
