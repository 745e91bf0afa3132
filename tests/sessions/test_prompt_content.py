"""Prompt content over the real protocol (PROTOCOL.md "Prompt content"): admission of images,
resources and links, every refusal a -32006 that stores nothing, attachments stored once
and shared by forks, ``attachment/get``, and history a model cannot take sent as notes."""

import base64
import io
import os
import sqlite3

import anyio
import pytest
from PIL import Image

from daemon.jsonrpc.client import RpcError
from tests.support.harness import in_memory_daemon

pytestmark = pytest.mark.anyio


def png(width: int = 40, height: int = 30, color=(200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "PNG")
    return out.getvalue()


def noisy_png(width: int, height: int) -> bytes:
    """A PNG that does not compress (random pixels): large in bytes as well as in pixels."""
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), os.urandom(width * height * 3)).save(out, "PNG")
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def start(client, cwd, model_id="mock/echo"):
    result = await client.request("session/start", {"model_id": model_id, "cwd": str(cwd)})
    return result["session"]["session_id"]


async def prompt(client, session_id, content):
    turn = await client.request("session/prompt", {"session_id": session_id, "content": content})
    return turn, await client.collect_turn(turn["turn_id"])


async def refused(client, session_id, content) -> dict:
    with pytest.raises(RpcError) as info:
        await client.request("session/prompt", {"session_id": session_id, "content": content})
    assert info.value.code == -32006, info.value.message
    return {"message": info.value.message, **info.value.data}


def stored_counts(home) -> tuple[int, int]:
    with sqlite3.connect(home / "sessions.db") as db:
        return (
            db.execute("SELECT count(*) FROM messages").fetchone()[0],
            db.execute("SELECT count(*) FROM attachments").fetchone()[0],
        )


async def test_an_image_is_admitted_stored_once_and_reaches_the_model(home, tmp_path):
    image = png()
    async with in_memory_daemon(home) as (client, _):
        init = await client.request("initialize", {"protocol_version": 1})
        assert init["capabilities"]["prompt_content"] == {
            "image": True,
            "resource": True,
            "resource_link": True,
            "max_images_per_prompt": 20,
            "max_image_bytes": 3_750_000,
        }
        session_id = await start(client, tmp_path)
        content = [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "data": b64(image), "mime_type": "image/jpeg", "name": "red.png"},
        ]
        _, events = await prompt(client, session_id, content)
        reply = next(e for e in events if e["type"] == "message_end")["message"]
        # The model received the bytes (the mock names them); the declared mime_type lost to the bytes.
        assert f"[image image/png 40x30 {len(image)} bytes]" in reply["content"][0]["text"]
        assert events[0]["notes"] == []
        # Same image again, in another prompt: stored once.
        await prompt(client, session_id, content)
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        blocks = [b for m in messages if m["role"] == "user" for b in m["content"] if b["type"] == "image"]
        assert len(blocks) == 2 and blocks[0] == blocks[1]
        block = blocks[0]
        assert block == {
            "type": "image",
            "attachment_id": block["attachment_id"],
            "mime_type": "image/png",
            "bytes": len(image),
            "width": 40,
            "height": 30,
            "name": "red.png",
            "call_id": None,
            "omitted_reason": None,
        }
        assert stored_counts(home)[1] == 1
        got = await client.request(
            "attachment/get", {"session_id": session_id, "attachment_id": block["attachment_id"]}
        )
        assert base64.b64decode(got["data"]) == image and got["mime_type"] == "image/png"
        # resume carries no base64
        resumed = await client.request("session/resume", {"session_id": session_id})
        assert b64(image)[:64] not in str(resumed)


async def test_a_large_image_is_scaled_down_before_it_is_stored(home, tmp_path):
    big = noisy_png(2600, 1400)  # ~11 MB of random pixels, 2600 px wide
    (tmp_path / "shot.png").write_bytes(big)
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path)
        await prompt(client, session_id, [{"type": "image", "path": "shot.png"}])
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        block = messages[0]["content"][0]
        assert max(block["width"], block["height"]) <= 2000 and block["bytes"] <= 3_750_000
        assert block["width"] == 2000 and block["height"] == 1077  # aspect kept
        assert block["name"] == "shot.png"
        got = await client.request(
            "attachment/get", {"session_id": session_id, "attachment_id": block["attachment_id"]}
        )
        stored = Image.open(io.BytesIO(base64.b64decode(got["data"])))
        assert stored.size == (2000, 1077) and f"image/{stored.format.lower()}" == block["mime_type"]


