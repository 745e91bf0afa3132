"""The file tools on real temp dirs: read, write, edit, list, search, and confinement."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from daemon.tools import ToolContext, builtin_tools, execute_tool
from daemon.tools import list_files as list_files_module
from daemon.tools.base import ToolError
from daemon.tools.paths import resolve_in_cwd

pytestmark = pytest.mark.anyio

OUTSIDE = "outside the session's working directory"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A session cwd with a secret next to it and symlinks pointing out of it."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET = 1\n")
    (cwd / "link_dir").symlink_to(outside, target_is_directory=True)
    (cwd / "link_file").symlink_to(outside / "secret.txt")
    (cwd / "dangling").symlink_to(outside / "not_yet.txt")
    (cwd / "hello.py").write_text("print('hello')\n")
    return cwd


async def call(cwd: Path, name: str, **arguments):
    return await execute_tool(builtin_tools(), name, arguments, ToolContext(cwd=cwd))


# --- confinement -----------------------------------------------------------------


def test_resolve_in_cwd_accepts_inside_paths(work: Path) -> None:
    real = Path(os.path.realpath(work))
    assert resolve_in_cwd(work, "hello.py") == real / "hello.py"
    assert resolve_in_cwd(work, "./sub/../hello.py") == real / "hello.py"
    assert resolve_in_cwd(work, str(work / "hello.py")) == real / "hello.py"
    assert resolve_in_cwd(work, "new/dir/file.txt") == real / "new/dir/file.txt"
    assert resolve_in_cwd(work, ".") == real


@pytest.mark.parametrize(
    "path", ["../outside/secret.txt", "link_dir/secret.txt", "link_file", "dangling", "/etc/passwd"]
)
def test_resolve_in_cwd_refuses_escapes(work: Path, path: str) -> None:
    with pytest.raises(ToolError, match=OUTSIDE) as info:
        resolve_in_cwd(work, path)
    assert repr(path) in str(info.value)


def test_resolve_in_cwd_refuses_absolute_path_outside(work: Path) -> None:
    with pytest.raises(ToolError, match=OUTSIDE):
        resolve_in_cwd(work, str(work.parent / "outside" / "secret.txt"))


ESCAPES = [
    ("read_file", {"path": "../outside/secret.txt"}),
    ("read_file", {"path": "ABS_OUTSIDE"}),
    ("read_file", {"path": "link_file"}),
    ("read_file", {"path": "link_dir/secret.txt"}),
    ("write_file", {"path": "../outside/new.txt", "content": "x"}),
    ("write_file", {"path": "ABS_OUTSIDE_NEW", "content": "x"}),
    ("write_file", {"path": "link_dir/new.txt", "content": "x"}),
    ("write_file", {"path": "dangling", "content": "x"}),
    ("edit_file", {"path": "../outside/secret.txt", "old_string": "1", "new_string": "2"}),
    ("edit_file", {"path": "ABS_OUTSIDE", "old_string": "1", "new_string": "2"}),
    ("edit_file", {"path": "link_file", "old_string": "1", "new_string": "2"}),
    ("list_files", {"path": ".."}),
    ("list_files", {"path": "ABS_OUTSIDE_DIR"}),
    ("list_files", {"path": "link_dir"}),
    ("search", {"pattern": "SECRET", "path": "../outside"}),
    ("search", {"pattern": "SECRET", "path": "ABS_OUTSIDE_DIR"}),
    ("search", {"pattern": "SECRET", "path": "link_dir"}),
    ("search", {"pattern": "SECRET", "path": "link_file"}),
]


@pytest.mark.parametrize(("tool", "arguments"), ESCAPES, ids=[f"{t}-{a['path']}" for t, a in ESCAPES])
async def test_every_file_tool_refuses_escapes(work: Path, tool: str, arguments: dict) -> None:
    outside = work.parent / "outside"
    placeholders = {
        "ABS_OUTSIDE": str(outside / "secret.txt"),
        "ABS_OUTSIDE_NEW": str(outside / "new.txt"),
        "ABS_OUTSIDE_DIR": str(outside),
    }
    arguments = {k: placeholders.get(v, v) for k, v in arguments.items()}
    result = await call(work, tool, **arguments)
    assert result.is_error
    assert OUTSIDE in result.text
    assert "SECRET" not in result.text
    # Nothing outside was created or changed.
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "SECRET = 1\n"


async def test_walks_do_not_follow_symlinks_out(work: Path) -> None:
    listing = await call(work, "list_files")
    assert listing.text.splitlines() == ["hello.py"]
    found = await call(work, "search", pattern="SECRET")
    assert not found.is_error
    assert found.text.startswith("no matches")


async def test_symlinks_inside_are_fine(work: Path) -> None:
    (work / "alias.py").symlink_to(work / "hello.py")
    result = await call(work, "read_file", path="alias.py")
    assert result.text == "     1\tprint('hello')"
    listing = await call(work, "list_files", pattern="*.py")
    assert listing.text.splitlines() == ["alias.py", "hello.py"]


# --- read_file -------------------------------------------------------------------


@pytest.fixture
def ten_lines(tmp_path: Path) -> Path:
    (tmp_path / "ten.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    return tmp_path


async def test_read_file_numbers_lines(ten_lines: Path) -> None:
    result = await call(ten_lines, "read_file", path="ten.txt")
    assert not result.is_error
    lines = result.text.splitlines()
    assert lines[0] == "     1\tline 1"
    assert lines[-1] == "    10\tline 10"
    assert len(lines) == 10


async def test_read_file_range_notes_where_to_continue(ten_lines: Path) -> None:
    result = await call(ten_lines, "read_file", path="ten.txt", offset=3, limit=2)
    assert result.text == "     3\tline 3\n     4\tline 4\n[showing lines 3-4 of 10; continue with offset=5]"
    tail = await call(ten_lines, "read_file", path="ten.txt", offset=9, limit=5)
    assert tail.text == "     9\tline 9\n    10\tline 10"


async def test_read_file_offset_past_end_and_bad_arguments(ten_lines: Path) -> None:
    past = await call(ten_lines, "read_file", path="ten.txt", offset=11)
    assert past.is_error and "past the end" in past.text and "10 lines" in past.text
    zero = await call(ten_lines, "read_file", path="ten.txt", offset=0)
    assert zero.is_error and "$.offset" in zero.text


async def test_read_file_truncates_big_files(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text(("x" * 999 + "\n") * 400)  # ~400 KB
    result = await call(tmp_path, "read_file", path="big.txt")
    assert not result.is_error
    assert len(result.text.encode()) < 260 * 1024
    last = result.text.splitlines()[-1]
    assert last.startswith("[output truncated at 256 KiB: showing lines 1-")
    shown = int(last.split("-")[1].split(" ")[0])
    assert last.endswith(f"of 400; continue with offset={shown + 1}]")
    rest = await call(tmp_path, "read_file", path="big.txt", offset=shown + 1)
    assert rest.text.startswith(f"{shown + 1:6}\t")


async def test_read_file_cuts_one_huge_line_on_a_character(tmp_path: Path) -> None:
    (tmp_path / "min.js").write_text("é" * 200_000)  # 400 KB in one line
    result = await call(tmp_path, "read_file", path="min.js")
    assert not result.is_error
    assert result.text.endswith("[line 1 is longer than 256 KiB and was cut]")
    assert "\ufffd" not in result.text


async def test_read_file_refuses_binary_and_non_utf8(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    for name in ("blob.bin", "latin1.txt"):
        result = await call(tmp_path, "read_file", path=name)
        assert result.is_error and "binary" in result.text, result.text


async def test_read_file_missing_empty_and_directory(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "dir").mkdir()
    assert "does not exist" in (await call(tmp_path, "read_file", path="nope.txt")).text
    assert (await call(tmp_path, "read_file", path="empty.txt")).text == "(file 'empty.txt' is empty)"
    assert "is a directory" in (await call(tmp_path, "read_file", path="dir")).text


# --- write_file ------------------------------------------------------------------


async def test_write_file_creates_parents_and_overwrites(tmp_path: Path) -> None:
    created = await call(tmp_path, "write_file", path="a/b/c.txt", content="one\ntwo\n")
    assert not created.is_error
    assert created.text == "created 'a/b/c.txt' (8 bytes, 2 lines)"
    assert (tmp_path / "a/b/c.txt").read_text() == "one\ntwo\n"
    again = await call(tmp_path, "write_file", path=str(tmp_path / "a/b/c.txt"), content="crlf\r\n")
    assert again.text.startswith("overwrote 'a/b/c.txt'")
    assert (tmp_path / "a/b/c.txt").read_bytes() == b"crlf\r\n"  # no newline translation


async def test_write_file_refuses_directories(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("")
    assert "is a directory" in (await call(tmp_path, "write_file", path="d", content="")).text
    under_file = await call(tmp_path, "write_file", path="f/x.txt", content="")
    assert under_file.is_error and "not a directory" in under_file.text


# --- edit_file -------------------------------------------------------------------


async def test_edit_file_replaces_once_and_shows_a_diff(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 2\n")
    result = await call(tmp_path, "edit_file", path="m.py", old_string="return 2", new_string="return 3")
    assert not result.is_error
    assert (tmp_path / "m.py").read_text() == "def f():\n    return 1\n\n\ndef g():\n    return 3\n"
    assert result.text.splitlines() == [
        "edited 'm.py'",
        "--- a/m.py",
        "+++ b/m.py",
        "@@ -3,4 +3,4 @@",
        " ",
        " ",
        " def g():",
        "-    return 2",
        "+    return 3",
    ]


async def test_edit_file_needs_exactly_one_match(tmp_path: Path) -> None:
    original = "x = 1\nx = 1\n"
    (tmp_path / "m.py").write_text(original)
    none = await call(tmp_path, "edit_file", path="m.py", old_string="y = 1", new_string="y = 2")
    assert none.is_error and "0 matches" in none.text
    two = await call(tmp_path, "edit_file", path="m.py", old_string="x = 1", new_string="x = 2")
    assert two.is_error and "occurs 2 times" in two.text
    assert (tmp_path / "m.py").read_text() == original


async def test_edit_file_rejects_no_ops_missing_and_binary(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("a\n")
    (tmp_path / "b.bin").write_bytes(b"a\0b")
    same = await call(tmp_path, "edit_file", path="m.py", old_string="a", new_string="a")
    assert same.is_error and "identical" in same.text
    empty = await call(tmp_path, "edit_file", path="m.py", old_string="", new_string="b")
    assert empty.is_error and "write_file" in empty.text
    missing = await call(tmp_path, "edit_file", path="n.py", old_string="a", new_string="b")
    assert missing.is_error and "does not exist" in missing.text
    binary = await call(tmp_path, "edit_file", path="b.bin", old_string="a", new_string="c")
    assert binary.is_error and "binary" in binary.text


async def test_edit_file_keeps_crlf_endings(tmp_path: Path) -> None:
    (tmp_path / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    result = await call(tmp_path, "edit_file", path="w.txt", old_string="one\ntwo", new_string="1\n2")
    assert not result.is_error, result.text
    assert (tmp_path / "w.txt").read_bytes() == b"1\r\n2\r\n"


# --- list_files ------------------------------------------------------------------


def make_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


async def test_list_files_honours_gitignore_and_skips_git(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            ".gitignore": "*.log\n!keep.log\nbuild/\n/top.txt\n",
            ".git/config": "",
            "a.py": "",
            "debug.log": "",
            "keep.log": "",
            "build/out.o": "",
            "top.txt": "",
            "src/top.txt": "",
            "src/build": "",  # a file named build: 'build/' only ignores directories
            "src/.gitignore": "generated.py\n",
            "src/generated.py": "",
            "src/main.py": "",
        },
    )
    result = await call(tmp_path, "list_files")
    assert result.text.splitlines() == [
        ".gitignore",
        "a.py",
        "keep.log",
        "src/.gitignore",
        "src/build",
        "src/main.py",
        "src/top.txt",
    ]


async def test_list_files_pattern_and_path(tmp_path: Path) -> None:
    make_tree(tmp_path, {"a.py": "", "b.txt": "", "src/c.py": "", "src/deep/d.py": "", "docs/e.py": ""})
    by_name = await call(tmp_path, "list_files", pattern="*.py")
    assert by_name.text.splitlines() == ["a.py", "docs/e.py", "src/c.py", "src/deep/d.py"]
    by_path = await call(tmp_path, "list_files", pattern="src/**/*.py")
    assert by_path.text.splitlines() == ["src/c.py", "src/deep/d.py"]
    top = await call(tmp_path, "list_files", pattern="/*.py")
    assert top.text.splitlines() == ["a.py"]
    under = await call(tmp_path, "list_files", path="src", pattern="deep/*.py")
    assert under.text.splitlines() == ["src/deep/d.py"]
    nothing = await call(tmp_path, "list_files", pattern="*.rs")
    assert not nothing.is_error and nothing.text.startswith("(no files matching '*.rs'")


async def test_list_files_caps_with_a_note(tmp_path: Path) -> None:
    cap = list_files_module.MAX_FILES  # the listing runs in a child process: the real cap
    make_tree(tmp_path, {f"f{i:04}.txt": "" for i in range(cap + 2)})
    lines = (await call(tmp_path, "list_files")).text.splitlines()
    assert lines[:cap] == [f"f{i:04}.txt" for i in range(cap)]
    assert lines[cap] == f"[listing stopped at {cap} files; narrow it with path or pattern]"
    assert len(lines) == cap + 1


async def test_list_files_missing_directory(tmp_path: Path) -> None:
    result = await call(tmp_path, "list_files", path="nope")
    assert result.is_error and "does not exist" in result.text


# --- search ----------------------------------------------------------------------


async def test_search_finds_matches_with_file_and_line(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            ".gitignore": "ignored/\n",
            "a.py": "import os\n\ndef main():\n    os.getcwd()\n",
            "b.txt": "nothing here\n",
            "ignored/c.py": "os.getcwd()\n",
            "sub/d.py": "x = os.getcwd()\n",
        },
    )
    (tmp_path / "blob.bin").write_bytes(b"os.getcwd()\0\0")
    result = await call(tmp_path, "search", pattern=r"os\.getcwd\(")
    assert result.text.splitlines() == ["a.py:4:    os.getcwd()", "sub/d.py:1:x = os.getcwd()"]
    only_sub = await call(tmp_path, "search", pattern="getcwd", path="sub")
    assert only_sub.text == "sub/d.py:1:x = os.getcwd()"
    by_glob = await call(tmp_path, "search", pattern="o", glob="*.txt")
    assert by_glob.text == "b.txt:1:nothing here"
    one_file = await call(tmp_path, "search", pattern="IMPORT", path="a.py", ignore_case=True)
    assert one_file.text == "a.py:1:import os"


async def test_search_caps_matches_and_long_lines(tmp_path: Path) -> None:
    (tmp_path / "many.txt").write_text("hit\n" * 300)
    (tmp_path / "wide.txt").write_text("hit" + "y" * 1000 + "\n")
    result = await call(tmp_path, "search", pattern="hit")
    lines = result.text.splitlines()
    assert len(lines) == 201
    assert lines[0] == "many.txt:1:hit"
    assert lines[-1] == "[stopped after 200 matches; narrow the pattern, glob or path]"
    wide = await call(tmp_path, "search", pattern="hit", path="wide.txt")
    assert wide.text.endswith(" [...]") and len(wide.text) < 400


async def test_search_invalid_regex_is_a_tool_error(tmp_path: Path) -> None:
    result = await call(tmp_path, "search", pattern="(unclosed")
    assert result.is_error
    assert result.text.startswith("invalid regular expression '(unclosed'")


async def test_search_is_cancellable_mid_walk(tmp_path: Path) -> None:
    import time

    # A line a catastrophic pattern never finishes with: the search runs until cancelled.
    make_tree(tmp_path, {f"d{i}/f{j}.txt": "a" * 35 + "!\n" for i in range(5) for j in range(5)})
    started = time.monotonic()
    with anyio.move_on_after(0.5) as scope:
        await call(tmp_path, "search", pattern="(a+)+$")
    assert scope.cancelled_caught
    assert time.monotonic() - started < 2
