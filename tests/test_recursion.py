"""The recursive Conductor (conductor_rl/rollout/recursion.py): a plan's step given to the
Conductor, forced calls after a plan (training only), the depth limit as a limit (no call at
inference unless a plan gives its seat a step), empty lists keeping the answer, the recursion
tree in traces, the non-recursive discount, the stop statistics, the seat requirement and
recursive tokens in the loss.

The plans a recursive call writes come from a scripted `PlanWriter` (the interface the
generator and the in-process model implement), so each test decides what the Conductor
writes at each depth; the prompts are the real ones, rendered with a real tokenizer.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

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
from conductor_rl.rollout.recursion import (
    Recursion,
    StopCounts,
    call_seed,
    discounted_reward,
    forced_groups,
    generator_writer,
)
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


SEAT = {"name": "conductor", "provider": "conductor"}


def seated_config(*overrides: str):
    """The embedded default with the Conductor's seat as a fourth worker (Model 3)."""
    return load_config(None, [f"workers.3={json.dumps(SEAT)}", *overrides])


def test_each_inner_call_decides_again_and_empty_lists_end_the_loop(tokenizer, prompts):
    # Depth 1 asks worker b, then gives its own seat a step; depth 2 stops: three empty lists.
    writer = ScriptedWriter(tokenizer, {1: CALLS_ITSELF, 2: EMPTY})
    result = run(plan_of((0, "solve", []), (2, "review", "all")), pool(), recursion(writer, prompts, max_depth=3))
    calls = result.inner_calls()
    assert [c.depth for c in calls] == [1, 2] and len(writer.calls) == 2  # depth 3 never asked
    assert not calls[0].kept and calls[1].kept and calls[1].made and not calls[1].at_limit
    assert result.final_answer == "b#0" == calls[1].current_answer  # the answer depth 2 was shown stands


def test_no_call_is_made_at_inference_unless_a_plan_gives_its_seat_a_step(tokenizer):
    from conductor_rl.system import System

    system = System(seated_config("conductor.max_depth=3"), tokenizer=tokenizer)
    for use in ("answer", "evaluate"):
        writer = ScriptedWriter(tokenizer, {0: ONE_STEP})
        rec = system.recursion(writer, use, seed=1)
        assert rec is not None and rec.max_depth == 3 and rec.forced_below == 0 and rec.discount == 0.0
        result = run(plan_of((0, "solve", []), (1, "check", "all")), pool(), rec.for_plan("p"))
        assert result.inner_calls() == [] and writer.calls == [] and len(result.steps) == 2
    # A served request's own depth is a limit too.
    served = system.recursion(ScriptedWriter(tokenizer, {}), "answer", seed=1, depth=2)
    assert served.max_depth == 2 and served.forced_below == 0
    # Training forces nothing by itself either: execute_rollouts forces the forced groups' rollouts.
    trained = system.recursion(ScriptedWriter(tokenizer, {}), "train", seed=1)
    assert trained.forced_below == 0 and trained.discount == 0.25


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


def test_a_non_recursive_rollout_is_discounted_in_every_group(tokenizer, prompts):
    kept, planned, cut = keep_answer(1, "x"), keep_answer(1, "x"), keep_answer(1, "x", at_limit=True)
    planned.workflow = run(plan_of((0, "s", [])), pool(), None)
    assert discounted_reward(1.0, [], 0.25) == 0.75  # no call: the plan never asked for its own review
    assert discounted_reward(0.5, [], 0.25) == 0.375
    assert discounted_reward(1.0, [kept], 0.25) == 1.0  # a call that stopped on a right answer
    assert discounted_reward(1.0, [planned], 0.25) == 1.0  # a call whose plan kept it right: no more
    assert discounted_reward(1.0, [cut], 0.25) == 0.75  # cut off by the depth limit: no call was made
    assert discounted_reward(0.0, [], 0.25) == 0.0

    def graded(completion: str, forced: bool, writer: ScriptedWriter) -> Rollout:
        rollout = parse_rollout(Rollout(TASK, completion, forced=forced), 3, 3)
        rec = replace(recursion(writer, prompts), discount=0.25)  # training's: System.recursion("train")
        asyncio.run(execute_rollouts([rollout], pool(), StepLimits(), key="k", recursion=rec))
        apply_grade(rollout, GradeResult(Verdict.CORRECT, "42", "ok"))
        return rollout

    solo = 'model_id = [0]\nsubtasks = ["solve"]\naccess_list = [[]]\n'
    review = 'model_id = [0, 2]\nsubtasks = ["solve", "review"]\naccess_list = [[], "all"]\n'
    # A forced group: the engine's call kept the answer, which earns the whole reward.
    forced = graded(solo, True, ScriptedWriter(tokenizer, {1: EMPTY}))
    assert forced.workflow.steps[-1].inner.forced and forced.workflow.steps[-1].inner.kept
    assert forced.discount == 0.25 and forced.reward == 1.0
    # An unforced group: a plan without a seat step is discounted, one that asked for its review is not.
    assert graded(solo, False, ScriptedWriter(tokenizer, {1: EMPTY})).reward == 0.75
    assert graded(review, False, ScriptedWriter(tokenizer, {1: EMPTY})).reward == 1.0
    assert graded(review, False, ScriptedWriter(tokenizer, {1: ONE_STEP})).reward == 1.0
    # Evaluation and answering discount nothing (their Recursion has discount 0).
    plain = parse_rollout(Rollout(TASK, solo), 3, 3)
    asyncio.run(execute_rollouts([plain], pool(), StepLimits(), key="k", recursion=recursion(None, prompts)))
    apply_grade(plain, GradeResult(Verdict.CORRECT, "42", "ok"))
    assert plain.reward == 1.0


