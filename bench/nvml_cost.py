"""NVML CPU per sampling round for 8 GPUs under the cost model recorded on a real H100, before and after.

The scripted driver (tests/collectors/nvml_stub.py) answers what the recorded H100 answered and charges every
call the CPU time that call cost there (tests/fixtures/h100/nvml-call-costs.json; calls the recording lists
as 2-9 µs are charged 9 µs). "before" runs the collector as it was at commit 9e506b8 (every field every
round, read from git); "after" runs today's with its default cadence (collectors/gpu_sampling.py). Rounds are
1 s apart in simulated time; the first round (which reads everything) is reported on its own.

Usage: python bench/nvml_cost.py [--rounds 600] [--gpus 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pynvml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collectors.nvml import NvmlCollector  # noqa: E402
from tests.collectors.nvml_stub import (  # noqa: E402
    H100_GPM,
    CostMeter,
    FakeGpu,
    FakeNvml,
    h100,
    h100_as_recorded,
)

BEFORE_COMMIT = "9e506b8"
_GPM_PCIE = frozenset({pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC})
HOST = "bench"
T0 = 1_700_000_000.0


def old_collector_module() -> ModuleType | None:
    """collectors/nvml.py as it was before the cadence (None where git or the commit is not there)."""
    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{BEFORE_COMMIT}:collectors/nvml.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "nvml_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("nvml_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def run(make: Callable[[Any], Any], gpus: list[FakeGpu], rounds: int) -> dict[str, float]:
    meter = CostMeter()
    driver = FakeNvml(gpus, cost=meter)
    collector = make(driver.as_module())
    collector.collect(T0)
    first_cpu, first_wall = meter.cpu_us, meter.wall_us
    per_round = []
    for i in range(1, rounds):
        before = meter.cpu_us
        collector.collect(T0 + i)
        per_round.append(meter.cpu_us - before)
    collector.close()
    steady_cpu = (meter.cpu_us - first_cpu) / (rounds - 1)
    steady_wall = (meter.wall_us - first_wall) / (rounds - 1)
    return {
        "first_ms": first_cpu / 1000,
        "cpu_ms": steady_cpu / 1000,
        "per_gpu_us": steady_cpu / len(gpus),
        "max_ms": max(per_round) / 1000,
        "wall_ms": steady_wall / 1000,
        "unlisted": float(len(meter.unlisted)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    n = args.gpus

    def recorded() -> list[FakeGpu]:
        return [h100_as_recorded(i) for i in range(n)]

    def recorded_gpm_without_pcie() -> list[FakeGpu]:
        gpus = recorded()
        for gpu in gpus:
            gpu.gpm = {k: v for k, v in H100_GPM.items() if k not in _GPM_PCIE}
        return gpus

    def no_gpm() -> list[FakeGpu]:
        gpus = recorded()
        for gpu in gpus:
            gpu.gpm = None
        return gpus

    def after(api: Any) -> Any:
        return NvmlCollector(HOST, nvml=api)

    rows: list[tuple[str, dict[str, float]]] = []
    old = old_collector_module()
    if old is not None:

        def before(api: Any) -> Any:
            return old.NvmlCollector(HOST, nvml=api)

        def before_no_pcie(api: Any) -> Any:
            return old.NvmlCollector(HOST, nvml=api, read_pcie_throughput=False)

        rows.append(("before: every field every round", run(before, recorded(), args.rounds)))
        rows.append(("before, PCIe throughput off", run(before_no_pcie, recorded(), args.rounds)))
    else:
        print(f"(no git history here: the 'before' rows need commit {BEFORE_COMMIT})")
    rows.append(("after: cadence, GPM with PCIe", run(after, recorded(), args.rounds)))
    rows.append(("after, GPM without PCIe metrics", run(after, recorded_gpm_without_pcie(), args.rounds)))
    rows.append(("after, no GPM (pre-Hopper path)", run(after, no_gpm(), args.rounds)))
    rows.append(
        ("after, HGX H100 SXM (18 NVLinks each)", run(after, [h100(i) for i in range(n)], args.rounds))
    )
    print(f"{n} GPUs, {args.rounds} rounds at 1 Hz, recorded H100 cost per call (tests/fixtures/h100)")
    print("| case | CPU per round | per GPU | worst round | first round | wall per round |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        print(
            f"| {name} | {r['cpu_ms']:.2f} ms | {r['per_gpu_us']:.0f} µs | {r['max_ms']:.2f} ms | "
            f"{r['first_ms']:.2f} ms | {r['wall_ms']:.2f} ms |"
        )


if __name__ == "__main__":
    from machine_load import measured  # type: ignore[import-not-found]  # a sibling script: bench/ is on sys.path when run

    measured(main)
