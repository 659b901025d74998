"""Controller ingest while a retrain runs: p50/p99 of `POST /v1/ingest` without and with the retrain child.

One `fleetguard controller` process on a store holding 20 days of a 60-GPU fleet's history (the retrain's
data, tests/controller/history_store.py) and a seed model in `[predictor] model_dir`, fed by
bench/controller_load.py's load generator (agents' real batches, one per host per 5 s). Two runs of the same
load: one with retraining off, one with `retrain_every_seconds = 1` measured only while the retrain child is
alive (its work directory exists), so every request of the second row competed with a retrain.

Usage: python bench/retrain_ingest.py [--hosts 128] [--seconds 40] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.controller_load import Generator, cpu_seconds, mark_start, quantile, template
from fleetguard.controller.tokens import add_tokens


def seed(root: Path) -> tuple[Path, Path]:
    import duckdb

    from fleetguard.predict.store_reader import register_store
    from predictor.dataset import DatasetSpec
    from predictor.training import PolicyOptions, save_trained, train_from_views
    from tests.controller.history_store import write_history_store

    store = root / "history.duckdb"
    now = time.time()
    write_history_store(store, now)
    spec = DatasetSpec(6 * 3600.0, 3 * 86400.0, step_seconds=3600.0)
    con = duckdb.connect(str(store), read_only=True)
    try:
        inputs = register_store(con)
        trained = train_from_views(
            con,
            inputs.feature_columns,
            "xgboost",
            spec,
            now - 8 * 86400,
            5 * 86400.0,
            n_jobs=1,
            options=PolicyOptions(period_seconds=3600.0, k=3),
        )
    finally:
        con.close()
    model_dir = root / "models"
    save_trained(model_dir, trained, spec, inputs.feature_columns, model_id="seed")
    return store, model_dir


def ready(port: int, seconds: float = 120.0) -> None:
    """Until the controller answers /metrics (it opens and migrates its store first)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the controller did not answer on port {port} within {seconds:.0f} s")


def run(args: argparse.Namespace, root: Path, store: Path, model_dir: Path, retrain: bool, n: int) -> str:
    tag = "with" if retrain else "without"
    work = root / f"{tag}-{n}"
    work.mkdir()
    db = work / "ctl.duckdb"
    db.write_bytes(store.read_bytes())
    hosts = [f"host-{i:05d}" for i in range(args.hosts)]
    tokens = add_tokens(work / "tokens.json", hosts)
    (work / "ctl.toml").write_text(
        f'[controller]\nlisten = "127.0.0.1:{args.port}"\ntokens_file = "{work}/tokens.json"\n'
        f'[store]\npath = "{db}"\n[dashboard]\nenabled = false\n'
        f'[predictor]\nmodel_dir = "{model_dir}"\nscore_interval_seconds = 60.0\n'
        f"retrain_every_seconds = {1.0 if retrain else 0.0}\ntrain_window_seconds = {7 * 86400.0}\n"
        f"evaluate_window_seconds = {4 * 86400.0}\n"
    )
    ctl = subprocess.Popen(
        [sys.executable, "-m", "fleetguard", "controller", "--config", str(work / "ctl.toml")],
        stdout=subprocess.DEVNULL,
        stderr=(work / "ctl.log").open("w"),
    )
    gen = None
    try:
        ready(args.port)
        retrain_dir = model_dir / "retrain"
        if retrain:
            deadline = time.monotonic() + 120
            while not (retrain_dir.is_dir() and any(retrain_dir.iterdir())) and time.monotonic() < deadline:
                time.sleep(0.2)
        text, _ = template(args.interval)
        gen = Generator(args.port, tokens, text, args.workers)
        marks: dict[str, float] = {}  # taken when the first batch is due (after the bodies were built)
        r = gen.run_step(hosts, args.seconds, args.interval, {}, lambda: mark_start(marks, ctl.pid))
        wall = time.monotonic() - marks["t"]
        ccpu = (cpu_seconds(ctl.pid) - marks["cpu"]) / wall
        alive = retrain and retrain_dir.is_dir() and any(retrain_dir.iterdir())
        load1 = os.getloadavg()[0]
    finally:
        if gen is not None:
            gen.stop()
        ctl.send_signal(signal.SIGTERM)
        ctl.wait(timeout=300)
    child = "yes, the whole run" if alive else ("ended during the run" if retrain else "-")
    return (
        f"| {tag} | {args.hosts} | {r.sent / wall:.0f} | {1000 * quantile(r.latencies, 0.5):.0f} | "
        f"{1000 * quantile(r.latencies, 0.99):.0f} | {sum(r.refused.values())} | {r.failed} | "
        f"{ccpu:.2f} | {child} | {load1:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--interval", type=int, default=5)
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--port", type=int, default=19581)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fg-retrain-ingest-"))
    print("writing the history and training the seed model ...", flush=True)
    store, model_dir = seed(root)
    # alternated, so a change in the shared machine's load falls on both
    rows = [
        run(args, root, store, model_dir, retrain, n) for n in range(args.rounds) for retrain in (False, True)
    ]
    print(
        "| retrain | hosts | batches/s | p50 ms | p99 ms | refused | failed | controller CPU (cores) | "
        "retrain child alive | load (1 min) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for row in rows:
        print(row)
    print(f"(work dir {root})")


if __name__ == "__main__":
    main()
