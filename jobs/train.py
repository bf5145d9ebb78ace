"""`conductor-rl train`: the GRPO loop that teaches the Conductor to orchestrate.

    conductor-rl train                                   # the embedded default (configs/local.yaml)
    conductor-rl train --config configs/paper.yaml train.output_dir=runs/paper
    conductor-rl train --resume train.output_dir=runs/paper   # continue from the last checkpoint
    ray job submit --working-dir . -- python -m jobs.train --config configs/paper.yaml

One iteration (paper §3.1, app. A), as `train_iteration` numbers its steps:
  1 draw B questions → 2 generate G plans each → 3 parse → 4 execute every plan on
  the worker pool (with recursive calls to the Conductor, conductor.max_depth) → 5 grade → 6 group-relative advantages → 7 learn (one GRPO
  step) → 8 sync weights to the generators → 9 log; `train` then logs (metrics,
  TensorBoard, Ray dashboard, Parquet traces) and checkpoints.

Ctrl-C, SIGTERM (`ray job stop`) and a spent budget stop the run with a
checkpoint; an iteration interrupted before its learner step is abandoned and
redone on resume, so no rollout is counted twice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from contextlib import closing
from typing import Any, Iterator, Sequence

from conductor_rl.config import Config, ConfigError
from conductor_rl.data import Question, load_available, load_dataset
from conductor_rl.data.overlap import ContaminationError, check_disjoint
from conductor_rl.data.stream import QuestionStream
from conductor_rl.plan.prompts import ConductorPrompt, fitting_questions
from conductor_rl.plan.roster import Roster, draw_roster
from conductor_rl.policy.batch import rollout_batch
from conductor_rl.policy.generate import sample_seed
from conductor_rl.policy.staleness import behaviour_source, staleness_histogram, within_bound
from conductor_rl.rollout.recursion import Recursion, forced_groups, generator_writer
from conductor_rl.rollout.rollouts import (Rollout, apply_grade, execute_rollouts, grade_request, needs_execution,
                                           parse_rollout, ready_to_grade, unfinished)
from conductor_rl.rollout.workflow import StepLimits
from conductor_rl.run.checkpoint import CheckpointError, Checkpoints
from conductor_rl.run.placement import ClusterTooSmallError
from conductor_rl.run.infra_guard import InfraCounts, InfraErrorGuard, InfraErrorRateExceeded
from conductor_rl.run.log import RunDirError
from conductor_rl.run.metrics import best_workers, iteration_metrics
from conductor_rl.workers.preflight import PreflightFailed
from conductor_rl.workers.providers import MissingApiKeyError
from jobs.check import preflight
from jobs.common import add_config_arguments, config_from_args, log
from jobs.pipeline import RolloutPipeline
from jobs.run_control import (Phases, PhaseObserver, StopRun, StopSignal, check_budget, needs_final_checkpoint,
                              open_run, progress_bar, run_summary)


# ---------------------------------------------------------------- one iteration

@dataclass
class Loop:
    """What the iteration needs, built once by `train`."""

    config: Config
    system: Any                      # jobs.training_system.TrainingSystem
    stream: QuestionStream
    prompts: ConductorPrompt
    stop: StopSignal
    version: int = 0                 # weights version the generators hold
    best: dict[str, str] = field(default_factory=dict)
    guard: InfraErrorGuard = field(default_factory=lambda: InfraErrorGuard(None))
    observer: PhaseObserver | None = None   # hears each phase as it ends (benchmarks/iteration.py)
    recursion: Recursion | None = None      # how plans call the Conductor again (conductor.max_depth >= 1)
    cursor: int = 0                         # the stream's position after the last learned iteration's draw
    drawn: dict[int, list[str]] = field(default_factory=dict)     # question ids of iterations not yet learned
    in_flight: dict[int, list[str]] = field(default_factory=dict)  # what a resumed checkpoint had drawn ahead


@dataclass
class Collected:
    """An iteration's rollouts on their way to the learner: sampled (steps 1-3), then run and graded (4-5)."""

    iteration: int
    prompt_ids: list[list[int]]
    rollouts: list[Rollout]
    phases: Phases
    counts: InfraCounts     # its worker steps (step 4), for the infrastructure-error guard
    cursor: int             # the question stream's position after its draw
    started: float          # time.perf_counter() when its collection began


def train_iteration(loop: Loop, iteration: int) -> tuple[dict, list[Rollout]]:
    """One synchronous GRPO iteration; returns its record and its rollouts. A stop before the
    learner step abandons it (StopRun); a resume draws its questions again."""
    return learn_from(loop, run_plans(loop, sample_plans(loop, iteration)))


