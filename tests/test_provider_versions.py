"""The providers as they serve today, against the fake servers (conductor_rl/testing/api_rules.py):
the Anthropic API version the pinned SDK sends refuses any sampling parameter, the public APIs
answer a retired model id with their 404, and a model that takes no temperature refuses one. Each
case is sent twice: as the old shaping sent it (refused), and as ours does now (accepted)."""

from __future__ import annotations

import asyncio

import anthropic
import pytest

from conductor_rl.config import WorkerConfig
from conductor_rl.testing.api_rules import ANTHROPIC_NO_SAMPLING_FROM, RETIRED_MODELS
from conductor_rl.workers.providers import build_provider
from conductor_rl.workers.providers.base import ProviderError, WorkerRequest
from conductor_rl.workers.request_args import anthropic_args
from tests.http_fakes import FAKE_KEY, KEY_ENV, PRICE

pytestmark = pytest.mark.usefixtures("fresh")


def ask(config: WorkerConfig) -> WorkerRequest:
    """A step's request with the worker's own settings, as the workflow makes it."""
    return WorkerRequest(
        [{"role": "user", "content": "What is 2 + 2?"}],
        max_tokens=256,
        temperature=config.temperature,
        reasoning=config.reasoning,
        reasoning_budget=config.reasoning_budget,
    )


def worker(server, provider: str, model: str, **extra) -> WorkerConfig:
    return WorkerConfig(
        name="w",
        provider=provider,
        model=model,
        api_key_env=KEY_ENV,
        base_url=server.base_url_for(provider),
        price=PRICE,
        **extra,
    )


def complete(config: WorkerConfig):
    async def go():
        provider = build_provider(config)
        try:
            return await provider.complete(ask(config))
        finally:
            await provider.aclose()

    return asyncio.run(go())


def test_the_sdk_sends_the_api_version_that_refuses_sampling_parameters(server):
    assert anthropic._constants.ANTHROPIC_API_VERSION >= ANTHROPIC_NO_SAMPLING_FROM
    config = worker(server, "anthropic", "claude-sonnet-4-6", reasoning="off")
    new = anthropic_args(config, ask(config))
    old = {**new, "extra_body": {"temperature": 0.2}}  # what the shaping sent before this SDK

    async def send(args):
        client = anthropic.AsyncAnthropic(api_key=FAKE_KEY, base_url=server.root_url, max_retries=0)
        try:
            return await client.messages.create(**args)
        finally:
            await client.close()

    with pytest.raises(anthropic.BadRequestError, match="temperature: Extra inputs are not permitted"):
        asyncio.run(send(old))
    assert asyncio.run(send(new)).content[0].text.startswith("echo:")
    assert "temperature" not in server.stats.bodies[-1]
    assert complete(config).text.startswith("echo:")  # and through our provider


@pytest.mark.parametrize(
    "provider,retired,current",
    [
        ("anthropic", "claude-sonnet-4-20250514", "claude-sonnet-4-6"),
        ("google", "gemini-2.5-pro", "gemini-3.8-flash"),
        ("openai", "claude-sonnet-4-5-20250929", "gpt-6.1-sol"),  # an id OpenAI never served: the same 404
    ],
)
def test_a_retired_model_id_gets_the_providers_404_with_the_fix(server, provider, retired, current):
    with pytest.raises(ProviderError) as caught:
        complete(worker(server, provider, retired, reasoning="off"))
    err = caught.value
    assert err.kind == "bad_request" and not err.retryable
    assert "HTTP 404" in str(err) and "retired or misspelt" in str(err)
    assert complete(worker(server, provider, current, reasoning="minimal")).text.startswith("echo:")
    assert server.stats.ok == 1 and len(server.stats.refusals) == 1


def test_every_retired_id_is_refused_and_every_replacement_is_a_model_the_table_knows(server):
    from conductor_rl.workers.model_traits import traits_for

    for model, (shutdown, replacement) in RETIRED_MODELS.items():
        provider = "anthropic" if model.startswith("claude") else "google"
        with pytest.raises(ProviderError, match="HTTP 404"):
            complete(worker(server, provider, model))
        assert shutdown <= "2026-12-05" and traits_for(provider, replacement).known, replacement


def test_a_sampling_parameter_for_claude_is_named_before_any_call():
    from conductor_rl.workers.request_shape import shape_problems

    config = WorkerConfig(name="c", provider="anthropic", model="claude-sonnet-4-6", extra_body={"top_k": 5})
    [problem] = shape_problems(config)
    assert problem.startswith("workers.c.extra_body.top_k: ") and "remove it" in problem
    assert shape_problems(config.model_copy(update={"extra_body": {"metadata": {"user_id": "u"}}})) == []


def test_a_model_that_takes_no_temperature_refuses_the_old_shaping(server):
    with pytest.raises(ProviderError, match="Only the default \\(1\\) value is supported"):
        complete(worker(server, "openai", "gpt-6.1-sol", reasoning="minimal", fixed_temperature=False))
    assert complete(worker(server, "openai", "gpt-6.1-sol", reasoning="minimal")).text.startswith("echo:")
    body = server.stats.bodies[-1]
    assert "temperature" not in body and body["reasoning_effort"] == "low"  # no effort below low
    with pytest.raises(ProviderError, match="Supported values are: 'low', 'medium', and 'high'"):
        complete(worker(server, "openai", "gpt-6.1-sol", extra_body={"reasoning_effort": "minimal"}))
