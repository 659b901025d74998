"""Failure prediction: datasets from telemetry, single models, ensembles, sliding-window backtests."""
