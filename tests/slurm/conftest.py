from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurm.cluster import SlurmCluster, require_slurm


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    """One real Slurm cluster per test module (starting one takes a few seconds); tests leave its node in
    service and its queue empty."""
    require_slurm()
    cluster = SlurmCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
