"""The permission prompt of ``ponder ask``: before a tool changes anything, the person at the
terminal sees what it will do and answers with one of the answers the daemon offered (once,
session, always here, no, deny always), seeing the rule a session or "always" answer keeps.

An edit or a write shows the unified diff it would make to the file as it is now (red and green
on a colour terminal), a command shows its command line, any other tool its arguments; long
ones are cut to a screenful, saying how much was left out. The answer is read from the
terminal itself (``/dev/tty``), so a prompt piped into ``ponder ask`` does not answer it.
"""

import difflib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio

from daemon.cli.terminal import BOLD, CYAN, DIM, GREEN, RED, Style, terminal_width
from daemon.jsonrpc.client import RpcClient

MAX_LINES = 40  # of a diff or a command shown in the prompt
MAX_PREVIEW_BYTES = 2 * 1024 * 1024  # a larger file is not read to show a diff
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_KEYS = {"y": "allow_once", "s": "allow_session", "a": "allow_always", "n": "deny", "d": "deny_always"}
_LABELS = {"y": "[y]es once", "s": "[s]ession", "a": "[a]lways here", "n": "[N]o", "d": "[d]eny always"}


class PermissionPrompt:
    """Answers the daemon's ``permission/request``s by asking the person at the terminal."""

    def __init__(self) -> None:
        self.client: RpcClient | None = None  # to read a session's cwd (set once connected)
        self._cwds: dict[str, str] = {}

    async def answer(self, method: str, params: Any) -> Any:
        if method != "permission/request":
            raise ValueError(f"unexpected request {method}")
        cwd = await self._cwd(params["session_id"])
        sys.stderr.write(prompt_text(params, cwd, sys.stderr))
        sys.stderr.flush()
        answer = (await read_line_from_terminal()).strip().lower()[:1]
        return {"decision": _KEYS[answer] if answer in offered_keys(params) else "deny"}

    async def _cwd(self, session_id: str) -> str:
        if session_id not in self._cwds and self.client is not None:
            got = await self.client.request("session/get", {"session_id": session_id})
            self._cwds[session_id] = got["session"]["cwd"]
        return self._cwds.get(session_id, os.getcwd())


def offered_keys(params: dict[str, Any]) -> list[str]:
    """The keys of the answers the daemon offered (a call no rule can be made from offers once or no)."""
    return [key for key, decision in _KEYS.items() if decision in params.get("options", [])]


async def read_line_from_terminal() -> str:
    """One line typed at the terminal (``/dev/tty``), read without blocking the event loop, so that a
    Ctrl-C or the end of the turn cancels the wait at once. An empty string at end of input."""
    fd = os.open("/dev/tty", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        typed = b""
        while not typed.endswith(b"\n"):
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 1024)
            except BlockingIOError:
                continue
            if not chunk:
                break
            typed += chunk
        return typed.decode(errors="replace")
    finally:
        os.close(fd)


def prompt_text(params: dict[str, Any], cwd: str, stream: Any) -> str:
    """The whole prompt: the title, what the tool will do, and the question."""
    style = Style(stream)
    width = terminal_width(stream) or 120
    body = [_cut(line, width) for line in what_it_does(params["tool"], params["arguments"], cwd, style)]
    rule = params.get("suggested_rule") or {}
    words = [w if isinstance(w, str) else "{" + ",".join(w) + "}" for w in rule.get("pattern") or []]
    what = " ".join(words) or rule.get("path") or ""
    reason = f" ({params['reason']})" if params.get("reason") else ""
    kept = [style(DIM, f"(session/always keep the rule: {rule.get('tool')} {what})")] if what else []
    question = f"Allow? {' / '.join(_LABELS[key] for key in offered_keys(params))}: "
    return "\n" + "\n".join([style(BOLD, params["title"]) + reason, *body, *kept, question])


def what_it_does(tool: str, arguments: dict[str, Any], cwd: str, style: Style) -> list[str]:
    """The lines that show what ``tool`` will do with ``arguments``."""
    if tool == "edit_file" and isinstance(arguments.get("path"), str):
        before = _read(cwd, arguments["path"])
        old, new = str(arguments.get("old_string", "")), str(arguments.get("new_string", ""))
        if before is not None and before.count(old) == 1:
            after = before.replace(old, new, 1)
        else:  # the edit will fail or the file cannot be read: show the replacement itself
            before, after = old, new
        return _diff(arguments["path"], before, after, style)
    if tool == "write_file" and isinstance(arguments.get("path"), str):
        before = _read(cwd, arguments["path"])
        created = not Path(cwd, arguments["path"]).exists()
        lines = _diff(arguments["path"], before or "", str(arguments.get("content", "")), style, new=created)
        return lines or [style(DIM, "(the file's content stays the same)")]
    if tool == "run_command" and isinstance(arguments.get("command"), str):
        command = arguments["command"].splitlines() or [""]
        shown = [f"$ {command[0]}", *(f"  {line}" for line in command[1:])]
        return [style(BOLD, line) for line in _limit(shown)] + [style(DIM, f"in {cwd}")]
    return _limit(json.dumps(arguments, ensure_ascii=False, indent=2).splitlines())


def _diff(path: str, before: str, after: str, style: Style, *, new: bool = False) -> list[str]:
    lines = list(
        difflib.unified_diff(
            before.splitlines(),
            after.splitlines(),
            fromfile="/dev/null" if new else f"a/{path}",
            tofile=f"b/{path}",
            lineterm="",
        )
    )
    painted = []
    for line in _limit(lines):
        if line.startswith(("---", "+++")):
            painted.append(style(BOLD, line))
        elif line.startswith("@@"):
            painted.append(style(CYAN, line))
        elif line.startswith("-"):
            painted.append(style(RED, line))
        elif line.startswith("+"):
            painted.append(style(GREEN, line))
        else:
            painted.append(line)
    return painted


def _limit(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_LINES:
        return lines
    return [*lines[: MAX_LINES - 1], f"… {len(lines) - (MAX_LINES - 1)} more lines"]


def _cut(line: str, width: int) -> str:
    """One screen line: a longer one is cut with ``…`` (its colour kept around the cut text)."""
    plain = _ANSI.sub("", line)
    if len(plain) <= width:
        return line
    cut = plain[: width - 1] + "…"
    return line.replace(plain, cut, 1) if plain in line else cut


def _read(cwd: str, path: str) -> str | None:
    """The file as it is now, or None when it does not exist or cannot be shown."""
    target = Path(cwd, path)
    try:
        if target.stat().st_size > MAX_PREVIEW_BYTES:
            return None
        return target.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
