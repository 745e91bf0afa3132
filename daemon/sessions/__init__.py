"""Session lifecycle: the registry of live sessions, their actors, turn assembly and event numbering.

``manager`` is the entry point (``SessionManager``); the other modules each own one part of
a session's life. This package only re-exports.
"""

from daemon.sessions.manager import ClientBridge, LiveSession, PendingTurn, RpcBridge, SessionManager, ToolSource

__all__ = ["ClientBridge", "LiveSession", "PendingTurn", "RpcBridge", "SessionManager", "ToolSource"]