def sample_plans(loop: Loop, iteration: int) -> Collected:
    """Steps 1-3 of an iteration, with the weights the generators hold now."""
    c, system = loop.config, loop.system
    phases = Phases(iteration, loop.observer)
    started = time.perf_counter()

    # 1. draw B questions, and the workers each one's prompt lists (all, or a drawn subset)
    questions = loop.stream.take(c.train.questions_per_iteration)
    note_draw(loop, iteration, questions)
    rosters = [question_roster(c, iteration, q) for q in questions]
    sizes = [None if r is None else len(r) for r in rosters]
    prompt_ids = [loop.prompts.ids(q.question, k) for q, k in zip(questions, sizes)]

    # 2. generate G plans per question with the current policy
    with phases.timed("generate"):
        groups = system.generators.sample(
            prompt_ids, c.train.rollouts_per_question,
            c.conductor.temperature, c.conductor.max_new_tokens, c.conductor.top_p,
            seed=sample_seed(c.train.seed, iteration), shape=[loop.prompts.shape_for(k) for k in sizes])

    # 3. parse each completion into a plan (unparsable, or naming an unlisted worker: reward 0);
    #    under recursive training, the forced groups' plans will end with a call to the Conductor
    forced = recursion_forced(c, len(questions), iteration)
    rollouts = [
        parse_rollout(Rollout(q.to_task(), c.conductor.response_prefix + s.text, group=g, sample=i,
                              completion_ids=s.token_ids, logprobs=s.logprobs, roster=roster,
                              forced=g in forced, discount=c.train.recursion.discount if g in forced else 0.0,
                              weights_version=s.weights_version),
                      len(c.workers), c.conductor.max_steps)
        for g, (q, roster, samples) in enumerate(zip(questions, rosters, groups)) for i, s in enumerate(samples)
    ]
    return Collected(iteration, prompt_ids, rollouts, phases, InfraCounts(), loop.stream.cursor, started)


def run_plans(loop: Loop, collected: Collected) -> Collected:
    """Steps 4-5: execute every plan on the worker pool, grade the final answers."""
    import ray

    ray.get(loop.system.ledger.start_iteration.remote(collected.iteration))   # its worker calls are charged to it
    execute_and_grade(loop, collected.rollouts, collected.iteration, collected.phases, collected.counts)
    return collected


def learn_from(loop: Loop, collected: Collected) -> tuple[dict, list[Rollout]]:
    """Steps 6-9 of an iteration: the learner's step on what `run_plans` gathered."""
    c, system = loop.config, loop.system
    phases, rollouts = collected.phases, collected.rollouts

    # 6. group-relative advantages over the rollouts young enough to learn from (all, when synchronous)
    fresh, too_old = within_bound(rollouts, loop.version, c.train.max_staleness)
    staleness = staleness_histogram(fresh, loop.version)
    corrected = behaviour_source(c.learner.behaviour_logprobs, c.generator.backend, c.conductor.constrain_format,
                                 c.learner.zero_stage) != "none"   # stale rows get behaviour weights
    batch, informative = rollout_batch(
        fresh, collected.prompt_ids, drop_uninformative=c.train.drop_uninformative_groups,
        format_tokenizer=loop.prompts.tokenizer if loop.prompts.shape is not None else None,
        response_prefix=c.conductor.response_prefix, subtask_text_in_loss=c.train.subtask_text_in_loss,
        learner_version=loop.version if corrected else None)

    # 7. learn: one GRPO step  8. sync: the new weights to every generator engine
    learned: dict[str, float] = {}
    if batch is not None:
        with phases.timed("learn"):
            stats = system.learners.train_step(batch)
        with phases.timed("sync"):
            loop.version += 1
            system.weight_sync.push(loop.version)
        learned = {"loss": stats.loss, "grad_norm": stats.grad_norm, "clip_fraction": stats.clip_fraction,
                   "ratio_mean": stats.ratio_mean, "kl": stats.kl, "lr": stats.lr, "learner_tokens": stats.tokens,
                   "behaviour_weight_mean": stats.behaviour_weight_mean}
    loop.cursor = collected.cursor
    loop.drawn.pop(collected.iteration, None)

    # 9. log: the iteration's record
    parsed = [r for r in rollouts if r.plan is not None]
    worker_calls = loop.guard.end_iteration(len(parsed), sum(r.reward is None for r in parsed), collected.counts)
    ages = [int(k) for k, n in staleness.items() for _ in range(n)]
    record = {"iteration": collected.iteration,
              **iteration_metrics(rollouts, [w.name for w in c.workers], loop.best),
              "worker_calls": worker_calls,
              "groups": len(collected.prompt_ids), "informative_groups": informative, **learned,
              "weights_version": loop.version,
              "staleness": staleness, "staleness_max": max(ages, default=0),
              "staleness_mean": sum(ages) / len(ages) if ages else 0.0, "stale_dropped": len(too_old),
              **{f"time_{k}_s": v for k, v in phases.seconds.items()},
              "time_iteration_s": time.perf_counter() - collected.started}
    return record, rollouts


