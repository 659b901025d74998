"""examples/train_ddp.py's two trainers train the same model: `--trainer plain` (DDP's broadcast, gradient
all_reduce and SGD update written out, which the torchrun tests run to spare each rank torch._dynamo's import)
and the default DistributedDataParallel + torch.optim.SGD, each as two real gloo ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.torchrun_job import EXAMPLE, REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(120)]

WORLD = 2
STEPS = 6  # a checkpoint at step 5, after 5 updates


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _train(ckpt: Path, trainer: str) -> None:
    """Two ranks of the example, started as torchrun would (its environment), with no agent listening."""
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "WORLD_SIZE": str(WORLD),
        "LOCAL_WORLD_SIZE": str(WORLD),
        "FLEETGUARD_AGENT_URL": f"127.0.0.1:{_free_port()}",  # nobody there: the client carries on
        "FLEETGUARD_JOB_ID": f"trainers-{trainer}",
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
    }
    argv = [sys.executable, str(EXAMPLE), f"--ckpt-dir={ckpt}", f"--steps={STEPS}", "--ckpt-every=5"]
    argv += ["--step-seconds=0", f"--trainer={trainer}"]
    ranks = [
        subprocess.Popen(
            argv,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        for r in range(WORLD)
    ]
    outputs = [rank.communicate(timeout=90)[0].decode(errors="replace") for rank in ranks]
    if [rank.returncode for rank in ranks] != [0] * WORLD:  # each rank's whole tail: pytest cuts a long repr
        pytest.fail(
            "\n".join(f"rank {r} exited {ranks[r].returncode}:\n{outputs[r][-4000:]}" for r in range(WORLD))
        )


# Run in a child: importing torch into the pytest process would cost every collection of this module 1.7 s.
_COMPARE = """
import json, sys, torch
root, world = sys.argv[1], int(sys.argv[2])
state = {(t, r): torch.load(f"{root}/{t}/step_00000005/rank{r}.pt", weights_only=True)["model"]
         for t in ("ddp", "plain") for r in range(world)}
torch.manual_seed(0)  # the example's model before its first step
initial = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).state_dict()
ddp = state["ddp", 0]
print(json.dumps({
    "keys": sorted(ddp),
    "moved": sorted(k for k in ddp if not torch.equal(ddp[k], initial[k])),
    "ddp_ranks_equal": all(torch.equal(state["ddp", r][k], ddp[k]) for r in range(world) for k in ddp),
    "plain_close": sorted(k for k in ddp if all(
        torch.allclose(state["plain", r][k], ddp[k], rtol=1e-5, atol=1e-7) for r in range(world))),
}))
"""


def test_the_plain_trainer_reaches_the_parameters_ddp_and_torch_optim_reach(tmp_path: Path) -> None:
    _train(tmp_path / "ddp", "ddp")
    _train(tmp_path / "plain", "plain")
    out = subprocess.run(
        [sys.executable, "-c", _COMPARE, str(tmp_path), str(WORLD)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    seen = json.loads(out)
    assert seen["keys"] == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert seen["moved"] == seen["keys"]  # five updates moved every parameter
    # each rank draws its own batches: ranks equal after five steps means the gradients were averaged
    assert seen["ddp_ranks_equal"] is True
    assert seen["plain_close"] == seen["keys"]  # on every rank of the plain run


# With automatic collection off, as when no collection happens to run before the interpreter shuts down.
_TEARDOWN = """
import gc, importlib.util, json, sys
gc.disable()
spec = importlib.util.spec_from_file_location("train_ddp", sys.argv[1])
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
rc = example.main(sys.argv[2:])
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
alive = sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
print(json.dumps({"rc": rc, "ddp_alive": alive, "group": dist.is_initialized()}))
"""


def test_a_ddp_rank_frees_ddp_and_its_process_group_before_the_interpreter_shuts_down(tmp_path: Path) -> None:
    """DDP's reducer sits in a reference cycle and holds the gloo process group. Left for the interpreter's
    shutdown to collect, gloo's teardown there aborted a rank that had trained cleanly (SIGABRT in CI)."""
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "FLEETGUARD_AGENT_URL": f"127.0.0.1:{_free_port()}",  # nobody there: the client carries on
        "FLEETGUARD_JOB_ID": "trainers-teardown",
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
    }
    argv = [sys.executable, "-c", _TEARDOWN, str(EXAMPLE), f"--ckpt-dir={tmp_path}", "--steps=2"]
    argv += ["--step-seconds=0", "--trainer=ddp"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=90, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"rc": 0, "ddp_alive": 0, "group": False}
