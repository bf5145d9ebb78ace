"""How much does the Conductor's first worker depend on the question? For each model given, on the
embedded default's training questions (configs/local.yaml: SIMULATED workers), per domain: the
probability of each worker as the plan's first (model_id's first entry, the token after
`conductor.response_prefix`, renormalised over the workers), its mean over the questions and its
spread (standard deviation) across them.

A Conductor that routes by domain has different means on maths and MMLU; one whose first choice
ignores the question has equal means and a spread near 0. Reading the prompt only: a forward pass
per question.

`--warm-start`: also the first model after the embedded default's warm start (train.warm_start: its
batches, supervised in this process: AdamW at learner.lr, fp32, the mean log-likelihood over the loss
tokens, as the learner's GRPO step on advantage-1 rows is), once with the demonstrations' workers in
the loss and once without (train.warm_start.workers_in_loss): does the warm start alone flatten it?

    .venv/bin/python benchmarks/first_choice.py smollm2-135m runs/local/checkpoints/ckpt-000007/model --json
    .venv/bin/python benchmarks/first_choice.py smollm2-135m --warm-start --json
    .venv/bin/python benchmarks/first_choice.py smollm2-135m --warm-start --readout --json

`--readout`: for each model, also the readout yardstick over its state (conductor_rl/evaluation/
readout.py, as benchmarks/orchestration.py reports it for the untrained Conductor): does the model's
state where it picks the first worker still hold what the testbed rewards?
"""

from __future__ import annotations

import argparse
import json
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
from conductor_rl.data.question import Question  # noqa: E402
from conductor_rl.plan.prompts import ConductorPrompt  # noqa: E402


def first_worker_probabilities(model, prompts: ConductorPrompt, questions: list[Question], n_workers: int) -> list:
    """Per question, the probability of each worker as the first, over the workers' tokens alone."""
    choices = [prompts.tokenizer.encode(str(k), add_special_tokens=False)[0] for k in range(n_workers)]
    rows = []
    for q in questions:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompts.question_ids(q)]), logits_to_keep=1).logits[0, -1]
        rows.append(torch.softmax(logits.float()[choices], -1).tolist())
    return rows


def warm_started(name: str, config, prompts: ConductorPrompt, questions: list[Question]):
    """`name` after `config`'s warm start, supervised here (see the module's docstring)."""
    from conductor_rl.models import load_causal_lm
    from conductor_rl.policy.warm_start import warm_start_for

    model, _ = load_causal_lm(name, "float32")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learner.lr, weight_decay=0.0)
    for batch in warm_start_for(config, prompts, questions):
        optimizer.zero_grad()
        tokens = sum(sum(m) for m in batch.loss_masks)
        for prompt, ids, mask in zip(batch.prompt_ids, batch.completion_ids, batch.loss_masks):
            full = torch.tensor([list(prompt) + list(ids)])
            logp = torch.log_softmax(model(input_ids=full).logits[0, len(prompt) - 1 : -1].float(), -1)
            picked = logp.gather(-1, torch.tensor(ids).unsqueeze(-1))[:, 0]
            (-(picked * torch.tensor(mask)).sum() / tokens).backward()
        optimizer.step()
    return model.eval()


def readout_of(config, model) -> dict:
    """benchmarks/orchestration.py's readout yardstick over `model`'s state: its held-out set, 8 iterations,
    seeds 0-2, as that benchmark reports it for the untrained Conductor."""
    from benchmarks.orchestration import HELD_OUT, held_out_set, readout_yardstick

    held_out = list(held_out_set([*config.evaluate.benchmarks, HELD_OUT]).values())
    return readout_yardstick(config, held_out, iterations=config.train.iterations, seeds=[0, 1, 2], model=model)


def spread_by_domain(rows_by_domain: dict[str, list[list[float]]]) -> dict:
    """Per domain: each worker's mean probability and its standard deviation across the questions."""
    return {
        domain: {
            "questions": len(rows),
            "mean": [statistics.fmean(r[k] for r in rows) for k in range(len(rows[0]))],
            "sd_across_questions": [statistics.pstdev(r[k] for r in rows) for k in range(len(rows[0]))],
        }
        for domain, rows in rows_by_domain.items()
    }


def main(argv: list[str] | None = None) -> int:
    from conductor_rl.models import load_causal_lm

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="model names or checkpoints' model folders")
    parser.add_argument("--set", action="append", default=[], help="a configuration override (key.sub=value)")
    parser.add_argument("--per-domain", type=int, default=30, help="questions per domain")
    parser.add_argument("--warm-start", action="store_true", help="also the first model after the warm start")
    parser.add_argument(
        "--readout",
        action="store_true",
        help="also the readout yardstick over each model's state (benchmarks/orchestration.py's, on its held-out set)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    config = load_config(None, args.set)
    prompts = ConductorPrompt.from_config(config)
    by_domain: dict[str, list[Question]] = {}
    for q in load_dataset(config.data.questions):
        by_domain.setdefault(q.domain, []).append(q)
    drawn = {d: qs[: args.per_domain] for d, qs in sorted(by_domain.items())}
    result: dict = {"benchmark": "first_choice", "simulated": True, "workers": [w.name for w in config.workers]}
    result["overrides"] = args.set
    result["models"] = {}
    models = [(name, None) for name in args.models]
    if args.warm_start:
        questions = load_dataset(config.data.questions)
        for inside in (True, False):
            with_it = load_config(None, [*args.set, f"train.warm_start.workers_in_loss={str(inside).lower()}"])
            models.append((f"{args.models[0]} + warm start, workers_in_loss={inside}", with_it))
    for name, warm in models:
        if warm is None:
            model = load_causal_lm(name, "float32")[0].eval()
        else:
            model = warm_started(args.models[0], warm, prompts, questions)
        rows = {d: first_worker_probabilities(model, prompts, qs, len(config.workers)) for d, qs in drawn.items()}
        result["models"][name] = spread_by_domain(rows)
        if args.readout:
            read = result.setdefault("readout", {})[name] = readout_of(config, model)
            print(f"{name}: readout {read['readout_best']}: {read['readout_fraction_of_optimal_reward']:.3f} of the "
                  f"optimum; state {json.dumps(read['readout_state'])}", file=sys.stderr)  # fmt: skip
        for domain, figures in result["models"][name].items():
            mean = " / ".join(f"{m:.2f}" for m in figures["mean"])
            sd = " / ".join(f"{s:.3f}" for s in figures["sd_across_questions"])
            print(f"{name}: {domain}: first worker {mean} (sd across questions {sd})", file=sys.stderr)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    keep_result(result)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
