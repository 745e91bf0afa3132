"""``ponder ask --image FILE`` (repeatable) and ``--file FILE``: real ``ponder`` processes, the
provider a real HTTP server on 127.0.0.1 that records the request the daemon sends."""

import base64
import io
import os
import subprocess
import sys

from PIL import Image

from tests.support.harness import subprocess_env


def _ponder(home, *args, extra_env=None, timeout=60):
    env = {**os.environ, "PONDER_FORCE_TTY": "0", **subprocess_env(home, extra_env)}
    return subprocess.run(
        [sys.executable, "-m", "daemon", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def _png(path, size, color):
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    path.write_bytes(out.getvalue())
    return out.getvalue()


def test_images_and_a_file_reach_the_provider(home, tmp_path, replay_server):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    # The person names files anywhere on disk: ask reads them and sends their bytes.
    one = _png(elsewhere / "one.png", (20, 10), (255, 0, 0))
    two = _png(elsewhere / "two.png", (10, 20), (0, 0, 255))
    (elsewhere / "notes.md").write_text("# Notes\nbuy milk\n")
    replay_server.enqueue_fixture("anthropic", "thinking-text")
    env = {"ANTHROPIC_API_KEY": "sk-ant-fake", "ANTHROPIC_BASE_URL": replay_server.url}
    args = (
        *("ask", "--cwd", str(work), "--model", "anthropic/claude-sonnet-4-5", "--thinking", "off"),
        *("--image", str(elsewhere / "one.png"), "--image", str(elsewhere / "two.png")),
        *("--file", str(elsewhere / "notes.md"), "Compare these."),
    )
    result = _ponder(home, *args, extra_env=env)
    assert result.returncode == 0, result.stderr
    content = replay_server.requests[-1].json()["messages"][-1]["content"]
    notes_uri = (elsewhere / "notes.md").resolve().as_uri()
    assert content == [
        {"type": "text", "text": "Compare these."},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(one).decode()},
        },
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(two).decode()},
        },
        {"type": "text", "text": f'<file uri="{notes_uri}">\n# Notes\nbuy milk\n\n</file>'},
    ]


def test_a_refused_attachment_is_a_clear_error(home, tmp_path):
    (tmp_path / "fake.png").write_text("not an image")
    result = _ponder(
        home, "ask", "--cwd", str(tmp_path), "--model", "mock/echo", "--image", str(tmp_path / "fake.png"), "hi"
    )
    assert result.returncode != 0
    assert "Block 1 (image) was refused" in result.stderr and "PNG, JPEG, GIF or WebP" in result.stderr
    result = _ponder(
        home, "ask", "--cwd", str(tmp_path), "--model", "mock/echo", "--image", str(tmp_path / "nope.png"), "hi"
    )
    assert result.returncode == 2 and "cannot read" in result.stderr
    # A text-only model: the daemon names models that take images.
    _png(tmp_path / "ok.png", (4, 4), (0, 0, 0))
    result = _ponder(
        home, "ask", "--cwd", str(tmp_path), "--model", "mock/thinker", "--image", str(tmp_path / "ok.png"), "hi"
    )
    assert result.returncode != 0 and "mock/thinker takes no images" in result.stderr
