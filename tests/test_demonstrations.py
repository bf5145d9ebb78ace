"""Demonstration plans for the warm start (conductor_rl/plan/demonstrations.py), the token path
the constrained sampler would write for a plan (`encode_plan`), and the warm start's batches."""

import random
from collections import Counter

import pytest
import torch

from conductor_rl.config import ConfigError, load_config
from conductor_rl.data.question import Question
from conductor_rl.plan import parse_plan, render_plan
from conductor_rl.plan.constrained import PlanFormat, PlanFormatError, choice_mask, choice_segments, encode_plan
from conductor_rl.plan.demonstrations import (
    CHECK_SUBTASK,
    demonstration_plan,
    demonstration_reply,
    opening_words,
    shown_answer,
)
from conductor_rl.plan.language import Plan, Step
from conductor_rl.plan.prompts import ConductorPrompt
from conductor_rl.policy.warm_start import WarmStartError, check_warm_start, warm_start_batches, warm_start_for
from conductor_rl.workers.sim_rules import has_check_word, on_task

QUESTION = 'Natalia sold "clips" to 48 of her friends in April,\nand then she sold half as many clips in May.'


def test_opening_words_are_one_safe_line_and_shrink_to_fit():
    assert opening_words(QUESTION, 4) == "Natalia sold clips to"
    assert opening_words("  ", 4) == "Answer"
    assert opening_words(QUESTION, 8, fits=lambda text: len(text) <= 14) == "Natalia sold"
    assert opening_words(QUESTION, 8, fits=lambda text: len(text) <= 5) == "Nat"  # the start of one long word
    assert opening_words(QUESTION, 8, fits=lambda text: False) == "N"  # never empty


def test_demonstrations_are_plans_of_the_family_drawn_uniformly():
    rng = random.Random(3)
    plans = [demonstration_plan(QUESTION, 3, 3, rng) for _ in range(900)]
    lengths = Counter(len(p.steps) for p in plans)
    assert set(lengths) == {1, 2, 3} and all(240 <= n <= 360 for n in lengths.values()), lengths
    workers = Counter(s.model_id for p in plans for s in p.steps)
    assert set(workers) == {0, 1, 2} and max(workers.values()) < 1.2 * min(workers.values()), workers
    roles: Counter = Counter()
    for plan in plans:
        assert parse_plan(render_plan(plan), 3, 3) == plan
        first, *later = plan.steps
        assert first.access == [] and on_task(first.subtask, QUESTION)
        for step in later:
            if step.access == []:
                roles["solve"] += 1
                assert on_task(step.subtask, QUESTION)
            elif has_check_word(step.subtask):
                roles["check"] += 1
                assert step.access == "all" and step.subtask == CHECK_SUBTASK
            else:
                roles["read"] += 1
                assert step.access == "all" and on_task(step.subtask, QUESTION)
    assert all(0.28 <= n / sum(roles.values()) <= 0.39 for n in roles.values()), roles
    again = random.Random(3)
    assert [demonstration_plan(QUESTION, 3, 3, again) for _ in range(900)] == plans


@pytest.fixture(scope="module")
def prompts():
    config = load_config(None)
    return ConductorPrompt.from_config(config)


def walk(fmt: PlanFormat, ids: list[int], n_workers: int, max_steps: int, prefix: str, allow_empty=False) -> None:
    """Feed `ids` through the constrained sampler's logits processor: each must be allowed, then EOS."""
    processor = fmt.processor(1, n_workers, max_steps, prefix, allow_empty)
    scores = torch.zeros((1, fmt.vocab_size))
    seen = [0]
    for token in [*ids, fmt.eos]:
        allowed = processor(torch.tensor([seen]), scores)[0]
        assert allowed[token] > float("-inf"), fmt.tokenizer.decode(seen[1:] + [token])
        seen.append(token)


@pytest.mark.parametrize("prefix", ["model_id = [", ""])
def test_encode_plan_is_the_path_the_constrained_sampler_takes(prompts, prefix):
    fmt = PlanFormat(prompts.tokenizer, 12)
    rng = random.Random(0)
    fits = lambda text: len(fmt.encode(text)) <= 12  # noqa: E731
    for _ in range(40):
        plan = demonstration_plan(QUESTION, 3, 3, rng, fits)
        ids = encode_plan(fmt, plan, prefix)
        walk(fmt, ids, 3, 3, prefix)
        assert prefix + prompts.tokenizer.decode(ids) == render_plan(plan) + "\n"


