"""How a simulated step's chance of a right answer is decided (docs/guide/simulator.md).

A simulated worker (conductor_rl/workers/providers/sim.py) answers with the reference with a
chance that depends on what the plan made of the step, so that a Conductor trained against a
simulated pool can learn plan shapes, wording and access from reward:

- difficulty: its skill falls linearly from `accuracy` (difficulty 0) to `hard_accuracy`
  (difficulty 1), by conductor_rl/data/difficulty.py;
- role: a step that reads earlier answers and whose subtask says so (a check word) checks them;
  every other step solves;
- a checking step judges the latest answer it reads: it keeps a right one right (`keep_rate`)
  and repairs a wrong one with `repair_rate` times its own solve chance; other answers it reads
  do not help it (so that two solves and a check are no perfect pick-the-better-of-two);
- a solving step gains `gain_with_context` from reading earlier answers, and loses
  (`off_task_factor`) when its subtask carries none of the question's content words.

With `hard_accuracy`, `keep_rate` and `off_task_factor` left unset, the chance is today's
`accuracy[domain]` (+ `gain_with_context` when reading), whatever the wording or the reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from conductor_rl.config import SimSpec

Role = Literal["solve", "check"]

#: Words that make a step reading earlier answers a check of them (whole words, any case).
# Not "correct": questions and answer instructions use it as an adjective ("the correct option").
_CHECK_WORDS = "check verify review confirm fix improve refine critique validate audit proofread recheck"
CHECK_WORDS = frozenset(_CHECK_WORDS.split())

#: Words that say nothing about a question's content: common English function words and the
#: generic words of an instruction ("solve the problem and give the final answer").
_STOPWORDS = (
    "about above after again against also among and another answer anything because been before being "
    "below between both calculate could compute does doing down during each either else every final find "
    "from further give given have having here into just less like make many might more most much must "
    "need only other over please problem provide question same shall should show since solve some step "
    "steps such than that their them then there these they thing this those though through under until "
    "upon using very want were what when where whether which while will with within without would write "
    "your yours"
)
STOPWORDS = frozenset(_STOPWORDS.split())

_LETTERS = re.compile(r"[^\W\d_]+")  # runs of letters: "double-check" is "double" and "check"


def _words(text: str) -> list[str]:
    return _LETTERS.findall(text.lower())


def content_words(text: str) -> frozenset[str]:
    """The words that carry a text's content: lowercase, at least four letters, no stopword."""
    return frozenset(w for w in _words(text) if len(w) >= 4 and w not in STOPWORDS)


def has_check_word(subtask: str) -> bool:
    return any(w in CHECK_WORDS for w in _words(subtask))


def step_role(subtask: str, reads_answer: bool) -> Role:
    """ "check" when the step reads at least one earlier answer and its subtask asks to check it."""
    return "check" if reads_answer and has_check_word(subtask) else "solve"


def plan_shape(steps: Sequence[tuple[str, Sequence[int]]]) -> tuple[bool, bool]:
    """A plan's shape from each step's (subtask, earlier steps it reads): (a step reads an earlier
    answer, a step reads one and is worded as a check of it)."""
    reading = [subtask for subtask, reads in steps if reads]
    return bool(reading), any(step_role(subtask, reads_answer=True) == "check" for subtask in reading)


def on_task(subtask: str, question: str) -> bool:
    """Whether a subtask carries some of the question's content (a shared content word). Applies to
    solving steps; a checking step is judged by what it reads, not by its wording."""
    return not content_words(subtask).isdisjoint(content_words(question))


def _skill(table: dict[str, float], domain: str) -> float:
    return table.get(domain, table.get("default", 0.5))


def solve_chance(spec: SimSpec, domain: str, difficulty: float) -> float:
    """The worker's own chance on a question of `domain` and `difficulty`: `accuracy` at 0,
    `hard_accuracy` at 1 (the same as `accuracy` when unset), linear in between."""
    if not 0.0 <= difficulty <= 1.0:
        raise ValueError(f"difficulty {difficulty} must be between 0 and 1 (conductor_rl/data/difficulty.py)")
    easy = _skill(spec.accuracy, domain)
    if spec.hard_accuracy is None:
        return easy
    # Weighted this way, difficulty 0 and 1 give the two settings exactly.
    return (1.0 - difficulty) * easy + difficulty * _skill(spec.hard_accuracy, domain)


def success_chance(
    spec: SimSpec,
    domain: str,
    difficulty: float,
    role: Role,
    on_task: bool,
    reads_context: bool,
    checked_right: bool,
) -> float:
    """The chance that one step answers right, clipped to 0..1 (the rules in the module docstring);
    `checked_right`: the latest earlier answer the step reads is right (it matters to a check only)."""
    own = solve_chance(spec, domain, difficulty)
    if role == "check" and spec.keep_rate is not None:
        chance = spec.keep_rate if checked_right else spec.repair_rate * own
    else:
        chance = own + (spec.gain_with_context if reads_context else 0.0)
        if not on_task:
            chance *= spec.off_task_factor
    return min(max(chance, 0.0), 1.0)


def format_answer(answer: str, answer_kind: str) -> str:
    """Write an answer the way a competent worker would, so graders can read it."""
    if answer_kind == "choice":
        return f"After weighing the options, the answer is ({answer})."
    if answer_kind == "numeric":
        return f"Working through the arithmetic step by step, the answer is {answer}.\n#### {answer}"
    if answer_kind.startswith("code"):
        return f"Here is the implementation:\n```python\n{answer}\n```"
    return f"Solving this carefully, the final answer is $\\boxed{{{answer}}}$."


def is_right(text: str, reference: str, answer_kind: str) -> bool:
    """Whether an earlier step's text is a simulated worker's right answer: it ends with the
    reference written the simulator's way (`format_answer`). A real worker's answer in a mixed
    pool is not recognised and counts as wrong: the simulator does not grade."""
    return text.rstrip().endswith(format_answer(reference, answer_kind).rstrip())
