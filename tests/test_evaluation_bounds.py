"""The upper bounds `oracle-single` and `optimal`: their picks on a simulated pool by hand, the best plan
written as a plan the engine runs (and running at the accuracy the optimum computed), the estimate from
single-worker runs in a pool with a real worker, and `optimal` refused for such a pool before anything
starts."""

from __future__ import annotations

import asyncio
import math

import pytest

from conductor_rl import grading
from conductor_rl.config import Price, WorkerConfig, load_config
from conductor_rl.data import Question
from conductor_rl.evaluation import MissingEvidenceError, optimal_plan, parse_method
from conductor_rl.evaluation.baselines import CHECK, wording
from conductor_rl.evaluation.optimal import PlanStep, PoolOptimum, expected_cost, plan_accuracy
from conductor_rl.evaluation.plans import BaselineContext, baseline_context, baseline_samples, exact_optimum
from conductor_rl.evaluation.prepare import KIND_ORDER, EvaluationError, prepare_evaluation
from conductor_rl.rollout.workflow import Task, run_plan
from conductor_rl.workers.providers.sim import SimProvider
from conductor_rl.workers.sim_rules import on_task, step_role
from tests.sim_pools import guide_pool, sim_worker

APPLES = "How many apples does Sam have after buying 7 bags of 6 apples?"
PLANETS = "Which planet is the largest? (A) Mars (B) Venus (C) Jupiter (D) Mercury"
# A question that itself holds a check word: a solving step that carries it and reads is a check.
VERIFY = "Verify which planet is the largest. (A) Mars (B) Venus (C) Jupiter (D) Mercury"


def question(text: str = APPLES, source: str = "gsm8k", kind: str = "numeric", reference: str = "42") -> Question:
    domain = "mmlu" if kind == "choice" else "math"
    return Question(f"{source}/{kind}/{len(text)}", domain, text, reference, kind, source)  # a fixed id: fixed draws


def context(workers: list[WorkerConfig], cost_weight: float = 0.0, max_steps: int = 3) -> BaselineContext:
    names = [w.name for w in workers]
    optimum = PoolOptimum(workers, 0, max_steps, cost_weight)
    return BaselineContext(names, [w.price for w in workers], max_steps, optimum=optimum)


def picks(method: str, questions: list[Question], ctx: BaselineContext) -> list:
    samples = baseline_samples(parse_method(method, ctx.worker_names), "b", questions, 1, ctx)
    return [s[0].plan for s in samples]


# --------------------------------------------------------------------------- oracle-single


# A maths expert and a knowledge expert, the second five times cheaper.
EXPERTS = [
    sim_worker("maths", (5.0, 5.0), accuracy={"math": 0.9, "mmlu": 0.3}),
    sim_worker("knowledge", (1.0, 1.0), accuracy={"math": 0.4, "mmlu": 0.8}),
]


def test_oracle_single_asks_each_question_its_best_sim_worker():
    plans = picks("oracle-single", [question(), question(PLANETS, "mmlu", "choice", "C")], context(EXPERTS))
    assert [p.steps[0].model_id for p in plans] == [0, 1]
    assert all(len(p.steps) == 1 for p in plans)


def test_oracle_single_trades_accuracy_for_cost_by_the_cost_weight():
    # On the maths question: maths 0.5 + 0.45 - w x dear, knowledge 0.5 + 0.2 - w x cheap; equal at
    # w = 0.25 / (dear - cheap).
    q = question()
    dear, cheap = (expected_cost([PlanStep(w)], EXPERTS, len(APPLES)) for w in (0, 1))
    assert dear == pytest.approx(5 * cheap)
    switch = 0.25 / (dear - cheap)
    for weight, pick in ((0.0, 0), (0.99 * switch, 0), (1.01 * switch, 1)):
        (plan,) = picks("oracle-single", [q], context(EXPERTS, weight))
        assert plan.steps[0].model_id == pick, weight


def test_oracle_single_in_a_pool_with_a_real_worker_picks_from_single_worker_runs():
    names = ["real", "sim"]
    ctx = BaselineContext(names, [Price(), Price()], 3)  # no optimum: a real worker
    q1, q2 = question(), question(PLANETS, "mmlu", "choice", "C")
    ctx.single_verdicts = {"b": {q1.id: {"real": 0.5, "sim": 1.0}, q2.id: {"real": 1.0, "sim": 0.0}}}
    assert [p.steps[0].model_id for p in picks("oracle-single", [q1, q2], ctx)] == [1, 0]
    assert picks("oracle", [q1, q2], ctx) == picks("oracle-single", [q1, q2], ctx)
    ctx.single_verdicts = {}
    with pytest.raises(MissingEvidenceError, match="oracle-single: question .* lacks single-worker results"):
        picks("oracle-single", [q1], ctx)
    with pytest.raises(MissingEvidenceError, match="simulated workers"):
        picks("optimal", [q1], ctx)


