"""`conductor_rl.Orchestrator` in this process: a tiny Qwen2 Conductor, the
embedded default's simulated workers behind the in-process limiter and ledger,
the README's example, `answer_many` (plans sampled in one batch, workflows
concurrent), configuration overrides, and the budget."""

import asyncio
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conductor_rl import Answer, BudgetSpentError, Orchestrator
from conductor_rl.config import ConfigError, load_config, validate_config
from conductor_rl.data import load_dataset
from conductor_rl.testing.workers import Gate, GatedProvider
from conductor_rl.workers.providers import build_provider

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # a Conductor model is loaded and sampled
# Steps in sequence: step 1 reads step 0's answer.
PLAN = (
    'model_id = [0, 1]\nsubtasks = ["Solve the question", "Check the answer and state it"]\naccess_list = [[], "all"]\n'
)


def sim_config():
    """configs/local.yaml with a tiny Conductor whose plan is fixed by its prefix, and sure, instant workers."""
    raw = yaml.safe_load((ROOT / "configs" / "local.yaml").read_text())
    raw["conductor"].update(
        {
            "model": "tiny-qwen2",
            "max_new_tokens": 16,
            "response_prefix": PLAN,
            "stop_after_plan": True,
            "constrain_format": False,
        }
    )
    for worker in raw["workers"]:
        # Always right, whatever the difficulty, wording or check.
        worker["sim"] = {
            "accuracy": {"default": 1.0},
            "latency_s": 0.0,
            "output_tokens": worker["sim"]["output_tokens"],
        }
    return validate_config(raw)


@pytest.fixture(scope="module")
def orchestrator():
    with Orchestrator.from_config(sim_config()) as o:
        yield o


def test_answer_runs_the_plan_on_the_workers(orchestrator):
    answer = orchestrator.answer("What is 17 * 23?", reference="391", kind="numeric")
    assert answer.plan_error is None and [s.model_id for s in answer.plan.steps] == [0, 1]
    assert [s.worker for s in answer.steps] == ["sim-math-expert", "sim-knowledge-expert"]
    assert answer.steps[1].access == (0,) and "Step 0 answer" in answer.steps[1].messages[-1]["content"]
    assert all(s.cost_usd > 0 and s.usage.output_tokens > 0 and s.simulated for s in answer.steps)
    assert answer.cost_usd == pytest.approx(sum(s.cost_usd for s in answer.steps))
    assert answer.usage.total == sum(s.usage.total for s in answer.steps)
    assert answer.final_answer == answer.steps[-1].response and answer.completion.startswith(PLAN)
    assert answer.verdict == "correct" and answer.reward == 1.0 and answer.graded
    assert orchestrator.ledger.totals().calls >= 2  # the in-process ledger saw the calls


def test_a_question_with_a_reference_is_graded_and_a_bare_one_is_not(orchestrator):
    [question] = load_dataset("samples:gsm8k", limit=1)
    graded = orchestrator.answer(question)
    assert graded.question_id == question.id and graded.reference == question.reference
    assert graded.verdict == "correct" and graded.reward == 1.0
    bare = orchestrator.answer("Why is the sky blue?")
    assert not bare.graded and bare.reward is None and "no reference" in bare.grade_detail
    assert bare.final_answer  # it still ran and answered


def test_answer_is_frozen_and_serialises_to_json(orchestrator):
    answer = orchestrator.answer("What is 2 + 2?", reference="4", kind="numeric")
    with pytest.raises(dataclasses.FrozenInstanceError):
        answer.final_answer = "5"
    record = json.loads(json.dumps(answer.to_dict()))
    assert record["plan"][1] == {"model_id": 1, "subtask": "Check the answer and state it", "access": "all"}
    assert record["steps"][0]["worker"] == "sim-math-expert" and record["steps"][0]["usage"]["output_tokens"] > 0
    assert record["verdict"] == "correct" and record["cost_usd"] == answer.cost_usd


def test_the_rate_limiter_applies_in_process():
    with Orchestrator.from_config(sim_config(), overrides=["workers.0.rpm=1000"]) as o:
        o.answer("What is 2 + 2?", reference="4", kind="numeric")
        calls, tokens = o.workers[0].limiter.limits.in_window()
        assert calls == 1 and tokens > 0
        assert o.workers[1].limiter is None  # no limits configured for it


