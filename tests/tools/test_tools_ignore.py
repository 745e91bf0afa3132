"""Globs and .gitignore rules, checked against hand-written cases and against git itself."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from daemon.tools.ignore import GitIgnore, compile_glob
from daemon.tools.walk import walk_files


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "dir/a.py", False),  # '*' never crosses '/'
        ("**/*.py", "a.py", True),
        ("**/*.py", "x/y/a.py", True),
        ("src/**", "src/a/b", True),
        ("src/**", "src", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/xb", False),
        ("?.txt", "a.txt", True),
        ("?.txt", "ab.txt", False),
        ("[abc].txt", "b.txt", True),
        ("[!abc].txt", "b.txt", False),
        ("[a-c]x", "cx", True),
        ("[[]x", "[x", True),
        ("a[/]b", "a/b", False),
        (r"\*.txt", "*.txt", True),
        (r"\*.txt", "a.txt", False),
        ("a.b", "axb", False),  # regex metacharacters are literal
    ],
)
def test_glob(glob: str, path: str, matches: bool) -> None:
    assert (compile_glob(glob).fullmatch(path) is not None) is matches


def test_gitignore_rules() -> None:
    ignore = GitIgnore().with_file(
        "",
        "# comment\n\n*.log\n!keep.log\nbuild/\n/only_root.txt\ndocs/**/*.tmp\n\\#hash\ntrailing   \n",
    )
    nested = ignore.with_file("sub", "!*.log\nlocal/\n")
    cases = {
        ("a.log", False): True,
        ("keep.log", False): False,
        ("dir/a.log", False): True,
        ("build", True): True,
        ("build", False): False,  # dir-only pattern
        ("x/build", True): True,
        ("only_root.txt", False): True,
        ("x/only_root.txt", False): False,  # anchored
        ("docs/a.tmp", False): True,
        ("docs/a/b/c.tmp", False): True,
        ("x/docs/a.tmp", False): False,
        ("#hash", False): True,
        ("trailing", False): True,  # unescaped trailing spaces are dropped
        ("# comment", False): False,
    }
    for (path, is_dir), expected in cases.items():
        assert ignore.ignored(path, is_dir) is expected, path
    assert nested.ignored("sub/x.log", False) is False  # the deeper file wins
    assert nested.ignored("other/x.log", False) is True
    assert nested.ignored("sub/local", True) is True
    assert nested.ignored("local", True) is False  # rules apply below their own directory


TRICKY_TREE = {
    ".gitignore": "*.log\n!important.log\n/dist\nnode_modules/\n**/cache/**\n*.py[co]\ntmp*/\n!tmpkeep/\n",
    "important.log": "",
    "debug.log": "",
    "dist/bundle.js": "",
    "src/dist/keep.js": "",
    "src/app.py": "",
    "src/app.pyc": "",
    "src/node_modules/x/index.js": "",
    "a/cache/b/c.txt": "",
    "a/cached.txt": "",
    "tmp1/x.txt": "",
    "tmpkeep/y.txt": "",
    "lib/.gitignore": "*\n!*.c\n!.gitignore\n",
    "lib/a.c": "",
    "lib/a.h": "",
    "notes/a b.txt": "",
}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_walk_agrees_with_git(tmp_path: Path) -> None:
    for rel, text in TRICKY_TREE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    git = subprocess.run(
        ["git", "ls-files", "--others", "--cached", "--exclude-standard", "-z"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    )
    expected = sorted(path for path in git.stdout.split("\0") if path)
    ours = [walked.rel for walked in walk_files(tmp_path.resolve(), tmp_path.resolve())]
    assert sorted(ours) == expected
    assert "important.log" in ours and "debug.log" not in ours  # the test really tests something


def test_walk_from_a_subdirectory_applies_rules_from_above(tmp_path: Path) -> None:
    for rel in ("sub/a.log", "sub/b.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / ".gitignore").write_text("*.log\n")
    root = tmp_path.resolve()
    assert [walked.rel for walked in walk_files(root, root / "sub")] == ["sub/b.txt"]