def test_each_call_made_records_whether_the_answer_it_was_shown_was_right(tokenizer, prompts):
    from conductor_rl.evaluation import record_of, stop_rates
    from conductor_rl.run.metrics import iteration_metrics

    right = ScriptedWorker("r", text="42")
    workers = [right, echo("b"), ConductorSeat("conductor")]
    review = 'model_id = [0, 2]\nsubtasks = ["solve", "review"]\naccess_list = [[], "all"]\n'
    wrong_first = 'model_id = [1, 2]\nsubtasks = ["solve", "review"]\naccess_list = [[], "all"]\n'
    fix = 'model_id = [0]\nsubtasks = ["solve it again"]\naccess_list = [[]]\n'
    cases = [(review, EMPTY), (review, ONE_STEP), (wrong_first, EMPTY), (wrong_first, fix)]
    rollouts = []
    for i, (completion, inner) in enumerate(cases):
        rollout = parse_rollout(Rollout(TASK, completion, sample=i), 3, 3)
        writer = ScriptedWriter(tokenizer, {1: inner})
        asyncio.run(execute_rollouts([rollout], workers, StepLimits(), key="k", recursion=recursion(writer, prompts)))
        apply_grade(rollout, grading.grade(TASK.answer_kind, rollout.workflow.final_answer, TASK.reference))
        rollouts.append(rollout)
    shown = [r.inner_calls[0].incoming_correct for r in rollouts]
    assert shown == [True, True, False, False]
    assert [r.grade.verdict for r in rollouts] == [Verdict.CORRECT, Verdict.WRONG, Verdict.WRONG, Verdict.CORRECT]
    assert StopCounts.of(c for r in rollouts for c in r.inner_calls) == StopCounts(2, 1, 2, 1)
    assert rollouts[0].to_dict()["steps"][1]["inner"]["incoming_correct"] is True
    metrics = iteration_metrics(rollouts, ["r", "b", "conductor"])
    assert metrics["recursion_stop_rate_when_right"] == 0.5 == metrics["recursion_stop_rate_when_wrong"]
    assert metrics["chosen_recursion_share"] == 1.0
    records = [record_of("conductor:x@depth=1", "b", r, []) for r in rollouts]
    assert [(r.recursive_calls, r.calls_on_right, r.stops_on_right) for r in records[:2]] == [(1, 1, 1), (1, 1, 0)]
    assert stop_rates(records) == {"conductor:x@depth=1": {"stop_rate_when_right": 0.5, "stop_rate_when_wrong": 0.5}}


def test_stop_rates_from_hand_built_records():
    from conductor_rl.evaluation import EvalRecord, stop_rates

    def rec(method, verdict="correct", **counts):
        return EvalRecord(method, "b", "q", "math", 0, verdict, **counts)

    records = [
        rec("a", recursive_calls=2, calls_on_right=2, stops_on_right=2),
        rec("a", "wrong", recursive_calls=3, calls_on_right=1, stops_on_right=0, calls_on_wrong=2, stops_on_wrong=1),
        rec("a", "error", recursive_calls=1, calls_on_wrong=1, stops_on_wrong=1),  # infrastructure: left out
        rec("plain"),
    ]
    assert stop_rates(records) == {
        "a": {"stop_rate_when_right": 2 / 3, "stop_rate_when_wrong": 0.5},
        "plain": {"stop_rate_when_right": None, "stop_rate_when_wrong": None},
    }
    again = EvalRecord.from_dict(json.loads(json.dumps(records[1].to_dict())))
    assert again == records[1] and again.stop_counts == StopCounts(1, 0, 2, 1)


def test_forced_groups_are_half_the_batch_and_the_same_on_resume():
    drawn = forced_groups(8, 0.5, seed=3, iteration=5)
    assert len(drawn) == 4 and drawn == forced_groups(8, 0.5, seed=3, iteration=5)
    assert {frozenset(forced_groups(8, 0.5, 3, i)) for i in range(10)} != {frozenset(drawn)}
    assert forced_groups(4, 0.0, 0, 0) == set() and forced_groups(4, 1.0, 0, 0) == {0, 1, 2, 3}


