"""The Conductor and worker prompts."""

import pytest

from conductor_rl.config import _paper_workers
from conductor_rl.models import load_causal_lm
from conductor_rl.plan import parse_plan
from conductor_rl.plan.prompts import EXAMPLES, apply_chat_template, conductor_messages, worker_messages

pytestmark = pytest.mark.light  # starts no Ray, vLLM or learner: runs beside the heavy tests (conftest.py)


def test_four_worked_examples_are_valid_plans_outside_the_training_domains():
    assert len(EXAMPLES) == 4
    for _question, pool, plan_text in EXAMPLES:
        plan = parse_plan(plan_text, n_workers=pool)  # every example teaches a plan that parses
        assert 1 <= len(plan.steps) <= 5
    topics = " ".join(q for q, _, _ in EXAMPLES)
    assert "STEMI" in EXAMPLES[1][2] or "ECG" in topics  # medical reasoning
    assert "Countdown" in topics  # not MATH/MMLU/RLPR/LiveCodeBench items


@pytest.mark.parametrize("n_workers, max_steps, n_examples", [(3, 5, 4), (6, 3, 0), (1, 1, 2)])
def test_conductor_prompt_lists_workers_by_ordinal_only(n_workers, max_steps, n_examples):
    messages = conductor_messages("What is 2 + 2?", n_workers, max_steps, n_examples)
    assert [m["role"] for m in messages] == ["system", "user"]
    text = "\n".join(m["content"] for m in messages)
    assert ", ".join(f"Model {i}" for i in range(n_workers)) in text
    assert f"at most {max_steps} steps" in text
    assert f"from 0 to {n_workers - 1}" in text
    for worker in _paper_workers():  # no worker name leaks into the prompt
        assert worker.name not in text and worker.model not in text
    assert text.count("Example ") == n_examples
    assert messages[-1]["content"].endswith("Question: What is 2 + 2?")


@pytest.mark.slow
def test_conductor_prompt_goes_through_the_chat_template():
    _, tokenizer = load_causal_lm("tiny-qwen2")
    text = apply_chat_template(tokenizer, conductor_messages("Q?", 2))
    assert text.startswith("<|im_start|>system\nYou are the Conductor")
    assert text.endswith("Question: Q?<|im_end|>\n<|im_start|>assistant\n")


def test_worker_prompt_holds_subtask_and_selected_context_only():
    messages = worker_messages("Check step 0", [(0, "Solve x", "x = 3")], question=None)
    user = messages[-1]["content"]
    assert "Step 0 subtask: Solve x" in user and "Step 0 answer: x = 3" in user
    assert user.endswith("Your subtask:\nCheck step 0") and "Original question" not in user
    alone = worker_messages("Solve x", [], question="What is x?")[-1]["content"]
    assert "Earlier steps" not in alone and alone.startswith("Original question:\nWhat is x?")


def test_worker_prompt_cuts_long_context_from_the_front():
    answer = "start " + "x" * 50_000 + " the conclusion"
    user = worker_messages("Use it", [(0, "a", answer), (1, "b", "short")], max_context_chars=2_000)[-1]["content"]
    assert len(user) < 2_500 and "the conclusion" in user and "start" not in user and "short" in user


def conductor_config(**conductor):
    from conductor_rl.config import load_config

    return load_config(None, ["conductor.model=tiny-qwen2", *(f"conductor.{k}={v}" for k, v in conductor.items())])


@pytest.mark.slow
def test_one_prompt_builder_gives_the_text_and_its_token_ids():
    from conductor_rl.plan.prompts import ConductorPrompt

    config = conductor_config(constrain_format="true")
    prompt = ConductorPrompt.from_config(config)
    text = prompt.text("What is 2 + 2?")
    assert "Question: What is 2 + 2?" in text and text.endswith(config.conductor.response_prefix)
    assert f"a team of {len(config.workers)} models" in text
    ids = prompt.ids("What is 2 + 2?")
    assert prompt.tokenizer.decode(ids) == text
    assert prompt.ids("What is 2 + 2?") is ids  # tokenised once per question
    assert prompt.ids("What is 3 + 3?") != ids
    assert prompt.shape is not None and prompt.shape.n_workers == len(config.workers)
    assert prompt.shape.prefix == config.conductor.response_prefix
    assert ConductorPrompt.from_config(conductor_config(constrain_format="false"), prompt.tokenizer).shape is None


@pytest.mark.slow
def test_a_prompt_for_another_pool_names_its_own_workers():
    from conductor_rl.plan.prompts import ConductorPrompt

    _, tokenizer = load_causal_lm("tiny-qwen2")
    text = ConductorPrompt(tokenizer, n_workers=2, max_steps=3, n_examples=0).text("Q?")
    assert text == apply_chat_template(tokenizer, conductor_messages("Q?", 2, 3, 0))


@pytest.mark.slow
def test_questions_whose_prompt_leaves_no_room_for_a_plan_are_left_out_with_a_count():
    from conductor_rl.config import ConfigError
    from conductor_rl.data import Question
    from conductor_rl.plan.prompts import ConductorPrompt, fitting_questions

    prompt = ConductorPrompt.from_config(conductor_config(n_examples=0))
    short = Question("q/short", "math", "What is 1 + 1?", "2", "math", "test")
    long = Question("q/long", "math", "Add these numbers: " + " + ".join(["17"] * 300), "5100", "math", "test")
    room = len(prompt.ids(short.question)) + 10
    kept, left_out = fitting_questions([short, long, short], prompt, max_model_len=room + 64, max_new_tokens=64)
    assert kept == [short, short] and left_out == 1
    assert fitting_questions([short], prompt, 10_000, 64) == ([short], 0)
    with pytest.raises(ConfigError, match="generator.max_model_len"):
        fitting_questions([long], prompt, max_model_len=room + 64, max_new_tokens=64)


@pytest.mark.slow
def test_the_answer_format_is_shown_after_the_question_only_when_set():
    from conductor_rl.data import Question
    from conductor_rl.plan.prompts import ConductorPrompt, answer_instruction

    choice = Question("q/mmlu", "mmlu", "Which is a noble gas?\nA. N\nB. Ne", "B", "choice", "test")
    maths = Question("q/math", "math", "What is 1 + 1?", "2", "math", "test")
    hidden = ConductorPrompt.from_config(conductor_config(n_examples=0))
    assert hidden.question_ids(choice) == hidden.ids(choice.question)  # off: the paper's prompt
    shown = ConductorPrompt.from_config(conductor_config(n_examples=0, show_answer_format="true"), hidden.tokenizer)
    told = f"Question: {choice.question}\nIts last step will be told: {answer_instruction('choice')}"
    assert told in shown.tokenizer.decode(shown.question_ids(choice))
    assert answer_instruction("math") in shown.tokenizer.decode(shown.question_ids(maths))
    assert shown.question_ids(choice) != hidden.question_ids(choice)
    assert shown.ids(choice.question) == hidden.ids(choice.question)  # a question with no grader: nothing told
    recursive = shown.recursive_ids(choice.question, 2, "model_id = [0]", "B", answer_instruction("choice"))
    assert answer_instruction("choice") in shown.tokenizer.decode(recursive)
