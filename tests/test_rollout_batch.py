"""policy.batch.rollout_batch: which graded rollouts reach the learner, with
what advantage, and which of their tokens the loss sees. No Ray, no model."""

from __future__ import annotations

import pytest

from conductor_rl.plan.constrained import choice_segments
from conductor_rl.policy.batch import rollout_batch
from conductor_rl.rollout.rollouts import Rollout
from conductor_rl.rollout.workflow import Task

pytestmark = pytest.mark.light  # starts no Ray, vLLM or learner: runs beside the heavy tests (conftest.py)

PROMPTS = [[1, 2, 3], [4, 5], [6], [7, 8]]


def rollout(group: int, reward: float | None, tokens: int = 3) -> Rollout:
    ids = tuple(100 + group * 10 + k for k in range(tokens))
    return Rollout(
        Task(f"q{group}", "?"), "", reward=reward, group=group, completion_ids=ids, logprobs=tuple(-0.5 for _ in ids)
    )


def test_advantages_are_relative_to_the_group_and_the_batch_follows_the_rollouts():
    rollouts = [rollout(0, 1.0), rollout(0, 0.0), rollout(1, 0.5), rollout(1, 1.0), rollout(1, 0.0)]
    batch, informative = rollout_batch(rollouts, PROMPTS)
    assert informative == 2
    assert [r.advantage for r in rollouts[:2]] == pytest.approx([1.0, -1.0])
    assert [r.advantage for r in rollouts[2:]] == pytest.approx([0.0, 1.2247449, -1.2247449])
    assert batch.advantages == pytest.approx([r.advantage for r in rollouts])
    assert batch.prompt_ids == [PROMPTS[0]] * 2 + [PROMPTS[1]] * 3
    assert batch.completion_ids == [list(r.completion_ids) for r in rollouts]
    assert batch.old_logprobs == [list(r.logprobs) for r in rollouts]
    assert batch.loss_masks is None  # free text: every completion token is in the loss


def test_a_lone_survivor_and_rollouts_without_a_reward_are_left_out():
    rollouts = [
        rollout(0, 1.0),
        rollout(0, None),
        rollout(0, None),  # one reward left in group 0
        rollout(1, 1.0),
        rollout(1, None),
        rollout(1, 0.0),
    ]
    batch, informative = rollout_batch(rollouts, PROMPTS, drop_uninformative=False)
    assert informative == 1
    assert rollouts[0].advantage is None and rollouts[1].advantage is None
    assert batch.completion_ids == [list(rollouts[3].completion_ids), list(rollouts[5].completion_ids)]
    assert batch.advantages == pytest.approx([1.0, -1.0])


@pytest.mark.parametrize("drop", [True, False])
def test_uninformative_groups_are_kept_or_dropped_as_asked_and_not_counted(drop):
    rollouts = [rollout(0, 1.0), rollout(0, 0.0), rollout(1, 0.5), rollout(1, 0.5), rollout(2, 0.0), rollout(2, 0.0)]
    batch, informative = rollout_batch(rollouts, PROMPTS, drop_uninformative=drop)
    assert informative == 1
    assert [r.advantage for r in rollouts[2:]] == [0.0] * 4
    assert len(batch.advantages) == (2 if drop else 6)
    assert batch.prompt_ids[-1] == (PROMPTS[0] if drop else PROMPTS[2])


def test_no_informative_group_means_no_learner_step():
    same = [rollout(0, 1.0), rollout(0, 1.0), rollout(1, 0.0), rollout(1, 0.0)]
    assert rollout_batch(same, PROMPTS, drop_uninformative=False) == (None, 0)
    assert rollout_batch([], PROMPTS) == (None, 0)
    assert rollout_batch([rollout(0, 1.0), rollout(1, 0.0)], PROMPTS) == (None, 0)  # lone survivors only


def test_empty_completions_have_nothing_to_learn_from():
    rollouts = [rollout(0, 1.0), rollout(0, 0.0, tokens=0), rollout(0, 0.0)]
    batch, informative = rollout_batch(rollouts, PROMPTS)
    assert informative == 1
    assert rollouts[1].advantage is not None  # it still counts in its group's statistics
    assert batch.completion_ids == [list(rollouts[0].completion_ids), list(rollouts[2].completion_ids)]
    only_empty = [rollout(0, 1.0, tokens=0), rollout(0, 0.0, tokens=0)]
    assert rollout_batch(only_empty, PROMPTS) == (None, 1)


@pytest.mark.slow
def plan_rollouts(tokenizer, prefix: str, plans: list[str], rewards: tuple[float, ...]) -> list[Rollout]:
    """One rollout of question "q" per constrained plan (its text after `prefix`), with its reward."""
    rollouts = []
    for reward, plan in zip(rewards, plans):
        ids = tuple(tokenizer.encode(plan, add_special_tokens=False) + [tokenizer.eos_token_id])
        rollouts.append(
            Rollout(Task("q", "?"), prefix + plan, reward=reward, completion_ids=ids, logprobs=tuple(-1.0 for _ in ids))
        )
    return rollouts


