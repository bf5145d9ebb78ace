"""`conductor-rl evaluate`: methods x benchmarks with repeats, on the same pool and harness.

    conductor-rl evaluate                                        # evaluate.* of the configuration
    conductor-rl evaluate --method conductor:runs/local --method single:* --benchmark math500 --limit 20
    conductor-rl evaluate --config configs/paper.yaml evaluate.output_dir=runs/eval-paper --budget-usd 50
    conductor-rl evaluate --config configs/paper.yaml --workers qwen3-32b,gemma-3-27b-it   # open-weight only
    ray job submit --working-dir . -- python -m jobs.evaluate --config configs/paper.yaml

For each method and benchmark, questions go in batches: the method's plans (a
Conductor's, sampled by the vLLM generator pool; or a baseline's, built) run
on the worker pools (rate limits, cost ledger, response cache) and are graded
by the grader pool. Every finished batch is appended to records.jsonl, so a
stopped evaluation (Ctrl-C, `ray job stop`, a kill, `--budget-usd`) continues
where it stopped when run again with the same settings. At the end (and at a
stop) the table is written: results.json, results.md, records.parquet and
accuracy_vs_cost.png in evaluate.output_dir.

Before any actor starts: every method and benchmark name is checked, each
checkpoint is a model, no benchmark is empty, no benchmark question is in the
training data of a method (a Conductor's, or the router's pilot), and `optimal`
is asked for only of a pool of simulated workers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from conductor_rl.config import Config, ConfigError
from conductor_rl.config.redaction import recorded
from conductor_rl.evaluation import (
    MissingEvidenceError,
    RecordStore,
    ResumeMismatchError,
    conductor_lengths_of,
    random_lengths_label,
    strategy,
    summarise,
    write_results,
)
from conductor_rl.evaluation.cost_forecast import evaluation_forecast
from conductor_rl.evaluation.plans import moa_aggregator_of, oracle_single_label
from conductor_rl.evaluation.prepare import (
    Evaluation,
    EvaluationError,
    pin_checkpoints,
    prepare_evaluation,
    settings_of,
)
from conductor_rl.evaluation.report import PLOT_FILE, RESULTS_MD
from conductor_rl.run.placement import ClusterTooSmallError
from conductor_rl.run.trackers import check_trackers, track_evaluation
from conductor_rl.system import System
from conductor_rl.workers.forecast import ForecastOverBudgetError
from conductor_rl.workers.preflight import PreflightFailed
from conductor_rl.workers.providers import MissingApiKeyError
from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books
from jobs.check import preflight
from jobs.common import (
    add_config_arguments,
    add_workers_argument,
    check_sandbox_before_start,
    check_workers_before_start,
    config_from_args,
    log,
)
from jobs.evaluation_runner import Runner
from jobs.run_control import StopRun, StopSignal


def prepare(config: Config) -> tuple[Evaluation, dict[str, System]]:
    """Resolve and check everything that can be checked without a cluster (conductor_rl/evaluation/prepare.py),
    and each Conductor method's system, its tokenizer loaded now: a model that is not here fails before any
    actor starts."""
    ev = prepare_evaluation(config)
    conductors = {name: conductor_system(name, c.config) for name, c in ev.conductors.items()}
    check_workers_before_start(config)
    check_sandbox_before_start(config, list(ev.benchmarks))
    check_trackers(config.evaluate.loggers, config.tracking, "evaluate.loggers")
    return ev, conductors


def conductor_system(name: str, config: Config) -> System:
    """The system a Conductor method plans with (`config`: its checkpoint's settings)."""
    system = System(config)
    try:
        _ = system.prompts  # loads the tokenizer
    except (OSError, ValueError) as err:
        raise EvaluationError(
            f"{name}: cannot load the Conductor {config.conductor.model!r} ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:300]}); name a model folder or an offline model"
        ) from None
    return system


def run_evaluation(
    ev: Evaluation, out: Path, conductors: dict[str, System] | None = None
) -> tuple[str, float, RecordStore]:
    """Run every cell of `ev` not yet in `out`'s records, on the cluster; returns how it
    ended ("finished", "budget" or a signal's name), the money the workers spent in this invocation
    (the journal's total, `spent_total_usd` in the summary, counts every invocation on `out`) and the
    records."""
    from jobs.ray_cluster import start_ray

    store = RecordStore(out)
    store.check_settings(settings_of(ev))
    start_ray(ev.config)
    stop = StopSignal()
    runner = None
    try:
        with stop.installed():
            runner = Runner(ev, store, stop, conductors or {})
            if ev.config.evaluate.preflight:
                preflight(ev.config, runner.workers.pools)
            try:
                runner.run()
                how = "finished"
            except StopRun as why:
                how = str(why)
        return how, runner.spent() - runner.spent_before, store
    finally:
        if runner is not None:
            runner.workers.shutdown()
            runner.graders.close()


def evaluate(config: Config, force: bool = False) -> dict:
    """Run (or continue) the evaluation; returns the summary written to results.json. An evaluation
    that has spent nothing yet and whose low cost forecast is over its budget is refused (`force`:
    start all the same)."""
    ev, conductors = prepare(config)
    out = Path(config.evaluate.output_dir)
    store = RecordStore(out)
    forecast = evaluation_forecast(ev, store.done() if store.path.exists() else ())
    log(forecast.describe("this evaluation's samples still to run"))
    if not force and read_books(out / JOURNAL_FILE).spent_usd == 0:
        forecast.check_budget(config.evaluate.budget_usd, "--budget-usd (evaluate.budget_usd)")
    pin_checkpoints(ev, out)
    started = time.perf_counter()
    how, spent, store = run_evaluation(ev, out, conductors)
    if how != "finished":
        log(
            f"stopped ({how}): what is done is kept in {out}/records.jsonl; run the same command again to "
            + ("continue with a larger --budget-usd" if how == "budget" else "continue")
        )
    names = {m.name for m in ev.methods}
    records = [r for r in store.records() if r.method in names and r.benchmark in ev.benchmarks]
    cells = summarise(records)
    info = {
        "stopped": how,
        "spent_usd": spent,
        "spent_total_usd": read_books(out / JOURNAL_FILE).spent_usd,
        "forecast": forecast.as_dict(),
        "wall_s": time.perf_counter() - started,
        "methods": [m.name for m in ev.methods],
        "benchmarks": list(ev.benchmarks),
        "repeats": config.evaluate.repeats,
        "limit": config.evaluate.limit,
        # The budget setting (the paper's Table 1 vs Table 7) and what each worker ran with.
        "budgets": config.workflow.budgets or "custom",
        "workers": [
            {
                "name": w.name,
                "provider": w.provider,
                "model": w.model,
                "max_tokens": w.max_tokens,
                "reasoning": w.reasoning,
            }
            for w in config.workers
        ],
        "simulated_workers": [w.name for w in config.workers if w.provider == "sim"],
        "random_lengths": random_lengths_label(conductor_lengths_of(records), config.conductor.max_steps),
        "cost_weight": config.evaluate.cost_weight,
    }
    if any(m.kind == "oracle-single" for m in ev.methods):
        info["oracle_single"] = oracle_single_label(config)
    if any(m.kind == "moa" for m in ev.methods):
        info["moa_aggregator"] = moa_aggregator_of(config)
    paths = write_results(out, cells, strategy(records), records, info)
    dump, rows = recorded(config), [c.to_dict() for c in cells]
    files = [paths[RESULTS_MD], paths[PLOT_FILE]]
    track_evaluation(config.evaluate.loggers, out, config.tracking, dump, rows, files)
    return {"output_dir": str(out), **info, "cells": rows}


# ---------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides_positional", nargs="*", metavar="KEY=VALUE", help="configuration overrides")
    parser.add_argument(
        "--method",
        action="append",
        default=None,
        metavar="NAME",
        help="a method (repeatable; replaces evaluate.methods): conductor:<checkpoint|run folder>, "
        "conductor:untrained, single:<worker|*>, reflect:<worker|*>[:rounds], moa, router, random, "
        "oracle, oracle-single, optimal (upper bounds: the last three; optimal needs simulated workers)",
    )
    parser.add_argument(
        "--benchmark",
        action="append",
        default=None,
        metavar="SPEC",
        help="a benchmark's dataset spec (repeatable; replaces evaluate.benchmarks)",
    )
    parser.add_argument("--limit", type=int, default=None, help="questions per benchmark (evaluate.limit)")
    parser.add_argument("--repeats", type=int, default=None, help="samples per question (evaluate.repeats)")
    parser.add_argument(
        "--budget-usd", type=float, default=None, help="stop cleanly at this spend (evaluate.budget_usd)"
    )
    parser.add_argument("--output", default=None, help="output folder (evaluate.output_dir)")
    parser.add_argument("--force", action="store_true", help="start even when the cost forecast is over --budget-usd")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on the last line")
    add_workers_argument(parser)
    add_config_arguments(parser)
    parser.add_argument(
        "--no-check",
        dest="overrides",
        action="append_const",
        const="evaluate.preflight=false",
        help="skip the preflight request to every worker (evaluate.preflight)",
    )


def config_with_options(args: argparse.Namespace) -> Config:
    config, rest = config_from_args(args, positional="overrides_positional")
    if rest:
        raise SystemExit(f"error: not configuration overrides: {rest} (use key.sub=value)")
    update: dict[str, object] = {}
    for option, key in (
        ("method", "methods"),
        ("benchmark", "benchmarks"),
        ("limit", "limit"),
        ("repeats", "repeats"),
        ("budget_usd", "budget_usd"),
        ("output", "output_dir"),
    ):
        value = getattr(args, option)
        if value is not None:
            update[key] = value
    try:
        evaluate_section = config.evaluate.model_validate({**config.evaluate.model_dump(), **update})
    except Exception as err:  # pydantic's error names the field
        raise SystemExit(f"error: evaluate: {' '.join(str(err).split())}") from None
    return config.model_copy(update={"evaluate": evaluate_section})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="conductor-rl evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_intermixed_args(argv))


def run(args: argparse.Namespace) -> int:
    config = config_with_options(args)
    try:
        summary = evaluate(config, force=args.force)
    except (
        ForecastOverBudgetError,
        EvaluationError,
        ConfigError,
        ResumeMismatchError,
        MissingApiKeyError,
        MissingEvidenceError,
        PreflightFailed,
        ClusterTooSmallError,
    ) as err:
        raise SystemExit(f"error: {err}") from None
    out = Path(summary["output_dir"])
    if args.json:
        print(json.dumps(summary))
    else:
        print((out / "results.md").read_text())
        print(f"written: {out}/results.json, results.md, records.parquet, accuracy_vs_cost.png")
    return 0 if summary["stopped"] == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
