"""The fleet controller: ingest from every agent into one DuckDB store, a read API, cross-host analysis."""
