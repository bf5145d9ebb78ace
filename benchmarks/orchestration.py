"""Does the Conductor learn to orchestrate, measured against the best plans and the baselines without
luck? Trains the embedded default (configs/local.yaml: SIMULATED workers, a plan-sensitive pool;
docs/guide/simulator.md) on its training questions, evaluates the trained Conductor and the baselines
on held-out questions (the default's evaluation quarter and samples:heldout: 150), and scores every
plan written by its exact expected accuracy (conductor_rl/evaluation/exact.py), so the workers' draws
add no noise; the sampled accuracy is reported beside it. Methods are compared question by question
(paired), over every seed; `beats` lists the baselines the Conductor beats by more than two standard
errors of the paired difference (the larger of the pooled and the between-seed one). The tabular
yardstick (conductor_rl/evaluation/tabular.py) takes the same rollouts: B x G x iterations, same seeds; so
does the readout (conductor_rl/evaluation/readout.py), a linear policy over the untrained Conductor's own
state where it picks the first worker.

The figures measure how well training finds the plans this testbed rewards, not real models.

    .venv/bin/python benchmarks/orchestration.py --json                   # three seeds, JSON on the last line
    .venv/bin/python benchmarks/orchestration.py --seeds 1 --iterations 8 train.choice_weighting=token
    .venv/bin/python benchmarks/orchestration.py --first-seed 3 --seeds 1    # seed 3 alone

Goals (issue 47), each reported reached or not: the Conductor's expected accuracy beats random plans,
the best single worker, MoA and the router (paired, > 2 s.e.); >= 0.95 of the best plans' expected
reward; on hard questions >= 50 % of its plans check an earlier answer; on easy questions >= 80 % are
one step; each seed <= 30 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import keep_result  # noqa: E402
from conductor_rl.config import Config, WorkerConfig, load_config  # noqa: E402
from conductor_rl.data import Question, band_of, difficulty_of, load_dataset  # noqa: E402
from conductor_rl.evaluation.exact import Paired, QuestionKey, expected_by_question, paired  # noqa: E402
from conductor_rl.evaluation.optimal import PoolOptimum, value_of  # noqa: E402
from conductor_rl.evaluation.readout import choice_states, readout_grpo, state_geometry  # noqa: E402
from conductor_rl.evaluation.summary import EvalRecord, recorded_plan_shape  # noqa: E402
from conductor_rl.evaluation.tabular import tabular_grpo  # noqa: E402
from conductor_rl.models import load_causal_lm  # noqa: E402
from conductor_rl.plan.prompts import ConductorPrompt  # noqa: E402

BASELINES = ["conductor:untrained", "single:*", "moa", "router", "random", "oracle-single", "optimal"]
HELD_OUT = "samples:heldout"  # added to evaluate.benchmarks: 30 + 120 held-out questions
COMPARED = ("random", "best_single", "moa", "router", "untrained")  # what `beats` is judged against
TABULAR_LRS = (1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
# The readout's logits are W h with |h| in the tens (the raw state's mean is larger still): smaller rates;
# after the warm start the centred state is smaller, and its best rate larger.
READOUT_LRS = (1.0, 3.0, 10.0, 30.0)
READOUT_RAW_LRS = (0.01, 0.03, 0.1, 0.3)
REUSE_HELP = "keep the trainings already finished in --out (after a stop in an evaluation)"
GOALS = {
    "beats": ["random", "best_single", "moa", "router"],
    "fraction_of_optimal_reward": 0.95,
    "hard_checking_share": 0.5,
    "easy_single_step_share": 0.8,
    "seed_minutes": 30,
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


def evaluate_seed(
    trained: Config, benchmarks: Sequence[str], repeats: int, out: Path, reuse: bool = False
) -> list[EvalRecord]:
    """Evaluate the trained Conductor and the baselines into `out`; with `reuse`, an evaluation already
    there resumes (what it finished is kept)."""
    from jobs.evaluate import evaluate

    if not reuse:
        shutil.rmtree(out, ignore_errors=True)
    methods = [f"conductor:{trained.train.output_dir}", *BASELINES]
    config = load_config(
        trained,
        [
            f"evaluate.methods={json.dumps(methods)}",
            f"evaluate.benchmarks={json.dumps(list(benchmarks))}",
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


def held_out_set(benchmarks: Sequence[str]) -> dict[tuple[str, str], Question]:
    """The held-out questions of `benchmarks` (dataset specs), keyed by (spec, question id)."""
    return {(spec, q.id): q for spec in benchmarks for q in load_dataset(spec)}


def optimum_of(questions: Sequence[Question], workers: Sequence[WorkerConfig], max_steps: int) -> tuple[float, float]:
    """The best plans' expected accuracy and reward (training's reward: no cost term), averaged over questions."""
    optimum = PoolOptimum(workers, 400, max_steps)
    best = [optimum.best(q.domain, difficulty_of(q.source, q.meta)) for q in questions]
    return statistics.fmean(b.accuracy for b in best), statistics.fmean(value_of(b.accuracy, 0.0) for b in best)


def method_values(
    records: Sequence[EvalRecord], questions: dict[QuestionKey, Question], workers: Sequence[WorkerConfig]
) -> dict[str, dict[QuestionKey, float]]:
    """Per method (the trained Conductor as "conductor", the untrained as "untrained", the best single
    worker of this evaluation as "best_single"), each question's exact expected accuracy."""
    by_method = expected_by_question(records, questions, workers)
    values = {}
    for method, by_q in by_method.items():
        if method == "conductor:untrained":
            values["untrained"] = by_q
        elif method.startswith("conductor:"):
            values["conductor"] = by_q
        elif method.startswith("oracle-single"):
            values["oracle_single"] = by_q
        elif not method.startswith("single:"):
            values[method] = by_q
    singles = {m: v for m, v in by_method.items() if m.startswith("single:")}
    if singles:
        best = max(singles, key=lambda m: statistics.fmean(singles[m].values()))
        values["best_single"] = singles[best]
    return values


