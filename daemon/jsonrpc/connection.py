"""The JSON-RPC 2.0 connection: envelopes, the method table, one task and cancel scope per
request, ``$/cancelRequest``, batches, daemon → client requests, and the single place where
exceptions become wire errors.

It knows nothing about sessions or providers: handlers are plain async functions taking a
validated params Struct and returning a result Struct, registered with their params type.
"""

import itertools
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from daemon.errors import (
    InternalError,
    InvalidParams,
    InvalidRequest,
    InvalidStoreRequest,
    MethodNotFound,
    ParseError,
    PonderError,
    RequestCancelled,
    ShuttingDown,
    StateConflict,
)
from daemon.jsonrpc.framing import BIG_MESSAGE, Outgoing, Pieces, ResultInPieces, Written, _Overlong
from daemon.util import foreground

if TYPE_CHECKING:  # only a listening daemon's connections have one (not on the start path)
    from daemon.jsonrpc.backlog import Backlog

log = logging.getLogger("ponder.rpc")

Handler = Callable[[Any], Awaitable[Any]]
# Called with a client's answer (a dict with ``result`` or ``error``) to one of our requests.
OnAnswer = Callable[[dict[str, Any]], None]
# A pattern, compiled (and cached) by ``re`` with the first refused params, not on the start path.
_PATH_RE = r" - at `(?P<path>[^`]*)`$"
_UNSET = object()
EOF_GRACE_S = 2.0
MAX_BATCH = 1000  # requests in one batch; a longer batch is refused whole, before any of it runs
RESOLVED_KEPT = 256  # requests answered elsewhere whose late answers still get ``already_resolved``


class _Result(msgspec.Struct):
    jsonrpc: str
    id: Any
    result: Any


class _ErrorBody(msgspec.Struct):
    code: int
    message: str
    data: dict[str, Any]


class _Error(msgspec.Struct):
    jsonrpc: str
    id: Any
    error: _ErrorBody


class _Notification(msgspec.Struct):
    jsonrpc: str
    method: str
    params: Any


class _Request(msgspec.Struct):
    jsonrpc: str
    id: Any
    method: str
    params: Any


class IncomingLines(Protocol):
    """What ``Connection.serve`` reads: the connection's incoming lines in order, awaited one at a
    time (``__anext__``), and those already arrived taken without waiting (``receive_nowait``,
    raising ``anyio.WouldBlock`` when none is there and ``anyio.EndOfStream`` at the end). An
    anyio memory object stream is one; so is each wrapper a transport puts around one."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Any: ...

    def __aiter__(self) -> Any: ...

    async def __anext__(self) -> bytes | _Overlong: ...

    def receive_nowait(self) -> bytes | _Overlong: ...


class _LineOrder:
    """The requests of a connection begin in the order their lines came, also when the lines of
    one read are dispatched together: a request's task begins only once the task of the line
    before it has begun, so its first step (up to its first wait) runs after that one's. Handlers
    rely on it: two prompts to one session queue in the order sent, and so do a client's config
    changes. asyncio runs new tasks in the order made, so nobody waits; trio runs a round's
    tasks in either order, and one that comes too early waits for the one before it."""

    def __init__(self) -> None:
        self._issued = 0  # tickets given at dispatch, one per line
        self._begun = 0  # the last ticket whose task has begun
        self._waiting: dict[int, anyio.Event] = {}

    def ticket(self) -> int:
        self._issued += 1
        return self._issued

    async def begin(self, ticket: int) -> None:
        if self._begun != ticket - 1:
            event = self._waiting[ticket] = anyio.Event()
            # Shielded: the line before begins within a few rounds of the loop (it waits for
            # nothing else), and at shutdown this request still gets its answer in ``_handle``.
            with anyio.CancelScope(shield=True):
                await event.wait()
        self._begun = ticket
        next_one = self._waiting.pop(ticket + 1, None)
        if next_one is not None:
            next_one.set()


class ClientRequestError(PonderError):
    """The client answered one of our requests with an error, or could not be asked."""


class AnswerThen:
    """A handler's result plus what to do once its answer is queued, before anything else the
    handler's task sends: ``session/subscribe`` queues the missed events right behind its answer;
    ACP's ``session/new`` lets the new session's updates go only once the answer naming it is out."""

    def __init__(self, result: Any, then: Callable[[], Awaitable[None]]) -> None:
        self.result = result
        self.then = then


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def encode_error(request_id: Any, exc: PonderError) -> bytes:
    try:
        return _encoder.encode(_Error("2.0", request_id, _ErrorBody(int(exc.code), exc.message, exc.data)))
    except (TypeError, ValueError) as failure:  # a bug: data the wire cannot carry; answer all the same
        log.error("could not encode the error %r", exc, exc_info=failure)
        internal = InternalError("Internal error in the daemon; details are in its log.")
        return _encoder.encode(_Error("2.0", request_id, _ErrorBody(int(internal.code), internal.message, {})))


def _answer_in_pieces(request_id: Any, result: ResultInPieces) -> Pieces:
    """The answer to ``request_id`` made while it is written: its envelope around the result's pieces."""
    head, tail = _encoder.encode(_Result("2.0", request_id, msgspec.Raw(b"\0"))).split(b"\0")
    internal = InternalError("Internal error in the daemon; details are in its log.")
    return Pieces(itertools.chain((head,), result, (tail,)), failed=encode_error(request_id, internal))


