"""The cost forecast: hand-computed ranges, a resumed run's own iterations, and the refusal over budget."""

from __future__ import annotations

import pytest

from conductor_rl.config import load_config
from conductor_rl.data.question import Question
from conductor_rl.workers.forecast import (
    PROMPT_OVERHEAD_TOKENS,
    ForecastOverBudgetError,
    Range,
    forecast,
    from_iterations,
    training_forecast,
)
from conductor_rl.workers.ledger import CostLedger
from conductor_rl.workers.providers import Usage
from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books


def workers(*settings: str):
    return load_config(None, list(settings)).workers


def test_a_simulated_pool_is_forecast_from_its_declared_output_and_prices_by_hand():
    pool = workers("workers.0.rpm=60", "workers.1.rpm=120", "workers.2.rpm=120")
    by_name = {w.name: w for w in pool}
    got = forecast(pool, samples=10, calls_per_sample=Range(1, 3), question_tokens=40)
    prompt = 40 + PROMPT_OVERHEAD_TOKENS
    # Low: the generalist (0.15 / 0.6 per M) reading nothing, half its declared 150 output tokens.
    low = (prompt * 0.15 + 75 * 0.6) / 1e6
    # High: the knowledge expert (3 / 15) reading two answers of the longest output (1.5 x 300), 1.5 x 200 out.
    high = ((prompt + 2 * 450) * 3.0 + 300 * 15.0) / 1e6
    assert by_name["sim-generalist"].sim.output_tokens == 150
    assert got.calls == Range(10, 30)
    assert got.usd.low == pytest.approx(10 * low) and got.usd.high == pytest.approx(30 * high)
    # Rate limits alone: 10 calls over 300 RPM at least, 30 calls on the 60 RPM worker at most.
    assert got.call_seconds == Range(10 / 300 * 60, 30 / 60 * 60)
    assert "simulated workers' output_tokens" in got.basis
    assert forecast(workers(), 10, Range(1, 3), 40).call_seconds is None  # unlimited workers: no bound


def test_a_real_worker_is_forecast_from_the_journal_once_it_holds_its_calls(tmp_path):
    real = workers("workers.0.provider=openai", "workers.0.model=m", "workers.0.max_tokens=1000")[:1]
    unseen = forecast(real, 1, Range(1, 1), 0)
    assert unseen.usd.high == pytest.approx((PROMPT_OVERHEAD_TOKENS * 1.25 + 1000 * 10) / 1e6)
    assert "one token to max_tokens" in unseen.basis
    ledger = CostLedger.from_journal(tmp_path / JOURNAL_FILE, job="train", sync=True)
    for out in (100, 300):
        ledger.record(real[0].name, "openai", Usage(50, out), 0.0)
    seen = forecast(real, 1, Range(1, 1), 0, read_books(tmp_path / JOURNAL_FILE))
    assert seen.usd.low == pytest.approx((PROMPT_OVERHEAD_TOKENS * 1.25 + 100 * 10) / 1e6)
    assert seen.usd.high == pytest.approx((PROMPT_OVERHEAD_TOKENS * 1.25 + 300 * 10) / 1e6)
    assert "spend journal" in seen.basis


def test_a_resumed_run_is_forecast_from_its_finished_iterations(tmp_path):
    ledger = CostLedger.from_journal(tmp_path / JOURNAL_FILE, job="train", sync=True)
    for iteration, costs in enumerate(([0.5, 0.5], [1.0, 1.0, 1.0], [9.0])):  # iteration 2 was cut short
        ledger.start_iteration(iteration)
        for usd in costs:
            ledger.record("w", "sim", Usage(), usd)
    books = read_books(tmp_path / JOURNAL_FILE)
    got = from_iterations(books, start=2, samples=256, remaining=4)  # the checkpoint is at iteration 1
    assert got is not None and got.usd == Range(4.0, 12.0) and got.calls == Range(8, 12)
    assert "2 finished iteration(s)" in got.basis
    config = load_config(None, ["train.iterations=6"])
    assert training_forecast(config, [], books, start=2).usd == Range(4.0, 12.0)
    assert from_iterations(books, start=0, samples=256, remaining=4) is None  # nothing finished yet
    assert from_iterations(read_books(tmp_path / "none.jsonl"), 2, 256, 4) is None


