"""One agentic turn bigger than the window, against a real ``ponder serve`` subprocess (issue #24).

A model on a local OpenAI-compatible server (real HTTP on 127.0.0.1) reads fifteen 40 KB source
files in one turn, one after the other or all at once, on a 200k-token window and on an 8k one.
The server counts tokens denser than ponder's estimate (3 characters a token for code) and
answers a request over the window with OpenAI's real overflow error. The turn must finish; the
session must stay usable (a later prompt, a manual compaction, a restart); every tool result
stays whole in the store; and no summary is paid for and then thrown away.
"""

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.compaction_turns import compact, of_type, prompt
from tests.support.file_reader import FileReaderChat, big_files, reader_config
from tests.support.harness import subprocess_daemon
from tests.support.replay import ReplayServer
from tests.support.small_window import SmallWindowChat, small_window_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def compactions_of(events: list[dict[str, Any]]) -> list[tuple[str, str, int, int | None]]:
    """(trigger, status, tokens_before, tokens_after) of each compaction in ``events``."""
    starts = {e["compaction_id"]: e for e in of_type(events, "compaction_start")}
    return [
        (starts[e["compaction_id"]]["trigger"], e["status"], starts[e["compaction_id"]]["tokens_before"],
         e.get("tokens_after"))
        for e in of_type(events, "compaction_end")
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("model", "window", "parallel"),
    [("big", 200_000, False), ("big", 200_000, True), ("small", 8_192, False), ("unknown", 8_192, False)],
    ids=["200k-sequential", "200k-parallel", "8k-sequential", "8k-undeclared-window"],
)
async def test_fifteen_40kb_files_in_one_turn_finish_and_leave_the_session_usable(
    anyio_backend, home, tmp_path, model, window, parallel, capsys
):
    cwd = tmp_path / "proj"
    files = big_files(cwd)
    chat = FileReaderChat(files, window=window, parallel=parallel)
    with ReplayServer() as server:
        chat.install(server)
        (home / "config.toml").write_text(
            reader_config(server.url, windows={"big": 200_000, "small": 8_192, "unknown": None})
        )
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            started = await client.request(
                "session/start", {"model_id": f"local/{model}", "cwd": str(cwd), "approval_policy": "auto"}
            )
            session_id = started["session"]["session_id"]
            events = await prompt(client, session_id, "Read every file under src/ and tell me what each one does.")
            end = events[-1]
            assert end["stop_reason"] == "end_turn", end
            assert chat.reads_issued == 15
            # Every tool result is whole in the store: the request was shrunk, never the store.
            stored = await client.request("session/messages", {"session_id": session_id, "limit": 1000})
            results = [block for m in stored["messages"] for block in m["content"] if block["type"] == "tool_result"]
            assert len(results) == 15
            for path, block in zip(files, results, strict=True):
                assert not block["is_error"], block["text"][:200]
                lines = (cwd / path).read_text().splitlines()
                assert block["text"].rstrip().endswith(f"{len(lines)}\t{lines[-1]}")
                assert "left out of this request" not in block["text"]
            first_turn = compactions_of(events)
            # A summary that folds the turn in progress carries its request verbatim.
            for end_event in of_type(events, "compaction_end"):
                if end_event["status"] == "completed":
                    assert "Read every file under src/ and tell me what each one does." in end_event["summary"]
            if model == "unknown":  # the first overflow taught the window; models/list says so
                listed = await client.request("models/list", {"provider": "local"})
                unknown = next(m for m in listed["models"] if m["id"] == "local/unknown")
                assert (unknown["context_window"], unknown["context_window_source"]) == (window, "learned")
            summaries_first = len(chat.of_kind("summary"))

            # The session is usable: a later prompt, and a manual compaction never "nothing to compact"
            # while the next request would not fit.
            later = await prompt(client, session_id, "Which file is the longest?")
            assert later[-1]["stop_reason"] == "end_turn", later[-1]
            manual = await compact(client, session_id)
            assert manual[-1]["stop_reason"] == "end_turn", manual[-1]
            manual_end = next(e for e in manual if e["type"] == "compaction_end")
            assert manual_end["status"] in ("completed", "skipped"), manual_end
        # A restart changes nothing.
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            again = await prompt(client, session_id, "Summarize your findings in one line.")
            assert again[-1]["stop_reason"] == "end_turn", again[-1]
    # No summary paid for and thrown away: every summary call became a stored compaction.
    all_events = events + later + manual + again
    completed = [c for c in compactions_of(all_events) if c[1] == "completed"]
    assert len(chat.of_kind("summary")) == len(completed)
    # Never more than one request over the window per turn (the first overflow teaches the window).
    assert len(chat.of_kind("overflow")) <= 1, [a.prompt_tokens for a in chat.of_kind("overflow")]
    for _trigger, _status, before, after in completed:
        assert after is not None and after < before
    with capsys.disabled():
        print(
            f"\n[{model} {window} {'parallel' if parallel else 'sequential'}] summary calls in the turn: "
            f"{summaries_first}; compactions (trigger, status, tokens_before, tokens_after): {first_turn}; "
            f"overflows: {[a.prompt_tokens for a in chat.of_kind('overflow')]}; "
            f"largest request: {max(a.prompt_tokens for a in chat.answers if a.kind != 'overflow')}"
        )


