"""config.toml [compaction] and [budget]: defaults, values, and clear problems for bad ones."""

import textwrap
from pathlib import Path

import pytest

from daemon.config.settings import CompactionSettings, Config, load_config
from protocol.objects import Budget


def config_from(tmp_path: Path, toml: str) -> Config:
    (tmp_path / "config.toml").write_text(textwrap.dedent(toml), encoding="utf-8")
    return load_config(tmp_path, env={})


def test_defaults_without_sections(tmp_path: Path) -> None:
    config = config_from(tmp_path, "")
    assert config.compaction == CompactionSettings(auto=True, reserve_tokens=20_000, keep_recent_tokens=20_000)
    assert config.budget is None
    assert config.problems == []


def test_values_are_read(tmp_path: Path) -> None:
    config = config_from(
        tmp_path,
        """
        [compaction]
        auto = false
        reserve_tokens = 4000
        keep_recent_tokens = 0
        model = "anthropic/claude-haiku-4-5"
        thinking_level = "med"

        [budget]
        max_cost = 2
        max_tokens = 500000
        """,
    )
    assert config.compaction == CompactionSettings(
        auto=False, reserve_tokens=4000, keep_recent_tokens=0, model="anthropic/claude-haiku-4-5",
        thinking_level="medium",
    )  # fmt: skip
    assert config.budget == Budget(max_cost=2.0, max_tokens=500_000)
    assert config.problems == []


def test_budget_with_one_limit(tmp_path: Path) -> None:
    assert config_from(tmp_path, "[budget]\nmax_cost = 0.5\n").budget == Budget(max_cost=0.5)


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ('[compaction]\nauto = "yes"\n', "[compaction] auto must be true or false, not 'yes'; using true."),
        ("[compaction]\nreserve_tokens = -5\n", "[compaction] reserve_tokens must be a whole number of at least 0"),
        ('[compaction]\nkeep_recent_tokens = "lots"\n', "[compaction] keep_recent_tokens must be a whole number"),
        ('[compaction]\nthinking_level = "extreme"\n', "Unknown thinking level 'extreme'"),
        ("[compaction]\nmodel = 3\n", "[compaction] model must be a model id, not 3"),
        ("compaction = 3\n", "[compaction] must be a table"),
    ],
)
def test_bad_compaction_values_are_problems_and_fall_back(tmp_path: Path, toml: str, says: str) -> None:
    config = config_from(tmp_path, toml)
    assert config.compaction == CompactionSettings()
    assert any(says in problem for problem in config.problems), config.problems


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        (
            "[budget]\nmax_cost = -1\n",
            "[budget] max_cost must be an amount in USD of at least 0, not -1; no cost budget.",
        ),
        ('[budget]\nmax_cost = "$5"\n', "[budget] max_cost must be an amount in USD"),
        ("[budget]\nmax_tokens = 1.5\n", "[budget] max_tokens must be a whole number of tokens of at least 1"),
        ("[budget]\nmax_tokens = 0\n", "[budget] max_tokens must be a whole number"),
        ("[budget]\nmax_tokens = true\n", "[budget] max_tokens must be a whole number"),
    ],
)
def test_bad_budget_values_are_problems_and_leave_that_limit_unset(tmp_path: Path, toml: str, says: str) -> None:
    config = config_from(tmp_path, toml)
    assert config.budget is None
    assert any(says in problem for problem in config.problems), config.problems


def test_one_bad_budget_limit_keeps_the_other(tmp_path: Path) -> None:
    config = config_from(tmp_path, "[budget]\nmax_cost = -1\nmax_tokens = 1000\n")
    assert config.budget == Budget(max_tokens=1000)
    assert len(config.problems) == 1
