"""A worker that is a transformers model in this process (offline).

Generation runs in a thread so the event loop keeps serving other steps; one
model generates one request at a time (a lock), since a transformers model is
not safe to call from several threads at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from conductor_rl.config import WorkerConfig
from conductor_rl.workers.costs import cost_of
from conductor_rl.models import load_causal_lm
from conductor_rl.plan.prompts import apply_chat_template
from conductor_rl.workers.providers.base import Usage, WorkerRequest, WorkerResponse


class LocalProvider:
    simulated = False

    def __init__(self, config: WorkerConfig, model: Any = None, tokenizer: Any = None, seed: int = 0) -> None:
        self.name = config.name
        self.config = config
        self.seed = seed
        if model is None or tokenizer is None:
            model, tokenizer = load_causal_lm(config.model)
        self.model, self.tokenizer = model, tokenizer
        self._lock = threading.Lock()

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        started = time.perf_counter()
        text, usage = await asyncio.to_thread(self._generate, request)
        return WorkerResponse(
            text=text,
            usage=usage,
            latency_s=time.perf_counter() - started,
            cost_usd=cost_of(usage, self.config.price),
        )

    def _generate(self, request: WorkerRequest) -> tuple[str, Usage]:
        import torch

        prompt = apply_chat_template(self.tokenizer, request.messages)
        inputs = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        sampling = request.temperature > 0
        with self._lock, torch.no_grad():
            torch.manual_seed(self.seed)
            out = self.model.generate(
                **inputs,
                do_sample=sampling,
                temperature=request.temperature if sampling else None,
                top_k=0 if sampling else None,
                max_new_tokens=request.max_tokens,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
        new = out[0, inputs["input_ids"].shape[1]:].tolist()
        eos = self.tokenizer.eos_token_id
        if eos in new:
            new = new[: new.index(eos)]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return text, Usage(input_tokens=int(inputs["input_ids"].shape[1]), output_tokens=len(new))

    async def aclose(self) -> None:
        return None
