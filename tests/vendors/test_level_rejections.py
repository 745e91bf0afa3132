"""A provider's refusal of a thinking level: the parsers, against the recorded error texts, and the
adapters raising ``ThinkingLevelRejected`` from a real HTTP 400 on a local server.

Every body below is verbatim from the record cited beside it (research note §9,
docs/research/thinking-controls.md).
"""

import json
from typing import Any

import pytest

from daemon.catalog.catalog import builtin_specs
from daemon.catalog.decide import decide_thinking
from daemon.catalog.learned import LearnedLevels
from daemon.config.settings import ProviderConfig
from daemon.errors import ProviderError, ThinkingLevelRejected
from daemon.models.levels import nearest_allowed
from daemon.providers.gemini import GeminiProvider
from daemon.providers.openai_chat import OpenAIChatProvider
from daemon.providers.openai_responses import OpenAIResponsesProvider
from daemon.util.secret import Secret
from daemon.vendors.level_rejections import (
    parse_copilot_messages_rejection,
    parse_gemini_rejection,
    parse_level_rejection,
    parse_openai_rejection,
)
from tests.support.provider_streams import collect, make_request, user
from tests.support.replay import ScriptedResponse

# openai/openai-agents-python#2089 (Responses, gpt-5.1).
OPENAI_RESPONSES_GPT51 = (
    b'{"error":{"message":"Unsupported value: \'minimal\' is not supported with the \'gpt-5.1\' model. '
    b"Supported values are: 'none', 'low', 'medium', and 'high'.\","
    b'"type":"invalid_request_error","param":"reasoning.effort","code":"unsupported_value"}}'
)
# anomalyco/opencode#4451: the same, with the param redacted by the client.
OPENAI_RESPONSES_REDACTED = OPENAI_RESPONSES_GPT51.replace(b'"reasoning.effort"', b'"***.effort"')
# livekit/agents PR #3966 (Chat Completions, gpt-5.1): null is refused, no level named.
OPENAI_CHAT_NULL = (
    b'{"error":{"message":"Unsupported value: \'reasoning_effort\' does not support null with this model. '
    b"Supported values are: 'none', 'low', 'medium', and 'high'.\","
    b'"type":"invalid_request_error","param":"reasoning_effort","code":"unsupported_value"}}'
)
# kaitranntt/ccs#344 (Copilot /chat/completions, gpt-5-mini).
COPILOT_CHAT_GPT5_MINI = (
    b'{"error":{"message":"Unsupported value: \'reasoning_effort\' does not support \'xhigh\' with this model. '
    b"Supported values are: 'minimal', 'low', 'medium', and 'high'.\",\"code\":\"unsupported_value\"}}"
)
# kaitranntt/ccs#686 (Copilot /responses, gpt-5-mini): no param, another code.
COPILOT_RESPONSES_GPT5_MINI = (
    b'{"error":{"message":"Unsupported value: \'xhigh\' is not supported with the \'gpt-5-mini\' model. '
    b"Supported values are: 'minimal', 'low', 'medium', and 'high'.\",\"code\":\"invalid_request_body\"}}"
)
# microsoft/vscode#310940 (Copilot /v1/messages, Claude Opus 4.7 at launch).
COPILOT_MESSAGES_OPUS47 = (
    b'{"error":{"message":"output_config.effort \\"high\\" is not supported by model claude-opus-4.7; '
    b'supported values: [medium]","code":"invalid_reasoning_effort"}}'
)
# egoist/chatwise-releases#1206 (generateContent, gemini-3-pro).
GEMINI_MEDIUM = (
    b'{"error":{"code":400,"message":"Thinking level MEDIUM is not supported for this model. '
    b'Please retry with other thinking level.","status":"INVALID_ARGUMENT"}}'
)
# jenslys/opencode-gemini-auth#14 (Vertex AI).
VERTEX_MEDIUM = (
    b'{"error":{"code":400,"message":"Unable to submit request because thinking_level MEDIUM is not supported by '
    b'this model. Learn more: https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/gemini",'
    b'"status":"INVALID_ARGUMENT"}}'
)
# fishjar/kiss-translator#1048 (Gemini Interactions API).
GEMINI_INTERACTIONS = (
    b'{"error":{"message":"\'minimal\' is not a supported thinking level for this model. '
    b'Allowed values are: medium, low, high.","code":"invalid_request"}}'
)
# RooCodeInc/Roo-Code#10700 (a level sent to a 2.5 model): names no level.
GEMINI_NO_LEVELS = (
    b'{"error":{"code":400,"message":"Thinking level is not supported for this model.","status":"INVALID_ARGUMENT"}}'
)
# anthropics/claude-code#30010: Anthropic names no values.
ANTHROPIC_NO_EFFORT = (
    b'{"type":"error","error":{"type":"invalid_request_error",'
    b'"message":"This model does not support the effort parameter."},"request_id":"req_011CYdtG53QfXyHJPATrjwxv"}'
)
# An unrelated unsupported value (not a reasoning level) must not be taken for one.
OPENAI_TEMPERATURE = (
    b'{"error":{"message":"Unsupported value: \'temperature\' does not support 0 with this model. '
    b'Only the default (1) value is supported.","param":"temperature","code":"unsupported_value"}}'
)
OPENAI_OTHER_PARAM = (
    b'{"error":{"message":"Unsupported value: \'x\' is not supported with the \'m\' model. '
    b'Supported values are: \'auto\' and \'concise\'.","param":"reasoning.summary","code":"unsupported_value"}}'
)


