"""`fleetguard simulate-history OUT --gpus N --days D`: a contract dataset with known ground truth to try the
predictor on (samples/, failures.parquet, truth.parquet), hourly samples, with a fleet change half way."""

from __future__ import annotations

import enum
from pathlib import Path

import click
import pyarrow as pa
import pyarrow.parquet as pq

from fleetguard.predict.inputs import PATH
from fleetguard.predict.simulated_history import SAMPLE_COLUMNS, HistorySpec, simulate_failures, write_parquet
from fleetguard.predict.store_reader import gpu_feature_columns


class Columns(enum.StrEnum):
    """Which sample columns the history holds."""

    CONTRACT = "contract"  # every simulated column, text columns (sku, driver_version) included
    STORE = (
        "store"  # only those fleetguard's store has (GpuSample fields): a model trained on it scores a store
    )


@click.command("simulate-history")
@click.argument("out", type=PATH)
@click.option("--gpus", default=200, show_default=True, type=click.IntRange(10, 200_000), help="Fleet size.")
@click.option("--days", default=90, show_default=True, type=click.IntRange(20, 3650), help="History length.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**31 - 1))
@click.option(
    "--columns",
    type=click.Choice([c.value for c in Columns]),
    default=Columns.CONTRACT.value,
    show_default=True,
    help="contract: every simulated column; store: only the columns fleetguard's store holds, so a model "
    "trained on the history can score a store (predict --store, [predictor] model_dir).",
)
def simulate_history_command(out: Path, gpus: int, days: int, seed: int, columns: str) -> None:
    """Write a simulated fleet history in the predictor's input contract (Parquet) to OUT."""
    if (out / "samples").exists() or (out / "failures.parquet").exists():
        raise click.ClickException(f"{out} already holds a history; choose an empty directory")
    spec = HistorySpec(n_gpus=gpus, n_steps=24 * days, seed=seed)
    keep = store_columns() if Columns(columns) is Columns.STORE else None
    try:
        _write_history(spec, out, keep)
    except OSError as exc:  # an unwritable or missing OUT is the operator's to fix: one line, no traceback
        raise click.ClickException(f"cannot write the history to {out}: {exc.strerror or exc}") from None


def store_columns() -> frozenset[str]:
    """The simulated columns fleetguard's store also holds."""
    return frozenset(SAMPLE_COLUMNS) & frozenset(gpu_feature_columns())


def _write_history(spec: HistorySpec, out: Path, keep: frozenset[str] | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    samples, failures, rows = write_parquet(spec, out, keep_columns=keep)
    truth = simulate_failures(spec)
    pq.write_table(
        pa.table(
            {
                "device_id": truth.device_id,
                "ts": truth.ts,
                "kind": truth.kind,
                "pattern": truth.pattern,
                "onset_ts": truth.onset_ts,
            }
        ),
        out / "truth.parquet",
    )
    click.echo(
        f"wrote {rows} samples of {spec.n_gpus} GPUs over {spec.n_steps // 24} days to {samples}, "
        f"{len(truth.ts)} failures to {failures} "
        f"(ground truth with precursor patterns: {out / 'truth.parquet'})"
    )
    click.echo(f"next: fleetguard evaluate --samples {samples} --failures {failures}")
