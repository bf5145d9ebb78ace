"""`conductor-rl ask "QUESTION"`: the Conductor writes a plan, the worker pool
runs it, and every step is shown.

    conductor-rl ask                                  # sample questions from data.questions
    conductor-rl ask "What is 17 * 23?" --reference 391 --kind numeric
    conductor-rl ask --config configs/local.yaml conductor.temperature=0.7 --json

With no question, it takes `ask.sample_questions` questions from
`data.questions` (which have reference answers, so the result is graded).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any, Sequence, TextIO

from conductor_rl.config import Config
from conductor_rl.data import Question, load_dataset
from conductor_rl.grading import MathGrader
from conductor_rl.workers.providers import ProviderUnavailableError, build_provider, cached
from conductor_rl.rollout.rollouts import Rollout, run_rollout
from conductor_rl.rollout.workflow import Task
from jobs.common import add_config_arguments, config_from_args, log, step_limits


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("question", nargs="*", help="question(s) to ask; key.sub=value items are config overrides")
    parser.add_argument("--reference", help="reference answer for a given question (grades the result)")
    parser.add_argument("--kind", default="math", choices=["math", "numeric", "choice", "exact"],
                        help="how to grade against --reference (default: math)")
    parser.add_argument("--samples", type=int, default=None,
                        help="plans sampled per question; the first that parses is run (default: ask.samples)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    add_config_arguments(parser)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="conductor-rl ask", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    # Intermixed: overrides may come after options (`ask "Q" --json conductor.seed=3`).
    return run(parser.parse_intermixed_args(argv))


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    if not args.json:
        return _run(args, out)
    # Libraries print to stdout on import (DeepSpeed's accelerator notice); with
    # --json, stdout must hold the JSON document alone.
    with contextlib.redirect_stdout(sys.stderr):
        return _run(args, out)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    config, questions = config_from_args(args, positional="question")
    tasks = choose_tasks(config, questions, args.reference, args.kind)
    samples = args.samples or config.ask.samples
    if samples < 1:
        raise SystemExit("--samples must be at least 1")

    from conductor_rl.policy.conductor import Conductor  # torch import: after the config has been checked

    try:
        workers = [build_provider(w, seed=config.conductor.seed) for w in config.workers]
        if config.workflow.response_cache:
            workers = [cached(p, w, config.workflow.response_cache) for p, w in zip(workers, config.workers)]
    except ProviderUnavailableError as err:
        raise SystemExit(f"error: {err}") from None
    log(f"workers: " + ", ".join(f"Model {i} = {w.name} ({w.provider})" for i, w in enumerate(config.workers)))
    log(f"loading the Conductor ({config.conductor.model}) ...")
    started = time.perf_counter()
    conductor = Conductor(config.conductor)
    log(f"loaded in {time.perf_counter() - started:.1f}s")

    results = []
    with MathGrader() as math_grader:
        for n, task in enumerate(tasks, 1):
            log(f"[{n}/{len(tasks)}] {task.id}: sampling {samples} plan(s), up to {config.conductor.max_new_tokens} tokens ...")
            results.append(asyncio.run(ask_one(config, conductor, workers, task, samples, math_grader)))
            if not args.json:
                print(format_result(results[-1], config), file=out, flush=True)
    if args.json:
        print(json.dumps({"config": config.model_dump(mode="json"), "results": results}, indent=2), file=out)
    return 0


async def ask_one(config: Config, conductor: Any, workers: list, task: Task, samples: int, math_grader: MathGrader) -> dict:
    started = time.perf_counter()
    completions = await asyncio.to_thread(
        conductor.write_plans, task.question, len(workers), samples, None, config.ask.temperature
    )
    sampled_s = time.perf_counter() - started
    limits = [step_limits(w, config) for w in config.workers]
    attempts: list[Rollout] = []
    for i, completion in enumerate(completions):
        rollout = await run_rollout(completion.text, task, workers, limits, config.conductor.max_steps,
                                    math_grader, sample_key=f"ask/{i}")
        attempts.append(rollout)
        if rollout.plan is not None:
            break
    chosen = attempts[-1]
    record = chosen.to_dict()
    record["sample_index"] = len(attempts) - 1
    record["samples"] = len(completions)
    record["other_plan_errors"] = [a.plan_error for a in attempts[:-1]]
    record["completion_tokens"] = completions[len(attempts) - 1].completion_tokens
    record["truncated"] = completions[len(attempts) - 1].truncated
    record["conductor_s"] = sampled_s
    return record


def choose_tasks(config: Config, questions: list[str], reference: str | None, kind: str) -> list[Task]:
    known = {}
    if not questions or reference is None:
        known = {q.question.strip(): q for q in load_dataset(config.data.questions, limit=config.data.limit)}
    if not questions:
        picked = list(known.values())[: config.ask.sample_questions] if config.ask.sample_questions else []
        picked = [known[q.strip()] for q in config.ask.questions if q.strip() in known] or picked
        if not picked:
            raise SystemExit("no question given and no sample questions configured (ask.sample_questions)")
        return [task_of(q) for q in picked]
    tasks = []
    for i, text in enumerate(questions):
        if not text.strip():
            raise SystemExit("the question is empty: ask something, e.g. conductor-rl ask \"What is 17 * 23?\"")
        if reference is not None:
            tasks.append(Task(id=f"user/{i}", question=text, domain="default", reference=reference, answer_kind=kind))
        elif text.strip() in known:
            tasks.append(task_of(known[text.strip()]))
        else:
            tasks.append(Task(id=f"user/{i}", question=text))
    return tasks


def task_of(question: Question) -> Task:
    return Task(id=question.id, question=question.question, domain=question.domain,
                reference=question.reference, answer_kind=question.answer_kind, meta=dict(question.meta))


def format_result(r: dict, config: Config) -> str:
    sim = "  [SIMULATED workers]" if r["simulated"] else ""
    lines = ["", "=" * 78, f"Question {r['question_id']}: {_short(r['question'], 400)}"]
    if r["reference"]:
        lines.append(f"Reference answer: {_short(r['reference'], 200)}")
    lines.append(f"Conductor ({config.conductor.model}): plan {r['sample_index'] + 1} of {r['samples']} sampled, "
                 f"{r['completion_tokens']} tokens in {r['conductor_s']:.1f}s"
                 + (" (cut off at max_new_tokens)" if r["truncated"] else ""))
    lines.append("-" * 78)
    lines.append(_short(r["completion"], 1500))
    lines.append("-" * 78)
    if r["plan_error"]:
        lines.append(f"Plan could not be parsed: {r['plan_error']}")
        lines.append(f"Reward: {r['reward']} (unparsable plan)")
        return "\n".join(lines)
    lines.append(f"Workflow: {len(r['steps'])} step(s){sim}")
    for s in r["steps"]:
        access = "all" if s["access"] == list(range(s["index"])) and s["index"] else s["access"]
        lines.append(f"  step {s['index']}: Model {s['model_id']} ({s['worker']}), reads {access}")
        lines.append(f"    subtask: {_short(s['subtask'], 300)}")
        if s["error"]:
            lines.append(f"    ERROR: {s['error']}")
        else:
            lines.append(f"    answer:  {_short(s['response'] or '', 300)}")
            lines.append(f"    tokens {s['usage']['input_tokens']} in / {s['usage']['output_tokens']} out, "
                         f"cost ${s['cost_usd']:.6f}, latency {s['latency_s']:.2f}s"
                         + (" (simulated)" if s["simulated"] else ""))
    if r["infrastructure_error"]:
        lines.append(f"Infrastructure error: {r['infrastructure_error']} -> no reward (retried or dropped in training)")
    lines.append(f"Final answer: {_short(r['final_answer'] or '', 300)}")
    if r["verdict"]:
        lines.append(f"Verdict: {r['verdict']} (read: {r['extracted_answer']!r})  Reward: {r['reward']}")
    lines.append(f"Total cost ${r['cost_usd']:.6f}, workflow wall time {r['wall_s']:.2f}s{sim}")
    return "\n".join(lines)


def _short(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 20] + f" ... [{len(text) - limit + 20} more chars]"


if __name__ == "__main__":
    sys.exit(main())
