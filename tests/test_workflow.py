"""The workflow engine: context passing, parallel steps, failures, limits, costs,
and the path from a Conductor completion to a reward.

Workers are the scripted doubles of conductor_rl/testing/workers.py (the real
provider interface, recording what they were sent), plus the real SimProvider
for the end-to-end tests.
"""

from __future__ import annotations

import asyncio

import pytest

from conductor_rl import grading
from conductor_rl.config import Price, SimSpec, WorkerConfig
from conductor_rl.plan import Plan, PlanError, Step, parse_plan, render_plan
from conductor_rl.rollout.workflow import StepLimits, Task, WorkflowResult, run_plan
from conductor_rl.testing.workers import Gate, ScriptedWorker
from conductor_rl.workers.providers.base import ProviderError, Usage, WorkerRequest
from conductor_rl.workers.providers.sim import SimProvider

TASK = Task(
    id="q-1", question="What is 6 times 7? QUESTION-MARKER", domain="math", reference="42", answer_kind="numeric"
)


# A bound on a wait that only a hang reaches, never a slow machine.
HANG_GUARD = StepLimits(timeout_s=60.0)


def plan_of(*steps: tuple[int, str, object]) -> Plan:
    return Plan(tuple(Step(model_id=m, subtask=s, access=a) for m, s, a in steps))


def run(
    plan: Plan, workers, limits: StepLimits | list[StepLimits] = StepLimits(), task: Task = TASK, sample_key: str = ""
) -> WorkflowResult:
    return asyncio.run(run_plan(plan, task, workers, limits, sample_key=sample_key))


def user_text(trace) -> str:
    return "\n".join(m["content"] for m in trace.messages if m["role"] == "user")


# --------------------------------------------------------------------------- basics and context


def test_one_step_plan():
    worker = ScriptedWorker("w0")
    result = run(plan_of((0, "Compute 6*7.", [])), [worker])
    assert result.error is None
    assert result.final_answer == "ANSWER(w0#0)"
    (step,) = result.steps
    assert (step.index, step.model_id, step.worker, step.subtask, step.access) == (0, 0, "w0", "Compute 6*7.", [])
    assert step.response == "ANSWER(w0#0)" and step.error is None
    assert step.started_s is not None and step.finished_s is not None and step.finished_s >= step.started_s
    assert "Compute 6*7." in user_text(step)
    assert step.messages[0]["role"] == "system"
    request = worker.requests[0]
    assert request.messages == step.messages
    assert request.hint is None  # real (non-simulated) workers never see the reference
    assert result.wall_s >= 0


def test_sequential_all_chain_passes_context():
    workers = [ScriptedWorker(f"w{i}") for i in range(4)]
    plan = plan_of(
        (0, "SUBTASK-A: find x.", []),
        (1, "SUBTASK-B: square x.", "all"),
        (2, "SUBTASK-C: check everything.", "all"),
        (3, "SUBTASK-D: fresh start.", []),
    )
    result = run(plan, workers)
    assert result.error is None
    answers = [s.response for s in result.steps]
    assert answers == ["ANSWER(w0#0)", "ANSWER(w1#0)", "ANSWER(w2#0)", "ANSWER(w3#0)"]
    assert [s.access for s in result.steps] == [[], [0], [0, 1], []]

    second, third, fourth = (user_text(s) for s in result.steps[1:])
    assert "SUBTASK-A: find x." in second and "ANSWER(w0#0)" in second
    assert "SUBTASK-A: find x." in third and "ANSWER(w0#0)" in third
    assert "SUBTASK-B: square x." in third and "ANSWER(w1#0)" in third
    # Later steps run after the steps they read.
    steps = result.steps
    assert steps[1].started_s >= steps[0].finished_s and steps[2].started_s >= steps[1].finished_s
    # A step with access [] sees none of the earlier work.
    assert "SUBTASK-D: fresh start." in fourth
    for earlier in ("ANSWER(", "SUBTASK-A", "SUBTASK-B", "SUBTASK-C"):
        assert earlier not in fourth
    assert "ANSWER(" not in user_text(steps[0])
    assert result.final_answer == "ANSWER(w3#0)"


