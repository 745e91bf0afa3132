"""Hooks: commands config.toml runs at points of a turn (``[[hooks.EVENT]]``), with one JSON
object on stdin, and what each one answered.

A hook is ``{matcher?, command: [argv], timeout_s? (30), on_failure?: deny|ignore}``;
``on_failure`` defaults to ``deny`` for ``pre_tool_use`` (fail closed: a guard that cannot
run must not let everything through) and ``ignore`` for the others. It answers with exit 0
and optional JSON ``{decision?: allow|deny|ask, reason?}``, or exit 2 (deny, stderr the
reason). Anything else fails: another exit status, a command that cannot start, output that
is not a JSON object, more than ``MAX_OUTPUT_BYTES`` of output, or no exit within
``timeout_s``; then ``on_failure`` decides. It runs without a shell, in the session's cwd,
with ``run_command``'s environment (no credentials), in a process group of its own that is
killed at the timeout and handed to the child watcher (``procgroup.watch_group``), so it
never outlives the daemon.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, get_args

import anyio
import msgspec

from daemon.config.settings import child_env
from daemon.tools.procgroup import release_group, terminate_group, watch_group
from daemon.util.redact import scrub
from protocol.events import HookEventName, HookStatus

__all__ = ["HOOK_EVENTS", "Hook", "HookOutcome", "load_hooks", "run_hook"]

HOOK_EVENTS: tuple[str, ...] = get_args(HookEventName)
TOOL_EVENTS = ("pre_tool_use", "post_tool_use")
DEFAULT_TIMEOUT_S = 30.0
MAX_OUTPUT_BYTES = 1024 * 1024  # per stream; a hook that prints more fails
SHOWN_OUTPUT_CHARS = 2000  # of what it printed, in hook_end and in a denial
KILL_GRACE_S = 1.0
_KEYS = {"matcher", "command", "timeout_s", "on_failure"}

HookDecision = Literal["allow", "deny", "ask"]


class Hook(msgspec.Struct, frozen=True):
    event: str
    command: tuple[str, ...]
    matcher: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    on_failure: Literal["deny", "ignore"] = "deny"
    missing: str | None = None  # set when the command was not found at load: it fails every time

    def matches(self, tool_name: str | None) -> bool:
        if self.matcher is None or tool_name is None:
            return True
        return fnmatch.fnmatchcase(tool_name, self.matcher)

    @property
    def shown(self) -> str:
        import shlex  # (as shutil below: every session loads this module, few have hooks)

        return shlex.join(self.command)


class HookOutcome(msgspec.Struct, frozen=True):
    status: HookStatus  # completed | blocked | failed | timed_out
    decision: HookDecision | None  # the hook's answer, or on_failure's "deny" (None: no say)
    reason: str  # one line for the model and the person
    output: str  # what it printed, cut short, credentials masked
    duration_ms: int


def load_hooks(raw: dict[str, Any]) -> tuple[dict[str, list[Hook]], list[str]]:
    """The hooks of config.toml by event, and a problem for each one that is wrong."""
    hooks: dict[str, list[Hook]] = {event: [] for event in HOOK_EVENTS}
    problems: list[str] = []
    for event, tables in raw.items():
        if event not in HOOK_EVENTS:
            problems.append(f"config.toml: [[hooks.{event}]] is not a hook event (one of {', '.join(HOOK_EVENTS)}).")
            continue
        if not isinstance(tables, list):
            problems.append(f"config.toml: hooks.{event} must be an array of tables ([[hooks.{event}]]).")
            continue
        for i, table in enumerate(tables):
            where = f"config.toml: [[hooks.{event}]] #{i + 1}"
            try:
                hook = _check_hook(event, table)
            except ValueError as exc:
                if event == "pre_tool_use":
                    # A guard that is not understood still guards: every call it could see is denied.
                    hooks[event].append(Hook(event=event, command=("?",), missing=f"it is invalid ({exc})"))
                    problems.append(f"{where} is invalid: {exc}; every tool call is denied until it is fixed.")
                else:
                    problems.append(f"{where} is invalid and does not run: {exc}.")
                continue
            if hook.missing is not None:
                consequence = "every call it matches is denied" if hook.on_failure == "deny" else "it is skipped"
                problems.append(f"{where}: the command {hook.command[0]!r} {hook.missing}; {consequence}.")
            hooks[event].append(hook)
    return hooks, problems


def _check_hook(event: str, table: Any) -> Hook:
    if not isinstance(table, dict):
        raise ValueError("it must be a table with a command")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (a hook takes {', '.join(sorted(_KEYS))})")
    command = table.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(w, str) and w for w in command):
        raise ValueError('command must be a non-empty list of words, e.g. ["python3", "guard.py"]')
    matcher = table.get("matcher")
    if matcher is not None and (not isinstance(matcher, str) or not matcher):
        raise ValueError("matcher must be a tool name or glob")
    timeout = table.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
        raise ValueError("timeout_s must be a number of seconds between 0 and 3600")
    default_failure = "deny" if event == "pre_tool_use" else "ignore"
    on_failure = table.get("on_failure", default_failure)
    if on_failure not in ("deny", "ignore"):
        raise ValueError("on_failure must be deny or ignore")
    return Hook(
        event=event,
        command=tuple(command),
        matcher=matcher,
        timeout_s=float(timeout),
        on_failure=on_failure,
        missing=_missing(command[0]),
    )


def _missing(program: str) -> str | None:
    """Why ``program`` cannot run, when that can be known before a session's cwd is (a relative
    path with a ``/`` is looked up in the cwd when it runs)."""
    if os.path.isabs(program):
        if not os.path.isfile(program):
            return "does not exist"
        if not os.access(program, os.X_OK):
            return "is not executable"
        return None
    if "/" in program:
        return None
    import shutil  # (which imports bz2, lzma and zlib)

    return None if shutil.which(program) is not None else "is not on PATH"


async def run_hook(hook: Hook, payload: dict[str, Any], cwd: Path, pass_env: Iterable[str] = ()) -> HookOutcome:
    """Run one hook to its answer; never raises for anything the hook does."""
    started = time.monotonic()

    def outcome(status: HookStatus, decision: HookDecision | None, reason: str, output: str = "") -> HookOutcome:
        shown = scrub(output)[-SHOWN_OUTPUT_CHARS:]
        return HookOutcome(status, decision, scrub(reason), shown, int((time.monotonic() - started) * 1000))

    def failed(status: HookStatus, why: str, output: str = "") -> HookOutcome:
        decision: HookDecision | None = "deny" if hook.on_failure == "deny" else None
        return outcome(status, decision, f"the {hook.event} hook {hook.shown} {why}", output)

    if hook.missing is not None:
        return failed("failed", hook.missing)
    try:
        process = await anyio.open_process(
            list(hook.command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=child_env(os.environ, pass_env),
            start_new_session=True,
        )
    except OSError as exc:
        return failed("failed", f"could not start: {exc.strerror or exc}")
    watch_group(process.pid)
    stdout, stderr = bytearray(), bytearray()
    too_much = False
    timed_out = False
    try:
        with anyio.move_on_after(hook.timeout_s) as deadline:
            async with anyio.create_task_group() as tg:

                async def feed() -> None:
                    assert process.stdin is not None
                    try:
                        # A tool's input may hold a key the model was shown: a hook is a child like any other.
                        await process.stdin.send(scrub(json.dumps(payload)).encode())
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        pass  # a hook need not read its input
                    finally:
                        await process.stdin.aclose()

                async def drain(stream: Any, into: bytearray) -> None:
                    nonlocal too_much
                    async for chunk in stream:
                        into.extend(chunk)
                        if len(into) > MAX_OUTPUT_BYTES:
                            too_much = True
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(feed)
                tg.start_soon(drain, process.stdout, stdout)
                tg.start_soon(drain, process.stderr, stderr)
            if not too_much:
                await process.wait()
        timed_out = deadline.cancelled_caught
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None or too_much:
                await terminate_group(process, KILL_GRACE_S)
            await process.aclose()
            release_group(process.pid)
    out = stdout.decode("utf-8", "replace")
    err = stderr.decode("utf-8", "replace")
    printed = (err + ("\n" if err and out else "") + out).strip()
    if too_much:
        return failed("failed", f"printed more than {MAX_OUTPUT_BYTES} bytes and was stopped", printed[:200])
    if timed_out:
        return failed("timed_out", f"did not finish within {hook.timeout_s:g} s and was killed", printed)
    code = process.returncode
    if code == 2:
        reason = err.strip() or "no reason given"
        return outcome("blocked", "deny", f"the {hook.event} hook {hook.shown} denied it: {reason}", printed)
    if code != 0:
        return failed("failed", f"exited with status {code}", printed)
    if not out.strip():
        return outcome("completed", None, "", printed)
    try:
        answer = json.loads(out)
    except ValueError:
        return failed("failed", 'wrote output that is not JSON (answer with {"decision": …} or nothing)', printed)
    if not isinstance(answer, dict) or answer.get("decision", "allow") not in ("allow", "deny", "ask"):
        return failed("failed", 'answered neither {"decision": "allow" | "deny" | "ask"} nor nothing', printed)
    decision = answer.get("decision")
    why = answer.get("reason")
    reason = why if isinstance(why, str) and why else "no reason given"
    if decision == "deny":
        return outcome("blocked", "deny", f"the {hook.event} hook {hook.shown} denied it: {reason}", printed)
    return outcome("completed", decision, reason if decision else "", printed)
