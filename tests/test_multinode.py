"""Across nodes, not just processes: the worker pool and the loop's pieces on a Ray cluster
of several nodes on this machine (tests/ray_clusters.py: one raylet per node, each with
the resources of a ray_cluster.yaml node type), laid out as a real run is laid out:

- the head (no CPU): the driver, the cost ledger, the rate limiter and the fake provider
  (conductor_rl/testing/fake_llm_server.py on 127.0.0.1, which every node here reaches);
- a "GPU" node (`conductor_gpu_node`; no real GPU): a learner rank's stand-in in a PACK
  placement group, as actors/learner.py makes one (a real DeepSpeed rank takes a minute);
- two CPU nodes (`conductor_cpu_node`): the worker replicas. Each replica asks for half of
  a node's `conductor_cpu_node`, so four replicas land two on each node.

The ledger and the limiter ask for no resources; unpinned, Ray put two of four such actors on
worker nodes here. actors/worker_pool.py keeps them on the creator's node, the driver's: the
head, which the tests check. Time is scaled as in test_worker_pool.py: a 3 s window of 30 calls.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books
from tests.http_fakes import FAKE_KEY, KEY_ENV, request, worker_config
from tests.ray_clusters import CPU_NODE, GPU_NODE, LOCAL_RAY, LocalCluster, on_node

pytestmark = pytest.mark.slow

WINDOW_S = 3.0
PER_WINDOW = 30
MAX_JITTER_429S = PER_WINDOW // 6  # as test_worker_pool.py: grant-to-arrival lag on a busy machine
HEADROOM_S = 0.25  # get_rate_limiter's for a 3 s window
PLAN = 'model_id = [0, 0]\nsubtasks = ["answer", "check"]\naccess_list = [[], "all"]'


@dataclass
class Multinode:
    local: LocalCluster
    ray: Any
    head: str  # node ids
    gpu: str
    cpu: dict[str, Any]  # "a"/"b" -> Ray's node object

    def pinned(self) -> dict[str, Any]:
        return on_node(self.head)


@pytest.fixture(scope="module")
def multinode():
    """The cluster, for this module only. The session's in-process cluster (conftest.py), if up, is
    stopped first (a driver joins one cluster) and started again afterwards for the tests that follow."""
    import ray

    restore = ray.is_initialized()
    if restore:
        ray.shutdown()
    saved_key = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = FAKE_KEY
    local = None
    try:
        local = LocalCluster(head_cpus=0)
        gpu = local.add_node(2, {GPU_NODE: 1})
        cpu = {
            "a": local.add_node(2, {CPU_NODE: 1, "test_node_a": 1}),
            "b": local.add_node(2, {CPU_NODE: 1, "test_node_b": 1}),
        }
        local.connect()
        yield Multinode(local, ray, local.head.node_id, gpu.node_id, cpu)
    finally:
        left = local.shutdown() if local is not None else []
        if saved_key is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = saved_key
        if restore:
            ray.init(**LOCAL_RAY)
    assert not left, f"processes of the test cluster outlived Cluster.shutdown (killed now): {left}"


@pytest.fixture(scope="module")
def server(multinode):
    from actors.fake_llm_server import RemoteFakeLLMServer

    srv = RemoteFakeLLMServer(actor_options=multinode.pinned())
    yield srv
    srv.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def make_pool(
    mn: Multinode,
    server,
    replicas: int,
    ledger=None,
    rpm: int | None = None,
    scope: str = "",
    where: dict[str, float] | None = None,
):
    """A WorkerPool whose replicas ask `where` (default: half a CPU node each); pools with the same
    `scope` (and worker) share one limiter. Its ledger and limiter land on the driver's node, the head."""
    from actors.worker_pool import WorkerPool, get_ledger
    from conductor_rl.workers.retry import RetryPolicy

    config = worker_config("openai", server, name="multinode", rpm=rpm)
    ledger = ledger if ledger is not None else get_ledger(name=unique("ledger"))
    pool = WorkerPool(
        config,
        replicas=replicas,
        ledger=ledger,
        window_s=WINDOW_S,
        headroom_s=HEADROOM_S,
        num_cpus=0.25,
        resources=where or {CPU_NODE: 0.5},
        limiter_scope=scope,
        policy=RetryPolicy(max_retries=4, base_delay_s=0.05, max_delay_s=0.2),
    )
    assert {node_of(mn.ray, a) for a in (ledger, pool.limiter) if a is not None} == {mn.head}
    return pool, ledger


