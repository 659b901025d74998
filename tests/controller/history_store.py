"""A store file holding a fleet's history with failures: simulate-history's GPUs and failures, shifted to end
at a given time and written into fleetguard's own tables (gpu_samples, events), as agents would have."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from fleetguard.predict.simulated_history import HistorySpec, write_parquet
from fleetguard.store import Store

HOUR = 3600.0
HISTORY = HistorySpec(n_gpus=60, n_steps=24 * 20, step_seconds=HOUR, failure_rate=0.35)


def write_history_store(path: Path, end_ts: float, spec: HistorySpec = HISTORY, seed: int = 0) -> None:
    """`spec`'s history ending at `end_ts` (whole hours), 8 GPUs per host."""
    end = end_ts - end_ts % spec.step_seconds
    spec = dataclasses.replace(spec, seed=seed, start_ts=end - spec.n_steps * spec.step_seconds)
    with tempfile.TemporaryDirectory() as tmp:
        samples, failures, _ = write_parquet(spec, Path(tmp))
        with Store.open(path) as store:
            con = store.connection
            con.execute(
                f"""CREATE TEMP VIEW sim AS SELECT *,
                  CAST(substr(device_id, 5) AS INTEGER) AS n FROM read_parquet('{samples}/*.parquet')"""
            )
            con.execute(
                """INSERT INTO gpu_samples (ts, host, gpu_index, uuid, pci_bus_id, temperature_celsius,
                  power_watts, utilization_gpu_percent, utilization_memory_percent, ecc_corrected_aggregate,
                  ecc_uncorrected_aggregate, remapped_rows_corrected, pcie_replay_errors,
                  nvlink_crc_flit_errors)
                SELECT make_timestamp(CAST(ts * 1e6 AS BIGINT)), 'node' || (n // 8), n % 8, device_id,
                  printf('0000:%02x:00.0', n % 8), temperature_celsius, power_watts,
                  utilization_gpu_percent, utilization_memory_percent, ecc_corrected_aggregate,
                  ecc_uncorrected_aggregate, remapped_rows_corrected, pcie_replay_errors,
                  nvlink_crc_flit_errors
                FROM sim"""
            )
            con.execute(
                f"""INSERT INTO events (ts, host, kind, source, message, code, gpu_index, pci_bus_id)
                SELECT make_timestamp(CAST(ts * 1e6 AS BIGINT)), 'node' || (n // 8),
                  CASE WHEN kind LIKE 'xid_%' THEN 'xid' ELSE kind END, 'kmsg', kind,
                  CASE WHEN kind LIKE 'xid_%' THEN CAST(substr(kind, 5) AS INTEGER) END,
                  n % 8, printf('0000:%02x:00.0', n % 8)
                FROM (SELECT *, CAST(substr(device_id, 5) AS INTEGER) AS n
                      FROM read_parquet('{failures}'))"""
            )
