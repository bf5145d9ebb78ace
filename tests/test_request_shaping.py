"""Per-model request shaping (conductor_rl/workers/request_shape.py), on the wire: the real SDKs
send each model exactly what its API accepts for every reasoning level, and a strict fake
server (conductor_rl/testing/fake_llm_server.py) refuses, with the provider's own status and
words, what the real APIs refuse. Reasoning text comes back apart from the answer on every
wire, and an answer the output limit cut to nothing says so (finish_reason "length")."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from conductor_rl.config import REASONING_LEVELS, WorkerConfig
from conductor_rl.config.workers import _paper_workers
from conductor_rl.testing.wire_formats import REASONING_TEXT
from conductor_rl.workers import request_shape
from conductor_rl.workers.model_traits import traits_for
from conductor_rl.workers.providers import ProviderError, WorkerRequest, build_provider
from conductor_rl.workers.providers.reasoning_text import split_think
from conductor_rl.workers.request_shape import (
    shape_notes,
    shape_problems,
    shape_request,
)
from tests.http_fakes import FAKE_KEY, KEY_ENV, PRICE

# Every test talks to the fake LLM server: the fake key set, the server reset (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh")


@pytest.fixture(autouse=True)
def serves_retired(fresh, server):
    """These tests pin each model family's parameter rules, retired ids included (Gemini 2.5 Pro's
    budgets: Vertex AI retires on its own dates). The public APIs' 404 for them is tested apart."""
    server.serves_retired = True


GPT5, PRO, FLASH, LITE = "gpt-5", "gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"
SONNET, OPUS_47 = "claude-sonnet-4-6", "claude-opus-4-7"
QWEN3, R1, GEMMA = "Qwen/Qwen3-32B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "google/gemma-3-27b-it"


def worker(provider: str, model: str, server=None, **extra: Any) -> WorkerConfig:
    url = server.base_url_for(provider) if server is not None else "http://127.0.0.1:1"
    return WorkerConfig(
        name=f"w-{model.split('/')[-1]}",
        provider=provider,
        model=model,
        api_key_env=KEY_ENV,
        base_url=url,
        price=PRICE,
        **extra,
    )


