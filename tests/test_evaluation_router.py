"""The router baseline: learns each worker's chance of success from repeated pilot verdicts, trades it
against cost, keeps it across save and load, and routes the embedded default's simulated pool close to
the per-question best single worker."""

from __future__ import annotations

import asyncio
import pickle
import random

import pytest

from conductor_rl import grading
from conductor_rl.config import Price, WorkerConfig
from conductor_rl.data import Question, load_dataset
from conductor_rl.data.difficulty import difficulty_of
from conductor_rl.evaluation import Router, RouterError, single_plan
from conductor_rl.evaluation.methods import parse_method
from conductor_rl.evaluation.optimal import PlanStep, PoolOptimum, plan_accuracy
from conductor_rl.evaluation.plans import BaselineContext, baseline_samples, exact_optimum
from conductor_rl.rollout.workflow import Task, run_plan
from conductor_rl.workers.providers.sim import SimProvider
from tests.sim_pools import sim_worker

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
    verdicts.append([["wrong"], ["wrong"], ["error"]])  # unsolved: still evidence of two workers' chances
    texts.append("nobody was asked this")
    verdicts.append([[], ["error"], None])  # no verdict at all: left out of training
    router = Router.fit(texts, verdicts, WORKERS, PRICES)
    assert (router.trained_on, router.left_out) == (61, 1)
    test_texts, test_verdicts = toy(20, seed=1)
    expected = [0 if v[0][0] == "correct" else 1 for v in test_verdicts]
    assert router.route(test_texts) == expected
    path = router.save(tmp_path / "router" / "router.pkl")
    loaded = Router.load(path)
    assert loaded.worker_names == WORKERS and loaded.route(test_texts) == expected
    assert loaded.predict(test_texts) == router.predict(test_texts)
    assert loaded.route([]) == []


def test_one_best_worker_everywhere_is_always_chosen(tmp_path):
    texts = ["a b c", "d e f", "g h i"]
    verdicts = [[["wrong"], ["correct"], ["correct"]]] * 3  # ties go to the cheaper `unused`
    router = Router.fit(texts, verdicts, WORKERS, PRICES)
    assert router.constants == {"mathy": 0.0, "coder": 1.0, "unused": 1.0} and not router.classifiers
    assert router.route(["anything", "else"]) == [2, 2]
    assert Router.load(router.save(tmp_path / "r.pkl")).route(["x"]) == [2]


def test_router_takes_pilot_evidence_by_worker_name_as_shares_or_flags():
    texts, verdicts = toy(40, seed=2)
    by_name = [
        {"mathy": 1.0, "coder": 0.0} if v[0][0] == "correct" else {"mathy": False, "coder": True} for v in verdicts
    ]
    prices = [Price(input=1.0, output=2.0), Price(input=1.0, output=2.0), Price()]
    router = Router.fit(texts, by_name, WORKERS, prices)  # `unused` has no evidence at all: never picked
    assert router.route(texts) == [0 if v[0][0] == "correct" else 1 for v in verdicts]
    assert all(row[2] is None for row in router.predict(texts))


def test_router_errors_say_what_to_do(tmp_path):
    with pytest.raises(RouterError, match="nothing to learn"):
        Router.fit(["q"], [[["wrong"], ["wrong"], ["wrong"]]], WORKERS, PRICES)
    with pytest.raises(RouterError, match="one verdict list per question"):
        Router.fit(["q", "r"], [[["correct"], [], []]], WORKERS, PRICES)
    with pytest.raises(RouterError, match="one per worker"):
        Router.fit(["q"], [[["correct"], [], []]], WORKERS, PRICES[:2])
    with pytest.raises(RouterError, match="not trained: make it with Router.fit"):
        Router().route(["q"])
    (tmp_path / "junk.pkl").write_bytes(b"not a pickle")
    with pytest.raises(RouterError, match="delete it to train a new one"):
        Router.load(tmp_path / "junk.pkl")
    with pytest.raises(RouterError, match="cannot read"):
        Router.load(tmp_path / "missing.pkl")


def test_a_router_file_of_the_old_format_is_refused(tmp_path):
    old = {"format": 1, "worker_names": WORKERS, "pipeline": None, "constant": "mathy", "trained_on": 3, "left_out": 0}
    (tmp_path / "old.pkl").write_bytes(pickle.dumps(old))
    with pytest.raises(RouterError, match="is not a router file of format 2; delete it to train a new one"):
        Router.load(tmp_path / "old.pkl")


