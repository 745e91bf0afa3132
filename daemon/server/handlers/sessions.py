"""The ``session/*`` methods, and ``attachment/get``."""

import base64
from typing import TYPE_CHECKING

import msgspec

from daemon.conversation import ChatMessage
from daemon.errors import InvalidParams
from daemon.jsonrpc.connection import AnswerThen
from daemon.jsonrpc.framing import ResultInPieces
from daemon.server.core import Daemon
from daemon.server.params import optional
from daemon.server.rpc_bridge import Peer, RpcBridge
from protocol import methods as m
from protocol.objects import SessionListRow

if TYPE_CHECKING:
    from daemon.agent.structured import OutputRequest
    from daemon.sessions.manager import SessionManager


def dropped_steer(message: ChatMessage) -> m.DroppedSteer:
    """A steer given back by ``session/cancel``: its text, and its blocks as they could be sent again
    when it had any other than text (an image comes back as its bytes: it was stored nowhere)."""
    from daemon.sessions.live import text_of  # with the session manager: off the start path

    if all(p.type == "text" for p in message.parts):
        return m.DroppedSteer(message_id=message.message_id, text=text_of(message))
    content: list[m.InputBlock] = []
    for part in message.parts:
        if part.type == "image" and part.data is not None:
            data = base64.b64encode(part.data).decode("ascii")
            content.append(m.ImageInput(data=data, mime_type=part.mime_type, name=part.name))
        elif part.type == "resource":
            content.append(m.ResourceInput(uri=part.uri or "", text=part.text, mime_type=part.mime_type))
        elif part.type == "resource_link":
            content.append(m.ResourceLinkInput(uri=part.uri or "", name=part.name or "", mime_type=part.mime_type))
        elif part.type == "text":
            content.append(m.TextInput(text=part.text))
    blocks = [msgspec.to_builtins(block) for block in content]
    return m.DroppedSteer(message_id=message.message_id, text=text_of(message), content=blocks)


async def _output_request(params: m.SessionPromptParams) -> "OutputRequest | None":
    """The prompt's ``output_schema`` and ``output_retries``, the schema checked (PROTOCOL.md
    "Structured output and headless runs"); a steer takes the running turn's and may not carry them."""
    if params.delivery == "steer":
        given = {
            "output_schema": params.output_schema is not None,
            "output_retries": params.output_retries != m.DEFAULT_OUTPUT_RETRIES,
            "max_turns": params.max_turns is not None,
        }
        for name, present in given.items():
            if present:
                raise InvalidParams(
                    f"A steer runs with the running turn's output schema and limits; send it without {name}.",
                    path=f"$.params.{name}",
                )
    if params.output_schema is None:
        return None
    import anyio

    from daemon.agent.output_schema import check_schema  # with the agent: off the start path
    from daemon.agent.structured import OutputRequest

    # On a worker thread: a large schema takes a moment to check, and other requests go on meanwhile.
    await anyio.to_thread.run_sync(check_schema, params.output_schema)
    return OutputRequest(schema=params.output_schema, retries=params.output_retries)


