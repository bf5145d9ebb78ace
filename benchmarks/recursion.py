"""Test-time scaling of the recursive Conductor (paper §3.2, §4.3): accuracy, worker calls
and cost per sample against the maximum recursion depth 0, 1, 2, 3 on the embedded pool,
through the evaluation harness (`conductor-rl evaluate --method conductor:<ckpt>@depth=N`).

1. Fine-tune the embedded default's Conductor in the paper's recursive training mode
   (`conductor.max_depth=1`: in half of each batch every rollout ends with a forced
   recursive call; a rollout whose call kept the answer earns 0.75 of its reward), a few
   iterations; `--checkpoint` evaluates an existing run or model instead.
2. Evaluate it at depth 0 (the plain Conductor) to 3 in one `evaluate` call: at depth N,
   every plan below depth N ends with a call to the Conductor, which sees the plan and
   its answer and writes a new plan or three empty lists (keep the answer).

The paper: more recursion, more test-time compute, better scores, with fewer than twice
the agent calls. Workers are SIMULATED (configs/local-routing.yaml, the domain-only pool): the figures measure how the
Conductor spends calls on declared skills, not real models.

    .venv/bin/python benchmarks/recursion.py --json
    .venv/bin/python benchmarks/recursion.py --checkpoint runs/local --depths 0 1 2 3
    .venv/bin/python benchmarks/recursion.py --iterations 6 --limit 20 learner.lr=5e-5

Sized to run in under 10 minutes on 2 CPU cores: the fine-tuning is short, because each
recursive call is a learner row with a prompt of its own (the calling plan and its answer
are in it), which makes a recursive iteration's learner step several times the plain one's.
JSON on the last line, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import log, train_then_evaluate_overrides  # noqa: E402
from conductor_rl.config import Config, load_config  # noqa: E402

BENCHMARKS = ["gsm8k:test", "mmlu:eval"]  # the training domains of the embedded default


def base_config(args: argparse.Namespace) -> Config:
    shrunk = train_then_evaluate_overrides(args, BENCHMARKS)
    return load_config(ROOT / "configs" / "local-routing.yaml", [*shrunk, *args.overrides])


def fine_tune(config: Config, out: Path) -> dict[str, Any]:
    """The paper's recursive fine-tuning, in miniature: conductor.max_depth=1 turns it on."""
    from conductor_rl.run.log import records
    from jobs.train import train

    shutil.rmtree(out, ignore_errors=True)
    config = load_config(config, [f"train.output_dir={out}", "conductor.max_depth=1"])
    started = time.perf_counter()
    summary = train(config)
    if summary.get("stopped") != "finished":
        raise SystemExit(f"the fine-tuning in {out} did not finish: {summary}")
    logged = records(out)
    return {
        "output_dir": str(out),
        "iterations": len(logged),
        "wall_s": round(time.perf_counter() - started, 1),
        "forced_share": config.train.recursion.forced_share,
        "discount": config.train.recursion.discount,
        "reward_by_iteration": [round(r["reward_mean"], 4) for r in logged],
        "recursive_calls_per_rollout": [round(r.get("recursive_calls_per_rollout", 0.0), 3) for r in logged],
        "recursion_kept_share": [round(r.get("recursion_kept_share", 0.0), 3) for r in logged],
    }


