"""``Secret``: a credential the daemon holds. Its repr and str never show the value, and
every one is remembered by ``daemon.util.redact`` so that it is masked wherever text leaves us."""

from daemon.util import redact

__all__ = ["Secret"]


class Secret:
    """A credential. Its repr and str never show the value; ``reveal()`` does, for headers only."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        redact.remember(value)  # a credential we hold is masked wherever text leaves us

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)
