"""Anthropic Messages (`provider: anthropic`), with a thinking budget.

Usage: Anthropic's `input_tokens` leaves out cache reads and writes, so our
input is `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`
and `cached_tokens` is the cache reads (cache writes are billed as fresh input
here: slightly under their 1.25x list price). `output_tokens` includes thinking;
`output_tokens_details.thinking_tokens` is the reasoning share when present.

Thinking needs `budget_tokens >= 1024` and below `max_tokens`, and no
temperature: a budget is clamped into that range, and a `max_tokens` of 1024 or
less turns thinking off. Without thinking the temperature is sent.
"""

from __future__ import annotations

import anthropic

from conductor_rl.config import WorkerConfig
from conductor_rl.workers.providers.base import ProviderError, Usage, WorkerRequest
from conductor_rl.workers.providers.errors import map_stainless_error
from conductor_rl.workers.providers.http import HttpProvider, count, split_system
from conductor_rl.workers.providers.keys import Secret

MIN_THINKING_BUDGET = 1024


class AnthropicMessagesProvider(HttpProvider):
    def __init__(self, config: WorkerConfig, api_key: Secret | None = None) -> None:
        super().__init__(config, api_key)

    def _make_client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=self._key.reveal(), base_url=self.config.base_url, timeout=self.config.timeout_s, max_retries=0,
        )

    async def _call(self, request: WorkerRequest) -> tuple[str, Usage]:
        system, messages = split_system(request.messages)
        args: dict = {"model": self.config.model, "messages": messages, "max_tokens": request.max_tokens}
        if system is not None:
            args["system"] = system
        budget = request.reasoning_budget
        if budget and request.max_tokens > MIN_THINKING_BUDGET:
            args["thinking"] = {"type": "enabled",
                                "budget_tokens": min(max(budget, MIN_THINKING_BUDGET), request.max_tokens - 1)}
        else:
            # This SDK version no longer lists `temperature`; the API still takes it for
            # models without thinking, so it goes in the body as the API names it.
            args["extra_body"] = {"temperature": request.temperature}
        message = await self._client.messages.create(**args)
        text = "".join(block.text for block in message.content if block.type == "text")
        u = message.usage
        cache_read, cache_write = count(u.cache_read_input_tokens), count(u.cache_creation_input_tokens)
        details = getattr(u, "output_tokens_details", None)
        return text, Usage(
            input_tokens=count(u.input_tokens) + cache_read + cache_write,
            output_tokens=count(u.output_tokens),
            reasoning_tokens=count(details.thinking_tokens if details else 0),
            cached_tokens=cache_read,
        )

    def _map_error(self, err: BaseException) -> ProviderError | None:
        return map_stainless_error(self.name, err, anthropic, self.config.timeout_s)

