"""Child process: a compute and a memory test on one GPU with PyTorch; prints one JSON line.

Run as `python -m fleetguard.selfcheck.gpu_worker GPU MATRIX TOLERANCE MEMORY_MIB` by `compute.py`, in a
child so that a hung kernel or a driver fault ends in a timeout there, never in the agent or the command."""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def main(argv: list[str]) -> int:
    import torch

    gpu, n, tolerance, memory_mib = int(argv[0]), int(argv[1]), float(argv[2]), float(argv[3])
    device = torch.device(f"cuda:{gpu}")
    torch.cuda.set_device(device)
    out: dict[str, Any] = {"gpu": gpu, "name": torch.cuda.get_device_name(device)}
    generator = torch.Generator(device="cpu").manual_seed(1234 + gpu)
    a = torch.randn(n, n, generator=generator)
    b = torch.randn(n, n, generator=generator)
    started = time.perf_counter()
    c = (a.to(device) @ b.to(device)).cpu()
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    rows = min(16, n)  # a float64 reference for a few rows keeps the CPU's share small
    reference = a[:rows].double() @ b.double()
    error = float((c[:rows].double() - reference).abs().max() / reference.abs().max())
    out["compute"] = {"relative_error": error, "ok": error <= tolerance, "seconds": seconds}
    count = int(memory_mib * 2**20)
    pattern = torch.arange(count, dtype=torch.int64, device=device).remainder_(251).to(torch.uint8)
    expected = int(((torch.arange(count, dtype=torch.int64) % 251).sum()).item())
    first = int(pattern.sum(dtype=torch.int64).item())
    pattern.bitwise_not_()  # every bit flipped once: stuck bits show in one of the two sums
    second = int(pattern.sum(dtype=torch.int64).item())
    ok = first == expected and second == 255 * count - expected
    out["memory"] = {"mib": memory_mib, "ok": ok, "sum": first, "expected": expected}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
