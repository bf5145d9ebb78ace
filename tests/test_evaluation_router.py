"""The router baseline: learns who answers what, keeps it across save and load."""

from __future__ import annotations

import random

import pytest

from conductor_rl.config import Price
from conductor_rl.evaluation import Router, RouterError

WORKERS = ["mathy", "coder", "unused"]
PRICES = [1.0, 1.0, 0.1]
MATH_WORDS = ["integral", "derivative", "polynomial", "prime", "equation", "triangle", "sum", "limit"]
CODE_WORDS = ["python", "function", "list", "string", "array", "loop", "class", "return"]


def toy(n: int, seed: int) -> tuple[list[str], list[list[list[str]]]]:
    """Math questions only `mathy` solves, code questions only `coder` solves."""
    rng = random.Random(seed)
    texts, verdicts = [], []
    for i in range(n):
        math = i % 2 == 0
        words = rng.sample(MATH_WORDS if math else CODE_WORDS, 4)
        texts.append("Please solve: " + " ".join(words))
        verdicts.append(
            [["correct", "wrong"], ["wrong", "wrong"], ["wrong"]]
            if math
            else [["wrong"], ["correct", "correct"], ["wrong"]]
        )
    return texts, verdicts


def test_router_learns_a_separable_problem_and_survives_save_and_load(tmp_path):
    texts, verdicts = toy(60, seed=0)
    texts.append("nobody can answer this")
    verdicts.append([["wrong"], ["wrong"], ["error"]])  # unsolved: left out of training
    router = Router.fit(texts, verdicts, WORKERS, PRICES)
    assert (router.trained_on, router.left_out) == (60, 1)
    test_texts, test_verdicts = toy(20, seed=1)
    expected = [0 if v[0][0] == "correct" else 1 for v in test_verdicts]
    assert router.route(test_texts) == expected
    path = router.save(tmp_path / "router" / "router.pkl")
    loaded = Router.load(path)
    assert loaded.worker_names == WORKERS and loaded.route(test_texts) == expected
    assert loaded.route([]) == []


def test_one_best_worker_everywhere_is_always_chosen(tmp_path):
    texts = ["a b c", "d e f", "g h i"]
    verdicts = [[["wrong"], ["correct"], ["correct"]]] * 3  # ties go to the cheaper `unused`
    router = Router.fit(texts, verdicts, WORKERS, PRICES)
    assert router.constant == "unused" and router.route(["anything", "else"]) == [2, 2]
    assert Router.load(router.save(tmp_path / "r.pkl")).route(["x"]) == [2]


def test_router_takes_pilot_evidence_by_worker_name_as_shares_or_flags():
    texts, verdicts = toy(40, seed=2)
    by_name = [
        {"mathy": 1.0, "coder": 0.0} if v[0][0] == "correct" else {"mathy": False, "coder": True} for v in verdicts
    ]
    prices = [Price(input=1.0, output=2.0), Price(input=1.0, output=2.0), Price()]
    router = Router.fit(texts, by_name, WORKERS, prices)  # `unused` has no evidence at all
    assert router.route(texts) == [0 if v[0][0] == "correct" else 1 for v in verdicts]


def test_router_errors_say_what_to_do(tmp_path):
    with pytest.raises(RouterError, match="nothing to learn"):
        Router.fit(["q"], [[["wrong"], ["wrong"], ["wrong"]]], WORKERS, PRICES)
    with pytest.raises(RouterError, match="one verdict list per question"):
        Router.fit(["q", "r"], [[["correct"], [], []]], WORKERS, PRICES)
    with pytest.raises(RouterError, match="not trained: make it with Router.fit"):
        Router().route(["q"])
    (tmp_path / "junk.pkl").write_bytes(b"not a pickle")
    with pytest.raises(RouterError, match="delete it to train a new one"):
        Router.load(tmp_path / "junk.pkl")
    with pytest.raises(RouterError, match="cannot read"):
        Router.load(tmp_path / "missing.pkl")
