"""`conductor-rl train`: the GRPO loop that teaches the Conductor to orchestrate.

    conductor-rl train                                   # the embedded default (configs/local.yaml)
    conductor-rl train --config configs/paper.yaml train.output_dir=runs/paper
    conductor-rl train --resume train.output_dir=runs/paper   # continue from the last checkpoint
    ray job submit --working-dir . -- python -m jobs.train --config configs/paper.yaml

The run: the settings-derived half of the system (conductor_rl/system.py) and its
actors (jobs/training_system.py) are built once; then each iteration (jobs/iteration.py,
paper §3.1, app. A): 1 draw B questions → 2 generate G plans each → 3 parse → 4 execute
every plan on the worker pool (with recursive calls to the Conductor, conductor.max_depth)
→ 5 grade → 6 group-relative advantages → 7 learn (learner.epochs GRPO steps) → 8 sync weights to the
generators → 9 its record; `train` logs it (metrics, train.loggers, the dashboard, traces) and checkpoints.

Ctrl-C, SIGTERM (`ray job stop`) and a spent budget stop the run with a
checkpoint; an iteration interrupted before its learner step is abandoned and
redone on resume, so no rollout is counted twice.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

from conductor_rl.config import Config, ConfigError
from conductor_rl.config.redaction import recorded
from conductor_rl.data.overlap import ContaminationError
from conductor_rl.data.stream import QuestionStream
from conductor_rl.policy.warm_start import check_warm_start
from conductor_rl.rollout.rollouts import Rollout
from conductor_rl.run.checkpoint import CheckpointError, Checkpoints
from conductor_rl.run.infra_guard import InfraErrorRateExceeded
from conductor_rl.run.log import RunDirError
from conductor_rl.run.placement import ClusterTooSmallError
from conductor_rl.run.state import RunState
from conductor_rl.system import System
from conductor_rl.workers.forecast import Forecast, ForecastOverBudgetError, training_forecast
from conductor_rl.workers.preflight import PreflightFailed
from conductor_rl.workers.providers import MissingApiKeyError
from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books
from jobs.check import preflight
from jobs.common import add_config_arguments, config_from_args, log
from jobs.iteration import TrainingRun, learned_iterations
from jobs.run_control import (
    StopRun,
    StopSignal,
    close_run_trackers,
    from_trained_conductor,
    needs_final_checkpoint,
    open_run,
    open_run_trackers,
    progress_bar,
    run_summary,
)
from jobs.warm_start import warm_start

if TYPE_CHECKING:
    from actors.train_metrics import TrainMetrics
    from conductor_rl.data import Question
    from conductor_rl.run.log import RunLog
    from conductor_rl.run.traces import TraceWriter


# ---------------------------------------------------------------- the run


def train(config: Config, resume: bool = False, force: bool = False) -> dict:
    """Run (or resume) training; returns a summary. Everything that can be
    checked without the cluster is checked before any actor starts, the forecast
    of its cost against its budget among them (`force`: start all the same)."""
    from conductor_rl.run.log import RunLog
    from conductor_rl.run.traces import TraceWriter, remove_after

    config = from_trained_conductor(config)
    t = config.train
    check_warm_start(config)
    out, checkpoints, saved = open_run(config, resume)
    start = saved["iteration"] + 1 if saved else 0
    system = System(config)
    questions = training_questions(system)
    forecast = forecast_of(config, questions, out / JOURNAL_FILE, start, force)
    cursor = saved["cursor"] if saved else 0
    stream = QuestionStream(questions, seed=t.seed, cursor=cursor, balance_domains=t.balance_domains)
    if start >= t.iterations:
        log(f"nothing to do: the checkpoint is at iteration {start - 1} of {t.iterations}")
        return {"stopped": "finished", "iterations": start}
    trackers = open_run_trackers(config, out, start - 1 if resume else None)
    run_log = RunLog(out, trackers, resume_after=start - 1 if resume else None)
    traces = TraceWriter(out)
    if resume:
        remove_after(out, start - 1)
    if not (out / "config.json").exists() or not resume:  # a resume keeps the configuration the run began with
        (out / "config.json").write_text(json.dumps(recorded(config), indent=2))

    from actors.train_metrics import TrainMetrics
    from jobs.ray_cluster import start_ray
    from jobs.training_system import build_system

    ray = start_ray(config)
    model = str(checkpoints.latest() / "model") if saved else config.conductor.model
    state = RunState.of(config, saved)
    journal = out / JOURNAL_FILE
    journaled = journal.exists() or not saved  # a run from before the journal resumes from its checkpoint
    actors = build_system(config, model, state.version, config.optimizer_steps(), journal=journal)
    if saved:
        actors.learners.load(str(checkpoints.latest()))
        if not journaled:
            ray.get(actors.ledger.restore.remote(saved["ledger"]))
        spent = ray.get(actors.ledger.summary.remote())["total"]["cost_usd"]
        log(
            f"resumed from {checkpoints.latest()} (iteration {start - 1} done, cursor {stream.cursor}); "
            f"spent so far ${spent:.4f}, from {'the spend journal' if journaled else 'the checkpoint'}"
        )
    run = TrainingRun(system, actors, stream, state, StopSignal())
    dashboard = TrainMetrics()
    how, done, last_saved = "finished", start - 1, start - 1  # last finished and last checkpointed iteration
    failure = None  # the message of a stop that is a failure (infra errors)
    warmed = None  # what the warm start did (train.warm_start), for the summary
    try:
        if t.preflight:
            preflight(config, actors.workers)
        with (
            run.stop.installed(),
            progress_bar(t, start) as bar,
            closing(learned_iterations(run, start, t.iterations)) as learned,
        ):
            try:
                if t.warm_start.steps and not saved:
                    warmed = warm_start(run)
                for record, rollouts in learned:
                    iteration = record["iteration"]
                    ledger = ray.get(actors.ledger.summary.remote())
                    publish(record, rollouts, ledger, run_log, traces, dashboard)
                    bar.update(record)
                    done = iteration
                    try:
                        state.guard.check()
                    except InfraErrorRateExceeded as err:
                        log(f"stopping: {err}")
                        how, failure = "infra_errors", str(err)
                        break
                    if (iteration + 1) % t.checkpoint_every == 0 or iteration == t.iterations - 1:
                        save_checkpoint(checkpoints, run, iteration, ledger)
                        last_saved = iteration
            except StopRun as stop:
                how = str(stop)
        # Asynchronous training: the producer has stopped (closing() waited for it), so the ledger
        # below holds every call of an abandoned iteration.
        ledger = ray.get(actors.ledger.summary.remote())
        if needs_final_checkpoint(how, done, last_saved, ledger["total"]["cost_usd"]):
            save_checkpoint(checkpoints, run, done, ledger)
    except BaseException:
        trackers.close()  # a run that fails still ends its tracker runs; one that stops gets its report too
        raise
    finally:
        run_log.close()
        actors.shutdown()
    summary = run_summary(config, out, checkpoints, how, done, (forecast.usd.low, forecast.usd.high))
    close_run_trackers(trackers, summary)
    summary["forecast"], summary["spent_usd"] = forecast.as_dict(), ledger["total"]["cost_usd"]  # the journal's
    if warmed:
        summary["warm_start"] = warmed
    if failure:
        summary["error"] = failure
    return summary


def publish(
    record: dict, rollouts: list[Rollout], ledger: dict, run_log: RunLog, traces: TraceWriter, dashboard: TrainMetrics
) -> None:
    """An iteration's record, with what its worker calls cost, to the log, the traces and the dashboard."""
    iteration = record["iteration"]
    record["cost_usd"] = ledger["by_iteration"].get(str(iteration), {}).get("cost_usd", 0.0)
    record["cost_total_usd"] = ledger["total"]["cost_usd"]
    record["cost_unsettled_usd"] = ledger["unsettled"]["cost_usd"]  # included in the total
    record["wall_time"] = time.time()
    traces.write(
        iteration,
        [{**r.to_dict(), "iteration": iteration, "weights_version": record["weights_version"]} for r in rollouts],
    )
    run_log.log(record)
    dashboard.publish(record)


