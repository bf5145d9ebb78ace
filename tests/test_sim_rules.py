"""How a simulated step's chance of a right answer is decided (conductor_rl/workers/sim_rules.py),
and the simulated worker acting on it end to end: difficulty, check wording with access, subtasks
that carry the question's content, reproducibility."""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import replace

import pytest

from conductor_rl import grading
from conductor_rl.config import SimSpec, WorkerConfig
from conductor_rl.plan import Plan, Step
from conductor_rl.rollout.workflow import Task, run_plan
from conductor_rl.testing.workers import ScriptedWorker
from conductor_rl.workers.providers.base import TaskHint, WorkerRequest
from conductor_rl.workers.providers.sim import SimProvider
from conductor_rl.workers.sim_rules import (
    CHECK_WORDS,
    STOPWORDS,
    content_words,
    format_answer,
    has_check_word,
    is_right,
    on_task,
    solve_chance,
    step_role,
    success_chance,
)

# --------------------------------------------------------------------------- words


def test_content_words_are_long_lowercase_and_not_stopwords():
    words = content_words("Find the AREA of a right triangle; its legs are 3 and 4 (cm). Then give the answer.")
    assert words == {"area", "right", "triangle", "legs"}
    assert content_words("x_y-z 42 apples2bananas") == {"apples", "bananas"}
    assert content_words("") == frozenset()


def test_the_generic_instruction_words_are_stopwords():
    generic = [
        "solve",
        "answer",
        "question",
        "problem",
        "find",
        "compute",
        "calculate",
        "give",
        "step",
        "steps",
        "final",
        "write",
        "then",
        "using",
        "what",
        "which",
        "this",
        "that",
        "with",
        "from",
        "have",
        "each",
        "there",
        "their",
        "into",
        "about",
        "would",
        "should",
        "could",
        "does",
        "your",
        "they",
        "them",
        "were",
        "been",
        "than",
        "when",
        "will",
        "only",
        "also",
        "more",
        "most",
        "some",
        "such",
        "very",
        "just",
        "over",
        "after",
        "before",
    ]
    assert set(generic) <= STOPWORDS
    assert content_words(" ".join(generic)) == frozenset()


@pytest.mark.parametrize(
    "subtask", ["Check the sum.", "double-check it", "Please re-check step 0", "VERIFY", "proofread and fix"]
)
def test_check_words_are_whole_words_in_any_case(subtask):
    assert has_check_word(subtask)


@pytest.mark.parametrize("subtask", ["Checked earlier?", "a checklist", "incorrectly", "Solve it.", ""])
def test_words_that_only_contain_a_check_word_do_not_count(subtask):
    assert not has_check_word(subtask)


def test_the_check_words():
    assert {"check", "verify", "review", "confirm", "fix", "recheck"} <= CHECK_WORDS
    assert "correct" not in CHECK_WORDS  # "the correct option" asks for no check


def test_on_task_needs_a_shared_content_word():
    question = "How many apples does Sam have after buying 7 bags of 6 apples?"
    assert on_task("Count the apples Sam ends with.", question)
    assert on_task("BAGS times six", question)
    assert not on_task("Solve it.", question)
    assert not on_task("Give the final answer to the question.", question)  # only generic words
    assert not on_task("Count the oranges.", question)


def test_a_check_needs_both_a_check_word_and_a_read_answer():
    assert step_role("Check the earlier answer.", reads_answer=True) == "check"
    assert step_role("Check the earlier answer.", reads_answer=False) == "solve"
    assert step_role("Use the earlier answer.", reads_answer=True) == "solve"
    assert step_role("Use the earlier answer.", reads_answer=False) == "solve"


# --------------------------------------------------------------------------- chances


def spec(**settings: object) -> SimSpec:
    settings.setdefault("accuracy", {"math": 0.9, "default": 0.4})
    return SimSpec(**settings)


def test_solve_chance_falls_linearly_with_difficulty():
    s = spec(hard_accuracy={"math": 0.5, "default": 0.2})
    assert solve_chance(s, "math", 0.0) == 0.9
    assert solve_chance(s, "math", 1.0) == 0.5
    assert solve_chance(s, "math", 0.5) == pytest.approx(0.7)
    assert solve_chance(s, "math", 0.25) == pytest.approx(0.8)
    assert solve_chance(s, "code", 1.0) == 0.2  # "default" in both tables
    assert solve_chance(spec(hard_accuracy={"math": 0.5}), "code", 1.0) == 0.5  # no default there: 0.5
    assert solve_chance(spec(), "math", 1.0) == 0.9  # no hard_accuracy: difficulty changes nothing
    with pytest.raises(ValueError, match="between 0 and 1"):
        solve_chance(s, "math", 1.5)


