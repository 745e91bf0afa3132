"""Owner-only files in the home: created 0600, a looser regular file tightened, and nothing
else a path may name (a pipe, a device such as /dev/null) ever changed."""

import os
import stat
from pathlib import Path

from daemon.config.home import open_private
from daemon.store.db import _restrict_files


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_file_is_owner_only_and_a_looser_one_is_tightened(tmp_path: Path) -> None:
    fresh, loose = tmp_path / "fresh.log", tmp_path / "loose.log"
    os.close(open_private(fresh, os.O_WRONLY))
    loose.write_text("kept\n")
    loose.chmod(0o644)
    os.close(open_private(loose, os.O_WRONLY | os.O_APPEND))
    assert (mode_of(fresh), mode_of(loose)) == (0o600, 0o600)
    assert loose.read_text() == "kept\n"


def test_a_pipe_named_as_the_file_keeps_its_mode(tmp_path: Path) -> None:
    # Stands in for /dev/null: a daemon run as root once made /dev/null 0600 for the whole
    # machine when its log file pointed there (other users' programs then failed to open it).
    pipe = tmp_path / "log-pipe"
    os.mkfifo(pipe)
    pipe.chmod(0o666)
    os.close(open_private(pipe, os.O_RDWR | os.O_NONBLOCK))
    assert mode_of(pipe) == 0o666


def test_the_store_tightens_its_regular_files_and_leaves_a_pipe_alone(tmp_path: Path) -> None:
    db, pipe = tmp_path / "sessions.db", tmp_path / "sessions.db-wal"
    db.write_bytes(b"")
    db.chmod(0o644)
    os.mkfifo(pipe)
    pipe.chmod(0o666)
    _restrict_files(str(db))
    assert (mode_of(db), mode_of(pipe)) == (0o600, 0o666)
