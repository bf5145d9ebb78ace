"""conductor_rl/testing/conditions.py and the fake provider server under them: latencies drawn per model
from a lognormal with the documented quantiles, 429s (with Retry-After) and 500s at the set rates,
repeatable from the seed."""

from __future__ import annotations

import json
import random
import statistics
import time
import urllib.error
import urllib.request

import pytest

from conductor_rl.testing.conditions import Lognormal, ProviderConditions
from conductor_rl.testing.fake_llm_server import FakeLLMServer
from conductor_rl.testing.wire_formats import Output, usage_for


def test_latency_draws_follow_the_lognormal_it_names():
    latency = Lognormal(2.0, 0.8)
    rng = random.Random(7)
    draws = sorted(latency.draw(rng) for _ in range(20_000))
    assert statistics.median(draws) == pytest.approx(2.0, rel=0.05)
    assert draws[int(0.9 * len(draws))] == pytest.approx(latency.quantile(0.9), rel=0.08)
    assert latency.quantile(0.99) == pytest.approx(2.0 * 6.44, rel=0.01)  # exp(0.8 * 2.326)
    assert Lognormal(1.5).draw(rng) == 1.5 and Lognormal(1.5).quantile(0.99) == 1.5
    with pytest.raises(ValueError, match="median >= 0"):
        Lognormal(-1.0)


def test_faults_come_at_their_rates_and_repeat_with_the_seed():
    conditions = ProviderConditions(rate_429=0.1, rate_500=0.05, retry_after_s=3.0, seed=1)
    faults = [conditions.fault() for _ in range(20_000)]
    assert faults.count("429:3.0") / len(faults) == pytest.approx(0.1, abs=0.01)
    assert faults.count("500") / len(faults) == pytest.approx(0.05, abs=0.01)
    again = ProviderConditions(rate_429=0.1, rate_500=0.05, retry_after_s=3.0, seed=1)
    assert [again.fault() for _ in range(100)] == faults[:100]
    with pytest.raises(ValueError, match="sum to at most 1"):
        ProviderConditions(rate_429=0.8, rate_500=0.3)


def post(server: FakeLLMServer, model: str) -> tuple[int, dict, float]:
    request = urllib.request.Request(
        f"{server.openai_url}/chat/completions",
        data=json.dumps({"model": model, "messages": [{"role": "user", "content": "Hi"}]}).encode(),
        headers={"content-type": "application/json", "authorization": "Bearer k"},
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), time.perf_counter() - started
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), time.perf_counter() - started


def test_the_server_answers_each_model_in_its_own_time_and_draws_its_faults():
    slow = ProviderConditions(latency={"reasoner": Lognormal(0.3), "*": Lognormal(0.0)})
    with FakeLLMServer(conditions=slow) as server:
        status, _, took = post(server, "reasoner")
        assert status == 200 and took >= 0.3
        status, _, took = post(server, "fake-model")
        assert status == 200 and took < 0.25
    limited = ProviderConditions(rate_429=1.0, retry_after_s=2.0)
    with FakeLLMServer(conditions=limited) as server:
        server.script(["ok"])  # a scripted entry comes first, then the draws
        assert post(server, "fake-model")[0] == 200
        status, headers, _ = post(server, "fake-model")
        assert status == 429 and float(headers["retry-after"]) == 2.0
        assert (server.stats.drawn_faults, server.stats.drawn_429s, server.stats.scripted_faults) == (1, 1, 0)


def test_the_server_bills_the_output_tokens_drawn_for_each_model():
    billed = ProviderConditions(output_tokens={"reasoner": Lognormal(2000.0, 0.5), "*": Lognormal(300.0)}, seed=3)
    with FakeLLMServer(conditions=billed) as server:
        for _ in range(40):
            assert post(server, "reasoner")[0] == 200
        assert post(server, "fake-model")[0] == 200
        outputs = [u["output"] - u["reasoning"] for u in server.stats.usages]
    assert outputs[-1] == 300  # a fixed draw for any other model
    assert 1300 < statistics.median(outputs[:-1]) < 3000 and len(set(outputs[:-1])) > 30
    assert min(outputs[:-1]) >= 1
    # Never more than the request allowed, in each wire format's field.
    for request in ({"max_tokens": 50}, {"max_completion_tokens": 50}, {"generationConfig": {"maxOutputTokens": 50}}):
        assert usage_for({**request, "messages": []}, Output(), 999)["output"] == 50
