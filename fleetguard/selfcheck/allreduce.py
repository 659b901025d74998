"""The all-reduce among the host's GPUs: NCCL, one process per GPU; on a host without GPUs the same code
path through gloo with two CPU processes (so CI runs what a GPU host runs). Bus bandwidth is the
nccl-tests figure: algorithm bandwidth x 2(n-1)/n."""

from __future__ import annotations

import socket

from diagnosis.policy import SelfcheckPolicy
from fleetguard.selfcheck.children import run_modules
from fleetguard.selfcheck.report import CheckResult, CheckState
from fleetguard.selfcheck.torch_probe import TorchInfo

CPU_RANKS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def allreduce_check(
    gpus: list[int], torch: TorchInfo, policy: SelfcheckPolicy, timeout_seconds: float
) -> CheckResult:
    if not torch.installed:
        return CheckResult("allreduce", "host", CheckState.SKIPPED, torch.note)
    if torch.cuda_gpus > 0 and len(gpus) == 1:
        return CheckResult(
            "allreduce", "host", CheckState.SKIPPED, "one GPU selected: nothing to all-reduce with"
        )
    nccl = torch.cuda_gpus > 0 and len(gpus) > 1
    backend, minimum = ("nccl", policy.min_nccl_busbw_gbps) if nccl else ("gloo", policy.min_gloo_busbw_gbps)
    devices = [f"cuda:{g}" for g in gpus] if nccl else ["cpu"] * CPU_RANKS
    mib = policy.allreduce_mib if nccl else policy.allreduce_mib / 8
    world, port = len(devices), _free_port()
    envs = [
        {"RANK": str(r), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
         "OMP_NUM_THREADS": "1"}
        for r in range(world)
    ]  # fmt: skip
    argvs = [[backend, repr(mib), str(policy.allreduce_iterations), d] for d in devices]
    children = run_modules("fleetguard.selfcheck.allreduce_worker", argvs, envs, timeout_seconds)
    problems = [f"rank {r}: {c.problem}" for r, c in enumerate(children) if c.problem]
    if problems:
        return CheckResult("allreduce", "host", CheckState.FAILED, f"{backend}: {'; '.join(problems)}"[:300])
    answers = [c.answer or {} for c in children]
    if not all(a.get("ok") for a in answers):
        return CheckResult("allreduce", "host", CheckState.FAILED, f"{backend}: a rank received a wrong sum")
    seconds = max(float(a["seconds"]) for a in answers)
    size = int(answers[0]["bytes"])
    busbw = size / seconds * 2 * (world - 1) / world / 1e9
    evidence: dict[str, float | int | str] = {
        "backend": backend,
        "ranks": world,
        "bytes": size,
        "busbw_gbps": round(busbw, 3),
        "min_busbw_gbps": minimum,
    }
    state = CheckState.PASSED if busbw >= minimum else CheckState.FAILED
    detail = (
        f"{backend}, {world} ranks, {size / 2**20:g} MiB: bus bandwidth {busbw:.2f} GB/s (min {minimum:g})"
    )
    return CheckResult("allreduce", "host", state, detail, evidence)
