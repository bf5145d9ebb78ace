"""The yardstick a Conductor's learning is held to on a simulated pool: a tabular softmax policy.

The policy keeps one logit per plan of the optimal-plan family (conductor_rl/evaluation/optimal.py)
for each kind of question it can tell apart, and learns with the GRPO step training takes: the
same questions per iteration, drawn in the same order (conductor_rl/data/stream.py), the same
group size and number of iterations, group-relative advantages (conductor_rl/policy/grpo.py), one
step per batch, so the clipped ratio is 1 and the step is the policy gradient. Its rewards are
drawn from the simulator's exact expectations (conductor_rl/workers/sim_expectation.py): right
(reward 1) with a plan's exact accuracy, else wrong (0.5). Its policy's value is exact: the sum
over plans of probability times expected reward. What it reaches after as many rollouts as the
Conductor had says how many rollouts the testbed needs; an LLM that shares what it learns
between questions may need fewer, one that must also learn to word its subtasks may need more.

Decisions:
- It starts uniform over the family, as the warm start's demonstrations are drawn
  (conductor_rl/plan/demonstrations.py).
- What it observes (`observe`): "domain_difficulty" (the question's domain and difficulty, which
  the simulator's rules read; an LLM sees only the question's text, from which a MATH level is
  hard to guess), or "domain" (one table per domain).
- The step is plain gradient ascent on the logits, lr per step, the loss a mean over the batch's
  rollouts as training's token mean is over its tokens (a plan is one token here). Its learning
  rate has no counterpart in the LLM's; the benchmark tries a few and reports the best, so the
  yardstick is what GRPO can do with these rollouts at its best.
- `PlanPolicy` holds what every such yardstick shares (the family, exact values, the GRPO step);
  conductor_rl/evaluation/readout.py is the other one, a linear policy over the Conductor's own state.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from conductor_rl.config import WorkerConfig
from conductor_rl.data import Question
from conductor_rl.data.difficulty import difficulty_of
from conductor_rl.data.stream import QuestionStream
from conductor_rl.policy.grpo import group_advantages
from conductor_rl.workers.sim_expectation import accuracy_of, sim_specs, step_chances

from .optimal import plan_family, value_of

Observe = Literal["domain", "domain_difficulty"]
Kind = tuple[str, float]  # (domain, difficulty)


def kind_of(question: Question) -> Kind:
    return (question.domain, difficulty_of(question.source, question.meta))


@dataclass
class TabularResult:
    """What a yardstick policy reached: its exact expected reward on the evaluation questions after each
    iteration (`curve`, index 0 before any step), and that of the best plans. `observe`: what it saw."""

    lr: float
    observe: str
    curve: list[float] = field(default_factory=list)
    optimal_reward: float = 0.0

    @property
    def fraction_of_optimal_reward(self) -> float:
        return self.curve[-1] / self.optimal_reward

    def iterations_to(self, fraction: float) -> int | None:
        """The first iteration after which the policy reaches `fraction` of the optimal reward (None: never)."""
        return next((i for i, v in enumerate(self.curve) if v >= fraction * self.optimal_reward), None)


class PlanPolicy:
    """A softmax over the plan family for each question, with exact plan values per question kind, that
    learns by training's GRPO step. Subclasses say what its logits for a question are (`logits`) and how
    a step on them changes its parameters (`update`)."""

    observe: str

    def __init__(self, workers: Sequence[WorkerConfig], max_steps: int) -> None:
        specs = sim_specs(workers)
        if specs is None:
            raise ValueError("a yardstick policy needs a pool of simulated workers (provider 'sim')")
        self.specs = specs
        self.family = list(plan_family(len(specs), max_steps))
        self._values: dict[Kind, torch.Tensor] = {}

    def logits(self, question: Question) -> torch.Tensor:
        raise NotImplementedError

    def update(self, steps: Sequence[tuple[Question, torch.Tensor]]) -> None:
        """Add to each question's logits its step (already scaled by the learning rate), as its parameters allow."""
        raise NotImplementedError

    def probabilities(self, question: Question) -> torch.Tensor:
        return torch.softmax(self.logits(question), dim=0)

    def accuracies(self, kind: Kind) -> torch.Tensor:
        """Each plan's exact accuracy on a question of this kind."""
        if kind not in self._values:
            chances = step_chances(self.specs, *kind)
            self._values[kind] = torch.tensor([accuracy_of(p, chances) for p in self.family], dtype=torch.float64)
        return self._values[kind]

    def expected_reward(self, questions: Sequence[Question]) -> float:
        """The policy's exact expected training reward, averaged over `questions`."""
        total = 0.0
        for q in questions:
            total += float((self.probabilities(q) * (0.5 + 0.5 * self.accuracies(kind_of(q)))).sum())
        return total / len(questions)

    def step(self, questions: Sequence[Question], group_size: int, lr: float, rng: random.Random) -> None:
        """One GRPO step: `group_size` plans sampled per question, rewards drawn from their exact accuracies."""
        draws, rewards = [], []
        for q in questions:
            probs = self.probabilities(q)
            plans = rng.choices(range(len(self.family)), weights=probs.tolist(), k=group_size)
            accuracy = self.accuracies(kind_of(q))
            draws.append((q, probs, plans))
            rewards += [1.0 if rng.random() < float(accuracy[p]) else 0.5 for p in plans]
        advantages = group_advantages(torch.tensor(rewards), group_size).advantages.double()
        steps = []
        for g, (q, probs, plans) in enumerate(draws):
            grad = torch.zeros(len(self.family), dtype=torch.float64)
            for i, plan in enumerate(plans):
                a = advantages[g * group_size + i]
                grad -= a * probs  # d log softmax(plan) / d logits = onehot(plan) - probs
                grad[plan] += a
            steps.append((q, lr * grad / len(rewards)))
        self.update(steps)


