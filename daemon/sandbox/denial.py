"""Whether the sandbox seems to have stopped a command: a best guess from its exit status
and output (PROTOCOL.md "Sandbox": ``tool_execution_end.sandbox.denied``).

True only for a confined command that exited non-zero and printed an error a sandbox
causes: a read-only file system (bwrap), permission refused (Landlock answers EACCES,
bwrap EPERM for ``unshare``/``mount``), or, with the network off, an unreachable network or
a name that could not be resolved. An unconfined command is never "denied".
"""

from __future__ import annotations

import re

__all__ = ["looks_denied"]

_FILES = re.compile(r"Read-only file system|Permission denied|Operation not permitted|EROFS|EACCES|EPERM")
_NETWORK = re.compile(
    r"Network is unreachable|Temporary failure in name resolution|Could not resolve host|"
    r"Name or service not known|nodename nor servname|No address associated with hostname|ENETUNREACH|EAI_AGAIN"
)


def looks_denied(enforced: bool, network: bool, returncode: int | None, output: str) -> bool:
    if not enforced or returncode == 0:
        return False
    if _FILES.search(output):
        return True
    return not network and _NETWORK.search(output) is not None
