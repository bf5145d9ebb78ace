"""The exact keyword arguments each provider's SDK call takes, from a worker's configuration
and one request: the request's shape (conductor_rl/workers/request_shape.py: temperature or
none, reasoning parameters) in each API's own names, and the worker's `extra_body` merged
last into every request body (nested dicts merged, so `extra_body: {reasoning: {summary:
auto}}` joins our `reasoning.effort`; a value the user gives wins).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conductor_rl.config import WorkerConfig
from conductor_rl.workers.request_shape import shape_for

if TYPE_CHECKING:  # the request type only; providers import this module
    from conductor_rl.workers.providers.base import WorkerRequest


def split_system(messages: list[dict[str, str]]) -> tuple[str | None, list[dict[str, str]]]:
    """System messages joined into one instruction (Anthropic, Gemini and Responses take it apart)."""
    system = [m["content"] for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]
    return ("\n\n".join(system) if system else None), rest


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` over `base`, merging nested dicts (so a user's reasoning.summary joins our reasoning.effort)."""
    merged = dict(base)
    for k, v in extra.items():
        merged[k] = deep_merge(merged[k], v) if isinstance(merged.get(k), dict) and isinstance(v, dict) else v
    return merged


def with_extra_body(args: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` merged last into a Stainless SDK call (openai, anthropic): a key the call names is merged
    there, the rest goes in `extra_body` (which the SDK merges over the JSON body, one level deep)."""
    if not extra:
        return args
    out = dict(args)
    body = out.pop("extra_body", None) or {}
    named = {k: v for k, v in extra.items() if k in out}
    out.update(deep_merge({k: out[k] for k in named}, named))
    out["extra_body"] = deep_merge(body, {k: v for k, v in extra.items() if k not in named})
    return out


def openai_chat_args(config: WorkerConfig, request: WorkerRequest) -> dict[str, Any]:
    """Keyword arguments of `chat.completions.create` (OpenAI itself, or an OpenAI-compatible server)."""
    shape = shape_for(config, request)
    args: dict[str, Any] = {"model": config.model, "messages": request.messages}
    if config.provider == "openai":
        args["max_completion_tokens"] = request.max_tokens  # reasoning models refuse max_tokens
    else:
        args["max_tokens"] = request.max_tokens  # what every open-model server understands
    if shape.temperature is not None:
        args["temperature"] = shape.temperature
    if shape.effort is not None:
        args["reasoning_effort"] = shape.effort
    if shape.thinking is not None:
        args["extra_body"] = {"chat_template_kwargs": {"enable_thinking": shape.thinking}}
    return with_extra_body(args, config.extra_body)


def openai_responses_args(config: WorkerConfig, request: WorkerRequest) -> dict[str, Any]:
    """Keyword arguments of `responses.create`. Reasoning summaries are not asked for (OpenAI refuses
    them to unverified organisations); `extra_body: {reasoning: {summary: auto}}` asks."""
    shape = shape_for(config, request)
    system, messages = split_system(request.messages)
    args: dict[str, Any] = {
        "model": config.model,
        "input": [{"role": m["role"], "content": m["content"]} for m in messages],
        "max_output_tokens": request.max_tokens,
        "store": False,  # nothing is kept server-side: every call stands alone
    }
    if system is not None:
        args["instructions"] = system
    if shape.temperature is not None:
        args["temperature"] = shape.temperature
    if shape.effort is not None:
        args["reasoning"] = {"effort": shape.effort}
    return with_extra_body(args, config.extra_body)


def anthropic_args(config: WorkerConfig, request: WorkerRequest) -> dict[str, Any]:
    """Keyword arguments of `messages.create`."""
    shape = shape_for(config, request)
    system, messages = split_system(request.messages)
    args: dict[str, Any] = {"model": config.model, "messages": messages, "max_tokens": request.max_tokens}
    if system is not None:
        args["system"] = system
    if shape.thinking is True:
        args["thinking"] = {"type": "adaptive"}
        args["output_config"] = {"effort": shape.effort}
    elif shape.budget:
        args["thinking"] = {"type": "enabled", "budget_tokens": shape.budget}
    # No temperature: the API version this SDK sends (2026-10-21) refuses it (request_shape.py).
    return with_extra_body(args, config.extra_body)


def gemini_args(config: WorkerConfig, request: WorkerRequest) -> dict[str, Any]:
    """Keyword arguments of `aio.models.generate_content` (plain dicts the SDK validates).
    Thought summaries are asked for (`include_thoughts`) whenever a model in the table thinks:
    thoughts are billed either way, and the summaries show in traces, never to later steps."""
    shape = shape_for(config, request)
    system, messages = split_system(request.messages)
    contents = [
        {"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["content"]}]} for m in messages
    ]
    generation: dict[str, Any] = {"max_output_tokens": request.max_tokens}
    if system is not None:
        generation["system_instruction"] = system
    if shape.temperature is not None:
        generation["temperature"] = shape.temperature
    thinking: dict[str, Any] = {}
    if shape.budget is not None:
        thinking["thinking_budget"] = shape.budget
    if shape.effort is not None:
        thinking["thinking_level"] = shape.effort.upper()
    if shape.include_thoughts:
        thinking["include_thoughts"] = True
    if thinking:
        generation["thinking_config"] = thinking
    if config.extra_body:
        # The SDK merges HttpOptions.extra_body into the JSON body last, recursively.
        generation["http_options"] = {"extra_body": dict(config.extra_body)}
    return {"model": config.model, "contents": contents, "config": generation}