@pytest.mark.parametrize(
    ("parse", "body", "rejected", "allowed"),
    [
        (parse_openai_rejection, OPENAI_RESPONSES_GPT51, "minimal", ("off", "low", "medium", "high")),
        (parse_openai_rejection, OPENAI_RESPONSES_REDACTED, "minimal", ("off", "low", "medium", "high")),
        (parse_openai_rejection, OPENAI_CHAT_NULL, None, ("off", "low", "medium", "high")),
        (parse_openai_rejection, COPILOT_CHAT_GPT5_MINI, "xhigh", ("minimal", "low", "medium", "high")),
        (parse_openai_rejection, COPILOT_RESPONSES_GPT5_MINI, "xhigh", ("minimal", "low", "medium", "high")),
        (parse_copilot_messages_rejection, COPILOT_MESSAGES_OPUS47, "high", ("medium",)),
        (parse_gemini_rejection, GEMINI_MEDIUM, "medium", None),
        (parse_gemini_rejection, VERTEX_MEDIUM, "medium", None),
        (parse_gemini_rejection, GEMINI_INTERACTIONS, "minimal", ("low", "medium", "high")),
    ],
)
def test_recorded_rejections_are_recognised(parse, body, rejected, allowed):
    found = parse(body)
    assert found is not None
    assert (found.rejected, found.allowed) == (rejected, allowed)
    assert found.message == json.loads(body)["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        GEMINI_NO_LEVELS,
        ANTHROPIC_NO_EFFORT,
        OPENAI_TEMPERATURE,
        OPENAI_OTHER_PARAM,
        b"not json",
        b"[]",
        b'{"error":"plain"}',
        b'{"error":{"message":42}}',
    ],
)
def test_other_errors_are_not_level_rejections(body):
    for api in ("openai-chat", "openai-responses", "anthropic", "gemini"):
        assert parse_level_rejection(api, 400, body, provider="p") is None


def test_only_a_400_is_a_level_rejection():
    assert parse_level_rejection("openai-responses", 400, OPENAI_RESPONSES_GPT51, provider="openai") is not None
    assert parse_level_rejection("openai-responses", 500, OPENAI_RESPONSES_GPT51, provider="openai") is None
    assert parse_level_rejection("ollama", 400, OPENAI_RESPONSES_GPT51, provider="ollama") is None


