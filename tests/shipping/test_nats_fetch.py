"""A NATS pull (the controller's ingest, an agent's commands): an expired pull is "nothing arrived",
whichever way nats-py says so, and never ends the connection; anything else still does (each reconnects)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fleetguard.shipping.nats_connect import fetch

nats_errors = pytest.importorskip("nats.errors")
js_errors = pytest.importorskip("nats.js.errors")


class Subscription:
    """Answers one fetch with `outcome`: messages, or an exception raised as nats-py would."""

    def __init__(self, outcome: list[Any] | BaseException) -> None:
        self.outcome = outcome
        self.asked: list[tuple[int, float | None]] = []

    async def fetch(self, batch: int, timeout: float | None) -> list[Any]:
        self.asked.append((batch, timeout))
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


@pytest.mark.parametrize(
    "expired",
    [
        TimeoutError(),  # nats-py's bare `raise asyncio.TimeoutError` (the same class) between two requests
        nats_errors.TimeoutError(),
        js_errors.FetchTimeoutError(),
    ],
    ids=["asyncio", "nats", "fetch"],
)
def test_an_expired_pull_is_no_messages(expired: BaseException) -> None:
    sub = Subscription(expired)
    assert asyncio.run(fetch(sub, 64, 0.25)) == []
    assert sub.asked == [(64, 0.25)]


def test_messages_are_handed_on() -> None:
    msgs: list[Any] = [object(), object()]
    assert asyncio.run(fetch(Subscription(msgs), 64, 0.25)) is msgs


def test_a_connection_failure_is_not_taken_for_an_expired_pull() -> None:
    with pytest.raises(nats_errors.ConnectionClosedError):
        asyncio.run(fetch(Subscription(nats_errors.ConnectionClosedError()), 64, 0.25))
