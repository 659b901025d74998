"""fleetguard: GPU-fleet fault diagnosis, failure prediction and training-runtime resilience."""

__version__ = "0.1.0"
