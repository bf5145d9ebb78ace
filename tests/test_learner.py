"""DeepSpeed learner ranks as Ray actors: GRPO steps, rank agreement,
micro-batch equivalence, checkpoints, and a toy reward that rises.

Tests that compare two ways of computing one step pin float32: `auto` precision
takes bf16 autocast on a CPU with bf16 instructions, and bf16 rounds the two
orders of arithmetic apart."""

import itertools
import math
import random
from dataclasses import replace

import pytest
import ray
import torch

from conductor_rl.config import LearnerConfig
from conductor_rl.models import load_causal_lm
from conductor_rl.policy.grpo import group_advantages
from conductor_rl.policy.learner import RolloutBatch, lr_lambda
from conductor_rl.policy.sampling import TransformersSampler


def random_batch(n=8, seed=0):
    rng = random.Random(seed)
    prompts = [[rng.randrange(1000) for _ in range(rng.randint(3, 6))] for _ in range(n)]
    completions = [[rng.randrange(1000) for _ in range(rng.randint(2, 7))] for _ in range(n)]
    old = [[-7.0 + rng.uniform(-0.5, 0.5) for _ in c] for c in completions]
    return RolloutBatch(prompts, completions, old, [rng.uniform(-1.5, 1.5) for _ in range(n)])


def flat_weights(group):
    return torch.cat([t.flatten().double() for _, t in ray.get(group.named_weights())])


def learner_config(**overrides) -> LearnerConfig:
    return LearnerConfig(**{"lr": 1e-3, "warmup_ratio": 0.0, "precision": "float32", **overrides})


class Groups:
    """`groups(**overrides)`: a LearnerGroup of tiny-qwen2 whose every rank's learner is built afresh
    (model loaded, new DeepSpeed engine, optimizer and schedule) from `learner_config(**overrides)`.
    Its ranks are the module's (`ranks`): starting a rank (a process, torch and DeepSpeed imports,
    torch.distributed) costs several times what building its learner does, so ranks a test is done
    with build the next test's group. Ranks that held a ZeRO-3 engine are not used again."""

    def __init__(self, idle: dict[int, list]) -> None:
        self.idle = idle  # world size -> groups no test holds
        self.taken: list = []

    def __call__(self, past_versions: int = 0, model: str = "tiny-qwen2", total_steps: int = 10, **overrides):
        from actors.learner import LearnerGroup

        config = learner_config(**overrides)
        spare = self.idle.get(config.world_size)
        if not spare:
            group = LearnerGroup(model, config, total_steps=total_steps, past_versions=past_versions)
        else:
            group = spare.pop()
            try:
                group.rebuild(model, config, total_steps, past_versions)
            except BaseException:
                group.shutdown()
                raise
        self.taken.append(group)
        return group

    def rebuild(
        self, group, past_versions: int = 0, model: str = "tiny-qwen2", total_steps: int = 10, **overrides
    ) -> None:
        """Build `group`'s learners again, from `learner_config(**overrides)`."""
        group.rebuild(model, learner_config(**overrides), total_steps, past_versions)

    def give_back(self, failed: bool) -> None:
        for group in self.taken:
            if failed or group.zero3:
                group.shutdown()
            else:
                self.idle.setdefault(len(group.actors), []).append(group)


@pytest.fixture(scope="module")
def ranks(ray_cluster):
    """The module's learner ranks, by world size (see `Groups`); shut down at the module's end."""
    idle: dict[int, list] = {}
    yield idle
    for spare in idle.values():
        for group in spare:
            group.shutdown()


@pytest.fixture
def groups(ranks, request):
    failed_before = request.session.testsfailed
    made = Groups(ranks)
    yield made
    # A test that failed may have left its ranks mid-collective: they are shut down, not used again.
    made.give_back(failed=request.session.testsfailed > failed_before)


