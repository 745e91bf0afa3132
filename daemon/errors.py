"""The one exception hierarchy of the daemon; each error knows its wire code and ``error.data``.

Handlers, the agent and the store raise these; ``daemon.jsonrpc.connection.as_wire_error`` turns them into
JSON-RPC errors in one place. The store raises only its own: ``StoreError`` (and
``StoreUnavailable``, ``StoreClosed``) when it fails, ``SessionNotFound``, and
``InvalidStoreRequest`` (``InvalidCursor``, ``InvalidLimit``, ``MessageNotInSession``) when a
caller asks for what cannot be. Messages are one sentence a person can act on and never contain a credential.
"""

from typing import Any

from protocol.errors import ErrorCode


class PonderError(Exception):
    code: ErrorCode = ErrorCode.INTERNAL_ERROR

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class ParseError(PonderError):
    code = ErrorCode.PARSE_ERROR


class InvalidRequest(PonderError):
    code = ErrorCode.INVALID_REQUEST


class MethodNotFound(PonderError):
    code = ErrorCode.METHOD_NOT_FOUND


class InvalidParams(PonderError):
    """``data`` is ``{errors: [{path, message}]}``, plus ``allowed`` for enumerations.

    The handlers (``server/``, ``acp/``) raise it with ``path``, a JSONPath into the request.
    Below them nothing knows the wire's parameter names: code there names the ``argument`` of
    its own call that is at fault (``cwd``, ``content[2]``, ``budget.max_cost``), and the
    handler layer that made the call places it on the wire where it maps errors (``place``).
    """

    code = ErrorCode.INVALID_PARAMS

    def __init__(
        self, message: str, *, path: str = "$", argument: str | None = None, allowed: list[str] | None = None
    ) -> None:
        data: dict[str, Any] = {"errors": [{"path": path, "message": message}]}
        if allowed is not None:
            data["allowed"] = allowed
        super().__init__(message, **data)
        self.argument = argument  # not placed yet: the path is still "$"

    def place(self, params_path: str) -> None:
        """Point the error at its argument under ``params_path`` (the JSONPath of the request's
        parameters); an error raised with a path of its own stays where it is."""
        if self.argument is not None:
            self.data["errors"][0]["path"] = f"{params_path}.{self.argument}"
            self.argument = None


class InvalidOutputSchema(InvalidParams):
    """An output schema that cannot be used: not a valid JSON Schema (its meta-schema's errors),
    a ``$ref`` outside it or in an endless cycle, too large. Each error's path is a JSONPath into
    the schema (``$`` its root) until ``place`` puts it under the argument that carried it."""

    def __init__(self, message: str, errors: list[dict[str, str]], *, argument: str = "output_schema") -> None:
        super().__init__(message, argument=argument)
        self.data["errors"] = errors or [{"path": "$", "message": message}]

    def place(self, params_path: str) -> None:
        if self.argument is not None:
            for error in self.data["errors"]:
                error["path"] = f"{params_path}.{self.argument}" + error["path"][1:]
            self.argument = None