def test_the_formats_own_text_is_out_of_the_loss_and_subtask_text_as_asked():
    from transformers import AutoTokenizer

    from conductor_rl.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny-qwen2"))  # the Qwen2.5 tokenizer
    prefix = "model_id = ["
    plans = [
        '0, 2]\nsubtasks = ["Solve it", "Check it"]\naccess_list = [[], "all"]',
        '1]\nsubtasks = ["Answer it"]\naccess_list = [[]]',
    ]
    rollouts = plan_rollouts(tokenizer, prefix, plans, (1.0, 0.0))

    def split(batch, row: int) -> tuple[str, str]:
        ids, mask = batch.completion_ids[row], batch.loss_masks[row]
        chosen = "".join(tokenizer.decode([i]) for i, m in zip(ids, mask) if m)
        dropped = "".join(tokenizer.decode([i]) for i, m in zip(ids, mask) if not m)
        return chosen, dropped

    batch, _ = rollout_batch(rollouts, PROMPTS, format_tokenizer=tokenizer, response_prefix=prefix)
    chosen, dropped = split(batch, 0)
    for text in ("0", "2]", "Solve it", "Check it", "all"):
        assert text in chosen, (text, chosen)
    for text in ("subtasks = [", "access_list = [", "<|im_end|>"):
        assert text in dropped and text not in chosen, (text, dropped)

    batch, _ = rollout_batch(
        rollouts, PROMPTS, format_tokenizer=tokenizer, response_prefix=prefix, subtask_text_in_loss=False
    )
    chosen, dropped = split(batch, 0)
    assert "Solve it" in dropped and "Solve" not in chosen and "0" in chosen and "all" in chosen
    chosen, _ = split(batch, 1)
    assert "1]" in chosen and "Answer" not in chosen

    # train.choice_weighting=segment: the same tokens in the loss, each kind of choice an equal share
    weighted, _ = rollout_batch(
        rollouts, PROMPTS, format_tokenizer=tokenizer, response_prefix=prefix, choice_weighting="segment"
    )
    plain, _ = rollout_batch(rollouts, PROMPTS, format_tokenizer=tokenizer, response_prefix=prefix)
    for row in range(2):
        w, m = weighted.loss_masks[row], plain.loss_masks[row]
        assert [x > 0 for x in w] == [x > 0 for x in m] and sum(w) == pytest.approx(sum(m))
    labels = choice_segments(tokenizer, list(rollouts[0].completion_ids), prefix)
    share = {
        k: sum(x for x, label in zip(weighted.loss_masks[0], labels) if label == k)
        for k in ("workers", "subtasks", "access")
    }
    assert share["workers"] == pytest.approx(share["subtasks"]) == pytest.approx(share["access"])


def test_choice_centering_puts_the_batchs_net_vote_at_every_worker_choice_and_roster_logprobs_find_them():
    """train.choice_centering (policy/centering.py): at each step's worker id, the share of the batch's
    advantage-weighted count of each worker, over the rows with that step, centred over the roster."""
    from transformers import AutoTokenizer

    from conductor_rl.models import resolve_model
    from conductor_rl.policy.centering import net_vote_terms, worker_tokens

    # Two questions that want opposite workers: their votes cancel, nothing is taken out.
    rows = [[5, 9], [6, 9], [6, 9], [5, 9]]
    labels = [["workers", None]] * 4
    masks = [[1.0, 0.0]] * 4
    assert net_vote_terms(rows, labels, masks, [1, -1, 1, -1], [5, 6], 1.0) == [{0: [0.0, 0.0]}] * 4
    # Both want worker 5: its net vote (+4 over 4 rows, centred) at every row's choice, times the share.
    assert net_vote_terms(rows, labels, masks, [1, -1, -1, 1], [5, 6], 0.5) == [{0: [0.25, -0.25]}] * 4
    # A second step counts over the rows that have one; the loss weight weighs the vote.
    two = [[5, 7, 6], [6, 9]]
    votes = net_vote_terms(
        two, [["workers", None, "workers"], ["workers", None]], [[2, 0, 1], [1, 0]], [1, -1], [5, 6], 1
    )
    assert votes == [{0: [0.75, -0.75], 2: [-0.5, 0.5]}, {0: [0.75, -0.75]}]

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny-qwen2"))
    with pytest.raises(ValueError, match="one token"):
        worker_tokens(tokenizer, [0, 12])
    tokens = worker_tokens(tokenizer, [0, 1, 2])
    prefix = "model_id = ["
    plans = [
        '0, 2]\nsubtasks = ["Solve it", "Check it"]\naccess_list = [[], "all"]',
        '1]\nsubtasks = ["Go"]\naccess_list = [[]]',
    ]
    rollouts = plan_rollouts(tokenizer, prefix, plans, (1.0, 0.0))
    kwargs = {"format_tokenizer": tokenizer, "response_prefix": prefix, "worker_tokens": tokens}
    plain, _ = rollout_batch(rollouts, PROMPTS, **kwargs)
    assert plain.logit_terms is None
    batch, _ = rollout_batch(rollouts, PROMPTS, choice_centering=1.0, **kwargs)
    assert batch.worker_tokens == tokens
    chosen = [[tokenizer.decode([batch.completion_ids[r][t]]) for t in sorted(batch.logit_terms[r])] for r in range(2)]
    assert chosen == [["0", "2"], ["1"]]
    for terms in batch.logit_terms:
        for weights in terms.values():
            assert sum(weights) == pytest.approx(0.0) and any(weights)
    assert batch.worker_positions is None
    # train.worker_logprob=roster: the same positions, whose log-probs the learner takes over the roster
    roster, _ = rollout_batch(rollouts, PROMPTS, worker_logprob="roster", **kwargs)
    assert roster.worker_tokens == tokens and roster.logit_terms is None
    assert roster.worker_positions == [sorted(terms) for terms in batch.logit_terms]
