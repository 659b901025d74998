"""Small simulated fleet histories with known failures, shared by the predictor tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetguard.predict.simulated_history import HistorySpec, write_parquet


@dataclass(frozen=True)
class History:
    samples: Path
    failures: Path
    spec: HistorySpec


@pytest.fixture(scope="session")
def small_history(tmp_path_factory: pytest.TempPathFactory) -> History:
    """250 GPUs, 60 days hourly, with drift half way: enough failures for every model, fast to build."""
    spec = HistorySpec(n_gpus=250, n_steps=24 * 60, failure_rate=0.3, seed=7)
    samples, failures, _ = write_parquet(spec, tmp_path_factory.mktemp("history"), gpus_per_chunk=100)
    return History(samples, failures, spec)


def write_table(path: Path, columns: dict[str, list[object]]) -> Path:
    if path.suffix == ".csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(pa.table(columns), path)
    else:
        pq.write_table(pa.table(columns), path)
    return path


@pytest.fixture
def table_writer() -> Callable[[Path, dict[str, list[object]]], Path]:
    """Writes a small Parquet or CSV file (by suffix) from columns."""
    return write_table
