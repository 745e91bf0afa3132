"""The ponder protocol's method table: each method the daemon answers and its handler; the
params types come from ``protocol.methods.METHODS``.

Most methods need the daemon's parts (session manager, catalogue, MCP), which load on first
use: their handlers wait for ``Daemon.load_parts`` first. The few in ``WITHOUT_PARTS`` are
answered from the config and the store alone, so ``initialize`` and ``ponder sessions``
never load the rest.
"""

from collections.abc import Awaitable, Callable
from typing import Any

from daemon.errors import Forbidden
from daemon.server.core import Daemon
from daemon.server.handlers import LifecycleHandlers, McpAuthHandlers, ModelHandlers, SessionHandlers
from daemon.server.params import placing_errors
from daemon.server.rpc_bridge import Peer, RpcBridge
from protocol import methods as m


class SharedHandlers:
    """The handlers every connection of one daemon shares (the device logins under way, for one)."""

    def __init__(self, daemon: Daemon, bridge: RpcBridge) -> None:
        self.models = ModelHandlers(daemon)
        self.mcp_auth = McpAuthHandlers(daemon, bridge)


def register_methods(daemon: Daemon, bridge: RpcBridge, peer: Peer, shared: SharedHandlers | None = None) -> None:
    """Register every method of the ponder protocol on ``peer``'s connection."""
    shared = SharedHandlers(daemon, bridge) if shared is None else shared
    lifecycle = LifecycleHandlers(daemon, bridge, peer)
    models = shared.models
    sessions = SessionHandlers(daemon, bridge, peer)
    mcp_auth = shared.mcp_auth
    handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
        "initialize": lifecycle.initialize,
        "shutdown": lifecycle.shutdown,
        "ping": lifecycle.ping,
        "models/list": models.models_list,
        "model/set": models.model_set,
        "thinking/set": models.thinking_set,
        "session/start": sessions.session_start,
        "session/resume": sessions.session_resume,
        "session/subscribe": sessions.session_subscribe,
        "session/unsubscribe": sessions.session_unsubscribe,
        "session/list": sessions.session_list,
        "session/get": sessions.session_get,
        "session/messages": sessions.session_messages,
        "session/prompt": sessions.session_prompt,
        "session/continue": sessions.session_continue,
        "session/queue/remove": sessions.session_queue_remove,
        "session/compact": sessions.session_compact,
        "attachment/get": sessions.attachment_get,
        "session/cancel": sessions.session_cancel,
        "session/fork": sessions.session_fork,
        "session/rename": sessions.session_rename,
        "session/delete": sessions.session_delete,
        "session/budget": sessions.session_budget,
        "mcp/list": mcp_auth.mcp_list,
        "permissions/list": mcp_auth.permissions_list,
        "auth/status": mcp_auth.auth_status,
        "auth/login": mcp_auth.auth_login,
    }
    for method, handler in handlers.items():
        if method not in WITHOUT_PARTS:
            handler = _after_parts(daemon, handler)
        if method not in OBSERVER_METHODS:
            handler = _controllers_only(peer, method, handler)
        peer.connection.register(method, m.METHODS[method][0], placing_errors(handler))


# Answered without the session manager, the catalogue or MCP (see the module docstring).
WITHOUT_PARTS = frozenset({"initialize", "shutdown", "ping", "session/list", "auth/status", "auth/login"})


# What an observer connection may call (PROTOCOL.md "Transports and several clients"); anything
# else is -32008.
OBSERVER_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "shutdown",
        "models/list",
        "session/list",
        "session/get",
        "session/resume",
        "session/messages",
        "session/subscribe",
        "session/unsubscribe",
        "attachment/get",
        "permissions/list",
        "mcp/list",
        "auth/status",
    }
)


def _controllers_only(
    peer: Peer, method: str, handler: Callable[[Any], Awaitable[Any]]
) -> Callable[[Any], Awaitable[Any]]:
    async def handle(params: Any) -> Any:
        if peer.role == "observer":
            raise Forbidden(method)
        return await handler(params)

    return handle


def _after_parts(daemon: Daemon, handler: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    async def handle(params: Any) -> Any:
        await daemon.load_parts()
        return await handler(params)

    return handle
