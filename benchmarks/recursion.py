"""Does the recursive Conductor (paper §3.2, §4.3) learn to stop? Accuracy and worker calls per
sample against the maximum recursion depth 0-3, and how often an inner call keeps a right answer
and a wrong one, on the embedded default's plan-sensitive pool (configs/local.yaml: SIMULATED
workers, docs/guide/simulator.md) with the Conductor's own seat as a fourth worker (Model 3).

Per seed:
1. a plain Conductor: trained here on the seated pool at conductor.max_depth=0 (a step given to
   the seat keeps the answer), or `--checkpoint` (a run, checkpoint or model folder);
2. recursive fine-tuning from it: conductor.model=<its model folder>, conductor.max_depth=2,
   a short warm start (`--recursive-warm-start` steps: the seat demonstrated like any worker after
   a plan's first step, and `--recursive-share` of the questions shown as recursive prompts, answered
   by keeping the answer or a new plan, half each, whatever the answer;
   conductor_rl/plan/demonstrations.py), then GRPO: half of each batch's groups end with a forced
   call, and a rollout in which the Conductor was never called again earns 0.75 of its reward
   (docs/decisions.md);
3. one `evaluate` of conductor:<fine-tuned>@depth=0..3 on the held-out questions: the depth is a
   limit, and the Conductor recurses only where its plan gives the seat a step; the plain
   Conductor is evaluated beside it (`plain_accuracy`: what fine-tuning changed at depth 0).

The figures measure how the Conductor spends calls on a simulated testbed, not real models.

    .venv/bin/python benchmarks/recursion.py                          # seed 0, JSON on the last line
    .venv/bin/python benchmarks/recursion.py --seeds 2 --recursive-iterations 6
    .venv/bin/python benchmarks/recursion.py --checkpoint runs/local --first-seed 1 --seeds 1

Goals (issue 28), each {value, goal, reached} on the means over seeds: accuracy never falls from
one depth to the next and rises from depth 0 to 3; worker calls at depth 3 <= 2x depth 0's; inner
calls keep a right answer >= 70 % of the time and a wrong one <= 30 %. Progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import keep_result, log  # noqa: E402
from benchmarks.orchestration import REUSE_HELP, accuracy_of, mean_over_seeds, train_seed  # noqa: E402
from conductor_rl.config import SEAT_EXAMPLE, Config, load_config  # noqa: E402
from conductor_rl.evaluation.summary import EvalRecord  # noqa: E402
from conductor_rl.rollout.recursion import StopCounts  # noqa: E402

DEPTHS = (0, 1, 2, 3)
SEAT = f"workers.3={SEAT_EXAMPLE}"  # appended: the three simulated workers keep ids 0-2
PER_SEED = ("plain_accuracy", "fine_tuning", "wall_s")  # reported per seed beside the depth figures
GOALS = {"calls_ratio_3_to_0": 2.0, "stop_rate_when_right": 0.70, "stop_rate_when_wrong": 0.30}


def train_run(seed: int, iterations: int, out: Path, args: argparse.Namespace, *extra: str) -> Config:
    """One `train` of the seated embedded default; `extra` settings come after the user's overrides."""
    return train_seed(seed, iterations, [SEAT, *args.overrides, *extra], out, reuse=args.reuse)


