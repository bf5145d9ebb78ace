"""Free-form reference answers: normalised match, math-verify, and an LLM judge behind the worker interface."""

from __future__ import annotations

import asyncio

from conductor_rl.grading import FreeformGrader, Verdict, grade
from conductor_rl.testing.workers import ScriptedWorker
from conductor_rl.workers.providers.base import ProviderError


def scripted_judge(text: str | None = None, **behaviour) -> ScriptedWorker:
    """A judge worker that answers every judgement with `text` (or fails, or is slow, as `behaviour`
    says: conductor_rl/testing/workers.py), and remembers what it was asked."""
    return ScriptedWorker("judge", text=text, **behaviour)


def test_normalised_match_needs_no_judge():
    judge = scripted_judge("VERDICT: INCORRECT")
    g = FreeformGrader(judge=judge)
    r = g.grade("After some thought, the answer is: **The Mitochondria.**", "the mitochondria")
    assert r.verdict is Verdict.CORRECT and not judge.requests


def test_math_equivalence(math_grader):
    g = FreeformGrader(math=math_grader)
    assert g.grade("So the result is \\boxed{\\frac{1}{2}}", "0.5").verdict is Verdict.CORRECT
    assert g.grade("So the result is \\boxed{3}", "0.5").verdict is Verdict.WRONG


def test_without_judge_a_paraphrase_is_wrong():
    r = FreeformGrader().grade("Answer: the powerhouse organelle of the cell", "mitochondria")
    assert r.verdict is Verdict.WRONG and r.extracted == "the powerhouse organelle of the cell"


def test_judge_decides_paraphrases():
    yes = scripted_judge("The candidate names the same organelle.\nVERDICT: CORRECT")
    r = FreeformGrader(judge=yes).grade("Answer: the powerhouse organelle", "mitochondria", question="Which organelle?")
    assert r.verdict is Verdict.CORRECT
    sent = yes.requests[0].messages[-1]["content"]
    assert "Which organelle?" in sent and "mitochondria" in sent and "powerhouse" in sent
    assert yes.requests[0].temperature == 0.0
    no = scripted_judge("<think>VERDICT: CORRECT</think>Different thing. VERDICT: **INCORRECT**")
    assert FreeformGrader(judge=no).grade("Answer: the nucleus", "mitochondria").verdict is Verdict.WRONG


def test_judge_failures_are_errors_not_wrong():
    cases = [
        scripted_judge("I am not sure."),
        scripted_judge(raises=ProviderError("rate limited", kind="rate_limit")),
        scripted_judge(raises=RuntimeError("bug")),
    ]
    for judge in cases:
        r = FreeformGrader(judge=judge).grade("Answer: nucleus", "mitochondria")
        assert r.verdict is Verdict.ERROR, judge.text
    slow = FreeformGrader(judge=scripted_judge("VERDICT: CORRECT", delay_s=5), judge_timeout_s=0.2)
    r = slow.grade("Answer: nucleus", "mitochondria")
    assert r.verdict is Verdict.ERROR and "timed out" in r.detail


def test_empty_answer_is_wrong_without_asking_the_judge():
    judge = scripted_judge("VERDICT: CORRECT")
    assert FreeformGrader(judge=judge).grade("   ", "mitochondria").verdict is Verdict.WRONG
    assert not judge.requests


def test_agrade_on_a_running_loop():
    g = FreeformGrader(judge=scripted_judge("VERDICT: CORRECT"))
    assert asyncio.run(g.agrade("Answer: powerhouse", "mitochondria")).verdict is Verdict.CORRECT


def test_grade_entry_point(math_grader):
    assert grade("freeform", "The answer is Paris.", "paris", math=math_grader).verdict is Verdict.CORRECT
    assert grade("freeform", "The answer is Rome.", "paris", math=math_grader).verdict is Verdict.WRONG
    assert grade("freeform", "The answer is Rome.", "  ", math=math_grader).verdict is Verdict.ERROR
    judged = grade(
        "freeform",
        "Answer: capital of France",
        "Paris",
        meta={"question": "Q?"},
        freeform=FreeformGrader(judge=scripted_judge("VERDICT: CORRECT")),
    )
    assert judged.verdict is Verdict.CORRECT
