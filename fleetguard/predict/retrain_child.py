"""The retrain child: `python -m fleetguard.predict.retrain_child ...`, started by retraining.py.

It gets paths and numbers only: a snapshot of the store's window (Parquet the parent wrote), the serving
model's directory under model_dir, where to write the candidate and its result. It bounds itself before
anything large is imported (address space, CPU time, a lower priority), trains a candidate with the same
features, spec and selection shape as the serving model, and scores both on the most recent out-of-time
period with the backtest's selection (predictor/gate.py). Exit status: 0 done, 2 cannot train on this
data, 3 memory limit; killed by SIGXCPU at the CPU limit, by the parent at the wall-clock limit.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_CANNOT_TRAIN = 2
EXIT_MEMORY = 3
SAMPLES_FILE = "gpu_samples.parquet"
EVENTS_FILE = "events.parquet"
RESULT_FILE = "result.json"
# A retrain whose DuckDB and model together reach the address-space limit fails cleanly: DuckDB is given
# part of it for its buffers (the rest is Python, numpy and the model's own arrays).
DUCKDB_SHARE = 0.4


def bound_self(max_memory_mb: int, max_cpu_seconds: int) -> None:
    """Limits this process cannot raise again; set before numpy, DuckDB or XGBoost are imported."""
    limit = max_memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # the soft limit sends SIGXCPU (default action: terminate); the hard one, a second later, SIGKILL
    resource.setrlimit(resource.RLIMIT_CPU, (max_cpu_seconds, max_cpu_seconds + 1))
    os.nice(10)
    os.umask(0o077)  # the model files are written 0600 in 0700 directories from the start


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fleetguard.predict.retrain_child")
    p.add_argument("--snapshot", type=Path, required=True)
    p.add_argument("--serving", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model-id", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--end", type=float, required=True)
    p.add_argument("--train-window", type=float, required=True)
    p.add_argument("--evaluate-window", type=float, required=True)
    p.add_argument("--failure-xids", default="")
    p.add_argument("--failure-kinds", default="")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-memory-mb", type=int, required=True)
    p.add_argument("--max-cpu-seconds", type=int, required=True)
    return p.parse_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    bound_self(args.max_memory_mb, args.max_cpu_seconds)
    try:
        import duckdb

        try:
            result = retrain(args)
        except duckdb.OutOfMemoryException as exc:
            raise MemoryError(str(exc)) from exc
    except MemoryError:
        print(f"retrain: memory limit of {args.max_memory_mb} MB reached", file=sys.stderr)
        return EXIT_MEMORY
    except ValueError as exc:  # no failures in the window, a model that cannot score this data
        print(f"retrain: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_CANNOT_TRAIN
    (args.out / RESULT_FILE).write_text(json.dumps(result, sort_keys=True))
    return 0


def retrain(args: argparse.Namespace) -> dict[str, Any]:
    import duckdb

    from fleetguard.predict.store_reader import (
        DEFAULT_FAILURE_KINDS,
        DEFAULT_FATAL_XIDS,
        FailureRule,
        register_store,
    )
    from predictor import artifact
    from predictor.training import PolicyOptions, save_trained, train_from_views

    serving = artifact.load(args.serving)
    policy = artifact.require_policy(serving)
    spec = serving.spec
    xids = tuple(int(x) for x in args.failure_xids.split(",") if x.strip()) or DEFAULT_FATAL_XIDS
    kinds = tuple(k for k in args.failure_kinds.split(",") if k) or DEFAULT_FAILURE_KINDS
    # one worker thread from the start: each thread DuckDB starts reserves address space of its own
    memory = f"{int(args.max_memory_mb * DUCKDB_SHARE)}MB"
    con = duckdb.connect(config={"threads": 1, "memory_limit": memory})
    try:
        for table, name in (("gpu_samples", SAMPLES_FILE), ("events", EVENTS_FILE)):
            path = str(args.snapshot / name).replace("'", "''")
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{path}')")
        inputs = register_store(con, FailureRule(kinds, xids))
        # labels of the training rows are known before the evaluation period starts: no leakage into it
        evaluate_from = args.end - args.evaluate_window
        trained = train_from_views(
            con,
            inputs.feature_columns,
            args.model,
            spec,
            evaluate_from,
            args.train_window,
            args.seed,
            n_jobs=1,
            options=PolicyOptions(
                policy.selection.period_seconds, policy.selection.k, policy.selection.target_precision
            ),
        )
        save_trained(args.out, trained, spec, inputs.feature_columns, model_id=args.model_id)
        candidate = artifact.load(args.out)
        figures = _compare(con, candidate, serving, evaluate_from, args.end)
    finally:
        con.close()
    return {
        "model_id": args.model_id,
        "train_window": list(trained.window),
        "metrics": trained.figures(),
        "gate": figures,
    }


def _compare(con: Any, candidate: Any, serving: Any, start: float, end: float) -> dict[str, Any]:
    """Both models on the instances of [start, end) whose labels are known at `end`."""
    import numpy as np

    from predictor import artifact
    from predictor.gate import compare
    from predictor.sliding import labels_known_at

    scored = []
    built: dict[tuple[Any, ...], Any] = {}
    for loaded, table in ((candidate, "fg_gate_candidate"), (serving, "fg_gate_serving")):
        # A candidate cut like the serving model (the usual case: the same columns, spec, event kinds and
        # categories) has the same instances: built once, the feature SQL being most of a gate's cost.
        shape = _instance_shape(loaded)
        if shape not in built:
            built[shape] = artifact.model_instances(con, loaded, table)
        inst = built[shape]
        known = labels_known_at(inst, end, loaded.spec.horizon_seconds)
        keep = (inst.ts >= start) & (inst.ts < end) & ~np.isnan(known)
        inst = inst.subset(keep)
        order = np.lexsort((inst.device_id.astype(str), inst.ts))
        scored.append((inst.subset(order), known[keep][order], loaded.model.score(inst.subset(order).x)))
    (cand, label, cand_score), (serv, _, serv_score) = scored
    if not (np.array_equal(cand.ts, serv.ts) and np.array_equal(cand.device_id, serv.device_id)):
        raise ValueError("the candidate and the serving model see different instances")
    policy = artifact.require_policy(candidate)
    figures = compare(
        cand.device_id,
        cand.ts,
        label,
        cand_score,
        serv_score,
        policy.selection.k,
        policy.selection.period_seconds,
        candidate.spec.step_seconds,
    )
    out = figures.to_json()
    out["current_model_id"] = serving.model_id
    return out


def _instance_shape(loaded: Any) -> tuple[Any, ...]:
    """What a model's instances are built from: two models equal in it get the same instances."""
    return (loaded.feature_columns, loaded.spec, loaded.event_kinds, loaded.categories, loaded.feature_names)


if __name__ == "__main__":
    sys.exit(main())
