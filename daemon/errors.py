"""The one exception hierarchy of the daemon; each error knows its wire code and ``error.data``.

Handlers and the agent raise these; ``daemon.rpc`` turns them into JSON-RPC errors in one
place. Messages are one sentence a person can act on and never contain a credential.
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
    """``data`` is ``{errors: [{path, message}]}``, plus ``allowed`` for enumerations."""

    code = ErrorCode.INVALID_PARAMS

    def __init__(self, message: str, *, path: str = "$", allowed: list[str] | None = None) -> None:
        data: dict[str, Any] = {"errors": [{"path": path, "message": message}]}
        if allowed is not None:
            data["allowed"] = allowed
        super().__init__(message, **data)


class InvalidCursor(PonderError):
    """A ``session/list`` cursor the store did not hand out (raised by the store; handlers say
    which parameter it came from)."""

    code = ErrorCode.INVALID_PARAMS


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


class SessionBusy(PonderError):
    code = ErrorCode.SESSION_BUSY

    def __init__(self, session_id: str, why: str = "its prompt queue is full") -> None:
        super().__init__(f"Session {session_id!r} is busy: {why}; wait or cancel it.", session_id=session_id)


class ShuttingDown(PonderError):
    code = ErrorCode.SHUTTING_DOWN

    def __init__(self) -> None:
        super().__init__("The daemon is shutting down.")


class RequestCancelled(PonderError):
    code = ErrorCode.REQUEST_CANCELLED

    def __init__(self) -> None:
        super().__init__("The request was cancelled.")


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


class ProviderAuthError(ProviderError):
    """401/403 from a provider: the credentials are missing, wrong or expired."""

    code = ErrorCode.PROVIDER_NOT_CONFIGURED


class ProviderModelNotFound(ProviderError):
    """The provider does not serve this model (HTTP 404, Ollama's "model not found")."""

    code = ErrorCode.MODEL_NOT_FOUND


class StoreError(InternalError):
    """The session store failed or refused a write (a bug or a broken file, never user input)."""


class StoreUnavailable(StoreError):
    """The session store cannot be used, for now or for good: a full disk, a write lock held too long
    by another process, a read-only or damaged file, a schema from a newer ponder. The message is one
    sentence naming the cause, never raw bytes from the file."""


class ReplyNotSaved(StoreUnavailable):
    """A turn's messages could not be written; the session keeps them and saves them later."""

    def __init__(self, cause: str) -> None:
        super().__init__(
            f"{cause} The reply was not saved yet: ponder keeps it in memory and saves it when the store "
            "can be written again (it is lost if ponder exits first)."
        )
