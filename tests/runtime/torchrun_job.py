"""Run examples/train_ddp.py under a real torchrun next to a RuntimeService, inject faults, and read what
happened (shared by tests/integration/test_torchrun_faults.py and bench/torchrun_detection.py).

The service runs in this process; switching to `fleetguard up` only changes `Runtime` (the job reads the
endpoint from FLEETGUARD_AGENT_URL either way)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetguard.clock import SystemClock
from fleetguard.records.findings import ActionRecord, Finding
from fleetguard.runtime.service import RuntimeService, RuntimeServiceConfig

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_ddp.py"
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


@dataclass
class Seen:
    """A finding or action and the wall time the sink received it."""

    record: Any
    received_at: float


@dataclass
class Runtime:
    """A RuntimeService in this process whose sink keeps findings and actions with their arrival times."""

    restart_cost_seconds: float = 2.0
    restart_grace_seconds: float = 2.0
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    service: RuntimeService | None = None

    def start(self) -> str:
        config = RuntimeServiceConfig(
            host="localhost",
            port=0,
            restart_grace_seconds=self.restart_grace_seconds,
            restart_cost_seconds=self.restart_cost_seconds,
            checkpoint_timeout_seconds=30.0,
        )
        self.service = RuntimeService(config, SystemClock(), self._sink)
        self.service.start()
        return self.service.endpoint

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop()

    def _sink(self, batch: Sequence[object]) -> None:
        now = time.time()
        with self.lock:
            self.seen.extend(Seen(r, now) for r in batch if isinstance(r, Finding | ActionRecord))

    def findings(self, kind: str | None = None) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if isinstance(s.record, Finding) and kind in (None, s.record.kind)]

    def actions(self, action: str | None = None) -> list[Seen]:
        with self.lock:
            return [
                s
                for s in self.seen
                if isinstance(s.record, ActionRecord) and action in (None, s.record.action)
            ]


class TorchrunJob:
    """`torchrun --nproc-per-node N --max-restarts R examples/train_ddp.py ...` with an events file."""

    def __init__(
        self,
        tmp: Path,
        endpoint: str,
        *,
        nproc: int = 4,
        steps: int = 2000,
        step_seconds: float = 0.1,
        ckpt_every: int = 10,
        max_restarts: int = 3,
        extra: Sequence[str] = (),
        job_id: str = "ddp-test",
        trainer: str = "plain",
    ) -> None:
        self.tmp = tmp
        self.events_path = tmp / "events.jsonl"
        self.log_path = tmp / "torchrun.log"
        argv = [
            TORCHRUN,
            "--standalone",
            f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}",
            "--monitor-interval=0.2",
            str(EXAMPLE),
            f"--ckpt-dir={tmp / 'ckpt'}",
            f"--events={self.events_path}",
            f"--steps={steps}",
            f"--step-seconds={step_seconds}",
            f"--ckpt-every={ckpt_every}",
            # DDP and torch.optim written out: their torch._dynamo import costs each rank ~1.8 s of CPU per
            # start; the collectives, heartbeats, checkpoints and exits under test are the same
            f"--trainer={trainer}",
            *extra,
        ]
        env = {
            **os.environ,
            "FLEETGUARD_AGENT_URL": endpoint,
            "FLEETGUARD_JOB_ID": job_id,
            "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1",
        }
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=REPO)

    def events(self, event: str | None = None, attempt: int | None = None) -> list[dict[str, Any]]:
        if not self.events_path.exists():
            return []
        out = []
        for line in self.events_path.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line being written
            if (event is None or e["event"] == event) and (attempt is None or e["attempt"] == attempt):
                out.append(e)
        return out

    def pid_of(self, rank: int, attempt: int = 0) -> int:
        [start] = [e for e in self.events("start", attempt) if e["rank"] == rank]
        return int(start["pid"])

    def last_checkpoint(self, attempt: int) -> int | None:
        steps = [e["step"] for e in self.events("checkpoint", attempt)]
        return max(steps) if steps else None

    def first_step_after(self, attempt: int) -> dict[str, Any] | None:
        steps = self.events("step", attempt)
        return min(steps, key=lambda e: e["ts"]) if steps else None

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        # workers run in their own sessions: make sure none outlives the test
        for e in self.events("start"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(e["pid"]), signal.SIGKILL)
        return self.proc.returncode

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text()[-chars:] if self.log_path.exists() else ""


def wait_until(
    predicate: Callable[[], Any], timeout_seconds: float, what: str, poll_seconds: float = 0.1
) -> Any:
    """Poll a real process's progress with a deadline (these tests watch real processes, not timeouts)."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        # polling a real training job (processes, files): it offers no event to wait on
        time.sleep(poll_seconds)
    raise TimeoutError(f"waited {timeout_seconds:g} s for {what}")


