"""What the real provider APIs refuse, per model, for the fake server
(conductor_rl/testing/fake_llm_server.py). The rules are written here from the providers'
documentation and their observed 400s, apart from conductor_rl/workers/request_shape.py,
so that a mistake in that table shows as a refusal in the tests instead of agreeing with
itself. Words quoted from the real APIs: OpenAI's "Unsupported value: 'temperature' does
not support 0.2 with this model. Only the default (1) value is supported.", its effort
listing, "Unrecognized request argument supplied: ...", the max_tokens and
reasoning.effort messages; Gemini's "Budget 0 is invalid. This model only works in
thinking mode."; Anthropic's budget_tokens, max_tokens, temperature and Opus 4.7
messages, its "Extra inputs are not permitted" for sampling parameters on API version
2026-10-21, and each provider's 404 for a model it no longer serves. The other Gemini and
Anthropic wordings are ours (same status and shape).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Refusal:
    message: str
    param: str | None = None
    code: str | None = None
    status: int = 400


# Model ids the providers' public APIs no longer serve, as their deprecation pages stated them on
# 2026-12-05 (id: shutdown date, the replacement the provider names). Vertex AI and Bedrock keep their
# own schedules. A request for one gets the provider's 404: what `conductor-rl check` must catch.
RETIRED_MODELS: dict[str, tuple[str, str]] = {
    "claude-sonnet-4-20250514": ("2026-06-15", "claude-sonnet-4-6"),
    "claude-sonnet-4-0": ("2026-06-15", "claude-sonnet-4-6"),
    "claude-opus-4-20250514": ("2026-06-15", "claude-opus-4-8"),
    "claude-opus-4-0": ("2026-06-15", "claude-opus-4-8"),
    "claude-sonnet-4-5-20250929": ("2026-11-30", "claude-sonnet-4-6"),
    "gemini-2.5-pro": ("2026-12-01", "gemini-3.8-flash"),
    "gemini-2.5-flash": ("2026-12-01", "gemini-3.5-flash-lite"),
}
# Announced, not yet shut down on 2026-12-05 (served until then): gpt-5, gpt-5-mini, gpt-5-nano, o3
# (2026-12-11, replacements gpt-6.1-sol/-terra/-luna).

# Anthropic API versions: the anthropic SDK 2.x sends 2026-10-21, which removed the sampling parameters.
ANTHROPIC_NO_SAMPLING_FROM = "2026-10-21"


# Chat Completions arguments OpenAI knows (anything else: "Unrecognized request argument").
_OPENAI_CHAT_ARGS = frozenset(
    [
        "messages",
        "model",
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    ]
)


def _openai_efforts(model: str) -> frozenset[str] | None:
    """The reasoning efforts an OpenAI model takes; None: not a reasoning model (or not an OpenAI name)."""
    if re.match(r"gpt-5(\.\d+)?-pro", model):
        return frozenset({"high"})
    if re.match(r"gpt-5\.1(\D|$)", model):
        return frozenset({"none", "low", "medium", "high"})
    if re.match(r"gpt-6\.\d", model):
        return frozenset({"low", "medium", "high"})
    if re.match(r"gpt-5\.[2-9]", model):
        return frozenset({"none", "low", "medium", "high", "xhigh"})
    if re.match(r"gpt-5(?!(\.\d+)?-chat)", model):
        return frozenset({"minimal", "low", "medium", "high"})
    if re.match(r"o1-(mini|preview)", model):
        return frozenset()
    if re.match(r"o[134](\D|$)", model):
        return frozenset({"low", "medium", "high"})
    return None


def is_openai_name(model: str) -> bool:
    return bool(re.match(r"(gpt-|o[134](\D|$)|chatgpt-)", model))


def _listing(values: frozenset[str]) -> str:
    order = ["none", "minimal", "low", "medium", "high", "xhigh"]
    quoted = [f"'{v}'" for v in sorted(values, key=order.index)]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f", and {quoted[-1]}"


def _number(value: Any) -> str:
    return json.dumps(value)


def _openai_refusal(wire: str, request: dict[str, Any]) -> Refusal | None:
    model = str(request.get("model", "")).lower()
    if not is_openai_name(model):
        return None  # an open model on vLLM & co., or the tests' fake-model: taken as it comes
    if wire == "chat":
        unknown = sorted(set(request) - _OPENAI_CHAT_ARGS)
        if unknown:
            return Refusal(f"Unrecognized request argument supplied: {unknown[0]}")
        effort, effort_param = request.get("reasoning_effort"), "reasoning_effort"
    else:
        if "reasoning_effort" in request:
            return Refusal(
                "Unsupported parameter: 'reasoning_effort'. In the Responses API, this parameter has "
                "moved to 'reasoning.effort'. Try again with the new parameter.",
                None,
                "unsupported_parameter",
            )
        effort, effort_param = (request.get("reasoning") or {}).get("effort"), "reasoning.effort"
    efforts = _openai_efforts(model)
    if efforts is None:
        if effort is not None:
            if wire == "chat":
                return Refusal("Unrecognized request argument supplied: reasoning_effort")
            return Refusal(
                "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
                effort_param,
                "unsupported_parameter",
            )
        return None
    if effort is not None and not efforts:
        return Refusal(
            f"Unsupported parameter: '{effort_param}' is not supported with this model.",
            effort_param,
            "unsupported_parameter",
        )
    if effort is not None and effort not in efforts:
        return Refusal(
            f"Unsupported value: '{effort}' is not supported with the '{model}' model. Supported values "
            f"are: {_listing(efforts)}.",
            effort_param,
            "unsupported_value",
        )
    if wire == "chat" and "max_tokens" in request:
        return Refusal(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
            "'max_completion_tokens' instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    temperature = request.get("temperature")
    takes_temperature = re.match(r"gpt-5\.1(\D|$)", model) and effort == "none"
    if temperature is not None and temperature != 1 and not takes_temperature:
        return Refusal(
            f"Unsupported value: 'temperature' does not support {_number(temperature)} with this model. "
            f"Only the default (1) value is supported.",
            "temperature",
            "unsupported_value",
        )
    return None


def thinking_config(request: dict[str, Any]) -> dict[str, Any]:
    generation = request.get("generationConfig") or request.get("generation_config") or {}
    thinking = generation.get("thinkingConfig") or generation.get("thinking_config") or {}
    return {
        "thinkingBudget": thinking.get("thinkingBudget", thinking.get("thinking_budget")),
        "thinkingLevel": thinking.get("thinkingLevel", thinking.get("thinking_level")),
        "includeThoughts": thinking.get("includeThoughts", thinking.get("include_thoughts")),
    }


# Gemini 2.5: (lowest non-zero budget, highest, 0 allowed); -1 (dynamic) is always allowed.
_GEMINI_BUDGETS = (
    ("gemini-2.5-pro", (128, 32768, False)),
    ("gemini-2.5-flash-lite", (512, 24576, True)),
    ("gemini-2.5-flash", (1, 24576, True)),
)
_GEMINI_3_LEVELS = (
    ("pro", {"LOW", "HIGH"}),
    ("3.8-flash", {"LOW", "MEDIUM", "HIGH"}),
    ("flash", {"MINIMAL", "LOW", "MEDIUM", "HIGH"}),
)


def _gemini_refusal(model: str, request: dict[str, Any]) -> Refusal | None:
    model = model.lower()
    thinking = thinking_config(request)
    budget, level = thinking["thinkingBudget"], thinking["thinkingLevel"]
    if model.startswith("gemini-3"):
        if budget is not None and level is not None:
            return Refusal("You can only set one of thinking budget and thinking level.")
        for kind, levels in _GEMINI_3_LEVELS:
            if kind in model and level is not None and str(level).upper() not in levels:
                return Refusal(f"Thinking level {level} is not supported for this model.")
        return None
    if level is not None and model.startswith("gemini-"):
        return Refusal("Thinking level is not supported for this model.")
    for name, (low, high, zero_ok) in _GEMINI_BUDGETS:
        if model.startswith(name) and budget is not None and budget != -1:
            if budget == 0 and not zero_ok:
                return Refusal("Budget 0 is invalid. This model only works in thinking mode.")
            if budget != 0 and not low <= budget <= high:
                return Refusal(
                    f"The thinking budget {budget} is invalid. Please choose a value between {low} and {high}."
                )
            return None
    return None


_CLAUDE_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"


def _anthropic_refusal(request: dict[str, Any], version: str) -> Refusal | None:
    model = str(request.get("model", "")).lower()
    if not model.startswith("claude"):
        return None
    if version >= ANTHROPIC_NO_SAMPLING_FROM:
        for name in ("temperature", "top_p", "top_k"):
            if name in request:
                return Refusal(f"{name}: Extra inputs are not permitted")
    thinking = request.get("thinking") or {}
    kind = thinking.get("type")
    if kind not in ("enabled", "adaptive"):
        return None
    if kind == "enabled" and re.match(r"claude-(opus|sonnet|haiku)-(4-[7-9]|[5-9])(\D|$)", model):
        return Refusal(
            '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" and '
            '"output_config.effort" to control thinking behavior.'
        )
    if re.match(r"claude-3-(?!7)", model):
        return Refusal(f"'{request.get('model')}' does not support thinking.")
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            return Refusal("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        if budget >= int(request.get("max_tokens") or 0):
            return Refusal(
                f"`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
                f"documentation at {_CLAUDE_DOCS}#max-tokens-and-context-window-size"
            )
    temperature = request.get("temperature")
    if temperature is not None and temperature != 1:
        return Refusal(
            f"`temperature` may only be set to 1 when thinking is enabled. Please consult our "
            f"documentation at {_CLAUDE_DOCS}#feature-compatibility"
        )
    return None


def retired_refusal(wire: str, model: str) -> Refusal | None:
    """The 404 a provider's public API gives a model id it no longer serves (RETIRED_MODELS)."""
    name = model.lower().removeprefix("models/")
    if name not in RETIRED_MODELS:
        return None
    if wire == "anthropic":
        return Refusal(f"model: {model}", status=404)
    if wire == "gemini":
        return Refusal(
            f"models/{name} is not found for API version v1beta, or is not supported for generateContent. "
            "Call ListModels to see the list of available models and their supported methods.",
            status=404,
        )
    return Refusal(
        f"The model `{model}` does not exist or you do not have access to it.", code="model_not_found", status=404
    )


def refusal(
    wire: str, model: str, request: dict[str, Any], anthropic_version: str = "2023-06-01", retired: bool = True
) -> Refusal | None:
    """What the real API would refuse in `request` to `model` on `wire` (chat, responses, anthropic,
    gemini); None: nothing. `anthropic_version`: the request's anthropic-version header; `retired`:
    refuse the ids the public APIs no longer serve."""
    gone = retired_refusal(wire, model) if retired else None
    if gone is not None:
        return gone
    if wire in ("chat", "responses"):
        return _openai_refusal(wire, request)
    if wire == "anthropic":
        return _anthropic_refusal(request, anthropic_version)
    return _gemini_refusal(model, request)
