"""The baselines, each written as a `Plan` that the workflow engine runs.

A baseline is a fixed plan shape, so it runs through `run_plan` like a
Conductor's plan: the same worker prompts, the same context format, the same
token and dollar accounting, the same answer format told to the last step only.
Every subtask carries the question.

Decisions:

- Single worker: one step whose subtask is the question and the answer instruction.
- Self-reflection (the paper's "GPT-5 with 5x self-reflection", read as five
  reflections on an answer): an answer, then ``rounds`` critique-and-revise calls to
  the same worker, strictly in turn (``rounds + 1`` calls; 6 at the default 5); call
  i > 0 reads only call i-1's answer, critiques it and writes a revised complete
  answer (the question is in each subtask, since a worker sees only its subtask and
  what it may read).
- Mixture-of-Agents (Wang et al. 2024, arXiv 2406.04692) as the paper ran it: by default 2
  layers, every worker proposing once and one aggregator reading all the proposals (8 calls on
  the paper's 7 workers). More layers (`evaluate.moa_layers`, Wang et al.'s 3): each proposer
  of layer k > 0 reads every answer of layer k - 1; the aggregator reads the last proposer
  layer. Calls: ``len(proposers) * (layers - 1) + 1``. The proposers default to every worker;
  the aggregator is `evaluate.moa_aggregator`, else the worker with the highest output price
  (`moa_aggregator_of`; the paper names none), and the evaluation's output names it. The engine shows
  each earlier step's subtask beside its answer, so MoA's later layers also pay
  for reading the question once per proposer: its accounting is the engine's, as
  for every other method.
- Random plans: the length is drawn from the Conductor's observed step counts
  (so random differs from the Conductor only in *which* workers and *what*
  access), uniform over 1..max_steps when there are none (`random_lengths_label`
  says which); workers uniform; access ``[]`` or ``"all"`` with equal chance, the
  last step always ``"all"``; every subtask is the question (there is no text
  to randomise without a model).
- Oracle: per question, the worker with the highest share of correct pilot
  verdicts, ties to the cheaper one (a `Price` compares by its input plus
  output dollars per million tokens), then the lower index; pilot ``error``
  verdicts are not verdicts. A question no worker solved goes to the cheapest
  worker (every choice is wrong; the bound should not pay more than it must).
- The best plan of a simulated pool (`optimal_plan`, from conductor_rl/evaluation/optimal.py): a
  solving step's subtask is the question and its answer instruction, as a single worker's; a
  checking step's starts with a check word (`CHECK`) before the question; each reads exactly the
  steps the optimum's step reads. `wording` says what the simulator makes of those subtasks, so the
  optimum is searched among the plans this conversion can write.
- No subtask carries the grader's answer format: the workflow engine gives it to the last step of
  every plan, a baseline's as a Conductor's (`workflow.answer_format`), so neither side is favoured.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Literal

from conductor_rl.plan import Plan, Step
from conductor_rl.workers.sim_rules import has_check_word, on_task

if TYPE_CHECKING:
    from conductor_rl.config import Price
    from conductor_rl.evaluation.optimal import PlanStep

__all__ = [
    "best_worker",
    "correct_tally",
    "moa_plan",
    "optimal_plan",
    "oracle_worker",
    "price_key",
    "random_lengths_label",
    "random_plan",
    "reflection_plan",
    "single_plan",
    "wording",
]

REFLECT = (
    "The step above holds an earlier answer to the question below. First critique it: check its reasoning and "
    "its final answer for mistakes, gaps and unjustified steps. Then write a revised, complete answer to the "
    "question (keep what was right, fix what was wrong)."
)
PROPOSE_AGAIN = (
    "The steps above hold answers from other assistants to the question below; any of them may be wrong. "
    "Weigh them critically and write your own improved, complete answer to the question: do not just pick "
    "one or list them."
)
AGGREGATE = (
    "The steps above hold candidate answers from several assistants to the question below; some may be wrong. "
    "Judge them critically, combine what is correct, and write one final, complete answer to the question."
)
# A checking step of `optimal_plan`: the simulator judges the latest answer a check reads.
CHECK = (
    "Check the last of the earlier answers above and correct it if it is wrong, then write the complete "
    "answer to the question below."
)


def _ask(question: str, preamble: str = "") -> str:
    return f"{preamble}\n\nQuestion:\n{question}" if preamble else question


def single_plan(question: str, worker: int) -> Plan:
    """One call: `worker` answers the question."""
    return Plan((Step(worker, _ask(question), []),))


def reflection_plan(question: str, worker: int, rounds: int = 5) -> Plan:
    """`rounds + 1` calls to `worker` in turn: an answer, then `rounds` critique-and-revise steps."""
    if rounds < 1:
        raise ValueError(f"reflection needs at least 1 round, got {rounds}")
    revise = _ask(question, REFLECT)
    steps = [Step(worker, _ask(question), [])]
    steps += [Step(worker, revise, [i - 1]) for i in range(1, rounds + 1)]
    return Plan(tuple(steps))


def moa_plan(question: str, proposers: Sequence[int], aggregator: int, layers: int = 2) -> Plan:
    """Mixture-of-Agents: `layers - 1` proposer layers, each reading the one before, then the aggregator."""
    if layers < 2 or not proposers:
        raise ValueError(f"MoA needs at least 2 layers and one proposer, got {layers} layers and {list(proposers)}")
    first, again = _ask(question), _ask(question, PROPOSE_AGAIN)
    steps: list[Step] = []
    previous: list[int] = []
    for _layer in range(layers - 1):
        start = len(steps)
        steps += [Step(p, again if previous else first, list(previous)) for p in proposers]
        previous = list(range(start, len(steps)))
    steps.append(Step(aggregator, _ask(question, AGGREGATE), previous))
    return Plan(tuple(steps))


def random_plan(
    question: str,
    n_workers: int,
    lengths: Sequence[int],
    rng: random.Random,
    max_steps: int = 5,
) -> Plan:
    """A random valid plan; its length is drawn from `lengths` (the Conductor's observed
    step counts), or uniformly from 1..`max_steps` when `lengths` is empty."""
    bad = [n for n in lengths if not 1 <= n <= max_steps]
    if bad or n_workers < 1:
        raise ValueError(
            f"random plans need n_workers >= 1 and lengths from 1 to {max_steps}; "
            f"got n_workers={n_workers}, lengths {sorted(set(bad))}"
        )
    n = rng.choice(list(lengths)) if lengths else rng.randint(1, max_steps)
    subtask = _ask(question)

    def access(i: int) -> list[int] | Literal["all"]:
        if i == n - 1:
            return "all"
        return [] if i == 0 or rng.random() < 0.5 else "all"  # step 0 has nothing to read

    return Plan(tuple(Step(rng.randrange(n_workers), subtask, access(i)) for i in range(n)))


def optimal_plan(steps: Sequence[PlanStep], question: str) -> Plan:
    """A plan of optimal.py's family as the engine runs it: solving steps ask the question as
    `single_plan` does, checking steps ask to check the latest answer they read (`CHECK`), and every
    step reads exactly the steps it reads there."""
    solve, check = _ask(question), _ask(question, CHECK)
    return Plan(tuple(Step(s.worker, check if s.role == "check" else solve, sorted(s.reads)) for s in steps))


def wording(question: str) -> tuple[bool, bool]:
    """What the simulator (conductor_rl/workers/sim_rules.py) makes of `optimal_plan`'s subtasks for
    this question: whether they are on task (the question has a content word), and whether a solving
    step that reads earlier answers stays a solve (its subtask holds no check word, which a question
    may: "verify which ..."). The `on_task` and `solve_reads` of optimal.py."""
    solve = _ask(question)
    return on_task(solve, question), not has_check_word(solve)


def random_lengths_label(lengths: Sequence[int], max_steps: int = 5) -> str:
    """Where `random_plan`'s lengths come from, for the report."""
    if lengths:
        return f"step counts of {len(lengths)} Conductor plans"
    return f"uniform 1..{max_steps} steps (no Conductor plans were observed)"


