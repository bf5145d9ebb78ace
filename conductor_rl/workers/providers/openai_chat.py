"""OpenAI Chat Completions (`provider: openai`), and any server speaking it
(`provider: openai_compatible`: vLLM, SGLang, Ollama) through `base_url`.

Usage: `prompt_tokens`, `completion_tokens` (reasoning included),
`completion_tokens_details.reasoning_tokens`, `prompt_tokens_details.cached_tokens`.
OpenAI itself takes `max_completion_tokens` and a `reasoning_effort`; servers of
open models get the older `max_tokens`, which all of them understand.
"""

from __future__ import annotations

import openai

from conductor_rl.config import WorkerConfig
from conductor_rl.workers.providers.base import ProviderError, Usage, WorkerRequest
from conductor_rl.workers.providers.errors import map_stainless_error, malformed_error
from conductor_rl.workers.providers.http import HttpProvider, count, effort_for_budget
from conductor_rl.workers.providers.keys import Secret


class OpenAIChatProvider(HttpProvider):
    def __init__(self, config: WorkerConfig, api_key: Secret | None = None) -> None:
        super().__init__(config, api_key)
        self._official = config.provider == "openai"

    def _make_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key=self._key.reveal(), base_url=self.config.base_url, timeout=self.config.timeout_s, max_retries=0,
        )

    async def _call(self, request: WorkerRequest) -> tuple[str, Usage]:
        args: dict = {"model": self.config.model, "messages": request.messages, "temperature": request.temperature}
        if self._official:
            args["max_completion_tokens"] = request.max_tokens
            effort = effort_for_budget(request.reasoning_budget)
            if effort is not None:
                args["reasoning_effort"] = effort
        else:
            args["max_tokens"] = request.max_tokens
        completion = await self._client.chat.completions.create(**args)
        if not completion.choices:
            raise malformed_error(self.name, "no choices in the completion")
        text = completion.choices[0].message.content or ""
        u = completion.usage
        if u is None:
            raise malformed_error(self.name, "no usage in the completion")
        prompt_details, completion_details = u.prompt_tokens_details, u.completion_tokens_details
        return text, Usage(
            input_tokens=count(u.prompt_tokens),
            output_tokens=count(u.completion_tokens),
            reasoning_tokens=count(completion_details.reasoning_tokens if completion_details else 0),
            cached_tokens=count(prompt_details.cached_tokens if prompt_details else 0),
        )

    def _map_error(self, err: BaseException) -> ProviderError | None:
        return map_stainless_error(self.name, err, openai, self.config.timeout_s)

