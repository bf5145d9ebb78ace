"""Google GenAI generateContent (`provider: google`), with a thinking budget.

Usage (`usage_metadata`): `prompt_token_count`, `candidates_token_count` (the
answer only), `thoughts_token_count`, `cached_content_token_count`. Gemini bills
thoughts as output, so our output is candidates + thoughts and reasoning is the
thoughts. `HttpOptions.timeout` is in milliseconds. Gemini gives its wait in the error body
(`google.rpc.RetryInfo.retryDelay`, e.g. "17s") rather than a Retry-After header;
both are read.

Arguments per model (thinking_budget or thinking_level, include_thoughts, temperature,
extra_body through HttpOptions) come from request_args.gemini_args. The answer is
built from the first candidate's parts that are not thoughts (`part.thought`); thought
parts (summaries, returned because include_thoughts asks for them) are the reasoning.
The SDK's `response.text` skips thoughts too, but warns on every other part kind.
finishReason MAX_TOKENS is "length", STOP is "stop".
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from pydantic import ValidationError

from conductor_rl.config import WorkerConfig
from conductor_rl.workers.providers.base import ProviderError, Usage, WorkerRequest
from conductor_rl.workers.providers.errors import (
    connection_error,
    malformed_error,
    parse_retry_after,
    status_error,
    timeout_error,
)
from conductor_rl.workers.providers.http import HttpProvider, Reply, count
from conductor_rl.workers.providers.keys import Secret
from conductor_rl.workers.request_args import gemini_args

FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length"}


def _transport_errors() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(timeouts, other transport failures) of whichever HTTP stacks google-genai may use."""
    timeouts: list[type] = [TimeoutError]  # aiohttp's total timeout raises asyncio's (= builtin) TimeoutError
    transport: list[type] = []
    for name in ("httpx", "httpx2"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        timeouts.append(module.TimeoutException)
        transport.append(module.TransportError)
    try:
        import aiohttp

        timeouts.append(aiohttp.ServerTimeoutError)
        transport.append(aiohttp.ClientError)
    except ImportError:
        pass
    return tuple(timeouts), tuple(transport)


TIMEOUTS, TRANSPORT_ERRORS = _transport_errors()


class GoogleGenAIProvider(HttpProvider):
    def __init__(self, config: WorkerConfig, api_key: Secret | None = None) -> None:
        super().__init__(config, api_key)
        # attempts=1, not None: with None the SDK still retries a dropped aiohttp connection
        # once by itself after a 1-10 s sleep, which our limiter would never see.
        options = types.HttpOptions(
            timeout=int(config.timeout_s * 1000), retry_options=types.HttpRetryOptions(attempts=1)
        )
        if config.base_url:
            options.base_url = config.base_url
        self._options = options

    def _make_client(self) -> genai.Client:
        return genai.Client(api_key=self._key.reveal(), http_options=self._options)

    async def _call(self, request: WorkerRequest) -> Reply:
        response = await self._client.aio.models.generate_content(**gemini_args(self.config, request))
        u = response.usage_metadata
        if u is None:
            raise malformed_error(self.name, "no usage_metadata in the response")
        thoughts = count(u.thoughts_token_count)
        usage = Usage(
            input_tokens=count(u.prompt_token_count),
            output_tokens=count(u.candidates_token_count) + thoughts,
            reasoning_tokens=thoughts,
            cached_tokens=count(u.cached_content_token_count),
        )
        candidate = response.candidates[0] if response.candidates else None
        parts = (candidate.content.parts if candidate is not None and candidate.content is not None else None) or []
        text = "".join(p.text for p in parts if p.text and not p.thought)
        reasoning = "\n\n".join(p.text.strip() for p in parts if p.text and p.thought)
        reason = candidate.finish_reason if candidate is not None else None
        name = getattr(reason, "name", None) or (str(reason) if reason else "")
        return Reply(text, usage, reasoning, FINISH_REASONS.get(name, name.lower()))

    def _map_error(self, err: BaseException) -> ProviderError | None:
        if isinstance(err, genai_errors.APIError):
            headers = getattr(getattr(err, "response", None), "headers", None)
            wait = parse_retry_after(headers) if headers is not None else None
            if wait is None:
                wait = _retry_delay(err.details)
            return status_error(self.name, int(err.code or 0), str(err.message or err.status or err), wait)
        if isinstance(err, TIMEOUTS):
            return timeout_error(self.name, self.config.timeout_s)
        if isinstance(err, TRANSPORT_ERRORS):
            return connection_error(self.name, err)
        if isinstance(err, (json.JSONDecodeError, ValidationError)):
            return malformed_error(self.name, err)
        return None

    async def _close_client(self, client: genai.Client) -> None:
        await client.aio.aclose()


def _retry_delay(details: Any) -> float | None:
    """`retryDelay` ("17s", "0.5s") of a google.rpc.RetryInfo entry in an error body."""
    body = details.get("error", details) if isinstance(details, dict) else None
    for entry in (body or {}).get("details", []) or []:
        delay = entry.get("retryDelay") if isinstance(entry, dict) else None
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                return float(delay[:-1])
            except ValueError:
                return None
    return None