def recursive_fine_tuning(seed: int, plain: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Recursive fine-tuning from the plain Conductor's model folder; what its log says it did."""
    from conductor_rl.evaluation.methods import resolve_checkpoint
    from conductor_rl.run.log import records

    model = resolve_checkpoint(plain)
    started = time.perf_counter()
    train_run(
        seed,
        args.recursive_iterations,
        out,
        args,
        f"conductor.model={model}",
        "conductor.max_depth=2",
        f"train.warm_start.steps={args.recursive_warm_start}",
        f"train.warm_start.recursive_share={args.recursive_share}",
    )
    logged = records(out)
    return {
        "from": str(model),
        "wall_s": round(time.perf_counter() - started, 1),
        "reward_by_iteration": [round(r["reward_mean"], 4) for r in logged],
        "recursive_calls_per_rollout": [r.get("recursive_calls_per_rollout") for r in logged],
        "chosen_recursion_share": [r.get("chosen_recursion_share") for r in logged],
        "stop_rate_when_right": [r.get("recursion_stop_rate_when_right") for r in logged],
        "stop_rate_when_wrong": [r.get("recursion_stop_rate_when_wrong") for r in logged],
    }


def evaluate_depths(run: Path, plain: str, args: argparse.Namespace, out: Path) -> list[EvalRecord]:
    """One `evaluate` of the fine-tuned Conductor at each depth, and of the plain one, on the seated pool."""
    from jobs.evaluate import evaluate

    shutil.rmtree(out, ignore_errors=True)
    methods = [f"conductor:{run}@depth={d}" for d in DEPTHS] + [f"conductor:{plain}"]
    limit = [f"evaluate.limit={args.limit}"] if args.limit else []
    config = load_config(
        None,
        [
            SEAT,
            f"evaluate.methods={json.dumps(methods)}",
            f"evaluate.repeats={args.repeats}",
            f"evaluate.output_dir={out}",
            "evaluate.preflight=false",
            *limit,
        ],
    )
    summary = evaluate(config)
    if summary["stopped"] != "finished":
        raise SystemExit(f"the evaluation in {out} stopped: {summary['stopped']}")
    return [EvalRecord.from_dict(json.loads(line)) for line in (out / "records.jsonl").read_text().splitlines()]


def depth_figures(records: Sequence[EvalRecord], plain: str) -> dict[str, float | None]:
    """One seed's figures, flat (`depth_<d>_<figure>`, so that `mean_over_seeds` averages them)."""
    scored = [r for r in records if r.verdict != "error"]  # a plan error scores 0, an infrastructure error nothing
    before = [r for r in scored if r.method == f"conductor:{plain}"]
    figures: dict[str, float | None] = {"plain_accuracy": accuracy_of(before) if before else None}
    recursive = StopCounts()
    for depth in DEPTHS:
        mine = [r for r in scored if r.method.endswith(f"@depth={depth}")]
        stops = sum((r.stop_counts for r in mine), StopCounts())
        recursive += stops
        figures[f"depth_{depth}_accuracy"] = accuracy_of(mine) if mine else None
        figures[f"depth_{depth}_calls_per_sample"] = statistics.fmean(r.calls for r in mine) if mine else None
        figures[f"depth_{depth}_inner_calls_per_sample"] = (
            statistics.fmean(r.recursive_calls for r in mine) if mine else None
        )
        figures[f"depth_{depth}_stop_rate_when_right"] = stops.rate_when_right
        figures[f"depth_{depth}_stop_rate_when_wrong"] = stops.rate_when_wrong
    figures["stop_rate_when_right"] = recursive.rate_when_right
    figures["stop_rate_when_wrong"] = recursive.rate_when_wrong
    return figures


def by_depth(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The flat figures regrouped per maximum depth."""
    names = ("accuracy", "calls_per_sample", "inner_calls_per_sample", "stop_rate_when_right", "stop_rate_when_wrong")
    return {str(d): {n: figures.get(f"depth_{d}_{n}") for n in names} for d in DEPTHS}


def goals(mean: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each goal's value, goal and whether it was reached (None where a figure is missing)."""
    acc = [mean.get(f"depth_{d}_accuracy") for d in DEPTHS]
    calls = [mean.get(f"depth_{d}_calls_per_sample") for d in DEPTHS]
    steps = rise = ratio = None
    if all(a is not None for a in acc):
        steps = min(b - a for a, b in pairwise(acc))  # the smallest change from one depth to the next
        rise = acc[-1] - acc[0]
    if calls[0] and calls[-1] is not None:
        ratio = calls[-1] / calls[0]

    def goal(value: float | None, text: str, test) -> dict[str, Any]:
        return {"value": value, "goal": text, "reached": None if value is None else bool(test(value))}

    return {
        "accuracy_never_falls": goal(steps, "each depth's accuracy - the one before >= 0", lambda v: v >= 0),
        "accuracy_rises_0_to_3": goal(rise, "accuracy at depth 3 - at depth 0 > 0", lambda v: v > 0),
        "calls_ratio_3_to_0": goal(ratio, "<= 2", lambda v: v <= GOALS["calls_ratio_3_to_0"]),
        "stop_rate_when_right": goal(
            mean.get("stop_rate_when_right"), ">= 0.70", lambda v: v >= GOALS["stop_rate_when_right"]
        ),
        "stop_rate_when_wrong": goal(
            mean.get("stop_rate_when_wrong"), "<= 0.30", lambda v: v <= GOALS["stop_rate_when_wrong"]
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="configuration overrides for both trainings (key.sub=value)")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds (from --first-seed)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (to add seeds to a run)")
    parser.add_argument("--checkpoint", help="a plain Conductor (run, checkpoint or model folder): no plain training")
    parser.add_argument("--iterations", type=int, default=10, help="plain training iterations per seed")
    parser.add_argument("--recursive-iterations", type=int, default=4, help="recursive fine-tuning iterations")
    parser.add_argument(
        "--recursive-warm-start", type=int, default=4, help="warm-start steps of the recursive fine-tuning (0: none)"
    )
    parser.add_argument(
        "--recursive-share",
        type=float,
        default=0.75,
        help="its share of recursive prompts: a fine-tuning keeps most of the plain Conductor's root plans",
    )
    parser.add_argument("--repeats", type=int, default=2, help="evaluation repeats per held-out question")
    parser.add_argument("--limit", type=int, default=None, help="evaluate.limit: questions per benchmark (all)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-recursion")
    parser.add_argument("--reuse", action="store_true", help=REUSE_HELP)
    parser.add_argument("--json", action="store_true", help="accepted for the common interface: JSON is always last")
    args = parser.parse_args(argv)

    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        started = time.perf_counter()
        where = args.out / f"seed-{seed}"
        plain = args.checkpoint
        if plain is None:
            log(f"seed {seed}: plain training, {args.iterations} iterations (max depth 0) ...")
            plain = str(train_run(seed, args.iterations, where / "plain", args).train.output_dir)
        log(
            f"seed {seed}: recursive fine-tuning from {plain}, {args.recursive_iterations} iterations (max depth 2) ..."
        )
        tuning = recursive_fine_tuning(seed, plain, args, where / "recursive")
        log(f"seed {seed}: evaluating at depths {list(DEPTHS)} ...")
        records = evaluate_depths(where / "recursive", plain, args, where / "eval")
        run = {"seed": seed, **depth_figures(records, plain), "fine_tuning": tuning}
        run["wall_s"] = round(time.perf_counter() - started, 1)
        runs.append(run)
        log(f"seed {seed}: {json.dumps(by_depth(run))}")
    mean = mean_over_seeds([{k: v for k, v in r.items() if k != "fine_tuning"} for r in runs])
    result = {
        "benchmark": "recursion",
        "simulated": True,
        "note": "SIMULATED workers (configs/local.yaml with the Conductor's seat as Model 3): not real models",
        "config": "configs/local.yaml",
        "overrides": args.overrides,
        "checkpoint": args.checkpoint,
        "iterations": None if args.checkpoint else args.iterations,
        "recursive_iterations": args.recursive_iterations,
        "recursive_warm_start": args.recursive_warm_start,
        "recursive_share": args.recursive_share,
        "repeats": args.repeats,
        "limit": args.limit,
        "plain_accuracy": mean.get("plain_accuracy"),
        "by_depth": by_depth(mean),
        "stop_rate_when_right": mean.get("stop_rate_when_right"),
        "stop_rate_when_wrong": mean.get("stop_rate_when_wrong"),
        "goals": goals(mean),
        "seeds": [
            {
                "seed": r["seed"],
                "by_depth": by_depth(r),
                **{k: r[k] for k in ("plain_accuracy", "fine_tuning", "wall_s")},
            }
            for r in runs
        ],
    }
    keep_result(result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
