"""KeyedLock: one fair lock per key, re-entrant for its holder, forgotten when unused."""

import anyio
import pytest

from daemon.util.keyed_lock import KeyedLock

pytestmark = pytest.mark.anyio


async def test_holders_of_one_key_go_in_the_order_they_asked_and_may_re_enter() -> None:
    locks = KeyedLock()
    order: list[str] = []
    release = anyio.Event()  # not a sleep: on a busy machine "a" could finish before s2 is checked

    async def change(name: str) -> None:
        async with locks.hold("s1"):
            async with locks.hold("s1"):  # the holder takes it again (set_model inside a read-decide-change)
                await release.wait()
                order.append(name)

    async with anyio.create_task_group() as tg:
        for name in "abcde":
            tg.start_soon(change, name)
            await anyio.lowlevel.checkpoint()  # started in this order, as request handlers are
        async with locks.hold("s2"):  # another key does not wait for s1
            assert order == []
        release.set()
    assert order == list("abcde")
    assert len(locks) == 0
