"""``run_command``: a shell command in the session cwd, streamed, bounded and killable.

The command runs via ``/bin/sh -c`` in a new session (its own process group), with
stdin from ``/dev/null`` and stderr merged into stdout; it starts behind the watcher's
gate (``procgroup.gated_argv``), only once its group is watched. Output is streamed to ``ctx.emit_output``
as it arrives and kept for the result up to ``KEPT_HEAD_BYTES + KEPT_TAIL_BYTES``
(the middle is dropped with a note: a build's last lines matter most). On timeout or
cancellation the whole process group is terminated (see ``procgroup``); cancellation
then propagates. When the shell exits while a background child silently keeps the
output open, the rest of the group is stopped too, so the tool returns and nothing
leaks; a child that redirected its output (``cmd > log &``) is left running, until the
daemon ends: the group is handed to ``procgroup.watch_group``, so nothing it started
outlives the daemon (SIGKILL included), unless it left the group (``setsid``).

With a sandbox (``ToolContext.sandbox``, see ``daemon.sandbox``) the shell runs confined
(bubblewrap, Landlock or sandbox-exec wrap it); the result says how it ran and whether the
sandbox seems to have stopped it (``ToolResult.sandbox``). Under bubblewrap the command has
a PID namespace of its own: whatever it left in the background ends with it.

Credentials stay out of the command: its environment is the daemon's minus provider
keys, GitHub tokens and any variable holding a known credential (``config.child_env``;
``[tools] pass_env`` lets chosen ones through). Output is masked (``ctx.secrets``) as
it is decoded, before it is streamed or cut to size: a key split by the cut would no
longer be recognised.
"""

from __future__ import annotations

import codecs
import logging
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from typing import Annotated

import anyio
import msgspec
from anyio.abc import Process

from daemon.config.settings import child_env
from daemon.tools.base import Tool, ToolArgs, ToolContext, ToolError, ToolResult
from daemon.tools.paths import resolve_in_cwd
from daemon.tools.procgroup import gated_argv, group_alive, release_group, terminate_group, watch_then_open_gate
from daemon.util.redact import SecretMask

__all__ = ["DEFAULT_TIMEOUT_S", "MAX_TIMEOUT_S", "RunCommand", "RunCommandArgs"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 600.0
KEPT_HEAD_BYTES = 16 * 1024
KEPT_TAIL_BYTES = 48 * 1024
MAX_STREAMED_BYTES = 1024 * 1024  # beyond this the client gets a note, not a firehose
KILL_GRACE_S = 2.0
# After the shell exits, how long output may keep arriving before whatever still holds
# the pipe (a backgrounded child) is considered left behind.
DRAIN_GRACE_S = 0.5
ORPHAN_DRAIN_S = 1.0

# A model cannot answer a pager or a password prompt: make tools print and fail instead.
_NON_INTERACTIVE_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}


class RunCommandArgs(ToolArgs):
    command: Annotated[str, msgspec.Meta(description="Shell command, run with /bin/sh -c in the working directory.")]
    timeout_s: Annotated[
        float,
        msgspec.Meta(gt=0, le=MAX_TIMEOUT_S, description="Seconds before it is killed; default 120, max 600."),
    ] = DEFAULT_TIMEOUT_S


