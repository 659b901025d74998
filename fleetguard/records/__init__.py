"""Typed records, defined once; each mirrors one DuckDB table (see fleetguard.store.schema).

Times are UTC epoch seconds (`ts: float`) in Python and `TIMESTAMP` (UTC) in DuckDB. A field that a source
cannot report is `None` (NULL), never 0.
"""
