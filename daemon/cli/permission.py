"""The permission prompt of ``ponder ask``: asks the person at the terminal before a tool
changes anything."""

import sys
from typing import Any

import anyio


async def ask_permission(method: str, params: Any) -> Any:
    if method != "permission/request":
        raise ValueError(f"unexpected request {method}")

    def ask() -> str:
        sys.stderr.write(f"\n{params['title']}\nAllow? [y]es once / [a]lways this session / [N]o: ")
        sys.stderr.flush()
        with open("/dev/tty") as tty:
            answer = tty.readline().strip().lower()
        return {"y": "allow_once", "yes": "allow_once", "a": "allow_session"}.get(answer, "deny")

    return {"decision": await anyio.to_thread.run_sync(ask, abandon_on_cancel=True)}