def test_two_ranks_with_micro_batches_equal_one_rank_with_one_batch(groups):
    """The loss normalisation across ranks and micro-batches gives one big batch's gradient, and
    both ranks end the step with the same weights."""
    # Adam's first step is about lr * sign(g): float noise on a near-zero gradient
    # flips it. A large eps makes the step linear in g, so weights compare gradients.
    one = groups(world_size=1, micro_batch_size=16, zero_stage=1, adam_eps=1e-3)
    two = groups(world_size=2, micro_batch_size=2, zero_stage=2, adam_eps=1e-3)
    batch = random_batch(n=7, seed=4)  # odd: ranks get 4 and 3 rows, padded to equal micro-batches
    before = two.checksums()
    one.train_step(batch)
    stats = two.train_step(batch)
    after = two.checksums()
    assert before[0] == before[1] and after[0] == after[1]  # same weights on both ranks
    assert after[0] != before[0]  # and the step changed them
    assert stats.tokens > 0 and stats.grad_norm > 0 and stats.lr == pytest.approx(1e-3 * lr_lambda(1, 10, 0, 0))
    assert torch.allclose(flat_weights(one), flat_weights(two), atol=1e-6, rtol=0)


def test_zero3_ranks_hand_out_and_save_the_full_weights(groups, tmp_path):
    """Under ZeRO-3 each rank holds slices: the weights for the generators and the
    checkpoint are gathered, and equal ZeRO-2's after the same step."""
    from conductor_rl.models import load_causal_lm

    batch = random_batch(n=6, seed=9)
    weights = {}
    settings = dict(adam_eps=1e-3, world_size=2, micro_batch_size=2)
    group = groups(zero_stage=2, **settings)
    for stage in (2, 3):  # the same two ranks, built again for ZeRO-3
        if stage == 3:
            groups.rebuild(group, zero_stage=3, **settings)
        group.train_step(batch)
        weights[stage] = dict(ray.get(group.named_weights()))
        if stage == 3:
            group.save(str(tmp_path / "ckpt"))
    model, _ = load_causal_lm("tiny-qwen2", "float32")
    assert weights[3].keys() == weights[2].keys() == model.state_dict().keys()
    for name, tensor in weights[3].items():
        assert tensor.shape == weights[2][name].shape
        assert torch.allclose(tensor, weights[2][name], atol=1e-6, rtol=0), name
    saved, _ = load_causal_lm(str(tmp_path / "ckpt" / "model"), "float32")
    for name, tensor in saved.state_dict().items():
        assert torch.allclose(tensor, weights[3][name], atol=1e-6, rtol=0), name


def test_tokens_left_out_of_the_loss_mask_do_not_move_the_weights(groups):
    """Two batches that differ only in each completion's last token: with that
    token masked out the two steps are identical; with it in the loss they are not."""
    from dataclasses import replace

    a = random_batch(seed=4)
    b = replace(a, completion_ids=[c[:-1] + [(c[-1] + 1) % 1000] for c in a.completion_ids])
    masks = [[1] * (len(c) - 1) + [0] for c in a.completion_ids]
    with pytest.raises(ValueError, match="loss_masks"):
        replace(a, loss_masks=[m[:-1] for m in masks])
    first, second = (groups(precision="auto", zero_stage=1) for _ in range(2))
    first.train_step(replace(a, loss_masks=masks))
    second.train_step(replace(b, loss_masks=masks))
    assert torch.equal(flat_weights(first), flat_weights(second))
    first.train_step(a)
    second.train_step(b)
    assert not torch.equal(flat_weights(first), flat_weights(second))


def grouped_batch(groups=3, size=4, seed=1):
    """GRPO's shape: `size` completions per prompt, prompts longer than completions."""
    rng = random.Random(seed)
    prompts, completions, old, adv = [], [], [], []
    for _ in range(groups):
        prompt = [rng.randrange(1000) for _ in range(rng.randint(8, 14))]
        for _ in range(size):
            prompts.append(prompt)
            completions.append([rng.randrange(1000) for _ in range(rng.randint(1, 6))])
            old.append([-7.0 + rng.uniform(-0.5, 0.5) for _ in completions[-1]])
            adv.append(rng.uniform(-1.5, 1.5))
    return RolloutBatch(prompts, completions, old, adv)