def ask(ray, actor, fn, timeout_s: float = 120.0):
    """`fn(actor)` run inside the actor; an actor that Ray is restarting (its node was lost) is waited for."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(actor.__ray_call__.remote(fn), timeout=timeout_s)
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def node_of(ray, actor) -> str:
    return ask(ray, actor, lambda _self: ray.get_runtime_context().get_node_id())


def pid_of(ray, actor) -> int:
    return ask(ray, actor, lambda _self: os.getpid())


def count_picks(pool) -> Counter:
    """Which replica the pool sends each call to (replica index -> calls)."""
    picks: Counter = Counter()
    pick = pool._pick

    def counted() -> int:
        i = pick()
        picks[i] += 1
        return i

    pool._pick = counted
    return picks


def busiest_window(times: list[float], window_s: float) -> int:
    """The most of `times` that fall in any `window_s`-long interval."""
    times, most, first = sorted(times), 0, 0
    for last, t in enumerate(times):
        while t - times[first] >= window_s:
            first += 1
        most = max(most, last - first + 1)
    return most


def assert_within_the_limit(stats, done: list[float], calls: int) -> None:
    """The combined rate of every replica stayed under the limit: the provider refused (429) at most the
    jitter of a busy machine, at most a window's worth (and that jitter) came back in any window (the
    latency is fixed, so answers keep the spacing of arrivals), and every call was answered."""
    assert stats.limit_429s <= MAX_JITTER_429S, (
        f"{stats.limit_429s} calls over the provider's limit of {PER_WINDOW} per {WINDOW_S:g} s (at "
        f"{[round(t, 2) for t in stats.limit_429_times[:10]]} s): the replicas did not share one limit"
    )
    busiest = busiest_window(done, WINDOW_S)
    assert busiest <= PER_WINDOW + MAX_JITTER_429S, (
        f"{busiest} calls answered within {WINDOW_S:g} s, over the limit of {PER_WINDOW}: the replicas did not "
        f"share one limit"
    )
    assert stats.ok == calls and len(done) == calls, f"the provider answered {stats.ok} of {calls} calls"


async def timed_calls(pools: list, calls: int) -> tuple[list, list[float], float]:
    """The results, the seconds after the start at which each call was answered, and the total."""
    import time

    started = time.perf_counter()
    done: list[float] = []

    async def one(i: int):
        result = await pools[i % len(pools)].complete(request(f"q{i}"))
        done.append(time.perf_counter() - started)
        return result

    results = await asyncio.gather(*(one(i) for i in range(calls)), return_exceptions=True)
    return results, done, time.perf_counter() - started


def test_replicas_on_two_nodes_share_one_rate_limit(multinode, server):
    ray = multinode.ray
    server.reset(latency_s=0.2, rpm=PER_WINDOW, window_s=WINDOW_S)
    pool, ledger = make_pool(multinode, server, replicas=4, rpm=PER_WINDOW, scope=unique("shared"))
    try:
        nodes = [node_of(ray, r) for r in pool.replicas]
        cpu_nodes = {multinode.cpu["a"].node_id, multinode.cpu["b"].node_id}
        assert set(nodes) == cpu_nodes and sorted(Counter(nodes).values()) == [2, 2], nodes
        picks = count_picks(pool)
        calls = 3 * PER_WINDOW
        results, done, took = asyncio.run(timed_calls([pool], calls))
        assert not [r for r in results if isinstance(r, Exception)], results[:3]
        assert_within_the_limit(server.stats, done, calls)
        # A window's worth goes at once, then PER_WINDOW more per window: two more windows at least.
        assert took >= 2 * WINDOW_S * 0.95, f"{calls} calls in {took:.1f} s: faster than the limit allows"
        per_node = Counter()
        for i, n in picks.items():
            per_node[nodes[i]] += n
        assert set(per_node) == cpu_nodes and min(per_node.values()) >= calls // 4, per_node
        assert len(ray.get(ledger.entries.remote())) == calls
    finally:
        asyncio.run(pool.aclose())


def test_the_check_catches_replicas_that_do_not_share_the_limit(multinode, server):
    """The same calls from one pool per node, each with a limiter of its own set to the full limit
    (what a per-node or per-process limiter amounts to): twice the rate reaches the provider, and the
    check of the test above fails. The provider only counts here: a real one's 429s (with
    Retry-After) make each limiter back off, which hides most of the overrun behind refused calls."""
    server.reset(latency_s=0.2, rpm=None)
    pools = [
        make_pool(
            multinode,
            server,
            replicas=2,
            rpm=PER_WINDOW,
            scope=unique(f"node-{n}"),
            where={CPU_NODE: 0.5, f"test_node_{n}": 0.5},
        )[0]
        for n in ("a", "b")
    ]
    try:
        for pool, n in zip(pools, ("a", "b")):  # every replica up (and where it should be) before the calls
            assert {node_of(multinode.ray, r) for r in pool.replicas} == {multinode.cpu[n].node_id}
        results, done, _ = asyncio.run(timed_calls(pools, 3 * PER_WINDOW))
        assert not [r for r in results if isinstance(r, Exception)], results[:3]
        with pytest.raises(AssertionError, match="did not share one limit"):
            assert_within_the_limit(server.stats, done, 3 * PER_WINDOW)
        assert busiest_window(done, WINDOW_S) > 1.5 * PER_WINDOW  # both limiters' full rate at once
    finally:
        for pool in pools:
            asyncio.run(pool.aclose())


@pytest.fixture
def learner_rank(multinode):
    """A learner rank's stand-in where actors/learner.py puts one: a PACK placement group on the GPU node."""
    ray = multinode.ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    @ray.remote
    class Rank:
        def __init__(self) -> None:
            self.steps = 0

        def step(self) -> int:
            self.steps += 1
            return self.steps

    group = placement_group([{"CPU": 1, GPU_NODE: 0.01}], strategy="PACK")
    ray.get(group.ready(), timeout=120)
    rank = Rank.options(num_cpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(group, 0)).remote()
    yield rank
    ray.kill(rank)
    remove_placement_group(group)


