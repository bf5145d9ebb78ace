"""The order in which training draws questions: reshuffled every epoch, and a
pure function of (seed, cursor), so a resumed run draws exactly the batch that
would have come next from the cursor alone (no generator state to save)."""

from __future__ import annotations

import random
from typing import Sequence

from .question import Question


class QuestionStream:
    def __init__(self, questions: Sequence[Question], seed: int = 0, cursor: int = 0) -> None:
        if not questions:
            raise ValueError("the training set is empty: check data.questions (and data.limit)")
        if cursor < 0:
            raise ValueError(f"cursor must be >= 0, got {cursor}")
        self.questions = list(questions)
        self.seed = seed
        self.cursor = cursor   # questions drawn so far, over all epochs

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.questions)))
        random.Random(f"{self.seed}/{epoch}").shuffle(order)
        return order

    def peek(self, n: int) -> list[Question]:
        """The next `n` questions, without drawing them."""
        size = len(self.questions)
        out, position = [], self.cursor
        for _ in range(n):
            epoch, index = divmod(position, size)
            out.append(self.questions[self._order(epoch)[index]])
            position += 1
        return out

    def take(self, n: int) -> list[Question]:
        batch = self.peek(n)
        self.cursor += n
        return batch
