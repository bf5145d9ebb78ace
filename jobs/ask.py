"""`conductor-rl ask "QUESTION"`: the Conductor writes a plan, the worker pool
runs it, and every step is shown.

    conductor-rl ask                                  # sample questions from data.questions
    conductor-rl ask "What is 17 * 23?" --reference 391 --kind numeric
    conductor-rl ask --config configs/local.yaml conductor.temperature=0.7 --json
    conductor-rl ask "What is 17 * 23?" --workers sim-math-expert,sim-generalist   # a subset of the pool

With no question, it takes `ask.sample_questions` questions from
`data.questions` (which have reference answers, so the result is graded).

A thin shell over `conductor_rl.Orchestrator`: the Conductor runs in this
process, the workers in worker pools on Ray (started here, or joined when
`cluster.address` / RAY_ADDRESS names one), behind the cluster's rate limiters
and a cost ledger, as in training.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from conductor_rl.config import Config, ConfigError
from conductor_rl.config.redaction import recorded
from conductor_rl.data import load_dataset
from conductor_rl.rollout.workflow import Task
from conductor_rl.run.placement import ClusterTooSmallError
from conductor_rl.workers.providers import MissingApiKeyError
from jobs.common import add_config_arguments, add_workers_argument, check_workers_before_start, config_from_args, log


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("question", nargs="*", help="question(s) to ask; key.sub=value items are config overrides")
    parser.add_argument("--reference", help="reference answer for a given question (grades the result)")
    parser.add_argument(
        "--kind",
        default="math",
        choices=["math", "numeric", "choice", "exact"],
        help="how to grade against --reference (default: math)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=None,
        help="plans sampled per question; the first that parses is run (default: ask.samples)",
    )
    parser.add_argument(
        "--budget-usd",
        type=float,
        default=None,
        help="stop starting worker calls once they cost this much (default: no cap)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    add_workers_argument(parser)
    add_config_arguments(parser)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="conductor-rl ask", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
    if args.budget_usd is not None and args.budget_usd < 0:
        raise SystemExit("--budget-usd must be at least 0")
    try:
        check_workers_before_start(config)  # a missing key fails here, naming its variable, before Ray starts
    except (MissingApiKeyError, ConfigError) as err:
        raise SystemExit(f"error: {err}") from None

    import ray

    from conductor_rl.orchestrator import BudgetSpentError, Orchestrator
    from jobs.ray_cluster import start_ray
    from jobs.training_system import start_worker_pools

    started_ray = not ray.is_initialized()
    log("starting Ray ..." if started_ray else "joining the running Ray cluster ...")
    start_ray(config)
    try:
        pools = start_worker_pools(config, args.budget_usd, config.train.worker_replicas)
    except ClusterTooSmallError as err:
        raise SystemExit(f"error: {err}") from None
    stopped = None
    try:
        log("workers: " + ", ".join(f"Model {i} = {w.name} ({w.provider})" for i, w in enumerate(config.workers)))
        log(f"loading the Conductor ({config.conductor.model}) ...")
        loaded = time.perf_counter()
        with Orchestrator.from_config(config, workers=pools.pools) as orchestrator:
            log(f"loaded in {time.perf_counter() - loaded:.1f}s")
            log(
                f"answering {len(tasks)} question(s): {samples} plan(s) each, up to "
                f"{config.conductor.max_new_tokens} tokens ..."
            )
            try:
                answers = orchestrator.answer_many(tasks, samples=samples)
            except BudgetSpentError as err:
                answers, stopped = err.answers, err
    finally:
        pools.shutdown()
        if started_ray:
            ray.shutdown()
    results = [a.to_dict() for a in answers]
    if args.json:
        print(json.dumps({"config": recorded(config), "results": results}, indent=2), file=out)
    else:
        for r in results:
            print(format_result(r, config), file=out, flush=True)
    if stopped is not None:
        log(f"error: {stopped}")
        return 1
    return 0


def choose_tasks(config: Config, questions: list[str], reference: str | None, kind: str) -> list[Task]:
    known = {}
    if not questions or reference is None:
        known = {q.question.strip(): q for q in load_dataset(config.data.questions, limit=config.data.limit)}
    if not questions:
        picked = list(known.values())[: config.ask.sample_questions] if config.ask.sample_questions else []
        picked = [known[q.strip()] for q in config.ask.questions if q.strip() in known] or picked
        if not picked:
            raise SystemExit("no question given and no sample questions configured (ask.sample_questions)")
        return [Task.of(q) for q in picked]
    tasks = []
    for i, text in enumerate(questions):
        if not text.strip():
            raise SystemExit('the question is empty: ask something, e.g. conductor-rl ask "What is 17 * 23?"')
        if reference is not None:
            tasks.append(Task(id=f"user/{i}", question=text, domain="default", reference=reference, answer_kind=kind))
        elif text.strip() in known:
            tasks.append(Task.of(known[text.strip()]))
        else:
            tasks.append(Task(id=f"user/{i}", question=text))
    return tasks


def format_result(r: dict, config: Config) -> str:
    sim = "  [SIMULATED workers]" if r["simulated"] else ""
    lines = ["", "=" * 78, f"Question {r['question_id']}: {_short(r['question'], 400)}"]
    if r["reference"]:
        lines.append(f"Reference answer: {_short(r['reference'], 200)}")
    lines.append(
        f"Conductor ({config.conductor.model}): plan {r['sample_index'] + 1} of {r['samples']} sampled, "
        f"{r['completion_tokens']} tokens in {r['conductor_s']:.1f}s"
        + (" (cut off at max_new_tokens)" if r["truncated"] else "")
    )
    lines.append("-" * 78)
    lines.append(_short(r["completion"], 1500))
    lines.append("-" * 78)
    if r["plan_error"]:
        lines.append(f"Plan could not be parsed: {r['plan_error']}")
        lines.append(f"Reward: {r['reward']} (unparsable plan)")
        return "\n".join(lines)
    lines.append(f"Workflow: {len(r['steps'])} step(s){sim}")
    lines.extend(step_lines(r["steps"], "  "))
    if r["infrastructure_error"]:
        lines.append(f"Infrastructure error: {r['infrastructure_error']} -> no reward (retried or dropped in training)")
    lines.append(f"Final answer: {_short(r['final_answer'] or '', 300)}")
    if r["verdict"]:
        lines.append(f"Verdict: {r['verdict']} (read: {r['extracted_answer']!r})  Reward: {r['reward']}")
    elif r["grade_detail"]:
        lines.append(f"Verdict: {r['grade_detail']}")
    lines.append(f"Total cost ${r['cost_usd']:.6f}, workflow wall time {r['wall_s']:.2f}s{sim}")
    return "\n".join(lines)


def step_lines(steps: list[dict], indent: str) -> list[str]:
    """Each step; a step given to the Conductor shows its recursive call's plan and steps, indented."""
    lines = []
    for s in steps:
        access = "all" if s["access"] == list(range(s["index"])) and s["index"] else list(s["access"])
        who = "the Conductor, forced" if s["model_id"] < 0 else f"Model {s['model_id']} ({s['worker']})"
        lines.append(f"{indent}step {s['index']}: {who}, reads {access}")
        lines.append(f"{indent}  subtask: {_short(s['subtask'], 300)}")
        inner = s.get("inner")
        if inner is not None:
            if inner["at_limit"]:
                lines.append(f"{indent}  depth {inner['depth']}: past conductor.max_depth, the answer stands")
            elif inner["kept"]:
                lines.append(f"{indent}  depth {inner['depth']}: the Conductor kept the answer (three empty lists)")
            elif inner["plan_error"]:
                lines.append(f"{indent}  depth {inner['depth']}: plan could not be parsed: {inner['plan_error']}")
            else:
                lines.append(f"{indent}  depth {inner['depth']}: the Conductor planned again:")
                lines.extend(step_lines(inner["steps"], indent + "    "))
        if s["error"]:
            lines.append(f"{indent}  ERROR: {s['error']}")
        else:
            lines.append(f"{indent}  answer:  {_short(s['response'] or '', 300)}")
            lines.append(
                f"{indent}  tokens {s['usage']['input_tokens']} in / {s['usage']['output_tokens']} out, "
                f"cost ${s['cost_usd']:.6f}, latency {s['latency_s']:.2f}s" + (" (simulated)" if s["simulated"] else "")
            )
    return lines


def _short(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 20] + f" ... [{len(text) - limit + 20} more chars]"


if __name__ == "__main__":
    sys.exit(main())
