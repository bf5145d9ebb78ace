"""benchmarks/first_choice.py: how much the first worker a Conductor picks depends on the question."""

from __future__ import annotations

import pytest

from conductor_rl.data.question import Question
from tests.benchmark_scripts import load_benchmark

pytestmark = pytest.mark.light  # a tiny model in this process: no Ray, vLLM or learner


def test_the_spread_is_zero_for_a_choice_that_ignores_the_question_and_the_means_are_per_domain():
    bench = load_benchmark("first_choice")
    got = bench.spread_by_domain({"math": [[0.5, 0.5]] * 3, "mmlu": [[0.9, 0.1], [0.7, 0.3]]})
    assert got["math"] == {"questions": 3, "mean": [0.5, 0.5], "sd_across_questions": [0.0, 0.0]}
    assert got["mmlu"]["mean"] == pytest.approx([0.8, 0.2]) and got["mmlu"]["sd_across_questions"] == pytest.approx(
        [0.1, 0.1]
    )


def test_each_questions_first_worker_probabilities_sum_to_one_and_differ_between_questions(tiny_qwen2):
    from conductor_rl.config import load_config
    from conductor_rl.plan.prompts import ConductorPrompt

    bench = load_benchmark("first_choice")
    prompts = ConductorPrompt.from_config(load_config(None, ["conductor.model=tiny-qwen2"]))
    model, _ = tiny_qwen2
    texts = ["What is 17 + 25?", "Which gas do plants take in? A) oxygen B) carbon dioxide"]
    questions = [Question(f"q{i}", "math", t, "1", "math", "test") for i, t in enumerate(texts)]
    rows = bench.first_worker_probabilities(model, prompts, questions, 3)
    assert len(rows) == 2 and all(len(r) == 3 and sum(r) == pytest.approx(1.0) for r in rows)
    assert rows[0] != rows[1]  # the prompt is read: another question, another distribution


def test_the_warm_start_run_here_raises_its_demonstrations_likelihood(tiny_qwen2):
    import torch

    from conductor_rl.config import load_config
    from conductor_rl.plan.prompts import ConductorPrompt
    from conductor_rl.policy.warm_start import warm_start_for

    bench = load_benchmark("first_choice")
    config = load_config(
        None,
        [
            "conductor.model=tiny-qwen2",
            "learner.lr=1e-3",
            "train.warm_start.steps=3",
            "train.warm_start.questions_per_step=1",
            "train.warm_start.demonstrations_per_question=2",
        ],
    )
    prompts = ConductorPrompt.from_config(config)
    questions = [Question("q0", "math", "What is 17 + 25?", "42", "math", "test")]
    batch = next(iter(warm_start_for(config, prompts, questions)))

    def likelihood(model) -> float:
        total = 0.0
        with torch.no_grad():
            for prompt, ids, mask in zip(batch.prompt_ids, batch.completion_ids, batch.loss_masks):
                logits = model(input_ids=torch.tensor([list(prompt) + list(ids)])).logits[0, len(prompt) - 1 : -1]
                picked = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids).unsqueeze(-1))[:, 0]
                total += float((picked * torch.tensor(mask)).sum())
        return total

    trained = bench.warm_started("tiny-qwen2", config, prompts, questions)
    assert likelihood(trained) > likelihood(tiny_qwen2[0])


def test_the_readout_of_a_models_state_is_the_orchestration_benchmarks(tiny_qwen2):
    from conductor_rl.config import load_config

    bench = load_benchmark("first_choice")
    model, _ = tiny_qwen2
    got = bench.readout_of(load_config(None, ["conductor.model=tiny-qwen2", "train.iterations=1"]), model)
    assert got["readout_best"] in got["readout_runs"] and len(got["readout_runs"]) == 8
    assert 0 < got["readout_fraction_of_optimal_reward"] < 1


def test_main_reports_each_models_spread_and_its_readout_apart(capsys):
    import json

    bench = load_benchmark("first_choice")
    args = ["tiny-qwen2", "--set", "conductor.model=tiny-qwen2", "--set", "train.iterations=1", "--per-domain", "2"]
    assert bench.main([*args, "--readout", "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(got["models"]["tiny-qwen2"]) == {"math", "mmlu"}
    assert set(got["readout"]["tiny-qwen2"]["readout_state"]) == {"mean_norm", "domain_half_gap", "within_domain"}
