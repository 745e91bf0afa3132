"""The file tools against hostile trees and patterns (issue #15): catastrophic regexes and
globs, names that are not UTF-8, symlink swaps racing the confinement check, hard links
out of the tree, FIFOs, symlink loops and huge files. No tool may block the event loop or
end a turn with an internal error.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar, Self

import anyio
import pytest

from daemon.tools import ToolContext, ToolResult, builtin_tools, execute_tool
from daemon.tools.base import Tool, ToolArgs
from daemon.tools.edit_file import MAX_EDIT_BYTES
from tests.agent.test_agent_tools import run_prompt, script, start, tool_ends
from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio

# (a+)+$ backtracks 2**n ways over n 'a's and a '!': ~6 s at n=27 on a fast machine, forever at 35.
CATASTROPHIC = "(a+)+$"


async def call(cwd: Path, name: str, *, time_limit_s: float = 30.0, **arguments) -> ToolResult:
    return await execute_tool(builtin_tools(time_limit_s), name, arguments, ToolContext(cwd=cwd))


class LoopWatch:
    """The longest the event loop went without running a 10 ms ticker, while it watched."""

    def __init__(self) -> None:
        self.longest = 0.0

    async def run(self) -> None:
        last = time.monotonic()
        while True:
            await anyio.sleep(0.01)
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now


# --- no tool blocks the event loop ---------------------------------------------------


async def test_catastrophic_search_stops_at_its_time_limit_and_never_blocks_the_loop(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a" * 27 + "!\n")
    watch = LoopWatch()
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch.run)
        result = await call(tmp_path, "search", time_limit_s=1.0, pattern=CATASTROPHIC)
        tg.cancel_scope.cancel()
    took = time.monotonic() - started
    assert result.is_error
    assert "time limit of 1 s" in result.text and "(a+)+" in result.text
    assert took < 5, f"the search took {took:.1f} s"
    assert watch.longest < 0.5, f"the event loop stalled for {watch.longest:.2f} s"


async def test_catastrophic_gitignore_glob_stops_list_files_at_its_time_limit(tmp_path: Path) -> None:
    # A glob is a regex too: '*a' seven times over a name of 60 'a's backtracks for ~7 s (8 times: minutes).
    (tmp_path / ".gitignore").write_text("*a*a*a*a*a*a*a*b\n")
    (tmp_path / ("a" * 60)).write_text("")
    watch = LoopWatch()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch.run)
        listing = await call(tmp_path, "list_files", time_limit_s=1.0)
        tg.cancel_scope.cancel()
    assert listing.is_error and "time limit of 1 s" in listing.text
    assert watch.longest < 0.5, f"the event loop stalled for {watch.longest:.2f} s"


async def test_a_cancelled_search_leaves_no_child_running(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a" * 35 + "!\n")
    before = _scan_children()
    with anyio.move_on_after(1.0):
        await call(tmp_path, "search", pattern=CATASTROPHIC)
    assert _scan_children() == before


def _scan_children() -> set[int]:
    """Our own live child processes running a list_files/search scan (Linux /proc)."""
    found = set()
    if not Path("/proc").is_dir():
        return found
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit():
                continue
            status = (proc / "stat").read_text()
            ppid = int(status.rsplit(")", 1)[1].split()[1])
            state = status.rsplit(")", 1)[1].split()[0]
            if ppid == os.getpid() and state != "Z" and b"daemon.tools.child" in (proc / "cmdline").read_bytes():
                found.add(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


async def test_search_keeps_python_regex_syntax(tmp_path: Path) -> None:
    # Lookarounds and backreferences (which RE2 lacks) still work in the child.
    (tmp_path / "a.py").write_text("foo_bar = 1\nfoo_baz = foo_baz\n")
    result = await call(tmp_path, "search", pattern=r"(\w+) = \1")
    assert result.text == "a.py:2:foo_baz = foo_baz"
    ahead = await call(tmp_path, "search", pattern=r"foo_(?=bar)")
    assert ahead.text == "a.py:1:foo_bar = 1"


async def test_read_file_deep_in_a_huge_file_is_cancellable(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with big.open("wb") as file:
        file.write(b"line\n" * 2000)
        file.truncate(64 * 1024**3)  # sparse: 64 GiB of NUL after the text
    started = time.monotonic()
    with anyio.move_on_after(0.3) as scope:
        await call(tmp_path, "read_file", path="big.txt", offset=10**9)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 2


async def test_read_file_of_a_huge_file_does_not_count_all_its_lines(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with big.open("wb") as file:
        file.write(b"line\n" * 2000)
        file.truncate(64 * 1024**3)
    started = time.monotonic()
    result = await call(tmp_path, "read_file", path="big.txt", limit=2)
    assert time.monotonic() - started < 2
    assert result.text == "     1\tline\n     2\tline\n[showing lines 1-2; continue with offset=3]"


async def test_edit_file_refuses_a_file_too_big_to_load(tmp_path: Path) -> None:
    with (tmp_path / "big.txt").open("wb") as file:
        file.write(b"x = 1\n")
        file.truncate(MAX_EDIT_BYTES + 1)
    result = await call(tmp_path, "edit_file", path="big.txt", old_string="x = 1", new_string="x = 2")
    assert result.is_error and "only edits files up to 32 MiB" in result.text


# --- odd names and contents never end a turn -----------------------------------------


@pytest.fixture
def odd_names(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "plain.txt").write_text("needle\n")
    with open(os.path.join(os.fsencode(work), b"caf\xe9.txt"), "wb") as file:  # Latin-1, not UTF-8
        file.write(b"needle\n")
    (work / "two\nlines.txt").write_text("needle\n")
    return work


async def test_list_files_shows_non_utf8_and_control_names_escaped(odd_names: Path) -> None:
    result = await call(odd_names, "list_files")
    assert not result.is_error
    result.text.encode("utf-8")  # valid UTF-8: never raises
    lines = result.text.splitlines()
    assert lines[:3] == ["caf\\xe9.txt", "plain.txt", "two\\nlines.txt"]
    assert lines[3].startswith("[2 name(s) are not valid UTF-8 or contain control characters")


async def test_search_shows_non_utf8_names_escaped(odd_names: Path) -> None:
    result = await call(odd_names, "search", pattern="needle")
    assert not result.is_error
    result.text.encode("utf-8")
    assert result.text.splitlines()[:3] == ["caf\\xe9.txt:1:needle", "plain.txt:1:needle", "two\\nlines.txt:1:needle"]


async def test_a_non_utf8_name_does_not_end_the_turn(home: Path, odd_names: Path) -> None:
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, odd_names)
        events = await run_prompt(client, session_id, script(("list_files", {}), ("search", {"pattern": "needle"})))
    assert events[-1]["type"] == "turn_end" and events[-1]["stop_reason"] == "end_turn", events[-1]
    ends = tool_ends(events)
    assert [e["is_error"] for e in ends] == [False, False]
    assert "caf\\xe9.txt" in ends[0]["result"] and "caf\\xe9.txt:1:needle" in ends[1]["result"]


class _Surrogates(Tool[ToolArgs]):
    name: ClassVar[str] = "surrogates"
    description: ClassVar[str] = "returns text with a lone surrogate"
    Args: ClassVar[type[ToolArgs]] = ToolArgs

    async def run(self, args: ToolArgs, ctx: ToolContext) -> ToolResult:
        return ToolResult("file caf\udce9.txt and \ud800")


async def test_execute_tool_always_returns_valid_utf8(tmp_path: Path) -> None:
    result = await execute_tool({"surrogates": _Surrogates()}, "surrogates", {}, ToolContext(cwd=tmp_path))
    assert result.text == "file caf\\xe9.txt and \\ud800"


# --- FIFOs, symlink loops, unreadable directories --------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
async def test_fifos_never_block_a_tool(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    os.mkfifo(tmp_path / ".gitignore")  # read by every walk: a blocking open would hang it forever
    (tmp_path / "a.txt").write_text("hello\n")
    with anyio.fail_after(20):
        listing = await call(tmp_path, "list_files")
        found = await call(tmp_path, "search", pattern="hello")
        read = await call(tmp_path, "read_file", path="pipe")
        written = await call(tmp_path, "write_file", path="pipe", content="x")
        edited = await call(tmp_path, "edit_file", path="pipe", old_string="a", new_string="b")
    assert listing.text == "a.txt"
    assert found.text == "a.txt:1:hello"
    for result in (read, written, edited):
        assert result.is_error and "not a regular file" in result.text, result.text


async def test_symlink_loops_are_errors_not_hangs(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "ping").symlink_to("pong")
    (tmp_path / "pong").symlink_to("ping")
    (tmp_path / "a.txt").write_text("hello\n")
    with anyio.fail_after(20):
        listing = await call(tmp_path, "list_files")
        found = await call(tmp_path, "search", pattern="hello")
        results = [await call(tmp_path, "read_file", path=name) for name in ("loop", "ping")]
        results.append(await call(tmp_path, "write_file", path="loop", content="x"))
        results.append(await call(tmp_path, "edit_file", path="ping", old_string="a", new_string="b"))
    assert listing.text == "a.txt"
    assert found.text == "a.txt:1:hello"
    for result in results:
        assert result.is_error and not result.text.startswith("internal error"), result.text
    assert (tmp_path / "loop").is_symlink() and (tmp_path / "ping").is_symlink()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads unreadable directories")
async def test_unreadable_directories_are_skipped_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "closed").mkdir()
    (tmp_path / "closed" / "x.txt").write_text("hello\n")
    (tmp_path / "a.txt").write_text("hello\n")
    (tmp_path / "closed").chmod(0)
    try:
        listing = await call(tmp_path, "list_files")
    finally:
        (tmp_path / "closed").chmod(0o755)
    assert listing.text.splitlines() == ["a.txt", "[skipped 1 director(ies) that could not be read]"]


# --- confinement against races and hard links --------------------------------------------


def _exchanger():
    """``exchange(a, b)``: swap two paths atomically (renameat2 RENAME_EXCHANGE), or None."""
    if sys.platform != "linux":
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return None
    at_fdcwd, rename_exchange = -100, 2

    def exchange(a: Path, b: Path) -> None:
        if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")

    return exchange


class Swapper:
    """A thread that keeps swapping a real directory with a symlink to one outside."""

    def __init__(self, a: Path, b: Path) -> None:
        exchange = _exchanger()
        if exchange is None:
            pytest.skip("needs renameat2(RENAME_EXCHANGE) (Linux)")
        self.exchange = exchange
        self.a, self.b = a, b
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.exchange(self.a, self.b)
            self.swaps += 1

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.fixture
def racy(tmp_path: Path) -> tuple[Path, Path]:
    """``work/d`` (a directory) and ``work/l`` (a symlink to ``outside``), each with f.txt and e.txt."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "d").mkdir(parents=True)
    outside.mkdir()
    for directory, word in ((work / "d", "INSIDE"), (outside, "SECRET")):
        (directory / "f.txt").write_text(f"{word}\n")
        (directory / "e.txt").write_text(f"{word} A\n")
    (work / "l").symlink_to(outside, target_is_directory=True)
    return work, outside