class SessionHandlers:
    """The session methods of one connection (``peer``): on a listening daemon, the methods that
    start, resume or drive a session subscribe the caller to it (PROTOCOL.md "Transports")."""

    def __init__(self, daemon: Daemon, bridge: RpcBridge, peer: Peer) -> None:
        self.daemon = daemon
        self.bridge = bridge
        self.peer = peer

    def _follow(self, session_id: str) -> None:
        self.bridge.follow(self.peer, session_id)

    async def _follow_existing(self, session_id: str) -> None:
        """Subscribe the caller to a session it is about to drive (a listening daemon only: on stdio
        it follows every session), once it is known to exist, before a turn can start."""
        if self.bridge.listening and not self.peer.follows(session_id):
            await self.sessions.row(session_id)
            self._follow(session_id)

    @property
    def sessions(self) -> "SessionManager":
        return self.daemon.sessions  # built by the time a handler runs (routes: ``load_parts``)

    async def session_start(self, params: m.SessionStartParams) -> m.SessionResult:
        from daemon.models.levels import parse_display, parse_fallback, parse_level  # with the sessions: later

        live = await self.sessions.start(
            model_id=params.model_id,
            # An empty level, display or fallback counts as left out here (as it always has).
            thinking_level=optional(parse_level, params.thinking_level or None, "$.params.thinking_level"),
            cwd=params.cwd,
            title=params.title,
            system_prompt=params.system_prompt,
            approval_policy=params.approval_policy,
            display=optional(parse_display, params.display or None, "$.params.display"),
            fallback=optional(parse_fallback, params.fallback or None, "$.params.fallback"),
            budget=params.budget,
            sandbox=params.sandbox,
        )
        self._follow(live.row.id)
        return m.SessionResult(
            session=self.sessions.wire_session(live.row), thinking=self.sessions.thinking_for(live.row)
        )

    async def session_get(self, params: m.SessionIdParams) -> m.SessionResult:
        row = await self.sessions.row(params.session_id)
        return m.SessionResult(session=self.sessions.wire_session(row), thinking=self.sessions.thinking_for(row))

    async def session_resume(self, params: m.SessionIdParams) -> ResultInPieces:
        from daemon.context.history import history_items  # with the session manager: off the start path
        from daemon.util.collector import paused

        live = await self.sessions.get(params.session_id)
        # A reply still streaming is shown as it stands (``streaming``), not as last checkpointed.
        streaming = live.current.in_progress.snapshot() if live.current and live.current.in_progress else None
        with paused():  # every message twice over as wire structs (a long history: ~100,000 objects)
            messages = [
                (
                    streaming if streaming is not None and message.message_id == streaming.message_id else message
                ).to_wire()
                for message in live.stored_messages
            ]
            items = history_items(messages, live.compactions)
        # No await from here to the answer: the events after last_seq reach the caller live.
        self._follow(live.row.id)
        result = m.SessionResumeResult(
            session=self.sessions.wire_session(live.row),
            thinking=self.sessions.thinking_for(live.row),
            messages=messages,
            items=items,
            last_seq=self.bridge.last_seq(live.row.id),
            epoch=self.bridge.epoch,
        )
        # A long history is ~24 MB of JSON: encoded a few hundred messages at a time while the
        # answer is written, the client reads its start while the rest is encoded. The wire
        # structs were made above, so what goes out is the history as it stood here.
        return ResultInPieces(result, ("messages", "items"))

    async def session_subscribe(self, params: m.SessionSubscribeParams) -> AnswerThen:
        row = await self.sessions.row(params.session_id)
        # No await from here to the answer; the missed events follow it (``subscribe_then``).
        last_seq, replay = self.bridge.catchup(row.id, params.after_seq, params.epoch)
        result = m.SessionSubscribeResult(
            session=self.sessions.wire_session(row),
            thinking=self.sessions.thinking_for(row),
            last_seq=last_seq,
            epoch=self.bridge.epoch,
            replay=replay,
            pending_requests=self.bridge.pending_requests(row.id),
        )
        return AnswerThen(result, self.bridge.subscribe_then(self.peer, row.id, params.after_seq, last_seq, replay))

    async def session_unsubscribe(self, params: m.SessionIdParams) -> m.SessionUnsubscribeResult:
        await self.sessions.row(params.session_id)
        self.bridge.unfollow(self.peer, params.session_id)
        # A stdio client follows every session, whatever it unsubscribes from.
        return m.SessionUnsubscribeResult(subscribed=self.peer.follows(params.session_id))

    async def session_list(self, params: m.SessionListParams) -> m.SessionListResult:
        if not 1 <= params.limit <= 1000:
            raise InvalidParams("limit must be between 1 and 1000.", path="$.params.limit")
        rows, cursor = await self.daemon.list_sessions(params.cwd, params.limit, params.cursor)
        # Served without the session manager (``ponder sessions`` never loads it): live status only once built.
        listed = [
            SessionListRow(
                **msgspec.structs.asdict(self.daemon.wire_session(row)),
                loaded=self.daemon.is_loaded(row.id),
                subscribers=self.bridge.subscribers(row.id),
            )
            for row in rows
        ]
        return m.SessionListResult(sessions=listed, next_cursor=cursor)

    async def session_messages(self, params: m.SessionMessagesParams) -> m.SessionMessagesResult:
        from daemon.context.history import history_items  # with the session manager: off the start path

        await self.sessions.row(params.session_id)
        if params.limit is not None and params.limit < 1:
            raise InvalidParams("limit must be at least 1.", path="$.params.limit")
        messages = await self.daemon.store.get_messages(params.session_id, params.after_seq, params.limit)
        next_seq = messages[-1].seq if messages and params.limit is not None and len(messages) == params.limit else None
        # The compaction records of this page: after after_seq, up to its last message (to the end on the last page).
        after, until = params.after_seq, next_seq
        compactions = [
            stored.compaction
            for stored in await self.daemon.store.get_compactions(params.session_id)
            if (after is None or stored.compaction.seq > after) and (until is None or stored.compaction.seq <= until)
        ]
        wire = [message.to_wire() for message in messages]
        return m.SessionMessagesResult(messages=wire, next_seq=next_seq, items=history_items(wire, compactions))

    async def session_compact(self, params: m.SessionCompactParams) -> m.SessionCompactResult:
        await self._follow_existing(params.session_id)
        _turn_id, compaction_id, queued = await self.sessions.compact(params.session_id, params.instructions)
        return m.SessionCompactResult(compaction_id=compaction_id, queued=queued)

    async def session_prompt(self, params: m.SessionPromptParams) -> m.SessionPromptResult:
        from daemon.models.levels import parse_level  # with the session manager: off the start path

        if (params.text is None) == (params.content is None):
            raise InvalidParams("session/prompt needs exactly one of text and content.", path="$.params")
        if params.expected_turn_id is not None and params.delivery != "steer":
            raise InvalidParams('expected_turn_id goes only with delivery "steer".', path="$.params.expected_turn_id")
        if params.delivery == "steer" and params.thinking_level is not None:
            raise InvalidParams(
                "A steer runs with the running turn's thinking; send it without thinking_level.",
                path="$.params.thinking_level",
            )
        # Held from here (the schema check and the follow await): prompts to one session are
        # admitted in the order they arrived (``SessionManager.prompt`` holds it again).
        async with self.sessions.changes(params.session_id):
            output = await _output_request(params)
            await self._follow_existing(params.session_id)
            return await self.sessions.prompt(
                params.session_id,
                params.text,
                optional(parse_level, params.thinking_level, "$.params.thinking_level"),
                params.content,
                delivery=params.delivery,
                expected_turn_id=params.expected_turn_id,
                client_message_id=params.client_message_id,
                output=output,
                max_turns=params.max_turns,
            )

    async def session_continue(self, params: m.SessionIdParams) -> m.SessionContinueResult:
        await self._follow_existing(params.session_id)
        turn_id = await self.sessions.continue_turn(params.session_id)
        return m.SessionContinueResult(turn_id=turn_id, action="nothing_to_continue" if turn_id is None else "resumed")

    async def session_queue_remove(self, params: m.SessionQueueRemoveParams) -> m.SessionQueueRemoveResult:
        await self.sessions.remove_queued(params.session_id, params.message_id)
        return m.SessionQueueRemoveResult(removed=True)

    async def attachment_get(self, params: m.AttachmentGetParams) -> m.AttachmentGetResult:
        mime_type, data = await self.sessions.attachment(params.session_id, params.attachment_id)
        return m.AttachmentGetResult(
            attachment_id=params.attachment_id, mime_type=mime_type, data=base64.b64encode(data).decode("ascii")
        )

    async def session_cancel(self, params: m.SessionIdParams) -> m.SessionCancelResult:
        cancelled, dropped, steers = await self.sessions.cancel(params.session_id)
        return m.SessionCancelResult(
            cancelled=cancelled,
            dropped_queued=dropped,
            dropped_steers=[dropped_steer(s) for s in steers],
        )

    async def session_fork(self, params: m.SessionForkParams) -> m.SessionOnlyResult:
        row = await self.sessions.fork(params.session_id, params.message_id)
        self._follow(row.id)
        return m.SessionOnlyResult(session=self.sessions.wire_session(row))

    async def session_rename(self, params: m.SessionRenameParams) -> m.SessionOnlyResult:
        await self.sessions.row(params.session_id)
        row = await self.sessions.update(params.session_id, title=params.title)
        return m.SessionOnlyResult(session=self.sessions.wire_session(row))

    async def session_budget(self, params: m.SessionBudgetParams) -> m.SessionOnlyResult:
        from daemon.sessions.accounts import budget_from  # with the session manager: off the start path

        row = await self.sessions.set_budget(params.session_id, budget_from(params.budget))
        return m.SessionOnlyResult(session=self.sessions.wire_session(row))

    async def session_delete(self, params: m.SessionIdParams) -> m.SessionDeleteResult:
        await self.sessions.delete(params.session_id)
        return m.SessionDeleteResult(deleted=True)
