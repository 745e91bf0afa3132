"""config.toml read as typed msgspec Structs, one per section (``daemon.config.sections``).

For every key of every section: a value of the wrong type is exactly one problem that names the
file, the line, the section and the key, says what the key must be, and the key keeps its default
while the section's other keys still apply.
"""

from pathlib import Path

import msgspec
import pytest

from daemon.config.sections import (
    BudgetSection,
    CompactionSection,
    DefaultsSection,
    ProviderSection,
    ReliabilitySection,
    SandboxSection,
    Section,
    StoreSection,
    ToolsSection,
    read_section,
)
from daemon.config.settings import load_config

SECTIONS: list[tuple[str, type[Section]]] = [
    ("defaults", DefaultsSection),
    ("reliability", ReliabilitySection),
    ("tools", ToolsSection),
    ("compaction", CompactionSection),
    ("budget", BudgetSection),
    ("sandbox", SandboxSection),
    ("store", StoreSection),
    ("providers.local", ProviderSection),
]
# A value no key of any section takes: a table holding a list of numbers.
NOTHING_TAKES = "{ x = [1] }"
# A good value for one key of each section, to check that the rest of the section still applies.
KEPT = {
    "defaults": ("max_queued_prompts = 7", lambda c: c.max_queued_prompts == 7),
    "reliability": ("max_attempts = 9", lambda c: c.retry_max_attempts == 9),
    "tools": ("scan_time_limit_s = 5", lambda c: c.scan_time_limit_s == 5.0),
    "compaction": ("reserve_tokens = 1234", lambda c: c.compaction.reserve_tokens == 1234),
    "budget": ("max_tokens = 777", lambda c: c.budget is not None and c.budget.max_tokens == 777),
    "sandbox": ("network = true", lambda c: c.sandbox.network is True),
    "store": ('pooler = "Transaction"', lambda c: c.store_pooler == "transaction"),
    "providers.local": (
        'base_url = "http://127.0.0.1:9/v1"',
        lambda c: c.providers["local"].base_url.endswith(":9/v1"),
    ),
}


def cases() -> list[tuple[str, str]]:
    return [(name, field) for name, kind in SECTIONS for field in kind.__struct_fields__]


@pytest.mark.parametrize(("section", "key"), cases())
def test_a_wrong_type_in_any_key_is_one_sentence_and_the_rest_applies(tmp_path: Path, section: str, key: str) -> None:
    other, applied = KEPT[section]
    if other.split(" ")[0] == key:  # the key under test is the kept one: keep another
        other, applied = ("", lambda c: True)
    own_provider = section == "providers.local" and key != "api"
    head = '[providers.local]\napi = "openai-chat"\n' if own_provider else f"[{section}]\n"
    lines = head.count("\n") + 1
    (tmp_path / "config.toml").write_text(f"{head}{key} = {NOTHING_TAKES}\n{other}\n")
    config = load_config(tmp_path, env={})
    mine = [p for p in config.problems if f"[{section}]" in p and "unknown api" not in p]
    assert len(mine) == 1, config.problems
    [problem] = mine
    assert problem.startswith(f"config.toml line {lines}: [{section}] {key} "), problem
    assert "must be" in problem or "is not one of" in problem, problem
    assert problem.endswith(".") and problem.replace("e.g. ", "").count(". ") == 0, problem  # one sentence
    assert applied(config), (section, other)


@pytest.mark.parametrize(("name", "kind"), SECTIONS)
def test_a_section_that_is_not_a_table_gives_its_defaults(name: str, kind: type[Section]) -> None:
    problems: list[str] = []
    assert read_section(["not", "a", "table"], name, kind, problems) == kind()
    assert problems == [f"config.toml: [{name}] must be a table, not ['not', 'a', 'table']; using the defaults."]


def test_every_bad_key_of_one_section_is_reported_and_each_keeps_its_default() -> None:
    problems: list[str] = []
    table = {
        "max_attempts": float("nan"),
        "stall_timeout_s": float("inf"),
        "max_event_bytes": 10,
        "max_response_bytes": 4096,
    }
    read = read_section(table, "reliability", ReliabilitySection, problems)
    assert read == ReliabilitySection(max_response_bytes=4096)
    assert [p.split(" must be ")[0] for p in problems] == [
        "config.toml: [reliability] max_attempts",
        "config.toml: [reliability] stall_timeout_s",
        "config.toml: [reliability] max_event_bytes",
    ]
    assert "a number of at least 0.1, not inf; using 90." in problems[1]


def test_sections_are_structs_checked_by_msgspec() -> None:
    for _, kind in SECTIONS:
        assert issubclass(kind, msgspec.Struct)
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({next(iter(kind.__struct_fields__)): {"x": [1]}}, kind)


def test_the_store_pooler_and_listen_url_from_the_file_and_the_environment_which_wins(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[store]\nurl = "postgresql://u@bouncer:6432/d"\npooler = "session"\nlisten_url = "postgresql://u:pw-in-listen-url@db/d"\n'
    )
    config = load_config(tmp_path, env={})
    assert (config.store_pooler, config.store_listen_url, config.problems) == (
        "session",
        "postgresql://u:pw-in-listen-url@db/d",
        [],
    )
    from daemon.util import redact

    assert "pw-in-listen-url" not in redact.scrub("a log line: postgresql://u:pw-in-listen-url@db/d")
    config = load_config(
        tmp_path, env={"PONDER_STORE_POOLER": "transaction", "PONDER_STORE_LISTEN_URL": "postgresql://u@db2/d"}
    )
    assert (config.store_pooler, config.store_listen_url) == ("transaction", "postgresql://u@db2/d")
    config = load_config(tmp_path, env={"PONDER_STORE_POOLER": "none"})
    assert config.store_pooler is None and config.problems == []
    config = load_config(tmp_path, env={"PONDER_STORE_POOLER": "statement"})
    assert config.store_pooler is None
    assert config.problems == [
        "PONDER_STORE_POOLER = 'statement' is not one of none, transaction, session; using none."
    ]