class SchemaFailed(PonderError):
    """The turn's answer never matched its ``output_schema``, after every retry: the turn ends
    ``schema_failed`` with ``error.errors`` (``[{path, message}]``) from the last answer."""

    code = ErrorCode.INVALID_PARAMS

    def __init__(self, message: str, errors: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.errors = errors


class UnsupportedThinkingLevel(InvalidParams):
    """A level the model does not take, refused under the ``error`` fallback policy; ``allowed`` = its levels.
    ``argument``: what asked for that level (``level`` unless the caller knows better)."""

    def __init__(self, model_id: str, level: str, allowed: list[str], *, argument: str = "level") -> None:
        super().__init__(
            f"{model_id} does not take thinking level {level!r}; use one of {', '.join(allowed) or 'off'}.",
            argument=argument,
            allowed=allowed,
        )
        self.model_id = model_id
        self.level = level
        self.allowed = allowed


class ContentNotSupported(PonderError):
    """A prompt block the daemon or the session's model cannot take: ``data`` is
    ``{index, reason, model_id?, limit?}`` (PROTOCOL.md "Prompt content"); nothing was stored."""

    code = ErrorCode.CONTENT_NOT_SUPPORTED

    def __init__(self, message: str, *, index: int, reason: str, **extra: Any) -> None:
        super().__init__(message, index=index, reason=reason, **{k: v for k, v in extra.items() if v is not None})
        self.index = index
        self.reason = reason


class UnusableContent(PonderError):
    """What is wrong with one piece of content (an image's bytes, a file), before it is known
    which prompt block it was: admission turns it into ``ContentNotSupported`` for that block."""

    code = ErrorCode.CONTENT_NOT_SUPPORTED

    def __init__(self, why: str, *, reason: str, limit: int | None = None) -> None:
        super().__init__(why, reason=reason)
        self.why = why
        self.reason = reason
        self.limit = limit


class UnknownAttachment(PonderError):
    """``attachment/get`` for an id that no message of the session names: ``data`` ``{reason}``."""

    code = ErrorCode.INVALID_PARAMS

    def __init__(self, session_id: str, attachment_id: str) -> None:
        super().__init__(
            f"Session {session_id!r} has no attachment {attachment_id!r}; "
            "use an attachment_id from one of its image blocks.",
            reason="unknown_attachment",
        )


class InternalError(PonderError):
    code = ErrorCode.INTERNAL_ERROR


class SessionNotFound(PonderError):
    code = ErrorCode.SESSION_NOT_FOUND

    def __init__(self, session_id: str) -> None:
        super().__init__(f"No session with id {session_id!r}; list sessions with session/list.", session_id=session_id)


class ModelNotFound(PonderError):
    code = ErrorCode.MODEL_NOT_FOUND

    def __init__(self, model_id: str, suggestions: list[str], hint: str | None = None) -> None:
        message = f"Unknown model {model_id!r}."
        if hint:
            message = f"{message[:-1]}: {hint}"
        elif suggestions:
            message += f" Did you mean {', '.join(suggestions[:3])}?"
        else:
            message += " See models/list for the models ponder knows."
        super().__init__(message, model_id=model_id, suggestions=suggestions)


class ProviderNotConfigured(PonderError):
    code = ErrorCode.PROVIDER_NOT_CONFIGURED

    def __init__(self, provider: str, hint: str) -> None:
        super().__init__(f"Provider {provider!r} has no credentials: {hint}", provider=provider, hint=hint)


class StateConflict(PonderError):
    """Params that are well formed but conflict with the state they act on (``-32602`` with
    ``data: {reason}``): ``already_delivered``, ``unknown_message_id``, ``client_message_id_reused``."""

    code = ErrorCode.INVALID_PARAMS

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, reason=reason)
        self.reason = reason


class SessionBusy(PonderError):
    """``reason``: ``queue_full`` (the waiting input is full, or another ponder process runs a turn
    in it) or ``turn_running`` (``session/continue`` while a turn runs)."""

    code = ErrorCode.SESSION_BUSY

    def __init__(self, session_id: str, why: str = "its queue is full", reason: str = "queue_full") -> None:
        super().__init__(
            f"Session {session_id!r} is busy: {why}; wait or cancel it.", session_id=session_id, reason=reason
        )


class TurnNotActive(PonderError):
    """A steer that names a turn which is not running, or a turn that cannot be steered (``-32007``)."""

    code = ErrorCode.TURN_NOT_ACTIVE

    def __init__(self, message: str, *, active_turn_id: str | None, reason: str) -> None:
        super().__init__(message, active_turn_id=active_turn_id, reason=reason)


class ShuttingDown(PonderError):
    code = ErrorCode.SHUTTING_DOWN

    def __init__(self) -> None:
        super().__init__("The daemon is shutting down.")


class Forbidden(PonderError):
    """An observer connection called a method that changes something (``-32008``)."""

    code = ErrorCode.FORBIDDEN

    def __init__(self, method: str) -> None:
        super().__init__(
            f"{method} is not allowed on an observer connection; initialize with role controller to call it.",
            reason="observer",
        )


class ListenRefused(PonderError):
    """``ponder serve --listen`` cannot listen as asked (a socket path a daemon answers on, a
    WebSocket address off loopback without ``--allow-remote``...): a usage error, exit 2, nothing
    listens. Never on the wire."""

    code = ErrorCode.INVALID_PARAMS


class SandboxUnavailable(PonderError):
    """``[sandbox] required = true`` and no sandbox works here: no session is created (-32009)."""

    code = ErrorCode.SANDBOX_UNAVAILABLE

    def __init__(self, mechanism: str | None, reason: str, hint: str) -> None:
        super().__init__(
            f"No OS sandbox works here and config.toml requires one ([sandbox] required = true): {reason} {hint}",
            mechanism=mechanism,
            reason=reason,
            hint=hint,
        )


class RequestCancelled(PonderError):
    code = ErrorCode.REQUEST_CANCELLED

    def __init__(self) -> None:
        super().__init__("The request was cancelled.")


class BudgetExceeded(PonderError):
    """The session's budget is spent: its turn ends with ``stop_reason: "budget"`` before the next
    model call; the message names the budget and the amount spent (``context.budget.budget_exceeded``)."""

    code = ErrorCode.BUDGET_EXCEEDED


