"""Collectors: one module per signal source, each behind a Protocol with a real and a simulated impl."""