def test_explicit_access_list():
    workers = [ScriptedWorker("w0"), ScriptedWorker("w1"), ScriptedWorker("w2")]
    plan = plan_of((0, "S0", []), (1, "S1", []), (2, "S2", []), (0, "S3 merge", [0, 2]))
    result = run(plan, workers)
    last = user_text(result.steps[3])
    assert result.steps[3].access == [0, 2]
    assert "ANSWER(w0#0)" in last and "ANSWER(w2#0)" in last
    assert "ANSWER(w1#0)" not in last and "S1" not in last
    assert last.index("ANSWER(w0#0)") < last.index("ANSWER(w2#0)")  # shown in step order


# --------------------------------------------------------------------------- parallelism


def test_independent_steps_run_in_parallel():
    both = Gate(2)
    workers = [ScriptedWorker("half-a", gate=both), ScriptedWorker("half-b", gate=both), ScriptedWorker("merge")]
    plan = plan_of((0, "half one", []), (1, "half two", []), (2, "merge", "all"))
    result = run(plan, workers, HANG_GUARD)
    assert result.error is None, result.error  # both halves were in flight at once
    a, b, merge = result.steps
    assert merge.started_s >= a.finished_s and merge.started_s >= b.finished_s
    assert "ANSWER(half-a#0)" in user_text(merge) and "ANSWER(half-b#0)" in user_text(merge)


def test_diamond_runs_its_branches_together():
    branches = Gate(2)
    workers = [
        ScriptedWorker("w0"),
        ScriptedWorker("w1", gate=branches),
        ScriptedWorker("w2", gate=branches),
        ScriptedWorker("w3"),
    ]
    plan = plan_of((0, "root", []), (1, "left", [0]), (2, "right", [0]), (3, "join", "all"))
    result = run(plan, workers, HANG_GUARD)
    assert result.error is None, result.error  # left and right were in flight at once
    root, left, right, join = result.steps
    assert left.started_s >= root.finished_s and right.started_s >= root.finished_s
    assert join.started_s >= max(left.finished_s, right.finished_s)
    assert [len(w.requests) for w in workers] == [1, 1, 1, 1]


# --------------------------------------------------------------------------- failures


def test_provider_error_is_an_infrastructure_error():
    failing = ScriptedWorker("flaky", delay_s=0.05, raises=ProviderError("HTTP 503", kind="server", retryable=True))
    slow = ScriptedWorker("slow", delay_s=0.4, usage=Usage(input_tokens=10, output_tokens=20), cost_usd=0.002)
    after = ScriptedWorker("after")
    plan = plan_of(
        (0, "fails", []), (1, "independent, in flight", []), (2, "needs both", "all"), (2, "needs step 0 only", [0])
    )
    result = run(plan, [failing, slow, after])  # must not raise
    assert result.error is not None and result.error.startswith("step 0:")
    assert "server" in result.error and "HTTP 503" in result.error
    assert result.final_answer is None
    fail, independent, dependent, dependent2 = result.steps
    assert fail.error == "server: HTTP 503" and fail.response is None
    # The independent step already in flight finished and its cost counts.
    assert independent.error is None and independent.response == "ANSWER(slow#0)"
    assert independent.cost_usd == 0.002 and result.cost_usd == pytest.approx(0.002)
    assert result.usage.output_tokens == 20
    # Steps that depend on the failure never reach a worker.
    assert dependent.error.startswith("skipped") and dependent2.error.startswith("skipped")
    assert dependent.response is None and dependent.started_s is None
    assert after.requests == []


def test_failure_after_dependent_started_is_still_an_error():
    # The last step is independent of the failing one and succeeds: the workflow is still an error.
    failing = ScriptedWorker("flaky", delay_s=0.1, raises=ProviderError("rate limited", kind="rate_limit"))
    result = run(plan_of((0, "fails late", []), (1, "answers", [])), [failing, ScriptedWorker("ok")])
    assert result.steps[1].response == "ANSWER(ok#0)"
    assert result.error == "step 0: rate_limit: rate limited"
    assert result.final_answer is None


def test_arbitrary_exception_is_recorded():
    buggy = ScriptedWorker("buggy", raises=ZeroDivisionError("division by zero"))
    result = run(plan_of((0, "bug", []), (1, "after", "all")), [buggy, ScriptedWorker("w1")])
    assert result.final_answer is None
    assert result.steps[0].error == "exception: ZeroDivisionError: division by zero"
    assert result.error == "step 0: exception: ZeroDivisionError: division by zero"
    assert result.steps[1].error.startswith("skipped")


