"""Handing the C heap's free pages back to the operating system after a big reply.

A long reply arrives as many small deltas that the provider adapter keeps until its stream
closes; once they are freed, glibc keeps their pages resident (they lie below memory still
in use, so the heap cannot shrink from its top), and the big buffers that follow (the
joined text's events) are fresh mappings that cannot reuse them. ``malloc_trim`` returns
those pages. Elsewhere (musl, macOS) this is a no-op. ``ctypes`` loads with the first big
reply, not with the agent.
"""

import functools
import logging
import sys
from collections.abc import Callable

log = logging.getLogger("ponder.heap")


@functools.cache
def _find_malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS; False where the C library cannot."""
    trim = _find_malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
