"""Session lifecycle: the registry of live sessions (``manager``), their actors (``actor``), a
live session's state (``live``), turn assembly (``assembly``, ``tool_runner``), the thinking a
prompt asks for (``thinking_settings``) and ``MODEL/LEVEL`` ids (``model_level``), event numbering
(``emitter``), store writes and leases (``persistence``), each session's usage, cost and budget
(``accounts``), and the seams to the client (``bridge``).

This package re-exports nothing: the daemon's start path imports ``bridge`` (the seam a
dialect implements) without loading the manager, the agent and the tools, which load on
first use (``daemon.server.core``).
"""
