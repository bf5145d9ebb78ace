"""A question's difficulty: the table of conductor_rl/data/difficulty.py, read from the meta keys the
loaders really write, and carried by the workflow task to a simulated worker's hint."""

from __future__ import annotations

import pytest

from conductor_rl.data import HARD_FROM, difficulty_of, is_hard, load_dataset
from conductor_rl.rollout.workflow import Task


@pytest.mark.parametrize("level,expected", [(1, 0.0), (2, 0.25), (3, 0.5), (4, 0.75), (5, 1.0)])
@pytest.mark.parametrize("source", ["math", "math500"])
def test_math_levels(source, level, expected):
    assert difficulty_of(source, {"level": level}) == expected


@pytest.mark.parametrize("level", [None, 0, 6, "3", True, 2.0])
def test_a_math_level_that_is_missing_or_odd_is_the_middle(level):
    # math.py writes an int, or None for "Level ?"; anything else is not a level.
    assert difficulty_of("math500", {"level": level}) == 0.5
    assert difficulty_of("math", {}) == 0.5


@pytest.mark.parametrize("label,expected", [("easy", 0.25), ("medium", 0.5), ("hard", 0.75), ("Hard", 0.75)])
def test_livecodebench_difficulty(label, expected):
    assert difficulty_of("livecodebench", {"difficulty": label}) == expected


def test_livecodebench_without_a_label_is_the_middle():
    assert difficulty_of("livecodebench", {"difficulty": None}) == 0.5
    assert difficulty_of("livecodebench", {"difficulty": "impossible"}) == 0.5
    assert difficulty_of("livecodebench", {}) == 0.5


@pytest.mark.parametrize(
    "source,expected",
    [
        ("gsm8k", 0.1),
        ("mmlu", 0.2),
        ("humaneval", 0.3),
        ("rlpr", 0.5),
        ("bigcodebench", 0.7),
        ("gpqa", 0.9),
        ("aime", 1.0),
        ("aime24", 1.0),
        ("aime25", 1.0),
        ("hf:someone/some-set", 0.5),
        ("jsonl", 0.5),
    ],
)
def test_by_source(source, expected):
    assert difficulty_of(source, {"level": 1, "difficulty": "easy"}) == expected  # other sources' keys ignored


def test_hard_from_the_middle_up():
    assert HARD_FROM == 0.5
    assert is_hard(0.5) and is_hard(1.0) and is_hard(0.75)
    assert not is_hard(0.49) and not is_hard(0.0)


def test_a_loaded_question_becomes_a_task_of_its_difficulty():
    # The shipped MATH-500 samples carry meta["level"] as math.py writes it.
    for question in load_dataset("samples:math500"):
        level = question.meta["level"]
        assert isinstance(level, int), question.meta
        assert Task.of(question).difficulty == (level - 1) / 4
    gsm8k = load_dataset("samples:gsm8k", limit=1)[0]
    assert Task.of(gsm8k).difficulty == 0.1


def test_a_task_refuses_a_difficulty_off_the_scale():
    assert Task(id="q", question="?").difficulty == 0.5
    with pytest.raises(ValueError, match="between 0 and 1"):
        Task(id="q", question="?", difficulty=1.5)