def whole_sequence_logits(batch, weights=None):
    """The logits that predict each completion token under tiny-qwen2 (or `weights` loaded into it), one whole
    sequence at a time."""
    model, _ = load_causal_lm("tiny-qwen2", "float32")
    if weights is not None:
        model.load_state_dict(dict(weights), strict=False)
    with torch.no_grad():
        return [
            model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
            for prompt, completion in zip(batch.prompt_ids, batch.completion_ids)
        ]


def masked_grpo_loss(batch, logprobs, normalizer) -> float:
    """The GRPO loss of `batch` from each row's whole-sequence `logprobs`, its loss masks and `normalizer`."""
    from conductor_rl.policy.grpo import grpo_loss

    return sum(
        float(
            grpo_loss(
                logp[None],
                torch.tensor([batch.old_logprobs[i]]),
                torch.tensor([batch.advantages[i]]),
                torch.tensor([batch.loss_mask(i)], dtype=torch.float32),
                normalizer=normalizer,
            )[0]
        )
        for i, logp in enumerate(logprobs)
    )


def whole_sequence_logprobs(batch, weights=None):
    """Each completion token's log-prob under tiny-qwen2 (or `weights` loaded into it), one whole sequence at a time."""
    return [
        torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        for logits, completion in zip(whole_sequence_logits(batch, weights), batch.completion_ids)
    ]


def test_shared_prompt_and_a_partial_loss_mask_give_the_masked_loss_of_whole_sequences(groups):
    """Running a group's prompt once, its completions packed after it, is exact: the same
    loss and step as running every row's whole sequence (the path gradient checkpointing
    takes), with micro-batches that split groups and 1-token completions. With a loss mask
    that keeps a few tokens (and a row with none) the loss is the masked GRPO loss of each
    whole sequence's own log-probs. In float32: under bf16 autocast (`auto` on a bf16 CPU)
    the two orders of arithmetic round apart. (One test: each learner group costs seconds.)"""

    batch = grouped_batch(seed=5)
    rng = random.Random(5)
    masks = [[int(rng.random() < 0.3) for _ in c] for c in batch.completion_ids]
    masks[0] = [0] * len(masks[0])  # a row wholly out of the loss
    batch = replace(batch, loss_masks=masks)
    normalizer = sum(map(sum, masks))
    expected = masked_grpo_loss(batch, whole_sequence_logprobs(batch), normalizer)

    def make(**overrides):
        return groups(micro_batch_size=3, adam_eps=1e-3, old_logprobs="sampler", **overrides)

    shared, whole = make(), make(gradient_checkpointing=True)
    a, b = shared.train_step(batch), whole.train_step(batch)
    assert a.tokens == b.tokens == normalizer
    assert a.loss == pytest.approx(expected, abs=1e-5) and b.loss == pytest.approx(expected, abs=1e-5)
    assert torch.allclose(flat_weights(shared), flat_weights(whole), atol=1e-6)


def test_worker_ids_over_the_roster_and_logit_terms_enter_the_loss_as_the_batch_says(groups):
    """train.worker_logprob=roster: at a row's worker_positions the log-prob is a log-softmax over
    worker_tokens alone. train.choice_centering's terms (policy/centering.py): the loss is GRPO's plus
    sum(term x logit of worker_tokens) over the same normaliser, at each term's position, in the loss
    mask or out of it. Both on one batch, against each whole sequence's logits."""

    batch = grouped_batch(seed=9)
    rng = random.Random(9)
    tokens = [3, 17, 250]
    completions = [[17] + c[1:] if i % 3 == 0 else c for i, c in enumerate(batch.completion_ids)]
    positions = [[0] if i % 3 == 0 else [] for i in range(len(completions))]
    masks = [[1] * len(c) for c in completions]
    masks[1][0] = 0  # a term where the mask holds nothing
    terms = [{0: [rng.uniform(-1, 1) for _ in tokens]} if i % 2 == 1 else {} for i in range(len(masks))]
    batch = replace(
        batch,
        completion_ids=completions,
        loss_masks=masks,
        logit_terms=terms,
        worker_tokens=tokens,
        worker_positions=positions,
    )
    with pytest.raises(ValueError, match="logit term"):
        replace(batch, logit_terms=[{99: [0.0] * 3}] + terms[1:])
    with pytest.raises(ValueError, match="worker_positions"):
        replace(batch, worker_positions=[[1]] + positions[1:])  # not one of worker_tokens there
    normalizer = sum(map(sum, masks))
    logps, added = [], 0.0
    for i, logits in enumerate(whole_sequence_logits(batch)):
        logp = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(completions[i])[:, None])[:, 0]
        for t in positions[i]:
            logp[t] = torch.log_softmax(logits[t, tokens], dim=-1)[tokens.index(completions[i][t])]
        logps.append(logp)
        added += sum(float((logits[t, tokens] * torch.tensor(w)).sum()) for t, w in terms[i].items()) / normalizer
    expected = masked_grpo_loss(batch, logps, normalizer) + added
    step = groups(micro_batch_size=3, old_logprobs="sampler").train_step(batch)
    assert step.loss == pytest.approx(expected, abs=1e-5)


