"""Free-form reference answers (as in RLPR): string match, math-verify, then an LLM judge.

A general-domain reference ("the mitochondria", "1.5 m/s", "Paris, France")
has no fixed format. `FreeformGrader` decides in three steps, stopping at the
first that says CORRECT:

1. normalised string match of the extracted answer (`extract_exact`,
   `normalize_text`: case, spacing, ``\\boxed{}``, edge punctuation);
2. mathematical equivalence with math-verify (`MathGrader`), for answers that
   are numbers or formulas; its failures are not fatal here (the reference
   may simply not be maths);
3. optionally, an LLM judge: any object with the worker interface
   (``async complete(WorkerRequest) -> WorkerResponse``), asked whether the
   answer means the same as the reference; it must end with
   ``VERDICT: CORRECT`` or ``VERDICT: INCORRECT``.

Without a judge, an answer that fails 1 and 2 is WRONG. With one, the judge
decides; a judge that fails (provider error, timeout, no verdict line) is
ERROR, never WRONG.
"""

from __future__ import annotations

import asyncio
import re

from conductor_rl.grading.answers import extract_exact, normalize_text, strip_reasoning
from conductor_rl.grading.math import MathGrader
from conductor_rl.grading.verdict import GradeResult, Verdict
from conductor_rl.workers.providers.base import Provider, WorkerRequest

__all__ = ["JUDGE_SYSTEM_PROMPT", "FreeformGrader", "judge_messages"]

JUDGE_SYSTEM_PROMPT = (
    "You grade answers against a reference answer. Decide whether the candidate's final answer "
    "means the same as the reference (equivalent wording, units, or form count as the same; a "
    "partly correct, hedged, or multiple-choice-of-answers reply does not). Ignore the candidate's "
    "reasoning. End your reply with exactly one line: 'VERDICT: CORRECT' or 'VERDICT: INCORRECT'."
)
_VERDICT = re.compile(r"VERDICT\s*:\s*\**\s*(CORRECT|INCORRECT)\b", re.IGNORECASE)
MAX_JUDGED_CHARS = 4000
"""The candidate answer shown to the judge is cut to its last this many characters."""


def judge_messages(question: str, reference: str, answer: str) -> list[dict[str, str]]:
    """The chat messages the judge sees."""
    parts = []
    if question.strip():
        parts.append(f"Question:\n{question.strip()}")
    parts.append(f"Reference answer:\n{reference.strip()}")
    parts.append(f"Candidate answer:\n{answer.strip()[-MAX_JUDGED_CHARS:]}")
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


class FreeformGrader:
    """Grade free-form answers; see the module docstring for the order of checks.

    Args:
        math: the math-verify grader (None: string match and judge only).
        judge: a worker used as judge (None: no judge).
        judge_max_tokens: token budget of one judgement (reasoning models need more).
        judge_timeout_s: longest wait for the judge before the verdict is ERROR.
    """

    def __init__(
        self,
        math: MathGrader | None = None,
        judge: Provider | None = None,
        *,
        judge_max_tokens: int = 1024,
        judge_timeout_s: float = 120.0,
    ) -> None:
        self.math = math
        self.judge = judge
        self.judge_max_tokens = judge_max_tokens
        self.judge_timeout_s = judge_timeout_s

    def _without_judge(self, response: str, reference: str) -> GradeResult:
        if not reference or not normalize_text(reference):
            raise ValueError(f"freeform reference is empty after normalisation: {reference!r}")
        answer = extract_exact(response)
        if answer is None:
            return GradeResult(Verdict.WRONG, None, "empty response")
        if normalize_text(answer) == normalize_text(reference):
            return GradeResult(Verdict.CORRECT, answer, "matches the reference")
        if self.math is not None:
            checked = self.math.grade(response, reference)
            if checked.verdict is Verdict.CORRECT:
                return GradeResult(Verdict.CORRECT, checked.extracted or answer, "mathematically equivalent")
        return GradeResult(Verdict.WRONG, answer, "does not match the reference")

    async def agrade(self, response: str, reference: str, question: str = "") -> GradeResult:
        """Grade one answer (async: the judge is awaited on the running loop)."""
        local = await asyncio.to_thread(self._without_judge, response, reference)
        if local.verdict is Verdict.CORRECT or self.judge is None or local.extracted is None:
            return local
        request = WorkerRequest(
            messages=judge_messages(question, reference, strip_reasoning(response)),
            max_tokens=self.judge_max_tokens,
            temperature=0.0,
        )
        try:
            reply = await asyncio.wait_for(self.judge.complete(request), self.judge_timeout_s)
        except TimeoutError:
            return GradeResult(Verdict.ERROR, local.extracted, f"judge timed out after {self.judge_timeout_s:g}s")
        except Exception as exc:  # the judge's failure, not the answer's
            return GradeResult(Verdict.ERROR, local.extracted, f"judge failed: {type(exc).__name__}: {exc}")
        found = _VERDICT.findall(strip_reasoning(reply.text or ""))
        if not found:
            return GradeResult(
                Verdict.ERROR, local.extracted, f"judge gave no verdict line: {(reply.text or '')[-200:]!r}"
            )
        if found[-1].upper() == "CORRECT":
            return GradeResult(Verdict.CORRECT, local.extracted, "judged equivalent to the reference")
        return GradeResult(Verdict.WRONG, local.extracted, "judged different from the reference")

    def grade(self, response: str, reference: str, question: str = "") -> GradeResult:
        """Grade from synchronous code (a thread, not an event loop's thread).

        The judge runs on a fresh event loop here; a judge whose client is bound
        to another loop must be used through `agrade` instead."""
        if self.judge is None:
            return self._without_judge(response, reference)
        return asyncio.run(self.agrade(response, reference, question))
