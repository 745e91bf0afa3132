"""The ``/budget`` command's words (``daemon.acp.budget``), pure."""

import pytest

from daemon.acp.budget import budget_command, merged
from daemon.errors import InvalidParams
from protocol.objects import Budget


@pytest.mark.parametrize(
    ("line", "shown", "cleared", "cost", "tokens"),
    [
        ("/budget", True, False, None, None),
        ("  /budget  ", True, False, None, None),
        ("/budget off", False, True, None, None),
        ("/Budget None", False, True, None, None),
        ("/budget $5", False, False, 5.0, None),
        ("/budget 2.50 usd", False, False, 2.5, None),
        ("/budget 3$", False, False, 3.0, None),
        ("/budget 200k tokens", False, False, None, 200_000),
        ("/budget 1,500,000 tokens", False, False, None, 1_500_000),
        ("/budget $1.5 2m tokens", False, False, 1.5, 2_000_000),
    ],
)
def test_budget_lines(line: str, shown: bool, cleared: bool, cost: float | None, tokens: int | None) -> None:
    command = budget_command(line)
    assert command is not None
    assert (command.show, command.clear, command.max_cost, command.max_tokens) == (shown, cleared, cost, tokens)


@pytest.mark.parametrize("line", ["hello", "/budgets", "please /budget $5", "/compact"])
def test_other_prompts_are_not_the_command(line: str) -> None:
    assert budget_command(line) is None


@pytest.mark.parametrize("line", ["/budget 5", "/budget lots", "/budget $", "/budget 5 tokens extra", "/budget off $5"])
def test_lines_that_say_nothing_usable_are_refused_with_the_usage(line: str) -> None:
    with pytest.raises(InvalidParams, match="Use /budget to see the budget"):
        budget_command(line)


def test_setting_one_limit_keeps_the_other() -> None:
    current = Budget(max_cost=2.0, max_tokens=1000)
    raised = budget_command("/budget 5000 tokens")
    assert raised is not None and merged(raised, current) == Budget(max_cost=2.0, max_tokens=5000)
    cleared = budget_command("/budget off")
    assert cleared is not None and merged(cleared, current) is None
