"""Evaluation records, the results table's numbers and the strategy analysis."""

from __future__ import annotations

import json
import math

import pytest

from conductor_rl.data.difficulty import band_of
from conductor_rl.evaluation import EvalRecord, strategy, summarise
from conductor_rl.evaluation.summary import MAX_ANSWER_CHARS, recorded_plan_shape

C = "conductor:run"


def rec(question: str, repeat: int, verdict: str, method: str = "m", benchmark: str = "b", **fields) -> EvalRecord:
    return EvalRecord(method, benchmark, question, fields.pop("domain", "math"), repeat, verdict, **fields)


def test_summarise_on_hand_computed_numbers():
    records = [
        rec("q1", 0, "correct", steps=1, calls=1, cost_usd=0.01, input_tokens=100, output_tokens=10),
        rec("q1", 1, "wrong", steps=3, calls=3, cost_usd=0.03, input_tokens=300, output_tokens=30),
        rec("q2", 0, "correct", steps=1, calls=1, cost_usd=0.01, input_tokens=100, output_tokens=10),
        rec("q2", 1, "correct", steps=1, calls=1, cost_usd=0.01, input_tokens=100, output_tokens=10),
        rec("q3", 0, "wrong", steps=2, calls=2, cost_usd=0.02, input_tokens=200, output_tokens=20),
        rec("q3", 1, "plan_error"),
        rec("q3", 2, "error", steps=2, calls=1, cost_usd=0.5, error="step 1: timeout"),
        rec("q9", 0, "correct", method="other", simulated=True),
    ]
    cell, other = summarise(records)
    assert (cell.method, cell.benchmark, other.method) == ("m", "b", "other")
    assert (cell.questions, cell.repeats, cell.samples, cell.errors, cell.plan_errors) == (3, 2, 6, 1, 1)
    # Per-question means 0.5, 1, 0: mean 0.5; variance (0 + .25 + .25) / 2; se = sqrt(.25 / 3).
    assert cell.accuracy == pytest.approx(0.5)
    assert cell.stderr == pytest.approx(math.sqrt(0.25 / 3))
    assert cell.calls == pytest.approx(8 / 6)
    assert cell.steps == pytest.approx(8 / 5)  # the plan error has no plan
    assert cell.cost_usd == pytest.approx(0.08 / 6)
    assert cell.cost_total_usd == pytest.approx(0.58)  # the error's spending still counts here
    assert cell.input_tokens == pytest.approx(800 / 6) and cell.output_tokens == pytest.approx(80 / 6)
    assert cell.simulated is False and other.simulated is True
    assert (other.accuracy, other.stderr, other.questions) == (1.0, 0.0, 1)  # one question: se 0


def test_repeats_are_averaged_per_question_before_the_mean_over_questions():
    # q1: 3 of 4 right, q2: 0 of 1 (its other repeats errored): accuracy (0.75 + 0) / 2, not 3 / 5.
    records = [rec("q1", r, v) for r, v in enumerate(["correct", "correct", "correct", "wrong"])]
    records += [rec("q2", 0, "wrong"), rec("q2", 1, "error"), rec("q2", 2, "error")]
    (cell,) = summarise(records)
    assert cell.accuracy == pytest.approx(0.375)
    assert cell.stderr == pytest.approx(math.sqrt(((0.75 - 0.375) ** 2 + 0.375**2) / 1 / 2))
    assert (cell.samples, cell.errors, cell.repeats) == (5, 2, 4)


def test_a_cell_of_errors_only_has_no_accuracy():
    (cell,) = summarise([rec("q1", 0, "error"), rec("q2", 0, "error")])
    assert (cell.accuracy, cell.stderr, cell.steps) == (None, None, None)
    assert (cell.samples, cell.questions, cell.errors) == (0, 0, 2)


