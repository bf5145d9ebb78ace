"""Adaptive worker pools (conductor_rl/plan/roster.py): rosters drawn per question, each worker listed
under the same number in every roster (or renumbered with its description), plans parsed against
them, run on their workers only, and mapped back to the pool in traces and metrics. The training run
with rosters (resume draws the same) is in tests/test_train.py."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from conductor_rl.config import ConfigError, load_config, validate_config
from conductor_rl.plan import Plan, Step
from conductor_rl.plan.prompts import conductor_messages
from conductor_rl.plan.roster import (
    Roster,
    RosterError,
    draw_roster,
    offered_places,
    parse_worker_names,
    places_of,
    roster_for,
    with_workers,
)
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
    assert all(2 <= len(r) <= 4 and list(r) == sorted(set(r)) and max(r) < 6 for r in draws)
    sizes = Counter(len(r) for r in draws)
    assert set(sizes) == {2, 3, 4} and min(sizes.values()) > 90, sizes  # each size about a third
    listed = Counter(w for r in draws for w in r)
    assert set(listed) == set(range(6)) and min(listed.values()) > 150, listed  # every worker, evenly
    assert {len(r) for r in (draw_roster(6, (3, 3), 0, str(i)) for i in range(20))} == {3}


def test_the_conductors_seat_is_in_every_draw_and_not_counted_in_its_size():
    draws = [draw_roster(5, (2, 2), seed=0, key=str(i), always=(4,)) for i in range(50)]
    assert all(len(r) == 3 and 4 in r for r in draws)
    assert {w for r in draws for w in r} == {0, 1, 2, 3, 4}
    with pytest.raises(RosterError, match="does not fit a pool of 4"):
        draw_roster(5, (5, 5), 0, "k", always=(4,))


@pytest.mark.parametrize("size", [(0, 2), (3, 2), (2, 7)])
def test_a_size_that_does_not_fit_the_pool_is_refused(size):
    with pytest.raises(RosterError, match="does not fit a pool of 6"):
        draw_roster(6, size, 0, "k")


def test_a_users_worker_names_make_a_roster_in_pool_order():
    assert places_of(parse_worker_names("gemma, qwen,r1"), NAMES) == (3, 4, 5)
    with pytest.raises(RosterError, match=r"unknown worker\(s\) 'llama'; the pool has: gpt, gemini"):
        places_of(["qwen", "llama"], NAMES)
    with pytest.raises(RosterError, match="named twice"):
        places_of(["qwen", "qwen"], NAMES)
    with pytest.raises(RosterError, match="names no worker"):
        parse_worker_names(" , ")
    with pytest.raises(RosterError, match="distinct"):
        Roster((1, 1))
    with pytest.raises(RosterError, match="numbers its workers distinctly"):
        Roster((1, 2), ids=(3, 3))


def pool_config(*overrides: str, seat: bool = False):
    raw = load_config(None).model_dump(mode="json")
    raw["workers"] = [{"name": n, "provider": "sim", "sim": {"accuracy": {"math": 0.5}}} for n in NAMES]
    if seat:
        raw["workers"].append({"name": "conductor", "provider": "conductor"})
    return load_config(validate_config(raw), list(overrides))


def test_a_worker_keeps_its_number_in_every_roster():
    config = pool_config()
    rosters = [roster_for(config, places) for places in [(0, 1, 2, 3, 4, 5), (1, 3, 5), (3,), (0, 3, 4)]]
    for roster in rosters:
        numbered = dict(zip(roster.select(NAMES), roster.model_ids))
        assert numbered == {n: NAMES.index(n) for n in numbered}  # qwen is Model 3 wherever it is listed
    system, user = (m["content"] for m in conductor_messages("Q?", rosters[1]))
    assert "The available models are Model 1, Model 3, Model 5." in system
    assert "(one of 1, 3, 5)" in system and "Model 0" not in system
    assert "Now your task (a team of 3 models: Model 1, Model 3, Model 5)" in user
    # The whole pool reads as a pool without rosters always did.
    assert conductor_messages("Q?", rosters[0]) == conductor_messages("Q?", len(NAMES))


def test_with_descriptions_each_roster_is_renumbered_and_every_worker_described():
    config = pool_config("conductor.worker_identity=description", "workers.3.description=a careful checker")
    roster = roster_for(config, (1, 3, 5))
    assert roster.model_ids == (0, 1, 2)
    system, _ = (m["content"] for m in conductor_messages("Q?", roster))
    assert "Model 0 (gemini), Model 1 (a careful checker), Model 2 (gemma)." in system
    assert "you know them by a short description" in system and "from 0 to 2" in system


def test_a_numbering_that_names_two_workers_alike_is_refused_by_key():
    with pytest.raises(ConfigError, match=r"workers.*numbered \[1\].*own model_id"):
        pool_config("workers.0.model_id=1")


def test_a_users_subset_keeps_the_pools_numbers_and_the_conductors_seat():
    subset = with_workers(pool_config(), ["r1", "gemini"])
    assert [(w.name, w.model_id) for w in subset.workers] == [("gemini", 1), ("r1", 4)]
    assert roster_for(subset).model_ids == (1, 4)
    seated = pool_config(seat=True)
    assert offered_places(seated, ["qwen"]) == (3, 6)
    roster = roster_for(seated, offered_places(seated, ["qwen"]))
    assert roster.seat == 1 and roster.model_ids == (3, 6)
    system, _ = (m["content"] for m in conductor_messages("Q?", roster))
    assert "Model 6 is yourself" in system
    assert [w.name for w in with_workers(seated, ["qwen"]).workers] == ["qwen", "conductor"]


def rollout(completion: str, roster: Roster | None) -> Rollout:
    return parse_rollout(Rollout(TASK, completion, roster=roster), len(NAMES), max_steps=5)


def test_a_plan_naming_a_model_its_roster_does_not_list_is_a_plan_error_with_reward_0():
    roster = Roster((2, 5), ids=(2, 5))
    bad = rollout('model_id = [0]\nsubtasks = ["x"]\naccess_list = [[]]', roster)
    assert bad.plan is None and bad.reward == 0 and "the listed models are 2, 5" in bad.plan_error
    # The same text is a fine plan for the whole pool: the roster is what refused it.
    assert rollout('model_id = [0]\nsubtasks = ["x"]\naccess_list = [[]]', None).plan is not None
    good = rollout('model_id = [5]\nsubtasks = ["x"]\naccess_list = [[]]', roster)
    assert good.plan == Plan((Step(1, "x", []),)) and good.pool_plan == Plan((Step(5, "x", []),))


def test_a_rosters_plan_runs_on_its_workers_only_and_maps_back_in_traces_and_metrics():
    workers = [ScriptedWorker(n) for n in NAMES]
    roster = Roster((1, 3, 4), ids=(1, 3, 4))
    r = rollout('model_id = [1, 4, 3]\nsubtasks = ["a", "b", "c"]\naccess_list = [[], [], "all"]', roster)
    limits = [StepLimits(max_tokens=100 + i) for i in range(len(NAMES))]
    asyncio.run(execute_rollouts([r], workers, limits))
    assert [s.worker for s in r.workflow.steps] == ["gemini", "r1", "qwen"]
    assert {w.name for w in workers if w.requests} == {"gemini", "qwen", "r1"}
    assert [w.requests[0].max_tokens for w in workers if w.requests] == [101, 103, 104]  # each its own limits
    record = r.to_dict()
    assert record["roster"] == [1, 3, 4] and record["roster_model_ids"] == [1, 3, 4]
    assert [(s["model_id"], s["pool_model_id"], s["roster_place"]) for s in record["plan"]] == [
        (1, 1, 0),
        (4, 4, 2),
        (3, 3, 1),
    ]
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
        parser.parse_intermixed_args(["--workers", "sim-generalist,sim-knowledge-expert"]), positional=positional
    )
    assert [(w.name, w.model_id) for w in config.workers] == [("sim-knowledge-expert", 1), ("sim-generalist", 2)]
    with pytest.raises(
        SystemExit,
        match="error: unknown worker\\(s\\) 'gpt-5'; the pool has: sim-math-expert, "
        "sim-knowledge-expert, sim-generalist",
    ):
        config_from_args(parser.parse_intermixed_args(["--workers", "gpt-5"]), positional=positional)