# --------------------------------------------------------------------------- the best plan as a plan


def test_the_best_plan_becomes_a_plan_whose_steps_the_simulator_reads_as_the_optimum_does():
    steps = (PlanStep(2), PlanStep(0, (0,)), PlanStep(1, (1, 0), "check"), PlanStep(0, (2,), "check"))
    plan = optimal_plan(steps, APPLES)
    solve = APPLES  # the engine adds the answer format to the last step, as to every plan
    assert [s.model_id for s in plan.steps] == [2, 0, 1, 0]
    assert [s.access for s in plan.steps] == [[], [0], [0, 1], [2]]  # exactly what each step reads
    assert plan.steps[0].subtask == plan.steps[1].subtask == solve  # as a single worker is asked
    assert plan.steps[2].subtask.startswith(CHECK) and APPLES in plan.steps[2].subtask
    for step, planned in zip(plan.steps, steps):
        assert step_role(step.subtask, bool(step.access)) == planned.role
        assert on_task(step.subtask, APPLES)
    assert wording(APPLES) == (True, True)


def test_a_question_with_a_check_word_leaves_solving_steps_that_read_out():
    assert wording(PLANETS) == (True, True)
    assert wording(VERIFY) == (True, False)
    assert wording("Which of these would you check first: the apples or the pears?") == (True, False)
    assert wording("What is 17 * 23?") == (False, True)  # no content word: never on task
    # Reading lifts this worker (gain 0.3) but its checks are poor: the best plan reads as a solve, which
    # a question holding a check word cannot write, so there the best plan is one call.
    pool = [sim_worker("w", gain_with_context=0.3, keep_rate=0.6, repair_rate=0.2)]
    ctx = context(pool)
    assert exact_optimum(question(), ctx.optimum, False).steps == (PlanStep(0), PlanStep(0, (0,)))
    assert exact_optimum(question(VERIFY, "mmlu", "choice", "C"), ctx.optimum, False).steps == (PlanStep(0),)


ROLLOUTS = 600


def success_rate(plan, q: Question, workers: list[WorkerConfig]) -> float:
    pool = [SimProvider(w, seed=0) for w in workers]
    task = Task.of(q)

    async def go() -> list:
        return await asyncio.gather(*(run_plan(plan, task, pool, sample_key=f"r{i}") for i in range(ROLLOUTS)))

    results = asyncio.run(go())
    right = [
        grading.grade(q.answer_kind, r.final_answer or "", q.reference).verdict.value == "correct" for r in results
    ]
    return sum(right) / ROLLOUTS


def near(rate: float, p: float) -> bool:
    """Within four binomial standard errors (the seeds are fixed, so the test is deterministic)."""
    return abs(rate - p) <= 4 * math.sqrt(p * (1 - p) / ROLLOUTS)


# The plan-sensitive pool of docs/guide/simulator.md: on the hardest questions, solve -> check -> check.
GUIDE = guide_pool()


@pytest.mark.parametrize("cost_weight", [0.0, 10.0])
def test_the_best_plan_runs_at_the_accuracy_the_optimum_computed(cost_weight):
    hard = question(source="aime25")  # difficulty 1
    (plan,) = picks("optimal", [hard], context(GUIDE, cost_weight))
    best = exact_optimum(hard, context(GUIDE, cost_weight).optimum, False)
    assert len(plan.steps) == 3 and plan.steps[-1].access == [1]  # solve -> check -> check
    rate = success_rate(plan, hard, GUIDE)
    assert near(rate, best.accuracy), (rate, best.accuracy)


def test_a_reading_solve_in_a_question_with_a_check_word_runs_as_a_check():
    """Why the search leaves reading solves out where the wording holds a check word."""
    pool = [sim_worker("w", gain_with_context=0.3, keep_rate=0.6, repair_rate=0.2)]
    planets = question(VERIFY, "mmlu", "choice", "C")
    reading = optimal_plan((PlanStep(0), PlanStep(0, (0,))), VERIFY)
    as_check = plan_accuracy((PlanStep(0), PlanStep(0, (0,), "check")), [pool[0].sim], "mmlu", 0.2)
    assert near(success_rate(reading, planets, pool), as_check)  # 0.35, not the 0.8 of a solve reading