def test_hanging_worker_times_out():
    hanging = ScriptedWorker("hangs", hang=True)
    result = run(
        plan_of((0, "never answers", []), (1, "after", [0])), [hanging, ScriptedWorker("w1")], StepLimits(timeout_s=0.2)
    )
    assert result.steps[0].error.startswith("timeout")
    assert "0.2" in result.steps[0].error
    assert result.steps[0].finished_s - result.steps[0].started_s >= 0.19  # not before its time
    assert result.error.startswith("step 0: timeout")
    assert result.final_answer is None
    assert result.steps[1].error.startswith("skipped")


def test_unknown_worker_in_hand_built_plan():
    worker = ScriptedWorker("w0")
    result = run(plan_of((0, "fine", []), (5, "no such model", "all")), [worker])
    assert result.steps[0].response == "ANSWER(w0#0)"
    assert result.steps[1].worker == "<unknown model 5>"
    assert result.steps[1].error.startswith("unknown_worker")
    assert result.error.startswith("step 1: unknown_worker")
    assert result.final_answer is None
    negative = run(plan_of((-1, "negative id", [])), [worker])
    assert negative.error.startswith("step 0: unknown_worker")


@pytest.mark.parametrize("access", [[1], [0], [-1], [7]])
def test_bad_access_in_hand_built_plan_is_an_error_not_a_hang(access):
    # Step 1 may only read step 0; a self, later, negative or out-of-range index would deadlock or crash.
    plan = plan_of((0, "first", []), (0, "second", access))
    result = asyncio.run(asyncio.wait_for(run_plan(plan, TASK, [ScriptedWorker("w0")]), timeout=5))
    if access == [0]:
        assert result.error is None
    else:
        assert result.error is not None and result.error.startswith("step 1: bad_access")
        assert result.steps[0].response == "ANSWER(w0#0)"
        assert result.final_answer is None


# --------------------------------------------------------------------------- limits and prompts


def test_huge_answer_is_cut_in_the_next_prompt():
    huge = "x" * 10_000_000 + "TAIL-MARKER"
    workers = [ScriptedWorker("verbose", answer=lambda r, n: huge), ScriptedWorker("reader")]
    plan = plan_of((0, "write a lot", []), (1, "read it", [0]))
    result = run(plan, workers, StepLimits(max_context_chars=5_000))
    assert result.error is None
    assert result.steps[0].response == huge  # the trace keeps the whole answer
    prompt = user_text(result.steps[1])
    assert len(prompt) < 5_000 + 500, len(prompt)
    assert "TAIL-MARKER" in prompt  # cut from the front: the conclusion survives
    assert "[...]" in prompt
    total = sum(len(m["content"]) for m in workers[1].requests[0].messages)
    assert total < 5_000 + 1_000


def test_show_question():
    for show in (True, False):
        worker = ScriptedWorker("w0")
        result = run(plan_of((0, "the subtask", [])), [worker], StepLimits(show_question=show))
        assert ("QUESTION-MARKER" in user_text(result.steps[0])) is show
        assert "the subtask" in user_text(result.steps[0])


def test_per_worker_limits():
    workers = [ScriptedWorker("small"), ScriptedWorker("big")]
    limits = [
        StepLimits(max_tokens=100, temperature=0.0, reasoning_budget=None),
        StepLimits(max_tokens=8000, temperature=0.7, reasoning_budget=2048, show_question=True),
    ]
    result = run(plan_of((0, "a", []), (1, "b", []), (0, "c", "all")), workers, limits)
    assert result.error is None
    assert [(r.max_tokens, r.temperature, r.reasoning_budget) for r in workers[0].requests] == [(100, 0.0, None)] * 2
    assert [(r.max_tokens, r.temperature, r.reasoning_budget) for r in workers[1].requests] == [(8000, 0.7, 2048)]
    assert "QUESTION-MARKER" in user_text(result.steps[1])
    assert "QUESTION-MARKER" not in user_text(result.steps[0])


def test_per_worker_timeouts():
    workers = [ScriptedWorker("patient", delay_s=0.3), ScriptedWorker("hasty", delay_s=0.3)]
    limits = [StepLimits(timeout_s=5.0), StepLimits(timeout_s=0.1)]
    result = run(plan_of((0, "a", []), (1, "b", [])), workers, limits)
    assert result.steps[0].error is None and result.steps[1].error.startswith("timeout")


# --------------------------------------------------------------------------- accounting


