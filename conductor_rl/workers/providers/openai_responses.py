"""OpenAI Responses API (`provider: openai_responses`), with a reasoning effort.

Usage: `input_tokens`, `output_tokens` (reasoning included),
`output_tokens_details.reasoning_tokens`, `input_tokens_details.cached_tokens`.
The chat messages go in as `input` items; system messages become `instructions`.
"""

from __future__ import annotations

from conductor_rl.workers.providers.base import Usage, WorkerRequest
from conductor_rl.workers.providers.errors import malformed_error
from conductor_rl.workers.providers.http import count, effort_for_budget, split_system
from conductor_rl.workers.providers.openai_chat import OpenAIChatProvider


class OpenAIResponsesProvider(OpenAIChatProvider):
    """Same client and error mapping as Chat Completions; another endpoint."""

    async def _call(self, request: WorkerRequest) -> tuple[str, Usage]:
        system, messages = split_system(request.messages)
        args: dict = {
            "model": self.config.model,
            "input": [{"role": m["role"], "content": m["content"]} for m in messages],
            "max_output_tokens": request.max_tokens,
            "temperature": request.temperature,
            "store": False,  # nothing is kept server-side: every call stands alone
        }
        if system is not None:
            args["instructions"] = system
        effort = effort_for_budget(request.reasoning_budget)
        if effort is not None:
            args["reasoning"] = {"effort": effort}
        response = await self._client.responses.create(**args)
        u = response.usage
        if u is None:
            raise malformed_error(self.name, "no usage in the response")
        return response.output_text, Usage(
            input_tokens=count(u.input_tokens),
            output_tokens=count(u.output_tokens),
            reasoning_tokens=count(u.output_tokens_details.reasoning_tokens if u.output_tokens_details else 0),
            cached_tokens=count(u.input_tokens_details.cached_tokens if u.input_tokens_details else 0),
        )