def test_hard_accuracy_is_validated_like_accuracy():
    with pytest.raises(ValueError, match="hard_accuracy"):
        spec(hard_accuracy={"math": 1.2})
    with pytest.raises(ValueError):
        spec(keep_rate=1.5)
    with pytest.raises(ValueError):
        spec(off_task_factor=-0.1)


def test_a_check_keeps_a_right_answer_or_repairs_wrong_ones():
    s = spec(keep_rate=0.95, repair_rate=0.5, gain_with_context=0.3, off_task_factor=0.1)
    assert success_chance(s, "math", 0.0, "check", True, True, checked_right=True) == 0.95
    assert success_chance(s, "math", 0.0, "check", True, True, checked_right=False) == pytest.approx(0.5 * 0.9)
    # Judged by what it reads, not its wording: no off-task factor, no gain.
    assert success_chance(s, "math", 0.0, "check", False, True, checked_right=True) == 0.95


def test_without_keep_rate_a_check_is_a_solve_with_context():
    s = spec(gain_with_context=0.05)
    assert success_chance(s, "math", 0.0, "check", True, True, True) == pytest.approx(0.95)
    assert success_chance(s, "math", 0.0, "check", True, True, False) == pytest.approx(0.95)


def test_an_off_task_solve_is_scaled():
    s = spec(off_task_factor=0.5, gain_with_context=0.1)
    assert success_chance(s, "math", 0.0, "solve", False, False, False) == pytest.approx(0.45)
    assert success_chance(s, "math", 0.0, "solve", False, True, False) == pytest.approx(0.5)  # (0.9 + 0.1) x 0.5
    assert success_chance(s, "math", 0.0, "solve", True, False, False) == 0.9


def test_chances_are_clipped():
    assert success_chance(spec(gain_with_context=0.5), "math", 0.0, "solve", True, True, False) == 1.0
    assert success_chance(spec(gain_with_context=-0.6), "default", 0.0, "solve", True, True, False) == 0.0


def test_unset_settings_give_todays_formula_exactly():
    rng = random.Random(3)
    for _ in range(300):
        accuracy = {"math": rng.random(), "default": rng.random()}
        s = SimSpec(accuracy=accuracy, gain_with_context=rng.uniform(-1, 1))
        for domain in ("math", "code"):
            for reads in (False, True):
                base = accuracy.get(domain, accuracy.get("default", 0.5))
                if reads:
                    base += s.gain_with_context
                today = min(max(base, 0.0), 1.0)
                for role in ("solve", "check"):
                    for topical in (False, True):
                        for right in (False, True):
                            got = success_chance(s, domain, rng.random(), role, topical, reads, right)
                            assert got == today  # exactly: the same draws give the same answers


# --------------------------------------------------------------------------- recognising right answers

REFERENCES = {
    "math": "\\frac{14}{3}",
    "numeric": "35",
    "choice": "C",
    "code_humaneval": 'def add(a, b):\n    """Add."""\n    return a + b\n',
}


def sim(accuracy: float = 0.5, seed: int = 0, **settings: object) -> SimProvider:
    config = WorkerConfig(name="sim-x", provider="sim", sim=SimSpec(accuracy={"default": accuracy}, **settings))
    return SimProvider(config, seed=seed)


def answer(provider: SimProvider, kind: str, key: str, **hint: object) -> str:
    request = WorkerRequest(
        [{"role": "user", "content": "Solve."}],
        4096,
        0.2,
        None,
        TaskHint("q", "math", REFERENCES[kind], kind, sample_key=key, **hint),  # type: ignore[arg-type]
    )
    return asyncio.run(provider.complete(request)).text


@pytest.mark.parametrize("kind", sorted(REFERENCES))
def test_is_right_recognises_the_simulators_own_answers(kind):
    reference = REFERENCES[kind]
    for i in range(20):
        assert is_right(answer(sim(1.0), kind, str(i)), reference, kind)
        assert not is_right(answer(sim(0.0), kind, str(i)), reference, kind)
    assert is_right(format_answer(reference, kind) + "\n\n", reference, kind)  # trailing space does not matter


def test_a_real_workers_answer_is_not_recognised():
    assert not is_right("The answer is 35.\nAnswer: 35", "35", "numeric")


# --------------------------------------------------------------------------- end to end through the workflow engine

QUESTION = "How many apples does Sam have after buying 7 bags of 6 apples?"
TASK = Task(id="apples", question=QUESTION, domain="math", reference="42", answer_kind="numeric")
ROLLOUTS = 400


