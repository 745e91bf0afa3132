"""Requests a client writes to the daemon it just started, before its own event loop exists.

``ponder ask`` starts its daemon first, then imports its async stack. Whatever it already knows
it will ask (``initialize``, and a new session's ``session/start``) it writes to the daemon's
stdin at once (``EarlyRequests.send``), so the daemon answers them while the client is still
loading; the client's ``RpcClient`` then takes the answers as those of its own requests (the
same method with the same params, see ``RpcClient.request``) instead of asking again. The
daemon handles requests concurrently anyway (PROTOCOL.md "Framing"): this changes when the
lines arrive, not what they say.

Stdlib only: imported right after ``daemon.jsonrpc.spawn`` started the daemon.
"""

import json
from typing import Any, NamedTuple

from daemon.jsonrpc.spawn import StartedDaemon


class SentEarly(NamedTuple):
    """One request written before the client was connected: its id, method and params."""

    request_id: int
    method: str
    params: dict[str, Any]


class EarlyRequests:
    """The requests written to one started daemon's stdin so far (ids 1, 2, ...)."""

    def __init__(self, daemon: StartedDaemon) -> None:
        self.daemon = daemon
        self.sent: list[SentEarly] = []
        self.broken = False  # the daemon's stdin is closed already: send nothing more

    def send(self, method: str, params: dict[str, Any]) -> None:
        """Write one request line now. A daemon that is gone already is not an error here: the
        client finds out, and says so, when it connects and asks."""
        if self.broken:
            return
        request_id = len(self.sent) + 1
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}, ensure_ascii=False)
        try:
            data = line.encode() + b"\n"
        except UnicodeEncodeError:  # text that is not UTF-8 (a lone surrogate): the client asks, and fails, itself
            return
        try:
            view = memoryview(data)
            while view:  # unbuffered: a long line may go in parts
                view = view[self.daemon.stdin.write(view) or 0 :]
        except OSError:
            self.broken = True
            return
        self.sent.append(SentEarly(request_id, method, params))