CALLS = 150


async def test_symlink_swaps_never_let_a_file_tool_escape(racy: tuple[Path, Path]) -> None:
    work, outside = racy
    outside_before = {p.name: p.read_text() for p in outside.iterdir()}
    results: list[ToolResult] = []
    with Swapper(work / "d", work / "l") as swapper:
        for i in range(CALLS):
            results.append(await call(work, "read_file", path="d/f.txt"))
            results.append(await call(work, "write_file", path="d/f.txt", content=f"INSIDE {i}\n"))
            old, new = ("A", "B") if i % 2 == 0 else ("B", "A")
            results.append(await call(work, "edit_file", path="d/e.txt", old_string=old, new_string=new))
    assert swapper.swaps > CALLS, "the race was not exercised"
    assert not [r.text for r in results if "SECRET" in r.text]
    assert {p.name: p.read_text() for p in outside.iterdir()} == outside_before, "a write escaped"
    assert not [r.text for r in results if r.text.startswith("internal error")]
    assert any(not r.is_error for r in results), "no call ever succeeded: the test proves nothing"


async def test_symlink_swaps_never_let_a_search_escape(racy: tuple[Path, Path]) -> None:
    work, _ = racy
    found: list[ToolResult] = []
    with Swapper(work / "d", work / "l"):
        for _ in range(25):
            found.append(await call(work, "search", pattern="SECRET|INSIDE"))
    # A hit reads 'd/f.txt:1:SECRET' (the pattern itself is echoed when nothing matches).
    assert not [r.text for r in found if ":SECRET" in r.text]
    assert any(":INSIDE" in r.text for r in found)