def encode_notification(method: str, params: Any) -> bytes:
    """A notification as it goes on the wire (without the newline): encoded once, sent to many."""
    return _encoder.encode(_Notification("2.0", method, params))


def encode_request(request_id: str, method: str, params: Any) -> bytes:
    return _encoder.encode(_Request("2.0", request_id, method, params))


def decode_line(line: bytes | _Overlong) -> Any:
    """One incoming line as a JSON value (a batch of at most ``MAX_BATCH``); raises the
    wire error to answer (id null) when the line cannot be a request or batch."""
    if isinstance(line, _Overlong):
        raise InvalidRequest(line.message, reason=line.reason)
    try:
        message = _decoder.decode(line)
    except UnicodeDecodeError:  # msgspec's answer to invalid UTF-8 inside a string
        raise ParseError("Parse error: the line is not valid UTF-8.") from None
    except ValueError as exc:  # msgspec.DecodeError and its ValidationError (a number out of range)
        raise ParseError(f"Parse error: {exc}.") from None
    except RecursionError:  # msgspec's answer to ``[[[[...`` nested past its limit
        raise ParseError("Parse error: the JSON is nested too deeply.") from None
    if isinstance(message, list):
        if not message:
            raise InvalidRequest("Invalid request: empty batch.", reason="empty_batch")
        if len(message) > MAX_BATCH:
            raise InvalidRequest(
                f"Invalid request: a batch holds at most {MAX_BATCH} requests and this one has {len(message)};"
                " send it in smaller batches.",
                reason="batch_too_long",
            )
    return message


def _shutdown_part(group: BaseExceptionGroup, what: str) -> BaseExceptionGroup:
    """trio groups shutdown's Cancelled with a failure in a handler's own tasks: log the
    failure and keep only the cancellation; any other group is re-raised as it is."""
    cancelled, failures = group.split(anyio.get_cancelled_exc_class())
    if cancelled is None or not isinstance(failures, Exception):
        raise group
    log.error("%s failed as shutdown cancelled it", what, exc_info=failures)
    return cancelled


def as_wire_error(exc: BaseException) -> PonderError:
    """The one mapping from any exception to a wire error."""
    if isinstance(exc, InvalidStoreRequest):
        return InvalidParams(exc.message, path=f"$.{exc.argument}")
    if isinstance(exc, PonderError):
        return exc
    if isinstance(exc, msgspec.ValidationError):
        return validation_error(exc)
    log.error("internal error", exc_info=exc)
    return InternalError("Internal error in the daemon; details are in its log.")


