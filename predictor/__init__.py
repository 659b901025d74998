"""Failure prediction: datasets from telemetry, single models, cascade/parallel ensembles, sliding backtests."""
