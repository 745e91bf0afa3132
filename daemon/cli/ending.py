"""How a ``ponder`` process ends: its output flushed, then ``os._exit`` with its status, without
the interpreter's teardown of every module it loaded (a tenth of a second on a busy machine,
after the answer is already out). A client command ends so (``exit_now``); output piped into a
program that stopped reading (``ponder sessions | head``) ends it quietly, with the status of a
Unix tool killed by SIGPIPE (141). The stdio daemon ends so after an orderly shutdown
(``end_daemon``), once it has done what the interpreter's exit would: a client that reads its
stderr (a script capturing ``ponder ask``'s) waits for that end.
"""

import atexit
import os
import sys
import threading
from typing import NoReturn

SIGPIPE_STATUS = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away


def exit_now(code: int) -> NoReturn:
    """Flush stdout and stderr, then end the process with ``code`` (141 if stdout's reader went away).
    Only once nothing is left to do: no file open for writing but stdout and stderr."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader of stdout went away with output still buffered
        code = reader_went_away()
    os._exit(code)


def end_daemon(code: int) -> NoReturn:
    """End a daemon whose serve returned (its store closed, its children ended, every answer
    written) as the interpreter's exit would, less the teardown: its other non-daemon threads
    joined, the exit handlers run (the log file flushed and closed), stdout and stderr flushed."""
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    exit_now(code)


def reader_went_away() -> int:
    """stdout's reader closed the pipe: nothing more can be said there, and nothing should be said
    elsewhere. stdout is pointed at /dev/null so the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return SIGPIPE_STATUS