def test_the_learner_steps_on_its_own_log_probs_and_reports_the_samplers_gap(groups):
    """By default the old log-probs are the learner's own: two batches that differ only
    in what the sampler reported (as vLLM reports a constrained format's masked
    distribution) give the same step, and ratio_mean shows the gap. With
    old_logprobs=sampler the reported ones enter the loss."""
    batch = grouped_batch(seed=7)
    true = [lp.tolist() for lp in whole_sequence_logprobs(batch)]
    honest = replace(batch, old_logprobs=true)
    masked = replace(batch, old_logprobs=[[x + math.log(2.0) for x in lp] for lp in true])  # half the mass allowed
    made = []
    for mode in ("learner", "sampler"):
        settings = dict(micro_batch_size=4, zero_stage=1, old_logprobs=mode)
        if made:  # the same ranks, built again for this mode
            for group in made:
                groups.rebuild(group, **settings)
        else:
            made = [groups(**settings) for _ in range(2)]
        a, b = made[0].train_step(honest), made[1].train_step(masked)
        assert a.ratio_mean == pytest.approx(1.0, abs=1e-4) and b.ratio_mean == pytest.approx(0.5, abs=1e-4)
        same = torch.equal(flat_weights(made[0]), flat_weights(made[1]))
        assert same == (mode == "learner"), mode
        if mode == "learner":
            # Rows an older sampler drew (asynchronous training) are weighted by min(2, learner / sampler
            # probability) from the sampler's log-probs: 1/2, capped 4 -> 2, or 1, row by row. Against
            # the weights both groups now hold, a second step of one on them.
            now = [lp.tolist() for lp in whole_sequence_logprobs(batch, ray.get(made[1].named_weights()))]
            shifts = [(math.log(2.0), 0.5), (-math.log(4.0), 2.0), (0.0, 1.0)]
            stale = replace(
                batch,
                staleness=[1] * len(now),
                old_logprobs=[[x + shifts[i % 3][0] for x in lp] for i, lp in enumerate(now)],
            )
            c = made[1].train_step(stale)
            tokens = [len(lp) for lp in now]
            expected = sum(n * shifts[i % 3][1] for i, n in enumerate(tokens)) / sum(tokens)
            assert c.behaviour_weight_mean == pytest.approx(expected, abs=1e-4)
            assert c.ratio_mean != pytest.approx(1.0, abs=1e-3)
            made[0].train_step(replace(batch, staleness=[1] * len(now), old_logprobs=now))
            assert not torch.equal(flat_weights(made[0]), flat_weights(made[1]))  # another direction


def test_later_epochs_on_a_batch_keep_the_first_steps_old_log_probs_so_the_clip_bounds_them(groups):
    """learner.epochs: the first step is the single step's (same statistics), the later ones move the
    advantage-weighted log-likelihood further, and clip, which they only can if their old log-probs are
    still the first step's (recomputed, every ratio would be 1). With a KL term, whose reference
    log-probs the later steps take from the first."""
    batch = grouped_batch(seed=3)
    settings = dict(lr=1e-2, micro_batch_size=4, zero_stage=1, kl_beta=0.05)
    group = groups(**settings)
    one = group.train_step(batch, 1)
    after_one = ray.get(group.named_weights())
    groups.rebuild(group, **settings)
    three = group.train_step(batch, 3)
    after_three = ray.get(group.named_weights())
    assert one.clip_fraction == 0.0 and three.clip_fraction > 0.0
    assert (three.loss, three.logprob_mean, three.grad_norm, three.tokens) == pytest.approx(
        (one.loss, one.logprob_mean, one.grad_norm, one.tokens), rel=1e-5
    )

    def objective(weights) -> float:
        return sum(a * float(lp.sum()) for a, lp in zip(batch.advantages, whole_sequence_logprobs(batch, weights)))

    assert objective(after_three) > objective(after_one) > objective(None)


