"""The pool's controller telling its NATS agents which wire versions it reads (shipping.wire_advert):
put when its consumer starts, again every ADVERT_REFRESH_SECONDS, withdrawn when it stops cleanly.

A version-2 message this controller could not read would be terminated as malformed, and over NATS the
agent never hears of it: so version 2 is advertised only when `[controller] nats_wire` allows it and this
controller's own reader has just read a version-2 body back as the batch it is (`readable_versions`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fleetguard.controller.validate import WIRE_VERSIONS, BatchRefused, parse_batch
from fleetguard.shipping import wire_advert
from fleetguard.shipping.nats_subjects import advert_bucket
from fleetguard.shipping.wire import WIRE_VERSION, Columns, OutgoingBatch
from fleetguard.shipping.wire_v2 import WIRE_VERSION_2, encode_v2
from fleetguard.store.schema import TABLES

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext

log = logging.getLogger(__name__)

_PROBE_HOST = "fleetguard-wire-probe"


def readable_versions(newest: int) -> list[int]:
    """The versions to advertise: those parse_batch reads up to `newest`, version 2 only if a version-2 body
    (with a telemetry table's number and text arrays) reads back as the batch it is."""
    versions = [v for v in WIRE_VERSIONS if v <= newest]
    if WIRE_VERSION_2 in versions and not _reads_v2():
        log.error("this controller cannot read wire version 2 (its check failed): NATS agents keep version 1")
        versions.remove(WIRE_VERSION_2)
    return versions or [WIRE_VERSION]


def _reads_v2() -> bool:
    now = time.time()
    # Two GPU rows as columns (GPU samples themselves are built by the sampler only: collectors.gpu_sampling),
    # every column of the table present, NULL where the probe says nothing.
    probe: Columns = {name: [None, None] for name in TABLES["gpu_samples"].column_names}
    probe |= {"ts": [now, now], "host": [_PROBE_HOST] * 2, "gpu_index": [0, 1]}
    probe |= {"uuid": ["GPU-probe-0", "GPU-probe-1"], "utilization_gpu_percent": [12.5, None]}
    batch = OutgoingBatch(_PROBE_HOST, "probe", 1, now, 5.0, "probe", {"gpu_samples": probe})
    try:
        got = parse_batch(encode_v2(batch), _PROBE_HOST, compressed=True, now=now)
    except (BatchRefused, ValueError) as exc:
        log.error("reading a wire-version-2 probe: %s", exc)
        return False
    columns = got.tables.get("gpu_samples", {})
    read = [_plain(columns.get(name, [])) for name in ("gpu_index", "uuid", "utilization_gpu_percent")]
    return got.key == (_PROBE_HOST, "probe", 1) and read == [
        [0, 1],
        ["GPU-probe-0", "GPU-probe-1"],
        [12.5, None],
    ]


def _plain(values: Any) -> list[Any]:
    """A column as read (a list, or a numpy array whose NaN is NULL) as Python values."""
    items = values.tolist() if hasattr(values, "tolist") else list(values)
    return [None if isinstance(v, float) and v != v else v for v in items]


class WireAdvertiser:
    """Keeps the pool's advertisement fresh while the consumer runs (`run`, a task on its event loop)."""

    def __init__(self, pool: str, newest: int) -> None:
        self.pool = pool
        self.versions = readable_versions(newest)
        self.puts = 0  # advertisements stored
        self._failing = False
        self._said_unbounded = False

    async def run(self, js: JetStreamContext, stopping: Callable[[], bool]) -> None:
        """Put now and every ADVERT_REFRESH_SECONDS until cancelled. A failure (a server whose controller
        user may not write the bucket) costs the pool version 2, never its ingest: said once, retried."""
        while not stopping():
            try:
                bounded = await wire_advert.put_advert(
                    js, self.pool, self.versions, wire_advert.ADVERT_TTL_SECONDS
                )
                self.puts += 1
                if not bounded and not self._said_unbounded:
                    log.warning(
                        "the NATS bucket %s keeps entries for ever (or past %.0f s): agents take no promise "
                        "from it and send version 1; delete it and this controller makes it again",
                        advert_bucket(self.pool),
                        wire_advert.MAX_TRUSTED_TTL_SECONDS,
                    )
                self._said_unbounded = not bounded
                if self._failing:
                    log.info(
                        "NATS agents of pool %s are told again that it reads wire %s",
                        self.pool,
                        self.versions,
                    )
                self._failing = False
            except Exception as exc:  # nats-py raises several unrelated types
                if not self._failing:
                    log.warning(
                        "cannot tell pool %s's NATS agents which wire versions it reads (%s: %s); they send "
                        "version 1 until it can",
                        self.pool,
                        type(exc).__name__,
                        exc,
                    )
                self._failing = True
            await asyncio.sleep(wire_advert.ADVERT_REFRESH_SECONDS)

    async def withdraw(self, js: JetStreamContext) -> None:
        """On a clean stop: agents go back to version 1 at their next read, not when the entry expires
        (the controller that starts next may read less)."""
        try:
            await wire_advert.withdraw_advert(js, self.pool)
        except Exception as exc:
            log.debug("withdrawing pool %s's wire advertisement: %s", self.pool, exc)