class RunCommand(Tool[RunCommandArgs]):
    name = "run_command"
    description = "Run a shell command in the working directory; returns its output (stdout+stderr) and exit code."
    mutating = True
    Args = RunCommandArgs

    def summary(self, args: RunCommandArgs) -> str:
        return f"Run: {args.command}"

    async def run(self, args: RunCommandArgs, ctx: ToolContext) -> ToolResult:
        if not args.command.strip():
            raise ToolError("command is empty.")
        sandbox = ctx.sandbox
        if sandbox is not None and sandbox.refusal is not None:
            raise ToolError(sandbox.refusal)
        cwd = resolve_in_cwd(ctx.cwd, ".")
        if not cwd.is_dir():
            raise ToolError(f"the working directory {cwd} does not exist.")
        env = {**child_env(os.environ, ctx.pass_env), **_NON_INTERACTIVE_ENV}
        command = ["/bin/sh", "-c", args.command]
        if sandbox is not None and (confined := sandbox.spawn_argv(args.command, cwd)) is not None:
            command, env = confined, {**env, **sandbox.env()}
        gate_read, gate = os.pipe()  # the command waits on it until its group is watched
        try:
            process = await anyio.open_process(
                gated_argv(command),
                stdin=gate_read,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except BaseException as exc:
            os.close(gate)  # cancelled mid-spawn, a forked command reads end-of-file and never runs
            if isinstance(exc, OSError):
                raise ToolError(f"could not start the shell: {exc}.") from None
            raise
        finally:
            os.close(gate_read)
        watch_then_open_gate(process.pid, gate)

        output = _KeptOutput()
        streamer = _Streamer(ctx.emit_output)
        text = _MaskedText(ctx.secrets)
        outcome = "running"
        try:
            with anyio.move_on_after(args.timeout_s) as deadline:
                outcome = "exited" if await _collect(process, text, output, streamer) else "left_behind"
            if deadline.cancelled_caught:
                outcome = "timed_out"
        finally:
            # Shielded: on cancellation the group must still die before we re-raise.
            with anyio.CancelScope(shield=True):
                if outcome not in ("exited", "left_behind"):
                    await terminate_group(process, KILL_GRACE_S)
                await process.aclose()
                release_group(process.pid)
        if rest := text.flush():  # a timeout or cancellation may leave a held-back tail
            output.add(rest.encode())
        result = _result(outcome, process.returncode, output, args.timeout_s)
        if sandbox is None:
            return result
        return msgspec.structs.replace(result, sandbox=sandbox.report(process.returncode, output.text()))


async def _collect(process: Process, text: _MaskedText, output: _KeptOutput, streamer: _Streamer) -> bool:
    """Read output until the shell exits and the pipe is drained.

    Returns False when, after the shell exited, something else held the pipe open in
    silence (a backgrounded child): that is stopped (its group killed) so we can return.
    """
    assert process.stdout is not None
    stdout = process.stdout
    eof = anyio.Event()
    waiting_for_pipe = False  # False while a chunk is being handed to a (slow) listener
    received = 0  # bytes read from the pipe (what is kept may lag: a possible key is held back)

    async def pump() -> None:
        nonlocal waiting_for_pipe, received
        while True:
            waiting_for_pipe = True
            try:
                chunk = await stdout.receive()
            except anyio.EndOfStream:
                break
            finally:
                waiting_for_pipe = False
            received += len(chunk)
            await _keep(text.feed(chunk), output, streamer)
        await _keep(text.flush(), output, streamer)
        eof.set()

    left_behind = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        await process.wait()
        while not eof.is_set():
            received_before = received
            with anyio.move_on_after(DRAIN_GRACE_S):
                await eof.wait()
            if eof.is_set() or received != received_before or not waiting_for_pipe:
                continue  # output still flowing, or the listener is slow: keep draining
            if not group_alive(process.pid):
                # Nobody in the group can be holding the pipe: the rest of the output is in
                # flight (a loaded machine can be slow to deliver it). Wait longer; only a
                # holder that left the group (setsid) keeps it open past this.
                with anyio.move_on_after(ORPHAN_DRAIN_S):
                    await eof.wait()
                if eof.is_set():
                    continue
            left_behind = True
            await terminate_group(process, KILL_GRACE_S)
            # Whatever it wrote before dying is still in the pipe. A holder that left
            # the group (setsid) never closes it: then give up on the rest.
            with anyio.move_on_after(DRAIN_GRACE_S):
                await eof.wait()
            break
        tg.cancel_scope.cancel()
    return not left_behind


async def _keep(text: str, output: _KeptOutput, streamer: _Streamer) -> None:
    if text:
        output.add(text.encode())
        await streamer.send(text)


def _result(outcome: str, returncode: int | None, output: _KeptOutput, timeout_s: float) -> ToolResult:
    text = output.text() or "(no output)"
    if not text.endswith("\n"):
        text += "\n"
    if outcome == "timed_out":
        return ToolResult(
            text + f"[timed out after {timeout_s:g} s; the command and its child processes were killed]", is_error=True
        )
    if returncode is not None and returncode < 0:
        status = f"[killed by signal {_signal_name(-returncode)}]"
    else:
        status = f"[exit code {returncode}]"
    if outcome == "left_behind":
        status += (
            "\n[the shell exited but background processes kept its output open; those in its process group "
            "were stopped. Redirect their output (e.g. `cmd > log 2>&1 &`) to keep them running]"
        )
    return ToolResult(text + status, is_error=returncode != 0)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


class _KeptOutput:
    """The first and last bytes of the output; the middle is counted, not kept."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = KEPT_HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > 2 * KEPT_TAIL_BYTES:  # trim in batches, not per chunk
                del self.tail[:-KEPT_TAIL_BYTES]

    def text(self) -> str:
        tail = bytes(self.tail[-KEPT_TAIL_BYTES:])
        omitted = self.total - len(self.head) - len(tail)
        if not omitted:
            return (bytes(self.head) + tail).decode("utf-8", errors="replace")
        tail = tail.lstrip(bytes(range(0x80, 0xC0)))  # don't start mid-character
        return (
            bytes(self.head).decode("utf-8", errors="replace")
            + f"\n[... {omitted} bytes of output omitted ...]\n"
            + tail.decode("utf-8", errors="replace")
        )


class _MaskedText:
    """Output bytes as text with credentials masked, decoded and masked as they come."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.mask = SecretMask(secrets)

    def feed(self, chunk: bytes) -> str:
        return self.mask.feed(self.decoder.decode(chunk))

    def flush(self) -> str:
        return self.mask.feed(self.decoder.decode(b"", final=True)) + self.mask.flush()


class _Streamer:
    """Forwards output text as it comes, up to a budget."""

    def __init__(self, emit: Callable[[str], Awaitable[None]] | None) -> None:
        self.emit = emit
        self.sent = 0

    async def send(self, text: str) -> None:
        if self.emit is None:
            return
        data = text.encode()
        if self.sent + len(data) > MAX_STREAMED_BYTES:
            await self._emit(
                data[: MAX_STREAMED_BYTES - self.sent].decode(errors="ignore")
                + f"\n[streaming stopped after {MAX_STREAMED_BYTES // 1024} KiB; the command keeps running]\n"
            )
            self.emit = None
            return
        self.sent += len(data)
        await self._emit(text)

    async def _emit(self, text: str) -> None:
        if not text or self.emit is None:
            return
        try:
            await self.emit(text)
        except Exception:
            # A broken listener must not lose the command's result; stop streaming.
            log.exception("emit_output failed; no more output will be streamed")
            self.emit = None