class TabularPolicy(PlanPolicy):
    """One logit per plan for each kind of question it can tell apart (`observe`)."""

    def __init__(self, workers: Sequence[WorkerConfig], max_steps: int, observe: Observe = "domain_difficulty") -> None:
        super().__init__(workers, max_steps)
        self.observe = observe
        self.table: dict[object, torch.Tensor] = {}

    def state(self, question: Question) -> object:
        kind = kind_of(question)
        return kind[0] if self.observe == "domain" else kind

    def logits(self, question: Question) -> torch.Tensor:
        state = self.state(question)
        if state not in self.table:
            self.table[state] = torch.zeros(len(self.family), dtype=torch.float64)
        return self.table[state]

    def update(self, steps: Sequence[tuple[Question, torch.Tensor]]) -> None:
        for question, step in steps:
            self.logits(question).add_(step)


def follow_grpo(
    policy: PlanPolicy,
    train_questions: Sequence[Question],
    eval_questions: Sequence[Question],
    *,
    iterations: int,
    questions_per_iteration: int,
    group_size: int,
    lr: float,
    seed: int = 0,
    balance_domains: bool = False,
) -> TabularResult:
    """Train `policy` as training would train the Conductor (same draws of questions from
    `train_questions` for `seed`) and follow its exact expected reward on `eval_questions`."""
    best = [float(policy.accuracies(kind_of(q)).max()) for q in eval_questions]
    result = TabularResult(lr, policy.observe, optimal_reward=sum(value_of(a, 0.0) for a in best) / len(best))
    stream = QuestionStream(list(train_questions), seed=seed, balance_domains=balance_domains)
    rng = random.Random(f"tabular/{seed}")
    result.curve.append(policy.expected_reward(eval_questions))
    for _ in range(iterations):
        policy.step(stream.take(questions_per_iteration), group_size, lr, rng)
        result.curve.append(policy.expected_reward(eval_questions))
    if not all(math.isfinite(v) for v in result.curve):
        raise FloatingPointError(f"the {policy.observe} policy diverged at lr={lr}: lower it")
    return result


def tabular_grpo(
    train_questions: Sequence[Question],
    eval_questions: Sequence[Question],
    workers: Sequence[WorkerConfig],
    *,
    max_steps: int,
    observe: Observe = "domain_difficulty",
    **grpo: Any,
) -> TabularResult:
    """`follow_grpo` of a fresh `TabularPolicy` (the keywords: `follow_grpo`'s)."""
    return follow_grpo(TabularPolicy(workers, max_steps, observe), train_questions, eval_questions, **grpo)
