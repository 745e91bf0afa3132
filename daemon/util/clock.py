"""The one clock and the one id maker: timestamps (RFC 3339, UTC) and opaque ids.

Timestamps are fixed width (always microseconds, always ``Z``) so that string order is
time order, which the store's ``updated_at`` index and its session cursor rely on. Ids
come from ``os.urandom`` directly: ``secrets`` and ``uuid`` add to every start-up.
"""

import os
import time
from datetime import UTC, datetime

__all__ = ["new_id", "now", "rfc3339"]


def rfc3339(epoch_s: float) -> str:
    """``epoch_s`` (unix seconds) as e.g. ``2026-11-24T04:03:32.123456Z``."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now() -> str:
    """The current time as ``rfc3339`` writes it."""
    return rfc3339(time.time())


def new_id(prefix: str) -> str:
    """An opaque id such as ``msg_3f9c2a...``: 96 random bits, unique across daemons."""
    return f"{prefix}_{os.urandom(12).hex()}"
