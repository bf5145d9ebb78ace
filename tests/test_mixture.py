"""Tests for conductor_rl.data.mixture: the training mixture's selection rule and its Parquet file."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest

from conductor_rl.data import Question, load_dataset
from conductor_rl.data.mixture import (
    METADATA_KEY,
    domain_quotas,
    load_mixture,
    load_pilot_verdicts,
    mixture_report,
    read_mixture,
    select_mixture,
    stratum_of,
    write_mixture,
)

WORKERS = ("a", "b", "c")


def math_q(i: int, level: int) -> Question:
    return Question(
        id=f"math/train/x/{i}",
        domain="math",
        question=f"Compute {i} + {level}.",
        reference="1",
        answer_kind="math",
        source="math",
        meta={"level": level, "subject": "Algebra"},
    )


def mmlu_q(i: int, subject: str) -> Question:
    return Question(
        id=f"mmlu/{subject}/{i}",
        domain="mmlu",
        question=f"{subject} question {i}?\n\nA. x\nB. y",
        reference="A",
        answer_kind="choice",
        source="mmlu",
        meta={"subject": subject},
    )


def code_q(i: int) -> Question:
    return Question(
        id=f"humaneval/{i}",
        domain="code",
        question=f"def f{i}():",
        reference="pass",
        answer_kind="code_humaneval",
        source="humaneval",
    )


def verdicts_for(questions, solved=lambda q: 1) -> dict:
    """`solved(q)` workers of WORKERS solve q (the first ones)."""
    return {q.id: {w: i < solved(q) for i, w in enumerate(WORKERS)} for q in questions}


@pytest.fixture
def pool():
    questions = [math_q(i, level) for level in (1, 2, 3) for i in range(level * 100, level * 100 + 20)]
    questions += [mmlu_q(i, s) for s in ("anatomy", "virology") for i in range(15)]
    questions += [code_q(i) for i in range(4)]  # a short domain
    return questions


def test_questions_every_worker_or_no_worker_solves_are_dropped(pool):
    verdicts = verdicts_for(pool, lambda q: 2)
    everyone, nobody, partial, unknown = pool[0], pool[1], pool[2], pool[3]
    verdicts[everyone.id] = dict.fromkeys(WORKERS, True)
    verdicts[nobody.id] = dict.fromkeys(WORKERS, False)
    verdicts[partial.id] = {"a": True, "b": False}  # no verdict from c
    del verdicts[unknown.id]
    chosen = {q.id for q in select_mixture(pool, verdicts, total=1000)}
    assert not chosen & {everyone.id, nobody.id, partial.id, unknown.id}
    assert len(chosen) == len(pool) - 4


def test_domains_are_balanced_and_a_short_domain_leaves_its_share_to_the_others(pool):
    chosen = select_mixture(pool, verdicts_for(pool), total=40)
    assert Counter(q.domain for q in chosen) == {"code": 4, "math": 18, "mmlu": 18}
    assert domain_quotas({"code": 4, "math": 60, "mmlu": 30}, 40) == {"code": 4, "math": 18, "mmlu": 18}
    assert domain_quotas({"code": 4, "math": 60, "mmlu": 10}, 40) == {"code": 4, "math": 26, "mmlu": 10}
    assert domain_quotas({"a": 10, "b": 10, "c": 10}, 20) == {"a": 7, "b": 7, "c": 6}
    assert domain_quotas({"a": 1, "b": 2}, 10) == {"a": 1, "b": 2}  # fewer than asked: all there is
    # Domains interleave, so a prefix is balanced too.
    assert Counter(q.domain for q in chosen[:12]) == {"code": 4, "math": 4, "mmlu": 4}


def test_picks_go_round_robin_over_strata_harder_first(pool):
    solved = {q.id: 1 + (q.id.endswith(("0", "2", "4"))) for q in pool}  # some questions are easier
    chosen = select_mixture(pool, verdicts_for(pool, lambda q: solved[q.id]), total=30)
    maths = [q for q in chosen if q.domain == "math"]
    assert sorted(Counter(q.meta["level"] for q in maths).values()) == [4, 4, 5]  # 13 over three levels
    assert len({q.meta["level"] for q in maths[:3]}) == 3  # one per stratum per round
    assert sorted(Counter(q.meta["subject"] for q in chosen if q.domain == "mmlu").values()) == [6, 7]
    # Within a stratum the harder questions (one solver) come before the easier ones (two).
    assert all(solved[q.id] == 1 for q in chosen if q.domain != "code")
    assert stratum_of(pool[0]) == "math/level=1" and stratum_of(mmlu_q(0, "anatomy")) == "mmlu/subject=anatomy"
    assert stratum_of(code_q(0)) == "humaneval"


def test_selection_is_deterministic_whatever_the_candidates_order(pool):
    verdicts = verdicts_for(pool)
    first = select_mixture(pool, verdicts, total=25, seed=3)
    assert select_mixture(list(reversed(pool)), verdicts, total=25, seed=3) == first
    assert select_mixture(pool, verdicts, total=25, seed=4) != first


def test_copies_and_bad_input():
    a, b = math_q(1, 1), math_q(2, 1)
    copy = Question(
        id="math500/test/x/1",
        domain="math",
        question="compute 1 +  1.",
        reference="1",
        answer_kind="math",
        source="math500",
        meta={"level": 1},
    )
    kept = select_mixture([copy, a, b], verdicts_for([a, b, copy]), total=10)
    assert sorted(kept, key=lambda q: q.id) == [a, b]  # of the copies, the smallest id stays
    with pytest.raises(ValueError, match="appear twice"):
        select_mixture([a, a], verdicts_for([a]))
    with pytest.raises(ValueError, match="run the pilot"):
        select_mixture([a], {})
    with pytest.raises(TypeError, match="must be a bool"):
        select_mixture([a], {a.id: {"x": "yes", "y": False}})


def test_parquet_round_trip_keeps_questions_verdicts_and_metadata(tmp_path, pool):
    verdicts = verdicts_for(pool, lambda q: 1 + (q.domain == "mmlu"))
    chosen = select_mixture(pool, verdicts, total=20)
    path = write_mixture(
        tmp_path / "runs" / "mixture.parquet",
        chosen,
        verdicts,
        WORKERS,
        {"candidates": "math:train+mmlu:train", "pilot_attempts": 1},
    )
    table = pq.read_table(path)
    assert table.column_names == [
        "id",
        "domain",
        "question",
        "reference",
        "answer_kind",
        "source",
        "meta",
        "pilot_a",
        "pilot_b",
        "pilot_c",
        "pilot_solved",
    ]
    assert table.column("pilot_a").type == "bool" and set(table.column("pilot_solved").to_pylist()) == {1, 2}
    metadata = json.loads(table.schema.metadata[METADATA_KEY])
    assert metadata["info"] == {"candidates": "math:train+mmlu:train", "pilot_attempts": 1}
    assert metadata["workers"] == list(WORKERS) and "round-robin" in metadata["rule"]
    assert metadata["counts"]["questions"] == 20 and metadata["counts"]["solve_rate"]["a"] == 1.0

    questions, back, meta = read_mixture(path)
    assert questions == chosen and [q.meta for q in questions] == [q.meta for q in chosen]
    assert back == {q.id: verdicts[q.id] for q in chosen} and meta == metadata
    assert load_pilot_verdicts(path) == back
    assert load_mixture(path, limit=3) == chosen[:3]
    assert load_dataset(f"mixture:{path}") == chosen
    assert not list(path.parent.glob(".*.tmp"))  # written through a temporary file


def test_report_counts(pool):
    verdicts = verdicts_for(pool, lambda q: 1 + (q.domain == "mmlu"))
    report = mixture_report(pool[:3] + pool[-1:], verdicts, WORKERS)
    assert report["questions"] == 4 and report["domains"] == {"code": 1, "math": 3}
    assert report["strata"]["math"] == {"math/level=1": 3}
    assert report["solved_by"] == {"1": 4} and report["solve_rate"] == {"a": 1.0, "b": 0.0, "c": 0.0}


def test_write_refuses_missing_verdicts_and_clashing_names(tmp_path):
    a = math_q(1, 1)
    with pytest.raises(ValueError, match="no pilot verdict from \\['c'\\]"):
        write_mixture(tmp_path / "m.parquet", [a], {a.id: {"a": True, "b": False}}, WORKERS, {})
    with pytest.raises(ValueError, match="clash"):
        write_mixture(tmp_path / "m.parquet", [a], {a.id: {"solved": True}}, ["solved"], {})
    with pytest.raises(TypeError, match="JSON"):
        write_mixture(tmp_path / "m.parquet", [a], verdicts_for([a]), WORKERS, {"when": object()})
    assert not (tmp_path / "m.parquet").exists()


def test_a_missing_mixture_says_how_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_dataset(f"mixture:{tmp_path / 'nope.parquet'}")
    assert "nope.parquet" in str(info.value) and "conductor-rl data mix --config" in str(info.value)
