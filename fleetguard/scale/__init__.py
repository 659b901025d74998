"""Past one machine (docs/scale-out.md): queries over several controllers' Parquet exports. (The fleet view
over several controllers lives in fleetguard.controller, training on a Dask cluster in fleetguard.predict.)"""
