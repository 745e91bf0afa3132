"""A session's budget in ACP: the ``/budget`` command and what ``_ponder/session/budget`` answers.

ACP has no budget of its own, so an editor raises a spent budget (or sets, lowers or clears one)
either with the extension method ``_ponder/session/budget {sessionId, budget?: {maxCost?,
maxTokens?} | null}`` (the same as ponder's ``session/budget``: the budget given replaces the
session's; ``null`` clears it; without ``budget`` it is only read), or with a prompt that is the
command ``/budget``:

- ``/budget``: says the budget in force and what the session has spent;
- ``/budget $5`` (or ``5 usd``), ``/budget 200k tokens`` (``k``/``m``: thousands/millions), or
  both in one line: sets those limits and keeps the other one as it is;
- ``/budget off``: no budget at all (whatever config.toml's ``[budget]`` says).

A budget set either way is the session's own from then on; until then a session follows
config.toml's ``[budget]``.
"""

import re

from daemon.context.budget import tokens_spent
from daemon.errors import InvalidParams
from daemon.store import SessionRow
from protocol.objects import Budget

__all__ = ["BUDGET_USAGE", "BudgetCommand", "budget_command", "budget_sentence", "merged"]

_BUDGET = re.compile(r"^\s*/budget(?:\s+(.*?))?\s*$", re.DOTALL | re.IGNORECASE)
_COST = re.compile(r"^(?:\$(\d+(?:\.\d+)?)|(\d+(?:\.\d+)?)(?:\$|usd))$")
_NUMBER = re.compile(r"^(\d+(?:\.\d+)?)([km]?)$")
_SCALE = {"": 1, "k": 1_000, "m": 1_000_000}
_TOKEN_WORDS = ("tokens", "token", "tok")
_OFF_WORDS = ("off", "none", "clear", "unlimited")
BUDGET_USAGE = (
    "Use /budget to see the budget, /budget $5 for a cost budget, /budget 200k tokens for a token budget "
    "(both in one line if you like), or /budget off for none."
)


class BudgetCommand:
    """A parsed ``/budget``: ``show`` only, ``clear``, or the limits to set (None: keep that one)."""

    def __init__(
        self, *, show: bool = False, clear: bool = False, max_cost: float | None = None, max_tokens: int | None = None
    ) -> None:
        self.show, self.clear, self.max_cost, self.max_tokens = show, clear, max_cost, max_tokens


def budget_command(text: str) -> BudgetCommand | None:
    """The ``/budget`` command ``text`` is, None for any other prompt; ``InvalidParams`` (with
    ``BUDGET_USAGE``) for a ``/budget`` line that says nothing ponder understands."""
    match = _BUDGET.match(text)
    if match is None:
        return None
    words = (match.group(1) or "").lower().replace(",", "").replace("_", "").split()
    if not words:
        return BudgetCommand(show=True)
    if len(words) == 1 and words[0] in _OFF_WORDS:
        return BudgetCommand(clear=True)
    command = BudgetCommand()
    index = 0
    while index < len(words):
        word, following = words[index], words[index + 1] if index + 1 < len(words) else ""
        cost = _COST.match(word)
        number = _NUMBER.match(word)
        if cost is not None:
            command.max_cost = float(cost.group(1) or cost.group(2))
        elif number is not None and following in ("usd", "$", "dollars"):
            command.max_cost, index = float(number.group(1)), index + 1
        elif number is not None and following in _TOKEN_WORDS:
            command.max_tokens, index = int(float(number.group(1)) * _SCALE[number.group(2)]), index + 1
        else:
            raise InvalidParams(f"/budget does not understand {word!r}. {BUDGET_USAGE}", path="$.params.prompt")
        index += 1
    return command


def merged(command: BudgetCommand, current: Budget | None) -> Budget | None:
    """The budget ``command`` sets on a session whose budget in force is ``current``."""
    if command.clear:
        return None
    return Budget(
        max_cost=command.max_cost if command.max_cost is not None else (current.max_cost if current else None),
        max_tokens=command.max_tokens if command.max_tokens is not None else (current.max_tokens if current else None),
    )


def budget_sentence(row: SessionRow, budget: Budget | None) -> str:
    """What ``/budget`` answers: the budget in force (and whose it is) and what the session spent."""
    spent = f"{tokens_spent(row.totals):,} tokens" + (f" and ${row.cost.amount:,.4f}" if row.cost else "")
    if budget is None or (budget.max_cost is None and budget.max_tokens is None):
        return f"This session has no budget; it has used {spent}. {BUDGET_USAGE}"
    limits = [f"${budget.max_cost:,.2f}" if budget.max_cost is not None else None]
    limits.append(f"{budget.max_tokens:,} tokens" if budget.max_tokens is not None else None)
    whose = "its own" if row.budget_own else "config.toml's [budget]"
    return f"This session's budget is {' and '.join(x for x in limits if x)} ({whose}); it has used {spent}."
