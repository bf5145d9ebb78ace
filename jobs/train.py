"""`conductor-rl train`: the GRPO loop that teaches the Conductor to orchestrate.

    conductor-rl train                                   # the embedded default (configs/local.yaml)
    conductor-rl train --config configs/paper.yaml train.output_dir=runs/paper
    conductor-rl train --resume train.output_dir=runs/paper   # continue from the last checkpoint
    ray job submit --working-dir . -- python -m jobs.train --config configs/paper.yaml

One iteration (paper §3.1, app. A):
  draw B questions → sample G plans each → parse → run every plan on the worker
  pool → grade → group-relative advantages → one GRPO step → sync weights to the
  generators → log (metrics, TensorBoard, Ray dashboard, Parquet traces) → checkpoint.

Ctrl-C, SIGTERM (`ray job stop`) and a spent budget stop the run with a
checkpoint; an iteration interrupted before its learner step is abandoned and
redone on resume, so no rollout is counted twice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

from conductor_rl.run.checkpoint import CheckpointError, Checkpoints, check_writable
from conductor_rl.config import Config, ConfigError
from conductor_rl.data import load_dataset
from conductor_rl.data.stream import QuestionStream
from conductor_rl.policy.grpo import group_advantages
from conductor_rl.policy.learner import RolloutBatch
from conductor_rl.run.metrics import best_workers, iteration_metrics
from conductor_rl.plan.constrained import choice_mask
from conductor_rl.workers.providers import MissingApiKeyError
from conductor_rl.workers.providers.keys import read_api_key
from conductor_rl.plan.prompts import ConductorPrompt, fitting_questions
from conductor_rl.policy.sampling import sample_seed
from conductor_rl.rollout.rollouts import (Rollout, apply_grade, execute_rollouts, grade_request, needs_execution,
                                           parse_rollout, ready_to_grade, unfinished)
from conductor_rl.run.log import RunDirError
from conductor_rl.rollout.workflow import StepLimits
from jobs.common import add_config_arguments, config_from_args, log


class StopRun(Exception):
    """The run must stop now (signal or budget); the reason is the message."""


# ---------------------------------------------------------------- one iteration

@dataclass
class Loop:
    """What the iteration needs, built once by `train`."""

    config: Config
    system: Any                      # jobs.training_system.TrainingSystem
    stream: QuestionStream
    prompts: ConductorPrompt
    stop: "StopSignal"
    version: int = 0                 # weights version the generators hold
    best: dict[str, str] = field(default_factory=dict)


def train_iteration(loop: Loop, iteration: int) -> tuple[dict, list[Rollout]]:
    c, system = loop.config, loop.system
    phases: dict[str, float] = {}
    started = time.perf_counter()
    cursor = loop.stream.cursor
    try:
        # 1. draw B questions
        questions = loop.stream.take(c.train.questions_per_iteration)
        tasks = [q.to_task() for q in questions]
        prompt_ids = [loop.prompts.ids(q.question) for q in questions]

        # 2. sample G plans per question with the current policy
        with timed(phases, "generate"):
            groups = system.generators.sample(
                prompt_ids, c.train.rollouts_per_question,
                c.conductor.temperature, c.conductor.max_new_tokens, c.conductor.top_p,
                seed=sample_seed(c.train.seed, iteration), shape=loop.prompts.shape)

        # 3. parse each completion into a plan (unparsable: reward 0)
        rollouts = [
            parse_rollout(Rollout(task, c.conductor.response_prefix + s.text, group=g, sample=i,
                                  completion_ids=s.token_ids, logprobs=s.logprobs),
                          len(c.workers), c.conductor.max_steps)
            for g, (task, samples) in enumerate(zip(tasks, groups)) for i, s in enumerate(samples)
        ]

        # 4-5. run every plan on the worker pool, grade the final answers;
        #      infrastructure errors are retried, then the rollout is dropped
        limits = [StepLimits.for_worker(w, c) for w in c.workers]
        for _ in range(c.train.rollout_attempts):
            todo = unfinished(rollouts)
            if not todo:
                break
            loop.stop.check()
            with timed(phases, "execute"):
                asyncio.run(execute_rollouts(needs_execution(todo), system.workers, limits,
                                             key=f"{c.train.seed}/{iteration}"))
            check_budget(system)
            to_grade = ready_to_grade(todo)
            with timed(phases, "grade"):
                results = system.graders.grade_many([grade_request(r) for r in to_grade])
            for rollout, result in zip(to_grade, results):
                apply_grade(rollout, result)
        loop.stop.check()
    except StopRun:
        loop.stream.cursor = cursor   # this iteration is abandoned and will be redone on resume
        raise

    # 6. group-relative advantages over the rollouts that have a reward
    batch, informative = advantages(rollouts, prompt_ids, c.train.drop_uninformative_groups)
    if batch is not None and loop.prompts.shape is not None:   # the format's own text is not a choice
        batch = replace(batch, loss_masks=[choice_mask(loop.prompts.tokenizer, ids, c.conductor.response_prefix,
                                                       subtasks=c.train.subtask_text_in_loss)
                                           for ids in batch.completion_ids])

    # 7. one GRPO step  8. new weights to every generator engine
    learned: dict[str, float] = {}
    if batch is not None:
        with timed(phases, "learn"):
            stats = system.learners.train_step(batch)
        with timed(phases, "sync"):
            loop.version += 1
            system.weight_sync.push(loop.version)
        learned = {"loss": stats.loss, "grad_norm": stats.grad_norm, "clip_fraction": stats.clip_fraction,
                   "ratio_mean": stats.ratio_mean, "kl": stats.kl, "lr": stats.lr, "learner_tokens": stats.tokens}

    # 9. the iteration's record
    record = {"iteration": iteration,
              **iteration_metrics(rollouts, [w.name for w in c.workers], loop.best),
              "groups": len(questions), "informative_groups": informative, **learned,
              "weights_version": loop.version,
              **{f"time_{k}_s": v for k, v in phases.items()},
              "time_iteration_s": time.perf_counter() - started}
    return record, rollouts


def advantages(rollouts: Sequence[Rollout], prompt_ids: Sequence[list[int]],
               drop_uninformative: bool) -> tuple[RolloutBatch | None, int]:
    """A_i = (r_i - mean) / std within each question's group of kept rollouts
    (`prompt_ids[g]`: group g's prompt). Returns the learner batch (None when
    no group carries information) and the number of informative groups."""
    import torch

    by_group: dict[int, list[Rollout]] = {}
    for r in rollouts:
        if r.reward is not None:
            by_group.setdefault(r.group, []).append(r)
    kept, informative = [], 0
    for members in by_group.values():
        if len(members) < 2:
            continue  # a lone survivor has nothing to be compared with
        adv = group_advantages(torch.tensor([r.reward for r in members]), len(members))
        for r, a in zip(members, adv.advantages.tolist()):
            r.advantage = a
        if bool(adv.informative.any()):
            informative += 1
            kept.extend(members)
        elif not drop_uninformative:
            kept.extend(members)
    kept = [r for r in kept if r.completion_ids]
    if not informative or not kept:
        return None, informative
    return RolloutBatch([list(prompt_ids[r.group]) for r in kept], [list(r.completion_ids) for r in kept],
                        [list(r.logprobs) for r in kept], [r.advantage for r in kept]), informative


# ---------------------------------------------------------------- the run

def train(config: Config, resume: bool = False) -> dict:
    """Run (or resume) training; returns a summary. Everything that can be
    checked without the cluster is checked before any actor starts."""
    from conductor_rl.run.report import summarize, write_report
    from conductor_rl.run.log import RunLog, records
    from conductor_rl.run.traces import TraceWriter, remove_after

    t = config.train
    out = check_writable(t.output_dir)
    checkpoints = Checkpoints(out / "checkpoints", keep=t.keep_checkpoints)
    state = checkpoints.load_state() if resume else None
    if not resume and checkpoints.latest() is not None:
        raise CheckpointError(f"{out} already holds a run: pass --resume to continue it, or a new train.output_dir")
    if not resume and (out / "metrics.jsonl").exists():
        # --resume cannot help here (no checkpoint), so the message must not send the user to it.
        raise CheckpointError(f"{out} holds the log of a run that left no checkpoint to resume from: "
                              f"set train.output_dir to a new folder, or delete {out} to start over")
    for worker in config.workers:   # a missing API key fails here, naming its variable, not after the actors start
        if worker.provider not in ("sim", "local"):
            read_api_key(worker)
    questions = load_dataset(config.data.questions, limit=config.data.limit)
    start = state["iteration"] + 1 if state else 0
    if state and state["config"]["train"]["iterations"] != t.iterations:
        log(f"warning: resuming with train.iterations={t.iterations}, the run started with "
            f"{state['config']['train']['iterations']}: the learning-rate schedule follows the new length")
    prompts = ConductorPrompt.from_config(config)
    questions, left_out = fitting_questions(questions, prompts, config.generator.max_model_len,
                                            config.conductor.max_new_tokens)
    if left_out:
        log(f"leaving out {left_out} of {left_out + len(questions)} questions whose prompt leaves no room for a "
            f"plan in generator.max_model_len={config.generator.max_model_len}")
    stream = QuestionStream(questions, seed=t.seed, cursor=state["cursor"] if state else 0,
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

    from jobs.training_system import build_system, start_ray

    ray = start_ray(config)
    model = str(checkpoints.latest() / "model") if state else config.conductor.model
    version = state["weights_version"] if state else 0
    system = build_system(config, model, version, total_steps=t.iterations)
    if state:
        system.learners.load(str(checkpoints.latest()))
        ray.get(system.ledger.restore.remote(state["ledger"]))
        log(f"resumed from {checkpoints.latest()} (iteration {start - 1} done, cursor {stream.cursor})")

    from actors.train_metrics import TrainMetrics

    dashboard = TrainMetrics()
    loop = Loop(config, system, stream, prompts, StopSignal(), version, best_workers(config.workers))
    how, done, saved = "finished", start - 1, start - 1   # last finished and last checkpointed iteration
    try:
        with loop.stop.installed(), progress_bar(t, start) as bar:
            for iteration in range(start, t.iterations):
                if loop.stop.requested:
                    how = loop.stop.reason
                    break
                ray.get(system.ledger.start_iteration.remote(iteration))
                try:
                    record, rollouts = train_iteration(loop, iteration)
                except StopRun as why:
                    how = str(why)
                    break
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
                if (iteration + 1) % t.checkpoint_every == 0 or iteration == t.iterations - 1:
                    save_checkpoint(checkpoints, loop, iteration, ledger)
                    saved = iteration
        ledger = ray.get(system.ledger.summary.remote())
        if done > saved or (how != "finished" and (done >= 0 or ledger["total"]["cost_usd"] > 0)):
            # A stop: what was spent on an abandoned iteration is in the ledger it saves (also when
            # it was the first one after a resume: the checkpoint resumed from is written again; or
            # the run's first: then it is "iteration -1", the starting weights).
            save_checkpoint(checkpoints, loop, done, ledger)
    finally:
        run_log.close()
        system.shutdown()

    summary = {"stopped": how, "iterations": done + 1, "output_dir": str(out),
               "checkpoint": str(checkpoints.latest()) if checkpoints.latest() else None}
    kept = records(out) if (out / "metrics.jsonl").exists() else []
    if kept:
        summary.update(summarize(kept))
        if t.report:
            summary["report"] = str(write_report(out, title=f"Training report: {config.conductor.model}",
                                                 extra={"stopped": how, "output_dir": str(out), "seed": t.seed}))
    log(f"run {how} after iteration {done}; checkpoint: {summary['checkpoint']}")
    return summary


def save_checkpoint(checkpoints: Checkpoints, loop: Loop, iteration: int, ledger: dict) -> Path:
    state = {"iteration": iteration, "cursor": loop.stream.cursor, "weights_version": loop.version,
             "ledger": ledger, "config": loop.config.model_dump(mode="json"), "saved_at": time.time()}
    return checkpoints.save(iteration, state, lambda folder: loop.system.learners.save(str(folder)))


# ---------------------------------------------------------------- helpers

def check_budget(system: Any) -> None:
    """After a round of rollouts (nothing in flight): count calls lost with a dead
    replica at their worst-case cost, then stop if the budget is spent."""
    import ray

    lost = ray.get(system.ledger.settle_open_calls.remote())
    if lost:
        log(f"{lost} worker call(s) never returned (their replica died mid-call; the provider may have "
            f"billed them): counted at their worst-case cost")
    if ray.get(system.ledger.exhausted.remote()):
        raise StopRun("budget")


@contextmanager
def timed(phases: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = phases.get(name, 0.0) + time.perf_counter() - started


class StopSignal:
    """Ctrl-C or SIGTERM asks the run to stop at the next safe point; a second Ctrl-C stops at once."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def check(self) -> None:
        if self.reason:
            raise StopRun(self.reason)

    @property
    def requested(self) -> bool:
        return self.reason is not None

    @contextmanager
    def installed(self) -> Iterator["StopSignal"]:
        def handle(signum: int, _frame: Any) -> None:
            if self.reason and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.reason = signal.Signals(signum).name
            log(f"{self.reason} received: stopping at the next safe point with a checkpoint "
                f"(Ctrl-C again to stop at once)")

        previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


