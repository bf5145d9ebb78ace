"""Demonstration plans: what a small Conductor is shown before GRPO (`train.warm_start`), so
that it can write the plan language at all.

The paper's Conductor is a 7B instruct model: its first samples already word subtasks after
the question and read earlier answers to check them, and reward picks among those. A 135M
model's do not (benchmarks/exploration.py: its subtasks are mostly noise and hardly a step
reads an earlier answer), so reward never sees those plans. A demonstration is a plan drawn
uniformly from the family `optimal` searches (conductor_rl/evaluation/optimal.py): one to
`max_steps` steps, each any worker; every later step solves from scratch, solves reading the
earlier answers, or checks them, each a third of the time. It teaches how plans are written,
not which plan pays: the workers, the number of steps and the roles are uniform, and which of
them earns reward is left to GRPO.

With recursion on (`conductor.max_depth` >= 1) the Conductor's own seat is a worker like the
others after the first step (a step given to it reviews the answer so far), and some
demonstrations answer a recursive call's prompt (the question, a demonstrated plan, and an
answer that is the question's reference or another question's): half keep the answer
(three empty lists), half write a new plan (`demonstration_reply`), whatever the answer shown. A
small Conductor never writes the empty plan by itself, so without them no call is ever seen to
stop and GRPO cannot learn when to; whether the shown answer is right never decides the reply,
so the demonstrations teach that stopping can be written, not when it pays.

How a demonstration words a step (decisions, docs/decisions.md "Warm start"):
- a solving step: the question's opening words (four to eight), as a person would start
  to restate the task: a small model can copy them from its prompt;
- a checking step: one plain check instruction (`CHECK_SUBTASK`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

from conductor_rl.plan.language import Plan, Step

#: The one wording of a demonstration's check: with several, each opening word was too rare for
#: eight to twelve warm-start steps to teach (docs/decisions.md "Warm start").
CHECK_SUBTASK = "Check the answer above and fix any error"

#: Characters the constrained format forbids inside a subtask, and runs of white space.
_UNSAFE = re.compile(r'["\\\s]+')


def opening_words(question: str, n_words: int, fits: Callable[[str], bool] = lambda text: True) -> str:
    """The first `n_words` words of `question`, on one line, without quotes or backslashes; fewer
    while the text does not `fit` (the format's subtask length), down to the start of one word."""
    words = _UNSAFE.sub(" ", question).split() or ["Answer"]
    n = max(1, min(n_words, len(words)))
    while n > 1 and not fits(" ".join(words[:n])):
        n -= 1
    text = " ".join(words[:n])
    while len(text) > 1 and not fits(text):  # one long word (a LaTeX formula): its start
        text = text[: len(text) // 2]
    return text


def demonstration_plan(
    question: str,
    workers: int | Sequence[int],
    max_steps: int,
    rng: random.Random,
    fits: Callable[[str], bool] = lambda text: True,
    seat: int | None = None,
) -> Plan:
    """One plan drawn uniformly from the family above, worded for `question`, its steps given to
    `workers`: a number n (Model 0 to n-1), or the model ids to draw from, which in a pool with
    the Conductor's own seat are the answering workers only (`answering_workers`) unless recursion
    is on (then demonstrated stops come with them: `demonstration_reply`).
    `fits`: whether a subtask is short enough for the format. `seat`: the id among `workers` that is
    the Conductor's own seat: a step given to it reviews the answer so far, so it is never the first
    step (there is nothing to review yet) and it reads every earlier step."""
    ids: Sequence[int] = range(workers) if isinstance(workers, int) else list(workers)
    if not ids or max_steps < 1:
        raise ValueError("a demonstration needs at least one worker and one step")
    steps = []
    for i in range(rng.randint(1, max_steps)):
        role = "solve" if i == 0 else rng.choice(("solve", "read", "check"))
        words = rng.randint(4, 8)
        subtask = CHECK_SUBTASK if role == "check" else opening_words(question, words, fits)
        worker = rng.choice(ids)
        if worker == seat and i == 0:
            worker = rng.choice([w for w in ids if w != seat] or [worker])
        elif worker == seat:
            role, subtask = "check", CHECK_SUBTASK
        steps.append(Step(worker, subtask, [] if role == "solve" else "all"))
    return Plan(tuple(steps))


def demonstration_reply(rng: random.Random, new_plan: Callable[[], Plan]) -> Plan:
    """A recursive call's demonstrated reply: the empty plan (keep the answer) or `new_plan()` (a
    `demonstration_plan`), half each, drawn without looking at the answer shown."""
    return Plan(()) if rng.random() < 0.5 else new_plan()


def shown_answer(reference: str, others: Sequence[str], rng: random.Random) -> str:
    """The answer a demonstrated recursive prompt shows: the question's `reference` or, half the
    time, one of `others` (other questions' references: a plausible wrong answer), so that the
    demonstrations see both and tie neither to a reply."""
    return rng.choice(others) if others and rng.random() < 0.5 else reference
