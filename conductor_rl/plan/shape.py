"""The shape a sampled plan must have: how many workers it may name, how many
steps and subtask tokens it may write, and whether it may be empty.

Samplers enforce it (conductor_rl/policy/sampling.py: vLLM with a regular
expression, transformers with `PlanConstraint`'s token mask); the prompts that
ask for a plan carry it (conductor_rl/plan/prompts.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PlanShape:
    """Constrain samples to well-formed plans (see conductor_rl/plan/constrained.py).
    vLLM enforces it with a regular expression (subtask length in characters,
    4 per token), transformers with a token-level logits processor."""

    n_workers: int
    max_steps: int
    max_subtask_tokens: int = 96
    prefix: str = ""  # already at the end of the prompt (a start of 'model_id = [')
    allow_empty: bool = False  # the empty plan ("stop, keep the current answer") may be sampled too
    ids: tuple[int, ...] | None = None  # the numbers the prompt listed, in roster order (None: 0..n_workers-1)

    def __post_init__(self) -> None:
        if self.ids is not None and len(self.ids) != self.n_workers:
            raise ValueError(f"{len(self.ids)} ids for {self.n_workers} workers: give one id per listed worker")

    @property
    def model_ids(self) -> tuple[int, ...]:
        """The ids a plan of this shape may write."""
        return tuple(range(self.n_workers)) if self.ids is None else self.ids


#: One shape for every prompt, one per prompt (prompts with rosters of different sizes), or None.
Shapes = PlanShape | Sequence[PlanShape | None] | None


def shape_per_prompt(shape: Shapes, n_prompts: int) -> list[PlanShape | None]:
    """Each prompt's shape (None: unconstrained)."""
    if shape is None or isinstance(shape, PlanShape):
        return [shape] * n_prompts
    if len(shape) != n_prompts:
        raise ValueError(f"{len(shape)} plan shapes for {n_prompts} prompts: give one shape, or one per prompt")
    return list(shape)
