"""A small PyTorch DDP job on CPU (gloo) wired to fleetguard: heartbeats, step/section timings, collective
progress, checkpoints on request, and resume from the latest complete checkpoint.

    torchrun --nproc-per-node 4 --max-restarts 3 examples/train_ddp.py --ckpt-dir /tmp/ckpt --steps 300

A checkpoint is complete when every rank has written its file (tmp file, then os.replace) and rank 0 has
written the COMPLETE marker after a barrier. --events FILE appends one JSON line per event (start, resume,
checkpoint, step, done) for tests and benchmarks. --slow-rank / --slow-seconds inject a slow
rank (tests only).

--trainer plain runs the same arithmetic written out: rank 0's parameters broadcast, one all_reduce of the
flattened gradients after backward (DDP's reducer with a single bucket), and p -= lr * grad (torch.optim.SGD).
DistributedDataParallel's constructor and torch.optim's first add_param_group each import torch._dynamo:
about 1.8 s of CPU per rank and start on torch 2.13, as much as importing torch. The tests and benchmarks,
which start 4 ranks on a 2-core machine twice per scenario, use it; the collectives, heartbeats, checkpoints
and exits are the same.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from fleetguard import client as fg

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel

MARKER = "COMPLETE"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--ckpt-dir", type=Path, required=True)
    p.add_argument("--ckpt-every", type=int, default=20, help="steps between periodic checkpoints (0: never)")
    p.add_argument("--step-seconds", type=float, default=0.05, help="simulated compute per step")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--events", type=Path, default=None, help="append JSON-line events here")
    p.add_argument("--heartbeat-seconds", type=float, default=1.0)
    p.add_argument("--slow-rank", type=int, default=-1, help="fault injection: this rank sleeps every step")
    p.add_argument("--slow-seconds", type=float, default=0.0)
    p.add_argument(
        "--slow-from-step", type=int, default=0, help="fault injection: the slow rank slows from here"
    )
    p.add_argument(
        "--step-jitter",
        type=float,
        default=0.0,
        help="each rank's step time varies uniformly by this fraction (0.1: +-10%%), drawn per rank and step",
    )
    p.add_argument(
        "--skip-collective-rank",
        type=int,
        default=-1,
        help="fault injection: from --skip-collective-step on, this rank issues no collective (a program bug "
        "such as a wrong `if rank ...` around them): its peers wait for it forever while it trains on alone",
    )
    p.add_argument("--skip-collective-step", type=int, default=-1)
    p.add_argument(
        "--no-collective-reports", action="store_true", help="report heartbeats, steps and sections only"
    )
    p.add_argument(
        "--trainer",
        choices=("ddp", "plain"),
        default="ddp",
        help="ddp: DistributedDataParallel and torch.optim.SGD; plain: the same written out (see above)",
    )
    p.add_argument(
        "--fault-attempt", type=int, default=0, help="inject faults only in this torchrun restart attempt"
    )
    return p.parse_args(argv)


class Events:
    """JSON lines appended with O_APPEND: short lines from several ranks do not interleave."""

    def __init__(self, path: Path | None, rank: int, attempt: int) -> None:
        self.path = path
        self.rank = rank
        self.attempt = attempt

    def emit(self, event: str, **fields: Any) -> None:
        line = {
            "event": event,
            "rank": self.rank,
            "attempt": self.attempt,
            "pid": os.getpid(),
            "ts": time.time(),
        }
        line.update(fields)
        text = json.dumps(line) + "\n"
        if self.path is None:
            if event != "step":
                sys.stdout.write(text)
                sys.stdout.flush()
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def latest_complete(root: Path, world_size: int) -> int | None:
    """The newest step whose marker and every rank's file exist."""
    best: int | None = None
    if not root.is_dir():
        return None
    for entry in root.iterdir():
        if not entry.name.startswith("step_") or not (entry / MARKER).exists():
            continue
        if all((entry / f"rank{r}.pt").exists() for r in range(world_size)):
            step = int(entry.name.removeprefix("step_"))
            best = step if best is None else max(best, step)
    return best


def save_checkpoint(root: Path, step: int, rank: int, model: nn.Module, opt: Optimizer) -> None:
    folder = step_dir(root, step)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".rank{rank}.pt.tmp"
    torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, tmp)
    os.replace(tmp, folder / f"rank{rank}.pt")
    dist.barrier()  # every rank's file is in place
    if rank == 0:
        marker_tmp = folder / f".{MARKER}.tmp"
        marker_tmp.write_text(json.dumps({"step": step, "world_size": dist.get_world_size()}))
        os.replace(marker_tmp, folder / MARKER)
    dist.barrier()  # the marker is in place: the checkpoint is complete for everyone


def load_checkpoint(root: Path, step: int, rank: int, model: nn.Module, opt: Optimizer) -> None:
    state = torch.load(step_dir(root, step) / f"rank{rank}.pt", weights_only=True)  # no arbitrary unpickling
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])


class PlainSGD:
    """torch.optim.SGD without momentum, written out (torch.optim imports torch._dynamo on first use)."""

    def __init__(self, params: Iterable[nn.Parameter], lr: float) -> None:
        self.params = list(params)
        self.lr = lr

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for param in self.params:
            if param.grad is not None:
                param.add_(param.grad, alpha=-self.lr)

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lr = float(state["lr"])


