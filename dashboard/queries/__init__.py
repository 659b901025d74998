"""The dashboard's query layer: SQL text and functions that take a read cursor and return typed rows.

Every query is bounded in time (`ts >= since`): DuckDB skips the row groups outside the window by their
min/max statistics, and the store appends in time order, so a page reads minutes or hours of data, never the
whole history of raw samples.
"""