def figures(records: Sequence[EvalRecord], values: dict[str, dict[QuestionKey, float]], optimal_reward: float) -> dict:
    """One seed's figures: each method's expected accuracy, the Conductor's sampled accuracy, its share of
    the optimal reward, cost and plan shapes per domain and difficulty band."""
    scored = [r for r in records if r.verdict != "error"]
    conductor = next(m for m in {r.method for r in scored} if m.startswith("conductor:") and m != "conductor:untrained")
    mine = [r for r in scored if r.method == conductor]
    planned = [r for r in mine if r.plan]
    plan_errors = {(r.benchmark, r.question_id) for r in mine if r.verdict == "plan_error"}
    rewards = [0.0 if k in plan_errors else value_of(v, 0.0) for k, v in values["conductor"].items()]
    return {
        "expected_accuracy": {m: statistics.fmean(v.values()) for m, v in sorted(values.items())},
        "sampled_accuracy": accuracy_of(mine),
        "fraction_of_optimal_reward": statistics.fmean(rewards) / optimal_reward,
        "cost_per_sample_usd": statistics.fmean(r.cost_usd for r in mine),
        "moa_cost_per_sample_usd": _mean([r.cost_usd for r in scored if r.method == "moa"]),
        "steps_per_sample": _mean([r.steps for r in planned]),
        "hard_checking_share": _share(
            [r for r in planned if band_of(r.difficulty) == "hard"], lambda r: recorded_plan_shape(r.plan or ())[1]
        ),
        "easy_single_step_share": _share(
            [r for r in planned if band_of(r.difficulty) == "easy"], lambda r: r.steps == 1
        ),
        "plan_shapes": plan_shapes(planned),
    }


def plan_shapes(records: Sequence[EvalRecord]) -> dict[str, dict]:
    """Per domain and difficulty band: plans, steps, one-step and checking shares, the final worker's shares."""
    groups: dict[str, list[EvalRecord]] = {}
    for r in records:
        groups.setdefault(f"{r.domain}/{band_of(r.difficulty)}", []).append(r)
    out = {}
    for key, group in sorted(groups.items()):
        ends = [r.workers[-1] for r in group if r.workers]
        out[key] = {
            "plans": len(group),
            "steps": statistics.fmean(r.steps for r in group),
            "single_step_share": _share(group, lambda r: r.steps == 1),
            "checking_share": _share(group, lambda r: recorded_plan_shape(r.plan or ())[1]),
            "final_worker_shares": {w: ends.count(w) / len(ends) for w in sorted(set(ends))},
        }
    return out


def accuracy_of(records: Sequence[EvalRecord]) -> float:
    """The mean over questions of each question's share of right answers over its repeats."""
    by_question: dict[tuple[str, str], list[bool]] = {}
    for r in records:
        by_question.setdefault((r.benchmark, r.question_id), []).append(r.verdict == "correct")
    return statistics.fmean(statistics.fmean(v) for v in by_question.values())


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _share(records: Sequence[EvalRecord], test) -> float | None:
    return sum(bool(test(r)) for r in records) / len(records) if records else None