def training_questions(system: System) -> list[Question]:
    """The data set's questions whose prompt leaves room for a plan (`System.training_questions`)."""
    kept, left_out = system.training_questions()
    c = system.config
    if left_out:
        log(
            f"leaving out {left_out} of {len(kept) + left_out} questions whose prompt is longer than "
            f"{c.generator.max_model_len - c.conductor.max_new_tokens} tokens "
            f"(generator.max_model_len - conductor.max_new_tokens)"
        )
    return kept


def forecast_of(config: Config, questions: Sequence[Question], journal: Path, start: int, force: bool) -> Forecast:
    """The run's cost forecast, logged; a run that has spent nothing yet and whose low forecast is over
    its budget is refused (ForecastOverBudgetError) unless `force`."""
    books = read_books(journal)
    forecast = training_forecast(config, questions, books, start)
    log(forecast.describe(f"iterations {start}-{config.train.iterations - 1}"))
    if not force and books.spent_usd == 0:
        forecast.check_budget(config.train.budget_usd, "train.budget_usd")
    return forecast


def save_checkpoint(checkpoints: Checkpoints, run: TrainingRun, iteration: int, ledger: dict) -> Path:
    state = run.state.checkpoint(iteration, run.config, ledger)
    return checkpoints.save(iteration, state, lambda folder: run.actors.learners.save(str(folder)))