def request_of(config: WorkerConfig, **override: Any) -> WorkerRequest:
    """A step's request as the workflow makes it: the worker's own settings."""
    fields = dict(
        max_tokens=config.max_tokens,
        temperature=config.temperature,
        reasoning_budget=config.reasoning_budget,
        reasoning=config.reasoning,
    )
    fields.update(override)
    return WorkerRequest(
        [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2 + 2?"}], **fields
    )


def call(server, config: WorkerConfig, faults=(), **override: Any):
    server.script(list(faults))

    async def go():
        provider = build_provider(config)
        try:
            return await provider.complete(request_of(config, **override))
        finally:
            await provider.aclose()

    return asyncio.run(go())


def _camel(value: Any) -> Any:
    if isinstance(value, dict):
        return {re.sub(r"_([a-z])", lambda m: m.group(1).upper(), k): _camel(v) for k, v in value.items()}
    return value


def sent(server) -> dict[str, Any]:
    """The last request body, with Gemini's generation settings lifted to the top (in camelCase:
    google-genai sends the nested thinkingConfig in snake_case, which the API reads as well)."""
    body = dict(server.stats.bodies[-1])
    if "generationConfig" in body:
        body.update(_camel(body.pop("generationConfig")))
    return body


# -- what each model gets, on the wire -------------------------------------------------

CASES = [
    # provider, model, reasoning, reasoning_budget, expected keys (subset), keys that must be absent
    (
        "openai",
        GPT5,
        "minimal",
        None,
        {"reasoning_effort": "minimal", "max_completion_tokens": 4096},
        ["temperature", "max_tokens"],
    ),
    ("openai", GPT5, "default", None, {}, ["temperature", "reasoning_effort"]),
    ("openai", GPT5, "off", None, {"reasoning_effort": "minimal"}, ["temperature"]),
    ("openai", GPT5, "default", 0, {"reasoning_effort": "minimal"}, ["temperature"]),
    ("openai", "gpt-5.1", "off", None, {"reasoning_effort": "none", "temperature": 0.2}, []),
    ("openai", "gpt-5.1", "minimal", None, {"reasoning_effort": "none"}, []),
    ("openai", "gpt-5.1", "high", None, {"reasoning_effort": "high"}, ["temperature"]),
    ("openai", "gpt-5.2", "medium", None, {"reasoning_effort": "medium"}, ["temperature"]),
    ("openai", "gpt-5-pro", "low", None, {"reasoning_effort": "high"}, ["temperature"]),
    ("openai", "o3", "minimal", None, {"reasoning_effort": "low"}, ["temperature"]),
    ("openai", "gpt-4o", "high", None, {"temperature": 0.2}, ["reasoning_effort"]),
    (
        "openai_responses",
        GPT5,
        "minimal",
        None,
        {"reasoning": {"effort": "minimal"}, "max_output_tokens": 4096},
        ["temperature"],
    ),
    ("openai_responses", "gpt-4.1", "minimal", None, {"temperature": 0.2}, ["reasoning"]),
    (
        "google",
        PRO,
        "off",
        None,
        {"thinkingConfig": {"thinkingBudget": 128, "includeThoughts": True}, "temperature": 0.2},
        [],
    ),
    ("google", PRO, "minimal", None, {"thinkingConfig": {"thinkingBudget": 128, "includeThoughts": True}}, []),
    ("google", PRO, "default", None, {"thinkingConfig": {"includeThoughts": True}}, []),
    ("google", PRO, "default", 32768, {"thinkingConfig": {"thinkingBudget": 32768, "includeThoughts": True}}, []),
    ("google", FLASH, "off", None, {"thinkingConfig": {"thinkingBudget": 0}}, []),
    ("google", FLASH, "high", None, {"thinkingConfig": {"thinkingBudget": 2048, "includeThoughts": True}}, []),
    ("google", LITE, "low", None, {"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True}}, []),
    ("google", LITE, "default", None, {"maxOutputTokens": 4096}, ["thinkingConfig"]),
    (
        "google",
        "gemini-3-pro-preview",
        "medium",
        None,
        {"thinkingConfig": {"thinkingLevel": "HIGH", "includeThoughts": True}},
        [],
    ),
    ("anthropic", SONNET, "minimal", None, {"max_tokens": 4096}, ["thinking", "temperature"]),
    ("anthropic", SONNET, "off", None, {}, ["thinking", "temperature"]),
    ("anthropic", SONNET, "high", None, {"thinking": {"type": "enabled", "budget_tokens": 2048}}, ["temperature"]),
    ("anthropic", SONNET, "default", 3000, {"thinking": {"type": "enabled", "budget_tokens": 3000}}, ["temperature"]),
    (
        "anthropic",
        OPUS_47,
        "high",
        None,
        {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}},
        ["temperature"],
    ),
    (
        "openai_compatible",
        QWEN3,
        "off",
        None,
        {"chat_template_kwargs": {"enable_thinking": False}, "temperature": 0.2, "max_tokens": 4096},
        ["reasoning_effort", "max_completion_tokens"],
    ),
    ("openai_compatible", QWEN3, "high", None, {"chat_template_kwargs": {"enable_thinking": True}}, []),
    ("openai_compatible", QWEN3, "default", None, {"temperature": 0.2}, ["chat_template_kwargs"]),
    ("openai_compatible", R1, "off", None, {"temperature": 0.2}, ["chat_template_kwargs", "reasoning_effort"]),
    ("openai_compatible", GEMMA, "high", None, {"temperature": 0.2}, ["chat_template_kwargs", "reasoning_effort"]),
]


@pytest.mark.parametrize(
    "provider,model,reasoning,budget,expected,absent",
    CASES,
    ids=[f"{c[0]}-{c[1].split('/')[-1]}-{c[2]}-{c[3]}" for c in CASES],
)
def test_each_model_gets_exactly_what_it_accepts(provider, model, reasoning, budget, expected, absent, server):
    config = worker(provider, model, server, reasoning=reasoning, reasoning_budget=budget)
    response = call(server, config)
    body = sent(server)
    assert server.stats.refusals == [] and response.text.startswith("echo:")
    for key, value in expected.items():
        assert body.get(key) == value, (key, body)
    for key in absent:
        assert key not in body, (key, body)


MODELS = (
    [
        ("openai", m)
        for m in (
            GPT5,
            "gpt-5-mini",
            "gpt-5.1",
            "gpt-5.2",
            "gpt-5-pro",
            "o3",
            "o4-mini",
            "o1-mini",
            "gpt-4o",
            "gpt-4.1",
            "gpt-5-chat-latest",
        )
    ]
    + [("openai_responses", m) for m in (GPT5, "gpt-5.1", "o3", "gpt-4.1")]
    + [("google", m) for m in (PRO, FLASH, LITE, "gemini-3-pro-preview", "gemini-3-flash-preview", "gemini-2.0-flash")]
    + [
        ("anthropic", m)
        for m in (
            SONNET,
            "claude-opus-4-1-20250805",
            "claude-sonnet-4-5",
            "claude-3-7-sonnet-latest",
            OPUS_47,
            "claude-3-5-haiku-latest",
        )
    ]
    + [("openai_compatible", m) for m in (QWEN3, R1, GEMMA, "openai/gpt-oss-20b")]
)


@pytest.mark.parametrize("provider,model", MODELS, ids=[f"{p}-{m.split('/')[-1]}" for p, m in MODELS])
def test_no_reasoning_level_is_refused_by_any_model(provider, model, server):
    """Every level, at the default temperature 0.2 and at a small max_tokens, is accepted by the strict fake."""

    async def go():
        for max_tokens in (4096, 600):
            for level in REASONING_LEVELS:
                config = worker(provider, model, server, reasoning=level, max_tokens=max_tokens)
                provider_ = build_provider(config)
                try:
                    await provider_.complete(request_of(config))
                finally:
                    await provider_.aclose()

    asyncio.run(go())
    assert server.stats.refusals == [] and server.stats.ok == 2 * len(REASONING_LEVELS)


def test_extra_body_reaches_every_wire_merged_last(server):
    qwen = worker(
        "openai_compatible",
        QWEN3,
        server,
        reasoning="off",
        extra_body={"top_k": 20, "chat_template_kwargs": {"custom": 1}},
    )
    call(server, qwen)
    body = sent(server)
    assert body["top_k"] == 20 and body["chat_template_kwargs"] == {"enable_thinking": False, "custom": 1}

    gpt = worker("openai_responses", GPT5, server, reasoning="low", extra_body={"reasoning": {"summary": "auto"}})
    call(server, gpt)
    assert sent(server)["reasoning"] == {"effort": "low", "summary": "auto"}

    claude = worker(
        "anthropic", SONNET, server, reasoning="off", extra_body={"metadata": {"user_id": "u7"}, "inference_geo": "us"}
    )
    call(server, claude)
    body = sent(server)
    assert body["metadata"] == {"user_id": "u7"} and body["inference_geo"] == "us"

    gemini = worker("google", PRO, server, reasoning="minimal", extra_body={"generationConfig": {"topK": 7}})
    call(server, gemini)
    body = sent(server)
    assert body["topK"] == 7 and body["thinkingConfig"]["thinkingBudget"] == 128


# -- the strict fake refuses what the real APIs refuse ---------------------------------


def _openai_client(server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=FAKE_KEY, base_url=server.openai_url, max_retries=0)


def _refused(make) -> Exception:
    async def go():
        try:
            await make()
        except Exception as err:  # noqa: BLE001 (the SDK's own error is the point)
            return err
        raise AssertionError("the request was accepted")

    return asyncio.run(go())


MESSAGES = [{"role": "user", "content": "Hi"}]


def _message(err: Exception) -> str:
    """The provider's own words in a Stainless SDK error (its body is the error object, or the whole JSON)."""
    body = getattr(err, "body", None)
    inner = body.get("error", body) if isinstance(body, dict) else None
    return str(inner.get("message")) if isinstance(inner, dict) else str(err)


@pytest.mark.parametrize(
    "args,words",
    [
        (
            {"model": GPT5, "temperature": 0.2},
            "Unsupported value: 'temperature' does not support 0.2 with this model. "
            "Only the default (1) value is supported.",
        ),
        ({"model": "o3", "temperature": 0.0}, "'temperature' does not support 0.0 with this model"),
        (
            {"model": GPT5, "reasoning_effort": "none"},
            "Unsupported value: 'none' is not supported with the 'gpt-5' model. "
            "Supported values are: 'minimal', 'low', "
            "'medium', and 'high'.",
        ),
        (
            {"model": "gpt-5.1", "reasoning_effort": "minimal"},
            "Supported values are: 'none', 'low', 'medium', and 'high'.",
        ),
        (
            {"model": "gpt-5.1", "reasoning_effort": "low", "temperature": 0.2},
            "Only the default (1) value is supported.",
        ),
        ({"model": "gpt-4o", "reasoning_effort": "low"}, "Unrecognized request argument supplied: reasoning_effort"),
        ({"model": GPT5, "max_tokens": 64}, "Use 'max_completion_tokens' instead."),
        (
            {"model": GPT5, "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
            "Unrecognized request argument supplied: chat_template_kwargs",
        ),
    ],
)
def test_the_fake_refuses_what_openai_chat_refuses(args, words, server):
    err = _refused(lambda: _openai_client(server).chat.completions.create(messages=MESSAGES, **args))
    assert isinstance(err, openai.BadRequestError) and err.status_code == 400
    assert words in _message(err)
    # The same request without the refused parameters goes through: the refusal is about them alone.
    fixed = {k: v for k, v in args.items() if k not in ("temperature", "reasoning_effort", "max_tokens", "extra_body")}

    async def go():
        await _openai_client(server).chat.completions.create(messages=MESSAGES, **fixed)

    asyncio.run(go())
    assert server.stats.ok == 1


def test_the_fake_refuses_what_the_responses_api_refuses(server):
    err = _refused(lambda: _openai_client(server).responses.create(model=GPT5, input="Hi", temperature=0.2))
    assert isinstance(err, openai.BadRequestError) and "Only the default (1) value is supported" in _message(err)
    err = _refused(
        lambda: _openai_client(server).responses.create(model="gpt-4.1", input="Hi", reasoning={"effort": "low"})
    )
    assert "'reasoning.effort' is not supported with this model" in _message(err)


@pytest.mark.parametrize(
    "model,thinking,words",
    [
        (PRO, {"thinking_budget": 0}, "Budget 0 is invalid. This model only works in thinking mode."),
        (PRO, {"thinking_budget": 64}, "between 128 and 32768"),
        (FLASH, {"thinking_budget": 30000}, "between 1 and 24576"),
        (LITE, {"thinking_budget": 100}, "between 512 and 24576"),
        (PRO, {"thinking_level": "LOW"}, "Thinking level is not supported for this model."),
        ("gemini-3-pro-preview", {"thinking_level": "LOW", "thinking_budget": 128}, "only set one of"),
    ],
)
def test_the_fake_refuses_what_gemini_refuses(model, thinking, words, server):
    client = genai.Client(
        api_key=FAKE_KEY,
        http_options=types.HttpOptions(base_url=server.root_url, retry_options=types.HttpRetryOptions(attempts=1)),
    )

    async def go():
        try:
            await client.aio.models.generate_content(
                model=model, contents="Hi", config=types.GenerateContentConfig(thinking_config=thinking)
            )
        finally:
            await client.aio.aclose()

    err = _refused(go)
    assert isinstance(err, genai_errors.ClientError) and err.code == 400 and err.status == "INVALID_ARGUMENT"
    assert words in str(err.message)


@pytest.mark.parametrize(
    "args,words",
    [
        (
            # The API version before 2026-10-21 took a temperature, but not with thinking.
            {
                "thinking": {"type": "enabled", "budget_tokens": 2048},
                "extra_body": {"temperature": 0.2},
                "extra_headers": {"anthropic-version": "2023-06-01"},
            },
            "`temperature` may only be set to 1 when thinking is enabled",
        ),
        ({"extra_body": {"temperature": 0.2}}, "temperature: Extra inputs are not permitted"),
        ({"extra_body": {"temperature": 1.0}}, "temperature: Extra inputs are not permitted"),
        ({"extra_body": {"top_k": 5}}, "top_k: Extra inputs are not permitted"),
        (
            {"thinking": {"type": "enabled", "budget_tokens": 512}},
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
        ),
        (
            {"thinking": {"type": "enabled", "budget_tokens": 4096}},
            "`max_tokens` must be greater than `thinking.budget_tokens`",
        ),
        (
            {"model": OPUS_47, "thinking": {"type": "enabled", "budget_tokens": 2048}},
            '"thinking.type.enabled" is not supported for this model.',
        ),
    ],
)
def test_the_fake_refuses_what_anthropic_refuses(args, words, server):
    call_args = {"model": SONNET, "max_tokens": 4096, "messages": MESSAGES, **args}
    err = _refused(
        lambda: anthropic.AsyncAnthropic(api_key=FAKE_KEY, base_url=server.root_url, max_retries=0).messages.create(
            **call_args
        )
    )
    assert isinstance(err, anthropic.BadRequestError) and err.status_code == 400
    assert words in _message(err)
    assert (err.body.get("error", err.body) or {}).get("type") == "invalid_request_error"


def test_what_the_old_shaping_sent_is_refused_through_our_provider(server):
    """GPT-5 with the configured temperature 0.2 (what every call sent before this module):
    the refusal reaches us as a non-retryable bad_request with OpenAI's words."""
    config = worker("openai", GPT5, server, reasoning="minimal", fixed_temperature=False)
    with pytest.raises(ProviderError) as caught:
        call(server, config)
    assert caught.value.kind == "bad_request" and not caught.value.retryable
    assert "Only the default (1) value is supported" in str(caught.value)
    assert sent(server)["temperature"] == 0.2


def test_a_budget_the_model_refuses_fails_before_any_call(server):
    config = worker("google", PRO, server, reasoning_budget=0)
    with pytest.raises(ProviderError, match="cannot turn thinking off; its minimum budget is 128") as caught:
        call(server, config)
    assert caught.value.kind == "bad_request" and server.stats.requests == 0


# -- reasoning apart from the answer; an answer cut to nothing ---------------------------

THINKING = [
    # provider, model, settings, script entry
    ("openai_compatible", QWEN3, {}, "think"),
    ("openai_compatible", QWEN3, {}, "think:reasoning_content"),
    ("openai_compatible", QWEN3, {}, "think:inline"),
    ("openai_compatible", R1, {}, "think:open"),
    ("openai_responses", GPT5, {"reasoning": "low", "extra_body": {"reasoning": {"summary": "auto"}}}, "think"),
    ("anthropic", SONNET, {"reasoning": "high"}, "think:redacted"),
    ("google", PRO, {"reasoning": "minimal"}, "think"),
    ("google", FLASH, {"reasoning": "low"}, "think"),
]


@pytest.mark.parametrize(
    "provider,model,settings,entry", THINKING, ids=[f"{t[0]}-{t[1].split('/')[-1]}-{t[3]}" for t in THINKING]
)
def test_reasoning_text_is_kept_apart_from_the_answer(provider, model, settings, entry, server):
    response = call(server, worker(provider, model, server, **settings), [entry])
    assert response.reasoning == REASONING_TEXT
    assert response.text.startswith("echo:") and "think" not in response.text.lower()
    assert response.finish_reason == "stop" and not response.empty_after_length


@pytest.mark.parametrize(
    "provider,model,settings",
    [
        ("openai_responses", GPT5, {"reasoning": "low"}),  # no summary asked for: none comes
        ("anthropic", SONNET, {"reasoning": "off"}),  # thinking off: no thinking block
        ("google", FLASH, {"reasoning": "off"}),  # budget 0: no thought summaries asked for
    ],
)
def test_no_reasoning_text_where_none_was_asked_for(provider, model, settings, server):
    response = call(server, worker(provider, model, server, **settings), ["think"])
    assert response.reasoning == "" and response.text.startswith("echo:")


LENGTH = [
    ("openai", GPT5, {"reasoning": "minimal"}, "length_empty", ""),
    ("openai_compatible", QWEN3, {}, "length_empty", REASONING_TEXT),
    ("openai_compatible", QWEN3, {}, "length_empty:inline", REASONING_TEXT),  # "<think>..." never closed
    ("openai_compatible", R1, {}, "length_empty:open", REASONING_TEXT),  # no tag at all: the template opened it
    (
        "openai_responses",
        GPT5,
        {"reasoning": "high", "extra_body": {"reasoning": {"summary": "auto"}}},
        "length_empty",
        REASONING_TEXT,
    ),
    ("anthropic", SONNET, {"reasoning": "high"}, "length_empty", REASONING_TEXT),
    ("google", PRO, {"reasoning": "minimal"}, "length_empty", REASONING_TEXT),
]


@pytest.mark.parametrize(
    "provider,model,settings,entry,reasoning", LENGTH, ids=[f"{t[0]}-{t[1].split('/')[-1]}-{t[3]}" for t in LENGTH]
)
def test_an_answer_the_limit_cut_to_nothing_says_length(provider, model, settings, entry, reasoning, server):
    response = call(server, worker(provider, model, server, **settings), [entry])
    assert response.text == "" and response.finish_reason == "length" and response.empty_after_length
    assert response.reasoning == reasoning
    assert response.usage.output_tokens > 0  # the tokens were spent (and billed) all the same


@pytest.mark.parametrize(
    "provider,model",
    [
        ("openai", GPT5),
        ("openai_responses", GPT5),
        ("anthropic", SONNET),
        ("google", PRO),
        ("openai_compatible", QWEN3),
    ],
)
def test_a_cut_answer_is_length_but_not_empty(provider, model, server):
    response = call(server, worker(provider, model, server), ["length"])
    assert response.finish_reason == "length" and response.text.startswith("echo:") and not response.empty_after_length
    assert call(server, worker(provider, model, server)).finish_reason == "stop"


# -- the table, and what commands check before any actor starts ------------------------


@pytest.mark.parametrize(
    "provider,model,family",
    [
        ("openai", "gpt-5-2025-08-07", "gpt-5"),
        ("openai", "gpt-5-nano", "gpt-5"),
        ("openai", "gpt-5.1-codex", "gpt-5.1"),
        ("openai", "gpt-5.4", "gpt-5.2+"),
        ("openai", "gpt-5-chat-latest", "gpt-5-chat"),
        ("openai", "o4-mini", "o-series"),
        ("openai", "ft:gpt-4o-mini:org::id", "gpt-4"),
        ("google", "models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("google", "gemini-2.5-flash-lite-preview-06-17", "gemini-2.5-flash-lite"),
        ("google", "gemini-2.5-flash", "gemini-2.5-flash"),
        ("anthropic", SONNET, "claude"),
        ("anthropic", "claude-opus-4-1-20250805", "claude"),
        ("anthropic", OPUS_47, "claude-4.7+"),
        ("anthropic", "claude-3-5-sonnet-20241022", "claude-3"),
        ("openai_compatible", QWEN3, "qwen3"),
        ("openai_compatible", "Qwen/Qwen3-235B-A22B-Thinking-2507", "qwen3-thinking"),
        ("openai_compatible", R1, "deepseek-r1"),
        ("openai_compatible", GEMMA, "gemma-3"),
        ("openai", "my-new-model", "unknown"),
        ("openai_compatible", "meta-llama/Llama-3.1-8B-Instruct", "unknown"),
    ],
)
def test_traits_table(provider, model, family):
    assert traits_for(provider, model).name == family


def test_the_paper_pool_has_no_problems_and_notes_what_it_does_not_send():
    pool = {w.name: w for w in _paper_workers()}
    assert all(shape_problems(w) == [] for w in pool.values())
    assert shape_notes(pool["gpt-6.1-sol"]) == [
        "workers.gpt-6.1-sol.reasoning=minimal: gpt-6.1-sol has no 'minimal' effort; sending 'low'",
        "workers.gpt-6.1-sol.temperature=0.2 is not sent: gpt-6.1-sol only takes its default temperature (1)",
    ]
    assert shape_notes(pool["claude-sonnet-4-6"]) == [
        "workers.claude-sonnet-4-6.temperature=0.2 is not sent: the Anthropic API (version 2026-10-21) "
        "takes no temperature"
    ]
    gemini = shape_request(pool["gemini-3.8-flash"])
    assert gemini.effort == "low" and gemini.temperature == 0.2


@pytest.mark.parametrize(
    "provider,model,settings,problem",
    [
        (
            "google",
            PRO,
            {"reasoning_budget": 0},
            "workers.w-gemini-2.5-pro.reasoning_budget=0: gemini-2.5-pro "
            "cannot turn thinking off; its minimum budget is 128",
        ),
        ("google", PRO, {"reasoning_budget": 64}, "takes a thinking budget of 128..32768 tokens"),
        ("google", PRO, {"reasoning_budget": 40000}, "128..32768"),
        ("google", LITE, {"reasoning_budget": 100}, "512..24576 or 0 (off)"),
        ("google", FLASH, {"reasoning_budget": 30000}, "1..24576 or 0 (off)"),
        ("anthropic", SONNET, {"reasoning_budget": 512}, "1024..4095 (below max_tokens) or 0 (off)"),
        (
            "anthropic",
            SONNET,
            {"reasoning_budget": 4096},
            "must be below max_tokens (workers.w-claude-sonnet-4-6.max_tokens=4096); raise",
        ),
        ("anthropic", "claude-new-model", {"reasoning_budget": 999}, "1024"),  # Claude's rules hold for unknown Claudes
        ("anthropic", OPUS_47, {"reasoning_budget": 2048}, "takes no thinking budget (adaptive thinking only)"),
    ],
)
def test_shape_problems_name_the_key_and_the_fix(provider, model, settings, problem):
    [found] = shape_problems(worker(provider, model, **settings))
    assert problem in found


@pytest.mark.parametrize(
    "provider,model,settings",
    [
        ("google", PRO, {"reasoning_budget": 128}),
        ("google", LITE, {"reasoning_budget": 0}),
        ("google", FLASH, {"reasoning_budget": 24576}),
        ("anthropic", SONNET, {"reasoning_budget": 0}),
        ("anthropic", SONNET, {"reasoning_budget": 4095}),
        ("openai", GPT5, {"reasoning_budget": 0}),
        ("google", "gemini-9-ultra", {"reasoning_budget": 0}),  # unknown: no range to check
        ("openai_compatible", QWEN3, {"reasoning_budget": 5000}),
    ],
)
def test_budgets_the_models_accept_are_no_problem(provider, model, settings):
    assert shape_problems(worker(provider, model, **settings)) == []


def test_notes_explain_what_is_not_sent_as_configured():
    assert any("not in the model table" in n for n in shape_notes(worker("openai", "my-new-model")))
    assert any(
        "cannot turn reasoning off; sending its least, reasoning_effort='minimal'" in n
        for n in shape_notes(worker("openai", GPT5, reasoning="off"))
    )
    assert any(
        "cannot turn thinking off; sending its minimum budget, 128 tokens" in n
        for n in shape_notes(worker("google", PRO, reasoning="off"))
    )
    assert any(
        "always reasons and cannot be turned off" in n
        for n in shape_notes(worker("openai_compatible", R1, reasoning="off"))
    )
    assert any(
        "takes an effort, not a budget; sending reasoning=medium" in n
        for n in shape_notes(worker("openai", GPT5, reasoning_budget=8000))
    )
    for level in ("off", "medium"):
        assert any(
            "is not sent: the Anthropic API (version 2026-10-21) takes no temperature" in n
            for n in shape_notes(worker("anthropic", SONNET, reasoning=level))
        )
    sim = WorkerConfig(name="s", provider="sim", sim={"accuracy": {"math": 0.5}}, reasoning="high")
    assert shape_notes(sim) == [] and shape_problems(sim) == []


def test_fixed_temperature_overrides_the_table():
    assert shape_request(worker("openai", GPT5, fixed_temperature=False)).temperature == 0.2
    assert shape_request(worker("openai", "gpt-4o", fixed_temperature=True)).temperature is None
    # No Claude takes a temperature under the API version the SDK sends: the override is refused.
    [problem] = shape_problems(worker("anthropic", SONNET, fixed_temperature=False))
    assert "fixed_temperature=false" in problem and "2026-10-21" in problem and "remove" in problem


def test_level_budgets_leave_room_for_the_answer():
    # Half of max_tokens at most, never below the model's minimum, never above its maximum.
    assert shape_request(worker("google", FLASH, reasoning="high", max_tokens=65536)).budget == 16384
    assert shape_request(worker("google", PRO, reasoning="low", max_tokens=200)).budget == 128
    assert shape_request(worker("anthropic", SONNET, reasoning="high", max_tokens=1500)).budget == 1024
    small = shape_request(worker("anthropic", SONNET, reasoning="high", max_tokens=1024))
    assert small.budget == 0 and small.temperature is None and "no room" in small.warnings[0]


def test_a_probe_smaller_than_the_budget_fits_it_instead_of_failing():
    """The preflight probes with fewer output tokens than the worker's own; a Claude budget valid for
    the worker is fitted under the probe's max_tokens rather than refused."""
    config = worker("anthropic", SONNET, reasoning_budget=3000, max_tokens=8000)
    shape = request_shape.shape_for(config, request_of(config, max_tokens=512))
    assert shape.budget == 0 and shape.temperature is None
    shape = request_shape.shape_for(config, request_of(config, max_tokens=2500))
    assert shape.budget == 1250  # half the probe's output, above Claude's minimum 1024


def test_a_warning_is_logged_once_per_worker(caplog, server, monkeypatch):
    monkeypatch.setattr(request_shape, "_warned", set())  # what earlier tests warned about
    caplog.set_level(logging.WARNING, logger="conductor_rl.workers.request_shape")
    config = worker("openai", "o3", server, reasoning="off")
    for _ in range(3):
        call(server, config)
    warned = [r for r in caplog.records if "cannot turn reasoning off" in r.getMessage()]
    assert len(warned) == 1 and sent(server)["reasoning_effort"] == "low"


def test_inline_think_tags():
    assert split_think("<think>\nhmm\n</think>\n\nThe answer is 4.") == ("The answer is 4.", "hmm")
    assert split_think("hmm, 2+2\n</think>\n\n4") == ("4", "hmm, 2+2")  # the template opened the tag
    assert split_think("<think>still thinking") == ("", "still thinking")  # cut off mid-thought
    assert split_think("no tags at all ") == ("no tags at all ", "")


def test_local_and_sim_workers_report_why_they_stopped(monkeypatch):
    from conductor_rl import generation as generate_module
    from conductor_rl.generation import Generation
    from conductor_rl.workers.providers.local import LocalProvider
    from conductor_rl.workers.providers.sim import SimProvider

    class Tokenizer:
        chat_template = None

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **_):
            return " ".join(m["content"] for m in messages)

        def __call__(self, text, add_special_tokens=False):
            return type("Encoded", (), {"input_ids": [1] * len(text.split())})()

    outcomes = iter([("<think>a long thought", "length"), ("4", "eos")])

    def fake_generate(model, tokenizer, prompts, max_new_tokens, temperature, seed):
        text, reason = next(outcomes)
        return [[Generation(text, (7,) * max_new_tokens, (0.0,) * max_new_tokens, reason)]]

    monkeypatch.setattr(generate_module, "generate", fake_generate)
    local = LocalProvider(WorkerConfig(name="l", provider="local", model="tiny"), model=object(), tokenizer=Tokenizer())
    req = WorkerRequest([{"role": "user", "content": "2+2?"}], max_tokens=3, temperature=0.0)
    cut = asyncio.run(local.complete(req))
    assert (cut.text, cut.reasoning, cut.finish_reason, cut.empty_after_length) == (
        "",
        "a long thought",
        "length",
        True,
    )
    assert asyncio.run(local.complete(req)).finish_reason == "stop"

    sim = SimProvider(WorkerConfig(name="s", provider="sim", sim={"accuracy": {"math": 1.0}}))
    assert asyncio.run(sim.complete(req)).finish_reason == "stop"
