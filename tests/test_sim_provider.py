"""The simulated worker: declared skill, reproducibility, labelling, latency,
faults, token usage and cost. Answers are judged by the real grading."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from conductor_rl import grading
from conductor_rl.config import Price, SimSpec, WorkerConfig
from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.providers import sim as sim_module
from conductor_rl.workers.providers.base import ProviderError, TaskHint, Usage, WorkerRequest, WorkerResponse
from conductor_rl.workers.providers.sim import CHARS_PER_TOKEN, SimProvider

# References shaped like those in conductor_rl/data/samples (math500, gsm8k, mmlu).
REFERENCES = {
    "math": [
        "\\frac{14}{3}",
        "10\\%",
        "-3",
        "10,\\!080",
        "\\sqrt{51}",
        "(5,\\infty)",
        "-\\frac{24}{25}",
        "55^\\circ",
        "\\frac14",
        "3.21",
        "\\cot x",
        "70 \\sqrt{2}",
        "0",
    ],
    "numeric": ["35", "-3", "1,080", "0", "3.5", "3430"],
    "choice": ["A", "B", "C", "D"],
}


def sim(
    accuracy: float | dict[str, float] = 0.5,
    *,
    name: str = "sim-a",
    seed: int = 0,
    price: Price | None = None,
    **spec: object,
) -> SimProvider:
    acc = accuracy if isinstance(accuracy, dict) else {"default": accuracy}
    config = WorkerConfig(name=name, provider="sim", sim=SimSpec(accuracy=acc, **spec), price=price or Price())
    return SimProvider(config, seed=seed)


def request(
    reference: str = "35",
    kind: str = "numeric",
    *,
    domain: str = "math",
    key: str = "",
    visible: tuple[str, ...] = (),
    subtask: str = "Solve it.",
    max_tokens: int = 4096,
    question_id: str = "q1",
) -> WorkerRequest:
    hint = TaskHint(question_id, domain, reference, kind, visible_answers=visible, sample_key=key)
    messages = [{"role": "system", "content": "You are a worker."}, {"role": "user", "content": subtask}]
    return WorkerRequest(messages, max_tokens, 0.2, None, hint)


def call(provider: SimProvider, req: WorkerRequest) -> WorkerResponse:
    return asyncio.run(provider.complete(req))


def call_many(provider: SimProvider, reqs: list[WorkerRequest]) -> list[WorkerResponse]:
    async def go() -> list[WorkerResponse]:
        return list(await asyncio.gather(*(provider.complete(r) for r in reqs)))

    return asyncio.run(go())


def verdicts(kind: str, responses: list[WorkerResponse], reference: str, math_grader) -> list[str]:
    return [str(grading.grade(kind, r.text, reference, math=math_grader).verdict) for r in responses]


# --------------------------------------------------------------------------- accuracy


@pytest.mark.parametrize("kind,reference", [("math", "\\frac{14}{3}"), ("numeric", "35"), ("choice", "C")])
def test_accuracy_is_respected(kind, reference, math_grader):
    provider = sim(0.7)
    responses = call_many(provider, [request(reference, kind, key=f"rollout-{i}") for i in range(400)])
    got = verdicts(kind, responses, reference, math_grader)
    assert set(got) <= {"correct", "wrong"}, "the simulated answers must always be gradeable"
    share = got.count("correct") / len(got)
    assert 0.6 <= share <= 0.8, share


def test_accuracy_per_domain_and_default():
    provider = sim({"math": 0.9, "mmlu": 0.1, "default": 0.5})
    assert provider.accuracy("math", False) == 0.9
    assert provider.accuracy("mmlu", False) == 0.1
    assert provider.accuracy("code", False) == 0.5  # falls back to "default"
    assert sim({"math": 0.9}).accuracy("code", False) == 0.5  # no default given: 0.5

    responses = call_many(provider, [request("B", "choice", domain="mmlu", key=str(i)) for i in range(300)])
    share = verdicts("choice", responses, "B", None).count("correct") / 300
    assert share < 0.2, share


def test_gain_with_context_raises_accuracy():
    provider = sim(0.3, gain_with_context=0.5)
    assert provider.accuracy("math", reads_context=False) == pytest.approx(0.3)
    assert provider.accuracy("math", reads_context=True) == pytest.approx(0.8)
    assert sim(0.9, gain_with_context=0.5).accuracy("math", True) == 1.0  # clamped
    assert sim(0.2, gain_with_context=-0.5).accuracy("math", True) == 0.0

    alone = call_many(provider, [request("35", key=str(i)) for i in range(400)])
    helped = call_many(provider, [request("35", key=str(i), visible=("earlier: 36",)) for i in range(400)])
    share_alone = verdicts("numeric", alone, "35", None).count("correct") / 400
    share_helped = verdicts("numeric", helped, "35", None).count("correct") / 400
    assert 0.2 <= share_alone <= 0.4, share_alone
    assert 0.7 <= share_helped <= 0.9, share_helped


# --------------------------------------------------------------------------- grading of right and wrong answers


@pytest.mark.parametrize("kind", sorted(REFERENCES))
def test_wrong_answers_are_graded_wrong_and_right_ones_right(kind, math_grader):
    always_wrong, always_right = sim(0.0), sim(1.0)
    for reference in REFERENCES[kind]:
        reqs = [request(reference, kind, key=f"k{i}") for i in range(25)]
        wrong = call_many(always_wrong, reqs)
        right = call_many(always_right, reqs)
        assert verdicts(kind, wrong, reference, math_grader) == ["wrong"] * 25, (reference, [r.text for r in wrong])
        assert verdicts(kind, right, reference, math_grader) == ["correct"] * 25, (reference, right[0].text)
        # A wrong answer is read as an answer (the grader extracted something), just not the reference.
        for r in wrong:
            extracted = grading.grade(kind, r.text, reference, math=math_grader).extracted
            assert extracted and extracted.strip() != reference, (reference, r.text)


def test_wrong_choice_stays_in_range():
    provider = sim(0.0)
    for reference in "ABCD":
        letters = {
            grading.extract_choice(r.text)
            for r in call_many(provider, [request(reference, "choice", key=str(i)) for i in range(60)])
        }
        assert reference not in letters
        assert letters <= set("ABCD") and len(letters) >= 2, letters


# --------------------------------------------------------------------------- reproducibility


def test_same_request_and_seed_give_same_response():
    first = [call(sim(0.5, seed=7), request("35", key=str(i))) for i in range(20)]
    again = [call(sim(0.5, seed=7), request("35", key=str(i))) for i in range(20)]
    assert [r.text for r in first] == [r.text for r in again]
    assert [r.usage for r in first] == [r.usage for r in again]


def test_different_sample_key_gives_different_draws():
    provider = sim(0.5)
    responses = call_many(provider, [request("\\frac{14}{3}", "math", key=f"rollout-{i}") for i in range(60)])
    texts = [r.text for r in responses]
    assert len(set(texts)) >= 3  # right and several different wrong answers
    outcomes = ["frac{14}{3}" in t for t in texts]
    assert any(outcomes) and not all(outcomes)
    assert len({r.usage.output_tokens for r in responses}) > 5


def test_different_seed_gives_different_draws():
    reqs = [request("35", key=str(i)) for i in range(60)]
    a = [r.text for r in call_many(sim(0.5, seed=1), reqs)]
    b = [r.text for r in call_many(sim(0.5, seed=2), reqs)]
    assert a != b


def test_draws_do_not_depend_on_scheduling_order():
    reqs = [request("35", key=str(i)) for i in range(30)]
    forward = [r.text for r in call_many(sim(0.5, latency_s=0.01, latency_jitter=1.0), reqs)]
    backward = [r.text for r in call_many(sim(0.5, latency_s=0.01, latency_jitter=1.0), reqs[::-1])][::-1]
    assert forward == backward


# --------------------------------------------------------------------------- labelling


def test_every_response_is_labelled_simulated():
    provider = sim(0.5, name="sim-labelled")
    assert provider.simulated is True and provider.name == "sim-labelled"
    reqs = [request(ref, kind, key=str(i)) for kind, refs in REFERENCES.items() for ref in refs for i in range(3)]
    for response in call_many(provider, reqs):
        assert response.simulated is True
        assert "simulated" in response.text.lower()
    no_hint = call(provider, WorkerRequest([{"role": "user", "content": "hello"}], 64, 0.2))
    assert no_hint.simulated is True and "simulated" in no_hint.text.lower()


# --------------------------------------------------------------------------- latency and faults


@pytest.fixture
def sleeps(monkeypatch):
    """Records every asyncio.sleep the simulated worker asks for (and still sleeps it), and the most
    sleeps in progress at once: latency and overlap as counts, which a busy machine cannot change."""
    real_sleep = asyncio.sleep
    record = SimpleNamespace(asked=[], in_progress=0, most_at_once=0)

    async def recording_sleep(seconds: float, result=None):
        record.asked.append(seconds)
        record.in_progress += 1
        record.most_at_once = max(record.most_at_once, record.in_progress)
        try:
            return await real_sleep(seconds, result)
        finally:
            record.in_progress -= 1

    monkeypatch.setattr(sim_module.asyncio, "sleep", recording_sleep)
    return record


def test_latency_is_simulated(sleeps):
    response = call(sim(0.5, latency_s=0.2), request())
    assert sleeps.asked == [0.2]
    assert response.latency_s >= 0.2, response.latency_s  # measured around the sleep


def test_latency_jitter_stays_in_band_and_calls_overlap(sleeps):
    responses = call_many(sim(0.5, latency_s=0.2, latency_jitter=0.5), [request(key=str(i)) for i in range(20)])
    assert len(sleeps.asked) == 20 and all(0.1 <= s <= 0.3 for s in sleeps.asked), sleeps.asked
    assert max(sleeps.asked) - min(sleeps.asked) > 0.02  # jitter actually varies
    assert sleeps.most_at_once == 20  # 20 concurrent calls, not one after another
    assert all(r.latency_s >= s for r, s in zip(responses, sleeps.asked))


def test_zero_latency_does_not_sleep(sleeps):
    call_many(sim(0.5), [request(key=str(i)) for i in range(200)])
    assert sleeps.asked == []


def test_fail_rate_one_raises_provider_error():
    provider = sim(0.5, fail_rate=1.0)
    with pytest.raises(ProviderError) as info:
        call(provider, request())
    assert info.value.kind == "simulated_fault"
    assert info.value.retryable is True
    assert "sim-a" in str(info.value)


def test_fail_rate_is_statistical():
    provider = sim(0.5, fail_rate=0.3)

    async def one(i: int) -> bool:
        try:
            await provider.complete(request(key=str(i)))
        except ProviderError:
            return True
        return False

    async def go() -> list[bool]:
        return list(await asyncio.gather(*(one(i) for i in range(400))))

    share = sum(asyncio.run(go())) / 400
    assert 0.2 <= share <= 0.4, share


# --------------------------------------------------------------------------- tokens and cost


def test_token_usage_and_cost():
    price = Price(input=3.0, output=15.0, cached_input=0.3)
    provider = sim(0.5, output_tokens=100, price=price)
    subtask = "x" * 4000
    for i in range(20):
        req = request(key=str(i), subtask=subtask)
        response = call(provider, req)
        prompt_chars = sum(len(m["content"]) for m in req.messages)
        assert response.usage.input_tokens == prompt_chars // CHARS_PER_TOKEN
        assert 50 <= response.usage.output_tokens <= 150
        assert response.usage.cached_tokens == 0
        assert response.cost_usd == pytest.approx(cost_of(response.usage, price))
        expected = (response.usage.input_tokens * 3.0 + response.usage.output_tokens * 15.0) / 1e6
        assert response.cost_usd == pytest.approx(expected)
        assert response.cost_usd > 0


def test_output_tokens_respect_max_tokens():
    provider = sim(0.5, output_tokens=1000)
    for i in range(10):
        assert call(provider, request(key=str(i), max_tokens=7)).usage.output_tokens <= 7


def test_free_worker_costs_nothing():
    assert call(sim(0.5), request()).cost_usd == 0.0


def test_cost_of_prices_cached_tokens():
    price = Price(input=2.0, output=10.0, cached_input=0.5)
    usage = Usage(input_tokens=1000, output_tokens=500, reasoning_tokens=300, cached_tokens=200)
    # 800 fresh input tokens, 200 cached, 500 output (reasoning is part of output, not added again).
    assert cost_of(usage, price) == pytest.approx((800 * 2.0 + 200 * 0.5 + 500 * 10.0) / 1e6)
    assert cost_of(Usage(), price) == 0.0
    # More cached tokens than input tokens never gives a negative fresh-input charge.
    assert cost_of(Usage(input_tokens=10, cached_tokens=50), price) == pytest.approx(50 * 0.5 / 1e6)
    assert cost_of(Usage(input_tokens=1_000_000), Price(input=1.25)) == pytest.approx(1.25)
