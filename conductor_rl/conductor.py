"""The Conductor as a transformers model in this process: prompt in, sampled
plan text out. Training samples through vLLM instead (GeneratorActor); this is
what `conductor-rl ask` and the tests use, and the fallback where vLLM cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conductor_rl.config import ConductorConfig
from conductor_rl.models import load_causal_lm
from conductor_rl.prompts import apply_chat_template, conductor_messages


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    truncated: bool   # stopped by max_new_tokens rather than end-of-sequence


class Conductor:
    def __init__(self, config: ConductorConfig, model: Any = None, tokenizer: Any = None) -> None:
        self.config = config
        if model is None or tokenizer is None:
            model, tokenizer = load_causal_lm(config.model, config.dtype)
        self.model, self.tokenizer = model, tokenizer

    def prompt(self, question: str, n_workers: int) -> str:
        messages = conductor_messages(question, n_workers, self.config.max_steps, self.config.n_examples)
        return apply_chat_template(self.tokenizer, messages)

    def write_plans(self, question: str, n_workers: int, n: int = 1, seed: int | None = None) -> list[Completion]:
        """Sample `n` plan completions for one question."""
        import torch

        prompt = self.prompt(question, n_workers)
        inputs = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        prompt_len = inputs["input_ids"].shape[1]
        torch.manual_seed(self.config.seed if seed is None else seed)
        sampling = self.config.temperature > 0
        with torch.no_grad():
            out = self.model.generate(
                **inputs,
                do_sample=sampling,
                temperature=self.config.temperature if sampling else None,
                top_p=self.config.top_p if sampling else None,
                top_k=0 if sampling else None,
                max_new_tokens=self.config.max_new_tokens,
                num_return_sequences=n,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
        eos = self.tokenizer.eos_token_id
        completions = []
        for row in out[:, prompt_len:]:
            ids = row.tolist()
            ended = eos in ids
            if ended:
                ids = ids[: ids.index(eos)]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            completions.append(Completion(text, prompt_len, len(ids), truncated=not ended))
        return completions
