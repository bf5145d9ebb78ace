"""The worker pool on a real local Ray cluster: WorkerActor replicas share one
RateLimiterActor and one LedgerActor, and call the real SDKs against the local
server on 127.0.0.1.

Time is scaled so the suite stays fast: the server and the limiter agree on a
3-second window, so "30 requests per 3 s" is the server's 600 RPM."""

from __future__ import annotations

import asyncio
import pathlib
import uuid

import pytest

from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.ledger import BudgetExceededError
from conductor_rl.workers.providers import MissingApiKeyError, ProviderError, Usage
from conductor_rl.workers.retry import RetryPolicy
from tests.http_fakes import FAKE_KEY, KEY_ENV, PRICE, request, worker_config

# Every test talks to the fake LLM server (this module's own, in a Ray actor): the fake key set, the
# server reset (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh")

WINDOW_S = 3.0
PER_WINDOW = 30  # = 600 RPM
# 429s the server may return though the limiter is right: a request whose arrival lags its grant by
# more than the limiter's headroom (a busy machine) lands in the next window of the server.
MAX_JITTER_429S = PER_WINDOW // 6


@pytest.fixture(scope="module")
def server(ray_cluster):
    from actors.fake_llm_server import RemoteFakeLLMServer

    srv = RemoteFakeLLMServer()  # in its own process: it times arrivals as a provider would
    yield srv
    srv.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def make_pool(server, provider="openai", replicas=1, ledger=None, **extra):
    from actors.worker_pool import WorkerPool, get_ledger

    ledger = ledger if ledger is not None else get_ledger(name=unique("ledger"))
    config = worker_config(provider, server, name=unique(provider), **extra)
    return WorkerPool(
        config,
        replicas=replicas,
        ledger=ledger,
        window_s=WINDOW_S,
        policy=RetryPolicy(max_retries=4, base_delay_s=0.05, max_delay_s=0.2),
    ), ledger


async def gather(pool, n, prefix="q"):
    return await asyncio.gather(*(pool.complete(request(f"{prefix}{i}")) for i in range(n)), return_exceptions=True)


def test_four_replicas_share_the_limit_without_overrunning_it(ray_cluster, server):
    server.reset(latency_s=0.2, rpm=PER_WINDOW, window_s=WINDOW_S)
    pool, ledger = make_pool(server, replicas=4, rpm=PER_WINDOW)
    calls = 3 * PER_WINDOW + 1  # three windows' worth, and a warm-up

    async def go():
        await pool.complete(request("warm-up"))
        return await gather(pool, calls - 1)

    results = asyncio.run(go())
    errors = [r for r in results if isinstance(r, Exception)]
    assert not errors, errors[:3]
    # Counted by the server, which refuses (429) whatever would put more than PER_WINDOW requests in
    # any of its windows. Without the shared limiter all four replicas fire at once and about two
    # windows' worth are refused; with it, only grant-to-arrival jitter on a busy machine can push an
    # odd request over, and each of those was retried until it was answered.
    stats = server.stats
    assert stats.limit_429s <= MAX_JITTER_429S, stats.limit_429_times
    assert stats.ok == calls and stats.requests == calls + stats.limit_429s, stats
    assert len(ray_cluster.get(ledger.entries.remote())) == calls
    asyncio.run(pool.aclose())


def test_faults_are_retried_or_reported_never_lost(ray_cluster, server):
    pool, ledger = make_pool(server, provider="anthropic", replicas=2)
    server.script(["500", "drop", "429:0.1", "malformed"])
    response = asyncio.run(pool.complete(request()))
    assert response.text.startswith("echo:") and server.stats.requests == 5
    server.script(["400"])
    with pytest.raises(ProviderError) as caught:
        asyncio.run(pool.complete(request()))
    assert caught.value.kind == "bad_request" and "scripted 400" in str(caught.value)
    server.script(["500"] * 5)
    with pytest.raises(ProviderError, match="after 5 attempts") as caught:
        asyncio.run(pool.complete(request()))
    assert caught.value.kind == "server_error"
    assert len(ray_cluster.get(ledger.entries.remote())) == 1