def comparisons(per_seed: Sequence[dict[str, dict[QuestionKey, float]]]) -> dict[str, dict]:
    """The Conductor against each baseline, question by question over every seed: the mean difference,
    the pooled standard error, the between-seed one (of the seeds' mean differences), and whether it
    beats the baseline by more than two of the larger."""
    out = {}
    for baseline in COMPARED:
        pooled_a, pooled_b, by_seed = {}, {}, []
        for s, values in enumerate(per_seed):
            if baseline not in values or "conductor" not in values:
                break
            pooled_a.update({(str(s), *k): v for k, v in values["conductor"].items()})
            pooled_b.update({(str(s), *k): v for k, v in values[baseline].items()})
            by_seed.append(paired(values["conductor"], values[baseline]).difference)
        else:
            whole: Paired = paired(pooled_a, pooled_b)
            between = statistics.stdev(by_seed) / math.sqrt(len(by_seed)) if len(by_seed) > 1 else math.nan
            se = max(whole.se, between) if len(by_seed) > 1 else whole.se
            out[baseline] = {
                "difference": whole.difference,
                "se_pooled": whole.se,
                "se_between_seeds": None if math.isnan(between) else between,
                "questions": whole.questions,
                "beats": whole.difference > 2 * se,
            }
    return out


def yardstick(name: str, variants: dict[str, tuple[Sequence[float], Any]], seeds: Sequence[int]) -> dict:
    """A yardstick policy on the same rollouts (B x G x iterations, the same seeds) in each variant at each
    learning rate (`variants`: label -> (rates, run(lr, seed) -> TabularResult)); the best mean fraction of
    the optimal reward is the yardstick."""
    runs = {}
    for label, (rates, run) in variants.items():
        for lr in rates:
            results = [run(lr, seed) for seed in seeds]
            runs[f"{label}/lr={lr:g}"] = {
                "fraction_of_optimal_reward": statistics.fmean(r.fraction_of_optimal_reward for r in results),
                "iterations_to_95": [r.iterations_to(0.95) for r in results],
            }
    best = max(runs, key=lambda k: runs[k]["fraction_of_optimal_reward"])
    return {f"{name}_fraction_of_optimal_reward": runs[best]["fraction_of_optimal_reward"], f"{name}_best": best,
            f"{name}_runs": runs}  # fmt: skip


def grpo_of(config: Config, iterations: int) -> dict:
    """The GRPO shape a yardstick learns with: training's questions per iteration, group size and draws."""
    t = config.train
    return {"max_steps": config.conductor.max_steps, "iterations": iterations, "group_size": t.rollouts_per_question,
            "questions_per_iteration": t.questions_per_iteration, "balance_domains": t.balance_domains}  # fmt: skip


def tabular_yardstick(config: Config, held_out: Sequence[Question], iterations: int, seeds: Sequence[int]) -> dict:
    """The tabular softmax policy (told the domain, or the domain and difficulty) and, as a floor, its start."""
    train = load_dataset(config.data.questions)
    grpo = grpo_of(config, iterations)

    def table(observe: str):
        return lambda lr, seed: tabular_grpo(train, held_out, config.workers, observe=observe, lr=lr, seed=seed, **grpo)

    found = yardstick("tabular", {o: (TABULAR_LRS, table(o)) for o in ("domain", "domain_difficulty")}, seeds)
    start = tabular_grpo(train, held_out, config.workers, **{**grpo, "iterations": 0, "lr": 1.0})
    return {**found, "tabular_uniform_fraction_of_optimal_reward": start.fraction_of_optimal_reward}


def readout_yardstick(
    config: Config, held_out: Sequence[Question], iterations: int, seeds: Sequence[int], model: Any = None
) -> dict:
    """The linear policy over the Conductor's state where it picks the first worker
    (conductor_rl/evaluation/readout.py), centred and raw; `model`: whose state (None: the untrained
    `conductor.model`)."""
    train = load_dataset(config.data.questions)
    prompts = ConductorPrompt.from_config(config)
    if model is None:
        model = load_causal_lm(config.conductor.model, "float32")[0].eval()
    states = choice_states(model, {q.question: prompts.question_ids(q) for q in [*train, *held_out]})
    grpo = grpo_of(config, iterations)

    def read(centre: bool):
        return lambda lr, seed: readout_grpo(
            train, held_out, config.workers, states, centre=centre, lr=lr, seed=seed, **grpo
        )

    found = yardstick("readout", {"centred": (READOUT_LRS, read(True)), "raw": (READOUT_RAW_LRS, read(False))}, seeds)
    return {**found, "readout_state": state_geometry(states, train)}


def mean_over_seeds(runs: Sequence[dict]) -> dict[str, float | None]:
    """Each figure's mean over the seeds; None where a seed lacks it (benchmarks/subsets.py, recursion.py)."""
    keys = dict.fromkeys(k for r in runs for k in r if k not in ("seed", "train_s", "wall_s"))
    return {
        k: statistics.fmean(vals) if len(vals := [r[k] for r in runs if r.get(k) is not None]) == len(runs) else None
        for k in keys
    }