def test_cost_and_usage_aggregate_over_steps():
    workers = [
        ScriptedWorker(
            "a", usage=Usage(input_tokens=100, output_tokens=50, reasoning_tokens=10, cached_tokens=20), cost_usd=0.01
        ),
        ScriptedWorker(
            "b", usage=Usage(input_tokens=7, output_tokens=3, reasoning_tokens=0, cached_tokens=1), cost_usd=0.25
        ),
    ]
    result = run(plan_of((0, "1", []), (1, "2", "all"), (0, "3", "all")), workers)
    assert result.cost_usd == pytest.approx(0.27)
    assert result.usage == Usage(input_tokens=207, output_tokens=103, reasoning_tokens=20, cached_tokens=41)
    assert result.usage.total == 310
    assert [s.cost_usd for s in result.steps] == [0.01, 0.25, 0.01]
    assert [s.latency_s for s in result.steps] == [0.0, 0.0, 0.0]


def test_simulated_flag_propagates():
    sim_worker = SimProvider(WorkerConfig(name="sim", provider="sim", sim=SimSpec(accuracy={"default": 1.0})))
    real = ScriptedWorker("real")
    only_real = run(plan_of((0, "a", [])), [real, sim_worker])
    assert only_real.simulated is False and only_real.steps[0].simulated is False
    mixed = run(plan_of((0, "a", []), (1, "b", "all")), [real, sim_worker])
    assert [s.simulated for s in mixed.steps] == [False, True]
    assert mixed.simulated is True
    # The simulated worker gets the hint, with the answers it may read and a per-step key.
    assert "42" in mixed.final_answer and "simulated" in mixed.final_answer


def test_simulated_worker_gets_hint_with_visible_answers():
    seen: list[WorkerRequest] = []
    spy = ScriptedWorker("spy", simulated=True, answer=lambda r, n: (seen.append(r), f"A{n}")[1])
    result = run(plan_of((0, "a", []), (0, "b", [0])), [spy], sample_key="rollout-3")
    assert result.error is None
    first, second = seen
    assert first.hint.question_id == "q-1" and first.hint.reference == "42" and first.hint.domain == "math"
    assert first.hint.answer_kind == "numeric"
    assert first.hint.visible_answers == () and second.hint.visible_answers == ("A0",)
    assert first.hint.sample_key != second.hint.sample_key
    assert first.hint.sample_key.startswith("rollout-3")


def test_empty_question_runs():
    task = Task(id="empty", question="")
    for show in (False, True):
        result = run(
            plan_of((0, "do something", []), (0, "then this", "all")),
            [ScriptedWorker("w")],
            StepLimits(show_question=show),
            task=task,
        )
        assert result.error is None and result.final_answer == "ANSWER(w#1)"


def test_many_plans_share_one_event_loop():
    first_steps = Gate(200)  # the two independent first steps of every plan, all in flight at once
    worker = ScriptedWorker("shared", gate=first_steps)
    plan = plan_of((0, "a", []), (0, "b", []), (0, "c", "all"))

    async def go():
        return await asyncio.gather(
            *(run_plan(plan, TASK, [worker], HANG_GUARD, sample_key=str(i)) for i in range(100))
        )

    results = asyncio.run(go())
    assert all(r.error is None for r in results), results[0].error
    assert len(worker.requests) == 300 and first_steps.arrived == 300


# ---------------------------------------------------------- end to end: text -> plan -> run -> grade -> reward

COMPLETION = """I will ask two models independently and let a third check both.
```python
model_id = [0, 1, 2]
subtasks = ["Solve: what is 14 divided by 3 as a fraction?", "Compute 14/3 exactly.", "Check both answers above and give the final answer in \\\\boxed{}."]
access_list = [[], [], "all"]
```"""  # noqa: E501 (a Conductor's completion, verbatim)


def sim_pool(accuracy: float, *, fail_rate: float = 0.0, n: int = 3) -> list[SimProvider]:
    return [
        SimProvider(
            WorkerConfig(
                name=f"sim-{i}",
                provider="sim",
                price=Price(input=1.0, output=2.0),
                sim=SimSpec(accuracy={"default": accuracy}, fail_rate=fail_rate),
            )
        )
        for i in range(n)
    ]


def rollout(text: str, task: Task, workers: list[SimProvider], math_grader) -> float | None:
    """What one training rollout does with a Conductor completion."""
    try:
        plan = parse_plan(text, n_workers=len(workers), max_steps=5)
    except PlanError:
        return grading.reward(False, None)
    result = asyncio.run(run_plan(plan, task, workers, StepLimits(), sample_key="e2e"))
    if result.error:
        return grading.reward(True, None)
    verdict = grading.grade(task.answer_kind, result.final_answer, task.reference, math=math_grader).verdict
    return grading.reward(True, verdict)