@dataclass
class FaultResult:
    fault: str
    rank: int
    fault_at: float
    finding: Finding
    detected_seconds: float
    recovered_seconds: float
    checkpoint_before_fault: int | None
    resumed_step: int
    actions: list[ActionRecord]
    findings: list[Finding]  # every finding up to the restarted group's first step


def run_fault(
    tmp: Path,
    fault: str,
    rank: int = 2,
    *,
    step_seconds: float = 0.1,
    slow_factor: float = 1.3,
    slow_from_step: int = 0,
    step_jitter: float = 0.0,
    finding_kinds: tuple[str, ...] = ("dead_rank",),
    detect_timeout_seconds: float = 60.0,
    restart_cost_seconds: float = 2.0,
    trainer: str = "plain",
    heartbeat_seconds: float = 1.0,
) -> FaultResult:
    """One scenario end to end: start the job, inject `fault` (kill | hang | slow) into `rank` once a
    checkpoint exists, wait for the finding naming it and for training steps of the restarted group.
    A slow rank is slow from its first step, or from `slow_from_step` (a slowdown in the middle of a run)."""
    runtime = Runtime(restart_cost_seconds=restart_cost_seconds)
    endpoint = runtime.start()
    extra = [f"--step-jitter={step_jitter}", f"--heartbeat-seconds={heartbeat_seconds}"]
    if fault == "slow":
        extra += [
            f"--slow-rank={rank}",
            f"--slow-seconds={step_seconds * (slow_factor - 1):.4f}",
            f"--slow-from-step={slow_from_step}",
        ]
    job = TorchrunJob(tmp, endpoint, step_seconds=step_seconds, extra=extra, trainer=trainer)
    try:
        wait_until(lambda: job.last_checkpoint(0) is not None, 90, "a first checkpoint")
        fault_at = time.time()
        if fault == "kill":
            os.kill(job.pid_of(rank), signal.SIGKILL)
        elif fault == "hang":
            os.kill(job.pid_of(rank), signal.SIGSTOP)
        elif fault == "slow" and slow_from_step <= 0:
            fault_at = min(e["ts"] for e in job.events("step", 0))  # slow from its first step
        elif fault == "slow":
            # the slowed step starts when the slow rank ended the step before it
            before = wait_until(
                lambda: [
                    e for e in job.events("step", 0) if e["rank"] == rank and e["step"] == slow_from_step - 1
                ],
                90,
                f"step {slow_from_step - 1} of rank {rank}",
            )
            fault_at = before[0]["ts"]
        seen = wait_until(
            lambda: [s for s in runtime.findings() if s.record.kind in finding_kinds],
            detect_timeout_seconds,
            f"a {'/'.join(finding_kinds)} finding",
        )[0]
        checkpoint_before = job.last_checkpoint(0)
        first = wait_until(lambda: job.first_step_after(1), 90, "steps of the restarted worker group")
        [resume] = [e for e in job.events("resume", 1) if e["rank"] == 0]
        return FaultResult(
            fault=fault,
            rank=rank,
            fault_at=fault_at,
            finding=seen.record,
            detected_seconds=seen.received_at - fault_at,
            # a slow rank is not a stop: its recovery clock starts when it is found
            recovered_seconds=first["ts"] - (seen.received_at if fault == "slow" else fault_at),
            checkpoint_before_fault=max(
                (c for c in (checkpoint_before, job.last_checkpoint(0)) if c is not None), default=None
            ),
            resumed_step=int(resume["step"]),
            actions=[s.record for s in runtime.actions()],
            findings=[s.record for s in runtime.findings()],
        )
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n--- torchrun log ---\n{job.log_tail()}") from exc
    finally:
        job.stop()
        runtime.stop()


def run_healthy(
    tmp: Path, seconds: float, *, step_seconds: float = 0.1, step_jitter: float = 0.0
) -> tuple[list[Finding], int]:
    """A fault-free job for `seconds` after its first step: every finding the runtime raised, and the steps
    rank 0 completed (a false-positive run)."""
    runtime = Runtime()
    endpoint = runtime.start()
    job = TorchrunJob(tmp, endpoint, step_seconds=step_seconds, extra=[f"--step-jitter={step_jitter}"])
    try:
        wait_until(lambda: job.events("step", 0), 90, "a first training step")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and job.proc.poll() is None:
            time.sleep(0.5)
        if job.proc.poll() is not None:
            raise AssertionError(f"the job ended early\n--- torchrun log ---\n{job.log_tail()}")
        steps = max(e["step"] for e in job.events("step", 0) if e["rank"] == 0)
        return [s.record for s in runtime.findings()], steps
    finally:
        job.stop()
        runtime.stop()
