"""Every provider's image wire shape, checked on the request the daemon really sends.

A session on each provider (and on declared OpenAI-compatible, DeepSeek and DashScope vision
models) is prompted with text, an image and an embedded file through the protocol; a replay
server on 127.0.0.1 answers with one of ponder's local fixtures and records the request, whose
body is checked against the provider's documented image form:

- Anthropic Messages: ``{type: image, source: {type: base64, media_type, data}}``
  (platform.claude.com/docs/en/build-with-claude/vision);
- OpenAI Responses: ``{type: input_image, image_url: "data:<mime>;base64,...", detail}``;
- OpenAI Chat (and every Chat-compatible server: OpenRouter, DeepSeek, DashScope, declared
  ones): ``{type: image_url, image_url: {url: "data:<mime>;base64,..."}}`` in user content;
- Gemini: ``{inlineData: {mimeType, data}}`` with raw base64, no ``data:`` prefix;
- Ollama: ``message.images: ["<base64>"]``.
"""

import base64
import io
from typing import Any

import pytest
from PIL import Image

from tests.support.harness import in_memory_daemon
from tests.support.replay import ScriptedResponse

pytestmark = pytest.mark.anyio

PNG = io.BytesIO()
Image.new("RGB", (64, 48), (10, 120, 200)).save(PNG, "PNG")
IMAGE = PNG.getvalue()
IMAGE_B64 = base64.b64encode(IMAGE).decode()
DATA_URL = f"data:image/png;base64,{IMAGE_B64}"
FILE_BLOCK = '<file uri="file:///w/notes.md">\nremember the milk\n</file>'


# A plain reply of each wire API from the reference fixtures (the request is what is checked).
REPLIES = {
    "anthropic": "thinking-text",
    "openai-responses": "reasoning-summary-text",
    "openai-chat": "plain-text",
    "gemini": "thoughts-text-signature",
    "ollama": "thinking-content",
}


CONTENT = [
    {"type": "text", "text": "What colour is this?"},
    {"type": "image", "data": IMAGE_B64, "mime_type": "image/png", "name": "blue.png"},
    {"type": "resource", "uri": "file:///w/notes.md", "text": "remember the milk"},
]


def anthropic_user(body: dict[str, Any]) -> Any:
    return body["messages"][-1]["content"]


def chat_user(body: dict[str, Any]) -> Any:
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


ANTHROPIC = [
    {"type": "text", "text": "What colour is this?"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE_B64}},
    {"type": "text", "text": FILE_BLOCK},
]
CHAT = [
    {"type": "text", "text": "What colour is this?"},
    {"type": "image_url", "image_url": {"url": DATA_URL}},
    {"type": "text", "text": FILE_BLOCK},
]

DECLARED = """
[providers.local]
api = "openai-chat"
base_url = "{url}/v1"
api_key_env = "LOCAL_API_KEY"
[[providers.local.models]]
model = "vision-7b"
input = ["text", "image"]

[[providers.deepseek.models]]
model = "deepseek-v4-flash-vision-exp"
input = ["text", "image"]

[[providers.dashscope.models]]
model = "qwen3-vl-plus"
input = ["text", "image"]

[[providers.ollama.models]]
model = "llava:7b"
input = ["text", "image"]
"""

