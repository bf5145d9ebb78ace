"""Shared helpers for the tests that drive the real SDKs against
conductor_rl/testing/fake_llm_server.py on 127.0.0.1 (its fixtures, `server` and
`fresh`, are in tests/conftest.py)."""

from __future__ import annotations

from conductor_rl.config import Price, WorkerConfig
from conductor_rl.workers.providers import WorkerRequest

HTTP_PROVIDERS = ["openai", "openai_responses", "anthropic", "google", "openai_compatible"]
# Distinctive, so that grepping logs and outputs for it cannot match anything else.
FAKE_KEY = "sk-conductor-test-9f3b1c7e5a2d4XYZ"
KEY_ENV = "CONDUCTOR_TEST_API_KEY"
PRICE = Price(input=3.0, output=15.0, cached_input=0.3)


def worker_config(provider: str, server, name: str | None = None, **extra) -> WorkerConfig:
    return WorkerConfig(
        name=name or f"w-{provider}",
        provider=provider,
        model="fake-model",
        api_key_env=KEY_ENV,
        base_url=server.base_url_for(provider),
        price=PRICE,
        **extra,
    )


def request(text: str = "What is 2 + 2?", max_tokens: int = 64) -> WorkerRequest:
    return WorkerRequest(
        [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": text}],
        max_tokens=max_tokens,
        temperature=0.2,
    )
