"""The editor's files: ``ClientFiles`` over ACP's ``fs/read_text_file`` and ``fs/write_text_file``.

Used for a session when the client's ``initialize`` declared ``clientCapabilities.fs``
(PROTOCOL.md "ACP mode in an editor"): reads see the editor's unsaved buffers, writes land in
them. The tools have already confined and checked the path; a client's error (or an answer
that is not ACP's) becomes a ``ToolError`` naming the file and the editor's message.
"""

from pathlib import Path

from daemon.acp import types as t
from daemon.jsonrpc.connection import ClientRequestError, Connection
from daemon.tools.base import ToolError


class EditorFiles:
    """One session's files as the editor has them."""

    def __init__(self, connection: Connection, session_id: str, *, reads: bool, writes: bool) -> None:
        self.connection = connection
        self.session_id = session_id
        self.reads = reads
        self.writes = writes

    async def read_text(self, path: Path) -> str:
        request = t.ReadTextFileRequest(session_id=self.session_id, path=str(path))
        try:
            answer = await self.connection.request("fs/read_text_file", request, t.ReadTextFileResponse)
        except ClientRequestError as exc:
            raise ToolError(f"the editor could not read '{path}': {exc.message}") from None
        content: str = answer.content
        return content

    async def write_text(self, path: Path, content: str) -> None:
        request = t.WriteTextFileRequest(session_id=self.session_id, path=str(path), content=content)
        try:
            await self.connection.request("fs/write_text_file", request, t.WriteTextFileResponse)
        except ClientRequestError as exc:
            raise ToolError(f"the editor could not write '{path}': {exc.message}") from None
