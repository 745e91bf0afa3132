"""The cyclic garbage collector: held off while a burst of objects is made that holds no cycle,
and, in a daemon process, run less often on the young generation.

Reading a long history makes tens of thousands of row tuples and structs at once; every
700 allocations the collector would walk the young ones again, for nothing (none of them is
garbage yet, nor in a cycle). ``paused()`` turns collection off for such a stretch and back on
after it, only if it was on: a thread that finds it off (someone else's pause, or start-up's)
leaves turning it back on to whoever turned it off.
"""

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# The young generation's threshold in a daemon process (the interpreter's default is 700). It
# counts objects made less objects freed, so what trips it in a burst is the work in flight: 200
# turns started at once hold their requests, coroutines and events alive, and at 700 the collector
# walked them ~150 times in one such burst (a full pass among them), about a tenth of its CPU, and
# found nothing to free. Garbage in cycles waits longer to be freed: at most this many objects.
DAEMON_YOUNG_THRESHOLD = 50_000


def tune_for_daemon() -> None:
    """Collect the young generation every ``DAEMON_YOUNG_THRESHOLD`` allocations in this process
    (a long-running daemon's, not a library's caller: the whole process's collector changes)."""
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(DAEMON_YOUNG_THRESHOLD, middle, old)


@contextmanager
def paused() -> Iterator[None]:
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
