"""The raw floor of controller ingest: gunzip + JSON parse + a DuckDB append of the same batches with no
checks, no ledger, no hosts' state and no HTTP, in groups as the writer commits them. The controller's CPU
per batch is stated as a ratio to this, measured in the same run (bench/controller_load.py)."""

from __future__ import annotations

import itertools
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from fleetguard.store import Store
from fleetguard.store.schema import TABLES, quote_ident

_DTYPES = {"BIGINT": np.int64, "UBIGINT": np.uint64, "DOUBLE": np.float64, "TIMESTAMP": np.float64}


def _array(sql_type: str, values: list[Any]) -> Any:
    dtype = _DTYPES.get(sql_type)
    if dtype is not None and None not in values:
        return np.array(values, dtype=dtype)
    objects = np.empty(len(values), dtype=object)
    objects[:] = values
    return objects


def _append_group(con: Any, groups: list[dict[str, dict[str, Any]]]) -> None:
    """One transaction: each table's columns of every batch in `groups` (lists, or arrays) appended as one."""
    con.execute("BEGIN TRANSACTION")
    for name, table in TABLES.items():
        parts = [tables[name] for tables in groups if name in tables]
        if not parts:
            continue
        names = [c.name for c in table.columns if c.name in parts[0]]
        types = {c.name: c.sql_type for c in table.columns}
        arrays = {
            n: np.concatenate([p[n] for p in parts])
            if isinstance(parts[0][n], np.ndarray)
            else _array(types[n], list(itertools.chain(*(p[n] for p in parts))))
            for n in names
        }
        con.register("__floor", arrays)
        exprs = [
            f"make_timestamp(CAST(round({quote_ident(n)} * 1000000) AS BIGINT))"
            if types[n] == "TIMESTAMP"
            else f"CAST({quote_ident(n)} AS {types[n]})"
            for n in names
        ]
        cols = ", ".join(quote_ident(n) for n in names)
        con.execute(f"INSERT INTO {name} ({cols}) SELECT {', '.join(exprs)} FROM __floor")
        con.unregister("__floor")
    con.execute("COMMIT")


Read = Callable[[bytes], dict[str, dict[str, Any]]]  # a body -> its tables' columns, unchecked


def _floor(bodies: list[bytes], read: Read, group: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        with (
            tempfile.TemporaryDirectory(prefix="fg-floor-") as root,
            Store.open(Path(root) / "floor.duckdb") as store,
        ):
            con = store.connection
            c0 = time.process_time()
            for start in range(0, len(bodies), group):
                _append_group(con, [read(b) for b in bodies[start : start + group]])
            best = min(best, (time.process_time() - c0) / len(bodies) * 1000)
    return best


def floor_cpu_ms(bodies: list[bytes], group: int = 64, repeat: int = 3) -> float:
    """CPU milliseconds per batch (this process, every thread: DuckDB's too), best of `repeat` passes over
    `bodies` into a fresh store file each."""
    return _floor(bodies, lambda b: msgspec.json.decode(zlib.decompress(b, 31))["tables"], group, repeat)


_TYPES = {name: {c.name: c.sql_type for c in table.columns} for name, table in TABLES.items()}


def _v2_tables(body: bytes) -> dict[str, dict[str, Any]]:
    """A wire-version-2 body's tables with no checks: arrays over the body's bytes, texts by their codes."""
    out: dict[str, dict[str, Any]] = {}
    for name, table in msgspec.msgpack.decode(zlib.decompress(body, 31))["tables"].items():
        columns: dict[str, Any] = dict(table.get("columns") or {})
        for column, raw in (table.get("numbers") or {}).items():
            dtype = np.dtype(_DTYPES[_TYPES[name][column]]).newbyteorder("<")
            columns[column] = np.frombuffer(raw, dtype=dtype)
        for column, texts in (table.get("texts") or {}).items():
            lookup = np.empty(len(texts["values"]) + 1, dtype=object)
            lookup[1:] = texts["values"]
            columns[column] = lookup[np.frombuffer(texts["codes"], dtype="<u4")]
        out[name] = columns
    return out


def floor_cpu_ms_v2(bodies: list[bytes], group: int = 64, repeat: int = 3) -> float:
    """`floor_cpu_ms` for wire-version-2 bodies: gunzip + msgpack decode + arrays over its bytes + the same
    append, no checks."""
    return _floor(bodies, _v2_tables, group, repeat)