MATH_TASK = Task(id="e2e/math", question="What is 14/3?", domain="math", reference="\\frac{14}{3}", answer_kind="math")
NUMERIC_TASK = Task(id="e2e/gsm", question="How many?", domain="math", reference="35", answer_kind="numeric")
CHOICE_TASK = Task(
    id="e2e/mmlu", question="Pick one. A. x B. y C. z D. w", domain="mmlu", reference="C", answer_kind="choice"
)


def test_parsed_plan_runs_end_to_end(math_grader):
    plan = parse_plan(COMPLETION, n_workers=3)
    assert render_plan(plan)  # round-trips through the plan language
    result = asyncio.run(run_plan(plan, MATH_TASK, sim_pool(1.0)))
    assert result.error is None and result.simulated
    assert [s.worker for s in result.steps] == ["sim-0", "sim-1", "sim-2"]
    assert result.cost_usd > 0 and result.usage.input_tokens > 0
    assert (
        grading.grade("math", result.final_answer, MATH_TASK.reference, math=math_grader).verdict
        is grading.Verdict.CORRECT
    )


@pytest.mark.parametrize("task", [MATH_TASK, NUMERIC_TASK, CHOICE_TASK], ids=lambda t: t.answer_kind)
def test_rewards_end_to_end(task, math_grader):
    assert rollout(COMPLETION, task, sim_pool(1.0), math_grader) == 1.0
    assert rollout(COMPLETION, task, sim_pool(0.0), math_grader) == 0.5
    # Infrastructure failure: no reward (dropped or retried), never 0.5.
    assert rollout(COMPLETION, task, sim_pool(1.0, fail_rate=1.0), math_grader) is None


@pytest.mark.parametrize(
    "text",
    [
        "I think the answer is 42.",
        "model_id = [0, 1]\nsubtasks = ['only one']\naccess_list = [[], []]",
        "model_id = [9]\nsubtasks = ['x']\naccess_list = [[]]",
        "model_id = [0]\nsubtasks = ['x']\naccess_list = [[0]]",
    ],
)
def test_malformed_plan_gets_zero(text, math_grader):
    with pytest.raises(PlanError):
        parse_plan(text, n_workers=3)
    assert rollout(text, MATH_TASK, sim_pool(1.0), math_grader) == 0.0


def test_failed_worker_reward_is_none_even_when_an_answer_exists(math_grader):
    # The last step answers correctly, but an earlier step failed: the rollout is not scored.
    # (The failure comes after a moment, so the independent last step is already in flight.)
    workers: list = sim_pool(1.0)
    workers[0] = ScriptedWorker("broken", delay_s=0.05, raises=ProviderError("connection reset", kind="network"))
    text = "model_id = [0, 1]\nsubtasks = ['a', 'b']\naccess_list = [[], []]"
    plan = parse_plan(text, n_workers=3)
    result = asyncio.run(run_plan(plan, NUMERIC_TASK, workers))
    assert result.steps[1].response is not None and result.error is not None
    assert result.final_answer is None
    verdict = grading.grade("numeric", result.final_answer, "35").verdict
    assert verdict is grading.Verdict.ERROR
    assert grading.reward(True, verdict) is None
    assert rollout(text, NUMERIC_TASK, workers, math_grader) is None


# --------------------------------------------------------------------------- reasoning and length stops


def thinking_worker(name: str, empty: bool = False) -> ScriptedWorker:
    """Answers with its reasoning apart, as the HTTP providers return it (WorkerResponse.reasoning);
    `empty` answers nothing after a length stop, as a model that spent its budget thinking."""
    return ScriptedWorker(
        name,
        text="" if empty else f"ANSWER({name})",
        usage=Usage(input_tokens=5, output_tokens=64, reasoning_tokens=60),
        reasoning=f"SECRET-THOUGHTS-OF-{name}",
        finish_reason="length" if empty else "stop",
    )


def test_reasoning_is_recorded_but_never_shown_to_later_steps():
    workers = [thinking_worker("thinker"), ScriptedWorker("reader")]
    result = run(plan_of((0, "think", []), (1, "read", "all")), workers)
    first, second = result.steps
    assert first.response == "ANSWER(thinker)" and first.reasoning == "SECRET-THOUGHTS-OF-thinker"
    assert first.finish_reason == "stop" and first.usage.reasoning_tokens == 60
    assert "ANSWER(thinker)" in user_text(second)
    assert "SECRET-THOUGHTS" not in user_text(second)
    assert workers[0].requests[0].reasoning == "default"