def success_rate(plan: Plan, pool: list[SimProvider], task: Task = TASK) -> float:
    async def go() -> list[bool]:
        results = await asyncio.gather(*(run_plan(plan, task, pool, sample_key=f"r{i}") for i in range(ROLLOUTS)))
        return [
            grading.grade("numeric", r.final_answer or "", task.reference).verdict is grading.Verdict.CORRECT
            for r in results
        ]

    outcomes = asyncio.run(go())
    return sum(outcomes) / len(outcomes)


def near(rate: float, p: float) -> bool:
    """Within four binomial standard errors (the seeds are fixed, so the test is deterministic)."""
    return abs(rate - p) <= 4 * math.sqrt(p * (1 - p) / ROLLOUTS)


def plan(*steps: tuple[str, list[int]]) -> Plan:
    return Plan(tuple(Step(model_id=0, subtask=s, access=a) for s, a in steps))


def test_a_check_with_access_lifts_the_success_rate_and_wording_alone_does_not():
    # Solve 0.5; a check keeps a right answer (keep 1.0) and repairs a wrong one with 0.8 x 0.5:
    # solve -> check = 0.5 x 1.0 + 0.5 x 0.4 = 0.7.
    pool = [sim(0.5, keep_rate=1.0, repair_rate=0.8)]
    solve = ("Count the apples Sam has.", [])
    checked = success_rate(plan(solve, ("Check the apples count above.", [0])), pool)
    no_access = success_rate(plan(solve, ("Check the apples count above.", [])), pool)
    no_check_word = success_rate(plan(solve, ("Count the apples again from above.", [0])), pool)
    assert near(checked, 0.7), checked
    assert near(no_access, 0.5), no_access  # a check that reads nothing is a solve
    assert near(no_check_word, 0.5), no_check_word  # reading without a check is a solve (no gain set)
    assert checked > max(no_access, no_check_word)


def test_a_check_judges_the_latest_answer_it_reads():
    # Step 0 is always right, step 1 always wrong; the check reads both (listed out of order) and
    # judges step 1's: it repairs with 0.5 x its own 0.6 = 0.3. Read the other way round, it keeps: 0.9.
    pool = [sim(1.0), sim(0.0), sim(0.6, keep_rate=0.9, repair_rate=0.5)]
    solve = "Count the apples Sam has."
    later_wrong = Plan((Step(0, solve, []), Step(1, solve, []), Step(2, "Check the apples count.", [1, 0])))
    later_right = Plan((Step(1, solve, []), Step(0, solve, []), Step(2, "Check the apples count.", [1, 0])))
    assert near(success_rate(later_wrong, pool), 0.3)
    assert near(success_rate(later_right, pool), 0.9)


def test_an_off_task_subtask_lowers_the_success_rate():
    pool = [sim(0.6, off_task_factor=0.25)]
    on = success_rate(plan(("Count the apples Sam has.", [])), pool)
    off = success_rate(plan(("Solve it.", [])), pool)
    assert near(on, 0.6), on
    assert near(off, 0.15), off


def test_a_harder_question_lowers_the_success_rate():
    pool = [sim(0.9, hard_accuracy={"default": 0.3})]
    one_step = plan(("Count the apples Sam has.", []))
    easy = success_rate(one_step, pool, replace(TASK, difficulty=0.0))
    hard = success_rate(one_step, pool, replace(TASK, difficulty=1.0))
    assert near(easy, 0.9), easy
    assert near(hard, 0.3), hard


def test_the_workflow_hands_the_worker_the_question_subtask_and_difficulty():
    spy = ScriptedWorker("spy", simulated=True)
    task = replace(TASK, difficulty=0.75)
    asyncio.run(run_plan(plan(("Count the apples.", [])), task, [spy]))
    (request,) = spy.requests
    assert request.hint is not None
    assert (request.hint.question, request.hint.subtask, request.hint.difficulty) == (
        QUESTION,
        "Count the apples.",
        0.75,
    )


# --------------------------------------------------------------------------- reproducibility


def hinted(key: str, visible: tuple[str, ...] = ()) -> WorkerRequest:
    hint = TaskHint(
        "q", "math", "35", "numeric", visible, key, question=QUESTION, subtask="Check the apples.", difficulty=0.7
    )
    return WorkerRequest([{"role": "user", "content": "Check the apples."}], 4096, 0.2, None, hint)


def texts(provider: SimProvider, keys: range) -> list[str]:
    return [asyncio.run(provider.complete(hinted(str(k), ("earlier: 36",)))).text for k in keys]


def test_same_seed_and_key_give_the_same_text_and_another_seed_other_draws():
    settings = {"hard_accuracy": {"default": 0.2}, "keep_rate": 0.9, "repair_rate": 0.5, "off_task_factor": 0.5}
    first = texts(sim(0.5, seed=11, **settings), range(40))
    assert first == texts(sim(0.5, seed=11, **settings), range(40))
    assert first != texts(sim(0.5, seed=12, **settings), range(40))
