"""Preflight (conductor_rl/workers/preflight.py): one probe per worker through the guarded
provider, against the fake provider servers: what each outcome looks like in the table."""

from __future__ import annotations

import asyncio
import socket

import pytest

from conductor_rl.config import SimSpec, WorkerConfig
from conductor_rl.workers.guarded import GuardedProvider
from conductor_rl.workers.ledger import CostLedger
from conductor_rl.workers.preflight import check_workers, format_checks
from conductor_rl.workers.providers import build_provider
from conductor_rl.workers.retry import RetryPolicy
from tests.http_fakes import FAKE_KEY, KEY_ENV, PRICE, worker_config

# Every test talks to the fake LLM server: the fake key set, the server reset (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(configs: list[WorkerConfig], ledger: CostLedger | None = None):
    async def go():
        workers = [
            GuardedProvider(
                build_provider(c),
                provider_kind=c.provider,
                ledger=ledger,
                policy=RetryPolicy(max_retries=0),
                price=c.price,
            )
            for c in configs
        ]
        try:
            return await check_workers(workers, configs, timeout_s=30)
        finally:
            for w in workers:
                await w.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("provider", ["openai_compatible", "anthropic", "google"])
def test_a_healthy_worker_passes_with_the_servers_usage_and_its_cost_in_the_ledger(provider, server):
    ledger = CostLedger()
    [check] = probe([worker_config(provider, server, rpm=60, tpm=10_000)], ledger)
    sent = server.stats.usages[-1]
    assert check.status == "ok" and check.reachable and check.answered, check
    assert (check.input_tokens, check.output_tokens) == (sent["input"], sent["output"])
    assert check.cost_usd > 0 and ledger.summary()["total"]["cost_usd"] == pytest.approx(check.cost_usd)
    assert check.limits == "60 rpm, 10000 tpm"


@pytest.mark.parametrize("fault, kind, reachable", [("401", "auth", True), ("400", "bad_request", True)])
def test_a_refused_call_fails_the_check_with_the_providers_words(fault, kind, reachable, server):
    server.script([fault])
    [check] = probe([worker_config("openai", server)])
    assert check.status == "fail" and check.failed and check.reachable == reachable
    assert check.problem.startswith(f"{kind}: ") and "the request was refused" in check.problem
    assert FAKE_KEY not in check.problem


def test_no_server_is_unreachable(monkeypatch):
    monkeypatch.setenv(KEY_ENV, FAKE_KEY)
    config = WorkerConfig(
        name="gone",
        provider="openai_compatible",
        model="m",
        base_url=f"http://127.0.0.1:{closed_port()}/v1",
        price=PRICE,
    )
    [check] = probe([config])
    assert check.status == "fail" and not check.reachable and check.problem.startswith("connection: ")


def test_the_table_names_every_worker_and_the_one_that_failed(server):
    server.script(["ok", "401"])  # the probes go out together; which one gets the 401 does not matter
    sim = WorkerConfig(name="sim-one", provider="sim", sim=SimSpec())
    configs = [
        worker_config("openai_compatible", server, name="first"),
        worker_config("openai_compatible", server, name="second"),
        sim,
    ]
    checks = probe(configs)
    table = format_checks(checks, wall_s=1.5)
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["worker", "provider", "model", "status"]
    assert sum(c.failed for c in checks) == 1
    failed = next(c for c in checks if c.failed)
    assert f"FAIL {failed.worker}: auth: " in table
    assert "SKIP sim-one: simulated" in table
    assert lines[-1].startswith("3 workers checked in 1.5s: 1 ok, 1 not probed, 1 failed")
    assert lines[-1].endswith(f"failed: {failed.worker}")


def test_an_answer_lost_to_reasoning_is_a_warning_naming_the_settings(server):
    server.script(["length_empty"])
    [check] = probe([worker_config("openai_compatible", server)])
    assert check.status == "warn" and check.reachable and not check.answered and not check.failed
    assert "ran out before any answer" in check.problem and "workers.w-openai_compatible.reasoning" in check.problem
