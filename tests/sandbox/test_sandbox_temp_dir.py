"""The sandbox's temporary directory, made without ``tempfile`` (``daemon.sandbox.service.make_temp_dir``)."""

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.config.sandbox import SandboxSettings
from daemon.sandbox import service
from daemon.sandbox.confinement import Override
from daemon.sandbox.probe import Support
from daemon.sandbox.service import NAME_CHARACTERS, Sandbox, make_temp_dir

PREFIX = "ponder-sandbox-test-"


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR names a fresh directory; TEMP and TMP are unset."""
    place = tmp_path / "tmp"
    place.mkdir()
    monkeypatch.setenv("TMPDIR", str(place))
    monkeypatch.delenv("TEMP", raising=False)
    monkeypatch.delenv("TMP", raising=False)
    return place


def assert_fresh_private_dir(path: str, parent: Path) -> None:
    made = Path(path)
    assert made.is_absolute() and made.parent == parent
    name = made.name
    assert name.startswith(PREFIX)
    suffix = name.removeprefix(PREFIX)
    assert len(suffix) == 8 and set(suffix) <= set(NAME_CHARACTERS), suffix
    info = made.lstat()
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
    assert stat.S_IMODE(info.st_mode) & 0o077 == 0, oct(info.st_mode)  # nobody else may enter it
    assert list(made.iterdir()) == []


def test_a_new_private_directory_is_made_under_tmpdir_as_tempfile_makes_it(
    tmpdir_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = make_temp_dir(PREFIX)
    assert_fresh_private_dir(made, tmpdir_env)
    # The place and the name's form are tempfile's: mkdtemp, asked the same, agrees.
    monkeypatch.setattr(tempfile, "tempdir", None)  # not the place it found for an earlier test
    assert_fresh_private_dir(tempfile.mkdtemp(prefix=PREFIX), tmpdir_env)
    # Every call makes another one.
    others = {make_temp_dir(PREFIX) for _ in range(20)}
    assert len(others) == 20 and made not in others


def test_a_taken_name_is_never_reused_and_another_is_tried(tmpdir_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = tmpdir_env / f"{PREFIX}planted1"
    planted.mkdir(mode=0o777)
    (planted / "trap").write_text("someone else's")
    names = iter(["planted1", "fresh123"])
    monkeypatch.setattr(service, "temp_dir_name", lambda: next(names))
    made = make_temp_dir(PREFIX)
    assert made == str(tmpdir_env / f"{PREFIX}fresh123")
    assert_fresh_private_dir(made, tmpdir_env)
    assert (planted / "trap").read_text() == "someone else's"


@pytest.mark.parametrize("unusable", ["missing", "a file"])
def test_an_unusable_tmpdir_falls_back_to_the_next_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unusable: str
) -> None:
    bad = tmp_path / "bad"
    if unusable == "a file":
        bad.write_text("not a directory")
    good = tmp_path / "good"
    good.mkdir()
    monkeypatch.setenv("TMPDIR", str(bad))
    monkeypatch.setenv("TEMP", str(good))
    monkeypatch.delenv("TMP", raising=False)
    assert_fresh_private_dir(make_temp_dir(PREFIX), good)


def test_the_places_are_tempfiles_in_its_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "a"))
    monkeypatch.setenv("TEMP", str(tmp_path / "b"))
    monkeypatch.setenv("TMP", "relative")
    monkeypatch.chdir(tmp_path)
    expected = [str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "relative"), "/tmp", "/var/tmp", "/usr/tmp"]
    assert service.temp_dir_parents() == [*expected, str(tmp_path)]
    assert [os.path.abspath(place) for place in tempfile._candidate_tempdir_list()] == [*expected, str(tmp_path)]


def test_no_usable_place_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nowhere = [str(tmp_path / "missing"), str(tmp_path / "also-missing")]
    monkeypatch.setattr(service, "temp_dir_parents", lambda: nowhere)
    with pytest.raises(FileNotFoundError, match="No usable temporary directory"):
        make_temp_dir(PREFIX)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    made = Sandbox(SandboxSettings(), tmp_path / "home", support=Support(None, reason="none in this test"))
    try:
        yield made
    finally:
        made.close()


def test_the_sandbox_gives_each_session_a_directory_in_its_own_private_one(
    sandbox: Sandbox, tmpdir_env: Path, tmp_path: Path
) -> None:
    assert list(tmpdir_env.iterdir()) == []  # made when first needed, not before
    first = sandbox.for_command("s1", tmp_path, Override()).tmp_dir
    second = sandbox.for_command("s2", tmp_path, Override()).tmp_dir
    assert first is not None and second is not None
    assert first.name == "s1" and second.name == "s2" and first.parent == second.parent
    base = first.parent
    assert base.name.startswith(f"ponder-sandbox-{os.getpid()}-")
    assert base.parent == tmpdir_env.resolve()
    assert stat.S_IMODE(base.stat().st_mode) & 0o077 == 0
    assert list(tmpdir_env.iterdir()) == [base]  # one per daemon
    sandbox.close()
    assert not base.exists()


def test_closing_removes_the_directory_with_whatever_commands_left_in_it(
    sandbox: Sandbox, tmpdir_env: Path, tmp_path: Path
) -> None:
    tmp = sandbox.for_command("s1", tmp_path, Override()).tmp_dir
    assert tmp is not None
    (tmp / "deep" / "er").mkdir(parents=True)  # as a command's children leave it
    (tmp / "deep" / "er" / "file").write_text("left")
    (tmp / "link").symlink_to(tmp_path)  # removed, not followed
    (tmp_path / "outside").write_text("kept")
    sandbox.close()
    assert not tmp.parent.exists()
    assert (tmp_path / "outside").read_text() == "kept"


def test_a_sessions_confinement_is_decided_once_per_cwd_and_override(tmp_path: Path, tmpdir_env: Path) -> None:
    landlock = Support("landlock", landlock_abi=4)
    sandbox = Sandbox(SandboxSettings(mode="workspace_write"), tmp_path / "home", support=landlock)
    try:
        first = sandbox.confinement("s1", tmp_path, Override())
        assert sandbox.confinement("s1", str(tmp_path), Override()) is first  # kept
        assert first.writable_roots[0] == tmp_path and first.writable_roots[1].name == "s1"
        elsewhere = sandbox.confinement("s1", tmp_path / "sub", Override())
        assert elsewhere.writable_roots[0] == tmp_path / "sub"  # another cwd: decided for it
        assert sandbox.confinement("s1", tmp_path, Override(mode="off")).mode == "off"  # another override
        assert sandbox.confinement("s2", tmp_path, Override()).writable_roots[1].name == "s2"  # another session
        assert sandbox.confinement("s1", tmp_path, Override()) is first
    finally:
        sandbox.close()
