#!/usr/bin/env python3
"""Print a simulated pool's settings and its best plans for a few kinds of question, computed
exactly (conductor_rl/evaluation/optimal.py), as the markdown tables of docs/guide/simulator.md.

The pool is the `workers:` list of a configuration file (by default the embedded
configs/local.yaml), or of a markdown file whose first ```yaml block holds one.

    python scripts/sim_optimum.py                               # the pool of configs/local.yaml
    python scripts/sim_optimum.py my_pool.yaml --cost-weight 20 --max-steps 4
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from conductor_rl.config import WorkerConfig  # noqa: E402
from conductor_rl.data.difficulty import difficulty_of  # noqa: E402
from conductor_rl.evaluation.optimal import PoolOptimum, describe  # noqa: E402

GUIDE = REPO / "docs" / "guide" / "simulator.md"
EMBEDDED = REPO / "configs" / "local.yaml"
# (label, domain, source, meta): the kinds of question of the guide's table.
QUESTIONS = [
    ("easy maths (GSM8K)", "math", "gsm8k", {}),
    ("easy MMLU", "mmlu", "mmlu", {}),
    ("middling maths (MATH-500 level 3)", "math", "math500", {"level": 3}),
    ("hard maths (MATH-500 level 5)", "math", "math500", {"level": 5}),
]


def read_pool(path: Path) -> list[WorkerConfig]:
    text = path.read_text()
    if path.suffix == ".md":
        block = re.search(r"^```yaml\n(.*?)^```", text, flags=re.S | re.M)
        if block is None:
            raise SystemExit(f"{path}: no ```yaml block with the pool's `workers:` list")
        text = block.group(1)
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(data.get("workers"), list):
        raise SystemExit(f"{path}: expected a mapping with a `workers:` list")
    return [WorkerConfig.model_validate(w) for w in data["workers"]]


def settings_table(workers: list[WorkerConfig]) -> str:
    """Each simulated worker's price and plan-sensitive settings, a row per domain."""
    rows = [
        "| worker | USD per M tokens in / out | domain | accuracy (easy) | accuracy (hard) | keep | repair |"
        " off task |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for worker in workers:
        spec = worker.sim
        if spec is None:
            continue
        for domain, easy in spec.accuracy.items():
            hard = (spec.hard_accuracy or {}).get(domain, easy)
            rows.append(
                f"| {worker.name} | {worker.price.input:g} / {worker.price.output:g} | {domain} | {easy:g} | {hard:g} "
                f"| {spec.keep_rate if spec.keep_rate is not None else '-'} "
                f"| {spec.repair_rate if spec.repair_rate is not None else '-'} "
                f"| {spec.off_task_factor if spec.off_task_factor is not None else '-'} |"
            )
    return "\n".join(rows)


def table(workers: list[WorkerConfig], question_chars: int, max_steps: int, cost_weight: float) -> str:
    free = PoolOptimum(workers, question_chars, max_steps)
    priced = PoolOptimum(workers, question_chars, max_steps, cost_weight)
    rows = ["| question | difficulty | which | plan | accuracy | USD per sample |", "|---|---|---|---|---|---|"]
    for label, domain, source, meta in QUESTIONS:
        difficulty = difficulty_of(source, meta)
        for which, plan in (
            ("best single worker", free.single(domain, difficulty)),
            ("best plan, cost weight 0", free.best(domain, difficulty)),
            (f"best plan, cost weight {cost_weight:g}", priced.best(domain, difficulty)),
        ):
            rows.append(
                f"| {label} | {difficulty:g} | {which} | {describe(plan.steps, workers)} "
                f"| {plan.accuracy:.3f} | {plan.cost_usd:.5f} |"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pool", nargs="?", type=Path, default=EMBEDDED, help="YAML or markdown file with the pool")
    parser.add_argument("--question-chars", type=int, default=400)
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--cost-weight", type=float, default=10.0, help="reward points per USD")
    args = parser.parse_args(argv)
    workers = read_pool(args.pool)
    print(settings_table(workers), end="\n\n")
    print(table(workers, args.question_chars, args.max_steps, args.cost_weight))
    return 0


if __name__ == "__main__":
    sys.exit(main())