def evaluate_depths(config: Config, checkpoint: str, depths: list[int], out: Path) -> dict[str, Any]:
    """One `evaluate` call with a method per depth; the figures per depth from its records."""
    from conductor_rl.evaluation import RecordStore
    from jobs.evaluate import evaluate

    shutil.rmtree(out, ignore_errors=True)
    methods = [f"conductor:{checkpoint}@depth={d}" for d in depths]
    e = config.evaluate.model_copy(update={"methods": methods, "output_dir": str(out)})
    started = time.perf_counter()
    summary = evaluate(config.model_copy(update={"evaluate": e}))
    wall = time.perf_counter() - started
    if summary["stopped"] != "finished":
        raise SystemExit(f"the evaluation in {out} stopped: {summary['stopped']}")
    records = RecordStore(out).records()
    rows = {}
    for depth, method in zip(depths, methods):
        mine = [r for r in records if r.method == method and r.verdict != "error"]
        if not mine:
            raise SystemExit(f"{method}: no evaluated sample (see {out}/records.jsonl)")
        rows[depth] = {
            "method": method,
            "samples": len(mine),
            "accuracy": round(sum(r.verdict == "correct" for r in mine) / len(mine), 4),
            "accuracy_by_benchmark": {
                b: round(
                    sum(r.verdict == "correct" for r in mine if r.benchmark == b)
                    / max(sum(r.benchmark == b for r in mine), 1),
                    4,
                )
                for b in BENCHMARKS
            },
            "plan_error_rate": round(sum(r.verdict == "plan_error" for r in mine) / len(mine), 4),
            "worker_calls_per_sample": round(statistics.fmean(r.calls for r in mine), 3),
            "cost_usd_per_sample": round(statistics.fmean(r.cost_usd for r in mine), 6),
            "errors": sum(r.verdict == "error" for r in records if r.method == method),
        }
    return {"wall_s": round(wall, 1), "by_depth": rows, "results": summary.get("results")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="configuration overrides (key.sub=value), applied last")
    parser.add_argument(
        "--checkpoint",
        help="evaluate this run, checkpoint or model folder instead of fine-tuning "
        "(conductor:untrained: the base model)",
    )
    parser.add_argument("--depths", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--iterations", type=int, default=3, help="fine-tuning iterations")
    parser.add_argument("--questions", type=int, default=6, help="train.questions_per_iteration")
    parser.add_argument("--rollouts", type=int, default=6, help="train.rollouts_per_question")
    parser.add_argument("--limit", type=int, default=12, help="evaluate.limit: questions per benchmark")
    parser.add_argument("--repeats", type=int, default=2, help="evaluate.repeats")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench-recursion"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    config = base_config(args)
    out = Path(args.out)
    training = None
    checkpoint = args.checkpoint
    if checkpoint is None:
        log(f"fine-tuning the embedded default recursively ({args.iterations} iterations, conductor.max_depth=1) ...")
        training = fine_tune(config, out / "train")
        checkpoint = training["output_dir"]
        log(f"  reward by iteration {training['reward_by_iteration']} in {training['wall_s']:.0f}s")
    elif checkpoint == "conductor:untrained":
        checkpoint = "untrained"
    log(f"evaluating {checkpoint} at depths {args.depths} ...")
    evaluation = evaluate_depths(config, checkpoint, args.depths, out / "eval")
    by_depth = evaluation["by_depth"]
    base = by_depth[min(by_depth)]
    for depth, row in by_depth.items():
        row["calls_vs_lowest_depth"] = round(
            row["worker_calls_per_sample"] / max(base["worker_calls_per_sample"], 1e-9), 3
        )
        log(
            f"  depth {depth}: accuracy {row['accuracy']:.3f}, {row['worker_calls_per_sample']:.2f} worker calls, "
            f"${row['cost_usd_per_sample']:.5f} per sample"
        )
    figures = {
        "benchmark": "recursion",
        "config": "configs/local-routing.yaml",
        "simulated": True,
        "checkpoint": checkpoint,
        "fine_tuning": training,
        "benchmarks": BENCHMARKS,
        "limit": args.limit,
        "repeats": args.repeats,
        "overrides": args.overrides,
        "by_depth": by_depth,
        "accuracy_gain_deepest_vs_lowest": round(by_depth[max(by_depth)]["accuracy"] - base["accuracy"], 4),
        "calls_ratio_deepest_vs_lowest": by_depth[max(by_depth)]["calls_vs_lowest_depth"],
        "evaluation_wall_s": evaluation["wall_s"],
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
