"""``ponder sessions`` (the table) is read from the store without starting a daemon
(``daemon.cli.listing``), and says exactly what the daemon's answer said: the same table, the
same problems on stderr, the same status; whatever it cannot answer alone goes to a daemon.

The daemon's path is taken with ``--lim`` (argparse's abbreviation of ``--limit``, which the
plain line reader leaves to argparse and so to a daemon). Whether a daemon ran is read from
the log at debug level: a daemon's last record is ``ponder.server: shutting down``.
"""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli_people import ask_echo, env_for, ponder

pytestmark = pytest.mark.slow

DAEMON_RAN = "ponder.server: shutting down"


def sessions(home: Path, *args: str, **extra: str) -> tuple[subprocess.CompletedProcess[str], bool]:
    """``ponder --log-level debug sessions ARGS``, and whether a daemon ran for it."""
    log = home / "logs" / "ponder.log"
    before = log.read_text().count(DAEMON_RAN) if log.exists() else 0
    result = ponder(home, "--log-level", "debug", "sessions", *args, **extra)
    after = log.read_text().count(DAEMON_RAN) if log.exists() else 0
    return result, after > before


def same(a: subprocess.CompletedProcess[str], b: subprocess.CompletedProcess[str]) -> None:
    assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr)


def test_the_table_is_read_from_the_store_and_is_the_one_the_daemon_gives(home, tmp_path):
    for prompt in ("first question", "second question", "third question"):
        ask_echo(home, tmp_path, prompt)
    direct, daemon_ran = sessions(home)
    assert not daemon_ran
    assert direct.returncode == 0 and direct.stderr == ""
    assert [line.split()[-2:] for line in direct.stdout.splitlines()[1:]] == [
        ["third", "question"],
        ["second", "question"],
        ["first", "question"],
    ]
    through_daemon, daemon_ran = sessions(home, "--lim", "20")
    assert daemon_ran
    same(direct, through_daemon)

    for limit in (["--limit", "2"], ["--limit=2"]):
        page, daemon_ran = sessions(home, *limit)
        assert not daemon_ran
        same(page, sessions(home, "--lim", "2")[0])
        assert len(page.stdout.splitlines()) == 3  # the header and the two newest
    # What the plain reader does not take goes to argparse and a daemon, as before.
    too_many, daemon_ran = sessions(home, "--limit", "1001")
    assert daemon_ran and too_many.returncode == 1 and "1000" in too_many.stderr
    zero, daemon_ran = sessions(home, "--limit", "0")
    assert not daemon_ran and zero.returncode == 2 and "0 is less than 1" in zero.stderr


def test_an_empty_home_is_made_private_and_says_there_are_no_sessions_yet(tmp_path):
    home = tmp_path / "new" / "home"
    direct, daemon_ran = sessions(home)
    assert not daemon_ran
    assert (direct.returncode, direct.stdout) == (0, "")
    assert direct.stderr == 'No sessions yet: `ponder ask "…"` starts one.\n'
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "sessions.db").stat().st_mode) == 0o600
    same(direct, sessions(home, "--lim", "20")[0])


def test_a_missing_sandbox_is_said_first_as_initialize_reports_it(home, tmp_path):
    ask_echo(home, tmp_path, "a question")
    (home / "config.toml").write_text("[sandbox]\nlandlock = false\n")
    no_bwrap = tmp_path / "empty-path"
    no_bwrap.mkdir()
    direct, daemon_ran = sessions(home, PATH=str(no_bwrap))
    assert not daemon_ran
    assert direct.returncode == 0 and "a question" in direct.stdout
    assert direct.stderr.startswith("ponder: No OS sandbox works here: bubblewrap (bwrap) is not installed")
    same(direct, sessions(home, "--lim", "20", PATH=str(no_bwrap))[0])


@pytest.mark.parametrize(
    "config",
    [
        "[defaults]\nmodel = 5\n",  # a problem in config.toml
        "[[permissions.rules]]\ntool = 'read_file'\ndecision = 'allow'\n",  # rules, checked when loaded
        "[providers.anthropic]\nmodels = [{ id = 'x', context_window = 'big' }]\n",  # declared models
        "[store]\nurl = 'postgresql://127.0.0.1:9/nope'\n",  # another store
    ],
)
def test_what_the_store_alone_cannot_say_is_left_to_a_daemon(home, tmp_path, config):
    ask_echo(home, tmp_path, "a question")
    (home / "config.toml").write_text(config)
    listed, daemon_ran = sessions(home)
    assert daemon_ran
    same(listed, sessions(home, "--lim", "20")[0])


def test_a_store_that_cannot_be_opened_is_reported_by_the_daemon(home, tmp_path):
    ask_echo(home, tmp_path, "a question")
    (home / "sessions.db").write_bytes(b"not a database at all" * 100)
    for name in ("sessions.db-wal", "sessions.db-shm"):
        (home / name).unlink(missing_ok=True)
    listed, daemon_ran = sessions(home)
    assert daemon_ran
    assert listed.returncode == 1 and "sessions.db is damaged" in listed.stderr
    same(listed, sessions(home, "--lim", "20")[0])


def test_the_table_into_a_reader_that_went_away_ends_quietly(home, tmp_path):
    ask_echo(home, tmp_path, "a question to list")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "daemon", "sessions"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env_for(home),
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert result.stderr.decode() == ""
    assert result.returncode == 141
