"""The ponder protocol's method handlers, one class per method group. This module only re-exports."""

from daemon.server.handlers.lifecycle import LifecycleHandlers
from daemon.server.handlers.mcp_auth import McpAuthHandlers
from daemon.server.handlers.models import ModelHandlers
from daemon.server.handlers.sessions import SessionHandlers

__all__ = ["LifecycleHandlers", "McpAuthHandlers", "ModelHandlers", "SessionHandlers"]
