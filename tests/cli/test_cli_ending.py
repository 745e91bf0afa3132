"""``daemon.cli.ending.end_daemon``: a daemon skips the interpreter's teardown but not what its
exit does that anyone can see: other non-daemon threads finish, exit handlers run (the log file
flushed and closed), buffered output is written, and the status is the one given."""

import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import atexit, sys, threading, time
from pathlib import Path
from daemon.cli.ending import end_daemon

out = Path(sys.argv[1])

def late_worker():
    time.sleep(0.3)
    (out / "thread").write_text("finished")

threading.Thread(target=late_worker).start()  # not a daemon thread: the exit waits for it
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a daemon thread: it does not
atexit.register(lambda: (out / "atexit").write_text("ran after the thread: " + str((out / "thread").exists())))
sys.stdout.write("buffered, no newline")
sys.stderr.write("to stderr")
end_daemon(3)
"""


def test_end_daemon_joins_threads_runs_exit_handlers_and_flushes(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 3
    assert (done.stdout, done.stderr) == ("buffered, no newline", "to stderr")
    assert (tmp_path / "thread").read_text() == "finished"
    assert (tmp_path / "atexit").read_text() == "ran after the thread: True"