def test_losing_a_worker_node_mid_iteration_loses_no_rollout_and_no_cost(multinode, server, learner_rank, tmp_path):
    """Half the replicas' node goes while every plan's first step is in flight; an autoscaler's
    replacement node joins. The rounds of jobs/train.py execute_and_grade (train.rollout_attempts)
    finish every rollout; the ledger on the head holds every call the provider answered (those of
    the lost replicas at their worst-case cost), and so does its spend journal, written by the
    ledger alone for replicas on three nodes; the driver's node and the learner's are untouched."""
    from actors.worker_pool import get_ledger
    from conductor_rl.config import load_config
    from conductor_rl.rollout.rollouts import (
        Rollout,
        apply_grade,
        execute_rollouts,
        grade_answer,
        needs_execution,
        parse_rollout,
        unfinished,
    )
    from conductor_rl.rollout.workflow import StepLimits, Task

    ray, local = multinode.ray, multinode.local
    server.reset(latency_s=1.5)  # every first step still in flight when the node goes
    journal = tmp_path / JOURNAL_FILE
    ledger = get_ledger(name=unique("ledger"), journal=str(journal), job="train")
    pool, ledger = make_pool(multinode, server, replicas=4, ledger=ledger, rpm=100_000, scope=unique("loss"))
    try:
        nodes = [node_of(ray, r) for r in pool.replicas]
        victim = multinode.cpu["a"]
        assert nodes.count(victim.node_id) == 2, nodes
        keep = {"ledger": ledger, "limiter": pool.limiter, "server": server._actor}
        before = {name: (pid_of(ray, a), node_of(ray, a)) for name, a in keep.items()}
        assert {node for _, node in before.values()} == {multinode.head}
        rank_pid, rank_node = pid_of(ray, learner_rank), node_of(ray, learner_rank)
        assert rank_node == multinode.gpu and ray.get(learner_rank.step.remote()) == 1

        attempts = load_config(None, []).train.rollout_attempts
        rollouts = [
            parse_rollout(
                Rollout(Task(id=f"q{i}", question=f"question {i}", reference="4"), PLAN, group=i),
                1,
                max_steps=5,
            )
            for i in range(24)
        ]
        limits = StepLimits(max_tokens=32, timeout_s=90.0)
        added = {}

        async def lose_a_node_mid_iteration() -> None:
            while (await asyncio.to_thread(lambda: server.stats.requests)) < len(rollouts):
                await asyncio.sleep(0.05)
            await asyncio.to_thread(local.remove_node, victim)
            added["node"] = local.add_node(2, {CPU_NODE: 1})  # in the main thread: Ray's node start sets signals

        async def rounds() -> int:
            """jobs/train.py execute_and_grade's rounds, graded here (the grader pool is not the point)."""
            done = 0
            for done in range(1, attempts + 1):
                todo = needs_execution(unfinished(rollouts))
                if not todo:
                    break
                await execute_rollouts(todo, [pool], limits, key=f"multinode/{done}")
                for r in todo:
                    if r.workflow and not r.workflow.error:
                        apply_grade(r, grade_answer(r.task, r.workflow.final_answer or ""))
            return done

        async def iteration() -> int:
            loss = asyncio.ensure_future(lose_a_node_mid_iteration())
            used = await rounds()
            await loss
            return used

        used = asyncio.run(iteration())
        errors = [r.infrastructure_error for r in rollouts if r.reward is None]
        assert not errors, f"{len(errors)} of {len(rollouts)} rollouts lost after {used} round(s): {errors[:3]}"

        # Every call the provider answered is in the ledger: finished ones recorded, those whose
        # replica went with the node counted at their worst-case cost once nothing is in flight.
        settled = ray.get(ledger.settle_open_calls.remote())
        entries = ray.get(ledger.entries.remote())
        stats = server.stats
        recorded = [e for e in entries if e.usage.input_tokens]
        if all(r.attempts == 1 for r in rollouts):  # else a re-run's first attempt recorded its finished steps too
            assert len(recorded) == 2 * len(rollouts) == sum(len(r.workflow.steps) for r in rollouts)
        assert len(recorded) >= 2 * len(rollouts)
        assert settled >= 1, "the lost node's calls in flight left no open call to settle"
        assert len(entries) >= stats.ok, f"the provider answered {stats.ok} calls; the ledger holds {len(entries)}"
        assert sum(e.cost_usd for e in recorded) >= sum(r.workflow.cost_usd for r in rollouts) - 1e-9
        books = read_books(journal)
        assert len(books.billed) == len(recorded) and len(books.lost) == settled and not books.open
        assert books.spent_usd == pytest.approx(sum(e.cost_usd for e in entries), abs=1e-12)

        # The lost replicas came back on the new node; the head's actors and the learner rank never moved.
        after = [node_of(ray, r) for r in pool.replicas]
        assert after.count(added["node"].node_id) == 2 and victim.node_id not in after, after
        assert {name: (pid_of(ray, a), node_of(ray, a)) for name, a in keep.items()} == before
        assert (pid_of(ray, learner_rank), node_of(ray, learner_rank)) == (rank_pid, rank_node)
        assert ray.get(learner_rank.step.remote()) == 2  # the same actor, its state intact
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert {multinode.head, multinode.gpu} <= alive and victim.node_id not in alive
    finally:
        asyncio.run(pool.aclose())
