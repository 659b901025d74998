"""What the agent process may take on a big GPU host, where every core belongs to the training job.

Left to their defaults, DuckDB starts a worker thread per core (and may cache up to 80% of RAM) and the BLAS
library under numpy starts a thread pool per core at import: on a 16-core H100 host the agent ran 53 threads
and peaked at 177 MB (tests/fixtures/h100/README.md). The agent writes small batches and reads little, so:
- DuckDB: 1 worker thread (queries run on the calling thread) and a 128 MiB memory limit (larger sorts and
  joins spill to disk rather than grow the agent);
- BLAS/OpenMP pools: 1 thread, set before numpy is first imported (the agent's store no longer imports it;
  extensions may).
An operator can still widen the pools through the same environment variables. glibc's malloc arenas: 2,
not one per allocating thread (MALLOC_ARENA_MAX still wins).

Open files: the runtime endpoint may hold 2048 connections and /metrics 1024, and a restart needs a pidfd per
target. Under the common soft limit of 1024 descriptors one local user holding connections would leave the
agent none for its store, /proc reads and pidfds, so the soft limit is raised toward the hard one.
"""

from __future__ import annotations

import os
import resource
from collections.abc import MutableMapping
from typing import Final

from fleetguard.store.engine_limits import EngineLimits

AGENT_DUCKDB: Final = EngineLimits(threads=1, memory_limit_mib=128)
NATIVE_POOL_VARIABLES: Final = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def bound_native_threads(environ: MutableMapping[str, str] | None = None) -> None:
    """One thread for each native pool the operator has not sized (effective only before numpy's import)."""
    env = os.environ if environ is None else environ
    for name in NATIVE_POOL_VARIABLES:
        env.setdefault(name, "1")


# glibc gives each thread that allocates an arena of its own (up to 8 per core), and each keeps its freed
# pages: the agent's ~9 threads allocate little, so 2 arenas hold their memory in fewer pages (-4 to -5 MB of
# peak RSS measured with 8 simulated GPUs).
MALLOC_ARENAS: Final = 2
_M_ARENA_MAX: Final = -8  # mallopt's parameter number in glibc's malloc.h


def bound_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for threads started from now on (MALLOC_ARENA_MAX set by the operator
    wins); False where the C library is not glibc or refuses."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): nothing to bound
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_ARENA_MAX, arenas))


OPEN_FILES_WANTED: Final = 8192  # runtime (2048) + /metrics (1024) connections, files, pidfds, headroom


def raise_open_file_limit(wanted: int = OPEN_FILES_WANTED) -> int:
    """Raise the soft RLIMIT_NOFILE to `wanted` (at most the hard limit, never lower); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass  # a container may forbid it: the connection caps still bound what users can take
    return soft
