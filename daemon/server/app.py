"""``ponder serve``: the daemon in its own protocol over one connection (stdio in production,
memory streams in tests). Heavy parts (the catalogue's data, provider adapters, the tools) load
lazily, so that ``initialize`` is answered fast."""

from collections.abc import Callable

from anyio.streams.memory import MemoryObjectSendStream

from daemon.config.settings import Config
from daemon.jsonrpc.connection import Connection, IncomingLines
from daemon.jsonrpc.framing import Outgoing
from daemon.sandbox.probe import ProbeRun
from daemon.server.core import Daemon, open_daemon
from daemon.server.lifecycle import serve_connection
from daemon.server.routes import register_methods
from daemon.server.rpc_bridge import RpcBridge


async def serve(
    config: Config,
    incoming: IncomingLines,
    outgoing: MemoryObjectSendStream[Outgoing],  # bytes; the writer also takes rpc's marks
    *,
    handle_signals: bool = False,
    on_ready: Callable[[Daemon], None] | None = None,
    sandbox_probe: ProbeRun | None = None,
    warm_up: bool = True,
) -> None:
    """Serve one connection until end of input, ``shutdown`` or a signal; then shut down.
    ``sandbox_probe``: the sandbox probe, if started already (``ponder serve`` starts it first);
    ``warm_up`` False: no warm-up after initialize (``serve --no-warm-up``, how the one-shot client
    commands run it: what they use loads on their requests anyway)."""
    connection = Connection(outgoing)
    bridge = RpcBridge()
    peer = bridge.add_peer(connection, "stdio")
    async with open_daemon(config, connection, bridge, sandbox_probe=sandbox_probe) as daemon:
        daemon.warm_up = warm_up
        register_methods(daemon, bridge, peer)
        if on_ready is not None:
            on_ready(daemon)
        await serve_connection(daemon, incoming, handle_signals=handle_signals)