Optimizer = torch.optim.Optimizer | PlainSGD


def wrap_ddp(net: nn.Module, trainer: str) -> DistributedDataParallel | None:
    """`net` in DistributedDataParallel; None for --trainer plain, where every rank takes rank 0's
    parameters (what DDP's constructor broadcasts) and `average_gradients` syncs after backward."""
    if trainer == "ddp":
        from torch.nn.parallel import DistributedDataParallel  # imports torch._dynamo

        return DistributedDataParallel(net)
    for param in net.parameters():
        dist.broadcast(param.data, src=0)
    return None


def average_gradients(net: nn.Module) -> None:
    """One all_reduce of every gradient, flattened (DDP's reducer with one bucket), divided by the world."""
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def init_process_group(attempt: int) -> None:
    """gloo over torchrun's store, with keys scoped to this restart attempt: a restarted worker group must not
    read the previous group's (now dead) peer addresses from the long-lived store."""
    store, rank, world = next(dist.rendezvous("env://"))
    dist.init_process_group(
        "gloo",
        store=dist.PrefixStore(f"fleetguard-example/attempt-{attempt}", store),
        rank=rank,
        world_size=world,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    init_process_group(attempt)
    train(args, attempt)
    # DistributedDataParallel's reducer sits in a reference cycle and holds the process group: left to the
    # cyclic collector, gloo may be torn down during interpreter shutdown, which aborts the rank (SIGABRT)
    # after a clean run. train's locals are gone here; collect DDP now, then destroy the group.
    gc.collect()
    dist.destroy_process_group()
    return 0


def train(args: argparse.Namespace, attempt: int) -> None:
    """Steps from the latest complete checkpoint to --steps (or a stop request), checkpointing as asked."""
    rank, world = dist.get_rank(), dist.get_world_size()
    events = Events(args.events, rank, attempt)
    fg.attach(heartbeat_interval_seconds=args.heartbeat_seconds)
    events.emit("start", world_size=world)

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(args.hidden, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1))
    ddp = wrap_ddp(net, args.trainer)
    model = net if ddp is None else ddp
    opt: Optimizer = PlainSGD(net.parameters(), lr=0.01)
    if ddp is not None:
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
    start = 0
    resumed = latest_complete(args.ckpt_dir, world)
    if resumed is not None:
        load_checkpoint(args.ckpt_dir, resumed, rank, net, opt)
        start = resumed
        fg.checkpoint_done(resumed)
    events.emit("resume", step=start, checkpoint=resumed)

    faulty = attempt == args.fault_attempt
    slow = args.slow_seconds if (rank == args.slow_rank and faulty) else 0.0
    skip_from = args.skip_collective_step if (rank == args.skip_collective_rank and faulty) else None
    report = fg.collective if not args.no_collective_reports else None
    flags = torch.zeros(2)
    generator = torch.Generator().manual_seed(1000 + rank)
    jitter = random.Random(2000 + rank)
    stopped = False
    last = start
    for step in range(start, args.steps):
        fg.step(step)
        last = step
        # Every rank must checkpoint (or stop) at the same step: agree with one tiny all_reduce.
        flags[0] = float(fg.checkpoint_requested())
        flags[1] = float(fg.stop_requested())
        skipping = skip_from is not None and step >= skip_from
        if skipping:
            if step == skip_from:
                events.emit("skipped_collective", step=step)
        else:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        if flags[1] > 0:
            stopped = True
            events.emit("stop", step=step)
            break
        periodic = args.ckpt_every > 0 and step > start and step % args.ckpt_every == 0
        if flags[0] > 0 or periodic:
            with fg.section("checkpoint"):
                save_checkpoint(args.ckpt_dir, step, rank, net, opt)
            fg.checkpoint_done(step)
            events.emit("checkpoint", step=step, requested=bool(flags[0] > 0))
        x = torch.randn(32, args.hidden, generator=generator)
        y = x.sum(dim=1, keepdim=True)
        # DDP reads whether to sync gradients at forward time: a rank that skips collectives runs both
        # forward and backward under no_sync
        local_only = ddp.no_sync() if skipping and ddp is not None else contextlib.nullcontext()
        with fg.section("compute"), local_only:
            loss = nn.functional.mse_loss(model(x), y)
            noise = args.step_seconds * args.step_jitter * (2.0 * jitter.random() - 1.0)
            late = slow if step >= args.slow_from_step else 0.0
            time.sleep(args.step_seconds + noise + late)  # stands in for the GPU work of a real step
        if report is not None:
            report("world", enqueued=step, started=step, completed=step - 1, op="gloo:all_reduce")
        opt.zero_grad()
        with ddp.no_sync() if skipping and ddp is not None else contextlib.nullcontext():
            loss.backward()  # DDP's gradient all_reduce runs here (not under no_sync)
        if ddp is None and not skipping:
            average_gradients(net)
        if report is not None:
            report("world", enqueued=step, started=step, completed=step, op="gloo:all_reduce")
        opt.step()
        events.emit("step", step=step)
    fg.step_end(last)
    events.emit("done", stopped=stopped)
    fg.close()


if __name__ == "__main__":
    sys.exit(main())
