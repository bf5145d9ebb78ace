"""What a training rollout is built from, in the library: the question as a
workflow task, each worker's step limits, the grading request, the sampling seed."""

from __future__ import annotations

from conductor_rl.config import load_config
from conductor_rl.data import Question
from conductor_rl.generation import sample_seed
from conductor_rl.plan import parse_plan
from conductor_rl.rollout.rollouts import Rollout, grade_request
from conductor_rl.rollout.workflow import StepLimits, StepTrace, Task, WorkflowResult


def test_a_question_becomes_the_task_its_plan_answers():
    q = Question(
        "humaneval/1",
        "code",
        "Write f.",
        "def f(): pass",
        "code_humaneval",
        "humaneval",
        meta={"entry_point": "f", "test": "assert f() is None"},
    )
    task = Task.of(q)
    assert task == Task("humaneval/1", "Write f.", "code", "def f(): pass", "code_humaneval", meta=q.meta)
    assert task.meta is not q.meta  # the task's copy, not the question's
    hash(task)  # tasks key dicts: meta stays out of the hash


def test_a_workers_step_limits_are_its_own_within_the_workflows():
    config = load_config(
        None, ["workflow.step_timeout_s=30", "workflow.max_context_chars=1234", "workflow.show_question=true"]
    )
    worker = config.workers[0].model_copy(update={"timeout_s": 60.0, "max_tokens": 77, "temperature": 0.5})
    limits = StepLimits.for_worker(worker, config)
    assert limits == StepLimits(
        max_tokens=77,
        temperature=0.5,
        reasoning_budget=worker.reasoning_budget,
        timeout_s=30.0,
        max_context_chars=1234,
        show_question=True,
    )
    faster = worker.model_copy(update={"timeout_s": 10.0})
    assert StepLimits.for_worker(faster, config).timeout_s == 10.0


def test_the_grade_request_carries_the_final_answer_and_the_tests():
    task = Task("q", "What is 2 + 2?", "math", "4", "numeric", meta={"tolerance": 0})
    rollout = Rollout(task, "", plan=parse_plan('model_id = [0]\nsubtasks = ["add"]\naccess_list = [[]]', 1))
    rollout.workflow = WorkflowResult([StepTrace(0, 0, "w", "add", [], response="4")], wall_s=0.1)
    request = grade_request(rollout)
    assert (request.kind, request.response, request.reference, request.meta) == ("numeric", "4", "4", {"tolerance": 0})
    rollout.workflow = WorkflowResult(
        [StepTrace(0, 0, "w", "add", [], error="timeout: x")], wall_s=0.1, error="step 0: timeout: x"
    )
    assert grade_request(rollout).response == ""  # a failed workflow has no final answer


def test_each_iteration_samples_with_its_own_seed_and_the_same_one_on_resume():
    seeds = [sample_seed(7, i) for i in range(100)]
    assert len(set(seeds)) == 100 and seeds == [sample_seed(7, i) for i in range(100)]
    assert sample_seed(8, 0) != sample_seed(7, 0)
    assert all(0 <= s < 2**31 for s in seeds + [sample_seed(2**40, 2**40)])
