"""Sliding-window retraining on the store, as the controller's (and `up`'s) maintenance task.

Every `[predictor] retrain_every_seconds` the task writes the window a retrain needs to Parquet (a read in
the maintenance thread's own transaction: ingest goes on beside it), starts retrain_child.py as a child
process bounded in memory, CPU time and priority, and returns. Each later round only polls it: nothing here
waits for training, so ingest, rollups and scoring never stall. The child's candidate goes into the model
registry with the gate's figures, and is promoted only if it is not worse than the serving model; a child
that fails or is killed is one log line, and the serving model goes on serving.

The same task carries out the `fleetguard model promote|rollback` requests left beside a store that a
running process holds (store/operator_requests.py).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import duckdb

from fleetguard.config import PredictorConfig
from fleetguard.predict import model_ops
from fleetguard.predict.model_files import (
    WORK,
    dataset_shape,
    make_private,
    model_path,
    models_root,
    serving_model,
)
from fleetguard.predict.retrain_child import (
    EVENTS_FILE,
    EXIT_CANNOT_TRAIN,
    EXIT_MEMORY,
    RESULT_FILE,
    SAMPLES_FILE,
)
from fleetguard.predict.store_reader import time_filter
from fleetguard.store import model_registry as registry
from fleetguard.store.operator_requests import Request, take

log = logging.getLogger(__name__)

GATE_ACTOR = "retrain gate"
MAX_RESULT_BYTES = 64 << 10
MAX_LOG_TAIL_BYTES = 2048
# Models keep their files while among the newest this many (the active one always): the registry keeps
# every model's row, the disk only what a promotion or rollback can still use.
MAX_MODELS_WITH_FILES = 20
# How often the maintenance thread looks at a running child and at operator requests: its own tick, so a
# finished retrain is recorded and a request carried out within a second (a poll() and a directory listing).
POLL_SECONDS = 1.0


@dataclass
class _Running:
    model_id: str
    process: subprocess.Popen[bytes]
    work: Path
    out: Path
    log_file: IO[bytes]
    deadline: float  # monotonic
    train_window: tuple[float, float]
    killed_for: str = ""


class RetrainTask:
    """A maintenance task (con, now). Not thread-safe: the maintenance thread owns it; `stop` is called
    after that thread has stopped."""

    def __init__(
        self, settings: PredictorConfig, store_path: str, model_dir: Path, python: str = sys.executable
    ) -> None:
        self.settings = settings
        self.store_path = store_path
        self.model_dir = model_dir
        self.python = python
        self.running: _Running | None = None
        self.next_due = (
            time.time() + settings.retrain_every_seconds if settings.retrain_every_seconds else math.inf
        )
        self.last_outcome = "no retrain yet"

    def __call__(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        self._operator_requests(con, now)
        if self.running is not None:
            self._poll(con, now)
        elif now >= self.next_due:
            self.next_due = now + self.settings.retrain_every_seconds
            self.start(con, now)

    # ---- starting ----------------------------------------------------------------------------------------

    def start(self, con: duckdb.DuckDBPyConnection, now: float) -> bool:
        """Snapshot the window and start the child; False (one log line) when no retrain can start."""
        try:
            serving_dir, _ = serving_model(con, self.model_dir)
            window, horizon, step = dataset_shape(serving_dir)
        except (OSError, ValueError, KeyError) as exc:
            self._outcome(con, now, "", f"retrain skipped: no serving model to retrain from ({exc})")
            return False
        end = math.floor(now / step) * step
        since = end - self.settings.evaluate_window_seconds - horizon - self.settings.train_window_seconds
        since -= window
        model_id = f"{self.settings.retrain_model}-{int(end)}-{uuid.uuid4().hex[:6]}"
        work = self.model_dir / WORK / model_id
        out = models_root(self.model_dir) / f".{model_id}.partial"
        try:
            work.mkdir(parents=True, mode=0o700)
            models_root(self.model_dir).mkdir(mode=0o700, exist_ok=True)
            snapshot(con, work, since, end)
            argv = self._argv(work, serving_dir, out, model_id, end)
            log_file = (work / "child.log").open("wb")
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=_child_env(),
                start_new_session=True,  # killed as a group; a signal to the controller's group spares it
                close_fds=True,
            )
        except (OSError, duckdb.Error) as exc:
            shutil.rmtree(work, ignore_errors=True)
            self._outcome(con, now, model_id, f"retrain could not start: {exc}")
            return False
        self.running = _Running(
            model_id,
            process,
            work,
            out,
            log_file,
            time.monotonic() + self.settings.retrain_timeout_seconds,
            (since, end),
        )
        log.info("retrain %s started (pid %d) on the window up to %s", model_id, process.pid, _utc(end))
        return True

    def _argv(self, work: Path, serving: Path, out: Path, model_id: str, end: float) -> list[str]:
        s = self.settings
        return [
            self.python,
            "-m",
            "fleetguard.predict.retrain_child",
            "--snapshot",
            str(work),
            "--serving",
            str(serving),
            "--out",
            str(out),
            "--model-id",
            model_id,
            "--model",
            s.retrain_model,
            "--end",
            repr(float(end)),
            "--train-window",
            repr(float(s.train_window_seconds)),
            "--evaluate-window",
            repr(float(s.evaluate_window_seconds)),
            "--failure-xids",
            s.failure_xids,
            "--failure-kinds",
            ",".join(s.failure_kinds),
            "--max-memory-mb",
            str(s.retrain_max_memory_mb),
            "--max-cpu-seconds",
            str(s.retrain_max_cpu_seconds),
        ]

    # ---- finishing ---------------------------------------------------------------------------------------

    def _poll(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        run = self.running
        assert run is not None
        rc = run.process.poll()
        if rc is None:
            if time.monotonic() > run.deadline:
                run.killed_for = f"the wall-clock limit of {self.settings.retrain_timeout_seconds:g} s"
                _kill_group(run.process)
                rc = run.process.wait()
            else:
                return
        self.running = None
        run.log_file.close()
        try:
            if rc == 0:
                self._record(con, now, run)
            else:
                self._outcome(con, now, run.model_id, f"retrain {run.model_id} failed: {self._why(run, rc)}")
                shutil.rmtree(run.out, ignore_errors=True)
        finally:
            shutil.rmtree(run.work, ignore_errors=True)

    def _why(self, run: _Running, rc: int) -> str:
        if run.killed_for:
            return f"killed at {run.killed_for}"
        if rc == EXIT_MEMORY:
            return f"stopped at its memory limit of {self.settings.retrain_max_memory_mb} MB"
        if rc in (-signal.SIGXCPU, -signal.SIGKILL):
            return f"killed by signal {-rc} (its CPU limit is {self.settings.retrain_max_cpu_seconds} s)"
        tail = _last_line(run.work / "child.log")
        if rc == EXIT_CANNOT_TRAIN:
            return tail
        return f"exit status {rc}: {tail}"

    def _record(self, con: duckdb.DuckDBPyConnection, now: float, run: _Running) -> None:
        from predictor.gate import GateFigures, Picks, Verdict, decide

        try:
            result = _read_result(run.out / RESULT_FILE)
            gate = result["gate"]
            cur = gate.get("current")
            figures = GateFigures(
                start_ts=float(gate["start_ts"]),
                end_ts=float(gate["end_ts"]),
                k=int(gate["k"]),
                period_seconds=float(gate["period_seconds"]),
                instances=int(gate["instances"]),
                positives=int(gate["positives"]),
                candidate=Picks(int(gate["candidate"]["predictions"]), int(gate["candidate"]["hits"])),
                current=None if cur is None else Picks(int(cur["predictions"]), int(cur["hits"])),
            )
            train_start, train_end = (float(v) for v in result["train_window"])
            final = model_path(self.model_dir, run.model_id)
            (run.out / RESULT_FILE).unlink()
            make_private(run.out)
            os.replace(run.out, final)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            shutil.rmtree(run.out, ignore_errors=True)
            self._outcome(con, now, run.model_id, f"retrain {run.model_id}: unusable result ({exc})")
            return
        verdict, reason = decide(figures)
        active = registry.active_model(con)
        recorded = {
            **figures.to_json(),
            # the serving model the child compared with: a registry id, or the model_dir model's own id
            "current_model_id": str(gate.get("current_model_id", ""))[:100]
            or (active.model_id if active else registry.BASE_MODEL),
            "verdict": verdict.value,
            "reason": reason,
            "train_rows": result.get("metrics", {}).get("train_rows"),
            "train_positives": result.get("metrics", {}).get("train_positives"),
        }
        registry.add_model(
            con,
            registry.ModelRecord(
                run.model_id, now, train_start, train_end, registry.ModelState.CANDIDATE, recorded
            ),
            GATE_ACTOR,
        )
        if verdict is Verdict.PROMOTE:
            registry.promote(con, run.model_id, GATE_ACTOR, now, reason)
        else:
            registry.set_state(con, run.model_id, registry.ModelState.REJECTED)
            registry.log(con, now, run.model_id, registry.LogAction.REJECTED, GATE_ACTOR, reason)
        self.last_outcome = f"retrain {run.model_id}: {verdict.value}d ({reason})"
        log.warning("%s", self.last_outcome)
        self._prune(con, now)

    def _outcome(self, con: duckdb.DuckDBPyConnection, now: float, model_id: str, line: str) -> None:
        """A retrain that produced no model: one log line, one registry log row; the serving model stays."""
        self.last_outcome = line
        log.warning("%s", line)
        if model_id:
            registry.log(con, now, model_id, registry.LogAction.RETRAIN_FAILED, GATE_ACTOR, line)

    def _prune(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        kept = [r for r in registry.list_models(con, 10_000) if r.files_kept]
        for record in kept[MAX_MODELS_WITH_FILES:]:
            if record.state is registry.ModelState.ACTIVE:
                continue
            shutil.rmtree(model_path(self.model_dir, record.model_id), ignore_errors=True)
            registry.mark_files_removed(con, record.model_id, now, GATE_ACTOR)

    # ---- operator requests left beside the store -------------------------------------------------------

    def _operator_requests(self, con: duckdb.DuckDBPyConnection, now: float) -> None:
        pending = take(self.store_path, Request.MODEL_OPS) if self.store_path != ":memory:" else None
        ops = pending.get("ops") if pending else None
        for op in ops if isinstance(ops, list) else []:
            if not isinstance(op, dict) or not isinstance(op.get("actor"), str):
                continue
            try:
                if op.get("op") == "promote" and isinstance(op.get("model_id"), str):
                    done = model_ops.promote(
                        con, self.model_dir, op["model_id"], op["actor"], now, in_transaction=True
                    )
                elif op.get("op") == "rollback":
                    done = model_ops.rollback(con, op["actor"], now, in_transaction=True)
                else:
                    continue
                log.warning("model registry: %s", done.message)
            except registry.RegistryError as exc:
                log.warning("model registry: %s refused: %s", op.get("op"), exc)

    def stop(self) -> None:
        """Kill a running child and reap it (shutdown does not wait for a retrain)."""
        run, self.running = self.running, None
        if run is None:
            return
        _kill_group(run.process)
        run.process.wait()
        run.log_file.close()
        shutil.rmtree(run.work, ignore_errors=True)
        shutil.rmtree(run.out, ignore_errors=True)


def snapshot(con: duckdb.DuckDBPyConnection, work: Path, since: float, end: float) -> None:
    """The samples of [since, end) and the events before `end` as Parquet files in `work`: the child
    cannot open the store a running process holds, and a copy of its own window is all it needs."""
    for query, name in (
        (f"SELECT * FROM gpu_samples WHERE {time_filter('ts', since, end)}", SAMPLES_FILE),
        (f"SELECT * FROM events WHERE {time_filter('ts', None, end)}", EVENTS_FILE),
    ):
        path = str(work / name).replace("'", "''")
        con.execute(f"COPY ({query}) TO '{path}' (FORMAT PARQUET)")


def _child_env() -> dict[str, str]:
    """The parent's environment less its secrets' neighbours: what Python needs, one thread per library."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR", "LD_LIBRARY_PATH")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = "1"
    # glibc's per-thread malloc arenas reserve 64 MB of address space each: the limit is on address space
    env["MALLOC_ARENA_MAX"] = "2"
    return env


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def _read_result(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        data = fh.read(MAX_RESULT_BYTES + 1)
    if len(data) > MAX_RESULT_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_RESULT_BYTES} bytes")
    doc = json.loads(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("gate"), dict):
        raise ValueError(f"{path.name}: not a retrain result")
    return doc


def _last_line(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - MAX_LOG_TAIL_BYTES))
            lines = fh.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return "no output"
    return lines[-1][:300] if lines else "no output"


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))