def test_stale_rows_behaviour_log_probs_are_recomputed_with_the_weights_that_sampled_them(groups):
    """learner.behaviour_logprobs=learner (vLLM's under a constrained format are the masked
    distribution's): a learner that keeps one past version weighs a row one version stale by
    min(2, p_now / p_then) from its own weights of then, whatever the sampler reported, and a row
    older than what it kept as if on-policy."""
    group = groups(micro_batch_size=4, past_versions=1)
    batch = grouped_batch(seed=9)
    then = whole_sequence_logprobs(batch)  # version 0, which sampled the stale rows
    group.train_step(batch)  # version 0 -> 1
    now = whole_sequence_logprobs(batch, ray.get(group.named_weights()))
    masked = [[x + math.log(3.0) for x in lp.tolist()] for lp in then]  # what a masked sampler reports
    stats = group.train_step(replace(batch, staleness=[1] * len(then), old_logprobs=masked))
    ratios = torch.cat([torch.exp(a - b).clamp(max=2.0) for a, b in zip(now, then)])
    assert abs(float(ratios.mean()) - 1.0) > 1e-3  # the step moved the log-probs, so the weights say something
    assert stats.behaviour_weight_mean == pytest.approx(float(ratios.mean()), abs=1e-4)
    older = group.train_step(replace(batch, staleness=[2] * len(then), old_logprobs=masked))
    assert older.behaviour_weight_mean == 1.0


def test_checkpoint_is_a_plain_hf_folder_and_restores_the_optimizer(groups, tmp_path):
    from transformers import AutoModelForCausalLM

    group = groups(world_size=1, micro_batch_size=4)
    group.train_step(random_batch(seed=1))
    folder = group.save(str(tmp_path / "ckpt"))
    reloaded = AutoModelForCausalLM.from_pretrained(f"{folder}/model", dtype=torch.float32)
    mine = dict(ray.get(group.named_weights()))
    for name, tensor in reloaded.state_dict().items():
        assert torch.equal(tensor, mine[name]), name
    group.train_step(random_batch(seed=2))
    continued = flat_weights(group)
    group.load(folder)  # back to the checkpoint, optimizer state included
    group.train_step(random_batch(seed=2))
    assert torch.allclose(flat_weights(group), continued, atol=1e-7, rtol=0)


def test_lr_schedule_warms_up_then_follows_a_cosine():
    values = [lr_lambda(s, 100, 0.03, 0.0) for s in range(101)]
    assert values[0] == pytest.approx(1 / 3) and values[2] == pytest.approx(1.0)
    assert values[51] == pytest.approx(0.5, abs=0.02) and values[100] == pytest.approx(0.0, abs=1e-6)
    assert all(a >= b for a, b in itertools.pairwise(values[2:]))


