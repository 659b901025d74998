"""A pool's controller tells its NATS agents which wire versions it reads (docs/scale-out.md): over NATS no
reply carries the HTTP answer's "wire" list, so the controller keeps it in a JetStream key-value bucket of
its pool, and its agents read it there.

The promise expires: the bucket's entries live ADVERT_TTL_SECONDS and the controller puts its own again
every ADVERT_REFRESH_SECONDS, so a controller stopped, or replaced by one that never writes it, stops
vouching for version 2 within minutes by itself. An agent takes no promise that cannot expire (a bucket made
without a max age, or with one past MAX_TRUSTED_TTL_SECONDS) and reads nothing larger than MAX_ADVERT_BYTES:
anything else it finds is "version 1".
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, NamedTuple

from fleetguard.shipping.nats_subjects import advert_bucket, advert_stream, advert_subject

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext

ADVERT_KEY = "wire"
ADVERT_TTL_SECONDS = 180.0  # three refreshes: one missed (a NATS blip, a busy controller) flips no agent
ADVERT_REFRESH_SECONDS = 60.0  # how often the controller puts it, and each agent reads it
MAX_TRUSTED_TTL_SECONDS = 600.0
BUCKET_CHECK_EVERY = 10  # an agent checks the bucket's max age at least every this many reads
MAX_ADVERT_BYTES = 256
MAX_VERSIONS = 16
# The headers a key-value delete or purge leaves in place of the value (nats.js.kv).
_KV_OPERATION = "KV-Operation"
_KV_REMOVED = frozenset({"DEL", "PURGE"})


def advert_bytes(versions: list[int]) -> bytes:
    """What the controller stores: the "wire" list of its HTTP ingest answers, as JSON."""
    return json.dumps({"wire": versions}, separators=(",", ":")).encode()


def parse_advert(data: object) -> list[int] | None:
    """The versions a stored advertisement names; None for anything that is not one (then: version 1)."""
    if not isinstance(data, bytes) or len(data) > MAX_ADVERT_BYTES:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    versions = doc.get("wire") if isinstance(doc, dict) else None
    if not isinstance(versions, list) or len(versions) > MAX_VERSIONS:
        return None
    if not all(type(v) is int for v in versions):
        return None
    return versions


async def put_advert(js: JetStreamContext, pool: str, versions: list[int], ttl_seconds: float) -> bool:
    """The controller's put: the pool's bucket made if missing (entries living `ttl_seconds`), then the
    versions stored in it. An existing bucket is used as its operator made it; False if its entries live
    too long for an agent to take them (`read_advert`)."""
    from nats.js.api import KeyValueConfig, StorageType
    from nats.js.errors import BucketNotFoundError

    try:
        kv = await js.key_value(advert_bucket(pool))
        max_age = (await js.stream_info(advert_stream(pool))).config.max_age
    except BucketNotFoundError:
        max_age = ttl_seconds
        kv = await js.create_key_value(
            KeyValueConfig(
                bucket=advert_bucket(pool),
                history=1,
                ttl=ttl_seconds,
                max_value_size=MAX_ADVERT_BYTES,
                storage=StorageType.FILE,
                direct=False,  # agents read through STREAM.MSG.GET: one subject to permit
            )
        )
    await kv.put(ADVERT_KEY, advert_bytes(versions))
    return _expires(max_age)


def _expires(max_age: float | None) -> bool:
    """Whether a bucket's entries expire soon enough to be a promise (a downgraded controller's lapses)."""
    return max_age is not None and 0 < max_age <= MAX_TRUSTED_TTL_SECONDS


async def withdraw_advert(js: JetStreamContext, pool: str) -> None:
    """The controller stops vouching at once (a clean stop) rather than when its entry expires."""
    kv = await js.key_value(advert_bucket(pool))
    await kv.delete(ADVERT_KEY)


async def read_advert(js: JetStreamContext, pool: str, *, check_bucket: bool = True) -> list[int] | None:
    """The agent's read: the versions the pool's controller says it reads, None when nothing (or nothing
    trustworthy) says so. Raises what nats-py raises when NATS cannot answer (the caller: version 1).
    `check_bucket=False` skips the bucket's max age (checked lately: `AdvertReader`)."""
    if check_bucket and not _expires(await _bucket_max_age(js, pool)):
        return None  # a promise that never expires would outlive a downgraded controller
    entry = await _entry(js, pool)
    return None if entry is None else entry[0]


