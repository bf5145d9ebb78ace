"""A worker that is a transformers model in this process (offline).

Generation runs in a thread so the event loop keeps serving other steps; one
model generates one request at a time (a lock), since a transformers model is
not safe to call from several threads at once. Reasoning the model writes in
<think> tags is taken out of the answer; a generation that hit max_tokens before
its end-of-sequence token has finish reason "length".
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING

from conductor_rl.config import WorkerConfig
from conductor_rl.models import load_causal_lm
from conductor_rl.plan.prompts import apply_chat_template
from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.providers.base import Usage, WorkerRequest, WorkerResponse
from conductor_rl.workers.providers.reasoning_text import split_think

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class LocalProvider:
    simulated = False

    def __init__(
        self,
        config: WorkerConfig,
        model: PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        seed: int = 0,
    ) -> None:
        self.name = config.name
        self.config = config
        self.seed = seed
        if model is None or tokenizer is None:
            model, tokenizer = load_causal_lm(config.model)
        self.model, self.tokenizer = model, tokenizer
        self._lock = threading.Lock()

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        started = time.perf_counter()
        raw, usage, finish_reason = await asyncio.to_thread(self._generate, request)
        text, reasoning = split_think(raw)
        return WorkerResponse(
            text=text,
            usage=usage,
            latency_s=time.perf_counter() - started,
            cost_usd=cost_of(usage, self.config.price),
            reasoning=reasoning,
            finish_reason=finish_reason,
        )

    def _generate(self, request: WorkerRequest) -> tuple[str, Usage, str]:
        from conductor_rl.generation import generate  # torch: only where a local worker is built

        prompt_ids = self.tokenizer(
            apply_chat_template(self.tokenizer, request.messages), add_special_tokens=False
        ).input_ids
        with self._lock:
            [[completion]] = generate(
                self.model,
                self.tokenizer,
                [prompt_ids],
                max_new_tokens=request.max_tokens,
                temperature=request.temperature,
                seed=self.seed,
            )
        return (
            completion.text,
            Usage(input_tokens=len(prompt_ids), output_tokens=len(completion.token_ids)),
            "length" if completion.finish_reason == "length" else "stop",
        )

    async def aclose(self) -> None:
        return None