class progress_bar:
    """A tqdm bar over iterations with the last reward, accuracy and cost."""

    def __init__(self, t: Any, start: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=t.iterations, initial=start, desc="train", unit="it", file=sys.stderr,
                        disable=not t.progress, dynamic_ncols=True)

    def __enter__(self) -> "progress_bar":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.close()

    def update(self, record: dict) -> None:
        self.bar.set_postfix(reward=f"{record['reward_mean']:.3f}", acc=f"{record['accuracy']:.2f}",
                             cost=f"${record.get('cost_total_usd', 0.0):.4f}", refresh=False)
        self.bar.update(1)
        if self.bar.disable:
            log(f"iteration {record['iteration']}: reward {record['reward_mean']:.3f} accuracy {record['accuracy']:.2f} "
                f"({record['time_iteration_s']:.1f}s)")


# ---------------------------------------------------------------- command line

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides_positional", nargs="*", metavar="KEY=VALUE", help="configuration overrides")
    parser.add_argument("--resume", action="store_true", help="continue the run in train.output_dir from its last checkpoint")
    parser.add_argument("--json", action="store_true", help="print the run's summary as JSON on the last line")
    add_config_arguments(parser)


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
    except (CheckpointError, ConfigError, RunDirError, MissingApiKeyError) as err:
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
        print("\n".join(f"{k}: {v}" for k, v in summary.items() if not isinstance(v, dict)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
