"""Does the Conductor learn to orchestrate, measured against the best plans? Trains the embedded
default (configs/local.yaml: SIMULATED workers, a plan-sensitive pool; docs/guide/simulator.md) on
its training questions (three quarters of the shipped GSM8K, MATH-500 and MMLU samples), evaluates
the trained Conductor and the baselines on its evaluation benchmarks (the quarter held out), and
compares them with the pool's best plans, which for a simulated pool are computed exactly
(conductor_rl/evaluation/optimal.py).

The figures measure how well training finds the plans this testbed rewards, not real models.

    .venv/bin/python benchmarks/orchestration.py                    # two seeds, JSON on the last line
    .venv/bin/python benchmarks/orchestration.py --seeds 1 --iterations 10 train.rollouts_per_question=4
    .venv/bin/python benchmarks/orchestration.py --first-seed 2 --seeds 1    # seed 2 alone

Goals (issue 27), each reported reached or not: the Conductor's mean reward >= 0.9 of the best
plans' expected reward; its accuracy >= oracle-single's + 5 points; its cost per sample <= half of
MoA's; on hard questions >= 50 % of its plans check an earlier answer (>= 2 steps); on easy
questions >= 80 % of its plans are one step; the router beats random plans.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import keep_result  # noqa: E402
from conductor_rl.config import Config, WorkerConfig, load_config  # noqa: E402
from conductor_rl.data import Question, band_of, difficulty_of, load_dataset  # noqa: E402
from conductor_rl.evaluation.optimal import PoolOptimum, value_of  # noqa: E402
from conductor_rl.evaluation.summary import EvalRecord, recorded_plan_shape  # noqa: E402
from conductor_rl.grading.verdict import reward  # noqa: E402

BASELINES = ["conductor:untrained", "single:*", "moa", "router", "random", "oracle-single", "optimal"]
REUSE_HELP = "keep the trainings already finished in --out (after a stop in an evaluation)"
GOALS = {
    "fraction_of_optimal_reward": 0.9,
    "accuracy_over_oracle_single": 0.05,
    "cost_share_of_moa": 0.5,
    "hard_multi_step_share": 0.5,
    "easy_single_step_share": 0.8,
}


def train_seed(
    seed: int, iterations: int, overrides: Sequence[str], out: Path, base: Config | None = None, reuse: bool = False
) -> Config:
    """Train `base` (default: the embedded default) with `seed` for `iterations` into `out`; with `reuse`,
    a run already in `out` whose last checkpoint is the final one is kept (a benchmark that stopped
    after its trainings starts again from its evaluations)."""
    from conductor_rl.run.checkpoint import Checkpoints, checkpoint_name
    from jobs.train import train

    config = load_config(
        base,
        [
            f"train.iterations={iterations}",
            f"train.checkpoint_every={iterations}",
            f"train.seed={seed}",
            f"conductor.seed={seed}",
            f"train.output_dir={out}",
            "train.progress=false",
            *overrides,
        ],
    )
    last = Checkpoints(out / "checkpoints").latest()
    if reuse and last is not None and last.name == checkpoint_name(iterations - 1):
        print(f"reusing the finished training in {out}", file=sys.stderr, flush=True)
        return config
    shutil.rmtree(out, ignore_errors=True)
    summary = train(config)
    if summary.get("stopped") != "finished":
        raise SystemExit(f"the training in {out} did not finish: {summary}")
    return config


def evaluate_seed(trained: Config, repeats: int, out: Path) -> list[EvalRecord]:
    from jobs.evaluate import evaluate

    shutil.rmtree(out, ignore_errors=True)
    methods = [f"conductor:{trained.train.output_dir}", *BASELINES]
    config = load_config(
        trained,
        [
            f"evaluate.methods={json.dumps(methods)}",
            f"evaluate.repeats={repeats}",
            f"evaluate.output_dir={out}",
            "evaluate.preflight=false",
        ],
    )
    evaluate(config)
    return [EvalRecord.from_dict(json.loads(line)) for line in (out / "records.jsonl").read_text().splitlines()]


def sampled_shares(run_dir: Path, iterations: int, n_workers: int) -> dict[str, float]:
    """What training sampled (benchmarks/exploration.py's shares) in its first iteration, after the warm
    start (train.warm_start), and in its last: `first_` and `last_` + reading/check step and on-task share."""
    from benchmarks.exploration import exploration_shares
    from conductor_rl.run.traces import read_traces

    out = {}
    for name, iteration in (("first", 0), ("last", iterations - 1)):
        rows = read_traces(run_dir, [iteration])
        shares = exploration_shares([r["question"] for r in rows], [[r["completion"]] for r in rows], n_workers)
        for key in ("reading_step_share", "check_step_share", "on_task_share"):
            out[f"{name}_iteration_{key}"] = shares[key]
    return out


def optimum_of(questions: Sequence[Question], workers: Sequence[WorkerConfig], max_steps: int) -> tuple[float, float]:
    """The best plans' expected accuracy and reward (training's reward: no cost term), averaged over questions."""
    optimum = PoolOptimum(workers, 400, max_steps)
    best = [optimum.best(q.domain, difficulty_of(q.source, q.meta)) for q in questions]
    return statistics.fmean(b.accuracy for b in best), statistics.fmean(value_of(b.accuracy, 0.0) for b in best)


def figures(records: Sequence[EvalRecord], optimal_accuracy: float, optimal_reward: float) -> dict[str, float | None]:
    """One seed's figures from its evaluation records (every benchmark together) and the pool's optimum."""
    scored = [r for r in records if r.verdict != "error"]  # a plan error scores 0, an infrastructure error nothing
    by_method: dict[str, list[EvalRecord]] = {}
    for r in scored:
        by_method.setdefault(r.method, []).append(r)
    conductor = next(m for m in by_method if m.startswith("conductor:") and m != "conductor:untrained")
    mine = by_method[conductor]
    planned = [r for r in mine if r.plan]

    def accuracy(method: str) -> float | None:
        return accuracy_of(by_method[method]) if method in by_method else None

    def cost(method: str) -> float | None:
        return statistics.fmean(r.cost_usd for r in by_method[method]) if method in by_method else None

    singles = [accuracy_of(rs) for m, rs in by_method.items() if m.startswith("single:")]
    return {
        "fraction_of_optimal_reward": statistics.fmean(
            reward(r.verdict != "plan_error", r.verdict) or 0.0 for r in mine
        )
        / optimal_reward,
        "accuracy": accuracy(conductor),
        "untrained_accuracy": accuracy("conductor:untrained"),
        "optimal_accuracy": optimal_accuracy,
        "optimal_run_accuracy": accuracy("optimal"),
        "oracle_single_accuracy": accuracy(next((m for m in by_method if m.startswith("oracle-single")), "-")),
        "router_accuracy": accuracy("router"),
        "random_accuracy": accuracy("random"),
        "moa_accuracy": accuracy("moa"),
        "best_single_accuracy": max(singles) if singles else None,
        "cost_per_sample_usd": cost(conductor),
        "moa_cost_per_sample_usd": cost("moa"),
        "steps_per_sample": statistics.fmean(r.steps for r in planned) if planned else None,
        "hard_multi_step_share": _share(
            [r for r in planned if band_of(r.difficulty) == "hard"],
            lambda r: r.steps >= 2 and recorded_plan_shape(r.plan or ())[1],
        ),
        "easy_single_step_share": _share(
            [r for r in planned if band_of(r.difficulty) == "easy"], lambda r: r.steps == 1
        ),
    }


def accuracy_of(records: Sequence[EvalRecord]) -> float:
    """The mean over questions of each question's share of right answers over its repeats."""
    by_question: dict[tuple[str, str], list[bool]] = {}
    for r in records:
        by_question.setdefault((r.benchmark, r.question_id), []).append(r.verdict == "correct")
    return statistics.fmean(statistics.fmean(v) for v in by_question.values())