def note_draw(loop: Loop, iteration: int, questions: Sequence[Question]) -> None:
    """Remember what the iteration drew (a checkpoint lists what was drawn ahead of the learner);
    a resumed run must draw what its checkpoint says was in flight."""
    ids = [q.id for q in questions]
    loop.drawn[iteration] = ids
    expected = loop.in_flight.pop(iteration, None)
    if expected is not None and expected != ids:
        log(f"warning: iteration {iteration} drew other questions than the checkpoint recorded in flight "
            f"({len(set(ids) - set(expected))} differ): did data.questions or data.limit change since?")


def learned_iterations(loop: Loop, start: int, end: int) -> Iterator[tuple[dict, list[Rollout]]]:
    """Each iteration's record and rollouts once the learner has stepped on it, in order: one after
    another (train.max_staleness 0), or with the next iterations collected meanwhile (jobs/pipeline.py).
    Raises StopRun when a stop is asked for or the budget is spent."""
    k = loop.config.train.max_staleness
    if k == 0:
        for iteration in range(start, end):
            loop.stop.check()
            yield train_iteration(loop, iteration)
        return
    with RolloutPipeline(lambda j: sample_plans(loop, j), lambda c: run_plans(loop, c), start, end, k,
                         halt=lambda: loop.stop.request("pipeline closed")) as pipeline:
        previous = time.perf_counter()
        for iteration in range(start, end):
            loop.stop.check()
            collected, waited = pipeline.next(iteration)
            record, rollouts = learn_from(loop, collected)
            pipeline.learned(iteration)
            # The pace the user sees is the time between learner steps; the phases overlap within it.
            now = time.perf_counter()
            work = sum(v for key, v in collected.phases.seconds.items())
            record.update(time_iteration_s=now - previous, time_wait_learner_s=waited,
                          time_wait_generate_s=pipeline.bound_wait_s.get(iteration, 0.0),
                          overlap=max(0.0, 1.0 - (now - previous) / work) if work > 0 else 0.0)
            previous = now
            yield record, rollouts


def question_roster(config: Config, iteration: int, question: Question) -> Roster | None:
    """The workers a question's prompt lists this iteration: None (every worker) unless
    `train.worker_subset` asks for subsets; the same draw on resume."""
    size = config.train.worker_subset
    if size is None:
        return None
    return draw_roster(len(config.workers), size, config.train.seed, f"{iteration}/{question.id}")


def recursion_forced(config: Config, n_groups: int, iteration: int) -> set[int]:
    """The groups forced to recurse this iteration: none unless the Conductor may recurse."""
    if config.conductor.max_depth < 1:
        return set()
    return forced_groups(n_groups, config.train.recursion.forced_share, config.train.seed, iteration)


def training_recursion(config: Config, generators: Any, prompts: ConductorPrompt) -> Recursion | None:
    """Recursive calls sample from the training generators, as the root plans do (None: max_depth 0)."""
    c = config.conductor
    if c.max_depth < 1:
        return None
    writer = generator_writer(generators, c.temperature, c.max_new_tokens, c.top_p)
    return Recursion(writer, prompts, c.max_depth, c.max_steps, seed=config.train.seed)


