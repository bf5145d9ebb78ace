"""Asynchronous training's pipeline (jobs/pipeline.py) and bound (conductor_rl/policy/staleness.py),
without Ray: iterations come in order, sampling never runs more than max_staleness ahead of the
learner while running the previous iteration's plans overlaps it, a producer's failure reaches the
learner after what came before, and closing stops a collection in flight."""

import threading
import time

import pytest

from conductor_rl.config import load_config
from conductor_rl.config.strict import ConfigError
from conductor_rl.policy.staleness import behaviour_source, may_collect, staleness_histogram, within_bound
from conductor_rl.rollout.rollouts import Rollout
from conductor_rl.rollout.workflow import InnerCall, Task, WorkflowResult
from jobs.pipeline import PipelineClosed, RolloutPipeline


def test_collection_may_run_k_iterations_ahead_of_the_learner():
    assert may_collect(0, -1, 0) and not may_collect(1, -1, 0) and may_collect(1, 0, 0)
    assert may_collect(1, -1, 1) and not may_collect(2, -1, 1) and may_collect(3, 1, 1)
    assert may_collect(2, -1, 2) and not may_collect(3, -1, 2)


def rollout(version: int, reward: float | None = 1.0, inner: tuple[int, ...] = ()) -> Rollout:
    r = Rollout(Task("q", "?"), "x", completion_ids=(1,), reward=reward, weights_version=version)
    if inner:
        r.workflow = WorkflowResult(steps=[], wall_s=0.0)
        calls = [InnerCall(1, "a", completion_ids=(2,), weights_version=v) for v in inner]
        r.workflow.inner_calls = lambda: calls  # what the engine's tree walk would return
    return r


def test_a_rollout_any_of_whose_completions_is_older_than_the_bound_is_left_out():
    fresh, stale, stale_inner = rollout(4), rollout(2), rollout(4, inner=(4, 2))
    kept, too_old = within_bound([fresh, stale, stale_inner], learner_version=4, max_staleness=1)
    assert kept == [fresh] and too_old == [stale, stale_inner]
    assert within_bound([stale], 4, 2) == ([stale], [])
    assert staleness_histogram([rollout(4), rollout(3), rollout(3), rollout(2, reward=None)], 4) == {"0": 1, "1": 2}


def test_stale_rows_take_the_samplers_log_probs_unless_a_mask_made_them_and_then_the_learners():
    assert behaviour_source("auto", "vllm", constrained=False, zero_stage=2) == "sampler"
    assert behaviour_source("auto", "transformers", constrained=True, zero_stage=2) == "sampler"
    assert behaviour_source("auto", "vllm", constrained=True, zero_stage=2) == "learner"
    assert behaviour_source("auto", "vllm", constrained=True, zero_stage=3) == "none"
    assert behaviour_source("sampler", "vllm", constrained=True, zero_stage=2) == "sampler"
    with pytest.raises(ConfigError, match="learner.behaviour_logprobs"):
        load_config(None, ["train.max_staleness=1", "learner.zero_stage=3", "learner.behaviour_logprobs=learner"])
    load_config(None, ["train.max_staleness=0", "learner.zero_stage=3", "learner.behaviour_logprobs=learner"])


def test_iterations_arrive_in_order_and_collection_waits_for_the_bound():
    learned = [-1]
    started: list[tuple[int, int]] = []  # (iteration, learned through when its sampling began)
    sampling_began = {j: threading.Event() for j in range(5)}
    overlapped = []  # iterations whose sampling began while the previous one's plans ran

    def sample(j: int) -> str:
        started.append((j, learned[0]))
        sampling_began[j].set()
        return f"plans {j}"

    def run(plans: str) -> str:
        # The workers' calls last until the next iteration's sampling has begun, which a pipeline
        # that overlaps the two allows at once; a serial one would leave this wait to time out.
        j = int(plans.split()[1])
        if j + 1 < 5 and sampling_began[j + 1].wait(10):
            overlapped.append(j + 1)
        return f"rollouts {j}"

    with RolloutPipeline(sample, run, 0, 5, max_staleness=1, halt=lambda: None) as pipeline:
        for j in range(5):
            item, waited = pipeline.next(j)
            assert item == f"rollouts {j}" and waited >= 0
            time.sleep(0.05)  # the learner's step: the producer may run ahead meanwhile, within the bound
            learned[0] = j
            pipeline.learned(j)
    assert [j for j, _ in started] == [0, 1, 2, 3, 4]
    assert all(j - through - 1 <= 1 for j, through in started), started
    assert any(j - through - 1 == 1 for j, through in started), "the producer never ran ahead"
    assert overlapped == [1, 2, 3, 4], "sampling did not overlap the previous iteration's plans"


def test_a_producer_failure_reaches_the_learner_after_what_came_before():
    def sample(j: int) -> int:
        if j == 2:
            raise RuntimeError("generator died")
        return j

    def run(j: int) -> int:
        time.sleep(0.1)  # still running iteration 1 when sampling 2 fails
        return j

    with RolloutPipeline(sample, run, 0, 4, max_staleness=2, halt=lambda: None) as pipeline:
        assert pipeline.next(0)[0] == 0
        pipeline.learned(0)
        assert pipeline.next(1)[0] == 1
        with pytest.raises(RuntimeError, match="generator died"):
            pipeline.next(2)


def test_closing_halts_a_collection_in_flight_and_waits_for_it():
    halted = threading.Event()
    finished = threading.Event()

    def run(j: int) -> int:
        if j == 1:
            assert halted.wait(10), "close() did not halt the collection in flight"
            finished.set()
            raise RuntimeError("stopped at a safe point")
        return j

    pipeline = RolloutPipeline(lambda j: j, run, 0, 3, max_staleness=1, halt=halted.set)
    with pipeline:
        assert pipeline.next(0)[0] == 0
        deadline = time.monotonic() + 10  # iteration 1 is being collected (its sampling has begun)
        while pipeline.in_flight() != [0, 1] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pipeline.in_flight() == [0, 1]
    assert finished.is_set()  # close() returned only after the producer ended
    with pytest.raises((PipelineClosed, RuntimeError)):
        pipeline.next(1)


def test_a_pipeline_needs_a_bound_of_one_or_more():
    with pytest.raises(ValueError, match="max_staleness >= 1"):
        RolloutPipeline(lambda j: j, lambda j: j, 0, 1, max_staleness=0, halt=lambda: None)