# --------------------------------------------------------------------------- chances and cost


def repeated(n: int, seed: int, verdicts: int = 4) -> tuple[list[str], list[list[list[str]]]]:
    """Math questions `mathy` gets right 3 times in 4 and `coder` once; code questions the other way round."""
    rng = random.Random(seed)
    texts, evidence = [], []
    three, one = ["correct"] * 3 + ["wrong"], ["wrong"] * 3 + ["correct"]  # the first: right, wrong
    for i in range(n):
        math = i % 2 == 0
        texts.append("Please solve: " + " ".join(rng.sample(MATH_WORDS if math else CODE_WORDS, 4)))
        mathy, coder = (three, one) if math else (one, three)
        evidence.append([mathy[:verdicts], coder[:verdicts], []])
    return texts, evidence


def test_each_workers_chance_is_predicted_from_repeated_verdicts():
    texts, evidence = repeated(80, seed=3)
    router = Router.fit(texts, evidence, WORKERS, PRICES)
    assert router.verdicts == 80 * 2 * 4 and set(router.classifiers) == {"mathy", "coder"}
    held_out, _ = repeated(20, seed=4)
    for i, (mathy, coder, unused) in enumerate(router.predict(held_out)):
        assert unused is None
        assert mathy is not None and coder is not None
        # The chances are learnt towards 3/4 and 1/4 (a logistic model's regularisation pulls them in).
        high, low = (mathy, coder) if i % 2 == 0 else (coder, mathy)
        assert 0.55 < high <= 0.75 and 0.25 <= low < 0.45, (i, mathy, coder)
    assert router.route(held_out) == [i % 2 for i in range(20)]


def test_too_few_verdicts_still_train_a_router():
    """A mixture's pilot gives one verdict per question and worker: accepted, only noisier."""
    texts, evidence = repeated(80, seed=5, verdicts=1)  # mathy right on math questions, coder on code
    router = Router.fit(texts, evidence, WORKERS, PRICES)
    assert router.verdicts == 80 * 2
    held_out, _ = repeated(20, seed=6)
    assert router.route(held_out) == [i % 2 for i in range(20)]


def test_a_cheaper_worker_wins_once_the_cost_weight_is_large_enough():
    # Every question alike: `dear` is right 3 times in 4 at 0.02 USD a call, `cheap` once in 4 at 0.005.
    # Value = 0.5 + 0.5 x chance - weight x cost: dear 0.875 - 0.02 w, cheap 0.625 - 0.005 w; equal at
    # w = 0.25 / 0.015 = 16.67.
    texts = [f"question number {i} about {word}" for i, word in enumerate(MATH_WORDS * 4)]
    evidence = [[0.75, 0.25]] * len(texts)
    names, prices, costs = ["dear", "cheap"], [1.0, 1.0], [0.02, 0.005]
    for weight, pick in ((0.0, 0), (16.0, 0), (17.5, 1), (100.0, 1)):
        router = Router.fit(texts, evidence, names, prices, costs, cost_weight=weight)
        (dear, cheap), *_ = router.predict(["a new question about a prime"])
        assert dear == pytest.approx(0.75, abs=1e-3) and cheap == pytest.approx(0.25, abs=1e-3)
        assert router.route(["a new question about a prime"]) == [pick], weight


def test_ties_go_to_the_cheaper_call_then_the_list_price_then_the_lower_index():
    texts, evidence = ["a b", "c d"], [[["correct"], ["correct"], ["correct"]]] * 2
    assert Router.fit(texts, evidence, WORKERS, [1.0, 1.0, 1.0], [0.3, 0.1, 0.2]).route(["x"]) == [1]
    assert Router.fit(texts, evidence, WORKERS, [1.0, 0.5, 0.7]).route(["x"]) == [1]  # no costs: list price
    assert Router.fit(texts, evidence, WORKERS, [1.0, 1.0, 1.0]).route(["x"]) == [0]


def test_workers_with_one_class_of_verdicts_predict_their_rate():
    texts, evidence = repeated(20, seed=7)
    evidence = [[m, c, ["wrong", "wrong"]] for m, c, _ in evidence]  # `unused`: always wrong
    router = Router.fit(texts, evidence, WORKERS, PRICES)
    assert router.constants == {"unused": 0.0}
    assert {row[2] for row in router.predict(["anything", "at all"])} == {0.0}


