"""Sampling from a transformers causal LM: the one generation loop that the
Conductor, the transformers sampler and the local worker provider share.

`generate` samples `n` completions per prompt and returns, per completion, its
tokens and each token's log-probability under the raw model at temperature 1,
before any constraint: the policy the learner recomputes (GRPO's "old"
log-probs). Sampling itself applies, in this order: the optional constraint
(any `Constraint`, such as a plan's: conductor_rl/plan/constrained.py), the
temperature, then top-p; a constraint first, so top-p can never remove every
token it allows. This module imports no other project module: every stage that
samples (workers, plans, the policy) stands on it.

One rule ends a completion: the first end-of-sequence token (left out of its
tokens, and reported with its log-prob), else the stop condition, else
`max_new_tokens`, which marks it truncated.

Seeding is per call and per prompt: prompt i draws from its own
`torch.Generator` seeded with `prompt_seed(seed, i)`, so the same seed repeats
exactly, a prompt's samples do not depend on the prompts batched with it, and
torch's global random state is left alone (other threads may be sampling).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Prompt = str | Sequence[int]


class Constraint(Protocol):
    """What may be sampled: a plan's is `conductor_rl.plan.constrained.PlanConstraint`."""

    def processor(self, prompt_len: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """A logits processor for one call whose prompts are `prompt_len` tokens wide:
        (sequences so far, log-probs) -> the log-probs with every forbidden token at -inf."""
        ...


@dataclass(frozen=True)
class Generation:
    text: str  # the tokens decoded, special tokens skipped
    token_ids: tuple[int, ...]  # the sampled tokens, the ending end-of-sequence token excluded
    logprobs: tuple[float, ...]  # one per token in token_ids, of the unconstrained model at temperature 1
    finish_reason: Literal["eos", "stop", "length"]
    eos_id: int | None = None  # the end-of-sequence token that ended it ("eos" only)
    eos_logprob: float | None = None  # and its log-prob, for trainers that keep it (as vLLM does)

    @property
    def finished(self) -> bool:
        """Ended by an end-of-sequence token or the stop condition."""
        return self.finish_reason != "length"

    @property
    def truncated(self) -> bool:
        """Cut off by max_new_tokens."""
        return self.finish_reason == "length"


def prompt_seed(seed: int, index: int) -> int:
    """The seed of prompt `index` in a call seeded with `seed`. A shared seed would
    give every prompt the same random draws, so groups would not be independent."""
    return (seed * 7919 + index * 1_000_003) % (2**31)


def seeds_per_prompt(seed: int | Sequence[int], n_prompts: int) -> list[int]:
    """Each prompt's seed: derived from one seed (`prompt_seed`), or given one per prompt
    (calls batched together by chance, such as recursive calls, keep their own draws)."""
    if isinstance(seed, int):
        return [prompt_seed(seed, i) for i in range(n_prompts)]
    if len(seed) != n_prompts:
        raise ValueError(f"{len(seed)} seeds for {n_prompts} prompts: give one seed, or one per prompt")
    return [int(s) for s in seed]


def sample_seed(seed: int, iteration: int) -> int:
    """Each training iteration samples with its own seed, the same on resume."""
    return (seed * 1_000_003 + iteration) % (2**31)


def end_tokens(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Token ids that end a completion: the tokenizer's end-of-sequence token and
    any the model's generation config names (Qwen2.5 lists two)."""
    ends = {tokenizer.eos_token_id}
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ends.update(configured if isinstance(configured, (list, tuple)) else [configured])
    ends.discard(None)
    if not ends:
        raise ValueError(
            "neither the tokenizer nor the model's generation config names an end-of-sequence token; "
            "set tokenizer.eos_token"
        )
    return ends


@torch.no_grad()
def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Prompt],
    *,
    max_new_tokens: int,
    n: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | Sequence[int] | None = None,
    constraint: Constraint | None = None,
    stop: Callable[[str], bool] | None = None,
) -> list[list[Generation]]:
    """`n` completions of each prompt (text, or token ids used exactly), one list per prompt.

    temperature 0 is greedy. `stop(text)` is asked after each token with the
    completion's text so far; True ends that completion there (the token kept).
    `seed` None draws a fresh seed (still without touching torch's global state);
    a list gives each prompt its own (`seeds_per_prompt`).
    """
    if max_new_tokens < 1 or n < 1:
        raise ValueError(f"need max_new_tokens >= 1 and n >= 1, got {max_new_tokens} and {n}")
    if not 0.0 < top_p <= 1.0 or temperature < 0:
        raise ValueError(f"need 0 < top_p <= 1 and temperature >= 0, got top_p={top_p}, temperature={temperature}")
    if not prompts:
        return []
    device = model.device
    ids, attention = _left_padded(tokenizer, prompts, device)
    rows, width = len(prompts) * n, ids.shape[1]
    ends = end_tokens(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(ends)

    base = torch.Generator().seed() if seed is None else seed
    generators = [torch.Generator(device=device).manual_seed(s) for s in seeds_per_prompt(base, len(prompts))]
    mask = None if constraint is None else constraint.processor(width)
    top_p_warper = None
    if top_p < 1.0:
        from transformers import TopPLogitsWarper

        top_p_warper = TopPLogitsWarper(top_p)

    # Each prompt runs once; its key/value cache is repeated for its n completions.
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.batch_repeat_interleave(n)
    logits = out.logits[:, -1].repeat_interleave(n, dim=0)
    sequences = ids.repeat_interleave(n, dim=0)
    attention = attention.repeat_interleave(n, dim=0)
    next_position = positions[:, -1:].repeat_interleave(n, dim=0) + 1

    tokens: list[list[int]] = [[] for _ in range(rows)]
    logps: list[list[float]] = [[] for _ in range(rows)]
    ended: list[Generation | None] = [None] * rows
    for step in range(max_new_tokens):
        policy = torch.log_softmax(logits.float(), dim=-1)
        scores = policy if mask is None else mask(sequences, policy)
        chosen = _choose(scores, temperature, top_p_warper, sequences, generators, n)
        chosen_logps = policy.gather(-1, chosen.unsqueeze(-1)).squeeze(-1).tolist()
        for r, token in enumerate(chosen.tolist()):
            if ended[r] is not None:
                continue
            if token in ends:
                ended[r] = _generation(tokenizer, tokens[r], logps[r], "eos", token, chosen_logps[r])
                continue
            tokens[r].append(token)
            logps[r].append(chosen_logps[r])
            if stop is not None and stop(tokenizer.decode(tokens[r], skip_special_tokens=True)):
                ended[r] = _generation(tokenizer, tokens[r], logps[r], "stop")
        if all(e is not None for e in ended) or step == max_new_tokens - 1:
            break
        # Rows that have ended are fed padding: their outputs are never read again.
        feed = torch.tensor([pad if e is not None else t for e, t in zip(ended, chosen.tolist())], device=device)
        sequences = torch.cat([sequences, feed.unsqueeze(-1)], dim=-1)
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=-1)
        out = model(
            input_ids=feed.unsqueeze(-1),
            attention_mask=attention,
            position_ids=next_position,
            past_key_values=cache,
            use_cache=True,
        )
        cache, logits, next_position = out.past_key_values, out.logits[:, -1], next_position + 1
    done = [e if e is not None else _generation(tokenizer, tokens[r], logps[r], "length") for r, e in enumerate(ended)]
    return [done[i * n : (i + 1) * n] for i in range(len(prompts))]


