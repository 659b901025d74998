"""Which wire versions a controller advertises to its NATS agents: version 2 only when `nats_wire` allows
it and its own reader reads a version-2 body back as the batch it is (a version-2 message it could not read
would be terminated, and over NATS the agent never hears of it)."""

from __future__ import annotations

from typing import Any

import pytest

import fleetguard.controller.nats_wire as nats_wire
from fleetguard.controller.nats_wire import readable_versions
from fleetguard.controller.validate import BatchRefused, IngestBatch, Refusal, parse_batch


def test_a_controller_that_reads_v2_advertises_it() -> None:
    assert readable_versions(2) == [1, 2]


def test_nats_wire_1_advertises_version_1_only() -> None:
    assert readable_versions(1) == [1]


def test_a_reader_that_refuses_the_v2_probe_advertises_version_1_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuses(*args: Any, **kwargs: Any) -> IngestBatch:
        raise BatchRefused(Refusal.MALFORMED, "batch: expected a JSON object")

    monkeypatch.setattr(nats_wire, "parse_batch", refuses)
    assert readable_versions(2) == [1]


def test_a_reader_that_misreads_a_v2_value_advertises_version_1_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def misreads(*args: Any, **kwargs: Any) -> IngestBatch:
        got = parse_batch(*args, **kwargs)
        got.tables["gpu_samples"]["utilization_gpu_percent"] = [12.5, 0.0]  # a NULL read as 0
        return got

    monkeypatch.setattr(nats_wire, "parse_batch", misreads)
    assert readable_versions(2) == [1]
