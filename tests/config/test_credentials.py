"""Which credentials ponder knows of, masks, and keeps from commands (unit level; the
end-to-end check is tests/reliability/test_reliability_secrets.py)."""

import logging
import time
import uuid

import pytest

from daemon.config.settings import child_env, load_config
from daemon.logs import setup_logging
from daemon.mcp.spec import parse_acp_server, parse_config_server
from daemon.providers.copilot import CopilotTokens
from daemon.util import redact


def planted(name: str) -> str:
    return f"planted-{name}-{uuid.uuid4().hex}"


def test_every_alias_is_known_not_only_the_one_in_use(tmp_path):
    gemini, google = planted("gemini"), planted("google")
    config = load_config(tmp_path, env={"GEMINI_API_KEY": gemini, "GOOGLE_API_KEY": google})
    assert config.providers["gemini"].api_key.reveal() == gemini  # type: ignore[union-attr]
    assert gemini in redact.known() and google in redact.known()
    assert redact.scrub(f"a={gemini} b={google}") == "a=*** b=***"


def test_a_config_key_overridden_by_the_environment_is_still_known(tmp_path):
    in_file, in_env = planted("file"), planted("env")
    (tmp_path / "config.toml").write_text(f'[providers.deepseek]\napi_key = "{in_file}"\n')
    load_config(tmp_path, env={"DEEPSEEK_API_KEY": in_env})
    assert in_file in redact.known() and in_env in redact.known()


def test_short_values_are_not_masked():
    redact.remember("abc1234")  # 7 characters: masking it would shred ordinary output
    assert "abc1234" not in redact.known()
    assert redact.scrub("abc1234") == "abc1234"
    assert redact.MIN_SECRET_CHARS == 8


def test_mcp_env_values_are_known_except_paths_and_plain_urls():
    token, acp_token = planted("mcp"), planted("acp")
    with_user, with_query = f"https://bot:{token[-12:]}@example.com", f"https://example.com/x?key={token[-10:]}"
    plain = {"ROOT": "/srv/projects/widgets", "SITE": "https://widgets.example.com/api", "N": 3}
    env = {"TOKEN": token, "DB": with_user, "HOOK": with_query, **plain}
    parse_config_server("gh", {"command": "x", "env": env})
    parse_acp_server({"name": "gh", "command": "x", "env": [{"name": "TOKEN", "value": acp_token}]})
    assert {token, acp_token, with_user, with_query} <= set(redact.known())
    assert not {"/srv/projects/widgets", "https://widgets.example.com/api"} & set(redact.known())


def test_child_env_drops_credentials_by_name_and_by_value(tmp_path):
    custom = planted("custom")
    (tmp_path / "config.toml").write_text('[providers.myco]\napi = "openai-chat"\napi_key_env = "MYCO_KEY"\n')
    load_config(tmp_path, env={"MYCO_KEY": custom})
    gh = "ghp_whatever_1"
    environ = {"PATH": "/bin", "GITHUB_TOKEN": gh, "ANTHROPIC_API_KEY": "sk-x-1234567", "MYCO_KEY": custom}
    assert child_env(environ) == {"PATH": "/bin"}
    assert child_env(environ, pass_env=["GITHUB_TOKEN", "MYCO_KEY"]) == {
        "PATH": "/bin",
        "GITHUB_TOKEN": gh,
        "MYCO_KEY": custom,
    }


def test_pass_env_is_read_from_config_and_a_bad_one_is_a_problem(tmp_path):
    (tmp_path / "config.toml").write_text('[tools]\npass_env = ["GITHUB_TOKEN", "GH_TOKEN"]\n')
    assert load_config(tmp_path, env={}).pass_env == ("GITHUB_TOKEN", "GH_TOKEN")
    (tmp_path / "config.toml").write_text('[tools]\npass_env = "GITHUB_TOKEN"\n')
    config = load_config(tmp_path, env={})
    assert config.pass_env == ()
    assert any("[tools] pass_env must be a list" in p for p in config.problems), config.problems


def test_log_lines_never_carry_a_known_credential(tmp_path, capsys, restore_logging):
    secret = planted("log")
    redact.remember(secret)
    setup_logging(tmp_path / "logs", "debug")
    logging.getLogger("ponder.test").warning("header was %s", secret)
    try:
        raise ValueError(f"bad key {secret}")
    except ValueError:
        logging.getLogger("ponder.test").exception("failed")
    for handler in restore_logging.handlers:
        handler.flush()
    written = (tmp_path / "logs" / "ponder.log").read_text() + capsys.readouterr().err
    assert "header was ***" in written and "ValueError: bad key ***" in written
    assert secret not in written


def test_stderr_and_the_file_get_each_record_formatted_once_and_alike(tmp_path, capsys, restore_logging, monkeypatch):
    secret = planted("once")
    redact.remember(secret)
    setup_logging(tmp_path / "logs", "info")
    formatted: list[str] = []
    format_record = logging.Formatter.format

    def counting(self: logging.Formatter, record: logging.LogRecord) -> str:
        formatted.append(record.getMessage())
        return format_record(self, record)

    monkeypatch.setattr(logging.Formatter, "format", counting)
    for n in range(3):
        logging.getLogger("ponder.test").info("turn %d with %s", n, secret)
    for handler in restore_logging.handlers:
        handler.flush()
    in_file = (tmp_path / "logs" / "ponder.log").read_text().splitlines()
    assert in_file == capsys.readouterr().err.splitlines()
    assert [line.split(": ", 1)[1] for line in in_file] == [f"turn {n} with ***" for n in range(3)]
    assert len(formatted) == 3  # once per record, for both handlers


@pytest.mark.anyio
async def test_the_exchanged_copilot_token_is_known(replay_server, home):
    from tests.providers.test_provider_copilot import FakeGitHub, _json, copilot_settings

    github = FakeGitHub(replay_server)
    token = planted("copilot")
    github.exchange_answers.append(
        _json(200, {"token": token, "expires_at": int(time.time()) + 1800, "endpoints": {"api": github.url}})
    )
    tokens = CopilotTokens(copilot_settings(github), home)
    assert token not in redact.known()
    try:
        await tokens.get()
    finally:
        await tokens.aclose()
    assert token in redact.known()
