"""The baselines as plans: the calls each makes through the workflow engine, in
which order and with which context; random plans; the oracle; answer formats."""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter

import pytest

from conductor_rl import grading
from conductor_rl.config import Price
from conductor_rl.data.question import ANSWER_KINDS
from conductor_rl.evaluation import (
    answer_instruction,
    moa_plan,
    oracle_worker,
    random_lengths_label,
    random_plan,
    reflection_plan,
    single_plan,
)
from conductor_rl.evaluation.baselines import best_worker
from conductor_rl.plan import Plan, Step, parse_plan, render_plan
from conductor_rl.rollout.workflow import StepLimits, Task, run_plan
from conductor_rl.testing.workers import CallLog, ScriptedWorker

QUESTION = "What is 6 times 7? QUESTION-MARKER"
TASK = Task(id="q", question=QUESTION, domain="math", reference="42", answer_kind="numeric")
ANSWER = re.compile(r"ANS<(\d+)>")


def run(plan, n_workers: int = 3):
    # One log for the pool: each worker answers ANS<n> for the pool's n-th call, yielding to the event
    # loop a few times first, so that calls that may overlap do.
    log = CallLog()
    workers = [ScriptedWorker(f"w{i}", answer=lambda _, n: f"ANS<{n}>", yields=3, log=log) for i in range(n_workers)]
    result = asyncio.run(run_plan(plan, TASK, workers, StepLimits(timeout_s=60.0)))
    assert result.error is None
    call_of_step = [int(ANSWER.fullmatch(s.response).group(1)) for s in result.steps]
    # The answers each step's prompt shows, as step indices.
    seen = [{call_of_step.index(int(k)) for k in ANSWER.findall(log.calls[c].user_text)} for c in call_of_step]
    return log, result, call_of_step, seen


def test_single_plan_is_the_question_and_the_engine_adds_its_answer_form():
    plan = single_plan(QUESTION, 2)
    (step,) = plan.steps
    assert (step.model_id, step.access, step.subtask) == (2, [], QUESTION)
    log, _result, _, _ = run(plan)
    assert len(log.calls) == 1 and log.calls[0].worker == "w2" and QUESTION in log.calls[0].user_text
    assert log.calls[0].user_text.endswith(answer_instruction("numeric"))  # TASK's grader's form


@pytest.mark.parametrize("rounds", [1, 2, 5])
def test_reflection_makes_rounds_calls_strictly_in_turn_each_seeing_the_previous_answer(rounds):
    plan = reflection_plan(QUESTION, 1, rounds)
    log, _result, calls, seen = run(plan)
    assert len(log.calls) == rounds + 1 and {c.worker for c in log.calls} == {"w1"}  # an answer, `rounds` reflections
    # Strictly sequential: each call starts after the one before has ended.
    assert log.events == [e for n in calls for e in (("start", n), ("end", n))]
    assert seen == [set()] + [{i - 1} for i in range(1, rounds + 1)]
    users = [log.calls[c].user_text for c in calls]
    assert all(QUESTION in user for user in users)
    # The answer format: the last step only, as for every plan.
    assert [answer_instruction("numeric") in user for user in users] == [False] * rounds + [True]
    assert "critique" in log.calls[calls[1]].user_text


