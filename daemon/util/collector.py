"""The cyclic garbage collector held off while a burst of objects is made that holds no cycle.

Reading a long history makes tens of thousands of row tuples and structs at once; every
700 allocations the collector would walk the young ones again, for nothing (none of them is
garbage yet, nor in a cycle). ``paused()`` turns collection off for such a stretch and back on
after it, only if it was on: a thread that finds it off (someone else's pause, or start-up's)
leaves turning it back on to whoever turned it off.
"""

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
