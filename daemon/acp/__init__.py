"""``ponder acp``: the daemon speaking the Agent Client Protocol (ACP v1) on stdio.

``server`` wires the daemon core to ACP's methods (and the ``/compact`` command), ``bridge``
turns turn events into ``session/update`` notifications (``usage_update`` included) and approvals
into ``session/request_permission``, ``compaction`` says how a compaction looks in ACP,
``replay`` rebuilds a stored history for ``session/load``, ``config_options`` the model and
thinking selectors, ``toolcalls`` and ``content`` tool calls and prompts, ``auth`` where
credentials come from, and ``types`` holds the wire Structs (camelCase on the wire).
"""

from daemon.acp.server import serve_acp

__all__ = ["serve_acp"]
