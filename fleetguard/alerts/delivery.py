"""One HTTP POST of an alert, and what its answer means: delivered, retry (when), or endpoint gone.

Redirects are not followed (a 3xx is a failure, as Standard Webhooks says); the answer is read only up to
a small limit; Retry-After (seconds or an HTTP date) is honoured on 429 and 5xx.
"""

from __future__ import annotations

import email.utils
import http.client
import time
import urllib.parse
from dataclasses import dataclass
from enum import StrEnum

MAX_RESPONSE_BYTES = 64 * 1024
MAX_RETRY_AFTER_SECONDS = 86400.0


class DeliveryOutcome(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"  # timeout, connection error, 5xx, 429, any other non-2xx
    GONE = "gone"  # 410: do not call this endpoint again


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    outcome: DeliveryOutcome
    status_code: int | None
    error: str
    retry_after_seconds: float | None
    duration_seconds: float


def post(url: str, body: bytes, headers: dict[str, str], timeout_seconds: float) -> DeliveryResult:
    started = time.monotonic()
    parts = urllib.parse.urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_class(parts.hostname or "", parts.port, timeout=timeout_seconds)
    try:
        conn.request("POST", target, body=body, headers={"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        text = response.read(MAX_RESPONSE_BYTES).decode("utf-8", "replace")
        status = response.status
        retry_after = parse_retry_after(response.getheader("Retry-After"), time.time())
    except (OSError, http.client.HTTPException) as exc:
        return DeliveryResult(
            DeliveryOutcome.RETRY, None, f"{type(exc).__name__}: {exc}", None, time.monotonic() - started
        )
    finally:
        conn.close()
    return classify(status, text, retry_after, time.monotonic() - started)


def classify(status: int, text: str, retry_after: float | None, duration: float) -> DeliveryResult:
    if 200 <= status < 300:
        return DeliveryResult(DeliveryOutcome.DELIVERED, status, "", None, duration)
    if status == 410:
        return DeliveryResult(DeliveryOutcome.GONE, status, "410 Gone: endpoint disabled", None, duration)
    return DeliveryResult(
        DeliveryOutcome.RETRY, status, f"HTTP {status}: {text[:200]}", retry_after, duration
    )


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait: `Retry-After: 120` or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_SECONDS)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(max(0.0, when.timestamp() - now), MAX_RETRY_AFTER_SECONDS)
