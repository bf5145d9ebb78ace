"""A second yardstick: a linear policy over what the Conductor itself sees where it picks its first worker.

The tabular policy (tabular.py) is told each question's domain. This one is told nothing but the
Conductor model's last hidden state at the position that picks the plan's first worker (the prompt's
last token under the embedded format, whose response prefix ends with `model_id = [`), computed once
by the model before any training: its logits over the plan family are `W (h - mean h)`, W starting at
zero (uniform, as the tabular policy starts), learnt by the same GRPO step on the same rollouts.

What it reaches says whether the Conductor's own representation of a question holds what the testbed
rewards: if it does as well as the tabular policy, a plan's choice can be read off the model's state
with the rollouts training has, and what keeps the LLM from routing is how its step moves that
readout, not what its state holds.

Decisions:
- The state is centred on its mean over the training questions (`centred`): the raw state's mean is
  several times larger than the part that differs between domains, and a step on raw states moves
  every question's logits alike first (the benchmark reports both, `centre=False` for the raw one).
- Only the first choice's position is read; a plan's later choices follow from the whole plan's logit,
  as in the tabular policy, so the yardstick is about what the prompt's state holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from conductor_rl.config import WorkerConfig
from conductor_rl.data import Question

from .tabular import PlanPolicy, TabularResult, follow_grpo


def choice_states(model: Any, prompt_ids: Mapping[str, list[int]]) -> dict[str, torch.Tensor]:
    """The model's last hidden state (after its final norm, the head's input) at the last prompt token,
    for each question's prompt ids (`ConductorPrompt.question_ids`), in float64."""
    states = {}
    with torch.no_grad():
        for text, ids in prompt_ids.items():
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True, logits_to_keep=1)
            states[text] = out.hidden_states[-1][0, -1].double()
    return states


def centred(states: Mapping[str, torch.Tensor], over: Sequence[Question]) -> dict[str, torch.Tensor]:
    """Every state less the mean state of the questions `over` (the training questions)."""
    mean = torch.stack([states[q.question] for q in over]).mean(0)
    return {text: h - mean for text, h in states.items()}


def state_geometry(states: Mapping[str, torch.Tensor], questions: Sequence[Question]) -> dict[str, float]:
    """How the states of `questions` lie: the length of their mean (`mean_norm`), half the distance
    between two domains' means (`domain_half_gap`, the part a readout can route by), and the mean
    distance of a state from its domain's mean (`within_domain`). Needs exactly two domains."""
    by_domain: dict[str, list[torch.Tensor]] = {}
    for q in questions:
        by_domain.setdefault(q.domain, []).append(states[q.question].double())
    if len(by_domain) != 2:
        raise ValueError(f"state_geometry compares two domains, got {sorted(by_domain)}")
    first, second = (torch.stack(v) for v in by_domain.values())
    within = torch.cat([first - first.mean(0), second - second.mean(0)]).norm(dim=1).mean()
    return {
        "mean_norm": float(torch.cat([first, second]).mean(0).norm()),
        "domain_half_gap": float((first.mean(0) - second.mean(0)).norm() / 2),
        "within_domain": float(within),
    }


class ReadoutPolicy(PlanPolicy):
    """Logits over the plan family `W h` for a question's state h (a linear softmax policy)."""

    observe = "choice_state"

    def __init__(self, workers: Sequence[WorkerConfig], max_steps: int, states: Mapping[str, torch.Tensor]) -> None:
        super().__init__(workers, max_steps)
        self.states = {text: h.double() for text, h in states.items()}
        width = next(iter(states.values())).shape[0]
        self.weights = torch.zeros(len(self.family), width, dtype=torch.float64)

    def state(self, question: Question) -> torch.Tensor:
        if question.question not in self.states:
            raise KeyError(f"no Conductor state for question {question.id!r}: compute choice_states for it first")
        return self.states[question.question]

    def logits(self, question: Question) -> torch.Tensor:
        return self.weights @ self.state(question)

    def update(self, steps: Sequence[tuple[Question, torch.Tensor]]) -> None:
        # The gradient of W h is the logits' gradient times h: every step first, then W changes.
        delta = sum(torch.outer(step, self.state(q)) for q, step in steps)
        self.weights += delta


def readout_grpo(
    train_questions: Sequence[Question],
    eval_questions: Sequence[Question],
    workers: Sequence[WorkerConfig],
    states: Mapping[str, torch.Tensor],
    *,
    max_steps: int,
    centre: bool = True,
    **grpo: Any,
) -> TabularResult:
    """`follow_grpo` of a fresh `ReadoutPolicy` over `states` (centred on the training questions'
    mean unless `centre=False`); the keywords are `follow_grpo`'s."""
    shown = centred(states, train_questions) if centre else dict(states)
    policy = ReadoutPolicy(workers, max_steps, shown)
    return follow_grpo(policy, train_questions, eval_questions, **grpo)