async def test_refusals_are_clear_and_store_nothing(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    cwd = tmp_path / "work"
    cwd.mkdir()
    (outside / "secret.png").write_bytes(png())
    (cwd / "escape.png").symlink_to(outside / "secret.png")
    os.mkfifo(cwd / "pipe.png")
    (cwd / "notes.bin").write_bytes(b"\x00\x01\x02binary")
    (cwd / "fake.png").write_bytes(b"this is text, not a picture")
    (cwd / "cut.png").write_bytes(png(400, 300)[:200])
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, cwd)
        before = stored_counts(home)
        cases = [
            ([{"type": "image", "data": "data:image/png;base64," + b64(png())}], 0, "format", "data URL"),
            ([{"type": "text", "text": "hi"}, {"type": "image", "path": "escape.png"}], 1, "outside_cwd", "outside"),
            ([{"type": "image", "path": "pipe.png"}], 0, "unreadable", "not a regular file"),
            ([{"type": "image", "path": "missing.png"}], 0, "unreadable", "does not exist"),
            ([{"type": "image", "path": "fake.png"}], 0, "format", "PNG, JPEG, GIF or WebP"),
            ([{"type": "image", "path": "cut.png"}], 0, "undecodable", "truncated"),
            ([{"type": "image", "data": "A" * (70 * 1024 * 1024)}], 0, "too_large", "smaller image"),
            ([{"type": "image", "data": "not base64!!"}], 0, "undecodable", "base64"),
            ([{"type": "resource_link", "uri": "file:///etc/passwd", "name": "passwd"}], 0, "outside_cwd", "cwd"),
            ([{"type": "resource_link", "uri": f"file://{cwd}/notes.bin", "name": "notes.bin"}], 0, "format", "UTF-8"),
            ([{"type": "resource", "uri": "file:///x.bin", "blob": b64(b"\x00\x01")}], 0, "format", "not an image"),
            ([{"type": "image", "data": b64(png())}] * 21, 20, "too_many", "at most 20"),
        ]
        for content, index, reason, words in cases:
            error = await refused(client, session_id, content)
            assert (error["index"], error["reason"]) == (index, reason), error
            assert words in error["message"] and error["message"].startswith(f"Block {index} ("), error
        assert stored_counts(home) == before
        # A malformed block is -32602, also storing nothing.
        with pytest.raises(RpcError) as info:
            await client.request("session/prompt", {"session_id": session_id, "content": [{"type": "image"}]})
        assert info.value.code == -32602
        with pytest.raises(RpcError) as info:
            await client.request("session/prompt", {"session_id": session_id, "text": "a", "content": []})
        assert info.value.code == -32602
        assert stored_counts(home) == before


async def test_a_decompression_bomb_is_refused(home, tmp_path):
    # 20000 x 20000 pixels of one colour: a few hundred KB of PNG that would decode to 1.6 GB.
    out = io.BytesIO()
    Image.new("1", (20000, 20000)).save(out, "PNG")
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path)
        error = await refused(client, session_id, [{"type": "image", "data": b64(out.getvalue())}])
        assert error["reason"] == "too_large" and "pixels" in error["message"]
        assert stored_counts(home)[1] == 0


async def test_a_text_only_model_refuses_images_naming_models_that_take_them(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path, "mock/thinker")
        error = await refused(client, session_id, [{"type": "image", "data": b64(png())}])
        assert error["reason"] == "model_lacks_image_input" and error["model_id"] == "mock/thinker"
        assert "mock/echo" in error["message"] and "takes no images" in error["message"]