def test_recursive_tokens_are_rows_of_the_loss_with_the_rollouts_advantage(tokenizer, prompts):
    writer = ScriptedWriter(tokenizer, {1: ONE_STEP, 2: EMPTY})  # the first rollout's call plans, the second's keeps
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
    apply_grade(rollouts[0], GradeResult(Verdict.CORRECT, "42", ""))
    apply_grade(rollouts[1], GradeResult(Verdict.WRONG, "a#1", ""))
    assert [r.reward for r in rollouts] == [1.0, 0.5]
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
    config = seated_config("conductor.max_depth=2")
    assert config.conductor.max_depth == 2 and config.train.recursion.forced_share == 0.5
    assert config.train.recursion.discount == 0.25 and config.workers[-1].provider == "conductor"
    with pytest.raises(ConfigError, match="conductor.max_depth"):
        load_config(None, ["conductor.max_depth=-1"])
    with pytest.raises(ConfigError, match="train.recursion.discount"):
        load_config(None, ["train.recursion.discount=2"])
    workers = [w.model_dump() for w in load_config(None).workers]
    with pytest.raises(ValueError, match="one worker may be the Conductor itself"):
        load_config(None).model_validate(
            {**load_config(None).model_dump(), "workers": workers + [SEAT, {**SEAT, "name": "me2"}]}
        )


def test_recursion_without_a_seat_is_refused_with_the_fix():
    from conductor_rl.evaluation.methods import parse_method
    from conductor_rl.evaluation.prepare import EvaluationError, check_seat, conductor_of
    from conductor_rl.serving.chat_format import RequestError, RequestLimits, parse_chat_request

    with pytest.raises(
        ConfigError, match=r"conductor.max_depth=1 .*add a worker \{name: conductor, provider: conductor\}"
    ):
        load_config(None, ["conductor.max_depth=1"])
    plain, seated = load_config(None), seated_config()
    names = [w.name for w in plain.workers]
    with pytest.raises(EvaluationError, match=r"conductor:untrained@depth=2 lets .* add a worker"):
        check_seat(conductor_of(parse_method("conductor:untrained@depth=2", names), plain))
    check_seat(conductor_of(parse_method("conductor:untrained@depth=0", names), plain))
    check_seat(conductor_of(parse_method("conductor:untrained@depth=2", names + ["conductor"]), seated))

    def ask(pool, limits, **extra):
        raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "q"}], **extra}).encode()
        return parse_chat_request(raw, "m", pool, limits)

    pool_names = [w.name for w in seated.workers]
    limits = RequestLimits(max_depth=2, seat="conductor")
    assert ask(pool_names, limits, max_depth=2).max_depth == 2
    assert ask(pool_names, limits, max_depth=1, workers=names[:2]).max_depth == 1  # a subset is offered with the seat
    with pytest.raises(RequestError) as caught:  # no seat in the pool
        ask(names, RequestLimits(max_depth=2), max_depth=1)
    assert caught.value.status == 400 and caught.value.param == "max_depth" and "seat" in caught.value.message


def test_demonstrations_never_give_a_step_to_the_seat():
    import random

    from conductor_rl.config import answering_workers
    from conductor_rl.plan.demonstrations import demonstration_plan

    ids = answering_workers(seated_config().workers)
    assert ids == [0, 1, 2]
    rng = random.Random(0)
    used = {s.model_id for _ in range(300) for s in demonstration_plan("What is 6 times 7?", ids, 3, rng).steps}
    assert used == {0, 1, 2}
    # Without a seat, the ids are the whole pool and the draws those of a worker count.
    assert [demonstration_plan("q", 3, 3, random.Random(5)) for _ in range(5)] == [
        demonstration_plan("q", [0, 1, 2], 3, random.Random(5)) for _ in range(5)
    ]


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

    writer = ScriptedWriter(tokenizer, {1: CALLS_ITSELF, 2: EMPTY})
    rollout = parse_rollout(
        Rollout(TASK, 'model_id = [0]\nsubtasks = ["solve"]\naccess_list = [[]]\n', forced=True), 3, 3
    )
    asyncio.run(
        execute_rollouts([rollout], pool(), StepLimits(), key="k", recursion=recursion(writer, prompts, max_depth=2))
    )
    text = "\n".join(step_lines(rollout.to_dict()["steps"], "  "))
    assert "  step 1: the Conductor, forced, reads all" in text
    assert "  depth 1: the Conductor planned again:" in text
    assert "      step 0: Model 1 (b), reads []" in text
    assert "      step 1: Model 2 (conductor), reads all" in text
    assert "depth 2: the Conductor kept the answer (three empty lists)" in text
