"""Offline models: the tiny Qwen2 for tests and the SmolLM2 Conductor, plus the
transformers-backed Conductor and local worker built on them."""

import asyncio
import json
from pathlib import Path

import pytest

from conductor_rl.config import ConductorConfig, WorkerConfig
from conductor_rl.generation import prompt_seed
from conductor_rl.models import ModelNotAvailableError, load_causal_lm, qwen2_tokenizer, resolve_model
from conductor_rl.plan import parse_plan
from conductor_rl.policy.conductor import Conductor, plan_finished
from conductor_rl.workers.providers import WorkerRequest, build_provider

pytestmark = pytest.mark.light  # starts no Ray, vLLM or learner: runs beside the heavy tests (conftest.py)


@pytest.fixture(scope="module")
def tiny():
    return load_causal_lm("tiny-qwen2")


@pytest.mark.slow
def test_qwen2_tokenizer_matches_the_real_vocabulary():
    tok = qwen2_tokenizer()
    # Ids of the real Qwen2.5 tokenizer: "Hello" 9707, " world" 1879, digits one by one.
    assert tok("Hello world 123").input_ids == [9707, 1879, 220, 16, 17, 18]
    assert tok.convert_tokens_to_ids("<|im_end|>") == 151645
    assert len(tok) == 151665
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nhi<|im_end|>" in text


@pytest.mark.slow
def test_tiny_qwen2_folder_is_a_plain_hf_checkpoint(tiny):
    model, tokenizer = tiny
    folder = resolve_model("tiny-qwen2")
    config = json.loads(Path(folder, "config.json").read_text())
    assert config["model_type"] == "qwen2"
    assert config["hidden_size"] // config["num_attention_heads"] >= 64  # vLLM CPU attention needs it
    assert "quantization_config" not in config
    assert model.config.vocab_size == len(tokenizer)


