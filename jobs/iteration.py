"""One GRPO training iteration (paper §3.1, app. A), as `train_iteration` numbers its steps:
  (0 once, before a new run's first iteration: jobs/warm_start.py, supervised steps on demonstration plans)
  1 draw B questions → 2 generate G plans each → 3 parse → 4 execute every plan on the
  worker pool (with recursive calls to the Conductor, conductor.max_depth) → 5 grade →
  6 group-relative advantages → 7 learn (one GRPO step) → 8 sync weights to the
  generators → 9 the iteration's record.

Asynchronous training (train.max_staleness >= 1) runs the same steps in three parts
(`sample_plans`: 1-3, `run_plans`: 4-5, `learn_from`: 6-9) on jobs/pipeline.py's threads
(`learned_iterations`). A stop before the learner's step abandons the iteration (StopRun)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from conductor_rl.config import Config
from conductor_rl.data.stream import QuestionStream
from conductor_rl.policy.batch import rollout_batch
from conductor_rl.policy.staleness import staleness_histogram, within_bound
from conductor_rl.rollout.recursion import Recursion
from conductor_rl.rollout.rollouts import (
    Rollout,
    apply_grade,
    execute_rollouts,
    grade_request,
    needs_execution,
    parse_rollout,
    ready_to_grade,
    unfinished,
)
from conductor_rl.rollout.workflow import Task
from conductor_rl.run.infra_guard import InfraCounts
from conductor_rl.run.metrics import iteration_metrics
from conductor_rl.run.state import RunState
from conductor_rl.system import System
from jobs.common import log
from jobs.pipeline import RolloutPipeline
from jobs.run_control import PhaseObserver, Phases, StopSignal, check_budget

if TYPE_CHECKING:
    from jobs.training_system import TrainingSystem


@dataclass
class TrainingRun:
    """What every iteration works with: the system's two halves, the questions, the run's state
    (weights version, stream position, what is drawn ahead) and its stop signal."""

    system: System  # settings-derived: the prompt, step limits, sampling, recursion
    actors: TrainingSystem  # generators, learners, weight sync, worker pools and ledger, graders
    stream: QuestionStream
    state: RunState
    stop: StopSignal
    observer: PhaseObserver | None = None  # hears each phase as it ends (benchmarks/iteration.py)

    @property
    def config(self) -> Config:
        return self.system.config

    @cached_property
    def recursion(self) -> Recursion | None:
        """Recursive calls sample from the training generators, as the root plans do (None: max_depth 0)."""
        return self.system.engine_recursion(self.actors.generators, "train", self.system.generation("train").base_seed)


@dataclass
class Collected:
    """An iteration's rollouts on their way to the learner: sampled (steps 1-3), then run and graded (4-5)."""

    iteration: int
    prompt_ids: list[list[int]]
    rollouts: list[Rollout]
    phases: Phases
    counts: InfraCounts  # its worker steps (step 4), for the infrastructure-error guard
    cursor: int  # the question stream's position after its draw
    started: float  # time.perf_counter() when its collection began


def train_iteration(run: TrainingRun, iteration: int) -> tuple[dict, list[Rollout]]:
    """One synchronous GRPO iteration; returns its record and its rollouts. A stop before the
    learner step abandons it (StopRun); a resume draws its questions again."""
    return learn_from(run, run_plans(run, sample_plans(run, iteration)))