def test_a_rejection_teaches_the_retry_level_and_the_next_decision():
    """The path the agent takes: parse, pick the retry level, remember it for the model."""
    model = next(spec for spec in builtin_specs() if spec.id == "copilot/claude-opus-4.6")
    error = parse_level_rejection("openai-chat", 400, COPILOT_MESSAGES_OPUS47, provider="copilot")
    assert isinstance(error, ThinkingLevelRejected) and not error.retryable and error.status == 400
    assert error.kind == "invalid_reasoning_effort"
    assert error.allowed is not None and error.rejected == "high"
    assert nearest_allowed(error.rejected, error.allowed) == "medium"
    learned = LearnedLevels()
    learned.learn(model.id, allowed=error.allowed, refused=error.rejected)
    assert decide_thinking(model, "high", learned=learned).effective == "medium"


# --- the adapters raise it from a real 400 ----------------------------------------------------


def _json_400(body: bytes) -> ScriptedResponse:
    return ScriptedResponse(status=400, headers={"content-type": "application/json"}, body=body)


def _config(name: str, api: str, url: str) -> ProviderConfig:
    return ProviderConfig(name=name, api=api, base_url=url, api_key=Secret("sk-test-not-a-real-key-0123456789"))


def _request(provider: str, model: str, params: dict[str, Any]):
    return make_request(provider, model, [user("hi")], params=params)


@pytest.mark.anyio
async def test_responses_adapter_raises_the_rejection(replay_server):
    replay_server.enqueue(_json_400(OPENAI_RESPONSES_GPT51))
    adapter = OpenAIResponsesProvider(_config("openai", "openai-responses", replay_server.url))
    try:
        got = await collect(adapter, _request("openai", "gpt-5.1", {"reasoning": {"effort": "minimal"}}))
    finally:
        await adapter.aclose()
    assert isinstance(got.error, ThinkingLevelRejected)
    assert (got.error.rejected, got.error.allowed, got.error.status) == (
        "minimal",
        ("off", "low", "medium", "high"),
        400,
    )
    assert got.error.message.startswith("openai answered HTTP 400: Unsupported value: 'minimal'")
    assert json.loads(replay_server.requests[0].body)["reasoning"] == {"effort": "minimal"}


@pytest.mark.anyio
async def test_chat_adapter_raises_the_rejection_and_other_400s_stay_ordinary(replay_server):
    replay_server.enqueue(_json_400(COPILOT_CHAT_GPT5_MINI))
    replay_server.enqueue(_json_400(OPENAI_TEMPERATURE))
    adapter = OpenAIChatProvider(_config("local", "openai-chat", replay_server.url))
    try:
        got = await collect(adapter, _request("local", "gpt-5-mini", {"reasoning_effort": "xhigh"}))
        other = await collect(adapter, _request("local", "gpt-5-mini", {"reasoning_effort": "high"}))
    finally:
        await adapter.aclose()
    assert isinstance(got.error, ThinkingLevelRejected)
    assert (got.error.rejected, got.error.allowed) == ("xhigh", ("minimal", "low", "medium", "high"))
    assert isinstance(other.error, ProviderError) and not isinstance(other.error, ThinkingLevelRejected)
    assert other.error.status == 400 and not other.error.retryable


@pytest.mark.anyio
async def test_gemini_adapter_raises_the_rejection_naming_the_level(replay_server):
    replay_server.enqueue(_json_400(GEMINI_MEDIUM))
    adapter = GeminiProvider(
        ProviderConfig(name="gemini", api="gemini", base_url=replay_server.url, api_key=Secret("fake-gemini-key"))
    )
    params = {"generationConfig": {"thinkingConfig": {"thinkingLevel": "medium", "includeThoughts": True}}}
    try:
        got = await collect(adapter, _request("gemini", "gemini-3-pro-preview", params))
    finally:
        await adapter.aclose()
    assert isinstance(got.error, ThinkingLevelRejected)
    assert (got.error.rejected, got.error.allowed, got.error.kind) == ("medium", None, "INVALID_ARGUMENT")
