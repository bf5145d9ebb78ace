"""Does the embedded default learn? Runs `conductor-rl train` on configs/local-routing.yaml
(the embedded default with the domain-only pool, where routing is what there is to learn)
with two seeds and reports, per seed and on average: the mean reward of the
first three and the last three iterations, and at the end the share of plans
whose last step goes to the domain's best worker (the simulated pool declares
each worker's accuracy per domain, so the best worker is known).

Goals (issue #6): reward +0.15 or more; best-worker share >= 0.8.

    .venv/bin/python benchmarks/learning.py --json              # two seeds
    .venv/bin/python benchmarks/learning.py --seeds 0 train.iterations=6
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import keep_result  # noqa: E402
from conductor_rl.config import load_config  # noqa: E402
from conductor_rl.config.loading import CONFIG_DIR  # noqa: E402
from conductor_rl.run.log import records  # noqa: E402

ROUTING = CONFIG_DIR / "local-routing.yaml"


def run_seed(seed: int, overrides: list[str], out: Path) -> dict:
    from jobs.train import train

    shutil.rmtree(out, ignore_errors=True)
    config = load_config(
        ROUTING,
        [f"train.seed={seed}", f"conductor.seed={seed}", f"train.output_dir={out}", "train.progress=false", *overrides],
    )
    started = time.perf_counter()
    summary = train(config)
    wall = time.perf_counter() - started
    logged = records(out)
    first, last = logged[: min(3, len(logged))], logged[-min(3, len(logged)) :]
    final = logged[-1]
    return {
        "seed": seed,
        "iterations": len(logged),
        "wall_s": round(wall, 1),
        "first3_reward": statistics.fmean(r["reward_mean"] for r in first),
        "last3_reward": statistics.fmean(r["reward_mean"] for r in last),
        "reward_gain": statistics.fmean(r["reward_mean"] for r in last)
        - statistics.fmean(r["reward_mean"] for r in first),
        "first_best_worker_share": logged[0].get("best_worker_share"),
        "final_best_worker_share": final.get("best_worker_share"),
        "last3_best_worker_share": statistics.fmean(r.get("best_worker_share", 0.0) for r in last),
        "final_worker_by_domain": final.get("final_worker_by_domain"),
        "report": summary.get("report"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="configuration overrides (key.sub=value)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench-learning"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    runs = []
    for seed in args.seeds:
        print(f"seed {seed}: training ...", file=sys.stderr, flush=True)
        result = run_seed(seed, args.overrides, Path(args.out) / f"seed-{seed}")
        runs.append(result)
        print(
            f"seed {seed}: reward {result['first3_reward']:.3f} -> {result['last3_reward']:.3f} "
            f"({result['reward_gain']:+.3f}); best-worker share {result['first_best_worker_share']} -> "
            f"{result['final_best_worker_share']} in {result['wall_s']:.0f}s",
            file=sys.stderr,
            flush=True,
        )
    gain = statistics.fmean(r["reward_gain"] for r in runs)
    share = statistics.fmean(r["final_best_worker_share"] or 0.0 for r in runs)
    figures = {
        "benchmark": "learning",
        "config": "configs/local-routing.yaml",
        "overrides": args.overrides,
        "runs": runs,
        "mean_first3_reward": statistics.fmean(r["first3_reward"] for r in runs),
        "mean_last3_reward": statistics.fmean(r["last3_reward"] for r in runs),
        "mean_reward_gain": gain,
        "mean_final_best_worker_share": share,
        "goal_reward_gain": 0.15,
        "goal_best_worker_share": 0.8,
        "reward_goal_met": gain >= 0.15,
        "best_worker_goal_met": share >= 0.8,
    }
    keep_result(figures)
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