def sample_plans(run: TrainingRun, iteration: int) -> Collected:
    """Steps 1-3 of an iteration, with the weights the generators hold now."""
    c, system = run.config, run.system
    phases = Phases(iteration, run.observer)
    started = time.perf_counter()

    # 1. draw B questions, and the workers each one's prompt lists (all, or a drawn subset)
    questions = run.stream.take(c.train.questions_per_iteration)
    warning = run.state.note_draw(iteration, [q.id for q in questions])
    if warning:
        log(warning)
    rosters = [system.roster(iteration, q) for q in questions]
    prompt_ids = [system.prompts.question_ids(q, r) for q, r in zip(questions, rosters)]

    # 2. generate G plans per question with the current policy
    how = system.generation("train")
    with phases.timed("generate"):
        groups = run.actors.generators.sample(
            prompt_ids,
            c.train.rollouts_per_question,
            how.temperature,
            how.max_new_tokens,
            how.top_p,
            seed=how.seed_for(iteration),
            shape=[system.prompts.shape_for(r) for r in rosters],
        )

    # 3. parse each completion into a plan (unparsable, or naming an unlisted worker: reward 0);
    #    under recursive training, the forced groups' plans will end with a call to the Conductor
    forced = system.forced_groups(len(questions), iteration)
    rollouts = [
        parse_rollout(
            Rollout(
                Task.of(q),
                c.conductor.response_prefix + s.text,
                group=g,
                sample=i,
                completion_ids=s.token_ids,
                logprobs=s.logprobs,
                roster=roster,
                forced=g in forced,
                weights_version=s.weights_version,
            ),
            roster,
            c.conductor.max_steps,
        )
        for g, (q, roster, samples) in enumerate(zip(questions, rosters, groups))
        for i, s in enumerate(samples)
    ]
    return Collected(iteration, prompt_ids, rollouts, phases, InfraCounts(), run.stream.cursor, started)


def run_plans(run: TrainingRun, collected: Collected) -> Collected:
    """Steps 4-5: execute every plan on the worker pool, grade the final answers."""
    import ray

    ray.get(run.actors.ledger.start_iteration.remote(collected.iteration))  # its worker calls are charged to it
    execute_and_grade(run, collected.rollouts, collected.iteration, collected.phases, collected.counts)
    return collected


def learn_from(run: TrainingRun, collected: Collected) -> tuple[dict, list[Rollout]]:
    """Steps 6-9 of an iteration: the learner's step on what `run_plans` gathered."""
    c, state = run.config, run.state
    phases, rollouts = collected.phases, collected.rollouts

    # 6. group-relative advantages over the rollouts young enough to learn from (all, when synchronous)
    fresh, too_old = within_bound(rollouts, state.version, c.train.max_staleness)
    staleness = staleness_histogram(fresh, state.version)
    prompts = run.system.prompts
    batch, informative = rollout_batch(
        fresh,
        collected.prompt_ids,
        drop_uninformative=c.train.drop_uninformative_groups,
        format_tokenizer=prompts.tokenizer if prompts.shape is not None else None,
        response_prefix=c.conductor.response_prefix,
        subtask_text_in_loss=c.train.subtask_text_in_loss,
        choice_weighting=c.train.choice_weighting,
        learner_version=state.version if run.system.corrects_stale_rows else None,
        choice_centering=c.train.choice_centering,
        worker_logprob=c.train.worker_logprob,
        worker_tokens=run.system.roster_tokens,
    )  # stale rows get behaviour weights

    # 7. learn: GRPO's step(s) on the batch  8. sync: the new weights to every generator engine
    learned: dict[str, float] = {}
    if batch is not None:
        with phases.timed("learn"):
            stats = run.actors.learners.train_step(batch, c.learner.epochs)
        with phases.timed("sync"):
            state.version += 1
            run.actors.weight_sync.push(state.version)
        learned = {
            "loss": stats.loss,
            "grad_norm": stats.grad_norm,
            "clip_fraction": stats.clip_fraction,
            "ratio_mean": stats.ratio_mean,
            "kl": stats.kl,
            "lr": stats.lr,
            "learner_tokens": stats.tokens,
            "behaviour_weight_mean": stats.behaviour_weight_mean,
        }
    state.learned(collected.iteration, collected.cursor)

    # 9. the iteration's record
    parsed = [r for r in rollouts if r.plan is not None]
    worker_calls = state.guard.end_iteration(len(parsed), sum(r.reward is None for r in parsed), collected.counts)
    ages = [int(k) for k, n in staleness.items() for _ in range(n)]
    record = {
        "iteration": collected.iteration,
        **iteration_metrics(rollouts, [w.name for w in c.workers], run.system.best_workers, run.system.sim_specs),
        "worker_calls": worker_calls,
        "groups": len(collected.prompt_ids),
        "informative_groups": informative,
        **learned,
        "weights_version": state.version,
        "staleness": staleness,
        "staleness_max": max(ages, default=0),
        "staleness_mean": sum(ages) / len(ages) if ages else 0.0,
        "stale_dropped": len(too_old),
        **{f"time_{k}_s": v for k, v in phases.seconds.items()},
        "time_iteration_s": time.perf_counter() - collected.started,
    }
    return record, rollouts