def test_a_replica_that_dies_mid_call_is_reported(ray_cluster, server):
    server.reset(latency_s=2.0)
    pool, _ = make_pool(server, provider="google")

    async def go():
        call = asyncio.ensure_future(pool.complete(request()))
        while (await asyncio.to_thread(lambda: server.stats.requests)) < 1:  # mid-call: the server has it
            await asyncio.sleep(0.05)
        ray_cluster.kill(pool.replicas[0])
        return await asyncio.gather(call, return_exceptions=True)

    (result,) = asyncio.run(go())
    assert isinstance(result, ProviderError) and result.kind == "replica_died" and result.retryable


def test_a_call_whose_replica_dies_goes_to_another_and_the_lost_attempt_stays_open(ray_cluster, server, tmp_path):
    """Two replicas; the one serving the call is killed mid-call. The call is answered by the other;
    the lost attempt, which the server did receive, stays open in the ledger (its worst case counts)
    and its spend journal (settled there as lost). The dead replica gets no more calls while the
    other one answers."""
    from actors.worker_pool import get_ledger
    from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books

    server.reset(latency_s=2.0)
    journal = tmp_path / JOURNAL_FILE
    ledger = get_ledger(name=unique("ledger"), journal=str(journal), job="train")
    pool, ledger = make_pool(server, replicas=2, ledger=ledger)
    picks = []
    pick = pool._pick
    pool._pick = lambda exclude=frozenset(): picks.append(pick(exclude)) or picks[-1]

    async def go():
        call = asyncio.ensure_future(pool.complete(request("lost")))
        while (await asyncio.to_thread(lambda: server.stats.requests)) < 1:
            await asyncio.sleep(0.05)
        ray_cluster.kill(pool.replicas[picks[0]])
        first = await call
        server.reset(latency_s=0.0)
        return first, await gather(pool, 4, "after")

    first, after = asyncio.run(go())
    assert first.text.startswith("echo:") and picks[1] != picks[0], picks
    assert not [r for r in after if isinstance(r, Exception)], after
    assert picks[2:] == [picks[1]] * 4, picks
    assert ray_cluster.get(ledger.settle_open_calls.remote()) == 1  # the lost attempt, at its worst case
    assert len(ray_cluster.get(ledger.entries.remote())) == 6
    books = read_books(journal)
    assert (len(books.billed), len(books.lost), len(books.open)) == (5, 1, 0)
    total = ray_cluster.get(ledger.summary.remote())["total"]["cost_usd"]
    assert books.spent_usd == pytest.approx(total, abs=1e-12)


def test_a_caller_that_gives_up_cancels_the_replicas_call_which_is_settled_at_its_worst_case(ray_cluster, server):
    """A served request cut off (a timeout, a client gone) cancels its pool calls: the replica's own call is
    cancelled too (ray.cancel), and it is settled at once as lost, at its worst case, rather than left to
    run on unseen or to stay open in a ledger that serve never settles."""
    from conductor_rl.workers.costs import worst_case_cost

    server.reset(latency_s=5.0)
    pool, ledger = make_pool(server)

    async def go():
        call = asyncio.ensure_future(pool.complete(request("cut off")))
        while (await asyncio.to_thread(lambda: server.stats.requests)) < 1:  # mid-call: the server has it
            await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        for _ in range(100):  # the replica settles it once its own task is cancelled
            if ray_cluster.get(ledger.summary.remote())["total"]["cost_usd"] > 0:
                break
            await asyncio.sleep(0.05)

    asyncio.run(go())
    summary, worst = ray_cluster.get(ledger.summary.remote()), worst_case_cost(request("cut off"), PRICE)
    assert summary["unsettled"]["cost_usd"] == pytest.approx(worst) == summary["total"]["cost_usd"]
    assert ray_cluster.get(ledger.settle_open_calls.remote()) == 0


