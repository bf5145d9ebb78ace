"""One process's grading service: every kind, a bounded number of sandboxes at once.

`Grader` holds what grading needs and is costly to make (a `Sandbox` with the
configured limits, a math-verify child) and bounds how many programs run at
once. It is what `actors.grader.GraderActor` wraps, and what a single process
can use without Ray. `GradeRequest` is one answer to grade, as it travels to a
grader (plain data, picklable).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from conductor_rl import grading
from conductor_rl.config import GraderConfig
from conductor_rl.grading.math import MathGrader
from conductor_rl.grading.sandbox import Sandbox
from conductor_rl.grading.verdict import GradeResult, Verdict

__all__ = ["GradeRequest", "Grader"]


@dataclass(frozen=True)
class GradeRequest:
    """One answer to grade: `kind` (see `conductor_rl.grading.KINDS`), the
    answer text, the reference, and the question's meta (a code question's tests)."""

    kind: str
    response: str
    reference: str = ""
    meta: dict[str, Any] = field(default_factory=dict, hash=False)
    n_choices: int = 4


class Grader:
    """Grades `GradeRequest`s of any kind; thread-safe.

    At most ``config.concurrency`` requests are graded at once (each runs at most
    one sandboxed program at a time), so a burst cannot start hundreds of
    interpreters on a few cores. `grade` never raises: a failure of the grading
    machinery is an ``ERROR`` verdict.
    """

    def __init__(self, config: GraderConfig | None = None) -> None:
        self.config = config or GraderConfig()
        self.sandbox = Sandbox.from_config(self.config.sandbox)
        # Isolation is checked at the first program: a grader of maths and choices needs none, and a job
        # that grades code checks it before it starts (jobs/common.py, check_sandbox_before_start).
        self.math = MathGrader()
        self._slots = threading.BoundedSemaphore(self.config.concurrency)

    def grade(self, request: GradeRequest) -> GradeResult:
        with self._slots:
            try:
                return grading.grade(
                    request.kind,
                    request.response,
                    request.reference,
                    math=self.math,
                    n_choices=request.n_choices,
                    meta=request.meta,
                    sandbox=self.sandbox,
                )
            except Exception as exc:  # an unknown kind, or anything else that is not the answer's fault
                return GradeResult(Verdict.ERROR, None, f"grader failed: {type(exc).__name__}: {exc}")

    def grade_many(self, requests: Sequence[GradeRequest]) -> list[GradeResult]:
        """Grade in parallel threads (at most ``config.concurrency`` at once), in order."""
        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=min(self.config.concurrency, len(requests))) as pool:
            return list(pool.map(self.grade, requests))

    def close(self) -> None:
        self.math.close()