# ---------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides_positional", nargs="*", metavar="KEY=VALUE", help="configuration overrides")
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in train.output_dir from its last checkpoint"
    )
    parser.add_argument("--json", action="store_true", help="print the run's summary as JSON on the last line")
    parser.add_argument(
        "--force", action="store_true", help="start even when the cost forecast is over train.budget_usd"
    )
    add_config_arguments(parser)
    parser.add_argument(
        "--dashboard",
        dest="overrides",
        action="append_const",
        const="cluster.dashboard=true",
        help="start the local Ray cluster with its dashboard and print its address",
    )
    parser.add_argument(
        "--no-check",
        dest="overrides",
        action="append_const",
        const="train.preflight=false",
        help="skip the preflight request to every worker (train.preflight)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="conductor-rl train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_intermixed_args(argv))


def run(args: argparse.Namespace) -> int:
    config, rest = config_from_args(args, positional="overrides_positional")
    if rest:
        raise SystemExit(f"error: not configuration overrides: {rest} (use key.sub=value)")
    try:
        summary = train(config, resume=args.resume, force=args.force)
    except (
        ForecastOverBudgetError,
        CheckpointError,
        ConfigError,
        RunDirError,
        MissingApiKeyError,
        ContaminationError,
        PreflightFailed,
        ClusterTooSmallError,
    ) as err:
        raise SystemExit(f"error: {err}") from None
    except Exception as err:
        import ray.exceptions

        if not isinstance(err, (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError)):
            raise
        # A generator or learner is gone (Ray restarts only worker and grader actors): the run cannot go on.
        raise SystemExit(
            f"error: {type(err).__name__}: {str(err)[:500]}\nA generator or learner actor died "
            f"(out of memory?). The last checkpoint in {config.train.output_dir}/checkpoints is intact: "
            f"continue with --resume."
        ) from None
    if args.json:
        print(json.dumps(summary))
    else:
        print("\n".join(f"{k}: {v}" for k, v in summary.items() if not isinstance(v, dict) and k != "error"))
    if summary.get("error"):
        print(f"error: {summary['error']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
