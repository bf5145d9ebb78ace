"""Tests for conductor_rl.data.overlap: evaluation questions must not be training questions."""

from __future__ import annotations

import pytest

from conductor_rl.data import Question, load_samples
from conductor_rl.data.overlap import ContaminationError, check_disjoint, find_overlap, normalise_text, text_key


def q(qid: str, text: str, source: str = "gsm8k") -> Question:
    return Question(id=qid, domain="math", question=text, reference="1", answer_kind="numeric", source=source)


def test_text_key_ignores_unicode_form_case_and_whitespace():
    assert normalise_text("  Ｔｗｏ\u00a0apples,\n\tthree  PEARS ") == "two apples, three pears"
    assert text_key("What is 2 + 2?") == text_key("what  is 2 +\n2?  ") == text_key("ＷＨＡＴ is 2 + 2?")
    assert text_key("What is 2 + 2?") != text_key("What is 2 + 3?")
    assert len(text_key("x")) == 64 and int(text_key("x"), 16) >= 0


def test_find_overlap_pairs_training_with_evaluation_questions():
    training = [
        q("gsm8k/train/0", "Tom has 3 apples."),
        q("math/test/algebra/1", "Solve x + 1 = 2.", "math"),
        q("gsm8k/train/1", "A different question."),
    ]
    evaluation = [q("math500/test/algebra/1", "solve x + 1 = 2.", "math500"), q("gsm8k/test/5", "Tom has  3 apples.")]
    pairs = find_overlap(training, evaluation)
    assert [(t.id, e.id) for t, e in pairs] == [
        ("math/test/algebra/1", "math500/test/algebra/1"),
        ("gsm8k/train/0", "gsm8k/test/5"),
    ]
    assert find_overlap(training, []) == [] and find_overlap([], evaluation) == []


def test_check_disjoint_passes_disjoint_sets():
    check_disjoint([q("a/1", "One?")], [q("b/1", "Two?")], training_name="a", evaluation_name="b")
    check_disjoint(
        load_samples("gsm8k") + load_samples("mmlu") + load_samples("mixed"),
        load_samples("math500") + load_samples("humaneval"),
    )


def test_check_disjoint_refuses_overlap_even_when_case_and_whitespace_differ():
    training = [q(f"gsm8k/train/{i}", f"Question number {i}?") for i in range(8)]
    training.append(q("mmlu/anatomy/3", "Which bone?\n\nA. a\nB. b", "mmlu"))
    evaluation = [q(f"gsm8k/test/{i}", f"QUESTION  number {i}?\n") for i in range(7)]
    evaluation += [q("mmlu/anatomy/3", "which bone?\n\nA. a\nB. b", "mmlu"), q("gsm8k/test/99", "Fresh?")]
    with pytest.raises(ContaminationError) as info:
        check_disjoint(training, evaluation, training_name="samples:gsm8k", evaluation_name="gsm8k:test")
    message = str(info.value)
    assert "'gsm8k:test' shares 8 of its 9 questions" in message and "'samples:gsm8k'" in message
    assert "Evaluation questions by source: gsm8k 7, mmlu 1" in message
    assert "training questions by source: gsm8k 7, mmlu 1" in message
    assert "gsm8k/test/0 (= gsm8k/train/0)" in message and "gsm8k/test/5" not in message  # a few examples only
    assert "gsm8k:train" in message and "mmlu:eval" in message  # how to fix it
    assert isinstance(info.value, ValueError) and len(info.value.pairs) == 8


def test_evaluation_samples_are_refused_as_training_data():
    with pytest.raises(ContaminationError, match="shares 40 of its 40"):
        check_disjoint(load_samples("math500"), load_samples("math500"))
