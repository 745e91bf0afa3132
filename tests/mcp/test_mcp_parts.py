"""The MCP pieces that need no running server: specs, names, schemas, results, and ``ponder mcp``."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from daemon.mcp.client import StderrTail
from daemon.mcp.spec import ServerSpec, parse_acp_server, parse_config_server, server_env
from daemon.mcp.tools import McpTool, provider_schema, qualified_name, render_result
from daemon.tools import ToolError, builtin_tools, parse_arguments
from daemon.tools.approval import denial_message
from daemon.tools.base import MCP_TOOL_PREFIX
from tests.support.harness import subprocess_env

SERVERS = Path(__file__).resolve().parents[1] / "support" / "mcp_servers"


# --- names ------------------------------------------------------------------------------


def test_qualified_names_are_namespaced_safe_and_bounded():
    assert qualified_name("docs", "search") == "mcp__docs__search"
    assert qualified_name("my docs", "get.page/v2") == "mcp__my_docs__get_page_v2"
    long_a, long_b = qualified_name("s", "x" * 80 + "a"), qualified_name("s", "x" * 80 + "b")
    assert len(long_a) == 64 and long_a != long_b and long_a.startswith("mcp__s__xxx")


# --- specs ------------------------------------------------------------------------------


def test_config_spec_defaults_and_coercion():
    spec = parse_config_server(
        "docs", {"command": "npx", "args": ["-y", "pkg", 3], "env": {"B": 1, "A": True}, "cwd": "~/x"}
    )
    assert isinstance(spec, ServerSpec)
    assert spec.args == ("-y", "pkg", "3") and spec.env == (("A", "true"), ("B", "1"))
    assert spec.cwd == str(Path("~/x").expanduser()) and (spec.timeout_s, spec.startup_timeout_s, spec.enabled) == (
        60,
        30,
        True,
    )
    assert "B" not in repr(spec), "env values may be secrets"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({}, "needs command"),
        ({"command": ""}, "needs command"),
        ({"url": "https://x/mcp"}, "stdio MCP servers only"),
        ({"command": "x", "args": "a b"}, "args must be a list"),
        ({"command": "x", "env": ["A=1"]}, "env must be a table"),
        ({"command": "x", "timeout_s": 0}, "timeout_s must be a positive"),
        ({"command": "x", "startup_timeout_s": True}, "startup_timeout_s must be a positive"),
        ({"command": "x", "enabled": "yes"}, "enabled must be true or false"),
        ("npx", "must be a table"),
    ],
)
def test_config_spec_problems(raw, problem):
    result = parse_config_server("docs", raw)
    assert isinstance(result, str) and problem in result and "[mcp_servers.docs]" in result


def test_acp_entries():
    entry = {"name": "fs", "command": "/bin/fs", "args": ["--ro"], "env": [{"name": "TOKEN", "value": "t"}]}
    spec = parse_acp_server(entry, "/work")
    assert spec == ServerSpec(name="fs", command="/bin/fs", args=("--ro",), env=(("TOKEN", "t"),), cwd="/work")

    assert parse_acp_server({"type": "http", "name": "web", "url": "http://x", "headers": []}) is None
    assert "has no command" in parse_acp_server({"name": "x", "args": [], "env": []})  # type: ignore[operator]
    assert "env entries" in parse_acp_server({"name": "x", "command": "c", "env": [{"name": "A"}]})  # type: ignore[operator]


def test_server_env_keeps_our_credentials_away():
    spec = ServerSpec(name="x", command="c", env=(("DOCS_TOKEN", "secret"), ("PATH", "/custom")))
    env = server_env(
        spec, {"PATH": "/usr/bin", "HOME": "/home/me", "ANTHROPIC_API_KEY": "sk-ant", "OPENAI_API_KEY": "sk"}
    )
    assert env == {"PATH": "/custom", "HOME": "/home/me", "DOCS_TOKEN": "secret"}


# --- tools ------------------------------------------------------------------------------


def make_tool(trusted=True, **fields):
    handle = SimpleNamespace(spec=ServerSpec(name="docs", command="c", trusted=trusted))
    return McpTool(handle, {"name": "search", **fields})  # type: ignore[arg-type]


def test_tool_approval_follows_read_only_hint_of_trusted_servers_only():
    assert make_tool(annotations={"readOnlyHint": True}).mutating is False
    assert make_tool().mutating is True
    assert make_tool(annotations={"readOnlyHint": "true"}).mutating is True  # only a real true counts
    assert make_tool(annotations={"readOnlyHint": False, "destructiveHint": False}).mutating is True
    # A server nobody vouched for is not taken at its word.
    assert make_tool(trusted=False, annotations={"readOnlyHint": True}).mutating is True


def test_trusted_comes_from_config_only():
    assert parse_config_server("docs", {"command": "c", "trusted": True}).trusted is True  # type: ignore[union-attr]
    assert parse_config_server("docs", {"command": "c"}).trusted is False  # type: ignore[union-attr]
    bad = parse_config_server("docs", {"command": "c", "trusted": "yes"})
    assert bad == "[mcp_servers.docs] trusted must be true or false."
    acp = parse_acp_server({"name": "docs", "command": "c", "trusted": True})
    assert acp.trusted is False  # type: ignore[union-attr]


def test_read_only_denial_of_an_mcp_tool_says_how_to_allow_it():
    message = denial_message("read_only", "mcp__docs__search")
    assert "approval policy is 'read_only'" in message and "trusted = true" in message
    assert "trusted" not in denial_message("read_only", "write_file")


def test_mcp_tools_are_named_in_the_prefix_the_tool_namespace_reserves_for_them():
    # The approval gate recognises MCP tools by the prefix daemon.tools.base reserves; the names
    # daemon.mcp.tools makes must carry it, and no built-in tool may.
    assert qualified_name("docs", "search").startswith(MCP_TOOL_PREFIX)
    assert not any(name.startswith(MCP_TOOL_PREFIX) for name in builtin_tools())


def test_tool_accepts_any_object_and_summarises_it():
    tool = make_tool(description="  Search.  ")
    assert tool.name == "mcp__docs__search" and tool.description == "Search."
    assert parse_arguments(tool, {"query": "x", "nested": {"a": [1]}}) == {"query": "x", "nested": {"a": [1]}}
    with pytest.raises(ToolError):
        parse_arguments(tool, ["not", "an", "object"])
    assert tool.summary({"query": "x"}) == 'MCP docs: search {"query": "x"}'
    assert len(tool.summary({"q": "y" * 500})) < 240
    assert make_tool().description == "The search tool of the MCP server docs."


def test_provider_schema_is_self_contained():
    raw = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "searchArguments",
        "type": "object",
        "properties": {"filter": {"$ref": "#/$defs/Filter"}, "title": {"type": "string", "title": "Title"}},
        "$defs": {"Filter": {"type": "object", "title": "Filter", "properties": {"lang": {"type": "string"}}}},
    }
    assert provider_schema(raw) == {
        "type": "object",
        "properties": {
            "filter": {"type": "object", "properties": {"lang": {"type": "string"}}},
            "title": {"type": "string"},
        },
    }
    assert provider_schema(None) == {"type": "object", "properties": {}}
    assert provider_schema({"properties": {}}) == {"properties": {}, "type": "object"}
    recursive = {
        "type": "object",
        "properties": {"node": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
    }
    assert provider_schema(recursive) == recursive  # left as written rather than expanded forever


# --- results ----------------------------------------------------------------------------


def test_results_text_structured_and_errors():
    assert render_result({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}).text == "a\nb"
    structured_only = render_result({"content": [], "structuredContent": {"total": 5}})
    assert json.loads(structured_only.text) == {"total": 5} and not structured_only.is_error
    # Already carried by the text (as the spec asks, or as the Python SDK wraps it): not repeated.
    assert (
        render_result({"content": [{"type": "text", "text": '{"total": 5}'}], "structuredContent": {"total": 5}}).text
        == '{"total": 5}'
    )
    assert (
        render_result({"content": [{"type": "text", "text": "done"}], "structuredContent": {"result": "done"}}).text
        == "done"
    )
    both = render_result({"content": [{"type": "text", "text": "Found 2"}], "structuredContent": {"ids": [1, 2]}})
    assert both.text.startswith("Found 2\n") and json.loads(both.text.split("\n", 1)[1]) == {"ids": [1, 2]}
    assert json.loads(render_result({"content": [], "structuredContent": {"items": []}}).text) == {"items": []}
    # A failure flag is not a "true flag next to the message": it says something.
    flagged = render_result(
        {"content": [{"type": "text", "text": "m"}], "structuredContent": {"success": False, "message": "m"}}
    )
    assert flagged.text.startswith("m\n") and json.loads(flagged.text.split("\n", 1)[1])["success"] is False
    # An image with the same block again as structured content (server-filesystem's read_media_file): no base64 dump.
    image = {"type": "image", "data": "AAAA" * 100, "mimeType": "image/png"}
    assert "AAAA" not in render_result({"content": [image], "structuredContent": {"content": [image]}}).text
    error = render_result({"content": [{"type": "text", "text": "no such page"}], "isError": True})
    assert error.is_error and error.text == "no such page"
    assert render_result({"content": []}).text == "(no output)"


def test_results_other_content_is_described_not_dumped():
    result = render_result(
        {
            "content": [
                {"type": "image", "data": "AAAA" * 10, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "contents"}},
                {
                    "type": "resource",
                    "resource": {"uri": "file:///b.bin", "blob": "AAAA", "mimeType": "application/zip"},
                },
                {"type": "resource_link", "uri": "file:///c", "name": "c"},
                {"type": "hologram"},
            ]
        }
    )
    assert result.text.splitlines() == [
        "[image 1: image/png, 30 bytes]",  # passed on (result.images) for a model that takes images
        "contents",
        "[resource: file:///b.bin (application/zip), not shown]",
        "[resource link: c file:///c]",
        "[hologram content, not shown]",
    ]
    assert result.images == (("image/png", b"\x00" * 30),)
    # Not base64, or too large to pass on: only named.
    bad = render_result({"content": [{"type": "image", "data": "not base64!", "mimeType": "image/png"}]})
    assert bad.images == () and bad.text == "[image: image/png, about 8 bytes, not shown]"


def test_stderr_tail_keeps_the_last_lines():
    tail = StderrTail("x")
    for i in range(30):
        tail.feed(f"line {i}\n".encode())
    tail.feed(b"partial \xc3")
    tail.feed(b"\xa9")
    tail.finish()
    lines = tail.text().splitlines()
    assert len(lines) == 20 and lines[0] == "line 11" and lines[-1] == "partial é"


# --- ponder mcp -------------------------------------------------------------------------


def test_ponder_mcp_shows_servers_tools_and_errors(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    script = SERVERS / "misbehaving.py"
    (home / "config.toml").write_text(
        f'[mcp_servers.flaky]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(script))}, "serve"]\n\n'
        f"[mcp_servers.dead]\ncommand = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(str(script))}, "exit-at-start"]\n'
    )
    run = subprocess.run(
        [sys.executable, "-m", "daemon", "--home", str(home), "mcp"],
        env={**subprocess_env(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert run.returncode == 1, run.stderr  # a server failed
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["flaky", "ready", "5", "tools"]
    assert lines[1].split(None, 1) == ["echo", "Echo the text back."]
    assert lines[6].split() == ["dead", "failed"]
    assert "exited with status 3" in lines[7] and lines[8].strip() == "fatal: WIDGET_TOKEN is not set"
