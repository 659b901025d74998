"""Numeric warnings counted and said once: a real dataset's all-empty columns would otherwise print
thousands of identical NumPy RuntimeWarnings ("Mean of empty slice") over a backtest."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import click


@contextmanager
def counted_warnings(quiet: bool) -> Iterator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    numeric = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    others = {str(w.message) for w in caught if not issubclass(w.category, RuntimeWarning)}
    if quiet:
        return
    for message in sorted(others):
        click.echo(f"warning: {message}", err=True)
    if numeric:
        kinds = sorted({str(w.message) for w in numeric})
        click.echo(
            f"note: {len(numeric)} numeric warning(s) silenced ({'; '.join(kinds[:3])}): columns with no "
            "values in some windows, which the models treat as missing",
            err=True,
        )
