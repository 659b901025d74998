"""`predict`'s rows: rank, device, risk and the features that drove each score, as JSON or a table."""

from __future__ import annotations

from typing import Any

import click
import numpy as np
import numpy.typing as npt

from predictor.artifact import LoadedModel
from predictor.dataset import Instances
from predictor.explain import drivers_vs_reference, top_drivers
from predictor.models import Matrix


def prediction_rows(loaded: LoadedModel, inst: Instances, top_k: int) -> list[dict[str, Any]]:
    """The `top_k` riskiest devices. With the model's calibration (any model `train` saves now), `risk` is
    the probability of a failure within the horizon and the drivers are measured from a typical healthy
    device; an older model without one gives its raw score and XGBoost's own contributions."""
    if len(inst) == 0:
        return []
    raw = loaded.model.score(inst.x)
    order = np.argsort(-raw, kind="stable")[:top_k]
    policy = loaded.policy
    if policy is None:
        risk = raw
        drivers = top_drivers(loaded.model, inst.x[order], inst.feature_names)
    else:
        risk = policy.calibration.apply(raw)

        def risk_of(x: Matrix) -> npt.NDArray[np.float64]:
            return policy.calibration.apply(loaded.model.score(x))

        drivers = drivers_vs_reference(
            risk_of, inst.x[order], policy.reference, inst.feature_names, fleet=inst.x
        )
    return [
        {
            "rank": rank,
            "device_id": str(inst.device_id[i]),
            "ts": float(inst.ts[i]),
            "risk": float(risk[i]),
            "drivers": [d.as_dict() for d in why],
        }
        for rank, (i, why) in enumerate(zip(order.tolist(), drivers, strict=True), start=1)
    ]


def _value(v: object) -> str:
    return "missing" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def driver_text(d: dict[str, Any]) -> str:
    """`feature=value (p97 of the fleet)`: the value and, when known, where it sits in the fleet."""
    pct = d.get("percentile")
    where = f" (p{pct:.0f} of the fleet)" if isinstance(pct, int | float) else ""
    return f"{d['feature']}={_value(d['value'])}{where}"


def print_rows(rows: list[dict[str, Any]]) -> None:
    if not rows:
        click.echo("no devices to score", err=True)
        return
    click.echo(f"{'#':>3}  {'DEVICE':<32} {'RISK':>6}  DRIVERS (feature=value)")
    for row in rows:
        why = ", ".join(driver_text(d) for d in row["drivers"]) or "–"
        click.echo(f"{row['rank']:>3}  {row['device_id']:<32} {row['risk']:>6.4f}  {why}")
