"""A served Conductor's request handling (conductor_rl/serving/endpoint.py) without a server: the
embedded default's SmolLM2 Conductor writes the plans in this process, its simulated pool answers."""

import asyncio
import json
import time

import pytest

from conductor_rl.config import load_config
from conductor_rl.orchestrator import in_process_workers
from conductor_rl.serving.access import BearerTokens, ClientLimits, ClientQuota
from conductor_rl.serving.chat_format import RequestLimits
from conductor_rl.serving.endpoint import ChatEndpoint, LocalAdmission

TOKEN = "s" * 24
AUTH = f"Bearer {TOKEN}"


def endpoint(smollm2, *overrides, requests=20, timeout_s=60.0, sample_one=None, books=None):
    """`books`: a dict that gets the workers' `ledger` and the clients' `limits`."""
    from conductor_rl.policy.conductor import Conductor

    config = load_config(None, ["conductor.max_depth=0", *overrides])
    model, tokenizer = smollm2
    conductor = Conductor(config.conductor, model, tokenizer)
    workers, ledger = in_process_workers(config)
    limits = ClientLimits(ClientQuota(requests=requests, usd=None, window_s=60))
    if books is not None:
        books.update(ledger=ledger, limits=limits)
    return ChatEndpoint(
        config,
        "conductor",
        None if sample_one else lambda ids, shapes, seeds, t: conductor.sample_ids(ids, shapes, seeds, t),
        tokenizer,
        workers,
        tokens=BearerTokens({"alice": TOKEN}),
        admission=LocalAdmission(limits),
        limits=RequestLimits(max_steps=config.conductor.max_steps),
        timeout_s=timeout_s,
        sample_one=sample_one and sample_one(conductor),
    )


def body(question="What is 17 * 23?", **extra) -> bytes:
    return json.dumps({"model": "conductor", "messages": [{"role": "user", "content": question}], **extra}).encode()


async def events_of(reply) -> list:
    out = []
    async for raw in reply.stream:
        assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
        text = raw[len(b"data: ") : -2].decode()
        out.append(text if text == "[DONE]" else json.loads(text))
    return out


def test_a_question_is_planned_run_on_the_pool_and_answered_with_its_steps_and_usage(smollm2):
    serve = endpoint(smollm2)
    pool = serve.pool

    async def main():
        plain, subset, streamed = await asyncio.gather(
            serve.chat(body(seed=1), AUTH),
            serve.chat(body("Name the capital of France.", workers=[pool[2]], seed=2), AUTH),
            serve.chat(body(stream=True, stream_options={"include_usage": True}, seed=3), AUTH),
        )
        return plain, subset, await events_of(streamed)

    plain, subset, events = asyncio.run(main())
    assert plain.status == 200, plain.body
    reply = plain.body
    assert reply["choices"][0]["message"]["content"], reply
    steps = reply["conductor"]["steps"]
    assert 1 <= len(steps) <= serve.config.conductor.max_steps and all(s["worker"] in pool for s in steps)
    worker_in = sum(s["usage"]["input_tokens"] for s in steps)
    assert reply["usage"]["prompt_tokens"] > worker_in > 0  # the Conductor's prompt and every worker's input
    assert reply["usage"]["total_tokens"] == reply["usage"]["prompt_tokens"] + reply["usage"]["completion_tokens"]
    assert reply["conductor"]["cost_usd"] == pytest.approx(sum(s["cost_usd"] for s in steps))
    assert reply["conductor"]["simulated"] is True
    # A worker subset: the plan's roster is that worker alone.
    assert subset.status == 200 and {s["worker"] for s in subset.body["conductor"]["steps"]} == {pool[2]}
    # Streamed: the role, the plan, each step as it finished, the answer, the finish, the usage, [DONE].
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""} and events[-1] == "[DONE]"
    progress = [e["conductor"] for e in events[1:-1] if "conductor" in e]
    assert progress[0]["event"] == "plan" and progress[-1]["event"] == "done"
    streamed_steps = [p for p in progress if p["event"] == "step"]
    assert len(streamed_steps) == len(progress[-1]["steps"]) >= 1
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in events[1:-1] if e.get("choices"))
    assert content and content == max(streamed_steps, key=lambda p: p["index"])["response"]  # the last step's
    assert events[-2]["choices"] == [] and events[-2]["usage"]["total_tokens"] > 0


def test_refusals_name_their_reason_in_openais_error_shape(smollm2):
    serve = endpoint(smollm2, requests=1)

    async def main():
        return [
            await serve.chat(body(), None),
            await serve.chat(body(), "Bearer " + "x" * 24),
            await serve.chat(b"{", AUTH),
            await serve.chat(body(max_steps=99), AUTH),
            await serve.chat(body(), AUTH),
            await serve.chat(body(), AUTH),
        ]

    no_token, wrong_token, malformed, too_many_steps, first, over = asyncio.run(main())
    assert no_token.status == wrong_token.status == 401 and no_token.body["error"]["type"] == "authentication_error"
    assert malformed.status == 400 and too_many_steps.body["error"]["param"] == "max_steps"
    assert first.status == 200
    assert over.status == 429 and int(over.headers["Retry-After"]) > 0
    assert serve.models("Bearer nope").status == 401 and serve.models(AUTH).body["data"][0]["id"] == "conductor"


