"""Child process: one rank of the self-check's all-reduce (NCCL on GPUs, gloo on CPU); prints one JSON line.

Run by `allreduce.py` with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment and
`BACKEND MIB ITERATIONS DEVICE` as arguments. Every rank sends rank+1, so the sum is known and checked."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    import torch
    import torch.distributed as dist

    backend, mib, iterations, device_name = argv[0], float(argv[1]), int(argv[2]), argv[3]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
    try:
        elements = max(1, int(mib * 2**20) // 4)
        tensor = torch.full((elements,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(tensor)  # warm-up: connections and buffers
        expected = world * (world + 1) / 2
        ok = bool(torch.all(tensor == expected).item())
        dist.barrier()
        started = time.perf_counter()
        for _ in range(iterations):
            dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = (time.perf_counter() - started) / iterations
        print(json.dumps({"rank": rank, "ok": ok, "seconds": seconds, "bytes": elements * 4}), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