class HookDenied(PonderError):
    """A ``user_prompt_submit`` hook refused the prompt; its turn ends ``error`` with the hook's reason."""

    code = ErrorCode.INVALID_PARAMS


class ProviderError(PonderError):
    """A provider failed: HTTP status, an error event mid-stream, or a broken stream.

    ``retryable`` errors raised before any output was emitted are retried by the agent,
    honouring ``retry_after`` (seconds) when the provider sent one.
    """

    code = ErrorCode.INTERNAL_ERROR

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message, provider=provider)
        self.provider = provider
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.kind = kind  # the provider's own error type, e.g. "overloaded_error"


class ContextOverflow(ProviderError):
    """The request did not fit the model's context window and compaction could not make it fit:
    automatic compaction is off, or the retry after compacting (and shortening what was too big)
    overflowed too. ``advice``: what to do, when more is known than "compact the session"."""

    def __init__(self, cause: ProviderError, *, compacted: bool, advice: str | None = None) -> None:
        if compacted:
            what = "still does not fit the model's context window after compacting it"
        else:
            what = "does not fit the model's context window and was not compacted"
        detail = cause.message.rstrip(".")
        todo = advice or (
            "Compact the session (session/compact, or /compact in an editor; with instructions to keep less) "
            "and send the prompt again."
        )
        super().__init__(
            f"The conversation {what} ({detail}). {todo}",
            provider=cause.provider,
            status=cause.status,
            kind=cause.kind,
        )


class ThinkingLevelRejected(ProviderError):
    """A provider refused the thinking level it was sent (HTTP 400), naming what it takes where it does.

    ``rejected`` is the ponder level that was refused (None when the error does not say);
    ``allowed`` the ponder levels the provider named (None when it named none, as Gemini's
    generateContent does). Not retryable as is: the agent retries once with
    ``daemon.models.levels.nearest_allowed`` and records the answer in ``LearnedLevels``.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = 400,
        kind: str | None = None,
        rejected: str | None = None,
        allowed: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(message, provider=provider, status=status, retryable=False, kind=kind)
        self.rejected = rejected
        self.allowed = allowed


class ProviderAuthError(ProviderError):
    """401/403 from a provider: the credentials are missing, wrong or expired."""

    code = ErrorCode.PROVIDER_NOT_CONFIGURED


class ProviderModelNotFound(ProviderError):
    """The provider does not serve this model (HTTP 404, Ollama's "model not found")."""

    code = ErrorCode.MODEL_NOT_FOUND


class StoreError(InternalError):
    """The session store failed or refused a write (a bug or a broken file, never user input)."""


class StoreClosed(ShuttingDown):
    """The store was closed, which happens only on the way out."""


class InvalidStoreRequest(PonderError):
    """A store call asked for what cannot be (a cursor the store never gave, a limit below its
    bound, a message of another session): the caller's mistake, not the store's.

    ``argument`` names the store call's argument at fault; ``daemon.jsonrpc.connection.as_wire_error`` answers it
    as ``InvalidParams`` at ``$.<argument>``.
    """

    code = ErrorCode.INVALID_PARAMS

    def __init__(self, message: str, *, argument: str) -> None:
        super().__init__(message)
        self.argument = argument


class InvalidCursor(InvalidStoreRequest):
    """A session-list cursor that is not one the store returned."""

    def __init__(self) -> None:
        super().__init__("The cursor is not one session/list returned.", argument="cursor")


class InvalidLimit(InvalidStoreRequest):
    """A page size out of range (``message`` says the bound)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, argument="limit")


class MessageNotInSession(InvalidStoreRequest):
    """A message id that is not in the session named with it."""

    def __init__(self, message_id: str, session_id: str) -> None:
        super().__init__(f"Message {message_id!r} is not in session {session_id!r}.", argument="message_id")
        self.message_id = message_id
        self.session_id = session_id


class StoreUnavailable(StoreError):
    """The session store cannot be used, for now or for good: a full disk, a write lock held too long
    by another process, a read-only or damaged file, a schema from a newer ponder. The message is one
    sentence naming the cause, never raw bytes from the file."""


class LeaseLost(StoreError):
    """A write of a turn refused by its fence: another daemon took the session's turn lease over
    (this daemon's lease expired, or its store connection was gone), so this one may not write
    the session until it takes the lease again."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"Another daemon took session {session_id!r} over; this daemon's turn in it stopped and "
            "wrote nothing more (prompt again to continue there).",
            session_id=session_id,
        )


class ReplyNotSaved(StoreUnavailable):
    """A turn's messages could not be written; the session keeps them and saves them later."""

    def __init__(self, cause: str) -> None:
        super().__init__(
            f"{cause} The reply was not saved yet: ponder keeps it in memory and saves it when the store "
            "can be written again (it is lost if ponder exits first)."
        )