def _share(records: Sequence[EvalRecord], test) -> float | None:
    return sum(bool(test(r)) for r in records) / len(records) if records else None


def goals(mean: dict[str, float | None]) -> dict[str, bool | None]:
    """Each goal reached (True), missed (False), or unknown where a figure is missing (None)."""

    def reached(test, *keys: str) -> bool | None:
        values = [mean.get(k) for k in keys]
        return None if any(v is None for v in values) else bool(test(*values))

    return {
        "fraction_of_optimal_reward": reached(
            lambda f: f >= GOALS["fraction_of_optimal_reward"], "fraction_of_optimal_reward"
        ),
        "accuracy_over_oracle_single": reached(
            lambda a, o: a >= o + GOALS["accuracy_over_oracle_single"], "accuracy", "oracle_single_accuracy"
        ),
        "cost_share_of_moa": reached(
            lambda c, m: c <= GOALS["cost_share_of_moa"] * m, "cost_per_sample_usd", "moa_cost_per_sample_usd"
        ),
        "hard_multi_step_share": reached(lambda s: s >= GOALS["hard_multi_step_share"], "hard_multi_step_share"),
        "easy_single_step_share": reached(lambda s: s >= GOALS["easy_single_step_share"], "easy_single_step_share"),
        "router_beats_random": reached(lambda r, x: r > x, "router_accuracy", "random_accuracy"),
    }


