"""The one transformers generation path (conductor_rl/generation.py), on the
random tiny Qwen2 with the real Qwen2.5 tokenizer: how a completion ends, top-p,
seeding, log-probs, the plan constraint, the stop condition, batching, and that
the Conductor, the transformers sampler and the local worker all sample through it."""

import asyncio

import pytest
import torch

from conductor_rl.config import ConductorConfig, WorkerConfig
from conductor_rl.generation import generate
from conductor_rl.models import load_causal_lm
from conductor_rl.plan import parse_plan
from conductor_rl.plan.constrained import PlanConstraint, PlanFormat
from tests.logprob_reference import completion_logprobs

pytestmark = [pytest.mark.slow, pytest.mark.light]  # samples a real model in this process
PROMPTS = ["<|im_start|>user\nWrite a plan.<|im_end|>\n<|im_start|>assistant\n", "Hi", "one two three four five"]


@pytest.fixture(scope="module")
def tiny():
    return load_causal_lm("tiny-qwen2", "float32")


def teacher_forced(model, tokenizer, prompt, token_ids):
    """Log-probs of `token_ids` after `prompt` from one forward pass, as the learner computes them."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False).input_ids
    ids = torch.tensor([prompt_ids + list(token_ids)])
    logps = completion_logprobs(model(ids).logits, ids)
    return logps[0, len(prompt_ids) - 1 :].tolist()


def assert_close(actual, expected, tol=1e-4):
    assert len(actual) == len(expected)
    assert max((abs(a - b) for a, b in zip(actual, expected)), default=0.0) < tol


class EndsAt:
    """The model, except that row r of the batch must write the end-of-sequence token
    as its token number stops[r] (None: never); everywhere else it cannot write it.
    The first token comes from the prompts' own rows, before they are repeated n times."""

    def __init__(self, model, eos, stops):
        self.model, self.eos, self.stops, self.step = model, eos, stops, 0
        self.device, self.generation_config = model.device, model.generation_config

    def __call__(self, **kwargs):
        out = self.model(**kwargs)
        logits = out.logits.clone()
        for r in range(logits.shape[0]):
            forced = self.stops[r] if r < len(self.stops) else None
            logits[r, -1, self.eos] = float("-inf")
            if forced == self.step:
                logits[r, -1] = float("-inf")
                logits[r, -1, self.eos] = 0.0
        out.logits = logits
        self.step += 1
        return out


def test_a_completion_ends_at_its_first_eos_which_is_left_out(tiny):
    model, tokenizer = tiny
    forced = EndsAt(model, tokenizer.eos_token_id, stops=[2, 4, None])
    [group] = generate(forced, tokenizer, PROMPTS[:1], max_new_tokens=6, n=3, seed=0)
    assert [len(g.token_ids) for g in group] == [2, 4, 6]  # no padding after an early end
    assert [g.finish_reason for g in group] == ["eos", "eos", "length"]
    assert [g.finished for g in group] == [True, True, False] and group[2].truncated
    for g in group:
        assert tokenizer.eos_token_id not in g.token_ids and len(g.logprobs) == len(g.token_ids)
        assert g.text == tokenizer.decode(g.token_ids, skip_special_tokens=True)
    assert group[0].eos_id == tokenizer.eos_token_id and group[0].eos_logprob == pytest.approx(0.0, abs=1e-6)
    assert group[2].eos_id is None and group[2].eos_logprob is None


def test_an_eos_as_the_first_token_gives_an_empty_finished_completion(tiny):
    model, tokenizer = tiny
    [[g]] = generate(EndsAt(model, tokenizer.eos_token_id, [0]), tokenizer, PROMPTS[1:2], max_new_tokens=4)
    assert g.token_ids == () and g.text == "" and g.finish_reason == "eos" and not g.truncated


def test_a_tiny_top_p_leaves_only_the_argmax(tiny):
    model, tokenizer = tiny
    [[greedy]] = generate(model, tokenizer, PROMPTS[:1], max_new_tokens=5, temperature=0.0)
    [narrow] = generate(model, tokenizer, PROMPTS[:1], max_new_tokens=5, n=3, temperature=1.0, top_p=1e-6, seed=4)
    assert all(g.token_ids == greedy.token_ids for g in narrow)
    [wide] = generate(model, tokenizer, PROMPTS[:1], max_new_tokens=5, n=3, temperature=1.0, top_p=1.0, seed=4)
    assert len({g.token_ids for g in wide}) > 1


def test_the_same_seed_repeats_another_differs_and_global_rng_is_untouched(tiny):
    model, tokenizer = tiny
    state = torch.get_rng_state()
    first = generate(model, tokenizer, PROMPTS[:2], max_new_tokens=5, n=2, seed=7)
    again = generate(model, tokenizer, PROMPTS[:2], max_new_tokens=5, n=2, seed=7)
    other = generate(model, tokenizer, PROMPTS[:2], max_new_tokens=5, n=2, seed=8)
    unseeded = generate(model, tokenizer, PROMPTS[:1], max_new_tokens=5, n=2, seed=None)
    assert torch.equal(torch.get_rng_state(), state)
    assert first == again  # ids, log-probs, text, everything
    assert [g.token_ids for group in first for g in group] != [g.token_ids for group in other for g in group]
    assert len(unseeded[0]) == 2
    # the two samples of a prompt are not copies, nor are two prompts' draws the same
    assert first[0][0].token_ids != first[0][1].token_ids


