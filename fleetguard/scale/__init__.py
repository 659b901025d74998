"""Past one machine (docs/scale-out.md): the fleet view over several controllers, queries over their Parquet
exports, and training on a Dask cluster."""
