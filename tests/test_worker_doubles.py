"""The worker doubles every test uses (conductor_rl/testing/workers.py): they are providers, answer
with real `WorkerResponse`s as scripted, record what they were sent, fail, hang and meet at a gate
as told."""

from __future__ import annotations

import asyncio

import pytest

from conductor_rl.config import WorkerConfig
from conductor_rl.testing.workers import CallLog, Gate, GatedProvider, ScriptedWorker
from conductor_rl.workers.providers import build_provider
from conductor_rl.workers.providers.base import Provider, ProviderError, Usage, WorkerRequest, WorkerResponse


def request(text: str = "Q?") -> WorkerRequest:
    return WorkerRequest(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}], max_tokens=16, temperature=0.0
    )


def test_the_doubles_are_providers():
    assert isinstance(ScriptedWorker("w"), Provider)
    assert isinstance(ScriptedWorker("judge", text="VERDICT: CORRECT"), Provider)
    sim = build_provider(WorkerConfig(name="sim", provider="sim", sim={"accuracy": {"default": 1.0}}))
    gated = GatedProvider(sim, Gate(1))
    assert isinstance(gated, Provider) and (gated.name, gated.simulated) == ("sim", True)


def test_a_scripted_worker_answers_as_told_and_records_what_it_was_sent():
    numbered = ScriptedWorker("w")
    assert [asyncio.run(numbered.complete(request(q))).text for q in ("a", "b")] == ["ANSWER(w#0)", "ANSWER(w#1)"]
    assert [r.messages[-1]["content"] for r in numbered.requests] == ["a", "b"]

    usage = Usage(input_tokens=3, output_tokens=9, reasoning_tokens=4)
    fixed = ScriptedWorker(
        "t", text="42", usage=usage, cost_usd=0.5, reasoning="hmm", finish_reason="stop", simulated=True, delay_s=0.01
    )
    response = asyncio.run(fixed.complete(request()))
    assert response == WorkerResponse(
        text="42", usage=usage, latency_s=0.01, cost_usd=0.5, simulated=True, reasoning="hmm", finish_reason="stop"
    )

    ruled = ScriptedWorker("r", answer=lambda req, n: f"{req.messages[-1]['content']}/{n}")
    assert asyncio.run(ruled.complete(request("x"))).text == "x/0"
    with pytest.raises(AssertionError, match="not both"):
        ScriptedWorker("both", text="a", answer=lambda _, n: "b")


def test_workers_sharing_a_log_number_their_calls_across_the_pool():
    log = CallLog()
    a, b = (ScriptedWorker(name, log=log, yields=2) for name in "ab")

    async def together():
        return await asyncio.gather(a.complete(request("one")), b.complete(request("two")), a.complete(request("3")))

    assert [r.text for r in asyncio.run(together())] == ["ANSWER(a#0)", "ANSWER(b#1)", "ANSWER(a#2)"]
    assert [(c.number, c.worker, c.user_text) for c in log.calls] == [(0, "a", "one"), (1, "b", "two"), (2, "a", "3")]
    # All three started before any ended: yielding to the event loop let them overlap.
    assert log.events[:3] == [("start", 0), ("start", 1), ("start", 2)]
    assert sorted(log.events[3:]) == [("end", 0), ("end", 1), ("end", 2)]
    assert len(a.requests) == 2 and len(b.requests) == 1 and ScriptedWorker("own").log is not log


def test_a_scripted_worker_fails_and_hangs_as_told():
    broken = ScriptedWorker("broken", raises=ProviderError("HTTP 503", kind="server_error", retryable=True))
    with pytest.raises(ProviderError, match="HTTP 503"):
        asyncio.run(broken.complete(request()))
    assert len(broken.requests) == 1 and broken.log.events == [("start", 0), ("end", 0)]

    hanging = ScriptedWorker("hangs", hang=True)
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(hanging.complete(request()), timeout=0.05))
    assert len(hanging.requests) == 1


def test_a_gate_lets_calls_through_only_together():
    gate = Gate(2, timeout_s=30)
    workers = [ScriptedWorker("a", gate=gate), ScriptedWorker("b", gate=gate)]

    async def both():
        return await asyncio.gather(*(w.complete(request()) for w in workers))

    assert [r.text for r in asyncio.run(both())] == ["ANSWER(a#0)", "ANSWER(b#0)"]
    assert (gate.arrived, gate.most, gate.in_flight) == (2, 2, 0)

    alone = Gate(2, timeout_s=0.05)
    with pytest.raises(TimeoutError):
        asyncio.run(ScriptedWorker("alone", gate=alone).complete(request()))
    assert (alone.arrived, alone.most, alone.in_flight) == (1, 1, 0)

    sim = build_provider(WorkerConfig(name="sim", provider="sim", sim={"accuracy": {"default": 1.0}}))
    gate = Gate(3, timeout_s=30)
    gated = GatedProvider(sim, gate)

    async def three():
        return await asyncio.gather(*(gated.complete(request(str(i))) for i in range(3)))

    assert all(r.simulated for r in asyncio.run(three())) and (gate.arrived, gate.most) == (3, 3)