def execute_and_grade(
    run: TrainingRun, rollouts: list[Rollout], iteration: int, phases: Phases, counts: InfraCounts
) -> None:
    """Run the parsed plans and grade their answers, in rounds: a round retries
    what an infrastructure error left without a reward, up to `train.rollout_attempts`;
    what is still without one is dropped. The budget is checked after each round;
    `counts` counts every attempt's worker steps."""
    from actors.grader import GradingStream

    c, actors = run.config, run.actors
    for _ in range(c.train.rollout_attempts):
        todo = unfinished(rollouts)
        if not todo:
            break
        run.stop.check()
        to_run = needs_execution(todo)
        grading = GradingStream(actors.graders)  # each rollout is graded as soon as its plan has run

        def grade_when_done(rollout: Rollout, grading: GradingStream = grading) -> None:
            if ready_to_grade([rollout]):
                grading.submit(id(rollout), grade_request(rollout))

        try:
            with phases.timed("execute", to_run):
                asyncio.run(
                    execute_rollouts(
                        to_run,
                        actors.workers,
                        run.system.step_limits,
                        key=f"{c.train.seed}/{iteration}",
                        recursion=run.recursion,
                        on_done=grade_when_done,
                    )
                )
            counts.observe(r.workflow for r in to_run)  # before a re-run replaces a failed attempt
            check_budget(actors)
        except BaseException:
            grading.finish()  # the iteration is abandoned: the grading in flight ends first
            raise
        to_grade = ready_to_grade(todo)
        with phases.timed("grade", to_grade):  # what is left once the last plan has run
            results = grading.finish()
            again = [r for r in to_grade if id(r) not in results]  # a grader error of an earlier round
            results.update(zip(map(id, again), actors.graders.grade_many([grade_request(r) for r in again])))
        for rollout in to_grade:
            apply_grade(rollout, results[id(rollout)])
    run.stop.check()


def learned_iterations(run: TrainingRun, start: int, end: int) -> Iterator[tuple[dict, list[Rollout]]]:
    """Each iteration's record and rollouts once the learner has stepped on it, in order: one after
    another (train.max_staleness 0), or with the next iterations collected meanwhile (jobs/pipeline.py).
    Raises StopRun when a stop is asked for or the budget is spent."""
    k = run.config.train.max_staleness
    if k == 0:
        for iteration in range(start, end):
            run.stop.check()
            yield train_iteration(run, iteration)
        return
    with RolloutPipeline(
        lambda j: sample_plans(run, j),
        lambda c: run_plans(run, c),
        start,
        end,
        k,
        halt=lambda: run.stop.request("pipeline closed"),
    ) as pipeline:
        previous = time.perf_counter()
        for iteration in range(start, end):
            run.stop.check()
            collected, waited = pipeline.next(iteration)
            record, rollouts = learn_from(run, collected)
            pipeline.learned(iteration)
            # The pace the user sees is the time between learner steps; the phases overlap within it.
            now = time.perf_counter()
            work = sum(v for key, v in collected.phases.seconds.items())
            record.update(
                time_iteration_s=now - previous,
                time_wait_learner_s=waited,
                time_wait_generate_s=pipeline.bound_wait_s.get(iteration, 0.0),
                overlap=max(0.0, 1.0 - (now - previous) / work) if work > 0 else 0.0,
            )
            previous = now
            yield record, rollouts