def _left_padded(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[Prompt], device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask of the prompts, padded on the left so every
    prompt's last token is in the last column."""
    encoded = [tokenizer(p, add_special_tokens=False).input_ids if isinstance(p, str) else list(p) for p in prompts]
    if any(not e for e in encoded):
        raise ValueError("a prompt is empty: generation needs at least one prompt token to continue from")
    width = max(len(e) for e in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    for i, e in enumerate(encoded):
        ids[i, width - len(e) :] = torch.tensor(e, dtype=torch.long)
        attention[i, width - len(e) :] = 1
    return ids.to(device), attention.to(device)


def _choose(
    scores: torch.Tensor,
    temperature: float,
    top_p_warper: Any,
    sequences: torch.Tensor,
    generators: list[torch.Generator],
    n: int,
) -> torch.Tensor:
    """One token per row: greedy at temperature 0, else drawn with the row's prompt's generator."""
    if temperature == 0:
        return scores.argmax(dim=-1)
    scores = scores / temperature
    if top_p_warper is not None:
        scores = top_p_warper(sequences, scores)
    # Inverse-CDF sampling: one uniform draw per row against the cumulative probabilities. Over a
    # vocabulary of some 150k tokens torch.multinomial is far slower; float64 keeps the cumulative sum
    # exact enough, and `right=True` never lands on a token of probability 0.
    cumulative = torch.softmax(scores, dim=-1).double().cumsum(dim=-1)
    draws = torch.cat([torch.rand(n, 1, generator=g, dtype=torch.float64) for g in generators])
    chosen = torch.searchsorted(cumulative, draws * cumulative[:, -1:], right=True).squeeze(-1)
    return chosen.clamp_(max=scores.shape[-1] - 1)


def _generation(
    tokenizer: PreTrainedTokenizerBase,
    ids: list[int],
    logps: list[float],
    reason: Literal["eos", "stop", "length"],
    eos_id: int | None = None,
    eos_logprob: float | None = None,
) -> Generation:
    return Generation(
        tokenizer.decode(ids, skip_special_tokens=True), tuple(ids), tuple(logps), reason, eos_id, eos_logprob
    )