# --------------------------------------------------------------------------- before anything starts


def test_optimal_needs_a_simulated_pool_and_is_refused_at_prepare_time():
    real = WorkerConfig(name="gpt-x", provider="openai", model="gpt-x")
    config = load_config(None, ["evaluate.methods=[optimal]", "evaluate.benchmarks=[samples:gsm8k]"])
    mixed = config.model_copy(update={"workers": [*config.workers, real]})
    with pytest.raises(EvaluationError, match="'optimal' needs a pool of simulated workers .* gpt-x is not simulated"):
        prepare_evaluation(mixed)
    ev = prepare_evaluation(config)
    assert [m.name for m in ev.methods] == ["optimal"]
    assert baseline_context(config).optimum is not None and baseline_context(mixed).optimum is None


def test_oracle_single_runs_after_the_single_runs_it_needs_in_a_real_pool_only():
    assert KIND_ORDER.index("oracle-single") > KIND_ORDER.index("single")
    base = load_config(None, ["evaluate.methods=[oracle-single, optimal]", "evaluate.benchmarks=[samples:gsm8k]"])
    assert [m.name for m in prepare_evaluation(base).methods] == ["oracle-single", "optimal"]
    real = WorkerConfig(name="gpt-x", provider="openai", model="gpt-x")
    mixed = base.model_copy(
        update={
            "workers": [*base.workers, real],
            "evaluate": base.evaluate.model_copy(update={"methods": ["oracle-single"]}),
        }
    )
    names = [m.name for m in prepare_evaluation(mixed).methods]
    assert names == [*(f"single:{w.name}" for w in mixed.workers), "oracle-single"]


# --------------------------------------------------------------------------- the Conductor's seat


def test_no_baseline_calls_the_conductors_seat_wherever_it_sits_in_the_pool():
    """The seat (provider: conductor) answers nothing by itself: `*` skips it, naming it is refused,
    and every baseline's plans give steps to the answering workers only, by their pool places."""
    from conductor_rl.evaluation.router import Router

    base = load_config(None, ["evaluate.benchmarks=[samples:gsm8k, samples:mmlu]", "evaluate.limit=4"])
    seat = WorkerConfig(name="conductor", provider="conductor")
    config = base.model_copy(update={"workers": [seat, *base.workers]})  # the seat first: places shift by one
    answering = [w.name for w in base.workers]
    ctx = baseline_context(config)
    assert ctx.worker_names == answering and list(ctx.places) == [1, 2, 3] and ctx.optimum is not None

    every = config.model_copy(
        update={"evaluate": config.evaluate.model_copy(update={"methods": ["single:*", "oracle", "optimal"]})}
    )
    methods = prepare_evaluation(every).methods
    assert [m.name for m in methods] == [*(f"single:{n}" for n in answering), "oracle", "optimal"]
    assert [m.worker for m in methods[:3]] == [1, 2, 3]  # pool places
    for refused in (["single:conductor"], ["reflect:conductor:2"]):
        bad = config.model_copy(update={"evaluate": config.evaluate.model_copy(update={"methods": refused})})
        with pytest.raises(EvaluationError, match="'conductor' is the Conductor's own seat"):
            prepare_evaluation(bad)
    bad = config.model_copy(update={"evaluate": config.evaluate.model_copy(update={"moa_aggregator": "conductor"})})
    with pytest.raises(EvaluationError, match="evaluate.moa_.*own seat"):
        prepare_evaluation(bad)

    questions = [question(), question(PLANETS, "mmlu", "choice", "C"), question(VERIFY, "mmlu", "choice", "C")]
    ctx.single_verdicts = {"b": {q.id: {n: float(i == 2) for i, n in enumerate(answering)} for q in questions}}
    texts = [q.question for q in questions] * 2
    verdicts = [{n: ["correct" if n == answering[1] else "wrong"] for n in answering}] * len(texts)
    ctx.router = Router.fit(texts, verdicts, answering, ctx.prices)
    used = {}
    for name in ("moa", "random", "optimal", "oracle-single", "oracle", "router"):
        samples = baseline_samples(parse_method(name, answering), "b", questions, 2, ctx)
        used[name] = {s.model_id for row in samples for sample in row for s in sample.plan.steps}
    assert all(steps and steps <= {1, 2, 3} for steps in used.values()), used
    assert used["moa"] == used["random"] == {1, 2, 3}
    assert used["oracle"] == {3} and used["router"] == {2}  # the index of the verdicts' worker, as a pool place