async def test_resources_and_links_are_read_at_admission(home, tmp_path):
    (tmp_path / "a.py").write_text("print('hello')\n")
    (tmp_path / "big.txt").write_text("é" * 200_000)  # 400,000 bytes of UTF-8
    (tmp_path / "pic.png").write_bytes(png())
    (tmp_path / "dir").mkdir()
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path)
        content = [
            {"type": "text", "text": "Look:"},
            {"type": "resource_link", "uri": f"file://{tmp_path}/a.py", "name": "a.py", "mime_type": "text/x-python"},
            {"type": "resource_link", "uri": f"file://{tmp_path}/big.txt", "name": "big.txt"},
            {"type": "resource_link", "uri": f"file://{tmp_path}/pic.png", "name": "pic.png"},
            {"type": "resource_link", "uri": f"file://{tmp_path}/dir", "name": "dir"},
            {"type": "resource_link", "uri": "https://example.com/doc", "name": "doc"},
            {"type": "resource", "uri": "file:///mem/note.md", "text": "embedded note"},
        ]
        _, events = await prompt(client, session_id, content)
        (tmp_path / "a.py").write_text("changed later")
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        blocks = messages[0]["content"]
        assert [b["type"] for b in blocks] == [
            "text", "resource", "resource", "image", "resource_link", "resource_link", "resource",
        ]  # fmt: skip
        assert blocks[1] == {
            "type": "resource",
            "uri": f"file://{tmp_path}/a.py",
            "mime_type": "text/x-python",
            "text": "print('hello')\n",
            "truncated": False,
        }
        assert blocks[2]["truncated"] is True and len(blocks[2]["text"].encode()) <= 256 * 1024
        assert blocks[2]["text"] == "é" * (256 * 1024 // 2)
        # The model read the files as delimited text naming their URI, and the links as links.
        reply = next(e for e in events if e["type"] == "message_end")["message"]["content"][0]["text"]
        assert f"<file uri=\"file://{tmp_path}/a.py\">\nprint('hello')\n\n</file>" in reply
        assert "[linked resource: doc <https://example.com/doc>]" in reply
        assert "[image image/png 40x30" in reply


async def test_forks_share_attachments_and_the_last_delete_removes_them(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path)
        await prompt(client, session_id, [{"type": "image", "data": b64(png())}])
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        attachment_id = messages[0]["content"][0]["attachment_id"]
        fork = (await client.request("session/fork", {"session_id": session_id}))["session"]["session_id"]
        other = await start(client, tmp_path)
        with pytest.raises(RpcError) as info:
            await client.request("attachment/get", {"session_id": other, "attachment_id": attachment_id})
        assert info.value.code == -32602 and info.value.data["reason"] == "unknown_attachment"
        await client.request("session/delete", {"session_id": session_id})
        assert stored_counts(home)[1] == 1  # the fork still names it
        got = await client.request("attachment/get", {"session_id": fork, "attachment_id": attachment_id})
        assert got["attachment_id"] == attachment_id
        await client.request("session/delete", {"session_id": fork})
        assert stored_counts(home)[1] == 0


async def test_after_a_switch_to_a_text_only_model_images_are_notes(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path)
        await prompt(client, session_id, [{"type": "image", "data": b64(png()), "name": "red.png"}])
        await client.request("model/set", {"session_id": session_id, "model_id": "mock/thinker"})
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "and now?"})
        events = await client.collect_turn(turn["turn_id"])
        assert events[0]["notes"] == ["1 image sent as a one-line note: mock/thinker takes no images."]
        assert events[-1]["stop_reason"] == "end_turn"


async def test_only_the_20_most_recent_images_and_20_mb_are_sent(home, tmp_path):
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path)
        colors = iter(range(1, 255))
        for _ in range(3):  # 24 distinct images in three prompts
            content = [{"type": "image", "data": b64(png(8, 8, (next(colors), 0, 0)))} for _ in range(8)]
            _, events = await prompt(client, session_id, [{"type": "text", "text": "more"}, *content])
        assert events[0]["notes"] == ["4 images older than the 20 most recent were sent as a one-line note."]
        reply = next(e for e in events if e["type"] == "message_end")["message"]["content"][0]["text"]
        assert reply.count("[image image/png 8x8") == 8  # this prompt's own images all went as bytes

    big = tmp_path / "big"
    big.mkdir()
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, big)
        for n in range(6):  # six incompressible images of ~3.6 MB, ~4.8 MB each as base64: four fit in 20 MB
            (big / f"{n}.png").write_bytes(noisy_png(1100, 1100))
        _, events = await prompt(client, session_id, [{"type": "image", "path": f"{n}.png"} for n in range(6)])
        assert events[0]["notes"] == [
            "2 images beyond the 20 MB of images a request carries were sent as a one-line note."
        ]
        reply = next(e for e in events if e["type"] == "message_end")["message"]["content"][0]["text"]
        assert reply.count("[image image/png 1100x1100") == 4


