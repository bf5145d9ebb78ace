"""Graders: decide whether the workflow's final answer is correct.

``grade(kind, response, reference)`` is the single entry point; ``reward``
turns its verdict into the Conductor's reward (1 correct, 0.5 wrong, 0 for an
unparsable plan, ``None`` for a grader failure, which is never scored).

Kinds:

* ``"math"``: mathematical equivalence with math-verify (`MathGrader`, in a
  killable child process);
* ``"choice"``: multiple choice letters A, B, ... (`grade_choice`);
* ``"exact"``: normalised string match (`grade_exact`);
* ``"numeric"``: GSM8K-style numbers (`grade_numeric`);
* ``"code_humaneval"``, ``"code_stdio"``, ``"code_call"``, ``"code_unittest"``:
  the answer's program run against the tests in the question's ``meta`` in
  the sandbox (`grade_code`, `conductor_rl.grading.sandbox`);
* ``"freeform"``: free-form reference answers as in RLPR (`FreeformGrader`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conductor_rl.data.boxed import last_boxed
from conductor_rl.grading.answers import (
    extract_choice,
    extract_exact,
    extract_number,
    grade_choice,
    grade_exact,
    grade_numeric,
    normalize_text,
    strip_reasoning,
)
from conductor_rl.grading.code import CODE_KINDS, extract_code, grade_code
from conductor_rl.grading.freeform import FreeformGrader
from conductor_rl.grading.math import MathGrader, default_math_grader
from conductor_rl.grading.sandbox import Sandbox
from conductor_rl.grading.verdict import (
    REWARD_CORRECT,
    REWARD_FORMAT,
    REWARD_WRONG,
    SCORED_VERDICTS,
    GradeResult,
    Verdict,
    reward,
)

__all__ = [
    "CODE_KINDS",
    "KINDS",
    "REWARD_CORRECT",
    "REWARD_FORMAT",
    "REWARD_WRONG",
    "SCORED_VERDICTS",
    "FreeformGrader",
    "GradeResult",
    "MathGrader",
    "Verdict",
    "default_math_grader",
    "extract_choice",
    "extract_code",
    "extract_exact",
    "extract_number",
    "grade",
    "grade_choice",
    "grade_code",
    "grade_exact",
    "grade_numeric",
    "last_boxed",
    "normalize_text",
    "reward",
    "strip_reasoning",
]

KINDS = ("math", "choice", "exact", "numeric", "freeform", *CODE_KINDS)
REFERENCE_FREE_KINDS = CODE_KINDS
"""Kinds graded against tests in the question's meta, not a reference answer."""


def grade(
    kind: str,
    response: str,
    reference: str,
    *,
    math: MathGrader | None = None,
    n_choices: int = 4,
    meta: Mapping[str, Any] | None = None,
    sandbox: Sandbox | None = None,
    freeform: FreeformGrader | None = None,
) -> GradeResult:
    """Grade one final answer.

    Args:
        kind: one of `KINDS`.
        response: the last worker's answer text.
        reference: the reference answer (a letter for ``"choice"``).
        math: the `MathGrader` for ``"math"``; ``None`` uses the process-wide
            `default_math_grader()`.
        n_choices: how many letters a ``"choice"`` question has.
        meta: the question's ``meta``; the code kinds read their tests from it.
        sandbox: the `Sandbox` code runs in (default: one with default limits).
        freeform: the `FreeformGrader` for ``"freeform"`` (default: string match
            and math-verify, no judge); ``meta["question"]`` is shown to its judge.

    Returns:
        The `GradeResult`. This never raises for a bad response: an empty or
        garbage response is ``WRONG``; any internal failure (a bad reference,
        math-verify crashing or timing out, a bug in a grader) is ``ERROR``
        with the reason in ``detail``. A response that is not a string (for
        example ``None`` from a failed worker) is ``ERROR`` too: there is no
        answer to blame the policy for.

    Raises:
        ValueError: `kind` is not one of the kinds above (a programming error).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown grader kind {kind!r}; allowed kinds: {', '.join(KINDS)}")
    if not isinstance(response, str):
        return GradeResult(Verdict.ERROR, None, f"response is not a string: {type(response).__name__}")
    try:
        if kind in CODE_KINDS:
            return grade_code(kind, response, meta, sandbox=sandbox)
        if kind == "freeform":
            grader = freeform or FreeformGrader(math=math if math is not None else default_math_grader())
            return grader.grade(response, reference, str((meta or {}).get("question", "")))
        if kind == "math":
            return (math if math is not None else default_math_grader()).grade(response, reference)
        if kind == "choice":
            return grade_choice(response, reference, n_choices=n_choices)
        if kind == "exact":
            return grade_exact(response, reference)
        return grade_numeric(response, reference)
    except Exception as exc:  # the grader's failure, not the policy's
        return GradeResult(Verdict.ERROR, None, f"{kind} grader failed: {type(exc).__name__}: {exc}")
