"""Running ``list_files`` and ``search`` in a child process that can be killed.

Python's ``re`` holds the GIL for the whole of one match, and a pattern such as ``(a+)+$``
(or a glob like ``*a*a*a*a*a*a*b``, from the model or from a ``.gitignore`` in the tree)
takes exponential time on the wrong line: run in the daemon, even on a worker thread, it
freezes the event loop, so ping, cancel, SIGTERM and end of input all go unanswered. So
these tools walk and match in a fresh ``python -I`` child, which the daemon kills when the
time limit passes or the turn is cancelled; the event loop only waits on a pipe. The child
gets an empty environment (no credential reaches it), kills itself with the daemon on
Linux (``PR_SET_PDEATHSIG``), and has a CPU-time limit as a backstop everywhere.

Wire between the two: one JSON request on the child's stdin, one JSON reply
(``{"text", "is_error"}``) on its stdout. This module is the daemon's side; the child's is
``daemon.tools.child_main``, which imports the tools' scans (they import this module to start it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from daemon.tools.base import ToolError, ToolResult

__all__ = ["SCAN_TIME_LIMIT_S", "run_in_child"]

SCAN_TIME_LIMIT_S = 30.0
MAX_REPLY_BYTES = 16 * 1024 * 1024  # far above what the tools' own caps produce
MAX_STDERR_BYTES = 64 * 1024

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the daemon package
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from daemon.tools.child_main import main; main()"


async def run_in_child(tool: str, request: dict[str, Any], time_limit_s: float, timeout_message: str) -> ToolResult:
    """Run ``tool``'s scan (``daemon.tools.child_main``) with ``request`` in a child; ``ToolError`` if it fails.

    Raises ``ToolError(timeout_message)`` when it takes longer than ``time_limit_s``;
    cancellation kills the child and propagates.
    """
    payload = json.dumps({"tool": tool, "parent_pid": os.getpid(), "time_limit_s": time_limit_s, **request})
    try:
        process = await anyio.open_process(
            [sys.executable, "-I", "-X", "utf8", "-c", _BOOT, str(_PACKAGE_ROOT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
        )
    except OSError as exc:  # out of processes or descriptors: worth a retry later
        raise ToolError(f"{tool} could not start its child process: {exc.strerror or exc}; try again.") from None
    out, err = bytearray(), bytearray()
    try:
        with anyio.move_on_after(time_limit_s) as timer:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_collect, process.stdout, out, MAX_REPLY_BYTES)
                tg.start_soon(_collect, process.stderr, err, MAX_STDERR_BYTES)
                await _send(process, payload.encode())
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.aclose()  # reaps it: no zombie, no open pipes
    if timer.cancelled_caught or process.returncode == -signal.SIGXCPU:
        raise ToolError(timeout_message)
    try:
        reply = json.loads(out)
        return ToolResult(str(reply["text"]), is_error=bool(reply["is_error"]))
    except (ValueError, TypeError, KeyError):
        detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise ToolError(
            f"{tool} failed: its child process ended with status {process.returncode} ({detail[0]})."
        ) from None


async def _send(process: anyio.abc.Process, data: bytes) -> None:
    assert process.stdin is not None
    try:
        await process.stdin.send(data)
        await process.stdin.aclose()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # it died early; its status says why


async def _collect(stream: anyio.abc.ByteReceiveStream | None, into: bytearray, limit: int) -> None:
    assert stream is not None
    async for chunk in stream:
        if len(into) < limit:
            into += chunk[: limit - len(into)]
