"""Whether PyTorch is installed and how many CUDA GPUs it sees, asked of a child so that this process never
initialises CUDA (a broken driver hangs the child, not the command)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from fleetguard.selfcheck.children import run_modules


@dataclass(frozen=True)
class TorchInfo:
    installed: bool
    cuda_gpus: int
    note: str


def probe(timeout_seconds: float = 60.0) -> TorchInfo:
    if importlib.util.find_spec("torch") is None:
        return TorchInfo(False, 0, "PyTorch is not installed (pip install torch)")
    (result,) = run_modules("fleetguard.selfcheck.torch_probe_child", [[]], [{}], timeout_seconds)
    if result.answer is None:
        return TorchInfo(True, 0, f"PyTorch could not look for GPUs: {result.problem}")
    return TorchInfo(True, int(result.answer.get("cuda_gpus", 0)), "")