def test_a_resumed_run_is_forecast_at_its_iterations_pace_without_the_crash_gap(tmp_path):
    import json

    path = tmp_path / JOURNAL_FILE
    # Session 1: iterations 0, 1 and the start of 2 (then a crash); session 2, an hour later, redoes 2 and 3.
    began = {1: {0: 100.0, 1: 160.0, 2: 250.0}, 2: {2: 3_850.0, 3: 3_920.0}}  # session -> iteration -> time
    for session in began:
        ledger = CostLedger.from_journal(path, job="train", sync=True)
        for iteration in began[session]:
            ledger.start_iteration(iteration)
            ledger.record("w", "sim", Usage(), 0.1)
        ledger.journal.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for event in lines:
        if event["ev"] == "billed":
            event["t"] = began[event["s"]][event["it"]] + 5.0  # each iteration's first call, 5 s after it began
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))

    got = from_iterations(read_books(path), start=3, samples=64, remaining=10)
    # Iterations 0 (60 s) and 1 (90 s) in session 1, 2 (70 s) in session 2; never 1 -> the redone 2.
    assert got is not None and got.wall_seconds == Range(600.0, 900.0)
    assert "10.0 min-15.0 min of wall time" in got.describe("training")
    assert got.as_dict()["wall_seconds"] == [600.0, 900.0]


def test_a_training_forecast_counts_every_rollout_and_every_recursion_level():
    questions = [
        Question(id="q", question="x" * 400, reference="1", domain="math", answer_kind="numeric", source="test")
    ]
    seat = "workers.3={name: conductor, provider: conductor}"
    config = load_config(None, ["train.iterations=3", "conductor.max_steps=3", "conductor.max_depth=1", seat])
    t = config.train
    got = training_forecast(config, questions, read_books("/nonexistent"), start=1)
    assert got.samples == 2 * t.questions_per_iteration * t.rollouts_per_question
    assert got.calls == Range(got.samples, got.samples * 6)


def test_a_budget_below_the_low_forecast_is_refused_with_the_figures_and_the_fix():
    got = forecast(workers(), samples=1000, calls_per_sample=Range(1, 3), question_tokens=100)
    got.check_budget(None, "train.budget_usd")
    got.check_budget(got.usd.low, "train.budget_usd")  # the low forecast itself fits
    with pytest.raises(ForecastOverBudgetError, match=r"at least \$.*Raise train.budget_usd.*--force"):
        got.check_budget(got.usd.low / 2, "train.budget_usd")


def test_an_evaluation_is_forecast_per_method_from_its_plan_shape_and_skips_what_is_done():
    from conductor_rl.evaluation.cost_forecast import evaluation_forecast
    from conductor_rl.evaluation.prepare import prepare_evaluation

    config = load_config(
        None,
        [
            'evaluate.methods=["single:sim-math-expert", "reflect:sim-generalist:1", "moa"]',
            'evaluate.benchmarks=["samples:gsm8k:eval"]',
            "evaluate.limit=3",
            "evaluate.repeats=2",
        ],
    )
    ev = prepare_evaluation(config)
    [questions] = ev.benchmarks.values()
    got = evaluation_forecast(ev)
    # 6 samples each: single 1 call, reflect 2 (an answer, one reflection), MoA 3 proposers + the aggregator.
    assert got.samples == 18 and got.calls == Range(6 + 12 + 24, 6 + 12 + 24)
    single = forecast([config.workers[0]], 6, Range(1, 1), 0)
    assert got.usd.low > single.usd.low  # the other methods' calls add to it
    done = {("single:sim-math-expert", "samples:gsm8k:eval", questions[0].id, r) for r in range(2)}
    assert evaluation_forecast(ev, done).calls == Range(4 + 12 + 24, 4 + 12 + 24)


def test_an_evaluation_whose_budget_is_below_its_forecast_is_refused_before_any_actor_starts(tmp_path, no_cluster):
    from jobs.evaluate import main

    argv = ["--method", "moa", "--limit", "2", "--output", str(tmp_path / "ev"), "--budget-usd", "0.0000001"]
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert "the run would cost at least $" in str(refused.value.code) and "--budget-usd" in str(refused.value.code)
    assert not (tmp_path / "ev").exists()  # refused before anything is written
    with pytest.raises(AssertionError, match="went on to start Ray"):
        main([*argv, "--force"])
