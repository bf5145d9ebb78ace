"""OpenAI Responses API (`provider: openai_responses`), with a reasoning effort.

Usage: `input_tokens`, `output_tokens` (reasoning included),
`output_tokens_details.reasoning_tokens`, `input_tokens_details.cached_tokens`.
The chat messages go in as `input` items; system messages become `instructions`
(request_args.openai_responses_args). Reasoning text is the summaries (and any
reasoning_text content) of `reasoning` output items, present only when asked for
(`extra_body: {reasoning: {summary: auto}}`). A response cut off by
`max_output_tokens` has status "incomplete": finish reason "length".
"""

from __future__ import annotations

from typing import Any

from conductor_rl.workers.providers.base import Usage, WorkerRequest
from conductor_rl.workers.providers.errors import malformed_error
from conductor_rl.workers.providers.http import Reply, count
from conductor_rl.workers.providers.openai_chat import OpenAIChatProvider
from conductor_rl.workers.request_args import openai_responses_args


class OpenAIResponsesProvider(OpenAIChatProvider):
    """Same client and error mapping as Chat Completions; another endpoint."""

    async def _call(self, request: WorkerRequest) -> Reply:
        response = await self._client.responses.create(**openai_responses_args(self.config, request))
        u = response.usage
        if u is None:
            raise malformed_error(self.name, "no usage in the response")
        usage = Usage(
            input_tokens=count(u.input_tokens),
            output_tokens=count(u.output_tokens),
            reasoning_tokens=count(u.output_tokens_details.reasoning_tokens if u.output_tokens_details else 0),
            cached_tokens=count(u.input_tokens_details.cached_tokens if u.input_tokens_details else 0),
        )
        return Reply(response.output_text, usage, _reasoning_text(response.output), _finish_reason(response))


def _reasoning_text(output: list[Any]) -> str:
    parts: list[str] = []
    for item in output or []:
        if getattr(item, "type", None) == "reasoning":
            parts += [s.text for s in getattr(item, "summary", None) or [] if s.text]
            parts += [c.text for c in getattr(item, "content", None) or [] if c.text]
    return "\n\n".join(parts)


def _finish_reason(response: Any) -> str:
    if response.status == "incomplete":
        reason = getattr(response.incomplete_details, "reason", None)
        return "length" if reason == "max_output_tokens" else (reason or "incomplete")
    return "stop" if response.status == "completed" else (response.status or "")
