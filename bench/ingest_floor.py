"""The raw floor of controller ingest: gunzip + JSON parse + a DuckDB append of the same batches with no
checks, no ledger, no hosts' state and no HTTP, in groups as the writer commits them. The controller's CPU
per batch is stated as a ratio to this, measured in the same run (bench/controller_load.py)."""

from __future__ import annotations

import itertools
import tempfile
import time
import zlib
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


def _append_group(con: Any, docs: list[dict[str, Any]]) -> None:
    con.execute("BEGIN TRANSACTION")
    for name, table in TABLES.items():
        parts = [d["tables"][name] for d in docs if name in d["tables"]]
        if not parts:
            continue
        names = [c.name for c in table.columns if c.name in parts[0]]
        types = {c.name: c.sql_type for c in table.columns}
        arrays = {n: _array(types[n], list(itertools.chain(*(p[n] for p in parts)))) for n in names}
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


def floor_cpu_ms(bodies: list[bytes], group: int = 64, repeat: int = 3) -> float:
    """CPU milliseconds per batch (this process, every thread: DuckDB's too), best of `repeat` passes over
    `bodies` into a fresh store file each."""
    best = float("inf")
    for _ in range(repeat):
        root = Path(tempfile.mkdtemp(prefix="fg-floor-"))
        with Store.open(root / "floor.duckdb") as store:
            con = store.connection
            c0 = time.process_time()
            for start in range(0, len(bodies), group):
                docs = [msgspec.json.decode(zlib.decompress(b, 31)) for b in bodies[start : start + group]]
                _append_group(con, docs)
            best = min(best, (time.process_time() - c0) / len(bodies) * 1000)
    return best


def _v2_columns(types: dict[str, str], table: dict[str, Any]) -> dict[str, Any]:
    """A wire-version-2 table's columns with no checks: arrays over the body's bytes, texts by their codes."""
    out: dict[str, Any] = dict(table.get("columns") or {})
    for name, raw in (table.get("numbers") or {}).items():
        out[name] = np.frombuffer(raw, dtype=np.dtype(_DTYPES[types[name]]).newbyteorder("<"))
    for name, texts in (table.get("texts") or {}).items():
        lookup = np.empty(len(texts["values"]) + 1, dtype=object)
        lookup[1:] = texts["values"]
        out[name] = lookup[np.frombuffer(texts["codes"], dtype="<u4")]
    return out


def _append_group_v2(con: Any, docs: list[dict[str, Any]]) -> None:
    con.execute("BEGIN TRANSACTION")
    for name, table in TABLES.items():
        types = {c.name: c.sql_type for c in table.columns}
        parts = [_v2_columns(types, d["tables"][name]) for d in docs if name in d["tables"]]
        if not parts:
            continue
        names = [c.name for c in table.columns if c.name in parts[0]]
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


def floor_cpu_ms_v2(bodies: list[bytes], group: int = 64, repeat: int = 3) -> float:
    """`floor_cpu_ms` for wire-version-2 bodies: gunzip + msgpack decode + arrays over the bytes + the same
    append, no checks."""
    best = float("inf")
    for _ in range(repeat):
        root = Path(tempfile.mkdtemp(prefix="fg-floor-"))
        with Store.open(root / "floor.duckdb") as store:
            con = store.connection
            c0 = time.process_time()
            for start in range(0, len(bodies), group):
                docs = [msgspec.msgpack.decode(zlib.decompress(b, 31)) for b in bodies[start : start + group]]
                _append_group_v2(con, docs)
            best = min(best, (time.process_time() - c0) / len(bodies) * 1000)
    return best