@pytest.mark.parametrize("proposers, layers", [([0, 1, 2], 3), ([2, 0], 4), ([1], 2)])
def test_moa_calls_layer_by_layer_each_reading_the_layer_before(proposers, layers):
    plan = moa_plan(QUESTION, proposers, aggregator=0, layers=layers)
    p = len(proposers)
    assert len(plan.steps) == p * (layers - 1) + 1
    assert parse_plan(render_plan(plan), n_workers=3, max_steps=20) == plan
    log, _result, calls, seen = run(plan)
    assert len(log.calls) == p * (layers - 1) + 1
    layer_of = [i // p for i in range(p * (layers - 1))] + [layers - 1]
    assert [s.model_id for s in plan.steps] == list(proposers) * (layers - 1) + [0]
    position = {event: k for k, event in enumerate(log.events)}
    for layer in range(layers):
        mine = [calls[i] for i, at in enumerate(layer_of) if at == layer]
        later = [calls[i] for i, at in enumerate(layer_of) if at > layer]
        # The layer's calls overlap (all start before any ends); the next layer starts after all have ended.
        assert max(position[("start", n)] for n in mine) < min(position[("end", n)] for n in mine)
        if later:
            assert max(position[("end", n)] for n in mine) < min(position[("start", n)] for n in later)
    for i, layer in enumerate(layer_of):
        expected = {j for j, at in enumerate(layer_of) if at == layer - 1}
        assert seen[i] == expected
    aggregator_prompt = log.calls[calls[-1]].user_text
    assert QUESTION in aggregator_prompt and "final, complete answer" in aggregator_prompt


def test_moa_refuses_a_shape_it_cannot_build():
    with pytest.raises(ValueError, match="at least 2 layers"):
        moa_plan(QUESTION, [0], 0, layers=1)
    with pytest.raises(ValueError, match="one proposer"):
        moa_plan(QUESTION, [], 0)


def test_random_plans_are_valid_and_follow_the_length_distribution():
    rng = random.Random(0)
    lengths = [1, 1, 1, 3]
    plans = [random_plan(QUESTION, 4, lengths, rng) for _ in range(4000)]
    counts = Counter(len(p.steps) for p in plans)
    assert set(counts) == {1, 3} and abs(counts[1] / 4000 - 0.75) < 0.03
    workers = Counter(s.model_id for p in plans for s in p.steps)
    assert set(workers) == {0, 1, 2, 3} and min(workers.values()) > 0.2 * sum(workers.values())
    middle = Counter(str(p.steps[1].access) for p in plans if len(p.steps) == 3)
    assert set(middle) == {"[]", "all"}
    for plan in plans:
        assert parse_plan(render_plan(plan), n_workers=4, max_steps=5) == plan
        assert plan.steps[-1].access == "all"
        assert len(plan.steps) == 1 or plan.steps[0].access == []
        assert {s.subtask for s in plan.steps} == {QUESTION}
    assert random_lengths_label(lengths) == "step counts of 4 Conductor plans"


def test_random_plan_lengths_fall_back_to_uniform():
    rng = random.Random(1)
    counts = Counter(len(random_plan(QUESTION, 2, [], rng, max_steps=5).steps) for _ in range(5000))
    assert set(counts) == {1, 2, 3, 4, 5} and all(abs(c / 5000 - 0.2) < 0.03 for c in counts.values())
    assert "uniform 1..5" in random_lengths_label([], 5)
    with pytest.raises(ValueError, match="lengths from 1 to 5"):
        random_plan(QUESTION, 2, [6], rng)


@pytest.mark.parametrize(
    "verdicts, prices, best",
    [
        ([["correct", "wrong"], ["correct", "wrong"], ["wrong", "wrong"]], [2.0, 1.0, 0.0], 1),  # tie: cheaper
        ([["correct", "correct"], ["correct", "wrong"]], [9.0, 1.0], 0),  # more often right
        ([["correct", "wrong"], ["correct", "wrong"]], [1.0, 1.0], 0),  # same price: lower index
        ([["correct", "error"], ["correct", "wrong"]], [5.0, 1.0], 0),  # errors are not verdicts
        ([["plan_error"], ["correct"]], [0.0, 1.0], 1),
        (["correct", "wrong"], [1.0, 0.0], 0),  # one verdict each
        ([[grading.Verdict.WRONG], [grading.Verdict.CORRECT]], [0.0, 1.0], 1),
    ],
)
def test_oracle_picks_the_most_often_correct_worker_ties_to_the_cheaper(verdicts, prices, best):
    assert oracle_worker(verdicts, prices) == best == best_worker(verdicts, prices)


def test_pilot_evidence_may_be_shares_flags_or_verdicts_and_prices_may_be_price_objects():
    cheap, dear = Price(input=0.1, output=0.4), Price(input=1.0, output=10.0)
    assert oracle_worker([0.5, 0.5], [dear, cheap]) == 1  # shares of correct repeats; tie: cheaper
    assert oracle_worker([1.0, 0.5], [dear, cheap]) == 0
    assert oracle_worker([False, True], [cheap, dear]) == 1  # solved flags
    assert oracle_worker([None, ["correct"], 0.0], [0.0, 1.0, 0.0]) == 1
    assert oracle_worker([False, 0.0], [dear, cheap]) == 1  # nobody solved it: the cheapest
    with pytest.raises(ValueError, match="from 0 to 1"):
        oracle_worker([2.0], [1.0])


def test_the_answer_format_reaches_the_last_step_of_every_plan_and_no_other():
    """Format fairness: a Conductor's plan and a baseline's are told the grader's answer format the
    same way, at their last step only; a user's own question (no reference) is told none, nor is any
    step with workflow.answer_format off."""
    conductors = Plan((Step(0, "Work out 6 times 7.", []), Step(1, "Check the product.", "all")))
    for plan in (conductors, moa_plan(QUESTION, [0, 1], 2), single_plan(QUESTION, 1)):
        log, _result, calls, _ = run(plan)
        told = [answer_instruction("numeric") in log.calls[c].user_text for c in calls]
        assert told == [False] * (len(calls) - 1) + [True], plan
    user_question = Task(id="u", question=QUESTION)  # no reference: nothing grades it
    assert user_question.answer_format is None and TASK.answer_format == answer_instruction("numeric")
    code = Task(id="c", question="Write f.", answer_kind="code_humaneval")  # graded by its tests
    assert code.answer_format == answer_instruction("code_humaneval")
    log = CallLog()
    workers = [ScriptedWorker("w0", answer=lambda _, n: "ANS<0>", log=log)]
    asyncio.run(run_plan(single_plan(QUESTION, 0), TASK, workers, StepLimits(timeout_s=60.0, answer_format=False)))
    assert answer_instruction("numeric") not in log.calls[0].user_text


@pytest.mark.parametrize(
    "kind, response, reference",
    [
        ("numeric", "6 x 7 = 42, so\nAnswer: 42", "42"),
        ("choice", "B is right because ...\nAnswer: B", "B"),
        ("freeform", "The capital is well known.\nAnswer: Paris", "Paris"),
        ("exact", "Thinking...\nAnswer: blue whale", "blue whale"),
    ],
)
def test_answers_in_the_instructed_form_are_read_by_the_graders(kind, response, reference):
    assert "Answer: <" in answer_instruction(kind)
    assert grading.grade(kind, response, reference).verdict is grading.Verdict.CORRECT


def test_every_answer_kind_has_an_instruction_the_grader_reads():
    for kind in {*ANSWER_KINDS, *grading.KINDS}:
        assert answer_instruction(kind)
    assert "\\boxed{}" in answer_instruction("math") and grading.last_boxed("so \\boxed{7}") == "7"
    for kind in grading.CODE_KINDS:
        assert "```python" in answer_instruction(kind)
    assert grading.extract_code("Here:\n```python\ndef f():\n    return 1\n```").strip() == "def f():\n    return 1"
    with pytest.raises(ValueError, match="known kinds: math"):
        answer_instruction("poetry")


def test_moa_on_the_papers_pool_makes_8_calls_ending_on_a_named_aggregator():
    """The paper's MoA: its 7 workers propose once, one aggregator reads them all (8 calls). The paper
    names no aggregator: the priciest worker by output, unless evaluate.moa_aggregator names one."""
    from conductor_rl.config import load_config
    from conductor_rl.evaluation.cost_forecast import calls_per_sample
    from conductor_rl.evaluation.methods import parse_method
    from conductor_rl.evaluation.plans import baseline_context, moa_aggregator_of
    from conductor_rl.workers.forecast import Range

    config = load_config("configs/paper.yaml")
    names = [w.name for w in config.workers]
    ctx = baseline_context(config)
    plan = moa_plan(QUESTION, ctx.moa_proposers or list(ctx.places or []), ctx.moa_aggregator, ctx.moa_layers)
    assert len(plan.steps) == 8 == len(names) + 1
    assert [names[s.model_id] for s in plan.steps[:7]] == names
    assert names[plan.steps[-1].model_id] == moa_aggregator_of(config) == "claude-sonnet-4-6"
    assert plan.steps[-1].access == list(range(7))
    assert calls_per_sample(parse_method("moa", names), config) == Range(8, 8)
    named = load_config("configs/paper.yaml", ["evaluate.moa_aggregator=gpt-6.1-sol"])
    assert names[baseline_context(named).moa_aggregator] == moa_aggregator_of(named) == "gpt-6.1-sol"