@pytest.fixture(scope="module")
def peaked_model(tmp_path_factory):
    """tiny-qwen2 with its (tied) embeddings scaled up: a random model's next-token
    distribution is then peaked enough for a token-level toy reward to be found
    by sampling, as a pretrained model's would be."""
    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(5.0)  # measured: the top token then has ~25% of samples
    folder = tmp_path_factory.mktemp("peaked") / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def untied_model(tmp_path_factory):
    """tiny-qwen2 with an output head of its own (a copy of its embedding), as smollm2-135m-untied is."""
    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    folder = tmp_path_factory.mktemp("untied") / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_head_lr_moves_only_the_heads_worker_id_rows_and_the_rest_by_adamw(groups, untied_model):
    """learner.head_lr (conductor_rl/policy/optimizer.py) under real DeepSpeed ZeRO-1: of the untied head
    only the rows of the batch's worker_tokens move; the embedding and layers move by AdamW."""
    tokens = [3, 17, 250]
    batch = grouped_batch(seed=5)
    batch = replace(batch, worker_tokens=tokens, worker_positions=[[] for _ in batch.completion_ids])
    group = groups(model=untied_model, head_lr=0.5, zero_stage=1, micro_batch_size=4)
    before = dict(ray.get(group.named_weights()))
    group.train_step(batch)
    after = dict(ray.get(group.named_weights()))
    moved = (after["lm_head.weight"] - before["lm_head.weight"]).abs().sum(1).nonzero().flatten().tolist()
    assert moved == tokens
    embedding = "model.embed_tokens.weight"
    assert not torch.equal(after[embedding], before[embedding])


def test_grpo_on_a_toy_reward_raises_it(groups, peaked_model):
    """Reward = share of completion tokens equal to the initially most frequent
    token; a few GRPO steps (sample → reward → advantages → learner step →
    weight sync) raise it."""
    group = groups(model=peaked_model, total_steps=50, lr=3e-3, precision="auto", micro_batch_size=16)
    model, tokenizer = load_causal_lm(peaked_model, "float32")
    sampler = TransformersSampler(model, tokenizer)
    prompts = [
        "<|im_start|>user\nCount.<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n",
    ]
    prompt_ids = [tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    first = [
        t
        for group_ in sampler.sample(prompts, n=16, temperature=1.0, max_tokens=8, seed=99)
        for s in group_
        for t in s.token_ids
    ]
    target = max(set(first), key=first.count)
    G, history = 16, []
    for step in range(8):
        completions, old, rewards, pids = [], [], [], []
        for p_ids, samples in zip(prompt_ids, sampler.sample(prompts, n=G, temperature=1.0, max_tokens=8, seed=step)):
            for s in samples:
                completions.append(list(s.token_ids))
                old.append(list(s.logprobs))
                rewards.append(sum(t == target for t in s.token_ids) / len(s.token_ids))
                pids.append(p_ids)
        history.append(sum(rewards) / len(rewards))
        adv = group_advantages(torch.tensor(rewards), G).advantages.tolist()
        group.train_step(RolloutBatch(pids, completions, old, adv))
        sampler.load_weights(ray.get(group.named_weights()), version=step + 1)
    assert sum(history[-3:]) / 3 > sum(history[:3]) / 3 + 0.1, history


def test_warm_start_steps_raise_the_demonstrations_likelihood(groups):
    """A warm-start batch (advantage 1, the learner's own old log-probs) is a supervised step: the
    demonstrations' log-likelihood over their loss tokens rises."""
    from conductor_rl.config import load_config
    from conductor_rl.data.question import Question
    from conductor_rl.plan.prompts import ConductorPrompt
    from conductor_rl.policy.warm_start import warm_start_batches

    _, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    prompts = ConductorPrompt.from_config(load_config(None, ["conductor.model=tiny-qwen2"]), tokenizer)
    texts = ["Natalia sold clips to 48 of her friends in April.", "Which city is the capital of Australia?"]
    questions = [Question(f"q{i}", "math", t, "72", "math", "test") for i, t in enumerate(texts)]
    (batch,) = warm_start_batches(prompts, questions, steps=1, per_step=2, per_question=4, seed=0)

    def likelihood(weights=None) -> float:
        per_row = whole_sequence_logprobs(batch, weights)
        kept = [lp for row, mask in zip(per_row, batch.loss_masks) for lp, m in zip(row.tolist(), mask) if m]
        return sum(kept) / len(kept)

    group = groups(micro_batch_size=8, zero_stage=1)
    before = likelihood()
    fits = []
    for _ in range(3):
        stats = group.train_step(batch)
        assert stats.tokens == sum(map(sum, batch.loss_masks))
        fits.append(stats.logprob_mean)
    after = likelihood(ray.get(group.named_weights()))
    assert after > before + 0.5, (before, after)
    assert fits[0] == pytest.approx(before, abs=1e-3) and fits[2] > fits[0], fits  # the fit the warm start logs
