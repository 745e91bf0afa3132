"""``ponder acp``: the daemon speaking the Agent Client Protocol (ACP v1) on stdio.

``server`` wires the daemon core to ACP's methods, ``bridge`` turns turn events into
``session/update`` notifications and approvals into ``session/request_permission``,
``replay`` rebuilds a stored history for ``session/load``, and ``types`` holds the wire
Structs (camelCase on the wire).
"""

from daemon.acp.server import serve_acp

__all__ = ["serve_acp"]
