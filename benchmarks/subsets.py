"""Does training on random worker subsets (adaptive pools, paper §3.2) help a Conductor
use a subset of workers it never saw whole? Trains two Conductors on the same simulated
pool of four workers, one on the full pool and one with `train.worker_subset` (each
question's prompt lists k of the four, renumbered Model 0..k-1 in the pool's order),
then evaluates both (and, with --untrained, the untrained Conductor) through
`jobs.evaluate.evaluate`:

  (a) on the full pool, and
  (b) on a subset of three workers (what `conductor-rl evaluate --workers a,b,c` runs):
      with k=2 the subset-trained Conductor never had those three listed together.

The pool is the embedded default's three simulated workers plus a fourth, an
all-rounder (good at both domains, the best one left for math once the math expert is
gone). The default evaluated subset drops the math expert, so every worker moves to a
new number: a Conductor that learned "math goes to Model 0" now sends math to the
knowledge expert. Workers are SIMULATED: the figures measure orchestration of declared
skills, not real models.

    .venv/bin/python benchmarks/subsets.py --json
    .venv/bin/python benchmarks/subsets.py --json --untrained        # and the untrained Conductor (~1 min more)
    .venv/bin/python benchmarks/subsets.py --subset sim-math-expert,sim-generalist,sim-allrounder
    .venv/bin/python benchmarks/subsets.py --iterations 10 --questions 8 --lr 1e-4 --limit 20   # the default's shape

Shrunk to fit 10 minutes on 2 CPU cores: short training runs (the embedded default's
ten iterations alone take about seven minutes), two benchmarks of the training domains,
few questions, one Ray cluster for all four jobs. JSON on the last line, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import log, machine, train_then_evaluate_overrides  # noqa: E402
from conductor_rl.config import Config, load_config, validate_config  # noqa: E402
from conductor_rl.plan.roster import roster_of, with_workers  # noqa: E402

# The fourth worker: second best at both domains and the dearest. Without it a subset
# that drops an expert would leave that domain only to workers at or below chance level,
# and no Conductor could do well there, trained on subsets or not.
ALLROUNDER = {
    "name": "sim-allrounder",
    "provider": "sim",
    "price": {"input": 5.0, "output": 20.0},
    "sim": {
        "accuracy": {"math": 0.7, "mmlu": 0.7, "code": 0.6},
        "gain_with_context": 0.05,
        "latency_s": 0.2,
        "latency_jitter": 0.3,
        "output_tokens": 250,
    },
}
DEFAULT_SUBSET = "sim-knowledge-expert,sim-generalist,sim-allrounder"

# Benchmarks of the two training domains (samples:gsm8k is math, samples:mmlu is mmlu);
# the others of the embedded default would only add the evaluation's time.
BENCHMARKS = ["gsm8k:test", "mmlu:eval"]


def pool_config(args: argparse.Namespace) -> Config:
    """The embedded default with the fourth worker and the shrunk settings; the user's
    overrides last, so they can change any of it (`workers.3.sim.accuracy.math=0.5`)."""
    raw = load_config(ROOT / "configs" / "local-routing.yaml").model_dump(mode="json")
    raw["workers"].append(ALLROUNDER)
    # Four iterations instead of the default's ten: twice its lr (the same cosine down to 0.2 of it) gives
    # about the same sum of step sizes. In a trial a constant 2e-4 swung the policy between iterations
    # (math: all to the math expert, then all to the generalist), so the schedule still decays.
    shrunk = [*train_then_evaluate_overrides(args, BENCHMARKS), f"learner.lr={args.lr}"]
    return load_config(validate_config(raw), [*shrunk, *args.overrides])


def run_training(config: Config, out: Path, subset_size: int | None, reuse: bool) -> dict[str, Any]:
    from conductor_rl.run.log import records
    from jobs.train import train

    extra = [f"train.output_dir={out}"] + ([f"train.worker_subset={subset_size}"] if subset_size else [])
    config = load_config(config, extra)
    started = time.perf_counter()
    if not reuse:
        shutil.rmtree(out, ignore_errors=True)
        summary = train(config)
        if summary.get("stopped") != "finished":
            raise SystemExit(f"training in {out} did not finish: {summary}")
    wall = time.perf_counter() - started
    logged = records(out)
    if not logged:
        raise SystemExit(f"no training records in {out}")
    first, last = logged[: min(2, len(logged))], logged[-min(2, len(logged)) :]
    return {
        "output_dir": str(out),
        "worker_subset": subset_size,
        "iterations": len(logged),
        "wall_s": round(wall, 1),
        "first2_reward": round(statistics.fmean(r["reward_mean"] for r in first), 4),
        "last2_reward": round(statistics.fmean(r["reward_mean"] for r in last), 4),
    }


def rosters_drawn(run: Path, pool: list[str], subset: list[str]) -> dict[str, Any]:
    """What the subset-trained Conductor's prompts listed, from its traces: how often each
    roster came up, and that the evaluated subset never came up whole."""
    from conductor_rl.run.traces import read_traces

    drawn: Counter[tuple[str, ...]] = Counter()
    questions = set()
    for row in read_traces(run):
        key = (row["iteration"], row["question_id"])
        if key in questions:  # one roster per question and iteration, whatever the rollouts
            continue
        questions.add(key)
        roster = row.get("roster") or list(range(len(pool)))
        drawn[tuple(pool[i] for i in roster)] += 1
    whole = tuple(n for n in pool if n in subset)
    return {
        "prompts": sum(drawn.values()),
        "evaluated_subset_drawn_whole": drawn.get(whole, 0),
        "inside_evaluated_subset": sum(c for r, c in drawn.items() if set(r) <= set(subset)),
        "by_roster": {"+".join(r): c for r, c in sorted(drawn.items())},
    }


def run_evaluation(config: Config, out: Path, methods: list[str], workers: list[str] | None) -> dict[str, Any]:
    """One `evaluate` call (as `conductor-rl evaluate [--workers ...]` makes it), then the
    per-method figures from its records."""
    from conductor_rl.evaluation import RecordStore
    from conductor_rl.evaluation.summary import mean_and_stderr
    from jobs.evaluate import evaluate

    shutil.rmtree(out, ignore_errors=True)  # a stale records.jsonl would be resumed, not redone
    config = with_workers(config, workers)
    e = config.evaluate.model_copy(update={"methods": methods, "output_dir": str(out)})
    config = config.model_copy(update={"evaluate": e})
    started = time.perf_counter()
    summary = evaluate(config)
    wall = time.perf_counter() - started
    if summary["stopped"] != "finished":
        raise SystemExit(f"the evaluation in {out} stopped: {summary['stopped']}")
    records = RecordStore(out).records()
    rows = {}
    for method in methods:
        mine = [r for r in records if r.method == method and r.verdict != "error"]
        rewards = [{"correct": 1.0, "plan_error": 0.0}.get(r.verdict, 0.5) for r in mine]  # the training reward
        final = {}
        for domain in sorted({r.domain for r in mine}):
            ends = Counter(r.workers[-1] for r in mine if r.domain == domain and r.workers)
            total = sum(ends.values())
            final[domain] = {w: round(c / total, 3) for w, c in ends.most_common()} if total else {}
        cells = {c["benchmark"]: c for c in summary["cells"] if c["method"] == method}
        # The harness's error bar (repeats averaged per question, then over questions), here
        # over both benchmarks' questions together.
        per_question: dict[tuple[str, str], list[float]] = {}
        for r in mine:
            per_question.setdefault((r.benchmark, r.question_id), []).append(float(r.verdict == "correct"))
        accuracy, stderr = mean_and_stderr([statistics.fmean(v) for v in per_question.values()])
        rows[method] = {
            "samples": len(mine),
            "accuracy": None if accuracy is None else round(accuracy, 4),
            "accuracy_stderr": None if stderr is None else round(stderr, 4),
            "accuracy_by_benchmark": {
                b: None if c["accuracy"] is None else round(c["accuracy"], 4) for b, c in cells.items()
            },
            "mean_reward": round(statistics.fmean(rewards), 4) if rewards else None,
            "plan_error_rate": round(sum(r.verdict == "plan_error" for r in mine) / len(mine), 4) if mine else None,
            "calls_per_sample": round(statistics.fmean(r.calls for r in mine), 3) if mine else None,
            "cost_usd_per_sample": round(statistics.fmean(r.cost_usd for r in mine), 5) if mine else None,
            "errors": sum(r.verdict == "error" for r in records if r.method == method),
            "final_worker_by_domain": final,
        }
    return {
        "workers": [w.name for w in config.workers],
        "output_dir": str(out),
        "wall_s": round(wall, 1),
        "methods": rows,
    }


def declared_best(config: Config, names: list[str]) -> dict[str, Any]:
    """The accuracy of routing each domain to its best listed worker, from the declared
    simulated skills (context gains left out): the ceiling of one-step plans on that pool."""
    workers = [w for w in config.workers if w.name in names]
    best = {d: max(workers, key=lambda w: w.sim.accuracy.get(d, 0.0)) for d in ("math", "mmlu")}
    return {
        d: {"worker": w.name, "model_id": names.index(w.name) if names else None, "accuracy": w.sim.accuracy[d]}
        for d, w in best.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="configuration overrides (key.sub=value), applied last")
    parser.add_argument("--subset", default=DEFAULT_SUBSET, help="the workers of evaluation (b), comma-separated")
    parser.add_argument(
        "--subset-size",
        type=int,
        default=2,
        help="train.worker_subset of the subset-trained run; below the evaluated subset's size, "
        "so that subset is never drawn whole",
    )
    parser.add_argument("--iterations", type=int, default=4)
    # Four questions of eight plans rather than eight of four: the learner's time goes mostly to
    # the prompts (about 340 tokens against 64 a plan), and eight plans a question give GRPO's
    # group baseline more to average. balance_domains keeps two of each domain a batch.
    parser.add_argument("--questions", type=int, default=4, help="train.questions_per_iteration")
    parser.add_argument("--rollouts", type=int, default=8, help="train.rollouts_per_question")
    parser.add_argument("--lr", type=float, default=2e-4, help="learner.lr of both training runs")
    parser.add_argument("--limit", type=int, default=10, help="evaluate.limit: questions per benchmark")
    parser.add_argument("--repeats", type=int, default=2, help="evaluate.repeats")
    parser.add_argument("--seed", type=int, default=0)
    # Off by default for time: the untrained row costs two more engine starts (about a minute),
    # and with it the benchmark took 668 s on the shared 2-core machine, past its 10 minutes.
    parser.add_argument(
        "--untrained",
        action="store_true",
        help="also evaluate conductor:untrained on both pools (a reference row; about a minute more)",
    )
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench-subsets"))
    parser.add_argument(
        "--reuse-training",
        action="store_true",
        help="evaluate the two runs already in --out instead of training them again "
        "(their settings are what they were trained with, not these)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    machine_at_start = machine()
    config = pool_config(args)
    pool = [w.name for w in config.workers]
    subset = [n.strip() for n in args.subset.split(",") if n.strip()]
    roster = roster_of(subset, pool)  # unknown names fail here, before anything starts
    subset = [pool[i] for i in roster.workers]  # the pool's order: Model 0.. as the prompt numbers them
    if args.subset_size >= len(subset):
        raise SystemExit(
            f"--subset-size {args.subset_size} would draw the evaluated subset of {len(subset)} whole; "
            f"use fewer than {len(subset)}"
        )
    out = Path(args.out)

    runs = {}
    for name, size in (("full", None), ("subsets", args.subset_size)):
        log(
            f"training the Conductor on {'the full pool' if size is None else f'subsets of {size}'} "
            f"({args.iterations} iterations) ..."
        )
        runs[name] = run_training(config, out / f"train-{name}", size, args.reuse_training)
        log(
            f"  reward {runs[name]['first2_reward']:.3f} -> {runs[name]['last2_reward']:.3f} "
            f"in {runs[name]['wall_s']:.0f}s"
        )
    runs["subsets"]["rosters"] = rosters_drawn(out / "train-subsets", pool, subset)

    methods = [f"conductor:{out / 'train-full'}", f"conductor:{out / 'train-subsets'}"]
    if args.untrained:
        methods.append("conductor:untrained")
    labels = dict(zip(methods, ("trained_full", "trained_subsets", "untrained")))
    evaluations = {}
    for name, workers in (("full_pool", None), ("unseen_subset", subset)):
        log(f"evaluating on {name} ({', '.join(workers or pool)}) ...")
        evaluations[name] = run_evaluation(config, out / f"eval-{name}", methods, workers)
        log("  " + "; ".join(f"{labels[m]} {r['accuracy']}" for m, r in evaluations[name]["methods"].items()))

    def table_of(key: str) -> dict[str, dict[str, Any]]:
        return {labels[m]: {p: evaluations[p]["methods"][m][key] for p in evaluations} for m in methods}

    table = table_of("accuracy")
    figures = {
        "benchmark": "subsets",
        "config": "configs/local-routing.yaml + sim-allrounder (4 simulated workers)",
        "simulated": True,
        "pool": pool,
        "evaluated_subset": subset,
        "evaluated_subset_model_ids": {n: i for i, n in enumerate(subset)},
        "train_worker_subset": args.subset_size,
        "settings": {
            "iterations": args.iterations,
            "questions_per_iteration": args.questions,
            "rollouts_per_question": args.rollouts,
            "seed": args.seed,
            "benchmarks": BENCHMARKS,
            "limit": args.limit,
            "repeats": args.repeats,
            "lr": config.learner.lr,
            "min_lr_ratio": config.learner.min_lr_ratio,
            "overrides": args.overrides,
            "fourth_worker": ALLROUNDER,
        },
        "declared_best_routing": {
            "full_pool": declared_best(config, pool),
            "unseen_subset": declared_best(config, subset),
        },
        "accuracy": table,
        "accuracy_stderr": table_of("accuracy_stderr"),
        "mean_reward": table_of("mean_reward"),
        "calls_per_sample": table_of("calls_per_sample"),
        "cost_usd_per_sample": table_of("cost_usd_per_sample"),
        "subset_minus_full": {
            p: None
            if table["trained_subsets"][p] is None or table["trained_full"][p] is None
            else round(table["trained_subsets"][p] - table["trained_full"][p], 4)
            for p in evaluations
        },
        "training": runs,
        "evaluations": {
            p: {**ev, "methods": {labels[m]: r for m, r in ev["methods"].items()}} for p, ev in evaluations.items()
        },
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": {**machine_at_start, "load_average_at_end": machine()["load_average_1_5_15"]},
    }
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
