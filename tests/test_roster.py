"""Adaptive worker pools (conductor_rl/plan/roster.py): rosters drawn per question, renumbered in the
prompt, plans parsed against them, run on their workers only, and mapped back to the pool in traces
and metrics. The training run with rosters (resume draws the same) is in tests/test_train.py."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from conductor_rl.plan import Plan, Step
from conductor_rl.plan.prompts import conductor_messages
from conductor_rl.plan.roster import Roster, RosterError, draw_roster, parse_worker_names, roster_of
from conductor_rl.rollout.rollouts import Rollout, execute_rollouts, parse_rollout
from conductor_rl.rollout.workflow import StepLimits, Task
from conductor_rl.run.metrics import iteration_metrics
from conductor_rl.testing.workers import ScriptedWorker

NAMES = ["gpt", "gemini", "claude", "qwen", "r1", "gemma"]
TASK = Task(id="q", question="What is 6 times 7?", domain="math", reference="42", answer_kind="numeric")


def test_a_draw_is_a_function_of_seed_and_key_and_stays_in_its_size_range():
    draws = [draw_roster(6, (2, 4), seed=0, key=f"0/q{i}") for i in range(400)]
    assert draws == [draw_roster(6, (2, 4), seed=0, key=f"0/q{i}") for i in range(400)]
    assert draws != [draw_roster(6, (2, 4), seed=1, key=f"0/q{i}") for i in range(400)]
    assert all(2 <= len(r) <= 4 and list(r.workers) == sorted(set(r.workers)) and max(r.workers) < 6 for r in draws)
    sizes = Counter(len(r) for r in draws)
    assert set(sizes) == {2, 3, 4} and min(sizes.values()) > 90, sizes  # each size about a third
    listed = Counter(w for r in draws for w in r.workers)
    assert set(listed) == set(range(6)) and min(listed.values()) > 150, listed  # every worker, evenly
    assert {len(r) for r in (draw_roster(6, (3, 3), 0, str(i)) for i in range(20))} == {3}


@pytest.mark.parametrize("size", [(0, 2), (3, 2), (2, 7)])
def test_a_size_that_does_not_fit_the_pool_is_refused(size):
    with pytest.raises(RosterError, match="does not fit a pool of 6"):
        draw_roster(6, size, 0, "k")


def test_a_users_worker_names_make_a_roster_in_pool_order():
    assert roster_of(parse_worker_names("gemma, qwen,r1"), NAMES).workers == (3, 4, 5)
    with pytest.raises(RosterError, match=r"unknown worker\(s\) 'llama'; the pool has: gpt, gemini"):
        roster_of(["qwen", "llama"], NAMES)
    with pytest.raises(RosterError, match="named twice"):
        roster_of(["qwen", "qwen"], NAMES)
    with pytest.raises(RosterError, match="names no worker"):
        parse_worker_names(" , ")
    with pytest.raises(RosterError, match="distinct"):
        Roster((1, 1))


def test_the_prompt_lists_only_the_roster_renumbered():
    system, user = (m["content"] for m in conductor_messages("Q?", n_workers=2))
    assert "Model 0, Model 1." in system and "Model 2" not in system and "from 0 to 1" in system
    assert "Now your task (a team of 2 models: Model 0, Model 1)" in user


def rollout(completion: str, roster: Roster | None) -> Rollout:
    return parse_rollout(Rollout(TASK, completion, roster=roster), n_workers=len(NAMES), max_steps=5)


def test_a_plan_naming_a_model_past_its_roster_is_a_plan_error_with_reward_0():
    roster = Roster((2, 5))
    bad = rollout('model_id = [2]\nsubtasks = ["x"]\naccess_list = [[]]', roster)
    assert bad.plan is None and bad.reward == 0 and "2" in bad.plan_error
    # The same text is a fine plan for the whole pool: the roster is what refused it.
    assert rollout('model_id = [2]\nsubtasks = ["x"]\naccess_list = [[]]', None).plan is not None


def test_a_rosters_plan_runs_on_its_workers_only_and_maps_back_in_traces_and_metrics():
    workers = [ScriptedWorker(n) for n in NAMES]
    roster = Roster((1, 3, 4))
    r = rollout('model_id = [0, 2, 1]\nsubtasks = ["a", "b", "c"]\naccess_list = [[], [], "all"]', roster)
    limits = [StepLimits(max_tokens=100 + i) for i in range(len(NAMES))]
    asyncio.run(execute_rollouts([r], workers, limits))
    assert [s.worker for s in r.workflow.steps] == ["gemini", "r1", "qwen"]
    assert {w.name for w in workers if w.requests} == {"gemini", "qwen", "r1"}
    assert [w.requests[0].max_tokens for w in workers if w.requests] == [101, 103, 104]  # each its own limits
    record = r.to_dict()
    assert record["roster"] == [1, 3, 4]
    assert [(s["model_id"], s["pool_model_id"]) for s in record["plan"]] == [(0, 1), (2, 4), (1, 3)]
    assert r.pool_plan == Plan((Step(1, "a", []), Step(4, "b", []), Step(3, "c", "all")))

    metrics = iteration_metrics([r, rollout("no plan", Roster((0,)))], NAMES, {"math": "qwen"})
    assert metrics["roster_size_mean"] == 2.0
    assert metrics["worker_listed"] == {"gpt": 0.5, "gemini": 0.5, "claude": 0.0, "qwen": 0.5, "r1": 0.5, "gemma": 0.0}
    assert metrics["worker_usage"]["r1"] == pytest.approx(1 / 3) and metrics["worker_usage"]["gpt"] == 0
    assert metrics["final_worker_by_domain"]["math"]["qwen"] == 1.0
    assert metrics["best_worker_share"] == 1.0


def test_without_a_roster_nothing_changes():
    workers = [ScriptedWorker(n) for n in NAMES]
    r = rollout('model_id = [5]\nsubtasks = ["a"]\naccess_list = [[]]', None)
    asyncio.run(execute_rollouts([r], workers, StepLimits()))
    assert r.workflow.steps[0].worker == "gemma" and r.to_dict()["roster"] is None
    assert "roster_size_mean" not in iteration_metrics([r], NAMES)


@pytest.mark.parametrize("command", ["ask", "evaluate"])
def test_the_commands_workers_option_offers_the_subset_and_names_an_unknown_worker(command):
    import argparse
    import importlib

    from jobs.common import config_from_args

    job = importlib.import_module(f"jobs.{command}")
    parser = argparse.ArgumentParser()
    job.add_arguments(parser)
    positional = "question" if command == "ask" else "overrides_positional"
    config, _ = config_from_args(
        parser.parse_intermixed_args(["--workers", "sim-generalist,sim-math-expert"]), positional=positional
    )
    assert [w.name for w in config.workers] == ["sim-math-expert", "sim-generalist"]
    with pytest.raises(
        SystemExit,
        match="error: unknown worker\\(s\\) 'gpt-5'; the pool has: sim-math-expert, "
        "sim-knowledge-expert, sim-generalist",
    ):
        config_from_args(parser.parse_intermixed_args(["--workers", "gpt-5"]), positional=positional)
