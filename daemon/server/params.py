"""Where the ponder protocol's parameter names meet the layers below: a method's params are
parsed into the protocol's types here (``optional``), and an ``InvalidParams`` that names an
argument of a call below (``InvalidParams.argument``) is placed under ``$.params`` here, in
one place for every method (``placing_errors``).

The session manager and the rest of the daemon speak of their own arguments (``cwd``,
``content[2]``); the methods pass them under the same names as their params, so the argument
is the param.
"""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from daemon.errors import InvalidParams

PARAMS = "$.params"

T = TypeVar("T")


def optional(parse: Callable[[str, str], T], value: str | None, path: str) -> T | None:
    """``value`` parsed (its error pointing at ``path``), or None when the param was left out."""
    return None if value is None else parse(value, path)


def placing_errors(handler: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    """``handler``, its refusals pointing into the request's params."""

    async def handle(params: Any) -> Any:
        try:
            return await handler(params)
        except InvalidParams as exc:
            exc.place(PARAMS)
            raise

    return handle
