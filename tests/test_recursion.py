"""The recursive Conductor (conductor_rl/rollout/recursion.py): a plan's step given to the
Conductor, forced calls after a plan, the depth limit, empty lists keeping the answer, the
recursion tree in traces, the non-recursive discount and recursive tokens in the loss.

The plans a recursive call writes come from a scripted `PlanWriter` (the interface the
generator and the in-process model implement), so each test decides what the Conductor
writes at each depth; the prompts are the real ones, rendered with a real tokenizer.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from transformers import AutoTokenizer

from conductor_rl import grading
from conductor_rl.config import ConfigError, load_config
from conductor_rl.grading import GradeResult, Verdict
from conductor_rl.models import resolve_model
from conductor_rl.plan import Plan, Step
from conductor_rl.plan.prompts import ConductorPrompt
from conductor_rl.policy.batch import rollout_batch
from conductor_rl.policy.sampling import Sample
from conductor_rl.rollout.recursion import Recursion, call_seed, discounted_reward, forced_groups, generator_writer
from conductor_rl.rollout.rollouts import Rollout, apply_grade, execute_rollouts, parse_rollout, ready_to_grade
from conductor_rl.rollout.workflow import FORCED_CALL, StepLimits, Task, keep_answer, run_plan
from conductor_rl.run.traces import TraceWriter, read_traces
from conductor_rl.testing.workers import ScriptedWorker
from conductor_rl.workers.providers.base import ProviderError, WorkerRequest
from conductor_rl.workers.providers.conductor import ConductorSeat

TASK = Task(id="q-1", question="What is 6 times 7?", domain="math", reference="42", answer_kind="numeric")
EMPTY = "model_id = []\nsubtasks = []\naccess_list = []\n"


def echo(name: str) -> ScriptedWorker:
    """A worker answering `<name>#<n>` at a cost of 0.5; it records what it was sent."""
    return ScriptedWorker(name, answer=lambda _, n: f"{name}#{n}", cost_usd=0.5)


class ScriptedWriter:
    """Writes `plans[depth]` for a call at that depth (its depth read from how many times the
    prompt shows a workflow); records every prompt, shape and seed it was given."""

    def __init__(self, tokenizer, plans: dict[int, str], fail: bool = False) -> None:
        self.tokenizer, self.plans, self.fail = tokenizer, plans, fail
        self.calls: list[tuple[str, object, int]] = []

    async def write(self, prompt_ids, shape, seed) -> Sample:
        if self.fail:
            raise RuntimeError("generator actor died")
        text = self.tokenizer.decode(prompt_ids)
        self.calls.append((text, shape, seed))
        depth = sum(1 for c in self.calls)  # calls arrive parent first in these tests
        plan = self.plans.get(depth, self.plans.get(0, EMPTY))
        ids = tuple(self.tokenizer.encode(plan, add_special_tokens=False))
        return Sample(plan, ids, tuple(-0.5 for _ in ids), "stop")


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model("tiny-qwen2"))


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return ConductorPrompt(tokenizer, n_workers=3, max_steps=3, n_examples=0)


def pool():
    """Model 0 and 1 are workers, Model 2 is the Conductor itself."""
    return [echo("a"), echo("b"), ConductorSeat("conductor")]


def recursion(writer, prompts, max_depth=3, forced_below=0, parent="model_id = [0, 2]") -> Recursion:
    return Recursion(writer, prompts, max_depth, max_steps=3, forced_below=forced_below, seed=7, parent=parent)


def plan_of(*steps) -> Plan:
    return Plan(tuple(Step(m, s, a) for m, s, a in steps))


def run(plan, workers, rec, key="k"):
    return asyncio.run(run_plan(plan, TASK, workers, StepLimits(), sample_key=key, recursion=rec))


CALLS_ITSELF = 'model_id = [1, 2]\nsubtasks = ["check it", "again"]\naccess_list = [[], "all"]\n'
ONE_STEP = 'model_id = [1]\nsubtasks = ["improve the answer"]\naccess_list = [[]]\n'


def test_a_step_given_to_the_conductor_runs_an_inner_plan_that_sees_the_answer_so_far(tokenizer, prompts):
    writer = ScriptedWriter(tokenizer, {1: ONE_STEP})
    workers = pool()
    result = run(plan_of((0, "solve", []), (2, "review", "all")), workers, recursion(writer, prompts))
    assert result.error is None and result.plan_error is None
    step = result.steps[1]
    assert step.inner is not None and step.inner.depth == 1 and not step.inner.forced
    # The inner Conductor was shown the question, the calling plan and the answer so far.
    prompt, shape, _ = writer.calls[0]
    assert TASK.question in prompt and "model_id = [0, 2]" in prompt and "a#0" in prompt
    assert shape is None  # free-text format: no shape to allow the empty plan in
    # The inner plan's worker saw the answer so far; its answer is the step's and the workflow's.
    inner_request = workers[1].requests[0]
    assert "a#0" in inner_request.messages[-1]["content"]
    assert step.response == "b#0" == result.final_answer
    assert step.cost_usd == 0.5 and result.cost_usd == 1.0  # the inner plan's spend counts
    assert [s.worker for s in result.worker_steps()] == ["a", "b"]


def test_three_empty_lists_keep_the_parents_answer_unchanged(tokenizer, prompts):
    writer = ScriptedWriter(tokenizer, {1: EMPTY})
    workers = pool()
    result = run(plan_of((0, "solve", []), (2, "review", "all")), workers, recursion(writer, prompts))
    inner = result.steps[1].inner
    assert inner.kept and inner.plan == Plan(()) and inner.workflow is None
    assert result.final_answer == result.steps[0].response == "a#0"
    assert len(workers[0].requests) == 1 and not workers[1].requests
    assert result.cost_usd == 0.5


def test_recursion_stops_at_the_maximum_depth(tokenizer, prompts):
    writer = ScriptedWriter(tokenizer, {0: CALLS_ITSELF})  # every call calls the Conductor again
    result = run(plan_of((0, "solve", []), (2, "review", "all")), pool(), recursion(writer, prompts, max_depth=2))
    calls = result.inner_calls()
    assert [c.depth for c in calls] == [1, 2, 3]
    assert len(writer.calls) == 2  # depths 1 and 2 sampled; depth 3 is past the limit
    assert calls[-1].at_limit and calls[-1].kept and not calls[-1].completion_ids
    # The call at the limit keeps the answer it was shown: depth 2's plan ends on it.
    depth2 = calls[1].workflow
    assert depth2.final_answer == depth2.steps[0].response == calls[-1].current_answer


def test_without_recursion_a_step_given_to_the_conductor_keeps_the_answer(tokenizer, prompts):
    result = run(plan_of((0, "solve", []), (2, "review", "all")), pool(), None)
    assert result.steps[1].inner.at_limit and result.final_answer == "a#0"
    result = run(plan_of((0, "solve", []), (2, "review", "all")), pool(), recursion(None, prompts, max_depth=0))
    assert result.steps[1].inner.at_limit and result.final_answer == "a#0"


def test_a_forced_call_ends_a_plan_that_did_not_call_the_conductor(tokenizer, prompts):
    writer = ScriptedWriter(tokenizer, {1: ONE_STEP})
    result = run(plan_of((0, "solve", [])), pool(), recursion(writer, prompts, forced_below=1))
    assert len(result.steps) == 2
    forced = result.steps[-1]
    assert forced.model_id == FORCED_CALL and forced.inner.forced and forced.inner.depth == 1
    assert result.final_answer == "b#0"
    # One forced call only: the inner plan (depth 1) is not forced again.
    assert len(writer.calls) == 1
    # A plan that calls the Conductor itself is not forced a second time.
    writer = ScriptedWriter(tokenizer, {1: EMPTY})
    result = run(plan_of((0, "solve", []), (2, "review", "all")), pool(), recursion(writer, prompts, forced_below=1))
    assert len(result.steps) == 2 and len(writer.calls) == 1


def test_forced_calls_at_every_depth_below_the_limit_stop_at_empty_lists(tokenizer, prompts):
    writer = ScriptedWriter(tokenizer, {1: ONE_STEP, 2: ONE_STEP, 3: EMPTY})
    result = run(plan_of((0, "solve", [])), pool(), recursion(writer, prompts, max_depth=3, forced_below=3))
    assert [c.depth for c in result.inner_calls()] == [1, 2, 3]
    assert result.inner_calls()[-1].kept
    assert result.final_answer == "b#1"  # depth 2's answer, kept by depth 3


def test_an_unparsable_inner_plan_is_the_policys_failure(tokenizer, prompts):
    writer = ScriptedWriter(tokenizer, {1: 'model_id = [9]\nsubtasks = ["x"]\naccess_list = [[]]\n'})
    rollout = parse_rollout(
        Rollout(TASK, 'model_id = [0, 2]\nsubtasks = ["solve", "review"]\naccess_list = [[], "all"]\n'), 3, 3
    )
    asyncio.run(execute_rollouts([rollout], pool(), StepLimits(), key="k", recursion=recursion(writer, prompts)))
    assert rollout.reward == grading.reward(False, None) == 0.0
    assert rollout.plan_error.startswith("recursive call at depth 1: model_id[0] is 9")
    assert rollout.workflow.error is None and rollout.workflow.final_answer is None
    assert not ready_to_grade([rollout])


def test_a_generator_failure_is_an_infrastructure_error(tokenizer, prompts):
    writer = ScriptedWriter(tokenizer, {}, fail=True)
    result = run(plan_of((0, "solve", []), (2, "review", "all")), pool(), recursion(writer, prompts))
    assert result.error == "step 1: conductor: RuntimeError: generator actor died"
    assert result.final_answer is None


def test_the_seat_is_never_called_as_a_worker():
    with pytest.raises(ProviderError, match="is the Conductor itself"):
        asyncio.run(ConductorSeat("conductor").complete(WorkerRequest([{"role": "user", "content": "hi"}], 8, 0.2)))


def test_traces_show_the_recursion_tree(tokenizer, prompts, tmp_path):
    writer = ScriptedWriter(tokenizer, {1: CALLS_ITSELF, 2: ONE_STEP})
    rollout = parse_rollout(
        Rollout(TASK, 'model_id = [0, 2]\nsubtasks = ["solve", "review"]\naccess_list = [[], "all"]\n'), 3, 3
    )
    asyncio.run(execute_rollouts([rollout], pool(), StepLimits(), key="k", recursion=recursion(writer, prompts)))
    apply_grade(rollout, GradeResult(Verdict.WRONG, "b#0", "wrong"))
    TraceWriter(tmp_path).write(0, [{**rollout.to_dict(), "iteration": 0}])
    [row] = read_traces(tmp_path)
    assert row["recursive_calls"] == 2
    depth1 = row["steps"][1]["inner"]
    assert depth1["depth"] == 1 and depth1["plan"][1]["model_id"] == 2 and not depth1["kept"]
    depth2 = depth1["steps"][1]["inner"]
    assert depth2["depth"] == 2 and depth2["plan"] == [{"model_id": 1, "subtask": "improve the answer", "access": []}]
    assert depth2["steps"][0]["worker"] == "b" and depth2["answer"] == row["final_answer"]
    json.dumps(row["steps"])  # plain JSON all the way down


def test_inner_calls_are_seeded_by_their_place_not_by_their_batch(tokenizer, prompts):
    first, second = ScriptedWriter(tokenizer, {0: CALLS_ITSELF}), ScriptedWriter(tokenizer, {0: CALLS_ITSELF})
    run(plan_of((0, "solve", []), (2, "review", "all")), pool(), recursion(first, prompts, max_depth=2), key="x")
    run(plan_of((0, "solve", []), (2, "review", "all")), pool(), recursion(second, prompts, max_depth=2), key="x")
    seeds = [s for _, _, s in first.calls]
    assert seeds == [s for _, _, s in second.calls] and len(set(seeds)) == 2
    assert seeds[0] == call_seed(7, f"{TASK.id}|x/1")
    assert call_seed(7, "a") != call_seed(8, "a")


def test_the_non_recursive_alternative_is_discounted_in_forced_groups(tokenizer, prompts):
    kept, recursed = keep_answer(1, "x", forced=True), keep_answer(1, "x")
    recursed.workflow = run(plan_of((0, "s", [])), pool(), None)
    assert discounted_reward(1.0, True, [kept], 0.25) == 0.75
    assert discounted_reward(0.5, True, [kept], 0.25) == 0.375
    assert discounted_reward(1.0, True, [recursed], 0.25) == 1.0
    assert discounted_reward(1.0, False, [kept], 0.25) == 1.0  # unforced groups are not discounted
    assert discounted_reward(0.0, True, [], 0.25) == 0.0
    # Through apply_grade, as training grades a forced rollout that kept its answer.
    writer = ScriptedWriter(tokenizer, {1: EMPTY})
    rollout = parse_rollout(
        Rollout(TASK, 'model_id = [0]\nsubtasks = ["solve"]\naccess_list = [[]]\n', forced=True, discount=0.25), 3, 3
    )
    asyncio.run(execute_rollouts([rollout], pool(), StepLimits(), key="k", recursion=recursion(writer, prompts)))
    assert rollout.workflow.steps[-1].inner.forced and rollout.workflow.steps[-1].inner.kept
    apply_grade(rollout, GradeResult(Verdict.CORRECT, "42", "ok"))
    assert rollout.reward == 0.75


def test_forced_groups_are_half_the_batch_and_the_same_on_resume():
    drawn = forced_groups(8, 0.5, seed=3, iteration=5)
    assert len(drawn) == 4 and drawn == forced_groups(8, 0.5, seed=3, iteration=5)
    assert {frozenset(forced_groups(8, 0.5, 3, i)) for i in range(10)} != {frozenset(drawn)}
    assert forced_groups(4, 0.0, 0, 0) == set() and forced_groups(4, 1.0, 0, 0) == {0, 1, 2, 3}


def test_recursive_tokens_are_rows_of_the_loss_with_the_rollouts_advantage(tokenizer, prompts):
    writer = ScriptedWriter(tokenizer, {1: ONE_STEP, 2: EMPTY})  # the first rollout recurses, the second keeps
    completion = 'model_id = [0]\nsubtasks = ["solve"]\naccess_list = [[]]\n'
    rollouts = [
        parse_rollout(
            Rollout(
                TASK,
                completion,
                group=0,
                sample=i,
                completion_ids=(1, 2, 3),
                logprobs=(-1.0, -1.0, -1.0),
                forced=True,
                discount=0.25,
            ),
            3,
            3,
        )
        for i in range(2)
    ]
    for r in rollouts:  # one at a time, so the scripted writer's order is the rollouts'
        asyncio.run(execute_rollouts([r], pool(), StepLimits(), key="k", recursion=recursion(writer, prompts)))
    for r in rollouts:
        apply_grade(r, GradeResult(Verdict.CORRECT, "42", ""))
    assert [r.reward for r in rollouts] == [1.0, 0.75]
    batch, informative = rollout_batch(rollouts, [[9, 9]])
    assert informative == 1
    assert len(batch.completion_ids) == 2 + 2  # two plans, two recursive calls
    for r in rollouts:
        [call] = r.inner_calls
        row = batch.completion_ids.index(list(call.completion_ids))
        assert batch.advantages[row] == r.advantage and batch.prompt_ids[row] == list(call.prompt_ids)
        assert batch.old_logprobs[row] == list(call.logprobs)
    assert batch.prompt_ids[0] == [9, 9]
    assert rollouts[0].advantage > 0 > rollouts[1].advantage


def test_generator_writer_batches_calls_made_together():
    seen = []

    class Generators:
        def sample(self, prompts, n, temperature, max_tokens, top_p, seed=None, shape=None):
            seen.append((len(prompts), list(seed)))
            return [[Sample(f"p{i}", (i,), (-1.0,), "stop")] for i in range(len(prompts))]

    writer = generator_writer(Generators(), 1.0, 16)

    async def many():
        return await asyncio.gather(*(writer.write([i], None, 100 + i) for i in range(5)))

    samples = asyncio.run(many())
    assert seen == [(5, [100, 101, 102, 103, 104])]
    assert [s.text for s in samples] == [f"p{i}" for i in range(5)]


def test_recursion_settings_are_checked_at_start():
    config = load_config(None, ["conductor.max_depth=2"])
    assert config.conductor.max_depth == 2 and config.train.recursion.forced_share == 0.5
    assert config.train.recursion.discount == 0.25
    with pytest.raises(ConfigError, match="conductor.max_depth"):
        load_config(None, ["conductor.max_depth=-1"])
    with pytest.raises(ConfigError, match="train.recursion.discount"):
        load_config(None, ["train.recursion.discount=2"])
    seat = {"name": "me", "provider": "conductor"}
    workers = [w.model_dump() for w in load_config(None).workers]
    with_seat = load_config(None).model_validate({**load_config(None).model_dump(), "workers": workers + [seat]})
    assert with_seat.workers[-1].provider == "conductor"
    with pytest.raises(ValueError, match="one worker may be the Conductor itself"):
        load_config(None).model_validate(
            {**load_config(None).model_dump(), "workers": workers + [seat, {**seat, "name": "me2"}]}
        )


def test_calls_made_while_a_batch_samples_get_the_next_batch_and_a_writer_outlives_its_event_loop():
    import time as clock

    from conductor_rl.rollout.recursion import BatchedPlanWriter

    batches = []

    def sample_batch(prompt_ids, shapes, seeds):
        batches.append(list(seeds))
        clock.sleep(0.3)
        return [Sample(f"s{s}", (s,), (-1.0,), "stop") for s in seeds]

    writer = BatchedPlanWriter(sample_batch, window_s=0.01)

    async def early_and_late():
        async def late():
            await asyncio.sleep(0.15)  # while the first batch is being sampled
            return await writer.write([2], None, 2)

        return await asyncio.wait_for(asyncio.gather(writer.write([1], None, 1), late()), timeout=30)

    assert [s.text for s in asyncio.run(early_and_late())] == ["s1", "s2"]
    assert batches == [[1], [2]]
    # Training runs each execution round in its own event loop, with one writer for the run.
    assert [s.text for s in asyncio.run(early_and_late())] == ["s1", "s2"]


def test_ask_prints_the_recursion_tree(tokenizer, prompts):
    from jobs.ask import step_lines

    writer = ScriptedWriter(tokenizer, {1: ONE_STEP, 2: EMPTY})
    rollout = parse_rollout(Rollout(TASK, 'model_id = [0]\nsubtasks = ["solve"]\naccess_list = [[]]\n'), 3, 3)
    asyncio.run(
        execute_rollouts(
            [rollout], pool(), StepLimits(), key="k", recursion=recursion(writer, prompts, max_depth=2, forced_below=2)
        )
    )
    text = "\n".join(step_lines(rollout.to_dict()["steps"], "  "))
    assert "  step 1: the Conductor, forced, reads all" in text
    assert "  depth 1: the Conductor planned again:" in text
    assert "      step 0: Model 1 (b), reads []" in text
    assert "      step 1: the Conductor, forced, reads all" in text
    assert "depth 2: the Conductor kept the answer (three empty lists)" in text