def execute_and_grade(loop: Loop, rollouts: list[Rollout], iteration: int, phases: Phases,
                      counts: InfraCounts) -> None:
    """Run the parsed plans and grade their answers, in rounds: a round retries
    what an infrastructure error left without a reward, up to `train.rollout_attempts`;
    what is still without one is dropped. The budget is checked after each round;
    `counts` counts every attempt's worker steps."""
    from actors.grader import GradingStream

    c, system = loop.config, loop.system
    limits = [StepLimits.for_worker(w, c) for w in c.workers]
    for _ in range(c.train.rollout_attempts):
        todo = unfinished(rollouts)
        if not todo:
            break
        loop.stop.check()
        to_run = needs_execution(todo)
        grading = GradingStream(system.graders)   # each rollout is graded as soon as its plan has run

        def grade_when_done(rollout: Rollout) -> None:
            if ready_to_grade([rollout]):
                grading.submit(id(rollout), grade_request(rollout))
        try:
            with phases.timed("execute", to_run):
                asyncio.run(execute_rollouts(to_run, system.workers, limits, key=f"{c.train.seed}/{iteration}",
                                             recursion=loop.recursion, on_done=grade_when_done))
            counts.observe(r.workflow for r in to_run)   # before a re-run replaces a failed attempt
            check_budget(system)
        except BaseException:
            grading.finish()   # the iteration is abandoned: the grading in flight ends first
            raise
        to_grade = ready_to_grade(todo)
        with phases.timed("grade", to_grade):   # what is left once the last plan has run
            results = grading.finish()
            again = [r for r in to_grade if id(r) not in results]   # a grader error of an earlier round
            results.update(zip(map(id, again), system.graders.grade_many([grade_request(r) for r in again])))
        for rollout in to_grade:
            apply_grade(rollout, results[id(rollout)])
    loop.stop.check()


# ---------------------------------------------------------------- the run

def train(config: Config, resume: bool = False) -> dict:
    """Run (or resume) training; returns a summary. Everything that can be
    checked without the cluster is checked before any actor starts."""
    from conductor_rl.run.log import RunLog
    from conductor_rl.run.traces import TraceWriter, remove_after

    t = config.train
    out, checkpoints, state = open_run(config, resume)
    start = state["iteration"] + 1 if state else 0
    prompts = ConductorPrompt.from_config(config)
    stream = QuestionStream(training_questions(config, prompts), seed=t.seed, cursor=state["cursor"] if state else 0,
                            balance_domains=t.balance_domains)
    run_log = RunLog(out, tensorboard=t.tensorboard, resume_after=start - 1 if resume else None)
    traces = TraceWriter(out)
    if resume:
        remove_after(out, start - 1)
    (out / "config.json").write_text(json.dumps(config.model_dump(mode="json"), indent=2))
    if start >= t.iterations:
        run_log.close()
        log(f"nothing to do: the checkpoint is at iteration {start - 1} of {t.iterations}")
        return {"stopped": "finished", "iterations": start}

    from actors.train_metrics import TrainMetrics
    from jobs.training_system import build_system, start_ray

    ray = start_ray(config)
    model = str(checkpoints.latest() / "model") if state else config.conductor.model
    version = state["weights_version"] if state else 0
    system = build_system(config, model, version, total_steps=t.iterations)
    if state:
        system.learners.load(str(checkpoints.latest()))
        ray.get(system.ledger.restore.remote(state["ledger"]))
        log(f"resumed from {checkpoints.latest()} (iteration {start - 1} done, cursor {stream.cursor})")
    dashboard = TrainMetrics()
    guard = InfraErrorGuard(t.max_infra_error_rate, t.infra_error_window, t.infra_error_min_steps)
    guard.restore(state.get("infra_guard") if state else None)
    loop = Loop(config, system, stream, prompts, StopSignal(), version, best_workers(config.workers), guard=guard,
                recursion=training_recursion(config, system.generators, prompts), cursor=stream.cursor,
                in_flight={int(j): ids for j, ids in (state or {}).get("in_flight", {}).items()})
    how, done, saved = "finished", start - 1, start - 1   # last finished and last checkpointed iteration
    failure = None   # the message of a stop that is a failure (infra errors)
    try:
        if t.preflight:
            preflight(config, system.workers)
        with loop.stop.installed(), progress_bar(t, start) as bar, \
                closing(learned_iterations(loop, start, t.iterations)) as learned:
            try:
                for record, rollouts in learned:
                    iteration = record["iteration"]
                    ledger = ray.get(system.ledger.summary.remote())
                    record["cost_usd"] = ledger["by_iteration"].get(str(iteration), {}).get("cost_usd", 0.0)
                    record["cost_total_usd"] = ledger["total"]["cost_usd"]
                    record["cost_unsettled_usd"] = ledger["unsettled"]["cost_usd"]   # included in the total
                    record["wall_time"] = time.time()
                    traces.write(iteration, [{**r.to_dict(), "iteration": iteration,
                                              "weights_version": record["weights_version"]} for r in rollouts])
                    run_log.log(record)
                    dashboard.publish(record)
                    bar.update(record)
                    done = iteration
                    try:
                        loop.guard.check()
                    except InfraErrorRateExceeded as err:
                        log(f"stopping: {err}")
                        how, failure = "infra_errors", str(err)
                        break
                    if (iteration + 1) % t.checkpoint_every == 0 or iteration == t.iterations - 1:
                        save_checkpoint(checkpoints, loop, iteration, ledger)
                        saved = iteration
            except StopRun as stop:
                how = str(stop)
        # Asynchronous training: the producer has stopped (closing() waited for it), so the ledger
        # below holds every call of an abandoned iteration.
        ledger = ray.get(system.ledger.summary.remote())
        if needs_final_checkpoint(how, done, saved, ledger["total"]["cost_usd"]):
            save_checkpoint(checkpoints, loop, done, ledger)
    finally:
        run_log.close()
        system.shutdown()
    summary = run_summary(config, out, checkpoints, how, done)
    if failure:
        summary["error"] = failure
    return summary