CASES = [
    # (model, api of the fixture, env var prefix, path, how to find the user content, expected)
    ("anthropic/claude-sonnet-4-5", "anthropic", "ANTHROPIC", "/v1/messages", anthropic_user, ANTHROPIC),
    (
        "openai/gpt-5.2",
        "openai-responses",
        "OPENAI",
        "/responses",
        lambda body: [i for i in body["input"] if i.get("role") == "user"][-1]["content"],
        [
            {"type": "input_text", "text": "What colour is this?"},
            {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
            {"type": "input_text", "text": FILE_BLOCK},
        ],
    ),
    ("openai/gpt-4.1", "openai-chat", "OPENAI", "/chat/completions", chat_user, CHAT),
    (
        "gemini/gemini-2.5-flash",
        "gemini",
        "GEMINI",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        lambda body: body["contents"][-1]["parts"],
        [
            {"text": "What colour is this?"},
            {"inlineData": {"mimeType": "image/png", "data": IMAGE_B64}},
            {"text": FILE_BLOCK},
        ],
    ),
    (
        "ollama/llava:7b",
        "ollama",
        "OLLAMA",
        "/api/chat",
        lambda body: [m for m in body["messages"] if m["role"] == "user"][-1],
        {"role": "user", "content": f"What colour is this?\n\n{FILE_BLOCK}", "images": [IMAGE_B64]},
    ),
    ("openrouter/anthropic/claude-sonnet-4.5", "openai-chat", "OPENROUTER", "/chat/completions", chat_user, CHAT),
    ("deepseek/deepseek-v4-flash-vision-exp", "openai-chat", "DEEPSEEK", "/chat/completions", chat_user, CHAT),
    ("dashscope/qwen3-vl-plus", "openai-chat", "DASHSCOPE", "/chat/completions", chat_user, CHAT),
    ("dashscope/qwen3.5-plus", "openai-chat", "DASHSCOPE", "/chat/completions", chat_user, CHAT),
    ("local/vision-7b", "openai-chat", "LOCAL", "/v1/chat/completions", chat_user, CHAT),
]


@pytest.mark.parametrize(
    ("model_id", "api", "prefix", "path", "user_content", "expected"), CASES, ids=[c[0] for c in CASES]
)
async def test_each_provider_sends_the_image_in_its_documented_shape(
    home, tmp_path, replay_server, model_id, api, prefix, path, user_content, expected
):
    (home / "config.toml").write_text(DECLARED.replace("{url}", replay_server.url))
    env = {f"{prefix}_API_KEY": "sk-fake-image-test", f"{prefix}_BASE_URL": replay_server.url}
    if prefix == "OLLAMA":
        env = {"OLLAMA_HOST": replay_server.url}
        # Discovery finds nothing more: the declared model is the one used.
        replay_server.route(
            "GET",
            "/api/tags",
            lambda _: ScriptedResponse(headers={"content-type": "application/json"}, body=b'{"models": []}'),
        )
    replay_server.enqueue_fixture(api, REPLIES[api])
    async with in_memory_daemon(home, env=env) as (client, _):
        listed = await client.request("models/list", {})
        assert next(m for m in listed["models"] if m["id"] == model_id)["input_modalities"] == ["text", "image"]
        started = await client.request("session/start", {"model_id": model_id, "cwd": str(tmp_path)})
        session_id = started["session"]["session_id"]
        turn = await client.request("session/prompt", {"session_id": session_id, "content": CONTENT})
        events = await client.collect_turn(turn["turn_id"])
    assert events[-1]["stop_reason"] == "end_turn", events[-1]
    sent = [r for r in replay_server.requests if r.path.split("?")[0] == path]
    assert len(sent) == 1, [r.path for r in replay_server.requests]
    assert user_content(sent[0].json()) == expected


# --- images a tool returned (an MCP tool's image content) --------------------------------------


def tool_image_request(provider: str, model: str):
    from daemon.conversation import Part
    from tests.support.provider_streams import assistant, make_request, tool_results, user

    call = Part(type="tool_call", call_id="call_1", name="mcp__docs__chart", arguments={"width": 64})
    results = tool_results(("call_1", "[image 1: image/png, 1 bytes]"))
    image = Part(
        type="image", attachment_id="att_1", mime_type="image/png", width=64, height=48, call_id="call_1", data=IMAGE
    )
    results.parts.append(image)
    return make_request(provider, model, [user("Draw it."), assistant([call]), results])


def test_a_tools_image_goes_where_each_api_takes_it():
    from daemon.config.settings import ProviderConfig
    from daemon.providers import anthropic, gemini, ollama, openai_chat, openai_responses

    # Anthropic: inside the tool_result, after its text.
    messages = anthropic.build_messages(tool_image_request("anthropic", "claude-sonnet-4-5"))
    assert messages[-1]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "call_1",
            "content": [
                {"type": "text", "text": "[image 1: image/png, 1 bytes]"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE_B64}},
            ],
        }
    ]
    # Chat: the tool role is text-only, so a user message follows the results with the image.
    dialect = openai_chat.chat_dialect(ProviderConfig(name="openai", api="openai-chat", base_url="http://x"))
    chat = openai_chat.build_messages(tool_image_request("openai", "gpt-4.1"), dialect)
    assert chat[-2] == {"role": "tool", "tool_call_id": "call_1", "content": "[image 1: image/png, 1 bytes]"}
    assert chat[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Attached image(s) from tool result:"},
            {"type": "image_url", "image_url": {"url": DATA_URL}},
        ],
    }
    # Responses: function_call_output takes a content list with input_image.
    items = openai_responses.build_input(tool_image_request("openai", "gpt-5.2"))
    assert items[-1] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [
            {"type": "input_text", "text": "[image 1: image/png, 1 bytes]"},
            {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
        ],
    }
    # Gemini: inlineData after the functionResponse, in the same user turn.
    contents = gemini.build_contents(tool_image_request("gemini", "gemini-2.5-flash"))
    assert contents[-1]["parts"][-1] == {"inlineData": {"mimeType": "image/png", "data": IMAGE_B64}}
    assert "functionResponse" in contents[-1]["parts"][0]
    # Ollama: a user message with the images after the tool message.
    body = ollama.build_body(tool_image_request("ollama", "llava:7b"))
    assert body["messages"][-2]["role"] == "tool"
    assert body["messages"][-1] == {
        "role": "user",
        "content": "Attached image(s) from tool result:",
        "images": [IMAGE_B64],
    }
