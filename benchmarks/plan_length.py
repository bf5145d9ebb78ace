"""A random Conductor steered to plans of a chosen average length (benchmarks/iteration.py):
the random tiny-qwen2 writes plans much shorter than the paper's."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from conductor_rl.config import Config
from conductor_rl.data import Question
from conductor_rl.system import System


def steer_plan_length(config: Config, questions: Sequence[Question], target_steps: float, folder: Path) -> dict:
    """Save into `folder` a copy of the Conductor whose plans average about
    `target_steps` steps (at most conductor.max_steps), for `questions`' prompts.

    The random tiny-qwen2 mostly closes `model_id = [...]` after its first id, so
    its plans are much shorter than the paper's (about 3 steps on average). Under
    the format constraint its only say in a plan's length is, after each worker
    id, "," (one more step) against "]" (done). This adds to the "," token's
    (tied) embedding row a multiple c of the mean final hidden state at those
    decisions, raising the "," logit there; c is found by bisection so that the
    expected length, 1 + q1 + q1 q2 + ... (q_k: P(",") after k ids, constrained
    to the allowed tokens, averaged over the prompts), meets the target. It is
    still a random policy that the loop samples, trains and syncs as any other."""
    import random

    import torch

    from conductor_rl.models import load_causal_lm, resolve_model

    c = config.conductor
    n_workers = len(config.workers)
    if not 1.0 <= target_steps <= c.max_steps:
        raise ValueError(f"target steps {target_steps} must be between 1 and conductor.max_steps={c.max_steps}")
    model, tokenizer = load_causal_lm(c.model, "float32")
    prompts = System(config, tokenizer).prompts
    text = [
        tokenizer.convert_tokens_to_string([t]) for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    ]
    close = [i for i, t in enumerate(text) if t.startswith("]") and "]\nsubtasks = [".startswith(t)]
    more = [i for i, t in enumerate(text) if t and ", ".startswith(t)]
    comma = tokenizer.convert_tokens_to_ids(",")
    rng = random.Random(0)
    draws = 3  # id sequences per question and length, averaged
    contexts = [
        [
            [
                prompts.question_ids(q)
                + tokenizer(", ".join(str(rng.randrange(n_workers)) for _ in range(k)), add_special_tokens=False)[
                    "input_ids"
                ]
                for _ in range(draws)
            ]
            for k in range(1, c.max_steps)
        ]
        for q in questions
    ]
    embedding = model.get_output_embeddings().weight  # the head; tiny-qwen2 ties it to the input embedding
    original = embedding[comma].detach().clone()
    allowed = torch.tensor(close + more)

    @torch.no_grad()
    def last_hidden(ids: list[int]) -> torch.Tensor:
        # The body only, and the head on the last position's allowed tokens: a full
        # [positions x vocabulary] head would cost 100 times more here.
        return model.model(torch.tensor([ids])).last_hidden_state[0, -1]

    @torch.no_grad()
    def expected_steps() -> float:
        total = 0.0
        for chain in contexts:
            survive, steps = 1.0, 1.0
            for same_length in chain:
                q = 0.0
                for ids in same_length:
                    p = torch.softmax(embedding[allowed] @ last_hidden(ids), -1)
                    q += float(p[len(close) :].sum()) / len(same_length)
                survive *= q
                steps += survive
            total += steps
        return total / len(contexts)

    hidden = torch.stack([last_hidden(ids) for chain in contexts for ids in chain[0]])
    direction = hidden.mean(0) / hidden.mean(0).norm() ** 2

    def set_bias(scale: float) -> float:
        with torch.no_grad():
            embedding[comma] = original + scale * direction
        return expected_steps()

    before = set_bias(0.0)
    lo = hi = 0.0  # bracket the target: expected steps grow with the scale
    if before < target_steps:
        hi = 1.0
        while set_bias(hi) < target_steps and hi < 64:
            lo, hi = hi, hi * 2
    else:
        lo = -1.0
        while set_bias(lo) > target_steps and lo > -64:
            hi, lo = lo, lo * 2
    for _ in range(14):
        mid = (lo + hi) / 2
        if set_bias(mid) < target_steps:
            lo = mid
        else:
            hi = mid
    scale = (lo + hi) / 2
    after = set_bias(scale)
    folder.mkdir(parents=True, exist_ok=True)
    source = Path(resolve_model(c.model))
    for item in source.iterdir():  # tokenizer, chat template, generation config
        if item.is_file() and item.suffix != ".safetensors":
            (folder / item.name).write_bytes(item.read_bytes())
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {
        "from": c.model,
        "comma_bias_scale": round(scale, 4),
        "expected_steps_before": round(before, 3),
        "expected_steps_after": round(after, 3),
        "target_steps": target_steps,
    }
