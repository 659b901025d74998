"""Connecting to NATS as one identity (an agent's host, or a controller): the login from the config, the
secret read from its file, and the client options both ends share. nats-py is imported only here and only
when a connection is made, so an agent without the `scale` extra never loads it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fleetguard.config import split_urls
from fleetguard.secret_files import SecretFileError, read_secret_text
from fleetguard.shipping.nats_subjects import host_token

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js.api import StreamConfig
    from nats.js.client import JetStreamContext

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 5
FIRST_CONNECT_SECONDS = 5.0
RECONNECT_WAIT_SECONDS = 1
# Publishes made while disconnected wait in nats-py's buffer; a batch stays spooled until acked anyway, so a
# small buffer is enough and bounds memory during an outage.
PENDING_BYTES = 8 << 20
MAX_CREDS_BYTES = 64 << 10  # a user JWT and an nkey seed are a few KiB


class NatsSettingsError(Exception):
    """A NATS login cannot be built; one line naming the key or path."""


@dataclass(frozen=True)
class NatsLogin:
    urls: list[str]
    user: str = ""
    password: str = field(default="", repr=False)
    creds: str = field(default="", repr=False)  # the creds file's text, read through the secret reader
    # Replies (publish acks) come to subjects under this prefix; a host may subscribe only under its own.
    inbox_prefix: str = "_INBOX"


def read_secret(key: str, path_text: str, max_bytes: int = 4096) -> str:
    try:
        return read_secret_text(key, path_text, max_bytes)
    except SecretFileError as exc:
        raise NatsSettingsError(str(exc)) from exc


def read_password(key: str, path_text: str) -> str:
    secret = read_secret(key, path_text)
    if len(secret) > 1024 or not secret.isprintable():
        raise NatsSettingsError(f"{key} {path_text}: does not hold a password")
    return secret


def read_creds(key: str, path_text: str) -> str:
    """A NATS creds file's text (read here, checked, and handed to nats-py as content, not as a path it
    would open itself, through a link or after a swap). nats-py loops for ever on a creds text without a
    user JWT, so both sections are required here."""
    creds = read_secret(key, path_text, MAX_CREDS_BYTES)
    if "BEGIN NATS USER JWT" not in creds or "BEGIN USER NKEY SEED" not in creds:
        raise NatsSettingsError(f"{key} {path_text}: not a NATS creds file (no user JWT and nkey seed)")
    return creds


def make_login(
    section: str, urls: str, user: str, password_file: str, creds_file: str, inbox_owner: str = ""
) -> NatsLogin:
    """From a config section's nats_* keys; `inbox_owner` (a host) narrows the reply subjects to its own."""
    password = read_password(f"{section}.nats_password_file", password_file) if password_file else ""
    creds = read_creds(f"{section}.nats_creds_file", creds_file) if creds_file else ""
    if password and not user:
        raise NatsSettingsError(f"{section}.nats_user: required with nats_password_file")
    prefix = f"_INBOX.{host_token(inbox_owner)}" if inbox_owner else "_INBOX"
    return NatsLogin(split_urls(urls), user, password, creds, prefix)


async def connect(
    login: NatsLogin,
    name: str,
    *,
    on_error: Callable[[Exception], Awaitable[None]] | None = None,
    while_down: str = "",
    on_back: Callable[[], None] | None = None,
) -> Client:
    """One connection that reconnects by itself for ever once made; raises if the first attempt fails.
    Losing and regaining it are logged once each (`while_down` says what happens meanwhile), not every
    reconnect attempt; `on_back` is called (on the event loop: it must not block) once it is regained."""
    import nats
    from nats.aio.client import RawCredentials

    down = False
    client: list[Client] = []

    async def quiet(exc: Exception) -> None:
        log.debug("nats: %s", exc)

    async def disconnected() -> None:
        nonlocal down
        closing = bool(client) and (client[0].is_closed or client[0].is_draining)
        if not down and not closing:
            down = True
            log.warning("NATS connection lost (%s)%s", name, f"; {while_down}" if while_down else "")

    async def reconnected() -> None:
        nonlocal down
        down = False
        log.warning("NATS connection back (%s)", name)
        if on_back is not None:
            on_back()

    options: dict[str, object] = {}
    if login.creds:
        options["user_credentials"] = RawCredentials(login.creds)
    elif login.user:
        options["user"] = login.user
        options["password"] = login.password
    # nats-py retries a first connection inside connect() for ever with these options; bounding it lets the
    # caller back off, count the failure, and stop promptly when asked to.
    nc = await asyncio.wait_for(
        _connect(nats, login, name, on_error or quiet, disconnected, reconnected, options),
        FIRST_CONNECT_SECONDS,
    )
    client.append(nc)
    return nc


async def _connect(
    nats: Any,
    login: NatsLogin,
    name: str,
    on_error: Callable[[Exception], Awaitable[None]],
    disconnected: Callable[[], Awaitable[None]],
    reconnected: Callable[[], Awaitable[None]],
    options: dict[str, object],
) -> Client:
    nc: Client = await nats.connect(
        servers=login.urls,
        name=name,
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        reconnect_time_wait=RECONNECT_WAIT_SECONDS,
        max_reconnect_attempts=-1,
        allow_reconnect=True,
        inbox_prefix=login.inbox_prefix,
        pending_size=PENDING_BYTES,
        error_cb=on_error,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
        **options,
    )
    return nc


async def add_stream_if_missing(js: JetStreamContext, config: StreamConfig) -> bool:
    """Create the stream `config` names unless it exists (an existing one is used as its operator configured
    it); True when it was created. The one way the controller makes its ingest and command streams."""
    from nats.js.errors import NotFoundError

    try:
        await js.stream_info(config.name or "")
        return False
    except NotFoundError:
        pass
    await js.add_stream(config)
    log.info("created NATS stream %s", config.name)
    return True


class Pullable(Protocol):
    async def fetch(self, batch: int, timeout: float | None) -> list[Msg]: ...


async def fetch(sub: Pullable, batch: int, timeout: float) -> list[Msg]:
    """A pull subscription's next messages, or none when the pull expired. nats-py says "expired" with
    nats.errors.TimeoutError on one path and a bare asyncio.TimeoutError on others (its deadline spent
    between its two requests: under load); both mean "nothing arrived", never a failure of the connection.
    Taken for one, a loaded controller's pull tore its connection down and reconnected (its connected gauge
    read 0 meanwhile), and an agent's command pull paused for its retry interval."""
    try:
        return await sub.fetch(batch, timeout=timeout)
    except TimeoutError:  # asyncio.TimeoutError is TimeoutError; nats.errors.TimeoutError subclasses it
        return []
