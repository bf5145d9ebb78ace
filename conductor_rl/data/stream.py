"""The order in which training draws questions: reshuffled every epoch, and a
pure function of (seed, cursor), so a resumed run draws exactly the batch that
would have come next from the cursor alone (no generator state to save).

With `balance_domains`, draws take turns over the domains (sorted by name), each
domain with its own reshuffled order, so a batch of B questions holds each
domain B / D times. Why: with a handful of questions per iteration, a batch that
happens to be all math pushes the policy towards the math expert for every
question, and the next batch pushes it elsewhere; the per-domain preference the
Conductor should learn is then lost in that drift (measured on the embedded
default: both domains collapsed onto one worker).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .question import Question


class QuestionStream:
    def __init__(
        self, questions: Sequence[Question], seed: int = 0, cursor: int = 0, balance_domains: bool = False
    ) -> None:
        if not questions:
            raise ValueError("the training set is empty: check data.questions (and data.limit)")
        if cursor < 0:
            raise ValueError(f"cursor must be >= 0, got {cursor}")
        self.questions = list(questions)
        self.seed = seed
        self.cursor = cursor  # questions drawn so far, over all epochs
        if balance_domains:
            domains = sorted({q.domain for q in self.questions})
            self.pools = [[q for q in self.questions if q.domain == d] for d in domains]
        else:
            self.pools = [self.questions]

    def _order(self, pool: int, epoch: int) -> list[int]:
        order = list(range(len(self.pools[pool])))
        # The unbalanced stream keeps its historical key, so its order is unchanged.
        key = f"{self.seed}/{epoch}" if len(self.pools) == 1 else f"{self.seed}/{pool}/{epoch}"
        random.Random(key).shuffle(order)
        return order

    def peek(self, n: int) -> list[Question]:
        """The next `n` questions, without drawing them."""
        out = []
        for position in range(self.cursor, self.cursor + n):
            pool, turn = position % len(self.pools), position // len(self.pools)
            epoch, index = divmod(turn, len(self.pools[pool]))
            out.append(self.pools[pool][self._order(pool, epoch)[index]])
        return out

    def take(self, n: int) -> list[Question]:
        batch = self.peek(n)
        self.cursor += n
        return batch