def training_questions(config: Config, prompts: ConductorPrompt) -> list:
    """The data set's questions whose prompt leaves room for a plan in the generator's context."""
    questions = load_dataset(config.data.questions, limit=config.data.limit)
    kept, left_out = fitting_questions(questions, prompts, config.generator.max_model_len,
                                       config.conductor.max_new_tokens)
    if left_out:
        log(f"leaving out {left_out} of {len(questions)} questions whose prompt is longer than "
            f"{config.generator.max_model_len - config.conductor.max_new_tokens} tokens "
            f"(generator.max_model_len - conductor.max_new_tokens)")
    check_held_out(config, kept)
    return kept


def check_held_out(config: Config, questions: Sequence[Question]) -> None:
    """Refuse to train on a question of an evaluation benchmark (evaluate.benchmarks, all of each);
    a benchmark whose data is not on this machine cannot leak into training, and is skipped."""
    for spec, held_out in load_available(config.evaluate.benchmarks).items():
        check_disjoint(questions, held_out, training_name=f"data.questions={config.data.questions}",
                       evaluation_name=spec)


def save_checkpoint(checkpoints: Checkpoints, loop: Loop, iteration: int, ledger: dict) -> Path:
    """`in_flight`: the questions iterations after `iteration` had drawn (asynchronous training); a
    resume starts from `cursor` and draws them again."""
    state = {"iteration": iteration, "cursor": loop.cursor, "weights_version": loop.version,
             "ledger": ledger, "config": loop.config.model_dump(mode="json"), "saved_at": time.time(),
             "infra_guard": loop.guard.state(),
             "in_flight": {str(j): ids for j, ids in sorted(dict(loop.drawn).items()) if j > iteration}}
    return checkpoints.save(iteration, state, lambda folder: loop.system.learners.save(str(folder)))


# ---------------------------------------------------------------- command line

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides_positional", nargs="*", metavar="KEY=VALUE", help="configuration overrides")
    parser.add_argument("--resume", action="store_true", help="continue the run in train.output_dir from its last checkpoint")
    parser.add_argument("--json", action="store_true", help="print the run's summary as JSON on the last line")
    add_config_arguments(parser)
    parser.add_argument("--dashboard", dest="overrides", action="append_const", const="cluster.dashboard=true",
                        help="start the local Ray cluster with its dashboard and print its address")
    parser.add_argument("--no-check", dest="overrides", action="append_const", const="train.preflight=false",
                        help="skip the preflight request to every worker (train.preflight)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="conductor-rl train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_intermixed_args(argv))


def run(args: argparse.Namespace) -> int:
    config, rest = config_from_args(args, positional="overrides_positional")
    if rest:
        raise SystemExit(f"error: not configuration overrides: {rest} (use key.sub=value)")
    try:
        summary = train(config, resume=args.resume)
    except (CheckpointError, ConfigError, RunDirError, MissingApiKeyError, ContaminationError, PreflightFailed,
            ClusterTooSmallError) as err:
        raise SystemExit(f"error: {err}") from None
    except Exception as err:
        import ray.exceptions

        if not isinstance(err, (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError)):
            raise
        # A generator or learner is gone (Ray restarts only worker and grader actors): the run cannot go on.
        raise SystemExit(f"error: {type(err).__name__}: {str(err)[:500]}\nA generator or learner actor died "
                         f"(out of memory?). The last checkpoint in {config.train.output_dir}/checkpoints is intact: "
                         f"continue with --resume.") from None
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