def mean_over_seeds(runs: Sequence[dict]) -> dict[str, float | None]:
    """Each figure's mean over the seeds; None where a seed lacks it."""
    keys = dict.fromkeys(k for r in runs for k in r if k not in ("seed", "train_s", "wall_s"))
    return {
        k: statistics.fmean(vals) if len(vals := [r[k] for r in runs if r.get(k) is not None]) == len(runs) else None
        for k in keys
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="configuration overrides for training (key.sub=value)")
    parser.add_argument("--seeds", type=int, default=2, help="how many seeds (0, 1, ... from --first-seed)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (to add seeds to a run)")
    parser.add_argument("--iterations", type=int, default=20, help="training iterations per seed")
    parser.add_argument("--repeats", type=int, default=2, help="evaluation repeats per held-out question")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-orchestration")
    parser.add_argument("--reuse", action="store_true", help=REUSE_HELP)
    args = parser.parse_args(argv)

    base = load_config(None, args.overrides)
    questions = [q for spec in base.evaluate.benchmarks for q in load_dataset(spec)]
    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        print(f"seed {seed}: training {args.iterations} iterations ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        trained = train_seed(seed, args.iterations, args.overrides, args.out / f"seed-{seed}" / "run", reuse=args.reuse)
        trained_s = time.perf_counter() - started
        print(f"seed {seed}: evaluating on {len(questions)} held-out questions ...", file=sys.stderr, flush=True)
        records = evaluate_seed(trained, args.repeats, args.out / f"seed-{seed}" / "eval")
        optimal_accuracy, optimal_reward = optimum_of(questions, trained.workers, trained.conductor.max_steps)
        run = {"seed": seed, **figures(records, optimal_accuracy, optimal_reward)}
        run.update(sampled_shares(Path(trained.train.output_dir), args.iterations, len(trained.workers)))
        run["train_s"], run["wall_s"] = round(trained_s, 1), round(time.perf_counter() - started, 1)
        runs.append(run)
        print(f"seed {seed}: {json.dumps(run)}", file=sys.stderr, flush=True)
    mean = mean_over_seeds(runs)
    result = {
        "benchmark": "orchestration",
        "simulated": True,
        "config": "configs/local.yaml",
        "overrides": args.overrides,
        "iterations": args.iterations,
        "held_out_questions": len(questions),
        "repeats": args.repeats,
        **mean,
        "goals": GOALS,
        "goals_reached": goals(mean),
        "seeds": runs,
    }
    keep_result(result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
