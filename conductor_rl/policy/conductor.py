"""The Conductor as a transformers model in this process: prompt in, sampled
plan text out. Training samples through vLLM instead (GeneratorActor); this is
what `conductor-rl ask` and the tests use, and the fallback where vLLM cannot run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from conductor_rl.config import ConductorConfig
from conductor_rl.models import load_causal_lm
from conductor_rl.plan.prompts import apply_chat_template, conductor_messages


@dataclass(frozen=True)
class Completion:
    text: str                # includes the configured response prefix, as the parser must see it
    token_ids: tuple[int, ...]  # the sampled tokens (prefix excluded)
    prompt_tokens: int
    completion_tokens: int
    truncated: bool          # stopped by max_new_tokens rather than end-of-sequence or a finished plan


_ACCESS_LINE = re.compile(r"^[ \t]*access_list[ \t]*=(.*)$", re.MULTILINE)


def plan_finished(text: str) -> bool:
    """True once an `access_list = [...]` line has closed its brackets: the
    last of the three lists is complete, so sampling further cannot help."""
    match = None
    for match in _ACCESS_LINE.finditer(text):
        pass
    if match is None:
        return False
    tail = text[match.start(1):]
    depth = 0
    for char in tail:
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
            if depth <= 0:
                return True
    return False


class Conductor:
    def __init__(self, config: ConductorConfig, model: Any = None, tokenizer: Any = None) -> None:
        self.config = config
        if model is None or tokenizer is None:
            model, tokenizer = load_causal_lm(config.model, config.dtype)
        self.model, self.tokenizer = model, tokenizer
        self._format: Any = None  # PlanFormat token tables, built on first constrained call

    def prompt(self, question: str, n_workers: int) -> str:
        """The full prompt text, ending with the response prefix."""
        messages = conductor_messages(question, n_workers, self.config.max_steps, self.config.n_examples)
        return apply_chat_template(self.tokenizer, messages) + self.config.response_prefix

    def write_plans(
        self, question: str, n_workers: int, n: int = 1, seed: int | None = None, temperature: float | None = None
    ) -> list[Completion]:
        """Sample `n` plan completions for one question."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        temperature = self.config.temperature if temperature is None else temperature
        prompt = self.prompt(question, n_workers)
        inputs = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        prompt_len = inputs["input_ids"].shape[1]
        prefix, tokenizer = self.config.response_prefix, self.tokenizer

        class PlanDone(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                texts = tokenizer.batch_decode(input_ids[:, prompt_len:], skip_special_tokens=True)
                return torch.tensor([plan_finished(prefix + t) for t in texts], device=input_ids.device)

        stopping = StoppingCriteriaList([PlanDone()]) if self.config.stop_after_plan else None
        sampling = temperature > 0
        processors = self._format_processors(prompt_len, n_workers, temperature) if self.config.constrain_format else None
        torch.manual_seed(self.config.seed if seed is None else seed)
        with torch.no_grad():
            out = self.model.generate(
                **inputs,
                do_sample=sampling,
                # Constrained: the format mask must act before temperature and top-p,
                # so those are applied by our own processor list instead of generate's.
                temperature=1.0 if processors or not sampling else temperature,
                top_p=1.0 if processors or not sampling else self.config.top_p,
                top_k=0 if sampling else None,
                logits_processor=processors,
                max_new_tokens=self.config.max_new_tokens,
                num_return_sequences=n,
                stopping_criteria=stopping,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        completions = []
        for row in out[:, prompt_len:]:
            ids = row.tolist()
            ended = eos in ids
            if ended:
                ids = ids[: ids.index(eos)]
            while ids and pad is not None and ids[-1] == pad:  # rows that stopped early are padded
                ids.pop()
            text = prefix + self.tokenizer.decode(ids, skip_special_tokens=True)
            finished = ended or plan_finished(text)
            completions.append(Completion(text, tuple(ids), prompt_len, len(ids), truncated=not finished))
        return completions

    def _format_processors(self, prompt_len: int, n_workers: int, temperature: float) -> Any:
        from conductor_rl.plan.constrained import PlanFormat, format_processors

        if self._format is None:
            self._format = PlanFormat(self.tokenizer, self.config.max_subtask_tokens)
        return format_processors(self._format, prompt_len, n_workers, self.config.max_steps, temperature,
                                 self.config.top_p, self.config.response_prefix)
