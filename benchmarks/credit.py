"""Where does a GRPO step's credit go? On one batch of plans sampled as training samples them (vLLM,
the constrained format), for the embedded default (configs/local.yaml: SIMULATED workers):

1. the sampler's log-prob of each token against the learner's (the same weights; the learner takes
   a log-softmax over the whole vocabulary, the sampler samples under the format's mask): mean |Δ|
   and the spread of the ratio exp(learner - sampler), per kind of token;
2. the share of the loss's gradient that falls on each kind of choice token (workers and step count,
   subtask text, access), as a projection on the whole gradient (the shares sum to 1) and as the norm
   of each part;
3. after one optimizer step (AdamW at learner.lr, fresh moments), the advantage-weighted log-prob
   change per kind: sum of A x (log p after - log p before) over its tokens, over the batch's
   loss weight: which choices the step actually moved;
4. interference between domains: one step on each domain's groups alone (the worker tokens, segment
   weights), and the change it makes to every domain's advantage-weighted worker log-probs and first
   worker's probability; the two domains' gradients' cosine (`interference`). `--moved all layers`
   measures it twice: a step on every parameter, and on the transformer layers' matrices alone.

Items 2 and 3 for train.choice_weighting token and segment, from the same weights and the same batch. Rewards
are drawn from the plans' exact expected accuracies (conductor_rl/workers/sim_expectation.py), as the
tabular yardstick draws them; no worker runs.

    .venv/bin/python benchmarks/credit.py --model runs/local/checkpoints/ckpt-000007/model --json
    .venv/bin/python benchmarks/credit.py --model smollm2-135m     # the untrained model (no warm start)
    .venv/bin/python benchmarks/credit.py --model ... --questions 16 --only-interference
    .venv/bin/python benchmarks/credit.py --model ... --questions 16 --only-interference --moved all layers
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import keep_result  # noqa: E402
from conductor_rl.config import load_config  # noqa: E402
from conductor_rl.data import load_dataset  # noqa: E402
from conductor_rl.data.stream import QuestionStream  # noqa: E402
from conductor_rl.plan import PlanError, parse_plan  # noqa: E402
from conductor_rl.plan.constrained import SEGMENTS, choice_segments, choice_weights  # noqa: E402
from conductor_rl.policy.grpo import group_advantages  # noqa: E402
from conductor_rl.system import System  # noqa: E402
from conductor_rl.workers.sim_expectation import expected_accuracy, sim_specs  # noqa: E402

KINDS = (*SEGMENTS, "format")


def sample_batch(config, model: str, questions: int, group: int, seed: int) -> list[dict]:
    """One training-like batch: `questions` drawn as iteration 0 draws them, `group` plans each."""
    from conductor_rl.data.difficulty import difficulty_of
    from conductor_rl.policy.sampling import VLLMSampler

    system = System(config)
    prompts = system.prompts
    stream = QuestionStream(load_dataset(config.data.questions), seed=seed, balance_domains=True)
    drawn = stream.take(questions)
    sampler = VLLMSampler(model, seed=seed, max_model_len=config.generator.max_model_len)
    how = system.generation("train")
    ids = [prompts.question_ids(q) for q in drawn]
    groups = sampler.sample(ids, group, how.temperature, how.max_new_tokens, seed=seed, shape=prompts.shape_for(None))
    specs = sim_specs(config.workers)
    rng = random.Random(f"credit/{seed}")
    rows = []
    for q, prompt, samples in zip(drawn, ids, groups):
        for s in samples:
            text = config.conductor.response_prefix + s.text
            try:
                plan = parse_plan(text, len(config.workers), config.conductor.max_steps)
                accuracy = expected_accuracy(plan, q.question, q.domain, difficulty_of(q.source, q.meta), specs)
                reward = 1.0 if rng.random() < (accuracy or 0.0) else 0.5
            except PlanError:
                reward = 0.0
            rows.append(
                {
                    "prompt": prompt,
                    "ids": list(s.token_ids),
                    "sampler": list(s.logprobs),
                    "reward": reward,
                    "domain": q.domain,
                }
            )
    del sampler
    advantages = group_advantages(torch.tensor([r["reward"] for r in rows]), group).advantages.tolist()
    labels_of = prompts.tokenizer
    for r, a in zip(rows, advantages):
        r["advantage"] = a
        r["labels"] = [x or "format" for x in choice_segments(labels_of, r["ids"], config.conductor.response_prefix)]
    return rows


def row_logits(model, row: dict, autocast: bool) -> torch.Tensor:
    """[completion tokens, vocabulary] the logits that predict the row's completion tokens under `model`,
    the vocabulary projection only where the completion is."""
    ids = torch.tensor([row["prompt"] + row["ids"]])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        hidden = model(input_ids=ids, output_hidden_states=True, logits_to_keep=1).hidden_states[-1]
        return model.get_output_embeddings()(hidden[0, len(row["prompt"]) - 1 : -1]).float()


def row_logprobs(model, row: dict, autocast: bool) -> torch.Tensor:
    """The row's completion log-probs under `model`: a log-softmax over the whole vocabulary, as the
    learner takes it."""
    logits = row_logits(model, row, autocast)
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(row["ids"]).unsqueeze(-1))[:, 0]


def token_logprobs(model, rows: list[dict], autocast: bool) -> list[torch.Tensor]:
    with torch.no_grad():
        return [row_logprobs(model, r, autocast) for r in rows]


def agreement(rows: list[dict], learner: list[torch.Tensor]) -> dict:
    """Sampler against learner log-probs per kind of token: mean |Δ|, the ratio's spread and range."""
    out = {}
    for kind in KINDS:
        deltas = [
            float(lp[t]) - r["sampler"][t]
            for r, lp in zip(rows, learner)
            for t, label in enumerate(r["labels"])
            if label == kind
        ]
        if deltas:
            ratios = [pow(2.718281828459045, d) for d in deltas]
            out[kind] = {
                "tokens": len(deltas),
                "mean_abs_delta": statistics.fmean(abs(d) for d in deltas),
                "mean_delta": statistics.fmean(deltas),
                "ratio_std": statistics.pstdev(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
            }
    return out


def credit(model, rows: list[dict], weighting: str, lr: float, autocast: bool) -> dict:
    """Gradient shares and the step's advantage-weighted log-prob change per kind of choice token."""
    weights = [
        choice_weights([x if x != "format" else None for x in r["labels"]])
        if weighting == "segment"
        else [float(x != "format") for x in r["labels"]]
        for r in rows
    ]
    normalizer = sum(sum(w) for w in weights)
    keeps = [
        {k: torch.tensor([wt if label == k else 0.0 for wt, label in zip(w, r["labels"])]) for k in SEGMENTS}
        for r, w in zip(rows, weights)
    ]

    def part(lp: torch.Tensor, i: int, kind: str) -> torch.Tensor:
        return rows[i]["advantage"] * (keeps[i][kind] * lp).sum() / normalizer

    params = [p for p in model.parameters() if p.requires_grad]
    grads = {k: [torch.zeros_like(p) for p in params] for k in SEGMENTS}
    before = []
    for i, r in enumerate(rows):  # one row at a time: a batch's whole graph does not fit in memory
        lp = row_logprobs(model, r, autocast)
        before.append(lp.detach())
        for kind in SEGMENTS:
            if not bool(keeps[i][kind].any()):
                continue
            g = torch.autograd.grad(part(lp, i, kind), params, retain_graph=True, allow_unused=True)
            for acc, x in zip(grads[kind], g):
                if x is not None:
                    acc += x
    flat = {k: torch.cat([x.flatten() for x in gs]) for k, gs in grads.items()}
    whole = sum(flat.values())
    square = float(whole @ whole)
    out: dict = {"weighting": weighting, "gradient_norm": square**0.5}
    for kind, g in flat.items():
        out[f"{kind}_gradient_share"] = float(g @ whole) / square if square else None
        out[f"{kind}_gradient_norm"] = float(g.norm())
    del flat, whole
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    for k, p in enumerate(params):  # ascent on the objective: its gradient, negated
        p.grad = -sum(grads[kind][k] for kind in SEGMENTS)
    optimizer.step()
    after = token_logprobs(model, rows, autocast)
    changes = {
        kind: sum(float(part(a, i, kind) - part(b, i, kind)) for i, (a, b) in enumerate(zip(after, before)))
        for kind in SEGMENTS
    }
    moved = sum(changes.values())
    for kind, change in changes.items():
        out[f"{kind}_logprob_change"] = change
        out[f"{kind}_change_share"] = change / moved if moved else None
    return out


def first_choice(
    model, prompts: list[list[int]], choices: list[int], autocast: bool, over_choices: bool = False
) -> list[float]:
    """The mean probability of each first worker (model_id's first entry) over `prompts`: over the whole
    vocabulary (raw), or, `over_choices`, over the `choices` alone (what the constrained sampler draws)."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = [model(input_ids=torch.tensor([p]), logits_to_keep=1).logits[0, -1].float() for p in prompts]
    if over_choices:
        rows = [torch.softmax(z[choices], -1).tolist() for z in logits]
        return [statistics.fmean(r[k] for r in rows) for k in range(len(choices))]
    probs = [torch.softmax(z, -1) for z in logits]
    return [statistics.fmean(float(p[c]) for p in probs) for c in choices]


# Which parameters the interference step moves: every one, or the transformer layers' matrices alone (not the
# embeddings, which SmolLM2 ties to the output head, nor the norms): the ones that act alike on every input.
MOVED = {
    "all": lambda name: True,
    "layers": lambda name: ".layers." in name and "norm" not in name,
}


def interference(model, rows: list[dict], lr: float, autocast: bool, choices: list[int], moved: str = "all") -> dict:
    """Does learning to route one domain move the other's routing? For each domain alone: the gradient
    of its groups' objective on the worker tokens (segment weights), one AdamW step on it from the same
    weights, and the advantage-weighted log-prob change of every domain's worker tokens (its own is
    what the step is for; another's, if negative, is undone by it), with the first worker's mean
    probability per domain before and after. Domain-blind drift predicts gradients with a large common
    component (cosine near 1) and cross-domain changes as large as the own one. `moved`: a key of MOVED."""
    domains = sorted({r["domain"] for r in rows})
    weights = [
        [
            w if label == "workers" else 0.0
            for w, label in zip(choice_weights([x if x != "format" else None for x in r["labels"]]), r["labels"])
        ]
        for r in rows
    ]
    norm = {d: sum(sum(w) for w, r in zip(weights, rows) if r["domain"] == d) for d in domains}

    def objective(lp: torch.Tensor, i: int) -> torch.Tensor:
        return rows[i]["advantage"] * (torch.tensor(weights[i]) * lp).sum() / norm[rows[i]["domain"]]

    def objectives(lps: list[torch.Tensor]) -> dict[str, float]:
        return {d: sum(float(objective(lp, i)) for i, lp in enumerate(lps) if rows[i]["domain"] == d) for d in domains}

    prompts = {d: [list(p) for p in {tuple(r["prompt"]) for r in rows if r["domain"] == d}] for d in domains}
    state = copy.deepcopy(model.state_dict())
    params = [p for name, p in model.named_parameters() if p.requires_grad and MOVED[moved](name)]
    before = token_logprobs(model, rows, autocast)
    start = objectives(before)
    first_before = {d: first_choice(model, prompts[d], choices, autocast) for d in domains}
    out: dict = {"domains": domains, "groups": {d: len(prompts[d]) for d in domains}, "moved": moved, "steps": {}}
    flats = {}
    for d in domains:
        model.load_state_dict(state)
        grads = [torch.zeros_like(p) for p in params]
        for i, r in enumerate(rows):
            if r["domain"] != d or r["advantage"] == 0:
                continue
            g = torch.autograd.grad(objective(row_logprobs(model, r, autocast), i), params, allow_unused=True)
            for acc, x in zip(grads, g):
                if x is not None:
                    acc += x
        flats[d] = torch.cat([g.flatten() for g in grads])
        optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        for p, g in zip(params, grads):  # ascent on the objective: its gradient, negated
            p.grad = -g
        optimizer.step()
        after = objectives(token_logprobs(model, rows, autocast))
        out["steps"][d] = {
            "objective_change": {e: after[e] - start[e] for e in domains},
            "first_worker_probability": {
                e: {"before": first_before[e], "after": first_choice(model, prompts[e], choices, autocast)}
                for e in domains
            },
        }
    model.load_state_dict(state)
    if len(domains) == 2:
        one, other = (flats[d] for d in domains)
        out["gradient_cosine"] = float(one @ other / (one.norm() * other.norm()))
        out["gradient_norms"] = {d: float(flats[d].norm()) for d in domains}
        # How much of the other domain's change one domain's step makes, against its own.
        out["cross_over_own"] = {
            d: out["steps"][d]["objective_change"][e] / out["steps"][d]["objective_change"][d]
            for d, e in (domains, domains[::-1])
        }
    return out


def main(argv: list[str] | None = None) -> int:
    from conductor_rl.models import load_causal_lm
    from conductor_rl.policy.precision import bf16_is_fast

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="configuration overrides (key.sub=value)")
    parser.add_argument("--model", default="smollm2-135m", help="a checkpoint's model folder, or a model name")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions", type=int, default=None, help="questions in the batch (default: train's)")
    parser.add_argument(
        "--only-interference", action="store_true", help="skip the credit shares (items 2 and 3): only item 4"
    )
    parser.add_argument(
        "--moved",
        nargs="+",
        choices=list(MOVED),
        default=["all"],
        help="the parameters item 4's steps move, one measurement each (the first in 'interference')",
    )
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
    learner = token_logprobs(model, rows, autocast)
    state = copy.deepcopy(model.state_dict())
    result = {
        "benchmark": "credit",
        "simulated": True,
        "model": args.model,
        "seed": args.seed,
        "rollouts": len(rows),
        "informative_rollouts": sum(abs(r["advantage"]) > 0 for r in rows),
        "learner_autocast_bf16": autocast,
        "tokens_by_kind": {k: sum(r["labels"].count(k) for r in rows) for k in KINDS},
        "sampler_vs_learner": agreement(rows, learner),
        "credit": [],
    }
    for weighting in () if args.only_interference else ("token", "segment"):
        model.load_state_dict(state)
        result["credit"].append(credit(model, rows, weighting, config.learner.lr, autocast))
    model.load_state_dict(state)
    tokenizer = System(config).prompts.tokenizer
    choices = [tokenizer.encode(str(k), add_special_tokens=False)[0] for k in range(len(config.workers))]
    measured = [interference(model, rows, config.learner.lr, autocast, choices, moved) for moved in args.moved]
    result["interference"] = measured[0]
    if len(measured) > 1:
        result["interference_by_moved"] = {m["moved"]: m for m in measured}
    result["wall_s"] = round(time.perf_counter() - started, 1)
    keep_result(result)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