async def _bucket_max_age(js: JetStreamContext, pool: str) -> float | None:
    """How long the bucket keeps an entry; None for no bucket (nothing advertised)."""
    from nats.js.errors import NotFoundError

    try:
        return (await js.stream_info(advert_stream(pool))).config.max_age
    except NotFoundError:
        return None


async def _entry(js: JetStreamContext, pool: str) -> tuple[list[int], float | None] | None:
    """The stored versions and when the controller put them (the server's clock, seconds), None when no
    entry is there (none put, expired, or deleted) or it is not an advertisement."""
    from nats.js.errors import NotFoundError

    try:
        msg = await js.get_msg(advert_stream(pool), subject=advert_subject(pool, ADVERT_KEY), direct=False)
    except NotFoundError:  # no bucket (no controller advertised), or its entry expired or was deleted
        return None
    if msg.headers and msg.headers.get(_KV_OPERATION) in _KV_REMOVED:
        return None
    versions = parse_advert(msg.data)
    if versions is None:
        return None
    return versions, None if msg.time is None else msg.time.timestamp()


class Held(NamedTuple):
    """What the last successful read found, while the entry it read may still be in the bucket."""

    versions: list[int]
    seconds_left: float  # until that entry lapses at the latest (> 0)


class AdvertReader:
    """An agent's reads, one each ADVERT_REFRESH_SECONDS: the bucket's max age is checked on the first read,
    after a `recheck` (a reconnect), after any read that found no promise, and every BUCKET_CHECK_EVERY
    reads; the reads between fetch the entry alone, one JetStream request rather than two (a fleet of
    4,096 agents makes ~68 a second).

    What the last read found is held until the entry it read lapses (`held`): a read that fails (NATS
    slow to answer under load, a blip) says nothing about the promise, which the bucket keeps until then
    whatever the agent can read. Sending version 1 at the first failed read would double the controller's
    cost of this agent's batches just when NATS is loaded.

    The lapse is the server's stamp plus the bucket's max age, on the server's clock; this host's clock may
    be behind it by any amount (no NTP, a clock stepped back), and a promise held past the lapse is one a
    downgraded controller terminates batches under. So the time left is reckoned once, at the read, and
    never taken as more than the max age (the entry was stamped before the read, so it lapses within a
    max age of it whatever the clocks say); from then on it runs on the monotonic clock, which no step of
    the wall clock moves."""

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self._unchecked_reads: int | None = None  # None: check the bucket at the next read
        self._max_age: float | None = None  # the bucket's, from its last check
        self._held: tuple[list[int], float] | None = None  # the last read's versions, until (monotonic)

    def recheck(self) -> None:
        self._unchecked_reads = None

    async def read(self, js: JetStreamContext) -> list[int] | None:
        since = self._unchecked_reads
        check = since is None or since >= BUCKET_CHECK_EVERY
        self._unchecked_reads = None  # until this read finds a promise (one that raises: checked next time)
        if check:
            max_age = await _bucket_max_age(js, self.pool)
            if not _expires(max_age):
                self._held = None
                return None  # a promise that never expires would outlive a downgraded controller
            self._max_age = max_age
        entry = await _entry(js, self.pool)
        if entry is None:
            self._held = None
            return None
        versions, stored_ts = entry
        self._unchecked_reads = 0 if check or since is None else since + 1
        self._held = _hold(versions, stored_ts, self._max_age)
        return versions

    def held(self, now: float) -> Held | None:
        """The versions the last successful read found and how long they may still be kept, while the entry
        it read has not lapsed (`now`: time.monotonic())."""
        if self._held is None or now >= self._held[1]:
            return None
        return Held(self._held[0], self._held[1] - now)


def _hold(
    versions: list[int], stored_ts: float | None, max_age: float | None
) -> tuple[list[int], float] | None:
    """What a read found, and until when (monotonic) its entry may still be there; None: nothing to hold (no
    time said, or the entry lapsed already by this host's clock)."""
    if stored_ts is None or max_age is None:
        return None  # a failed read then means version 1, as before promises were held
    left = min(max_age, stored_ts + max_age - time.time())
    return (versions, time.monotonic() + left) if left > 0 else None
