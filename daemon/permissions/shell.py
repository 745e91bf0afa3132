"""A shell command line cut into every command it runs, for the permission rules.

Parsed with tree-sitter's bash grammar (``tree-sitter-bash``): a maintained, error-tolerant
parser whose tree marks what it could not parse (``has_error``), so a line the grammar does
not understand is known as such instead of being half-read. Every ``command`` node of the
tree is a command that runs: those joined by ``&& || ; | |& &`` or newlines, in subshells,
groups, functions, loops and conditions, inside ``$(…)``, backticks, ``<(…)`` and here-docs.
Then, per command:

- ``env VAR=x``, ``timeout N``, ``nice``, ``nohup``, ``command``, ``exec``, ``time`` and
  ``builtin`` are looked through: only the command they run is judged;
- ``sh -c``/``bash -c`` (and ``dash``, ``zsh``, ``ksh``, ``eval``) strings are parsed in turn
  and their commands judged instead;
- ``xargs CMD`` and ``find … -exec CMD … ;`` are judged as themselves *and* as ``CMD``;
- ``sudo``, ``doas``, ``stdbuf``, ``setsid`` and the like are judged as themselves, and every
  tail of their words that could be the command they run is a *guess* that deny and ask
  rules see (so ``sudo -u x rm -rf /`` meets a ``rm`` deny rule) but that allow rules need
  not cover.

A word is known (its text after quote removal) or not (``None``): expansions, ``$'…'``,
unquoted globs and brace expansions are only known when the command runs. A command whose
name is not known, or a ``sh -c`` whose string is not, makes the line *opaque*. What a rule
can never allow (``CommandLine.not_allowable``): a line that does not parse, an opaque one,
command or process substitution, and a redirection to a path outside the ``cwd``
(resolved like the file tools' confinement, ``daemon.tools.paths``).
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import msgspec

from daemon.tools.base import ToolError
from daemon.tools.paths import resolve_in_cwd

__all__ = ["Command", "CommandLine", "parse_command_line"]

Word = str | None  # None: known only when the command runs

MAX_NESTING = 6  # sh -c "sh -c '…'" deeper than this is opaque
MAX_LINE_CHARS = 256 * 1024  # longer lines are not parsed (and so never allowed by a rule)

# Wrappers that run their argument as the command, judged through (PROTOCOL.md, plus the
# shell's own exec/time/builtin, which do the same).
_TRANSPARENT = {"env", "timeout", "nice", "nohup", "command", "exec", "time", "builtin"}
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox-sh"}
# Programs that run another command with privileges or settings of their own: judged as
# themselves, and their possible commands are guesses for deny and ask rules.
_RUNNERS = {"sudo", "doas", "stdbuf", "setsid", "ionice", "chrt", "taskset", "unbuffer", "flock", "chroot", "nsenter"}
_HARMLESS_TARGETS = {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"}
_GLOB = re.compile(r"[*?\[]")
_BRACE = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")


class Command(msgspec.Struct, frozen=True):
    """One command of a line, wrappers removed: its words (``None`` where unknown)."""

    words: tuple[Word, ...]
    # A guess at what a runner (sudo, doas, …) runs: deny and ask rules see it, allow rules need not.
    guessed: bool = False

    @property
    def name(self) -> Word:
        return self.words[0] if self.words else None

    def text(self) -> str:
        return " ".join(w if w is not None else "…" for w in self.words)


class CommandLine(msgspec.Struct):
    """A command line as the rules see it."""

    source: str
    commands: list[Command] = msgspec.field(default_factory=list)
    parsed: bool = True
    opaque: bool = False  # a command name or a ``sh -c`` string known only when it runs
    substitution: bool = False  # ``$(…)``, backticks or ``<(…)``/``>(…)``
    outside_redirects: list[str] = msgspec.field(default_factory=list)  # redirection targets outside the cwd

    @property
    def not_allowable(self) -> str | None:
        """Why no rule may allow this line, or None when one may."""
        if not self.parsed:
            return "the command line does not parse"
        if self.opaque:
            return "a command (or a sh -c string) is only known when the line runs"
        if self.substitution:
            return "it has a command substitution ($(…), backticks or <(…))"
        if self.outside_redirects:
            return f"it redirects to {self.outside_redirects[0]}, outside the working directory"
        return None

    @property
    def first(self) -> Command | None:
        """The first command in source order (wrappers removed), not a guess."""
        return next((c for c in self.commands if not c.guessed and c.words), None)


@functools.cache
def _parser() -> Any:
    # Loaded on first use: the daemon's start-up path does not need the grammar.
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def parse_command_line(source: str, cwd: Path) -> CommandLine:
    """Every command ``source`` runs, and what keeps a rule from allowing it."""
    line = CommandLine(source=source)
    _Reader(line, cwd).read(source, 0)
    return line


class _Reader:
    def __init__(self, line: CommandLine, cwd: Path) -> None:
        self.line = line
        self.cwd = cwd

    def read(self, source: str, depth: int) -> None:
        if depth > MAX_NESTING or len(source) > MAX_LINE_CHARS or "\0" in source:
            self.line.parsed = False
            return
        try:
            tree = _parser().parse(source.encode("utf-8", "surrogatepass"))
        except (ValueError, UnicodeError):
            self.line.parsed = False
            return
        if tree.root_node.has_error:
            self.line.parsed = False  # the commands that did parse are still judged by deny and ask rules
        self._walk(tree.root_node, depth)

    def _walk(self, node: Any, depth: int) -> None:
        kind = node.type
        if kind in ("command_substitution", "process_substitution"):
            self.line.substitution = True
        elif kind == "command":
            self._command(node, depth)
        elif kind in ("declaration_command", "unset_command"):
            # export/declare/local/readonly/unset: a builtin, judged by its words.
            words = [_keyword(node)] + [_value(c) for c in node.named_children if c.type != "variable_assignment"]
            self.line.commands.append(Command(tuple(words)))
        elif kind == "file_redirect":
            self._redirect(node)
        for child in node.children:
            self._walk(child, depth)

    def _command(self, node: Any, depth: int) -> None:
        words: list[Word] = []
        for child in node.named_children:
            if child.type in ("variable_assignment", "file_redirect", "herestring_redirect", "heredoc_redirect"):
                continue
            if child.type == "command_name":
                words.append(_value(child.named_children[0]) if child.named_children else None)
            else:
                words.append(_value(child))
        if not words:
            return  # only assignments or redirections
        self._judge(words, depth, guessed=False)

    def _judge(self, words: list[Word], depth: int, guessed: bool) -> None:
        """Record the command ``words`` runs, through wrappers."""
        words = _through_wrappers(words)
        if not words:
            return
        name = words[0]
        if name is None:
            if not guessed:
                self.line.opaque = True
            self.line.commands.append(Command(tuple(words), guessed))
            return
        base = os.path.basename(name)
        if base in _SHELLS or base == "eval":
            script = _shell_script(words) if base != "eval" else _eval_script(words)
            if script is not None:
                if isinstance(script, str):
                    self.read(script, depth + 1)
                elif not guessed:
                    self.line.opaque = True  # a -c string known only when it runs
                return
        self.line.commands.append(Command(tuple(words), guessed))
        if base == "xargs":
            inner = _xargs_command(words)
            if inner:
                self._judge(inner, depth, guessed)
        elif base == "find":
            for inner in _find_commands(words):
                self._judge(inner, depth, guessed)
        elif base in _RUNNERS:
            for start in range(1, len(words)):
                word = words[start]
                if word is None or not word.startswith("-"):
                    self._judge(list(words[start:]), depth, guessed=True)

    def _redirect(self, node: Any) -> None:
        operator = next((c.type for c in node.children if not c.is_named), "")
        targets = [c for c in node.named_children if c.type != "file_descriptor"]
        if not targets:
            return
        target = _value(targets[-1])
        if operator in (">&", "<&", ">&-", "<&-") and (target is None or target == "-" or target.isdigit()):
            if target is None:
                self.line.outside_redirects.append(targets[-1].text.decode(errors="replace"))
            return  # 2>&1, >&2: another descriptor, not a file
        if target is None or target.startswith("~"):
            self.line.outside_redirects.append(targets[-1].text.decode(errors="replace"))
            return
        if target in _HARMLESS_TARGETS:
            return
        try:
            resolve_in_cwd(self.cwd, target)  # the file tools' confinement: .., symlinks, absolute paths
        except ToolError:
            self.line.outside_redirects.append(target)


def _keyword(node: Any) -> str:
    first = node.children[0] if node.children else None
    return first.type if first is not None else "declare"


def _value(node: Any) -> Word:
    """The text of a word after quote removal, or None when it is only known when it runs."""
    kind = node.type
    text = node.text.decode("utf-8", "surrogateescape")
    if kind == "word":
        if _GLOB.search(text.replace("\\*", "").replace("\\?", "").replace("\\[", "")) or _BRACE.search(text):
            return None
        return _unescape(text)
    if kind == "number":
        return text
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        parts = []
        for child in node.named_children:
            if child.type != "string_content":
                return None  # an expansion inside double quotes
            parts.append(child.text.decode("utf-8", "surrogateescape"))
        # Inside double quotes a backslash escapes only $ ` " \ and a newline.
        return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), "".join(parts))
    if kind == "concatenation":
        if _BRACE.search(text):
            return None
        values = [_value(child) for child in node.named_children]
        if any(v is None for v in values):
            return None
        return "".join(v for v in values if v is not None)
    return None  # $VAR, ${…}, $(…), $'…', $"…", arithmetic


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text.replace("\\\n", ""), flags=re.DOTALL)


def _through_wrappers(words: list[Word]) -> list[Word]:
    """``words`` with the transparent wrappers (env, timeout, nice, …) taken off."""
    while words and words[0] is not None and os.path.basename(words[0]) in _TRANSPARENT:
        base = os.path.basename(words[0])
        rest = words[1:]
        if base == "command" and any(w in ("-v", "-V") for w in rest[:2]):
            return words  # command -v X only looks X up
        inner = _wrapped(base, rest)
        if inner is None:
            return words  # the wrapper alone (env prints the environment): judged as itself
        words = inner
    return words


# Options that take a value, per wrapper (short ones; long ones are --opt=value).
_OPTION_VALUES = {
    "env": {"-u", "-C", "-S", "--unset", "--chdir", "--split-string"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"},
    "nice": {"-n", "--adjustment"},
    "exec": {"-a"},
    "xargs": {"-I", "-i", "-n", "-P", "-L", "-l", "-d", "-E", "-e", "-s", "-a", "--max-args", "--max-procs"},
}


def _wrapped(base: str, rest: list[Word]) -> list[Word] | None:
    values = _OPTION_VALUES.get(base, set())
    i = 0
    while i < len(rest):
        word = rest[i]
        if word is None:
            return rest[i:]  # an unknown word where the command may start: judge from here
        if word == "--":
            i += 1
            break
        if base == "env" and "=" in word and not word.startswith("-"):
            i += 1  # VAR=value
            continue
        if base == "nice" and re.fullmatch(r"-\d+", word):
            i += 1
            continue
        if word.startswith("-") and word != "-":
            if base == "env" and word in ("-S", "--split-string"):
                # env -S "cmd args": the string is split into words like a shell would.
                return [None]
            i += 2 if word in values else 1
            continue
        break
    if base == "timeout" and i < len(rest):
        i += 1  # the duration
    return rest[i:] or None


def _shell_script(words: list[Word]) -> str | bool | None:
    """A shell's ``-c`` string; None without ``-c`` (it runs a script or reads stdin, judged
    as itself); False when the string is only known when it runs."""
    i = 1
    while i < len(words):
        word = words[i]
        if word is None:
            return False
        if word == "--" or not word.startswith(("-", "+")):
            return None
        if word.startswith("--"):
            i += 2 if word in ("--rcfile", "--init-file") else 1
            continue
        if "c" in word[1:]:
            script = words[i + 1] if i + 1 < len(words) else None
            return script if script is not None else False
        i += 2 if word[1:] in ("o", "O") else 1
    return None


def _eval_script(words: list[Word]) -> str | bool:
    if any(w is None for w in words[1:]):
        return False
    return " ".join(w for w in words[1:] if w is not None)


def _xargs_command(words: list[Word]) -> list[Word]:
    return _wrapped("xargs", words[1:]) or ["echo"]


def _find_commands(words: list[Word]) -> list[list[Word]]:
    commands = []
    i = 1
    while i < len(words):
        if words[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(words) and words[j] not in (";", "+"):
                j += 1
            if j > i + 1:
                commands.append(list(words[i + 1 : j]))
            i = j
        i += 1
    return commands
