"""Verdicts of the graders and the reward they turn into.

The reward follows the paper (arXiv 2512.04388, §3.1) and DESIGN.md's "Reward"
contract:

====================================  ========
what happened                         reward
====================================  ========
the plan could not be parsed          0.0
the final answer is correct           1.0
the final answer is wrong             0.5
the final worker ran out of output    0.5  (verdict ``truncated``: counted apart)
tokens before writing any answer
the grader (or a worker) failed       ``None``
====================================  ========

``None`` is *not* a score: a rollout whose grading failed for reasons that are
not the policy's fault (math-verify crashed or timed out, a bug in a grader, a
worker provider failed) is retried or left out of the batch, and counted in the
metrics. It must never be scored 0.5, or infrastructure trouble would be
learned as "wrong answers".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = [
    "REWARD_CORRECT",
    "REWARD_FORMAT",
    "REWARD_WRONG",
    "SCORED_VERDICTS",
    "GradeResult",
    "Verdict",
    "reward",
]

REWARD_CORRECT = 1.0
"""Reward when the graded final answer matches the reference."""
REWARD_WRONG = 0.5
"""Reward when the plan ran and its final answer is wrong (or missing)."""
REWARD_FORMAT = 0.0
"""Reward when the Conductor's plan could not be parsed."""


class Verdict(str, Enum):
    """The outcome of grading one final answer.

    ``CORRECT`` and ``WRONG`` judge the response. A response that is empty,
    garbage or holds no readable answer is ``WRONG``: that is the policy's fault.
    ``ERROR`` means the *grader* could not decide (it crashed, timed out, was
    given an unusable reference, ...): it says nothing about the response.
    """

    CORRECT = "correct"
    WRONG = "wrong"
    ERROR = "error"
    # The final worker spent its whole output budget (thinking, usually) and wrote no answer.
    # Scored as wrong (the answer is missing, and choosing that worker was the plan's), but
    # kept apart in metrics: a pool whose answers run out of tokens is misconfigured, not bad.
    TRUNCATED = "truncated"

    def __str__(self) -> str:  # "correct", not "Verdict.CORRECT", in logs and traces
        return self.value


#: Verdicts that judge the answer (accuracy counts them); ERROR does not.
SCORED_VERDICTS: tuple[str, ...] = (Verdict.CORRECT.value, Verdict.WRONG.value, Verdict.TRUNCATED.value)


@dataclass(frozen=True)
class GradeResult:
    """One grading decision.

    Attributes:
        verdict: correct, wrong, or error (grader failure; see `Verdict`).
        extracted: the answer that was read from the response, or ``None`` when
            none could be read (then the verdict is ``WRONG`` or ``ERROR``).
        detail: a short human-readable reason, e.g. ``"no boxed answer found"``
            or ``"math-verify timed out after 5.0s"``.
    """

    verdict: Verdict
    extracted: str | None
    detail: str = ""

    @property
    def ok(self) -> bool:
        """True unless the grader failed (the verdict is usable as a reward)."""
        return self.verdict is not Verdict.ERROR


def reward(plan_ok: bool, verdict: Verdict | str | None) -> float | None:
    """The Conductor's reward for one rollout.

    Args:
        plan_ok: whether the Conductor's output parsed into a plan.
        verdict: the grade of the workflow's final answer; ``None`` when there is
            none (the plan did not parse, or the workflow did not finish because
            a worker failed). A plain string such as ``"correct"`` is accepted.

    Returns:
        ``REWARD_FORMAT`` (0.0) if the plan failed to parse, whatever the verdict;
        ``REWARD_CORRECT`` (1.0) for ``CORRECT``; ``REWARD_WRONG`` (0.5) for
        ``WRONG``; and ``None`` for ``ERROR`` or a missing verdict of a parsed
        plan. ``None`` means "no reward": the failure was in the infrastructure
        (grader or worker), not the policy, so the rollout must be retried or
        dropped from the batch (and counted in the metrics), NEVER scored 0.5.
    """
    if not plan_ok:
        return REWARD_FORMAT
    if verdict is None:
        return None
    verdict = Verdict(verdict)
    if verdict is Verdict.CORRECT:
        return REWARD_CORRECT
    if verdict in (Verdict.WRONG, Verdict.TRUNCATED):
        return REWARD_WRONG
    return None
