"""Anthropic Messages (`provider: anthropic`), with extended thinking.

Usage: Anthropic's `input_tokens` leaves out cache reads and writes, so our
input is `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`
and `cached_tokens` is the cache reads (cache writes are billed as fresh input
here: slightly under their 1.25x list price). `output_tokens` includes thinking;
`output_tokens_details.thinking_tokens` is the reasoning share when present.

Thinking (request_args.anthropic_args): off, or on with `budget_tokens >= 1024`
below `max_tokens` (adaptive with an effort from Claude 4.7). No temperature is ever sent:
the SDK's API version (2026-10-21) refuses `temperature`, `top_p` and `top_k`.
The answer is the text blocks; `thinking` blocks are the reasoning; redacted
thinking carries no text and is left out. stop_reason "max_tokens" is "length".
"""

from __future__ import annotations

import anthropic

from conductor_rl.config import WorkerConfig
from conductor_rl.workers.providers.base import ProviderError, Usage, WorkerRequest
from conductor_rl.workers.providers.errors import map_stainless_error
from conductor_rl.workers.providers.http import HttpProvider, Reply, count
from conductor_rl.workers.providers.keys import Secret
from conductor_rl.workers.request_args import anthropic_args

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}


class AnthropicMessagesProvider(HttpProvider):
    def __init__(self, config: WorkerConfig, api_key: Secret | None = None) -> None:
        super().__init__(config, api_key)

    def _make_client(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=self._key.reveal(),
            base_url=self.config.base_url,
            timeout=self.config.timeout_s,
            max_retries=0,
        )

    async def _call(self, request: WorkerRequest) -> Reply:
        message = await self._client.messages.create(**anthropic_args(self.config, request))
        text = "".join(block.text for block in message.content if block.type == "text")
        reasoning = "\n\n".join(
            block.thinking for block in message.content if block.type == "thinking" and block.thinking
        )
        u = message.usage
        cache_read, cache_write = count(u.cache_read_input_tokens), count(u.cache_creation_input_tokens)
        details = getattr(u, "output_tokens_details", None)
        usage = Usage(
            input_tokens=count(u.input_tokens) + cache_read + cache_write,
            output_tokens=count(u.output_tokens),
            reasoning_tokens=count(details.thinking_tokens if details else 0),
            cached_tokens=cache_read,
        )
        stop = message.stop_reason or ""
        return Reply(text, usage, reasoning, FINISH_REASONS.get(stop, stop))

    def _map_error(self, err: BaseException) -> ProviderError | None:
        return map_stainless_error(self.name, err, anthropic, self.config.timeout_s)
