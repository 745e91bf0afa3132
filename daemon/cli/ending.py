"""How a client command's process ends: its output flushed, then ``os._exit`` with its status,
without the interpreter's teardown of every module the command loaded (a tenth of a second on
a busy machine, after the answer is already out). Output piped into a program that stopped
reading (``ponder sessions | head``) ends it quietly, with the status of a Unix tool killed by
SIGPIPE (141)."""

import os
import sys
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


def reader_went_away() -> int:
    """stdout's reader closed the pipe: nothing more can be said there, and nothing should be said
    elsewhere. stdout is pointed at /dev/null so the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return SIGPIPE_STATUS