ANTHROPIC_REFUSAL = (
    b'{"type":"error","error":{"type":"invalid_request_error",'
    b'"message":"messages.0.content.1.image.source.base64: image exceeds 5 MB maximum"}}'
)


async def test_an_image_a_provider_refuses_is_retried_as_a_note_and_never_sent_again(home, tmp_path, replay_server):
    from tests.support.replay import ScriptedResponse

    replay_server.enqueue(
        ScriptedResponse(status=400, headers={"content-type": "application/json"}, body=ANTHROPIC_REFUSAL)
    )
    replay_server.enqueue_fixture("anthropic", "thinking-text")
    replay_server.enqueue_fixture("anthropic", "thinking-text")
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake", "ANTHROPIC_BASE_URL": replay_server.url}
    async with in_memory_daemon(home, env=env) as (client, _):
        session_id = await start(client, tmp_path, "anthropic/claude-sonnet-4-5")
        content = [{"type": "text", "text": "look"}, {"type": "image", "data": b64(png()), "name": "red.png"}]
        _, events = await prompt(client, session_id, content)
        assert events[-1]["stop_reason"] == "end_turn", events[-1]
        [retry] = [e for e in events if e["type"] == "retry"]
        assert "refused an image" in retry["error"]["message"] and retry["error"]["provider_status"] == 400
        first, second = (r.json()["messages"][0]["content"] for r in replay_server.requests)
        assert first[1]["type"] == "image"
        note = "[image omitted: red.png (image/png, 40×30): the provider refused it]"
        assert second == [{"type": "text", "text": "look"}, {"type": "text", "text": note}]
        messages = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        assert messages[0]["content"][1]["omitted_reason"] == "rejected_by_provider"
        # The mark is stored: the next turn says so and sends the note, never the image.
        turn = await client.request("session/prompt", {"session_id": session_id, "text": "again"})
        later = await client.collect_turn(turn["turn_id"])
        assert later[0]["notes"] == ["1 image that a provider refused is sent as a one-line note."]
        assert replay_server.requests[-1].json()["messages"][0]["content"][1] == {"type": "text", "text": note}


async def test_a_prompt_whose_image_is_still_being_read_is_not_overtaken(home, tmp_path):
    # Many pixels in few bytes: reading and scaling it takes the worker thread a while.
    image = png(4000, 3000)
    first = [{"type": "text", "text": "first"}, {"type": "image", "data": b64(image), "mime_type": "image/png"}]
    async with in_memory_daemon(home) as (client, _):
        session_id = await start(client, tmp_path)
        answers: dict[str, dict] = {}

        async def send(name: str, params: dict) -> None:
            answers[name] = await client.request("session/prompt", {"session_id": session_id, **params})

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "image", {"content": first})
            await anyio.wait_all_tasks_blocked()  # the image prompt is being admitted (its image read off the loop)
            tg.start_soon(send, "text", {"text": "second"})
        assert (answers["image"]["delivery"], answers["text"]["delivery"]) == ("started", "queued")
        await client.collect_turn(answers["image"]["turn_id"])
        await client.collect_turn(answers["text"]["turn_id"])
        stored = (await client.request("session/messages", {"session_id": session_id}))["messages"]
        users = [m for m in stored if m["role"] == "user"]
        assert [m["content"][0]["text"] for m in users] == ["first", "second"]
        assert [m["message_id"] for m in users] == [answers["image"]["message_id"], answers["text"]["message_id"]]
