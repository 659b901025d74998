"""Collectors: one module per signal source, each behind the Collector protocol with a real and a simulated impl."""
