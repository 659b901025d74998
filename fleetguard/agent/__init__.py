"""The per-host agent: samples collectors on a schedule, stores batches, serves /metrics."""
