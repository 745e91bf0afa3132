"""Whether the person is at a terminal, and the styles the commands write there.

``PONDER_FORCE_TTY=1`` makes stderr count as a terminal (for tests, and wrappers that relay it
to one).
"""

import os
import sys

DIM, RESET = "\x1b[2m", "\x1b[0m"


def stderr_is_terminal() -> bool:
    return os.environ.get("PONDER_FORCE_TTY") == "1" or sys.stderr.isatty()