def test_a_failing_worker_or_a_slow_one_ends_the_request_with_what_it_spent(smollm2):
    fails = [f"workers.{i}.sim.fail_rate=1.0" for i in range(3)] + [f"workers.{i}.max_retries=0" for i in range(3)]
    failing = endpoint(smollm2, *fails)
    slow_books: dict = {}
    slow = endpoint(smollm2, *[f"workers.{i}.sim.latency_s=30" for i in range(3)], timeout_s=5.0, books=slow_books)

    async def main():
        return (
            await failing.chat(body(seed=4), AUTH),
            await slow.chat(body(seed=4), AUTH),
            await events_of(await failing.chat(body(seed=5, stream=True), AUTH)),
        )

    failed, timed_out, stream = asyncio.run(main())
    assert failed.status == 502 and failed.body["error"]["code"] == "worker_error", failed.body
    assert failed.body["conductor"]["steps"] and failed.body["conductor"]["cost_usd"] >= 0
    assert timed_out.status == 504 and "serve.timeout_s" in timed_out.body["error"]["message"]
    # No step finished; calls sent before the timeout (none if the plan took the 5 s) were cut off and are
    # charged at their worst case, the same as the ledger counts them (the hang-up test below sees one).
    charged = timed_out.body["conductor"]["charged_usd"]
    assert timed_out.body["conductor"]["cost_usd"] == 0.0
    assert slow_books["limits"].spent("alice", time.monotonic()) == pytest.approx(charged)
    assert slow_books["ledger"].total_usd == pytest.approx(charged) and slow_books["ledger"].open_usd == 0
    assert stream[-1] == "[DONE]" and stream[-2]["error"]["code"] == "worker_error"


def test_a_client_that_hangs_up_after_the_plan_is_charged_for_the_calls_it_started(smollm2):
    """The stream is closed once the plan has come (the server's side of a client gone): its workflow is
    cancelled with a call in flight, and the client is charged that call at its worst case, the same
    amount the ledger settles it at, instead of nothing."""
    books: dict = {}
    serve = endpoint(smollm2, *[f"workers.{i}.sim.latency_s=30" for i in range(3)], books=books)

    async def main():
        reply = await serve.chat(body(seed=4, stream=True), AUTH)
        async for raw in reply.stream:
            text = raw[len(b"data: ") : -2].decode()
            if text != "[DONE]" and json.loads(text).get("conductor", {}).get("event") == "plan":
                break
        else:
            pytest.fail("the stream ended without a plan event")
        started = time.monotonic()
        while books["ledger"].open_usd == 0 and time.monotonic() - started < 20:
            await asyncio.sleep(0.05)  # the first step's call is in flight
        await reply.stream.aclose()  # the client hangs up

    asyncio.run(main())
    charged = books["limits"].spent("alice", time.monotonic())
    assert charged > 0 and books["ledger"].total_usd == pytest.approx(charged)
    # What was charged is calls cut off at their worst case, not bills: nothing finished.
    assert books["ledger"].summary()["unsettled"]["cost_usd"] == pytest.approx(charged)
    assert books["ledger"].settle_open_calls() == 0  # nothing left open for a settling that never comes in serve


def test_with_a_per_request_sampler_each_plan_is_its_own_request_and_a_seed_gives_the_same_plan(smollm2):
    """serve.batching=continuous's wiring: the endpoint sends each request's plan on its own (the engine
    batches; here the in-process Conductor stands for it, one prompt a call) and waits for no window."""
    calls = []

    def per_request(conductor):
        async def sample_one(prompt_ids, shape, seed, temperature):
            calls.append(seed)
            return (await asyncio.to_thread(conductor.sample_ids, [prompt_ids], [shape], [seed], temperature))[0]

        return sample_one

    serve = endpoint(smollm2, sample_one=per_request)
    assert serve.batching == "continuous"

    async def main():
        return await asyncio.gather(*(serve.chat(body(seed=s), AUTH) for s in (7, 7, 8)))

    first, again, other = asyncio.run(main())
    assert sorted(calls) == [7, 7, 8]  # one call per request, never a batch of them
    assert first.status == again.status == 200, (first.body, again.body)
    assert first.body["conductor"]["completion"] == again.body["conductor"]["completion"]
    assert other.body["conductor"]["completion"]  # planned, whatever its workers then did


def test_a_gigabyte_body_is_refused_by_its_token_and_size_before_it_is_read(smollm2):
    """The replica's route hands the body over as it arrives (actors/conductor_app.py): no token, or a
    declared size over serve.max_request_bytes, is refused before a byte is read; an undeclared one is
    cut at the limit, so a gigabyte sent costs the replica about one chunk of memory."""
    import tracemalloc

    ep = endpoint(smollm2)
    chunks_read = []

    async def gigabyte():
        for _ in range(1024):
            chunks_read.append(1)
            yield b"x" * (1 << 20)

    async def one(raw: bytes):
        yield raw

    async def go():
        tracemalloc.start()
        try:
            for auth in (None, "Bearer wrong-token-of-24-chars!"):
                refused = await ep.chat_from(gigabyte(), auth, str(1 << 30))
                assert refused.status == 401 and not chunks_read
            declared = await ep.chat_from(gigabyte(), AUTH, str(1 << 30))
            assert declared.status == 413 and not chunks_read
            assert declared.body["error"]["code"] == "request_too_large"
            undeclared = await ep.chat_from(gigabyte(), AUTH, None)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert undeclared.status == 413 and len(chunks_read) == 1  # the first chunk passed the limit
        assert peak < 100 << 20, f"{peak >> 20} MB held"
        answered = await ep.chat_from(one(body()), AUTH, str(len(body())))
        assert answered.status == 200, answered.body

    asyncio.run(go())
