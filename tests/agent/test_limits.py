"""The agent's DuckDB and native thread pools are bounded: a fixed thread count whatever the core count."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetguard.agent.limits import AGENT_DUCKDB, bound_malloc_arenas, bound_native_threads
from fleetguard.store.store import EngineLimits, Store

# A fresh process opens the store as the agent does (or as DuckDB would by default), writes, imports numpy
# and prints how many threads it has.
PROBE = """
import os, sys
from fleetguard.agent.local_sink import open_store
from fleetguard.store import Store
store = open_store(sys.argv[1]) if sys.argv[2] == "agent" else Store.open(sys.argv[1])
store.connection.execute("CREATE TABLE t AS SELECT * FROM range(200000)")
import numpy
numpy.ones((256, 256)) @ numpy.ones((256, 256))
print(len(os.listdir("/proc/self/task")))
"""


def threads_of_a_process_that_opens_the_store(tmp_path: Path, how: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / f"{how}.duckdb"), how],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )
    return int(out.stdout.strip())


def test_the_agent_process_runs_a_fixed_handful_of_threads(tmp_path: Path) -> None:
    agent = threads_of_a_process_that_opens_the_store(tmp_path, "agent")
    default = threads_of_a_process_that_opens_the_store(tmp_path, "default")
    # main thread + DuckDB's one async I/O thread (DuckDB 1.4+); queries run on the calling thread
    assert agent <= 2
    # DuckDB's defaults: a worker per core and 8 async I/O threads, and a BLAS pool per core
    assert default >= agent + 8


def test_the_store_opened_with_limits_reports_them(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.duckdb", limits=AGENT_DUCKDB) as store:
        threads, memory = store.connection.execute(
            "SELECT current_setting('threads'), current_setting('memory_limit')"
        ).fetchone() or (None, None)
    assert (threads, memory) == (1, "128.0 MiB")


@pytest.mark.parametrize(("threads", "memory"), [(0, 128), (2000, 128), (1, 8), (1, 2**21)])
def test_limits_out_of_range_are_refused(threads: int, memory: int) -> None:
    with pytest.raises(ValueError):
        EngineLimits(threads=threads, memory_limit_mib=memory)


def test_native_pools_get_one_thread_unless_the_operator_sized_them() -> None:
    env = {"OMP_NUM_THREADS": "4"}
    bound_native_threads(env)
    assert env == {
        "OMP_NUM_THREADS": "4",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
    }


def test_the_open_file_limit_is_raised_toward_the_hard_limit() -> None:
    # in a child: the test process's own limit stays as it was
    code = (
        "import resource\n"
        "from fleetguard.agent.limits import raise_open_file_limit\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 6000))\n"
        "print(raise_open_file_limit(8192), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
        "print(raise_open_file_limit(2048), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["6000 6000", "6000 6000"]  # capped at hard, never lowered


def test_malloc_arenas_are_left_to_an_operator_who_set_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert bound_malloc_arenas() is False


def test_malloc_arenas_are_capped_in_a_fresh_process(tmp_path: Path) -> None:
    """glibc takes the cap (mallopt answers 1); a process that then starts threads runs as before."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    probe = (
        "import threading; from fleetguard.agent.limits import bound_malloc_arenas; "
        "ok = bound_malloc_arenas(); t = threading.Thread(target=lambda: bytearray(1 << 20)); t.start(); "
        "t.join(); print(ok)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "True"
