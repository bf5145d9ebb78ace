"""Where does the domain-blind move of a GRPO step come from? One step on a whole training-like batch
(both domains' groups, as training takes it), for the embedded default (configs/local.yaml: SIMULATED
workers), from the same weights, in four ways:

- the optimizer: AdamW at learner.lr with fresh moments (training's first step), or plain gradient
  ascent scaled to the same length of parameter change (so only the direction differs);
- the net vote (train.choice_centering, conductor_rl/policy/centering.py): kept, or all of it taken out;

each on the loss training uses (segment weights over every choice token) and on the worker ids alone.
For each: the first worker's mean probability per domain after the step, over the roster's ids (what the
constrained sampler draws); the move shared by the domains (`common`: the mean change over the domains,
summed over the workers in absolute value); the gap between the domains before and after (`separation`:
the difference of their probabilities, summed over the workers; a step that learns to route widens it);
and `id_mass`, the probability the whole vocabulary puts on the ids there (the rest is what the format's
mask removes). Rewards are drawn from the plans' exact
expected accuracies, as benchmarks/credit.py draws them; no worker runs.

    .venv/bin/python benchmarks/shared_move.py --model runs/local/checkpoints/ckpt-000007/model --json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.credit import first_choice, row_logits, sample_batch  # noqa: E402
from benchmarks.measure import keep_result  # noqa: E402
from conductor_rl.config import load_config  # noqa: E402
from conductor_rl.plan.constrained import choice_weights  # noqa: E402
from conductor_rl.policy.centering import net_vote_terms, worker_tokens  # noqa: E402
from conductor_rl.policy.precision import bf16_is_fast  # noqa: E402
from conductor_rl.system import System  # noqa: E402


def step_gradient(model, rows: list[dict], weights: list[list[float]], terms: list[dict], tokens: list[int], autocast):
    """The gradient of training's loss on `rows` (the GRPO surrogate at ratio 1, token-mean over the loss
    weights, plus the logit terms), summed row by row (a batch's graph does not fit in memory)."""
    params = [p for p in model.parameters() if p.requires_grad]
    normalizer = sum(sum(w) for w in weights)
    grads = [torch.zeros_like(p) for p in params]
    for r, w, term in zip(rows, weights, terms):
        if r["advantage"] == 0 and not term:
            continue
        logits = row_logits(model, r, autocast)
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r["ids"]).unsqueeze(-1))[:, 0]
        loss = -r["advantage"] * (torch.tensor(w) * lp).sum() / normalizer
        for t, v in term.items():
            loss = loss + (logits[t, tokens] * torch.tensor(v)).sum() / normalizer
        for acc, g in zip(grads, torch.autograd.grad(loss, params, allow_unused=True)):
            if g is not None:
                acc += g
    return params, grads


def take_step(params, grads, optimizer: str, lr: float) -> float:
    """One step down `grads`; returns the length of the parameter change."""
    before = [p.detach().clone() for p in params]
    adam = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    for p, g in zip(params, grads):
        p.grad = g
    adam.step()
    adam_length = float(torch.sqrt(sum(((p.detach() - b) ** 2).sum() for p, b in zip(params, before))))
    if optimizer == "sgd":  # the same length along the gradient itself
        norm = float(torch.sqrt(sum((g**2).sum() for g in grads)))
        with torch.no_grad():
            for p, b, g in zip(params, before, grads):
                p.copy_(b - g * (adam_length / norm))
    return adam_length


def moves(before: dict[str, list[float]], after: dict[str, list[float]]) -> dict:
    """The change of each domain's first-worker probabilities: `common`, the mean change over the domains
    (summed over the workers in absolute value), and the domains' `separation` before and after (with two
    domains: the gap between their probabilities, summed over the workers): a step that routes widens it."""
    domains = sorted(before)
    change = {d: [a - b for a, b in zip(after[d], before[d])] for d in domains}
    common = [sum(change[d][k] for d in domains) / len(domains) for k in range(len(change[domains[0]]))]
    out = {"change": change, "common": sum(abs(c) for c in common)}
    if len(domains) == 2:
        one, other = domains
        for name, p in (("separation_before", before), ("separation_after", after)):
            out[name] = sum(abs(a - b) for a, b in zip(p[one], p[other]))
    return out


def main(argv: list[str] | None = None) -> int:
    from conductor_rl.models import load_causal_lm

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="configuration overrides (key.sub=value)")
    parser.add_argument("--model", default="smollm2-135m", help="a checkpoint's model folder, or a model name")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions", type=int, default=None, help="questions in the batch (default: train's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    config = load_config(None, args.overrides)
    t = config.train
    rows = sample_batch(
        config, args.model, args.questions or t.questions_per_iteration, t.rollouts_per_question, args.seed
    )
    autocast = config.learner.precision == "bfloat16" or (config.learner.precision == "auto" and bf16_is_fast("cpu"))
    model, _ = load_causal_lm(args.model, "float32")
    model.train()
    state = copy.deepcopy(model.state_dict())
    prompts = System(config).prompts
    tokens = worker_tokens(prompts.tokenizer, prompts.shape.model_ids)
    by_domain = {
        d: [list(p) for p in {tuple(r["prompt"]) for r in rows if r["domain"] == d}]
        for d in {r["domain"] for r in rows}
    }

    def read(model) -> tuple[dict, dict]:  # (over the ids, the ids' mass over the vocabulary) per domain
        over = {d: first_choice(model, ps, tokens, autocast, over_choices=True) for d, ps in by_domain.items()}
        return over, {d: sum(first_choice(model, ps, tokens, autocast)) for d, ps in by_domain.items()}

    first, mass = read(model)
    labels = [[x if x != "format" else None for x in r["labels"]] for r in rows]
    losses = {
        "every choice": [choice_weights(lab) for lab in labels],
        "worker ids": [[w if x == "workers" else 0.0 for w, x in zip(choice_weights(lab), lab)] for lab in labels],
    }
    result: dict = {
        "benchmark": "shared_move",
        "simulated": True,
        "model": args.model,
        "seed": args.seed,
        "rollouts": len(rows),
        "first_worker_probability": first,
        "id_mass": mass,
        "steps": [],
    }
    for loss_name, weights in losses.items():
        for centering in (0.0, 1.0):
            terms = net_vote_terms(
                [r["ids"] for r in rows], labels, weights, [r["advantage"] for r in rows], tokens, centering
            )
            if not centering:
                terms = [{} for _ in rows]
            model.load_state_dict(state)
            params, grads = step_gradient(model, rows, weights, terms, tokens, autocast)
            for optimizer in ("adamw", "sgd"):
                model.load_state_dict(state)
                length = take_step(params, grads, optimizer, config.learner.lr)
                after, after_mass = read(model)
                step = {"loss": loss_name, "centering": centering, "optimizer": optimizer, "length": length}
                result["steps"].append(step | {"after": after, "id_mass": after_mass} | moves(first, after))
                print(
                    json.dumps({k: step[k] for k in ("loss", "centering", "optimizer")} | moves(first, after)),
                    file=sys.stderr,
                )
    model.load_state_dict(state)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    keep_result(result)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
