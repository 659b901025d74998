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
    assert [rank.returncode for rank in ranks] == [0] * WORLD, outputs


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