@pytest.mark.parametrize("prefix", ["model_id = [", ""])
def test_the_empty_plan_encodes_as_the_path_a_recursive_call_samples(prompts, prefix):
    fmt = PlanFormat(prompts.tokenizer, 12)
    ids = encode_plan(fmt, Plan(()), prefix)
    walk(fmt, ids, 3, 3, prefix, allow_empty=True)
    assert prefix + prompts.tokenizer.decode(ids) == render_plan(Plan(())) + "\n"
    with pytest.raises(AssertionError):  # a root plan's format never offers it
        walk(fmt, ids, 3, 3, prefix)
    chosen = [t for t, m in zip(ids, choice_mask(prompts.tokenizer, ids, prefix)) if m]
    assert prompts.tokenizer.decode(chosen).strip() == "]"  # the one choice: close the list at once


def test_encode_plan_refuses_what_the_format_cannot_hold(prompts):
    fmt = PlanFormat(prompts.tokenizer, 12)
    for bad in (
        Plan((Step(0, 'say "hi"', []),)),
        Plan((Step(0, "one " * 20, []),)),
        Plan((Step(0, "solve it", "all"),)),
        Plan((Step(0, "solve it", []), Step(1, "check it", [0]))),
    ):
        with pytest.raises(PlanFormatError):
            encode_plan(fmt, bad, "model_id = [")


def questions_of(*texts: str) -> list[Question]:
    return [Question(f"q{i}", "math", text, str(40 + i), "math", "test") for i, text in enumerate(texts)]


def test_warm_start_batches_are_demonstrations_of_advantage_one_with_their_choices_in_the_loss(prompts):
    texts = [QUESTION, "What is the capital city of Australia, Sydney or Canberra?"]
    questions = questions_of(*texts)
    batches = list(warm_start_batches(prompts, questions, steps=3, per_step=5, per_question=2, seed=1))
    assert len(batches) == 3 and all(len(b.prompt_ids) == 10 for b in batches)
    for batch in batches:
        assert batch.advantages == [1.0] * 10
        assert all(
            batch.prompt_ids[i] == batch.prompt_ids[i + 1] for i in range(0, 10, 2)
        )  # a question's rows together
        for prompt, ids, mask in zip(batch.prompt_ids, batch.completion_ids, batch.loss_masks):
            question = next(q for q in texts if prompts.ids(q) == prompt)
            text = prompts.response_prefix + prompts.tokenizer.decode(ids)
            plan = parse_plan(text, 3, 3)
            chosen = prompts.tokenizer.decode([t for t, m in zip(ids, mask) if m])
            assert plan.steps[0].subtask in chosen and "subtasks" not in chosen  # choices in, format text out
            assert on_task(plan.steps[0].subtask, question)
    same = list(warm_start_batches(prompts, questions, steps=3, per_step=5, per_question=2, seed=1))
    assert [b.completion_ids for b in same] == [b.completion_ids for b in batches]


def test_without_workers_in_the_loss_a_demonstration_teaches_its_subtasks_and_access_only(prompts):
    """train.warm_start.workers_in_loss=false: the uniformly drawn workers and step count are out of a
    plan's loss, its subtasks and access entries in it; the batches are otherwise the same."""
    questions = questions_of(QUESTION, "What is the capital city of Australia, Sydney or Canberra?")
    args = dict(steps=2, per_step=4, per_question=2, seed=3)
    full = list(warm_start_batches(prompts, questions, **args))
    choices = list(warm_start_batches(prompts, questions, **args, workers_in_loss=False))
    assert [b.completion_ids for b in choices] == [b.completion_ids for b in full]
    for batch, whole in zip(choices, full):
        for ids, mask, whole_mask in zip(batch.completion_ids, batch.loss_masks, whole.loss_masks):
            labels = choice_segments(prompts.tokenizer, ids, prompts.response_prefix)
            assert all(m == (x in ("subtasks", "access")) for m, x in zip(mask, labels))
            assert "workers" in labels and sum(whole_mask) > sum(mask) > 0


def test_the_warm_start_needs_the_constrained_format_and_the_learners_own_log_probs():
    unconstrained = load_config(None, ["conductor.constrain_format=false"])  # loads: ask and serve never warm start
    with pytest.raises(WarmStartError, match="constrain_format"):
        next(warm_start_batches(ConductorPrompt.from_config(unconstrained), questions_of(QUESTION), 1, 1, 1, seed=0))
    with pytest.raises(ConfigError, match="train.warm_start.steps.*conductor.constrain_format=true"):
        check_warm_start(unconstrained)
    with pytest.raises(ConfigError, match="train.warm_start.steps.*learner.old_logprobs=learner"):
        check_warm_start(load_config(None, ["learner.old_logprobs=sampler"]))
    check_warm_start(load_config(None, ["conductor.constrain_format=false", "train.warm_start.steps=0"]))
    check_warm_start(load_config(None))


