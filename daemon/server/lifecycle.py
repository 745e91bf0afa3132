"""A daemon's lifetime once built: serve the connection until end of input, ``shutdown`` or a
signal (SIGTERM, SIGINT), then shut down gracefully: running turns are cancelled and persist
their last messages, then the MCP servers close. Both dialects run through ``serve_connection``;
the parts a dialect has not used yet (``daemon.server.core``) are neither built nor closed."""

import gc
import logging
import signal

import anyio

from daemon.jsonrpc.connection import IncomingLines
from daemon.server.core import Daemon

log = logging.getLogger("ponder.server")


async def serve_connection(daemon: Daemon, incoming: IncomingLines, *, handle_signals: bool = False) -> None:
    """Serve ``daemon.connection`` over ``incoming`` (its handlers registered) until done; then shut down."""
    connection = daemon.connection
    assert connection is not None, "a stdio daemon has its connection"
    # Everything loaded so far lives as long as the daemon: keep the collector from
    # walking it again on every full collection (resume of a long session allocates a lot).
    # ``ponder serve`` loaded it with the collector off (cli.main.run_serve): on from here.
    gc.freeze()
    gc.enable()
    async with anyio.create_task_group() as tg:
        daemon.attach(tg)  # the parts (session manager, MCP) run here once built: on first use
        with anyio.CancelScope() as serving:

            async def stop_serving_on_request() -> None:
                await daemon.shutdown_requested.wait()
                connection.shutting_down = daemon.closing = True
                await connection.wait_answered(0.5)  # the shutdown reply goes out first
                serving.cancel()

            tg.start_soon(stop_serving_on_request)
            if handle_signals:
                tg.start_soon(watch_signals, daemon.shutdown_requested)
            await connection.serve(incoming)
        connection.shutting_down = daemon.closing = True
        # At info only when sessions or MCP servers ran: the first record opens the log file,
        # which a daemon that answered initialize and a listing has no other reason to write.
        log.log(logging.INFO if daemon.parts_built else logging.DEBUG, "shutting down")
        await daemon.close_parts()
        tg.cancel_scope.cancel()


async def watch_signals(shutdown_requested: anyio.Event) -> None:
    """Set ``shutdown_requested`` at the first SIGTERM or SIGINT (stdio and listening daemons alike)."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("received %s", signal.Signals(signum).name)
            shutdown_requested.set()
            return