# --------------------------------------------------------------------------- the embedded default's pool


# The three simulated workers of configs/local.yaml (domain-only: none of the plan-sensitive settings):
# name, price, accuracy on maths, MMLU and code, gain with context, latency, output tokens.
LOCAL = [
    sim_worker(
        name,
        price,
        tokens,
        accuracy=dict(zip(("math", "mmlu", "code"), accuracy)),
        gain_with_context=gain,
        latency_s=latency,
        latency_jitter=0.3,
    )
    for name, price, accuracy, gain, latency, tokens in (
        ("sim-math-expert", (1.25, 10.0), (0.9, 0.2, 0.5), 0.05, 0.2, 300),
        ("sim-knowledge-expert", (3.0, 15.0), (0.2, 0.9, 0.4), 0.05, 0.15, 200),
        ("sim-generalist", (0.15, 0.6), (0.45, 0.45, 0.45), 0.2, 0.1, 150),
    )
]
PILOT_REPEATS = 4


def pilot_pass(questions: list[Question], workers: list[WorkerConfig]) -> tuple[list, list[float]]:
    """Every worker PILOT_REPEATS times on every question, in process: per question each worker's
    verdicts, and each worker's mean dollars per call."""
    pool = [SimProvider(w, seed=0) for w in workers]
    runs = [(q, w, r) for q in questions for w in range(len(workers)) for r in range(PILOT_REPEATS)]

    async def go() -> list:
        plans = (single_plan(q.question, w) for q, w, _ in runs)
        return await asyncio.gather(
            *(run_plan(p, Task.of(q), pool, sample_key=f"pilot/{r}") for p, (q, _, r) in zip(plans, runs))
        )

    evidence: dict[str, list[list[str]]] = {q.id: [[] for _ in workers] for q in questions}
    spent = [0.0] * len(workers)
    for (q, w, _), result in zip(runs, asyncio.run(go())):
        evidence[q.id][w].append(grading.grade(q.answer_kind, result.final_answer or "", q.reference).verdict.value)
        spent[w] += sum(s.cost_usd for s in result.steps)
    calls = len(questions) * PILOT_REPEATS
    return [evidence[q.id] for q in questions], [usd / calls for usd in spent]


def expected_accuracy(question: Question, worker: int) -> float:
    """The exact chance that `worker` alone answers `question` right, by the simulator's rules."""
    difficulty = difficulty_of(question.source, question.meta)
    return plan_accuracy([PlanStep(worker)], [w.sim for w in LOCAL], question.domain, difficulty)


def test_the_router_routes_the_embedded_pool_close_to_the_best_single_worker():
    """On GSM8K and MMLU samples with the embedded default's pool, the router's expected accuracy on
    held-out questions is at least 90 % of oracle-single's and 15 points above a random single worker's."""
    gsm8k, mmlu = load_dataset("samples:gsm8k"), load_dataset("samples:mmlu")
    assert len(gsm8k) == len(mmlu) == 40
    pilot, held_out = gsm8k[:24] + mmlu[:24], gsm8k[24:] + mmlu[24:]
    evidence, costs = pilot_pass(pilot, LOCAL)
    names = [w.name for w in LOCAL]
    router = Router.fit([q.question for q in pilot], evidence, names, [w.price for w in LOCAL], costs)
    assert router.trained_on == 48 and router.verdicts == 48 * 3 * PILOT_REPEATS
    # Routed as the evaluation routes: the router's plans for the held-out questions.
    ctx = BaselineContext(names, [w.price for w in LOCAL], 3, router=router, optimum=PoolOptimum(LOCAL, 0, 3))
    samples = baseline_samples(parse_method("router", names), "held-out", held_out, 1, ctx)
    picks = [s[0].plan.steps[0].model_id for s in samples]
    routed = sum(map(expected_accuracy, held_out, picks)) / len(held_out)
    oracle = sum(exact_optimum(q, ctx.optimum, True).accuracy for q in held_out) / len(held_out)
    uniform = sum(expected_accuracy(q, w) for q in held_out for w in range(3)) / (3 * len(held_out))
    figures = f"router {routed:.3f}, oracle-single {oracle:.3f}, random {uniform:.3f}"
    print(f"expected accuracy on held-out questions: {figures}")
    assert oracle == pytest.approx(0.9)
    assert routed >= 0.9 * oracle, (routed, oracle)
    assert routed >= uniform + 0.15, (routed, uniform)
