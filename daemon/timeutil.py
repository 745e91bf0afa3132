"""Timestamps (RFC 3339, UTC) and opaque ids; one place so tests can rely on their shape.

Ids come from ``os.urandom`` directly: ``secrets`` and ``uuid`` add to every start-up.
"""

import os
from datetime import UTC, datetime


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id(prefix: str) -> str:
    """An opaque id such as ``msg_3f9c2a...``: 96 random bits, unique across daemons."""
    return f"{prefix}_{os.urandom(12).hex()}"