def test_a_recursive_reply_keeps_or_writes_a_new_plan_half_each_whatever_answer_is_shown():
    rng = random.Random(2)
    replies = [demonstration_reply(rng, lambda: demonstration_plan(QUESTION, [0, 1, 2, 3], 3, rng)) for _ in range(600)]
    kept = sum(not r.steps for r in replies)
    assert 250 <= kept <= 350, kept
    assert {s.model_id for r in replies for s in r.steps} == {0, 1, 2, 3}
    shown = Counter(shown_answer("42", ["17", "9"], rng) for _ in range(600))
    assert 250 <= shown["42"] <= 350 and shown["17"] and shown["9"], shown
    assert shown_answer("42", [], rng) == "42"  # nothing else to show


SEATED = ["workers.3={name: conductor, provider: conductor}", "train.warm_start.steps=4"]


def test_with_recursion_on_the_warm_start_demonstrates_recursive_prompts_and_the_seat(prompts):
    # With the plans' workers out of the loss, a reply keeps its own: its empty plan is a "]" to learn.
    overrides = [
        "conductor.max_depth=2",
        "train.warm_start.recursive_share=0.5",
        "train.warm_start.workers_in_loss=false",
    ]
    config = load_config(None, [*SEATED, *overrides])
    seated = ConductorPrompt.from_config(config, prompts.tokenizer)
    questions = questions_of(QUESTION, "What is the capital city of Australia, Sydney or Canberra?", "What is 6 x 7?")
    roots, recursive, kept, shown, workers = 0, 0, 0, Counter(), Counter()
    for batch in warm_start_for(config, seated, questions):
        for prompt, ids, mask in zip(batch.prompt_ids, batch.completion_ids, batch.loss_masks):
            text = prompts.tokenizer.decode(prompt)
            plan = parse_plan(seated.response_prefix + prompts.tokenizer.decode(ids), 4, 3, allow_empty=True)
            workers.update(s.model_id for s in plan.steps)
            assert not plan.steps or plan.steps[0].model_id != 3  # the seat reviews an answer: never first
            if "The workflow that ran:" not in text:
                roots += 1
                labels = choice_segments(prompts.tokenizer, ids, seated.response_prefix)
                assert plan.steps and not any(m and x == "workers" for m, x in zip(mask, labels))
                continue
            recursive += 1
            kept += not plan.steps
            answer = text.split("Its answer:")[1]
            shown[next(q.reference for q in questions if q.question in text) in answer] += 1
            chosen = prompts.tokenizer.decode([t for t, m in zip(ids, mask) if m])
            assert "subtasks" not in chosen and (plan.steps or chosen.strip() == "]")
            assert all(s.model_id != 3 or (i > 0 and s.access == "all") for i, s in enumerate(plan.steps))
    assert roots and recursive and 0 < kept < recursive, (roots, recursive, kept)
    assert shown[True] and shown[False], shown  # the question's own reference and another's
    assert workers[3] > 0  # the seat is demonstrated like any worker


def test_without_recursion_the_warm_start_never_demonstrates_the_seat_nor_a_recursive_prompt(prompts):
    config = load_config(None, SEATED)  # max_depth 0: a step given to the seat only keeps the answer
    seated = ConductorPrompt.from_config(config, prompts.tokenizer)
    questions = questions_of(QUESTION, "What is 6 x 7?")
    for batch in warm_start_for(config, seated, questions):
        for prompt, ids in zip(batch.prompt_ids, batch.completion_ids):
            assert "The workflow that ran:" not in prompts.tokenizer.decode(prompt)
            plan = parse_plan(seated.response_prefix + prompts.tokenizer.decode(ids), 4, 3)
            assert all(s.model_id != 3 for s in plan.steps)


def test_the_seat_is_demonstrated_as_a_later_review_step_only():
    rng = random.Random(4)
    plans = [demonstration_plan(QUESTION, [0, 1, 2, 3], 3, rng, seat=3) for _ in range(600)]
    firsts = Counter(p.steps[0].model_id for p in plans)
    assert set(firsts) == {0, 1, 2}, firsts
    reviews = [s for p in plans for s in p.steps[1:] if s.model_id == 3]
    later = sum(len(p.steps) - 1 for p in plans)
    assert 0.2 * later <= len(reviews) <= 0.3 * later  # a quarter of the later steps, like any worker
    assert all(s.access == "all" and s.subtask == CHECK_SUBTASK for s in reviews)
    # Without a seat the draws are exactly those of before.
    again, plain = random.Random(4), random.Random(4)
    assert [demonstration_plan(QUESTION, 3, 3, again) for _ in range(50)] == [
        demonstration_plan(QUESTION, 3, 3, plain, seat=None) for _ in range(50)
    ]
