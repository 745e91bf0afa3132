"""``ponder attach [--socket PATH | --url URL]`` (and ``ponder acp --attach``, same options): stdio
bridged to a running daemon (``ponder serve --listen``), so a client that can only spawn a process
shares one daemon with the others.

The client speaks to the daemon as it would over stdio (its own ``initialize`` included): over the
Unix socket the bytes pass through unchanged; over a WebSocket each line is one text message and
each message one line. ``ponder acp --attach`` first tells the daemon that this connection speaks
ACP (``daemon.jsonrpc.dialect``), then relays the editor's bytes the same way.

The end of stdin: over the socket it half-closes the connection (the daemon answers what is in
flight, then closes); over a WebSocket, which has no half-close, the command waits for the answers
to the requests it relayed, then closes. The daemon closing ends the command. A WebSocket presents
a token: ``--token-file FILE``, else ``$PONDER_SERVE_TOKEN``, else the home's ``serve.token``. A
daemon that cannot be reached, or refuses the token (401) or the connection (403), is one line on
stderr and exit status 1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

    from daemon.jsonrpc.ws_client import WebSocketClient

READ_CHUNK = 256 * 1024
TOKEN_ENV = "PONDER_SERVE_TOKEN"


class AttachFailed(Exception):
    """What the person is told (one sentence) before exit status 1."""


def add_attach_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--socket", metavar="PATH", help="the daemon's Unix socket (default <home>/serve.sock)")
    where.add_argument("--url", metavar="URL", help="the daemon's WebSocket, ws://127.0.0.1:PORT (or wss://)")
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"the token a WebSocket presents (default ${TOKEN_ENV}, else serve.token in the home)",
    )


def run_attach(args: argparse.Namespace, backend: str, dialect: str | None = None) -> int:
    """``backend``: the async library to run on (asyncio or trio); ``dialect``: announced first
    (``acp``), or None for the ponder protocol."""
    import anyio

    from daemon.config.settings import resolve_home

    home = resolve_home(args.home)
    name = "ponder acp --attach" if dialect else "ponder attach"
    first = None
    if dialect is not None:
        from daemon.jsonrpc.dialect import dialect_line

        first = dialect_line(dialect) + b"\n"
    try:
        if args.url:
            token = _token(args, home)
            anyio.run(_bridge_websocket, args.url, token, first, backend=backend)
        else:
            path = Path(args.socket).expanduser() if args.socket else home / "serve.sock"
            try:
                anyio.run(_bridge_unix, path, first, backend=backend)
            except OSError as exc:
                raise AttachFailed(f"cannot reach a daemon at {path}: {exc.strerror or exc}.") from None
    except AttachFailed as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    return 0


def _token(args: argparse.Namespace, home: Path) -> str | None:
    if args.token_file:
        try:
            return Path(args.token_file).expanduser().read_text(encoding="ascii").strip() or None
        except (OSError, UnicodeDecodeError) as exc:
            raise AttachFailed(f"cannot read the token file {args.token_file}: {exc}.") from None
    if os.environ.get(TOKEN_ENV, "").strip():
        return os.environ[TOKEN_ENV].strip()
    from daemon.server.token import read_token

    return read_token(home)


async def _read_stdin() -> bytes:
    import anyio

    return await anyio.to_thread.run_sync(os.read, 0, READ_CHUNK, abandon_on_cancel=True)


async def _write_stdout(data: bytes) -> None:
    import anyio

    await anyio.to_thread.run_sync(_write_all, 1, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def _bridge_unix(path: Path, first: bytes | None) -> None:
    import anyio

    stream = await anyio.connect_unix(path)
    async with stream, anyio.create_task_group() as tg:

        async def upstream() -> None:
            if first is not None:
                await stream.send(first)
            while True:
                chunk = await _read_stdin()
                if not chunk:
                    await stream.send_eof()
                    return
                await stream.send(chunk)

        tg.start_soon(upstream)
        while True:
            try:
                data = await stream.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                break
            await _write_stdout(data)
        tg.cancel_scope.cancel()


async def _bridge_websocket(url: str, token: str | None, first: bytes | None) -> None:
    import ssl

    import anyio

    from daemon.jsonrpc.ws_client import WebSocketRefused, connect_websocket

    try:
        ws = await connect_websocket(url, token)
    except WebSocketRefused as exc:
        if exc.status == 401:
            hint = "" if token else f" (no token was found: give --token-file FILE or ${TOKEN_ENV})"
            raise AttachFailed(f"the daemon at {url} refused the token (401){hint}: {exc.reason}") from None
        raise AttachFailed(f"the daemon at {url} refused the connection ({exc.status}): {exc.reason}") from None
    except ssl.SSLError as exc:  # (before ValueError: a failed verification is both)
        raise AttachFailed(
            f"cannot set up TLS with the daemon at {url}: {exc.reason or exc} (a certificate this machine does not "
            "trust? SSL_CERT_FILE names the ones to trust)."
        ) from None
    except ValueError as exc:
        raise AttachFailed(f"{exc}.") from None
    except TimeoutError:
        raise AttachFailed(f"cannot reach a daemon at {url}: no answer within 10 s.") from None
    except OSError as exc:
        raise AttachFailed(f"cannot reach a daemon at {url}: {exc.strerror or exc}.") from None
    relay = _Relay(ws)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(relay.upstream, first, tg.cancel_scope)
            await relay.downstream()
            tg.cancel_scope.cancel()
    finally:
        await ws.aclose()
    if ws.close_code not in (None, 1000, 1005) and ws.close_reason:
        raise AttachFailed(f"the daemon closed the connection ({ws.close_code}): {ws.close_reason}")


class _Relay:
    """Lines from stdin as messages, messages to stdout as lines; at the end of stdin, the answers
    to the requests relayed are waited for, then the WebSocket closes."""

    def __init__(self, ws: WebSocketClient) -> None:
        import anyio

        self.ws = ws
        self.unanswered: set[bytes] = set()  # the ids (encoded) of requests relayed, not yet answered
        self.input_ended = False
        self.settled = anyio.Event()

    def _check_settled(self) -> None:
        if self.input_ended and not self.unanswered:
            self.settled.set()

    async def upstream(self, first: bytes | None, scope: Any) -> None:
        from daemon.jsonrpc.framing import LineSplitter, _Overlong

        if first is not None:
            await self.ws.send_text(first.decode().strip())
        splitter = LineSplitter()
        while True:
            chunk = await _read_stdin()
            lines = splitter.feed(chunk) if chunk else splitter.finish()
            for line in lines:
                if isinstance(line, _Overlong):
                    continue  # the daemon would refuse it anyway (over its --max-line-bytes)
                self._note_requests(line)
                await self.ws.send_text(line.decode("utf-8", "replace"))
            if not chunk:
                break
        self.input_ended = True
        self._check_settled()
        await self.settled.wait()
        scope.cancel()

    def _note_requests(self, line: bytes) -> None:
        import msgspec

        try:
            message = msgspec.json.decode(line)
        except msgspec.DecodeError:
            return  # the daemon answers it (id null): nothing to wait for
        for item in message if isinstance(message, list) else [message]:
            if isinstance(item, dict) and "method" in item and item.get("id") is not None:
                self.unanswered.add(msgspec.json.encode(item["id"]))

    def _note_answers(self, text: str) -> None:
        import msgspec

        try:
            message = msgspec.json.decode(text)
        except msgspec.DecodeError:
            return
        for item in message if isinstance(message, list) else [message]:
            if isinstance(item, dict) and "method" not in item and "id" in item:
                self.unanswered.discard(msgspec.json.encode(item["id"]))
        self._check_settled()

    async def downstream(self) -> None:
        while (text := await self.ws.receive()) is not None:
            await _write_stdout(text.encode("utf-8", "surrogatepass") + b"\n")
            if self.unanswered and '"id"' in text:
                self._note_answers(text)  # after the answer is out: the last one may end the relay