def test_a_tiny_budget_stops_with_a_clear_error():
    with Orchestrator.from_config(sim_config(), budget_usd=1e-6) as o:
        with pytest.raises(BudgetSpentError, match=r"stopped by the worker budget.*budget_usd") as caught:
            o.answer("What is 17 * 23?", reference="391", kind="numeric")
        [answer] = caught.value.answers
        assert answer.steps[0].response and answer.steps[1].error.startswith("budget_exceeded:")
        assert answer.reward is None  # not the policy's fault: not scored
        assert o.ledger.totals().calls == 1 and o.ledger.exhausted


class CountingConductor:
    """The Conductor, recording the questions and the seed of each call."""

    def __init__(self, conductor) -> None:
        self.conductor, self.calls = conductor, []

    def write_plans_many(self, questions, n_workers, n, seed, temperature, answer_formats=None):
        self.calls.append((list(questions), seed))
        return self.conductor.write_plans_many(questions, n_workers, n, seed, temperature, answer_formats)


def test_answer_many_samples_all_plans_in_one_call_and_runs_workflows_concurrently():
    config = sim_config()
    # A call waits until 3 are in flight at once: the calls finish only if answers' workflows really overlap.
    overlap = Gate(3, timeout_s=120)  # sequential answers would never get through
    workers = [GatedProvider(build_provider(w), overlap) for w in config.workers]
    questions = ["What is 2 + 2?", "What is 3 * 5?", "What is 10 - 7?"]
    with Orchestrator.from_config(config, workers=workers) as o:
        o.conductor = counting = CountingConductor(o.conductor)
        answers = o.answer_many(questions)
        assert counting.calls == [(questions, config.conductor.seed)]  # one batch for the three
        assert overlap.most == 3  # the three first steps were in flight together
        assert [a.question for a in answers] == questions  # in the order asked
        assert [a.question_id for a in answers] == ["user/0", "user/1", "user/2"]
        assert [(a.infrastructure_error, len(a.steps)) for a in answers] == [(None, 2)] * 3


def test_many_questions_are_sampled_in_chunks_of_plan_batch_each_with_its_seed(orchestrator, monkeypatch):
    counting = CountingConductor(orchestrator.conductor)
    monkeypatch.setattr(orchestrator, "conductor", counting)
    monkeypatch.setattr(orchestrator, "plan_batch", 2)
    questions = ["What is 2 + 2?", "What is 3 * 5?", "What is 10 - 7?"]
    answers = orchestrator.answer_many(questions)
    seed = orchestrator.config.conductor.seed
    assert counting.calls == [(questions[:2], seed), (questions[2:], seed + 1)]
    assert [a.question for a in answers] == questions and all(a.final_answer for a in answers)
    orchestrator.answer(questions[0])  # one question: a batch of one, the same seed
    assert counting.calls[-1] == ([questions[0]], seed)


def test_from_config_refuses_an_unknown_section_as_load_config_does():
    with pytest.raises(ConfigError) as loaded:
        load_config(None, ["nonsense.key=1"])
    assert "unknown configuration section 'nonsense'" in str(loaded.value)
    for config in (sim_config(), ROOT / "configs" / "local.yaml"):
        with pytest.raises(ConfigError) as made:
            Orchestrator.from_config(config, overrides=["nonsense.key=1"])
        assert str(made.value) == str(loaded.value)


def test_answer_async_from_a_running_loop(orchestrator):
    async def ask():
        return await orchestrator.answer_async("What is 6 * 7?", reference="42", kind="numeric")

    assert asyncio.run(ask()).verdict == "correct"


def test_misuse_fails_with_the_fix(orchestrator):
    [question] = load_dataset("samples:gsm8k", limit=1)
    with pytest.raises(ValueError, match="carries its own reference"):
        orchestrator.answer(question, reference="1")
    with pytest.raises(ValueError, match="empty"):
        orchestrator.answer("  ")
    with pytest.raises(ValueError, match="one per configured worker"):
        Orchestrator(sim_config(), orchestrator.conductor, orchestrator.workers[:1])
    with pytest.raises(ValueError, match="own ledger"):
        Orchestrator.from_config(sim_config(), workers=orchestrator.workers, budget_usd=1.0)
    closed = Orchestrator(sim_config(), orchestrator.conductor, orchestrator.workers)
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        closed.answer("What is 2 + 2?")