async def test_write_and_edit_refuse_a_hard_link_out_of_the_tree(tmp_path: Path) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET = 1\n")
    os.link(outside / "secret.txt", work / "linked.txt")
    edited = await call(work, "edit_file", path="linked.txt", old_string="1", new_string="2")
    written = await call(work, "write_file", path="linked.txt", content="overwritten\n")
    for result in (edited, written):
        assert result.is_error
        assert "'linked.txt' has 2 hard links" in result.text and "cp 'linked.txt'" in result.text
    assert (outside / "secret.txt").read_text() == "SECRET = 1\n"
    assert (work / "linked.txt").read_text() == "SECRET = 1\n"
    # Following the advice breaks the link; then the edit works and only touches the copy.
    await anyio.run_process(
        ["sh", "-c", "cp 'linked.txt' 'linked.txt.copy' && mv 'linked.txt.copy' 'linked.txt'"], cwd=work
    )
    assert not (await call(work, "edit_file", path="linked.txt", old_string="1", new_string="2")).is_error
    assert (outside / "secret.txt").read_text() == "SECRET = 1\n"


async def test_writes_are_atomic_and_keep_the_mode(tmp_path: Path) -> None:
    script_path = tmp_path / "run.sh"
    script_path.write_text("echo one\n")
    script_path.chmod(0o750)
    assert not (await call(tmp_path, "edit_file", path="run.sh", old_string="one", new_string="two")).is_error
    assert not (await call(tmp_path, "write_file", path="run.sh", content="echo three\n")).is_error
    assert script_path.read_text() == "echo three\n"
    assert script_path.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.sh"], "a temporary file was left behind"


