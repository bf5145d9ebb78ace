"""OpenAI Chat Completions (`provider: openai`), and any server speaking it
(`provider: openai_compatible`: vLLM, SGLang, Ollama) through `base_url`.

Usage: `prompt_tokens`, `completion_tokens` (reasoning included),
`completion_tokens_details.reasoning_tokens`, `prompt_tokens_details.cached_tokens`.
The arguments per model (max_completion_tokens or max_tokens, reasoning_effort,
temperature or none, chat_template_kwargs) come from request_args.openai_chat_args.

Reasoning text: OpenAI returns none in Chat Completions. vLLM with a reasoning parser
returns it apart, as `message.reasoning` (vLLM >= 0.10; earlier `reasoning_content`);
without one it stays inline in <think> tags, which are taken out of the answer here.
A model whose template opens <think> itself (DeepSeek-R1 distills) and ran out of
tokens before "</think>" wrote nothing but reasoning: its answer is empty.
"""

from __future__ import annotations

from typing import Any

import openai

from conductor_rl.config import WorkerConfig
from conductor_rl.workers.model_traits import traits_for
from conductor_rl.workers.providers.base import ProviderError, Usage, WorkerRequest
from conductor_rl.workers.providers.errors import malformed_error, map_stainless_error
from conductor_rl.workers.providers.http import HttpProvider, Reply, count
from conductor_rl.workers.providers.keys import Secret
from conductor_rl.workers.providers.reasoning_text import CLOSE, OPEN, split_think
from conductor_rl.workers.request_args import openai_chat_args


class OpenAIChatProvider(HttpProvider):
    def __init__(self, config: WorkerConfig, api_key: Secret | None = None) -> None:
        super().__init__(config, api_key)
        self._opens_think = traits_for(config.provider, config.model).template_opens_think

    def _make_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key=self._key.reveal(),
            base_url=self.config.base_url,
            timeout=self.config.timeout_s,
            max_retries=0,
        )

    async def _call(self, request: WorkerRequest) -> Reply:
        completion = await self._client.chat.completions.create(**openai_chat_args(self.config, request))
        if not completion.choices:
            raise malformed_error(self.name, "no choices in the completion")
        choice = completion.choices[0]
        content, finish = choice.message.content or "", choice.finish_reason or ""
        apart = _reasoning_field(choice.message)
        if self._opens_think and finish == "length" and not apart and CLOSE not in content and OPEN not in content:
            text, reasoning = "", content.strip()  # cut off mid-thought: no answer yet
        else:
            text, reasoning = split_think(content)
        u = completion.usage
        if u is None:
            raise malformed_error(self.name, "no usage in the completion")
        prompt_details, completion_details = u.prompt_tokens_details, u.completion_tokens_details
        usage = Usage(
            input_tokens=count(u.prompt_tokens),
            output_tokens=count(u.completion_tokens),
            reasoning_tokens=count(completion_details.reasoning_tokens if completion_details else 0),
            cached_tokens=count(prompt_details.cached_tokens if prompt_details else 0),
        )
        return Reply(text, usage, "\n\n".join(r for r in (apart, reasoning) if r), finish)

    def _map_error(self, err: BaseException) -> ProviderError | None:
        return map_stainless_error(self.name, err, openai, self.config.timeout_s)


def _reasoning_field(message: Any) -> str:
    """vLLM's reasoning-parser output (an extra field the SDK keeps as an attribute)."""
    for name in ("reasoning", "reasoning_content"):
        value = getattr(message, name, None)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""
