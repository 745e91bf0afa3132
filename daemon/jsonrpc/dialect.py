"""Which dialect a connection to a listening daemon speaks: the ponder protocol unless its first
message is ``{"jsonrpc": "2.0", "method": "$/dialect", "params": {"name": NAME}}`` (a
notification, not answered). ``ponder acp --attach`` sends ``acp`` first, then relays the editor's
bytes as they are; the daemon serves that connection in ACP on the shared core."""

import msgspec

DIALECT_METHOD = "$/dialect"
DIALECTS = ("ponder", "acp")


class _Dialect(msgspec.Struct):
    name: str


class _Choice(msgspec.Struct):
    jsonrpc: str
    method: str
    params: _Dialect


def dialect_line(name: str) -> bytes:
    """The first message (without its newline) that selects dialect ``name``."""
    return msgspec.json.encode(_Choice("2.0", DIALECT_METHOD, _Dialect(name)))


def chosen_dialect(message: bytes) -> str | None:
    """The dialect a first message selects; None when it is not a ``$/dialect`` notification
    (then it is the first message of a ponder-dialect client)."""
    if DIALECT_METHOD.encode() not in message:
        return None
    try:
        choice = msgspec.json.decode(message, type=_Choice)
    except msgspec.DecodeError:
        return None
    return choice.params.name if choice.method == DIALECT_METHOD else None
