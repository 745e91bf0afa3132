"""Session lifecycle: the registry of live sessions (``manager``), their actors (``actor``), a
live session's state (``live``), turn assembly (``assembly``, ``tool_runner``), the thinking a
prompt asks for (``thinking_settings``) and ``MODEL/LEVEL`` ids (``model_level``), event numbering
(``emitter``), store writes and leases (``persistence``), each session's usage, cost and budget
(``accounts``), and the seams to the client (``bridge``). This module only re-exports.
"""

from daemon.sessions.bridge import ClientBridge
from daemon.sessions.live import LiveSession, PendingTurn
from daemon.sessions.manager import SessionManager
from daemon.sessions.tool_runner import ToolRunner
from daemon.tools.source import ToolSource

__all__ = ["ClientBridge", "LiveSession", "PendingTurn", "SessionManager", "ToolRunner", "ToolSource"]