def test_prompts_of_different_lengths_batch_like_each_alone_with_exact_logprobs(tiny):
    """Left padding: each prompt's log-probs equal a teacher-forced pass over it alone,
    and a prompt samples what it samples alone (its draws depend only on the seed and
    its place in the list)."""
    model, tokenizer = tiny
    batched = generate(model, tokenizer, PROMPTS, max_new_tokens=6, n=2, seed=3)
    assert [len(group) for group in batched] == [2, 2, 2]
    for prompt, group in zip(PROMPTS, batched):
        for g in group:
            assert_close(g.logprobs, teacher_forced(model, tokenizer, prompt, g.token_ids))
    # The first prompt alone, given as token ids (used as given): the same samples.
    ids = tokenizer(PROMPTS[0], add_special_tokens=False).input_ids
    [alone] = generate(model, tokenizer, [ids], max_new_tokens=6, n=2, seed=3)
    assert [g.token_ids for g in alone] == [g.token_ids for g in batched[0]]
    for a, b in zip(alone, batched[0]):
        assert_close(a.logprobs, b.logprobs)


def test_constrained_completions_parse_and_keep_the_unconstrained_logprobs(tiny):
    model, tokenizer = tiny
    constraint = PlanConstraint(
        PlanFormat(tokenizer, max_subtask_tokens=3), n_workers=3, max_steps=2, prefix="model_id = ["
    )
    prompt = PROMPTS[0] + "model_id = ["
    [group] = generate(
        model, tokenizer, [prompt], max_new_tokens=60, n=3, temperature=1.0, seed=2, constraint=constraint
    )
    for g in group:
        plan = parse_plan("model_id = [" + g.text, n_workers=3, max_steps=2)
        assert plan.steps and g.finish_reason == "eos"  # the format forces the end
        assert_close(g.logprobs, teacher_forced(model, tokenizer, prompt, g.token_ids))


def test_the_stop_condition_ends_a_completion_at_the_first_token_that_meets_it(tiny):
    model, tokenizer = tiny

    def long_enough(text):
        return len(text) >= 12

    [group] = generate(model, tokenizer, PROMPTS[:1], max_new_tokens=30, n=3, seed=5, stop=long_enough)
    for g in group:
        assert g.finish_reason == "stop" and g.finished
        assert long_enough(g.text) and not long_enough(tokenizer.decode(g.token_ids[:-1], skip_special_tokens=True))


def test_conductor_writes_what_generate_samples(tiny):
    from conductor_rl.policy.conductor import Conductor

    model, tokenizer = tiny
    config = ConductorConfig(
        model="tiny-qwen2", max_new_tokens=6, temperature=1.0, response_prefix="model_id = [", n_examples=0
    )
    conductor = Conductor(config, model, tokenizer)
    completions = conductor.write_plans("What is 2 + 2?", n_workers=2, n=2, seed=9)
    [group] = generate(model, tokenizer, [conductor.prompt("What is 2 + 2?", 2)], max_new_tokens=6, n=2, seed=9)
    assert [c.token_ids for c in completions] == [g.token_ids for g in group]
    assert [c.text for c in completions] == ["model_id = [" + g.text for g in group]
    assert [c.truncated for c in completions] == [g.truncated for g in group]


def test_transformers_sampler_samples_what_generate_samples_and_keeps_the_eos(tiny):
    from conductor_rl.policy.sampling import TransformersSampler

    model, tokenizer = tiny
    eos = tokenizer.eos_token_id
    [samples] = TransformersSampler(EndsAt(model, eos, [3, None]), tokenizer).sample(
        PROMPTS[:1], n=2, temperature=1.0, max_tokens=5, seed=6
    )
    [group] = generate(EndsAt(model, eos, [3, None]), tokenizer, PROMPTS[:1], max_new_tokens=5, n=2, seed=6)
    assert samples[0].token_ids == group[0].token_ids + (eos,) and samples[0].finish_reason == "stop"
    assert samples[0].logprobs == group[0].logprobs + (group[0].eos_logprob,)
    assert samples[1].token_ids == group[1].token_ids and samples[1].finish_reason == "length"
    assert samples[1].text == group[1].text and samples[1].logprobs == group[1].logprobs


def test_local_worker_answers_what_generate_samples(tiny):
    from conductor_rl.plan.prompts import apply_chat_template
    from conductor_rl.workers.providers import WorkerRequest
    from conductor_rl.workers.providers.local import LocalProvider

    model, tokenizer = tiny
    worker = LocalProvider(
        WorkerConfig(name="local-tiny", provider="local", model="tiny-qwen2"), model, tokenizer, seed=11
    )
    messages = [{"role": "user", "content": "Say hi"}]
    response = asyncio.run(worker.complete(WorkerRequest(messages, max_tokens=5, temperature=1.0)))
    prompt = apply_chat_template(tokenizer, messages)
    [[expected]] = generate(model, tokenizer, [prompt], max_new_tokens=5, temperature=1.0, seed=11)
    assert response.text == expected.text
    assert response.usage.output_tokens == len(expected.token_ids)
    assert response.usage.input_tokens == len(tokenizer(prompt, add_special_tokens=False).input_ids)
