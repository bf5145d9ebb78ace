"""GraderActor / GraderPool on a real local Ray cluster: verdicts in order, timeouts and dead
actors as ERROR (never WRONG), and a pool that goes on after an actor is killed."""

from __future__ import annotations

import threading
import time

import pytest

from conductor_rl.config import GraderConfig, SandboxConfig
from conductor_rl.grading import Verdict
from conductor_rl.grading.service import Grader, GradeRequest

SLOW_OK = "import time\ntime.sleep({s})\nprint(sum(map(int, input().split())))\n"
ADD_META = {"tests": [{"input": "2 3\n", "output": "5\n"}]}
HANG_GUARD_S = 60  # a bound on a wait that only a hang reaches, never a slow machine


def slow(seconds: float) -> GradeRequest:
    return GradeRequest("code_stdio", SLOW_OK.format(s=seconds), meta=ADD_META)


def in_flight(pool) -> int:
    """Calls the pool has sent and not yet seen answered."""
    return sum(member.load for member in pool._members)


def config(**kw) -> GraderConfig:
    return GraderConfig(sandbox=SandboxConfig(timeout_s=10), **kw)


@pytest.fixture
def make_pool(ray_cluster):
    from actors.grader import GraderPool

    pools = []

    def make(**kw):
        pool = GraderPool(config(**kw), num_cpus=0.25)
        pool.wait_ready()
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


def test_library_grader_without_ray():
    g = Grader(config(concurrency=2))
    try:
        results = g.grade_many([slow(0), GradeRequest("numeric", "#### 42", "42"), GradeRequest("nope", "x")])
    finally:
        g.close()
    assert [r.verdict for r in results] == [Verdict.CORRECT, Verdict.CORRECT, Verdict.ERROR]


def test_pool_grades_mixed_kinds_in_order(make_pool):
    pool = make_pool(actors=2, concurrency=2)
    requests = [
        slow(0),
        GradeRequest("code_stdio", "print(4)", meta=ADD_META),
        GradeRequest("math", "so \\boxed{\\frac{2}{4}}", "1/2"),
        GradeRequest("choice", "The answer is (C).", "B"),
        GradeRequest("code_stdio", "print(5)"),  # no tests in meta: the question's fault, not the answer's
        GradeRequest("unknown_kind", "x", "y"),
    ]
    verdicts = [r.verdict for r in pool.grade_many(requests)]
    assert verdicts == [Verdict.CORRECT, Verdict.WRONG, Verdict.CORRECT, Verdict.WRONG, Verdict.ERROR, Verdict.ERROR]
    assert pool.grade_many([]) == []


def test_a_grading_stream_grades_while_requests_still_arrive(make_pool):
    """Training hands each rollout to the stream as its plan finishes: the first is graded
    before the last is handed in, and finish() returns every result by its key."""
    from actors.grader import GradingStream

    stream = GradingStream(make_pool(actors=1, concurrency=2))
    stream.submit("a", GradeRequest("numeric", "#### 42", "42"))
    deadline = time.monotonic() + 60
    while "a" not in stream._results and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "a" in stream._results, "the first request was not graded before the next arrived"
    stream.submit("b", GradeRequest("choice", "The answer is (C).", "B"))
    results = stream.finish()
    assert {k: r.verdict for k, r in results.items()} == {"a": Verdict.CORRECT, "b": Verdict.WRONG}


def test_actors_report_their_isolation(make_pool):
    infos = make_pool(actors=2, concurrency=1).wait_ready()
    assert len({i["pid"] for i in infos}) == 2 and {i["isolation"] for i in infos} == {"bwrap"}


def test_sample_timeout_is_an_error_and_the_pool_goes_on(make_pool):
    pool = make_pool(actors=1, concurrency=2)
    results = pool.grade_many([slow(60), slow(0)], timeout_s=1.0)  # waiting out the sleeper would pass 1 s
    assert results[0].verdict is Verdict.ERROR and "timed out" in results[0].detail
    assert results[1].verdict is Verdict.CORRECT
    assert [r.verdict for r in pool.grade_many([slow(0)] * 3)] == [Verdict.CORRECT] * 3


def test_killed_actor_gives_errors_for_its_work_in_flight_and_the_pool_recovers(make_pool, ray_cluster):
    pool = make_pool(actors=2, concurrency=2, max_restarts=2)
    old_pid = pool.wait_ready()[0]["pid"]
    out: list = []
    runner = threading.Thread(target=lambda: out.extend(pool.grade_many([slow(3)] * 8, timeout_s=60)))
    runner.start()
    deadline = time.monotonic() + HANG_GUARD_S
    while in_flight(pool) < 4 and time.monotonic() < deadline:  # two on each actor, none can finish yet
        time.sleep(0.01)
    ray_cluster.kill(pool.actors[0], no_restart=False)
    runner.join(timeout=60)
    verdicts = [r.verdict for r in out]
    assert len(verdicts) == 8 and Verdict.WRONG not in verdicts
    errors = [r for r in out if r.verdict is Verdict.ERROR]
    # Either Ray reports the death, or the dying actor still reports its sandbox killed under it.
    assert 1 <= len(errors) <= 2
    assert all("actor died" in r.detail or "killed from outside" in r.detail for r in errors), errors
    # Ray restarted it, and the pool uses it again.
    assert [r.verdict for r in pool.grade_many([slow(0)] * 6)] == [Verdict.CORRECT] * 6
    assert pool.wait_ready()[0]["pid"] != old_pid


def test_pool_without_live_actors_answers_error(make_pool, ray_cluster):
    pool = make_pool(actors=2, concurrency=1, max_restarts=0)
    ray_cluster.kill(pool.actors[0], no_restart=True)
    first = [r.verdict for r in pool.grade_many([slow(0)] * 3)]
    # Whatever was sent to the dead actor before the pool knew is an ERROR; the rest is graded.
    assert Verdict.WRONG not in first and first.count(Verdict.ERROR) <= 1
    assert [r.verdict for r in pool.grade_many([slow(0)] * 3)] == [Verdict.CORRECT] * 3
    ray_cluster.kill(pool.actors[1], no_restart=True)
    results = pool.grade_many([slow(0)] * 3, timeout_s=20)
    assert all(r.verdict is Verdict.ERROR for r in results)
