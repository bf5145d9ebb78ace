"""Adaptive worker subsets (paper §3.2): train once on random subsets of the pool, then serve any
subset a user names. Trains two Conductors per seed on the plan-sensitive pool of the embedded default
(configs/local.yaml, SIMULATED workers) plus a fourth, cheap worker: one on the whole pool, one with
`train.worker_subset` (each question's prompt lists k of the four), then evaluates both on the held-out
questions (`conductor-rl evaluate --workers ...`):

  whole pool     all four workers;
  unseen         each subset of --unseen (default: the two triples without one of the experts), a
                 size the subset-trained Conductor never had listed (k = 2), and the whole-pool-trained
                 never had anything but the whole pool;
  cheap          a user's cheap-only subset (the generalist and the cheap worker), with each of its
                 members alone (`single:*`).

Workers keep their pool numbers in every roster (conductor.worker_identity=number); pass
`conductor.worker_identity=description` to compare the other identity (both runs use it).

The fourth worker, `sim-open`, was declared before any run, to the design of the paper's open-weight
pool: cheap (USD 0.1 / 0.4 per M tokens), better than the generalist on MMLU and worse on maths, so
that a cheap-only pair has members of different strengths (docs/guide/simulator.md has the rules).
The figures measure orchestration of declared skills, not real models.

    .venv/bin/python benchmarks/subsets.py                       # two seeds, JSON on the last line
    .venv/bin/python benchmarks/subsets.py --seeds 1 conductor.worker_identity=description

Goals (issue 28): subset-trained >= whole-pool-trained on unseen subsets; within 0.05 of it on the
whole pool; the subset-trained Conductor on the cheap subset beats that subset's best single member.
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
from benchmarks.orchestration import REUSE_HELP, accuracy_of, mean_over_seeds, train_seed  # noqa: E402
from conductor_rl.config import Config, load_config, validate_config  # noqa: E402
from conductor_rl.evaluation.summary import EvalRecord  # noqa: E402
from conductor_rl.plan.roster import with_workers  # noqa: E402

CHEAP_WORKER = {
    "name": "sim-open",
    "provider": "sim",
    "price": {"input": 0.1, "output": 0.4},
    "sim": {
        "accuracy": {"math": 0.65, "mmlu": 0.85, "code": 0.5},
        "hard_accuracy": {"math": 0.25, "mmlu": 0.4, "code": 0.2},
        "keep_rate": 0.9,
        "repair_rate": 0.6,
        "off_task_factor": 0.6,
        "latency_s": 0.1,
        "latency_jitter": 0.3,
        "output_tokens": 150,
    },
}
UNSEEN = [
    "sim-knowledge-expert,sim-generalist,sim-open",
    "sim-math-expert,sim-generalist,sim-open",
]
CHEAP = "sim-generalist,sim-open"
GOALS = {"unseen_margin": 0.0, "whole_pool_gap": 0.05, "cheap_over_best_member": 0.0}


def pool_config(overrides: Sequence[str]) -> Config:
    """The embedded default with the cheap worker appended (the three keep their numbers 0-2)."""
    raw = load_config(None).model_dump(mode="json")
    raw["workers"].append(CHEAP_WORKER)
    return load_config(validate_config(raw), list(overrides))


def evaluate_on(trained: Sequence[Config], workers: str | None, methods: Sequence[str], repeats: int, out: Path):
    """One `evaluate` call (as `conductor-rl evaluate --workers ...` makes it) of `methods`; the records."""
    from jobs.evaluate import evaluate

    shutil.rmtree(out, ignore_errors=True)
    config = with_workers(trained[0], workers.split(",") if workers else None)
    config = load_config(
        config,
        [
            f"evaluate.methods={json.dumps(list(methods))}",
            f"evaluate.repeats={repeats}",
            f"evaluate.output_dir={out}",
            "evaluate.preflight=false",
            "evaluate.progress=false",
        ],
    )
    summary = evaluate(config)
    if summary["stopped"] != "finished":
        raise SystemExit(f"the evaluation in {out} stopped: {summary['stopped']}")
    records = [EvalRecord.from_dict(json.loads(line)) for line in (out / "records.jsonl").read_text().splitlines()]
    return [r for r in records if r.verdict != "error"]


def accuracy(records: Sequence[EvalRecord], method: str) -> float | None:
    mine = [r for r in records if r.method == method]
    return accuracy_of(mine) if mine else None


def one_seed(seed: int, args: argparse.Namespace, base: Config) -> dict:
    out = args.out / f"seed-{seed}"
    runs, train_s = {}, {}
    for name, extra in (("whole", []), ("subsets", [f"train.worker_subset={args.subset_size}"])):
        print(f"seed {seed}: training on {name} ({args.iterations} iterations) ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        runs[name] = train_seed(
            seed, args.iterations, [*args.overrides, *extra], out / f"train-{name}", base, reuse=args.reuse
        )
        train_s[name] = round(time.perf_counter() - started, 1)
    whole, subsets = (f"conductor:{runs[n].train.output_dir}" for n in ("whole", "subsets"))
    trained = [runs["whole"]]

    def both(workers: str | None, label: str) -> tuple[float | None, float | None]:
        print(f"seed {seed}: evaluating on {label} ...", file=sys.stderr, flush=True)
        records = evaluate_on(trained, workers, [subsets, whole], args.repeats, out / f"eval-{label}")
        return accuracy(records, subsets), accuracy(records, whole)

    subset_whole_pool, whole_whole_pool = both(None, "whole-pool")
    unseen = {names: both(names, f"unseen-{i}") for i, names in enumerate(args.unseen)}
    print(f"seed {seed}: evaluating on the cheap subset {args.cheap} ...", file=sys.stderr, flush=True)
    cheap = evaluate_on(trained, args.cheap, [subsets, "single:*"], args.repeats, out / "eval-cheap")
    singles = {m: accuracy(cheap, m) for m in sorted({r.method for r in cheap}) if m.startswith("single:")}

    def mean(values: Sequence[float | None]) -> float | None:
        return None if any(v is None for v in values) else statistics.fmean(values)  # type: ignore[arg-type]

    return {
        "seed": seed,
        "subset_trained_unseen": mean([a for a, _ in unseen.values()]),
        "whole_trained_unseen": mean([b for _, b in unseen.values()]),
        "subset_trained_whole_pool": subset_whole_pool,
        "whole_trained_whole_pool": whole_whole_pool,
        "cheap_subset_accuracy": accuracy(cheap, subsets),
        "cheap_subset_best_member_accuracy": max((v for v in singles.values() if v is not None), default=None),
        "unseen_by_subset": {k: {"subset_trained": a, "whole_trained": b} for k, (a, b) in unseen.items()},
        "cheap_singles": singles,
        "train_s": train_s,
    }


def goals(mean: dict) -> dict[str, bool | None]:
    def reached(test, *keys: str) -> bool | None:
        values = [mean.get(k) for k in keys]
        return None if any(v is None for v in values) else bool(test(*values))

    return {
        "subset_trained_at_least_whole_trained_on_unseen": reached(
            lambda s, w: s >= w + GOALS["unseen_margin"], "subset_trained_unseen", "whole_trained_unseen"
        ),
        "subset_trained_within_0.05_on_whole_pool": reached(
            lambda s, w: s >= w - GOALS["whole_pool_gap"], "subset_trained_whole_pool", "whole_trained_whole_pool"
        ),
        "cheap_subset_beats_its_best_member": reached(
            lambda c, b: c > b + GOALS["cheap_over_best_member"],
            "cheap_subset_accuracy",
            "cheap_subset_best_member_accuracy",
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="configuration overrides of both runs (key.sub=value)")
    parser.add_argument("--seeds", type=int, default=2, help="how many seeds (0, 1, ... from --first-seed)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (to add seeds to a run)")
    # Twelve iterations (the orchestration benchmark trains 20): two runs a seed must fit about half an hour.
    parser.add_argument("--iterations", type=int, default=12, help="training iterations of each run")
    parser.add_argument("--subset-size", default="2", help="train.worker_subset of the subset-trained run")
    parser.add_argument("--unseen", nargs="+", default=UNSEEN, help="subsets evaluated as unseen (names,comma)")
    parser.add_argument("--cheap", default=CHEAP, help="the user's cheap-only subset (names, comma-separated)")
    parser.add_argument("--repeats", type=int, default=2, help="evaluation repeats per held-out question")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-subsets")
    parser.add_argument("--reuse", action="store_true", help=REUSE_HELP)
    args = parser.parse_args(argv)

    base = pool_config(args.overrides)
    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        started = time.perf_counter()
        run = one_seed(seed, args, base)
        run["wall_s"] = round(time.perf_counter() - started, 1)
        runs.append(run)
        print(f"seed {seed}: {json.dumps(run)}", file=sys.stderr, flush=True)
    flat = [{k: v for k, v in r.items() if not isinstance(v, dict)} for r in runs]
    mean = mean_over_seeds(flat)
    result = {
        "benchmark": "subsets",
        "simulated": True,
        "config": "configs/local.yaml + sim-open (4 simulated workers)",
        "worker_identity": base.conductor.worker_identity,
        "train_worker_subset": args.subset_size,
        "iterations": args.iterations,
        "unseen": args.unseen,
        "cheap": args.cheap,
        "repeats": args.repeats,
        "overrides": args.overrides,
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
