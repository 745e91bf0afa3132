"""``ClientFiles``: the editor's view of the files, when the client offers one (ACP's ``fs``).

With it, ``read_file`` reads what the editor shows (unsaved buffers included), ``write_file``
writes into the editor, and ``edit_file`` does both when it may; every path check the tools
make on the disk (confinement to the ``cwd``, the ponder home, a read-only ``.git``) is made
first, unchanged, and the path handed over is the checked real path. ``search`` and
``list_files`` always read the disk. A client's failure is a ``ToolError`` the model reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

__all__ = ["ClientFiles"]


class ClientFiles(Protocol):
    """File access through the client, for one session."""

    reads: bool  # read_file (and edit_file's read) go through the client
    writes: bool  # write_file (and edit_file's write) go through the client

    async def read_text(self, path: Path) -> str:
        """The text the client has for ``path`` (absolute, checked); ``ToolError`` when it fails."""
        ...

    async def write_text(self, path: Path, content: str) -> None:
        """Hand ``content`` to the client as ``path``'s new text; ``ToolError`` when it fails."""
        ...