def test_budget_stop_through_the_pool_keeps_every_finished_call(ray_cluster, server):
    from actors.worker_pool import get_ledger

    server.reset(latency_s=4.0)  # long enough that all eight are admitted before the first one finishes
    one_call = cost_of(Usage(input_tokens=20, output_tokens=8, cached_tokens=2), PRICE)
    ledger = get_ledger(budget_usd=2.5 * one_call, name=unique("budget"))
    pool, _ = make_pool(server, provider="openai_responses", replicas=2, ledger=ledger)

    async def go():
        first = await gather(pool, 8, "a")
        later = await gather(pool, 4, "b")
        return first, later

    first, later = asyncio.run(go())
    assert not [r for r in first if isinstance(r, Exception)]
    assert all(isinstance(r, BudgetExceededError) for r in later), later
    entries = ray_cluster.get(ledger.entries.remote())
    stats = server.stats
    assert len(entries) == 8 == stats.ok == stats.requests
    assert sum(e.cost_usd for e in entries) == pytest.approx(sum(r.cost_usd for r in first))


def test_the_pool_is_a_worker_for_run_plan(ray_cluster, server):
    from conductor_rl.plan import parse_plan
    from conductor_rl.rollout.workflow import Task, run_plan

    pools = [make_pool(server, provider=p)[0] for p in ("openai", "google")]
    plan = parse_plan('model_id = [0, 1, 0]\nsubtasks = ["a", "b", "c"]\naccess_list = [[], [], "all"]', 2)
    result = asyncio.run(run_plan(plan, Task(id="t", question="q"), pools))
    assert result.error is None and result.final_answer.startswith("echo:")
    assert result.cost_usd > 0 and not result.simulated


def test_a_missing_key_fails_in_the_driver_naming_the_variable(ray_cluster, server, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(MissingApiKeyError, match=KEY_ENV):
        make_pool(server, provider="openai")


def test_keys_never_appear_in_logs_metrics_names_ledger_or_reprs(ray_cluster, server):
    import ray
    from ray.util import list_named_actors

    pool, ledger = make_pool(server, provider="openai", replicas=2, rpm=1000)
    server.script(["401", "500"])
    asyncio.run(gather(pool, 3))
    seen = [
        repr(pool),
        repr(pool.replicas),
        repr(ray.get(ledger.entries.remote())),
        repr(ray.get(ledger.summary.remote())),
        repr(list_named_actors(all_namespaces=True)),
    ]
    assert FAKE_KEY in server.stats.auth_headers[-1]  # it did travel to the provider
    text = "\n".join(seen)
    logs = pathlib.Path(ray._private.worker._global_node.get_logs_dir_path())
    log_text = "".join(
        p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file() and p.stat().st_size < 50e6
    )
    assert "limiter-" in text and len(log_text) > 1000  # names and logs were captured
    for needle in (FAKE_KEY, FAKE_KEY[-12:]):
        assert needle not in text and needle not in log_text
    # Metrics are tagged by worker name, error kind and token direction only.
    from actors.metrics import RayMetricsObserver

    observer = RayMetricsObserver()
    tag_keys = {k for metric in vars(observer).values() for k in metric._tag_keys}
    assert tag_keys == {"worker", "kind", "direction"}


def test_a_cancelled_caller_does_not_cancel_its_batchs_answer_for_the_others():
    import asyncio

    from actors.worker_pool import _Batch

    sent: list[list] = []

    async def main():
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        batch = _Batch(lambda items: sent.append(items) or reply, answered=True)

        async def call(item):
            return await batch.add(item)

        first, second = asyncio.ensure_future(call("a")), asyncio.ensure_future(call("b"))
        await asyncio.sleep(0.01)
        first.cancel()  # e.g. its request timed out
        await asyncio.sleep(0.01)
        reply.set_result("written")
        return await second, first.cancelled()

    assert asyncio.run(main()) == ("written", True)
    assert sent == [["a", "b"]]  # one message for both
