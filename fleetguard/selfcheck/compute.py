"""The compute and memory test of each selected GPU, each in a child process (`gpu_worker`)."""

from __future__ import annotations

from diagnosis.policy import SelfcheckPolicy
from fleetguard.selfcheck.children import run_modules
from fleetguard.selfcheck.report import CheckResult, CheckState
from fleetguard.selfcheck.torch_probe import TorchInfo


def compute_checks(
    gpus: list[int], torch: TorchInfo, policy: SelfcheckPolicy, timeout_seconds: float
) -> list[CheckResult]:
    if not gpus:
        return []
    if not torch.installed or torch.cuda_gpus == 0:
        why = torch.note or "no CUDA GPU visible to PyTorch"
        return [CheckResult("compute", "host", CheckState.SKIPPED, why)]
    args = [
        [str(g), str(policy.compute_matrix_size), repr(policy.compute_relative_tolerance),
         repr(policy.memory_test_mib)]
        for g in gpus
    ]  # fmt: skip
    results: list[CheckResult] = []
    children = run_modules("fleetguard.selfcheck.gpu_worker", args, [{}] * len(gpus), timeout_seconds)
    for gpu, child in zip(gpus, children, strict=True):
        component = f"gpu:{gpu}"
        if child.answer is None:
            results.append(CheckResult("compute", component, CheckState.FAILED, child.problem))
            continue
        compute, memory = child.answer.get("compute", {}), child.answer.get("memory", {})
        error = float(compute.get("relative_error", float("inf")))
        results.append(
            CheckResult(
                "compute",
                component,
                CheckState.PASSED if compute.get("ok") else CheckState.FAILED,
                f"{policy.compute_matrix_size}^2 fp32 matmul, relative error {error:.2e} "
                f"(at most {policy.compute_relative_tolerance:g})",
                {"relative_error": error, "seconds": float(compute.get("seconds", 0.0))},
            )
        )
        results.append(
            CheckResult(
                "memory",
                component,
                CheckState.PASSED if memory.get("ok") else CheckState.FAILED,
                f"{policy.memory_test_mib:g} MiB written and read back"
                + ("" if memory.get("ok") else f": sum {memory.get('sum')} != {memory.get('expected')}"),
                {"mib": policy.memory_test_mib},
            )
        )
    return results
