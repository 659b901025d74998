"""The error shipping raises when it cannot start, shared by the agent-side wiring and each transport."""

from __future__ import annotations


class ShippingError(Exception):
    """Shipping cannot start; one line naming the key or path."""
