"""benchmarks/shared_move.py: one step on a whole batch, by optimizer and with or without the net vote,
on rows made here by hand for the random tiny-qwen2 (the benchmark samples them with vLLM from a trained
Conductor; its figures are in docs/results.md)."""

from __future__ import annotations

import pytest
import torch

from conductor_rl.plan.constrained import choice_segments, choice_weights
from conductor_rl.policy.centering import net_vote_terms
from tests.benchmark_scripts import load_benchmark

pytestmark = pytest.mark.light  # a tiny model in this process: no Ray, vLLM or learner

PREFIX = "model_id = ["


def test_a_step_is_split_into_a_shared_and_a_separating_move_and_sgd_takes_adamws_length(tiny_qwen2):
    from conductor_rl.models import load_causal_lm

    bench = load_benchmark("shared_move")
    model, tokenizer = load_causal_lm("tiny-qwen2")
    tokens = [tokenizer.encode(str(k), add_special_tokens=False)[0] for k in range(3)]
    rows = []
    for domain, question, good in (("math", "What is 17 + 25?", "0"), ("mmlu", "Which gas do plants take in?", "1")):
        prompt = tokenizer.encode(f"Question: {question}\n" + PREFIX, add_special_tokens=False)
        for first, advantage in ((good, 1.0), ("2", -1.0)):
            ids = tokenizer.encode(
                f'{first}]\nsubtasks = ["Answer it"]\naccess_list = [[]]\n', add_special_tokens=False
            )
            labels = [x or "format" for x in choice_segments(tokenizer, ids, PREFIX)]
            rows.append({"prompt": prompt, "ids": ids, "advantage": advantage, "labels": labels, "domain": domain})
    labels = [[x if x != "format" else None for x in r["labels"]] for r in rows]
    weights = [choice_weights(lab) for lab in labels]
    prompts = {d: [rows[2 * k]["prompt"]] for k, d in enumerate(("math", "mmlu"))}
    first = {d: bench.first_choice(model, p, tokens, False, over_choices=True) for d, p in prompts.items()}
    raw = {d: bench.first_choice(model, p, tokens, False) for d, p in prompts.items()}
    assert all(sum(first[d]) == pytest.approx(1.0) and sum(raw[d]) < 1.0 for d in prompts)  # over the ids alone
    state = {k: v.clone() for k, v in model.state_dict().items()}

    plain = [{} for _ in rows]
    params, grads = bench.step_gradient(model, rows, weights, plain, tokens, False)
    # Worker 2 loses on both domains: the net vote is against it (a negative term, which pushes back), and
    # taking it out changes the gradient.
    votes = net_vote_terms([r["ids"] for r in rows], labels, weights, [r["advantage"] for r in rows], tokens, 1.0)
    assert all(v[0][2] < 0 < v[0][0] for v in votes)
    _, centred = bench.step_gradient(model, rows, weights, votes, tokens, False)
    assert not all(torch.equal(a, b) for a, b in zip(grads, centred))

    lengths = {}
    for optimizer in ("adamw", "sgd"):
        model.load_state_dict(state)
        lengths[optimizer] = bench.take_step(params, grads, optimizer, 1e-3)
        moved = torch.sqrt(sum(((p.detach() - state[n]) ** 2).sum() for n, p in model.named_parameters()))
        assert float(moved) == pytest.approx(lengths[optimizer], rel=1e-3)
        after = {d: bench.first_choice(model, p, tokens, False, over_choices=True) for d, p in prompts.items()}
        split = bench.moves(first, after)
        assert split["common"] > 0 and split["separation_after"] != split["separation_before"]
        assert split["change"]["math"] == pytest.approx([a - b for a, b in zip(after["math"], first["math"])])
    assert lengths["adamw"] == pytest.approx(lengths["sgd"])