def test_reasoning_in_context_shows_it_where_the_setting_says_so():
    workers = [thinking_worker("thinker"), ScriptedWorker("reader")]
    limits = [StepLimits(reasoning_in_context=True, reasoning="high"), StepLimits()]
    result = run(plan_of((0, "think", []), (1, "read", "all")), workers, limits)
    assert "SECRET-THOUGHTS-OF-thinker" in user_text(result.steps[1])
    assert workers[0].requests[0].reasoning == "high"


def test_an_empty_answer_after_a_length_stop_is_marked_and_graded_truncated():
    from conductor_rl.rollout.rollouts import run_rollout

    plan = render_plan(plan_of((0, "solve", [])))
    rollout = asyncio.run(run_rollout(plan, TASK, [thinking_worker("thinker", empty=True)]))
    assert rollout.workflow.error is None and rollout.workflow.empty_after_length
    assert rollout.grade.verdict is grading.Verdict.TRUNCATED
    assert "'thinker' used its whole output budget (64 tokens, 60 reasoning)" in rollout.grade.detail
    assert rollout.reward == grading.REWARD_WRONG  # a missing answer, as the reward contract says
    answered = asyncio.run(run_rollout(plan, TASK, [thinking_worker("thinker")]))
    assert not answered.workflow.empty_after_length and answered.grade.verdict is grading.Verdict.WRONG


def test_truncated_answers_are_counted_apart_in_the_iteration_metrics():
    from conductor_rl.rollout.rollouts import run_rollout
    from conductor_rl.run.metrics import iteration_metrics

    plan = render_plan(plan_of((0, "solve", [])))
    workers = [thinking_worker("thinker", empty=True)]
    empty = asyncio.run(run_rollout(plan, TASK, workers))
    fine = asyncio.run(run_rollout(plan, TASK, [thinking_worker("thinker")]))
    record = iteration_metrics([empty, fine, fine, fine], ["thinker"])
    assert record["truncated_rate"] == 0.25 and record["empty_after_length_steps"] == 1
    assert record["reward_mean"] == grading.REWARD_WRONG and record["infra_error_rate"] == 0.0


def test_the_iteration_metrics_give_plan_shapes_per_domain_and_difficulty_and_the_summary_a_line():
    from dataclasses import replace

    from conductor_rl.rollout.rollouts import run_rollout
    from conductor_rl.run.metrics import iteration_metrics
    from conductor_rl.run.report import plans_learnt

    workers = [thinking_worker("a"), thinking_worker("b")]
    hard = replace(TASK, id="q-hard", difficulty=1.0)
    one_step = render_plan(plan_of((0, "Multiply six by seven", [])))
    checked = render_plan(plan_of((0, "Multiply six by seven", []), (1, "Check the product", [0])))
    read_not_checked = render_plan(plan_of((0, "Multiply six by seven", []), (1, "Say it again", "all")))
    rollouts = [
        asyncio.run(run_rollout(one_step, replace(TASK, difficulty=0.1), workers)),
        asyncio.run(run_rollout(checked, hard, workers)),
        asyncio.run(run_rollout(read_not_checked, hard, workers)),
        asyncio.run(run_rollout("not a plan", hard, workers)),
    ]
    shapes = iteration_metrics(rollouts, ["a", "b"])["plan_shapes"]
    assert shapes == {
        "math/easy": {"plans": 1, "steps": 1.0, "single_step_share": 1.0, "checking_share": 0.0, "final_worker": "a",
                      "final_worker_shares": {"a": 1.0, "b": 0.0}},
        "math/hard": {"plans": 2, "steps": 2.0, "single_step_share": 0.0, "checking_share": 0.5, "final_worker": "b",
                      "final_worker_shares": {"a": 0.0, "b": 1.0}},
    }  # fmt: skip
    assert "expected_accuracy" not in iteration_metrics(rollouts, ["a", "b"])  # real-looking workers: no exact figure
    line = plans_learnt({"iteration": 4, "plan_shapes": shapes})
    assert line == (
        "iteration 4: math/easy 1.0 steps (100% one step, 0% check an earlier answer), ending on a; "
        "math/hard 2.0 steps (0% one step, 50% check an earlier answer), ending on b"
    )
    assert plans_learnt({"iteration": 0}) is None