Judged = str | float | Sequence[object] | None
"""One worker's pilot evidence on one question: its verdicts over repeats ("correct",
"wrong", "plan_error", "error" or `Verdict`s), one verdict, a bool (solved), or its
share of correct repeats (a number from 0 to 1); None or [] when it has none."""


def correct_tally(judged: Judged) -> tuple[Fraction, Fraction] | None:
    """(correct, scored) verdicts of one worker's evidence on one question; a flag or a share counts
    as one verdict (a share is a fraction of one correct); ``error`` verdicts are not verdicts. None
    when there is no evidence."""
    if judged is None:
        return None
    if isinstance(judged, bool):
        return Fraction(int(judged)), Fraction(1)
    if isinstance(judged, (int, float)):
        if not 0 <= judged <= 1:
            raise ValueError(f"a worker's share of correct repeats must be from 0 to 1, got {judged}")
        return Fraction(judged), Fraction(1)
    verdicts = [judged] if isinstance(judged, str) else list(judged)  # one verdict, not its letters
    scored = [str(v) for v in verdicts if str(v) != "error"]
    return (Fraction(scored.count("correct")), Fraction(len(scored))) if scored else None


def _correct_share(judged: Judged) -> Fraction | None:
    tally = correct_tally(judged)
    return None if tally is None else tally[0] / tally[1]


def price_key(price: float | Price) -> float:
    """A price as one number to compare: a `Price` is its dollars per million input plus output tokens."""
    return float(price) if isinstance(price, (int, float)) else price.input + price.output


def _check(verdicts_by_worker: Sequence[Judged], prices: Sequence[float | Price]) -> list[float]:
    if len(prices) != len(verdicts_by_worker):
        raise ValueError(f"one price per worker: {len(prices)} prices for {len(verdicts_by_worker)} workers")
    return [price_key(p) for p in prices]


def best_worker(verdicts_by_worker: Sequence[Judged], prices: Sequence[float | Price]) -> int | None:
    """The worker most often correct on one question (see `Judged`); ties go to the
    cheaper worker, then the lower index. None when no worker was ever correct."""
    costs = _check(verdicts_by_worker, prices)
    shares = [_correct_share(v) for v in verdicts_by_worker]
    solved = [i for i, s in enumerate(shares) if s]
    if not solved:
        return None
    return min(solved, key=lambda i: (-shares[i], costs[i], i))  # type: ignore[operator]


def oracle_worker(verdicts_by_worker: Sequence[Judged], prices: Sequence[float | Price]) -> int | None:
    """The oracle's worker for one question: `best_worker`, or the cheapest worker
    with a verdict when none was correct; None when no worker has a verdict."""
    costs = _check(verdicts_by_worker, prices)
    best = best_worker(verdicts_by_worker, prices)
    if best is not None:
        return best
    judged = [i for i, v in enumerate(verdicts_by_worker) if _correct_share(v) is not None]
    return min(judged, key=lambda i: (costs[i], i)) if judged else None
