"""The HTTP providers drive the real async SDKs (openai, anthropic, google-genai)
against a local server speaking each wire format: usage is read from each
format's own fields, every fault maps to the right ProviderError, SDK retries
are off, and the key never shows."""

from __future__ import annotations

import asyncio
import logging

import pytest

from conductor_rl.testing.wire_formats import CACHED_TOKENS, REASONING_TOKENS
from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.providers import MissingApiKeyError, ProviderError, Usage, build_provider
from conductor_rl.workers.providers.errors import parse_retry_after
from tests.http_fakes import FAKE_KEY, HTTP_PROVIDERS, KEY_ENV, PRICE, request, worker_config

# Every test talks to the fake LLM server: the fake key set, the server reset (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh")


SHORT_TIMEOUT_S = 0.5
HANG_GUARD_S = 30.0  # a bound on a wait that only a hang reaches, never a slow machine


def call(provider: str, server, faults=(), **extra):
    server.script(list(faults))

    async def go():
        worker = build_provider(worker_config(provider, server, **extra))
        try:
            return await worker.complete(request())
        finally:
            await worker.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("provider", HTTP_PROVIDERS)
def test_usage_and_cost_come_from_the_wire_format(provider, server):
    response = call(provider, server)
    sent = server.stats.usages[-1]
    assert response.text.startswith("echo:") and "What is 2 + 2?" in response.text
    assert response.usage == Usage(
        input_tokens=sent["input"],
        output_tokens=sent["output"],
        reasoning_tokens=REASONING_TOKENS,
        cached_tokens=CACHED_TOKENS,
    )
    assert response.cost_usd == pytest.approx(cost_of(response.usage, PRICE)) and response.cost_usd > 0
    assert not response.simulated
    assert FAKE_KEY in server.stats.auth_headers[-1]  # the key is sent to the provider, and only there


FAULTS = [
    # fault, kind, retryable, retry_after_s
    ("429:2.5", "rate_limited", True, 2.5),
    ("500", "server_error", True, None),
    ("drop", "connection", True, None),
    ("malformed", "malformed_response", True, None),
    ("slow:10", "timeout", True, None),  # far past SHORT_TIMEOUT_S, however late the client's timer fires
    ("400", "bad_request", False, None),
    ("401", "auth", False, None),
]


@pytest.mark.parametrize("provider", HTTP_PROVIDERS)
@pytest.mark.parametrize("fault,kind,retryable,retry_after", FAULTS, ids=[f[0] for f in FAULTS])
def test_sdk_errors_map_to_provider_errors(provider, fault, kind, retryable, retry_after, server):
    # Only the slow answer may time out: the others get as long as a busy machine needs.
    timeout_s = SHORT_TIMEOUT_S if fault.startswith("slow") else HANG_GUARD_S
    with pytest.raises(ProviderError) as caught:
        call(provider, server, [fault], timeout_s=timeout_s)
    err = caught.value
    assert (err.kind, err.retryable) == (kind, retryable), str(err)
    assert err.retry_after_s == pytest.approx(retry_after) if retry_after else err.retry_after_s is None
    assert f"w-{provider}" in str(err)
    if fault == "400":
        assert "scripted 400: the request was refused" in str(err)  # the provider's own message
    # SDK retries are off: exactly one request reached the server.
    assert server.stats.requests == 1


def test_a_missing_key_fails_at_start_naming_the_variable(server, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    for provider in ("openai", "openai_responses", "anthropic", "google"):
        with pytest.raises(MissingApiKeyError, match=f"{KEY_ENV} is not set"):
            build_provider(worker_config(provider, server))
    assert server.stats.requests == 0
    # A local OpenAI-compatible server needs no key.
    config = worker_config("openai_compatible", server).model_copy(update={"api_key_env": None})
    assert build_provider(config).name == "w-openai_compatible"


def test_the_key_never_shows_in_reprs_errors_or_logs(server, caplog):
    caplog.set_level(logging.DEBUG)  # the SDKs log requests at DEBUG
    seen = []
    for provider in HTTP_PROVIDERS:
        worker = build_provider(worker_config(provider, server))
        seen += [repr(worker), str(vars(worker).get("_key")), repr(vars(worker).get("_key"))]
        for fault in ("401", "500", "drop"):
            with pytest.raises(ProviderError) as caught:
                call(provider, server, [fault])
            seen += [
                str(caught.value),
                repr(caught.value),
                repr(caught.value.__cause__),
                repr(caught.value.__context__),
            ]
        asyncio.run(worker.aclose())
    text = "\n".join(seen) + caplog.text
    assert "Secret('***')" in text
    assert FAKE_KEY not in text and FAKE_KEY[-12:] not in text


def test_retry_after_forms():
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert parse_retry_after({}) is None


def test_gemini_retry_delay_in_the_error_body():
    from conductor_rl.workers.providers.google_genai import _retry_delay

    body = {
        "error": {"code": 429, "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "17s"}]}
    }
    assert _retry_delay(body) == 17.0
    assert _retry_delay({"error": {"code": 429}}) is None


@pytest.mark.parametrize("provider", ["openai", "anthropic", "google"])
def test_one_provider_serves_one_event_loop_after_another(provider, server):
    """`ask` runs a loop per question with the same providers; SDK clients hold
    connections bound to the loop that made them."""
    worker = build_provider(worker_config(provider, server))
    for _ in range(2):
        assert asyncio.run(worker.complete(request())).text.startswith("echo:")
    assert server.stats.requests == 2  # no failed attempt on a stale connection