def test_strategy_per_conductor_method_and_domain():
    records = [
        rec("q1", 0, "correct", method=C, steps=3, workers=("a", "b", "a")),
        rec("q2", 0, "wrong", method=C, steps=1, workers=("a",)),
        rec("q3", 0, "plan_error", method="conductor:run"),
        rec("q4", 0, "correct", method="conductor:run", domain="code", steps=2, workers=("c", "b")),
        rec("q1", 0, "correct", method="single:a", steps=1, workers=("a",)),
    ]
    math_row, code_row = strategy(records)
    assert (math_row.method, math_row.domain, math_row.plans, math_row.mean_steps) == ("conductor:run", "math", 2, 2.0)
    assert math_row.worker_shares == {"a": 0.75, "b": 0.25}
    assert (code_row.domain, code_row.worker_shares) == ("code", {"b": 0.5, "c": 0.5})


def step(subtask: str, access) -> dict:
    return {"model_id": 0, "worker": "a", "subtask": subtask, "access": access}


def test_strategy_gives_plan_shapes_per_difficulty_band():
    C = "conductor:run"
    solve, check = step("Count the apples.", []), step("Check the count above.", [0])
    records = [
        # Hard (0.75): a solve then a check; a solve then a reading solve; one step.
        rec(
            "h1",
            0,
            "correct",
            method="conductor:run",
            steps=2,
            workers=("a", "a"),
            plan=[solve, check],
            difficulty=0.75,
        ),
        rec(
            "h2",
            0,
            "wrong",
            method="conductor:run",
            steps=2,
            workers=("a", "a"),
            plan=[solve, step("Count again.", "all")],
            difficulty=0.75,
        ),
        rec("h3", 0, "wrong", method=C, steps=1, workers=("a",), plan=[solve], difficulty=1.0),
        # Easy (0.1): one step, its "all" on the first step reads nothing; one check.
        rec(
            "e1",
            0,
            "correct",
            method="conductor:run",
            steps=1,
            workers=("a",),
            plan=[step("Check the apples.", "all")],
            difficulty=0.1,
        ),
        rec("e2", 0, "correct", method=C, steps=2, workers=("a", "a"), plan=[solve, check], difficulty=0.1),
        rec("u1", 0, "correct", method=C, steps=1, workers=("a",), plan=[solve]),  # an older record
    ]
    rows = {r.band: r for r in strategy(records)}
    assert set(rows) == {"hard", "easy", "unknown"}
    hard, easy = rows["hard"], rows["easy"]
    assert (hard.plans, hard.single_step_share, hard.reading_share, hard.checking_share) == (3, 1 / 3, 2 / 3, 1 / 3)
    assert (easy.plans, easy.single_step_share, easy.reading_share, easy.checking_share) == (2, 0.5, 0.5, 0.5)
    assert rows["unknown"].plans == 1 and band_of(None) == "unknown" and band_of(0.5) == "hard"
    assert recorded_plan_shape([solve, check]) == (True, True)
    assert recorded_plan_shape([step("Verify it.", "all")]) == (False, False)


def test_records_go_through_json_unchanged_and_keep_the_end_of_long_answers():
    plan = [
        {"model_id": 0, "worker": "w0", "subtask": "s", "access": []},
        {"model_id": 1, "worker": "w1", "subtask": "t", "access": "all"},
    ]
    record = rec(
        "q7",
        2,
        "wrong",
        method="conductor:run",
        steps=2,
        workers=["w0", "w1"],
        calls=2,
        input_tokens=30,
        output_tokens=12,
        cost_usd=0.006,
        wall_s=1.5,
        plan=plan,
        final_answer="x" * (MAX_ANSWER_CHARS + 50) + "\\boxed{3}",
    )
    assert record.workers == ("w0", "w1") and record.plan[1]["access"] == "all"
    assert record.final_answer.startswith("[...] ") and record.final_answer.endswith("\\boxed{3}")
    assert len(record.final_answer) == MAX_ANSWER_CHARS + len("[...] ")
    assert record.key == ("conductor:run", "b", "q7", 2)
    data = json.loads(json.dumps(record.to_dict()))
    assert data["workers"] == ["w0", "w1"] and data["plan"] == plan
    assert EvalRecord.from_dict({**data, "added_by_a_newer_version": 1}) == record
    with pytest.raises(ValueError, match="verdict must be one of"):
        rec("q", 0, "unsure")