def test_helpers_make_fifteen_40kb_files(tmp_path: Path) -> None:
    files = big_files(tmp_path)
    assert len(files) == 15
    assert all(39_000 <= (tmp_path / f).stat().st_size <= 41_000 for f in files)


async def test_a_stalled_summary_is_cut_at_stall_timeout(anyio_backend, home, tmp_path):
    """The summarizer is watched like a reply: silence for ``stall_timeout_s`` aborts it (it was only
    bounded by ``no_progress_timeout_s``, ten minutes by default)."""
    cwd = tmp_path / "proj"
    (cwd / "src").mkdir(parents=True)
    for n in range(3):
        (cwd / "src" / f"m{n}.py").write_text("".join(f"x_{i} = {i}  # module {n}\n" for i in range(80)))
    chat = SmallWindowChat(window=100_000, summary_delay_s=20)
    extra = "keep_recent_tokens = 200\n[reliability]\nstall_timeout_s = 1\nmax_attempts = 1\n"
    with ReplayServer() as server:
        chat.install(server)
        (home / "config.toml").write_text(small_window_config(server.url, window=100_000, extra=extra))
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            started = await client.request(
                "session/start", {"model_id": "local/small", "cwd": str(cwd), "approval_policy": "auto"}
            )
            session_id = started["session"]["session_id"]
            for n in range(3):
                events = await prompt(client, session_id, f"Turn {n}: look at module {n}.")
                assert events[-1]["stop_reason"] == "end_turn"
            began = anyio.current_time()
            manual = await compact(client, session_id)
            took = anyio.current_time() - began
    end = next(e for e in manual if e["type"] == "compaction_end")
    assert end["status"] == "failed" and "sent nothing for 1 s" in end["error"]["message"], end
    assert took < 10, took


def chinese_project(root: Path, modules: int, huge: int) -> None:
    """``modules`` small modules with Chinese comments under ``root/src``; module ``huge`` is 200 KB."""
    (root / "src").mkdir(parents=True)
    for n in range(modules):
        lines = 4000 if n == huge else 40
        body = "".join(f"    total += item_{n}_{i}  # 累加第{i}个值 模块{n}的核心逻辑\n" for i in range(lines))
        (root / "src" / f"m{n}.py").write_text(f"def f{n}(items):\n    total = 0\n{body}    return total\n")


async def test_forty_chinese_turns_with_one_huge_tool_turn_on_an_8k_window(anyio_backend, home, tmp_path, capsys):
    """The 40-turn long session in Chinese (a tokenizer's one token a character, not four characters
    a token), with one turn whose file is 200 KB: every turn ends ``end_turn``, no request the server
    counted goes over the window after the first, and the store keeps every message whole."""
    cwd = tmp_path / "proj"
    chinese_project(cwd, 40, huge=20)
    chat = SmallWindowChat(window=8_000)
    events: list[dict[str, Any]] = []
    with ReplayServer() as server:
        chat.install(server)
        (home / "config.toml").write_text(small_window_config(server.url, window=8_000))
        async with subprocess_daemon(home, backend=anyio_backend) as client:
            started = await client.request(
                "session/start", {"model_id": "local/small", "cwd": str(cwd), "approval_policy": "auto"}
            )
            session_id = started["session"]["session_id"]
            for n in range(40):
                turn = await prompt(client, session_id, f"第{n}轮 请查看 module {n} 并修复其中的错误 然后用中文总结。")
                assert turn[-1]["stop_reason"] == "end_turn", (n, turn[-1])
                events += turn
            stored = await client.request("session/messages", {"session_id": session_id, "limit": 1000})
    messages = stored["messages"]
    assert len(messages) == 160 and [m["seq"] for m in messages] == list(range(1, 161))
    huge_result = next(
        b["text"] for m in messages for b in m["content"] if b["type"] == "tool_result" and "模块20的" in b["text"]
    )
    assert len(huge_result) > 150_000 and "left out of this request" not in huge_result
    overflows = chat.of_kind("overflow")
    assert len(overflows) <= 1, [a.prompt_tokens for a in overflows]
    assert max(a.prompt_tokens for a in chat.answers if a.kind != "overflow") <= 8_000
    completed = [e for e in of_type(events, "compaction_end") if e["status"] == "completed"]
    assert len(chat.of_kind("summary")) == len(completed) >= 5
    with capsys.disabled():
        print(
            f"\n[40 Chinese turns, 8k, one 200 KB file] compactions: {len(completed)}, overflows: "
            f"{[a.prompt_tokens for a in overflows]}, largest request: "
            f"{max(a.prompt_tokens for a in chat.answers if a.kind != 'overflow')}"
        )