def validation_error(exc: msgspec.ValidationError, prefix: str = "$.params") -> InvalidParams:
    text = str(exc)
    match = re.search(_PATH_RE, text)
    path = prefix + (match.group("path")[1:] if match else "")
    message = re.sub(_PATH_RE, "", text)
    return InvalidParams(f"Invalid params: {message} (at {path}).", path=path)


def _queued_size(data: bytes | Pieces) -> int:
    """What a message counts in a ``Backlog`` when it is queued: its size; one made in pieces
    counts nothing until its writer makes them (it counts each piece while writing it)."""
    return len(data) if isinstance(data, bytes) else 0


class Connection:
    """One client connection over a pair of streams (stdio in production, memory in tests)."""

    def __init__(
        self,
        outgoing: MemoryObjectSendStream[Outgoing],
        *,
        cancel_method: str = "$/cancelRequest",
        cancel_id_field: str = "id",
        backlog: "Backlog | None" = None,
    ) -> None:
        self._outgoing = outgoing
        # A listening daemon's connection: its queue is bounded in bytes (its writer gives them
        # back), not by the queue's count of messages (stdio: None).
        self.backlog = backlog
        # The mark queued after the last big message, set once the writer has written it and
        # let go of it: until then notifications wait before they are encoded, so a reply's
        # message_end is never encoded while its text_end is still in memory.
        self._written: Written | None = None
        # The request-cancellation notification: ``$/cancelRequest {id}`` in the ponder
        # protocol, ``$/cancel_request {requestId}`` in ACP.
        self.cancel_method = cancel_method
        self.cancel_id_field = cancel_id_field
        self._methods: dict[str, tuple[type[Any], Handler]] = {}
        self._in_flight: dict[Any, anyio.CancelScope] = {}
        self._pending: dict[str, OnAnswer] = {}
        # Requests another connection's answer decided: a late answer here gets ``already_resolved``.
        self._resolved: OrderedDict[str, None] = OrderedDict()
        self._ids = itertools.count(1)
        self._order = _LineOrder()
        self._unanswered = 0  # requests received whose reply has not been queued yet
        self._answered = anyio.Event()  # set while _unanswered is 0; a fresh one once it rises again
        self._answered.set()
        self.shutting_down = False

    def register(self, method: str, params_type: type[Any], handler: Handler) -> None:
        self._methods[method] = (params_type, handler)

    # --- sending ----------------------------------------------------------------------

    async def send_raw(self, data: bytes | Pieces) -> None:
        # send() always yields to the loop first; with room in the queue that round trip
        # is pure overhead on the streaming hot path, so try the synchronous path first.
        if self._send_nowait(data):
            return
        backlog = self.backlog
        while backlog is not None and backlog.full:
            await backlog.room()  # its writer has written enough of what waits
            if self._send_nowait(data):
                return
        size = _queued_size(data)
        big = size >= BIG_MESSAGE or isinstance(data, Pieces)
        try:
            await self._outgoing.send(data)
            if backlog is not None:
                backlog.add(size)
            if big:
                del data  # the queue alone holds it now; the writer lets go of it once written
                written = Written()
                await self._outgoing.send(written)
                self._written = written  # only once queued: a mark that never reaches the writer is never set
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("dropped an outgoing message: output is closed")

    def _send_nowait(self, data: bytes | Pieces) -> bool:
        """Queue ``data`` if there is room; False when the caller must wait (back-pressure)."""
        backlog = self.backlog
        size = len(data) if isinstance(data, bytes) else 0  # (``_queued_size``, inline: every event comes here)
        try:
            if backlog is not None:
                if backlog.full:
                    return False
                backlog.add(size)  # (given back if it cannot be queued)
            if size < BIG_MESSAGE and isinstance(data, bytes):
                self._outgoing.send_nowait(data)
                return True
            stats = self._outgoing.statistics()
            if stats.current_buffer_used + 2 > stats.max_buffer_size:  # no room for it and its mark
                if backlog is not None:
                    backlog.add(-size)
                return False
            self._outgoing.send_nowait(data)
            written = Written()
            self._outgoing.send_nowait(written)
            self._written = written
        except anyio.WouldBlock:
            if backlog is not None:
                backlog.add(-size)
            return False
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("dropped an outgoing message: output is closed")
        return True

    def _writing_big(self) -> bool:
        return self._written is not None and not self._written.is_set()

    async def _big_message_written(self) -> None:
        """Wait until the last big message queued is written, if it is still being written (no
        checkpoint otherwise: ``notify`` is on every event's path)."""
        if self._writing_big():
            assert self._written is not None  # what _writing_big checked
            await self._written.wait()

    async def notify(self, method: str, params: Any) -> None:
        await self._big_message_written()
        await self.send_raw(_encoder.encode(_Notification("2.0", method, params)))

    def notify_nowait(self, method: str, params: Any) -> bool:
        """Queue a notification without waiting; False (nothing sent) when the queue is full
        or a big message is still being written (``notify`` waits for it before encoding)."""
        if self._writing_big():
            return False
        return self._send_nowait(_encoder.encode(_Notification("2.0", method, params)))

    def queue_nowait(self, data: bytes) -> bool:
        """Queue an encoded message (shared by many connections) without waiting; False when the
        queue is full. Unlike ``notify_nowait`` it does not wait for a big message to be written
        first: the bytes exist already, encoding them is what that wait spares."""
        return self._send_nowait(data)

    def can_send_now(self) -> bool:
        """Whether ``queue_nowait`` would queue now (room, and no big message still being written)."""
        if self._writing_big():
            return False
        stats = self._outgoing.statistics()
        return stats.current_buffer_used + 2 <= stats.max_buffer_size

    def send_encoded_nowait(self, data: bytes) -> bool:
        """``notify_nowait`` for an encoded message: False (nothing queued) when the queue is full
        or a big message is still being written (``send_encoded`` waits for it)."""
        return not self._writing_big() and self._send_nowait(data)

    async def send_encoded(self, data: bytes) -> None:
        """Queue an encoded message, waiting for room (back-pressure) and for a big one to be written."""
        await self._big_message_written()
        await self.send_raw(data)

    def expect_answer(self, request_id: str, on_answer: OnAnswer) -> None:
        """Route the client's answer to our request ``request_id`` to ``on_answer`` (once)."""
        self._pending[request_id] = on_answer

    def forget_request(self, request_id: str, *, resolved_elsewhere: bool) -> None:
        """Stop waiting for an answer to ``request_id``; with ``resolved_elsewhere`` a late answer
        is told ``already_resolved`` (another connection's answer won), else it is ignored."""
        self._pending.pop(request_id, None)
        if resolved_elsewhere:
            self._resolved[request_id] = None
            while len(self._resolved) > RESOLVED_KEPT:
                self._resolved.popitem(last=False)

    async def request(self, method: str, params: Any, result_type: type) -> Any:
        """Send a daemon → client request and wait for its answer.

        Cancelling the waiting task withdraws the request: the client is told with
        ``$/cancelRequest`` and a late answer is ignored.
        """
        request_id = f"ponder-{next(self._ids)}"
        done = anyio.Event()
        slot: list[Any] = []

        def answered(message: dict[str, Any]) -> None:
            if not slot:
                slot.append(message)
                done.set()

        self._pending[request_id] = answered
        try:
            await self.send_raw(encode_request(request_id, method, params))
            await done.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(1, shield=True):
                await self.notify(self.cancel_method, {self.cancel_id_field: request_id})
            raise
        finally:
            self._pending.pop(request_id, None)
        answer = slot[0]
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            raise ClientRequestError(f"The client answered {method} with an error: {error.get('message', '?')}")
        try:
            return msgspec.convert(answer.get("result"), result_type)
        except msgspec.ValidationError as exc:
            raise ClientRequestError(f"The client's answer to {method} is invalid: {exc}") from None

    # --- receiving --------------------------------------------------------------------

    async def serve(self, incoming: IncomingLines) -> None:
        """Dispatch incoming lines until the stream ends; requests run concurrently.

        Nothing a client sends may raise out of here: every line is either answered (an
        error for what cannot be a request) or handed to ``_handle``, the error boundary.

        Every line already there is dispatched at once, not one per turn of the loop: while a
        burst of turns keeps the loop busy, a round of it costs a step of each of them, and 200
        prompts sent together used to reach their handlers over ~200 rounds (the last ones most
        of a second late). Each request's cancel scope is in place when its line is dispatched,
        so a ``$/cancelRequest`` right behind it (handled in line order, here) finds it.
        """
        async with incoming, anyio.create_task_group() as tg:
            async for first in incoming:
                line: bytes | _Overlong | None = first
                while line is not None:
                    try:
                        message = decode_line(line)
                    except PonderError as exc:
                        await self.send_raw(encode_error(None, exc))
                    else:
                        if isinstance(message, list):
                            tg.start_soon(self._handle_batch, message, self._order.ticket())
                        else:
                            self._dispatch(tg, message)
                    try:
                        line = incoming.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        line = None
            # End of input: give requests in flight a moment, then answer them shutting_down.
            await self.wait_answered(EOF_GRACE_S)
            tg.cancel_scope.cancel()

    def _dispatch(self, tg: anyio.abc.TaskGroup, message: Any) -> None:
        if not isinstance(message, dict):
            tg.start_soon(self._handle_and_send, message, None, self._order.ticket())  # answered as invalid there
            return
        if "method" not in message and "id" in message and ("result" in message or "error" in message):
            self._route_answer(message)
            return
        method = message.get("method")
        if method == self.cancel_method and "id" not in message and message.get("jsonrpc") == "2.0":
            self._cancel_request(message.get("params"))  # in line order: it reaches what came before it
            return
        tg.start_soon(self._handle_and_send, message, self._claim(message, method), self._order.ticket())

    def _claim(self, message: dict[str, Any], method: Any) -> anyio.CancelScope | None:
        """The cancel scope of a request with an id a cancel can name, registered in flight now
        (at dispatch), so a cancel dispatched right after it finds it; None for anything
        ``_handle`` answers otherwise (a notification, a null or invalid id, an id in flight, an
        invalid envelope)."""
        request_id = message.get("id")
        if (
            message.get("jsonrpc") != "2.0"
            or not isinstance(method, str)
            or method == self.cancel_method
            or isinstance(request_id, bool)
            or not isinstance(request_id, (str, int))
            or request_id in self._in_flight
        ):
            return None
        scope = anyio.CancelScope()
        self._in_flight[request_id] = scope
        return scope

    def _received(self) -> None:
        if not self._unanswered:
            self._answered = anyio.Event()
        self._unanswered += 1

    def _reply_queued(self) -> None:
        self._unanswered -= 1
        if not self._unanswered:
            self._answered.set()

    async def _handle_and_send(self, message: Any, claimed: anyio.CancelScope | None, ticket: int) -> None:
        self._received()
        answering = foreground.Hold()  # the client waits for this answer (``daemon.util.foreground``)
        cut_short: list[bytes] = []
        then: list[Callable[[], Awaitable[None]]] = []
        try:
            await self._order.begin(ticket)
            reply = await self._handle(message, cut_short, then, claimed)
            if reply is not None:
                await self._send_reply(reply)
        finally:
            answering.release()
            if cut_short:  # the connection is going away: still answer, exactly once
                await self._send_reply(cut_short[0])
            self._reply_queued()
        for follow_up in then:  # right behind the answer (see ``AnswerThen``)
            await follow_up()

    async def _send_reply(self, reply: bytes | Pieces) -> None:
        """Queue a reply; when shutdown cancels the wait for room in the queue, still wait a moment."""
        try:
            await self.send_raw(reply)
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(1, shield=True):
                await self.send_raw(reply)
            raise

    async def wait_quiet(self) -> None:
        """Wait until no request is being answered and the last big message queued (a long
        ``session/resume`` reply) is written: what background work waits for before it takes
        the CPU from the client's requests."""
        while True:
            await self._answered.wait()
            await self._big_message_written()
            if not self._unanswered and not self._writing_big():
                return

    async def wait_answered(self, timeout_s: float) -> None:
        """Wait (bounded) until every request received so far has had its reply queued."""
        with anyio.move_on_after(timeout_s):
            await self._answered.wait()

    async def _handle_batch(self, messages: list[Any], ticket: int) -> None:
        self._received()
        answering = foreground.Hold()
        try:
            await self._order.begin(ticket)
            await self._answer_batch(messages)
        finally:
            answering.release()
            self._reply_queued()

    async def _answer_batch(self, messages: list[Any]) -> None:
        """Handle a batch's members concurrently and answer them all in one array, also when
        shutdown cuts the batch short (its unfinished requests are answered ``shutting_down``)."""
        replies: list[bytes | Pieces | None] = [None] * len(messages)
        then: list[Callable[[], Awaitable[None]]] = []

        async def one(i: int, message: Any) -> None:
            if isinstance(message, dict) and "method" not in message and "id" in message:
                self._route_answer(message)
                return
            cut_short: list[bytes] = []
            try:
                replies[i] = await self._handle(message, cut_short, then)
            finally:
                if cut_short:
                    replies[i] = cut_short[0]

        try:
            async with anyio.create_task_group() as tg:
                for i, message in enumerate(messages):
                    tg.start_soon(one, i, message)
        finally:
            # An answer made in pieces is made whole here: a batch's answer is one array.
            present = [r.joined() if isinstance(r, Pieces) else r for r in replies if r is not None]
            if present:  # a batch of notifications only gets no answer at all
                await self._send_reply(b"[" + b",".join(present) + b"]")
        for follow_up in then:
            await follow_up()

    def _route_answer(self, message: dict[str, Any]) -> None:
        answer_id = message.get("id")
        # Ours are strings; any other id (a list or object would not even hash) answers nothing.
        if not isinstance(answer_id, str):
            log.debug("ignoring an answer to an unknown request %.200r", answer_id)
            return
        if answer_id in self._resolved:
            del self._resolved[answer_id]
            # The answer lost: say so, with the request's id (PROTOCOL.md "Transports and several clients").
            late = StateConflict(
                "This request was already answered by another client; your answer was not used.",
                reason="already_resolved",
            )
            self._send_nowait(encode_error(answer_id, late))
            return
        on_answer = self._pending.pop(answer_id, None)
        if on_answer is None:
            log.debug("ignoring an answer to an unknown or withdrawn request %.200r", answer_id)
            return
        on_answer(message)

    async def _handle(
        self,
        message: Any,
        cut_short: list[bytes],
        then: list[Callable[[], Awaitable[None]]],
        claimed: anyio.CancelScope | None = None,
    ) -> bytes | Pieces | None:
        """Handle one request or notification; return the encoded reply (None for notifications).

        This is the error boundary: whatever the message or its handler does, the outcome is
        a reply (or, for a notification, nothing), never an exception. The one exception is
        the connection's own cancellation (shutdown), which propagates; a request cut short
        by it puts its ``shutting_down`` answer in ``cut_short`` for the caller to send.
        """
        request_id: Any = None
        try:
            if not isinstance(message, dict):
                raise InvalidRequest("Invalid request: expected a JSON-RPC request object.", reason="not_an_object")
            request_id = message.get("id", _UNSET)
            if request_id is not _UNSET and (
                isinstance(request_id, bool) or not isinstance(request_id, (str, int, type(None)))
            ):
                request_id = None
                raise InvalidRequest("Invalid request: id must be a string, a number or null.", reason="bad_id")
            if message.get("jsonrpc") != "2.0":
                raise InvalidRequest('Invalid request: "jsonrpc" must be "2.0".', reason="bad_jsonrpc")
            method = message.get("method")
            if not isinstance(method, str):
                raise InvalidRequest("Invalid request: method must be a string.", reason="bad_method")
        except PonderError as exc:
            return encode_error(None if request_id is _UNSET else request_id, exc)

        is_notification = request_id is _UNSET
        if method == self.cancel_method:
            self._cancel_request(message.get("params"))
            return None
        if is_notification:
            # Notifications get no answer, not even an error; unknown ones are ignored.
            if method in self._methods:
                try:
                    await self._call(method, message.get("params", _UNSET))
                except Exception as exc:
                    log.warning("notification %s failed: %s", method, as_wire_error(exc).message)
                except BaseExceptionGroup as group:
                    raise _shutdown_part(group, f"notification {method}") from None
            return None
        # A null id names nothing a client could cancel or tell apart, so two of them in one
        # batch are two requests, not a duplicate (only real ids are tracked in flight). A
        # request claimed at dispatch (``_claim``) was checked there and is in flight already.
        if claimed is None and request_id is not None and request_id in self._in_flight:
            return encode_error(
                request_id,
                InvalidRequest(
                    "Invalid request: this id is already in use by a request in flight.", reason="duplicate_id"
                ),
            )
        scope = claimed if claimed is not None else anyio.CancelScope()
        if request_id is not None:
            self._in_flight[request_id] = scope
        try:
            if self.shutting_down:
                return encode_error(request_id, ShuttingDown())
            with scope:
                result = await self._call(method, message.get("params", _UNSET))
                if isinstance(result, AnswerThen):
                    then.append(result.then)
                    result = result.result
                if isinstance(result, ResultInPieces):
                    return _answer_in_pieces(request_id, result)
                return _encoder.encode(_Result("2.0", request_id, result))
            # Only reached when our own scope was cancelled by $/cancelRequest.
            return encode_error(request_id, RequestCancelled())
        except anyio.get_cancelled_exc_class():
            # The whole connection is going away (shutdown): the caller answers for us.
            cut_short.append(encode_error(request_id, ShuttingDown()))
            raise
        except Exception as exc:
            return encode_error(request_id, as_wire_error(exc))
        except BaseExceptionGroup as group:
            cancelled = _shutdown_part(group, f"request {request_id!r}")  # still a request cut short
            cut_short.append(encode_error(request_id, ShuttingDown()))
            raise cancelled from None
        finally:
            if request_id is not None:
                self._in_flight.pop(request_id, None)

    async def _call(self, method: str, raw_params: Any) -> Any:
        entry = self._methods.get(method)
        if entry is None:
            raise MethodNotFound(f"Method not found: {method!r}.", method=method)
        params_type, handler = entry
        if raw_params is _UNSET or raw_params is None:
            raw_params = {}
        if not isinstance(raw_params, dict):
            raise InvalidParams("Invalid params: params must be an object.", path="$.params")
        try:
            params: Any = msgspec.convert(raw_params, params_type)
        except msgspec.ValidationError as exc:
            raise validation_error(exc) from None
        return await handler(params)

    def _cancel_request(self, params: Any) -> None:
        request_id = params.get(self.cancel_id_field) if isinstance(params, dict) else None
        # Only a string or an integer can name a request in flight: anything else (a list or
        # an object would not even hash, ``true`` would find id 1) cancels nothing.
        if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
            log.debug("ignoring %s for an id that names no request: %.200r", self.cancel_method, request_id)
            return
        scope = self._in_flight.get(request_id)
        if scope is not None:
            scope.cancel()
