"""benchmarks/credit.py: where a GRPO step's credit goes, per kind of choice token, on a batch made
here by hand for the random tiny-qwen2 (the benchmark itself samples with vLLM from a trained
Conductor; its figures are in docs/results.md)."""

from __future__ import annotations

import pytest
import torch

from conductor_rl.plan.constrained import choice_segments
from tests.benchmark_scripts import load_benchmark

pytestmark = pytest.mark.light  # a tiny model in this process: no Ray, vLLM or learner

PREFIX = "model_id = ["
PLANS = [
    ('0]\nsubtasks = ["Find the triangle area"]\naccess_list = [[]]\n', 1.0),
    ('1, 2]\nsubtasks = ["Find the area", "Check the area"]\naccess_list = [[], "all"]\n', -1.0),
    ('2, 0]\nsubtasks = ["Area of the triangle", "Verify it"]\naccess_list = [[], []]\n', 0.5),
]


@pytest.fixture()
def rows_and_model(tiny_qwen2):
    from conductor_rl.models import load_causal_lm

    model, tokenizer = load_causal_lm("tiny-qwen2")  # its own copy: the step changes the weights
    prompt = tokenizer.encode("Question: the triangle's area?\n" + PREFIX, add_special_tokens=False)
    rows = []
    for text, advantage in PLANS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        labels = [x or "format" for x in choice_segments(tokenizer, ids, PREFIX)]
        rows.append(
            {"prompt": prompt, "ids": ids, "sampler": [0.0] * len(ids), "advantage": advantage, "labels": labels}
        )
    return rows, model


def test_shares_of_the_gradient_and_of_the_step_sum_to_one_and_weighting_moves_them(bench, rows_and_model):
    rows, model = rows_and_model
    state = {k: v.clone() for k, v in model.state_dict().items()}
    token = bench.credit(model, rows, "token", lr=1e-3, autocast=False)
    model.load_state_dict(state)
    segment = bench.credit(model, rows, "segment", lr=1e-3, autocast=False)
    for got in (token, segment):
        shares = [got[f"{k}_gradient_share"] for k in ("workers", "subtasks", "access")]
        assert sum(shares) == pytest.approx(1.0, abs=1e-4)  # float32 sums
        assert sum(got[f"{k}_change_share"] for k in ("workers", "subtasks", "access")) == pytest.approx(1.0)
        assert got["workers_logprob_change"] + got["subtasks_logprob_change"] + got["access_logprob_change"] > 0
    # subtask text holds most choice tokens: weighing the kinds equally takes its share down
    assert segment["subtasks_gradient_share"] < token["subtasks_gradient_share"]
    assert segment["workers_gradient_norm"] > token["workers_gradient_norm"]


def test_sampler_and_learner_agreement_per_kind(bench, rows_and_model):
    rows, model = rows_and_model
    learner = bench.token_logprobs(model, rows, autocast=False)
    got = bench.agreement(rows, learner)
    assert set(got) == {"workers", "subtasks", "access", "format"}
    # the sampler's log-probs were 0 (probability 1): every delta is the learner's own log-prob
    for figures in got.values():
        assert figures["mean_delta"] == pytest.approx(-figures["mean_abs_delta"]) and figures["ratio_max"] <= 1.0
    assert got["access"]["tokens"] >= 2  # the second steps' access entries (the first [] is forced)


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("credit")


def test_a_step_on_one_domains_groups_is_measured_on_both_domains(bench, tiny_qwen2):
    """interference(): one step per domain alone, on the worker tokens; its own objective rises, and the
    other domain's change, the gradients' cosine and the first worker's probabilities are reported."""
    from conductor_rl.models import load_causal_lm

    model, tokenizer = load_causal_lm("tiny-qwen2")
    rows = []
    for domain, question, good in (("math", "What is 17 + 25?", "0"), ("mmlu", "Which gas do plants take in?", "1")):
        prompt = tokenizer.encode(f"Question: {question}\n" + PREFIX, add_special_tokens=False)
        for first, advantage in ((good, 1.0), ("2", -1.0)):
            text = f'{first}]\nsubtasks = ["Answer it"]\naccess_list = [[]]\n'
            ids = tokenizer.encode(text, add_special_tokens=False)
            labels = [x or "format" for x in choice_segments(tokenizer, ids, PREFIX)]
            rows.append({"prompt": prompt, "ids": ids, "advantage": advantage, "labels": labels, "domain": domain})
    choices = [tokenizer.encode(str(k), add_special_tokens=False)[0] for k in range(3)]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    got = bench.interference(model, rows, lr=1e-3, autocast=False, choices=choices)
    assert got["domains"] == ["math", "mmlu"] and got["groups"] == {"math": 1, "mmlu": 1}
    for domain in got["domains"]:
        step = got["steps"][domain]
        assert step["objective_change"][domain] > 0  # the step is ascent on its own domain's objective
        probabilities = step["first_worker_probability"][domain]
        assert sum(probabilities["after"]) <= 1.0 + 1e-6
        assert probabilities["after"] != probabilities["before"]
    assert -1.0 <= got["gradient_cosine"] <= 1.0 and set(got["cross_over_own"]) == {"math", "mmlu"}
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the weights are given back
    layers = bench.interference(model, rows, lr=1e-3, autocast=False, choices=choices, moved="layers")
    assert layers["moved"] == "layers" and layers["steps"]["math"]["objective_change"]["math"] > 0
    assert layers["gradient_norms"]["math"] < got["gradient_norms"]["math"]  # fewer parameters moved
