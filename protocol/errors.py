"""JSON-RPC error codes of the ponder protocol (PROTOCOL.md, "Errors")."""

import enum


class ErrorCode(enum.IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    SESSION_NOT_FOUND = -32001
    MODEL_NOT_FOUND = -32002
    PROVIDER_NOT_CONFIGURED = -32003
    SESSION_BUSY = -32004
    SHUTTING_DOWN = -32005
    # A prompt block the daemon or the session's model cannot take (PROTOCOL.md "Prompt content").
    CONTENT_NOT_SUPPORTED = -32006
    # A steer naming a turn that is not running, or a turn that cannot be steered.
    TURN_NOT_ACTIVE = -32007
    # An observer called a method not on its list (PROTOCOL.md "Transports and several clients").
    FORBIDDEN = -32008
    SANDBOX_UNAVAILABLE = -32009
    # Only in turn_end.error of a turn that ended ``stop_reason: "budget"``: it never answers a request.
    # A number of its own (not content_not_supported's -32006, nor -32010, which NEXT.md keeps for
    # checkpoint_conflict), so a client that reads the code alone cannot mistake a spent budget.
    BUDGET_EXCEEDED = -32011
    REQUEST_CANCELLED = -32800