@pytest.mark.slow
def test_smollm2_converts_once_to_a_safetensors_folder():
    folder = resolve_model("smollm2-135m")
    config = json.loads(Path(folder, "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    model, tokenizer = load_causal_lm("smollm2-135m")
    assert sum(p.numel() for p in model.parameters()) > 100_000_000
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
    )


@pytest.mark.slow
def test_unknown_model_fails_with_advice():
    with pytest.raises(ModelNotAvailableError, match="tiny-qwen2"):
        load_causal_lm("no-such-org/no-such-model-xyz")


@pytest.mark.parametrize(
    "text, done",
    [
        ("model_id = [0]\nsubtasks = ['a']\naccess_list = [[]]", True),
        ("model_id = [0]\nsubtasks = ['a']\naccess_list = [[], [0", False),
        ("model_id = [0]\nsubtasks = ['a']\n", False),
        ('reasoning\naccess_list = [\n  [],\n  "all"\n]', True),
        ("access_list = [[]]\nmore\naccess_list = [[", False),  # a later attempt is still open
    ],
)
def test_plan_finished(text, done):
    assert plan_finished(text) is done


@pytest.mark.slow
def test_conductor_samples_and_stops_after_a_prefilled_plan(tiny):
    model, tokenizer = tiny
    plan = 'model_id = [1, 0]\nsubtasks = ["Solve it", "Check it"]\naccess_list = [[], "all"]\n'
    config = ConductorConfig(model="tiny-qwen2", max_new_tokens=40, response_prefix=plan, stop_after_plan=True)
    conductor = Conductor(config, model, tokenizer)
    completions = conductor.write_plans("What is 2 + 2?", n_workers=2, n=3, seed=1)
    assert len(completions) == 3
    for c in completions:
        assert c.text.startswith(plan)
        assert c.completion_tokens <= 1 and not c.truncated  # stopped at once: the plan was complete
        assert parse_plan(c.text, 2).visible(1) == [0]


@pytest.mark.slow
def test_conductor_without_stop_runs_to_max_tokens_and_is_marked_truncated(tiny):
    model, tokenizer = tiny
    config = ConductorConfig(model="tiny-qwen2", max_new_tokens=8, temperature=1.0)
    conductor = Conductor(config, model, tokenizer)
    prompt = conductor.prompt("What is 2 + 2?", 3)
    assert "Model 0, Model 1, Model 2" in prompt and "What is 2 + 2?" in prompt
    c = conductor.write_plans("What is 2 + 2?", n_workers=3, n=2, seed=0)
    assert all(x.completion_tokens <= 8 for x in c)
    assert any(x.truncated for x in c)
    again = conductor.write_plans("What is 2 + 2?", n_workers=3, n=2, seed=0)
    assert [x.text for x in again] == [x.text for x in c]  # seeded


def seed_alone(per_prompt_seed: int) -> int:
    """The seed of a one-question call whose question draws with `per_prompt_seed`
    (prompt 0 of a call seeded s draws with s * 7919 mod 2**31, generation.py)."""
    seed = per_prompt_seed * pow(7919, -1, 2**31) % 2**31
    assert prompt_seed(seed, 0) == per_prompt_seed
    return seed


@pytest.mark.slow
def test_write_plans_many_samples_each_question_as_the_one_question_path_with_its_seed(tiny):
    """One generation over questions of different lengths (left padding): question i
    draws with prompt i's seed and samples exactly what it samples alone with that seed."""
    model, tokenizer = tiny
    conductor = Conductor(ConductorConfig(model="tiny-qwen2", max_new_tokens=8, temperature=1.0), model, tokenizer)
    questions = ["What is 2 + 2?", "Name the largest planet of the solar system and its mass.", "Why?"]
    batched = conductor.write_plans_many(questions, n_workers=3, n=2, seed=5)
    assert [len(plans) for plans in batched] == [2, 2, 2]
    for i, (question, plans) in enumerate(zip(questions, batched)):
        assert conductor.write_plans(question, 3, n=2, seed=seed_alone(prompt_seed(5, i))) == plans
    assert batched[0] == conductor.write_plans(questions[0], 3, n=2, seed=5)  # question 0: the same seed
    assert conductor.write_plans_many(questions, 3, n=2, seed=5) == batched  # seeded: it repeats
    assert conductor.write_plans_many([], 3, n=2, seed=5) == []


@pytest.mark.slow
def test_local_worker_generates_with_usage(tiny):
    model, tokenizer = tiny
    config = WorkerConfig(name="local-tiny", provider="local", model="tiny-qwen2", price={"input": 1.0, "output": 2.0})
    from conductor_rl.workers.providers.local import LocalProvider

    worker = LocalProvider(config, model, tokenizer)
    request = WorkerRequest([{"role": "user", "content": "Say hi"}], max_tokens=6, temperature=0.0)

    async def two_at_once():
        return await asyncio.gather(worker.complete(request), worker.complete(request))

    first, second = asyncio.run(two_at_once())
    assert first.text == second.text  # greedy, and the lock kept the two calls apart
    assert 1 <= first.usage.output_tokens <= 6 and first.usage.input_tokens > 3
    assert first.cost_usd == pytest.approx((first.usage.input_tokens * 1.0 + first.usage.output_tokens * 2.0) / 1e6)
    assert not first.simulated


def test_build_provider_needs_the_key_of_http_providers(monkeypatch):
    from conductor_rl.workers.providers import MissingApiKeyError, ProviderUnavailableError

    monkeypatch.delenv("CONDUCTOR_TEST_NO_SUCH_KEY", raising=False)
    config = WorkerConfig(name="gpt", provider="openai", model="gpt-5", api_key_env="CONDUCTOR_TEST_NO_SUCH_KEY")
    with pytest.raises(MissingApiKeyError, match="CONDUCTOR_TEST_NO_SUCH_KEY is not set"):
        build_provider(config)
    with pytest.raises(ProviderUnavailableError, match="unknown-provider"):
        build_provider(WorkerConfig.model_construct(name="x", provider="unknown-provider", model="m"))


@pytest.mark.slow
def test_first_use_builds_into_an_empty_cache(tmp_path, monkeypatch):
    """A fresh machine has no converted models: the first resolve builds one
    atomically (no staging folder left behind), the second reuses it."""
    monkeypatch.setenv("CONDUCTOR_RL_CACHE", str(tmp_path))
    folder = resolve_model("tiny-qwen2")
    assert folder == str(tmp_path / "models" / "tiny-qwen2")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["tiny-qwen2"]
    mtime = (tmp_path / "models" / "tiny-qwen2" / "config.json").stat().st_mtime
    assert resolve_model("tiny-qwen2") == folder
    assert (tmp_path / "models" / "tiny-qwen2" / "config.json").stat().st_mtime == mtime


@pytest.mark.slow
def test_smollm2_conversion_from_the_gguf_package(tmp_path, monkeypatch):
    monkeypatch.setenv("CONDUCTOR_RL_CACHE", str(tmp_path))
    folder = resolve_model("smollm2-135m")
    files = sorted(p.name for p in (tmp_path / "models" / "smollm2-135m").iterdir())
    assert "model.safetensors" in files and "tokenizer.json" in files and folder.endswith("smollm2-135m")