# --- edit_file's diff stays small and fast on big files ----------------------------------


async def test_edit_file_diff_of_a_big_repetitive_file_is_the_change_only(tmp_path: Path) -> None:
    # Diffing whole files, difflib's heuristics showed a 64 KiB diff for this one changed line.
    (tmp_path / "big.txt").write_text("same\n" * 500_000 + "unique\n" + "same\n" * 500_000)
    result = await call(tmp_path, "edit_file", path="big.txt", old_string="unique", new_string="changed")
    assert result.text == (
        "edited 'big.txt'\n--- a/big.txt\n+++ b/big.txt\n@@ -499998,7 +499998,7 @@\n"
        " same\n same\n same\n-unique\n+changed\n same\n same\n same\n"
    )


def test_change_diff_equals_the_whole_file_diff() -> None:
    import random

    from daemon.tools.edit_file import change_diff, unified_diff

    rng = random.Random(15)
    checked = 0
    while checked < 500:
        text = "\n".join(f"l{rng.randint(0, 1000)}" for _ in range(rng.randint(1, 30))) + rng.choice(["", "\n"])
        at = rng.randrange(len(text))
        old = text[at : rng.randint(at + 1, min(len(text), at + 20))]
        new = rng.choice(["", "X", "Y\nZ", "\n", "q\n", "\nq"])
        if text.count(old) != 1 or new == old:
            continue
        after = text[:at] + new + text[at + len(old) :]
        assert change_diff(text, at, old, new, "f") == unified_diff(text, after, "f"), (text, old, new)
        checked += 1
