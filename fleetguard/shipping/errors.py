"""The errors of shipping: the one it raises when it cannot start (shared by the agent-side wiring and each
transport), and those a transport raises when a batch was not stored (fleetguard.shipping.drain_loop)."""

from __future__ import annotations


class ShippingError(Exception):
    """Shipping cannot start, or a batch was not stored; one line naming the key, path or far end."""


class SendFailed(ShippingError):
    """The batch was not stored: it stays spooled and is sent again after a backoff."""


class TransportDown(SendFailed):
    """The far end did not answer (or cannot be reached): back off; once it answers, live data goes first.
    `said`: the transport has told the operator already (the loop then logs nothing)."""

    def __init__(self, message: str, *, said: bool = False) -> None:
        super().__init__(message)
        self.said = said


class RetryLater(SendFailed):
    """The far end asked to wait (busy, or it refused the credentials): try again in `seconds`."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class BatchRefused(ShippingError):
    """The batch can never be stored (refused for its content, too large, unreadable): it is dropped, since
    sending it again cannot succeed."""
