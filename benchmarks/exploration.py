"""What GRPO can learn from: the plans the untrained Conductor of the embedded default samples
(configs/local.yaml; its workers are SIMULATED, docs/guide/simulator.md), as training samples them
(constrained format, the configured temperature), with and without worked examples in its prompt.

The simulator pays a check (a step that reads an earlier answer and whose subtask holds a check word)
on hard questions, and a solving step whose subtask carries the question's content. A plan shape the
policy never samples gets no reward signal, so these shares bound what training can find:

- `steps_per_plan`; `multi_step_share`: plans of two steps or more;
- `reading_step_share`: steps that read an earlier answer;
- `check_step_share`: steps that read one and are worded as a check (the simulator's rule);
- `on_task_share`: solving steps whose subtask shares a content word with the question;
- `parse_errors`: completions that are not plans.

    .venv/bin/python benchmarks/exploration.py --json               # 0 and 4 worked examples, JSON last
    .venv/bin/python benchmarks/exploration.py --examples 0 2 --questions 4 --samples 16

The questions are the first `--questions` of each training sample set (GSM8K, MATH-500, MMLU).
Progress on stderr; with --json the last line on stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import log, machine, report
from conductor_rl.config import Config, load_config
from conductor_rl.plan import PlanError, parse_plan
from conductor_rl.workers.sim_rules import has_check_word, on_task

TRAINING_SETS = ("samples:gsm8k:train", "samples:math500:train", "samples:mmlu:train")


def exploration_shares(questions: Sequence[str], plans: Sequence[Sequence[str]], n_workers: int) -> dict[str, float]:
    """The shares above over `plans[i]`, the completions sampled for `questions[i]`."""
    counts = dict.fromkeys(("plans", "parse_errors", "multi", "steps", "reading", "check", "solving", "on_task"), 0)
    for question, texts in zip(questions, plans, strict=True):
        for text in texts:
            try:
                plan = parse_plan(text, n_workers)
            except PlanError:
                counts["parse_errors"] += 1
                continue
            counts["plans"] += 1
            counts["multi"] += len(plan.steps) >= 2
            for step in plan.steps:
                counts["steps"] += 1
                if step.access:
                    counts["reading"] += 1
                    counts["check"] += has_check_word(step.subtask)
                else:
                    counts["solving"] += 1
                    counts["on_task"] += on_task(step.subtask, question)

    def share(part: str, whole: str) -> float:
        return round(counts[part] / counts[whole], 4) if counts[whole] else 0.0

    return {
        "plans": counts["plans"],
        "parse_errors": counts["parse_errors"],
        "steps_per_plan": share("steps", "plans"),
        "multi_step_share": share("multi", "plans"),
        "reading_step_share": share("reading", "steps"),
        "check_step_share": share("check", "steps"),
        "on_task_share": share("on_task", "solving"),
    }


def sample_plans(
    config: Config, model: Any, tokenizer: Any, questions: Sequence[str], samples: int, seed: int
) -> tuple[list[list[str]], int]:
    """`samples` completions per question from the untrained Conductor of `config`; and the prompt's
    length in tokens."""
    from conductor_rl.policy.conductor import Conductor

    conductor = Conductor(config.conductor, model, tokenizer)
    n_workers = len(config.workers)
    groups = conductor.write_plans_many(questions, n_workers, n=samples, seed=seed)
    prompt_tokens = len(tokenizer(conductor.prompt(questions[0], n_workers), add_special_tokens=False).input_ids)
    return [[c.text for c in group] for group in groups], prompt_tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--examples", type=int, nargs="+", default=[0, 4], help="worked examples in the prompt")
    parser.add_argument("--questions", type=int, default=2, help="questions of each training sample set")
    parser.add_argument("--samples", type=int, default=16, help="plans sampled per question")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    from conductor_rl.data import load_dataset
    from conductor_rl.models import load_causal_lm

    questions = [q.question for spec in TRAINING_SETS for q in load_dataset(spec, limit=args.questions)]
    base = load_config(None)
    model, tokenizer = load_causal_lm(base.conductor.model, base.conductor.dtype)
    figures: dict = {**machine(), "questions": len(questions), "samples": args.samples, "by_examples": {}}
    for examples in args.examples:
        started = time.perf_counter()
        config = load_config(base, [f"conductor.n_examples={examples}"])
        plans, prompt_tokens = sample_plans(config, model, tokenizer, questions, args.samples, args.seed)
        shares = exploration_shares(questions, plans, len(config.workers))
        shares.update(prompt_tokens=prompt_tokens, seconds=round(time.perf_counter() - started, 1))
        figures["by_examples"][str(examples)] = shares
        log(
            f"{examples} worked example(s), prompt {prompt_tokens} tokens: {shares['steps_per_plan']} steps per plan; "
            f"{shares['reading_step_share']:.1%} of steps read an earlier answer, {shares['check_step_share']:.1%} "
            f"check one; {shares['on_task_share']:.1%} of solving steps on task ({shares['seconds']} s)"
        )
    report(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