def test_importing_the_package_stays_light():
    code = "import sys, conductor_rl; conductor_rl.Orchestrator; print(sorted({'torch', 'ray'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def readme_example() -> str:
    """The python block of the README's "Python API" section."""
    section = re.search(r"^## Python API\n(.*?)(?=^## )", (ROOT / "README.md").read_text(), re.S | re.M)
    assert section, "README.md has no '## Python API' section"
    [code] = re.findall(r"```python\n(.*?)```", section.group(1), re.S)
    return code


def test_readme_example_runs_as_written(tmp_path, monkeypatch, capsys):
    """Run where a user runs it after `conductor-rl train`: the embedded config, and a
    checkpoint's model folder (here the tiny Qwen2, at the path the default run leaves)."""
    from conductor_rl.models import resolve_model

    code = readme_example()
    assert len(code.strip().splitlines()) <= 6  # the import, a blank line, five lines
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    model = tmp_path / "runs" / "local" / "checkpoints" / "ckpt-000007" / "model"
    model.parent.mkdir(parents=True)
    model.symlink_to(resolve_model("tiny-qwen2"))
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    try:
        exec(compile(code, "README.md", "exec"), scope)
    finally:
        for value in scope.values():
            if isinstance(value, Orchestrator):
                value.close()
    answer = next(v for v in scope.values() if isinstance(v, Answer))
    assert answer.plan_error is None and answer.steps and answer.cost_usd > 0  # constrained: the plan parses
    assert answer.verdict in ("correct", "wrong")
    assert "sim-" in capsys.readouterr().out


def test_a_users_worker_subset_keeps_its_pool_numbers_and_only_it_runs():
    from conductor_rl.plan.roster import RosterError

    def subset_answer(plan: str):
        config = sim_config()
        config = config.model_copy(update={"conductor": config.conductor.model_copy(update={"response_prefix": plan})})
        with Orchestrator.from_config(config, worker_names=["sim-generalist", "sim-math-expert"]) as o:
            assert [(w.name, w.model_id) for w in o.config.workers] == [("sim-math-expert", 0), ("sim-generalist", 2)]
            return o.answer("What is 17 * 23?", reference="391", kind="numeric")

    answer = subset_answer(PLAN.replace("[0, 1]", "[2, 0]"))  # the pool's numbers
    assert [s.model_id for s in answer.plan.steps] == [2, 0]
    assert [s.worker for s in answer.steps] == ["sim-generalist", "sim-math-expert"]
    # Model 1 (the knowledge expert) is not offered: a plan naming it runs nothing.
    refused = subset_answer(PLAN)
    assert refused.plan is None and not refused.steps and "the listed models are 0, 2" in refused.plan_error
    with pytest.raises(RosterError, match="unknown worker.*'gpt-5'.*the pool has: sim-math-expert"):
        Orchestrator.from_config(sim_config(), worker_names=["gpt-5"])


def test_recursion_at_inference_is_the_conductors_choice_within_the_depth_limit():
    """The embedded default's Conductor settings (plans constrained to the format, the empty plan
    allowed in recursive calls) on the tiny Qwen2, with the Conductor's seat as Model 3 and
    conductor.max_depth=2: nothing forces a call; a call is made only where a plan gives the seat a
    step, and at depth 3 such a step keeps the answer (the limit)."""
    raw = yaml.safe_load((ROOT / "configs" / "local.yaml").read_text())
    for worker in raw["workers"]:
        worker["sim"].update({"latency_s": 0.0})
    raw["workers"].append({"name": "conductor", "provider": "conductor"})
    overrides = ["conductor.model=tiny-qwen2", "conductor.max_depth=2", "ask.temperature=1.0"]
    with Orchestrator.from_config(validate_config(raw), overrides=overrides) as o:
        answers = o.answer_many(list(load_dataset("samples:gsm8k", limit=8)))

    def calls(steps):
        for step in steps:
            inner = step["inner"] if isinstance(step, dict) else step.inner
            if inner is not None:
                yield inner
                yield from calls(inner["steps"])

    for answer in answers:
        assert answer.plan_error is None and answer.infrastructure_error is None
        assert all(s.model_id != -1 for s in answer.steps), "no forced call at inference"
        seat_steps = [s for s in answer.steps if s.model_id == 3]
        assert len(list(calls(answer.steps))) >= len(seat_steps)
        for call in calls(answer.steps):
            assert not call["forced"] and 1 <= call["depth"] <= 3
            assert call["at_limit"] == (call["depth"] == 3)
        if not seat_steps:
            assert not list(calls(answer.steps))
    json.dumps([a.to_dict() for a in answers])