def mean_with_se(values: Sequence[float | None]) -> dict[str, float | None]:
    present = [v for v in values if v is not None]
    if len(present) != len(values) or not present:
        return {"mean": None, "se": None}
    se = statistics.stdev(present) / math.sqrt(len(present)) if len(present) > 1 else None
    return {"mean": statistics.fmean(present), "se": se}


def summary_over_seeds(runs: Sequence[dict], compared: dict[str, dict], yardsticks: dict) -> dict:
    """The means over seeds with their standard errors, the comparisons and the goals."""
    methods = sorted({m for r in runs for m in r["expected_accuracy"]})
    mean = {
        "expected_accuracy": {m: mean_with_se([r["expected_accuracy"].get(m) for r in runs]) for m in methods},
        **{
            k: mean_with_se([r.get(k) for r in runs])
            for k in ("sampled_accuracy", "fraction_of_optimal_reward", "cost_per_sample_usd",
                      "moa_cost_per_sample_usd", "steps_per_sample", "hard_checking_share", "easy_single_step_share")
        },
    }  # fmt: skip
    beats = [b for b, c in compared.items() if c["beats"]]
    fraction, hard, easy = (
        mean[k]["mean"] for k in ("fraction_of_optimal_reward", "hard_checking_share", "easy_single_step_share")
    )
    reached = {
        "beats": all(b in beats for b in GOALS["beats"]),
        "fraction_of_optimal_reward": None if fraction is None else fraction >= GOALS["fraction_of_optimal_reward"],
        "hard_checking_share": None if hard is None else hard >= GOALS["hard_checking_share"],
        "easy_single_step_share": None if easy is None else easy >= GOALS["easy_single_step_share"],
        "seed_minutes": all(r["wall_s"] <= 60 * GOALS["seed_minutes"] for r in runs),
    }
    return {**mean, "compared": compared, "beats": beats, **yardsticks, "goals": GOALS, "goals_reached": reached}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="configuration overrides for training (key.sub=value)")
    parser.add_argument("--seeds", type=int, default=3, help="how many seeds (0, 1, ... from --first-seed)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (to add seeds to a run)")
    parser.add_argument("--iterations", type=int, default=8, help="training iterations per seed (the first command's)")
    parser.add_argument("--repeats", type=int, default=2, help="evaluation repeats per held-out question")
    parser.add_argument("--benchmarks", nargs="+", help=f"held-out sets (default: evaluate.benchmarks + {HELD_OUT})")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-orchestration")
    parser.add_argument("--reuse", action="store_true", help=REUSE_HELP + "; resume their evaluations")
    parser.add_argument("--json", action="store_true", help="(the JSON is always on the last line)")
    args = parser.parse_args(argv)

    base = load_config(None, args.overrides)
    benchmarks = args.benchmarks or [*base.evaluate.benchmarks, HELD_OUT]
    questions = held_out_set(benchmarks)
    held_out = list(questions.values())
    optimal_accuracy, optimal_reward = optimum_of(held_out, base.workers, base.conductor.max_steps)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    runs, values = [], []
    for seed in seeds:
        print(f"seed {seed}: training {args.iterations} iterations ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        trained = train_seed(seed, args.iterations, args.overrides, args.out / f"seed-{seed}" / "run", reuse=args.reuse)
        trained_s = time.perf_counter() - started
        print(f"seed {seed}: evaluating on {len(held_out)} held-out questions ...", file=sys.stderr, flush=True)
        records = evaluate_seed(trained, benchmarks, args.repeats, args.out / f"seed-{seed}" / "eval", args.reuse)
        records = [r for r in records if (r.benchmark, r.question_id) in questions]  # not the router's pilot
        values.append(method_values(records, questions, trained.workers))
        run = {"seed": seed, **figures(records, values[-1], optimal_reward)}
        run.update(sampled_shares(Path(trained.train.output_dir), args.iterations, len(trained.workers)))
        run["train_s"], run["wall_s"] = round(trained_s, 1), round(time.perf_counter() - started, 1)
        runs.append(run)
        print(f"seed {seed}: {json.dumps(run)}", file=sys.stderr, flush=True)
    print("the yardsticks: tabular and readout policies on the same rollouts ...", file=sys.stderr, flush=True)
    yardsticks = {**tabular_yardstick(base, held_out, args.iterations, seeds),
                  **readout_yardstick(base, held_out, args.iterations, seeds)}  # fmt: skip
    result = {
        "benchmark": "orchestration",
        "simulated": True,
        "config": "configs/local.yaml",
        "overrides": args.overrides,
        "iterations": args.iterations,
        "benchmarks": benchmarks,
        "held_out_questions": len(held_out),
        "repeats": args.repeats,
        "optimal_accuracy": optimal_accuracy,
        "optimal_reward": optimal_reward,
        **summary_over_seeds(runs, comparisons(values), yardsticks),
        "seeds": runs,
    }
    keep_result(result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
