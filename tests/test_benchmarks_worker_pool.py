"""benchmarks/worker_pool.py, shrunk: its runs (the pool against direct calls, the spend journal's
cost, replicas under one cluster-wide limit) on a handful of calls, so that a change that breaks the
benchmark fails here. (Its measurements take minutes; their figures are in docs/results.md.)"""

from __future__ import annotations

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("worker_pool")


@pytest.fixture(scope="module")
def remote_server(ray_cluster):
    from actors.fake_llm_server import RemoteFakeLLMServer

    server = RemoteFakeLLMServer()
    yield server
    server.stop()


def test_the_benchmark_runs_measure_calls_through_the_pool(bench, remote_server, monkeypatch):
    monkeypatch.setenv(bench.KEY_ENV, "bench-key-not-secret")
    overhead = bench.overhead_run(remote_server, n=32, concurrency=8, rounds=1)
    assert overhead["pool_calls_per_s"] > 0 and overhead["direct_calls_per_s"] > 0
    assert overhead["overhead"] < 1

    journal = bench.journal_run(remote_server, 24, 8, latency_s=0.05, rounds=1)
    assert journal["calls_per_s"]["journaled"] > 0 and journal["share"] > 0
    assert journal["journal_bytes_per_call"] > 0, "the journaled pools wrote no journal"

    n = bench.LIMIT + 10  # more than a window's worth: the shared limiter must hold the rest back
    limited = bench.calls_through(remote_server, bench.limited_pool(remote_server, 2), n)
    assert limited["calls_ok"] == n and limited["server_requests"] == n
    assert limited["server_429s"] == 0, "two replicas under one cluster-wide limiter overran the server's limit"
    assert limited["share_of_limit"] > 0
