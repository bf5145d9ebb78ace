"""Loaders of LiveCodeBench, BigCodeBench, GPQA and RLPR on fixture files in their
upstream formats (tests/fixtures, written by tests/fixtures/make_fixtures.py):
fields, ids, windows, the choice permutation, the refused pickle, malformed rows,
the hf: row adapters, the specs, and real grading of the code benchmarks."""

from __future__ import annotations

import base64
import csv
import gzip
import json
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from conductor_rl.data import (
    DATASET_SPEC_FORMS,
    ENV_VAR,
    GPQA_SEED,
    DataFormatError,
    files,
    gpqa_permutation,
    iter_rows,
    lcb_window,
    load_bigcodebench,
    load_dataset,
    load_gpqa,
    load_livecodebench,
    load_rlpr,
    questions_from_hf_rows,
)
from conductor_rl.data.livecodebench import NO_REFERENCE, pickled_string, unpack_private_tests
from conductor_rl.grading import Verdict, grade_code
from conductor_rl.grading.sandbox import Sandbox

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
LCB = FIXTURES / "livecodebench"
BOX = Sandbox(timeout_s=10)


@pytest.fixture
def data_dir(monkeypatch):
    """The fixtures as the shared data directory."""
    monkeypatch.setenv(ENV_VAR, str(FIXTURES))
    return FIXTURES


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _lcb_rows(name: str = "test.jsonl") -> list[dict]:
    return [row for _, row in iter_rows(LCB / name)]


def _pack(obj) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(obj, protocol=4))).decode()


# ---------------------------------------------------------------- fixtures


def _comparable(row: dict) -> dict:
    # zlib's output may differ between zlib builds; what it holds may not.
    value = row.get("private_test_cases")
    if isinstance(value, str) and not value.startswith("["):
        row = dict(row, private_test_cases=zlib.decompress(base64.b64decode(value)))
    return row


def test_fixtures_match_make_fixtures(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(FIXTURES / "make_fixtures.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert len(made) == 7
    for relative in made:
        fresh = [_comparable(r) for _, r in iter_rows(tmp_path / relative)]
        committed = [_comparable(r) for _, r in iter_rows(FIXTURES / relative)]
        assert fresh == committed, f"{relative} is stale: run tests/fixtures/make_fixtures.py"
        assert 2 <= len(committed) <= 6


# ---------------------------------------------------------------- row files


def test_iter_rows_by_suffix(tmp_path):
    rows = [{"a": 1}, {"a": 2}]
    with gzip.open(tmp_path / "r.jsonl.gz", "wt") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows))
    assert list(iter_rows(tmp_path / "r.jsonl.gz")) == [(1, {"a": 1}), (2, {"a": 2})]
    numbered = list(iter_rows(FIXTURES / "rlpr" / "test.parquet"))
    assert [n for n, _ in numbered] == [1, 2, 3]
    assert numbered[0][1]["reward_model"] == {"ground_truth": "Na", "style": "rule"}
    with pytest.raises(DataFormatError, match=r"suffix must be one of .*\.parquet"):
        list(iter_rows(tmp_path / "rows.xlsx"))
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataFormatError, match="cannot read Parquet"):
        list(iter_rows(tmp_path / "bad.parquet"))


def test_csv_rows_number_their_first_line_and_check_field_counts(tmp_path):
    f = tmp_path / "g.csv"
    f.write_text('a,b\n1,"two\nlines"\n3,4\n5\n', encoding="utf-8")
    rows = iter_rows(f)
    assert next(rows) == (2, {"a": "1", "b": "two\nlines"})
    assert next(rows) == (4, {"a": "3", "b": "4"})
    with pytest.raises(DataFormatError) as info:
        next(rows)
    assert info.value.line == 5 and "2 fields" in str(info.value)


# ---------------------------------------------------------------- LiveCodeBench


def test_livecodebench_v1(data_dir):
    qs = load_livecodebench("v1")
    assert [q.id for q in qs] == ["livecodebench/abc301_a", "livecodebench/2859", "livecodebench/1950A"]
    assert [q.answer_kind for q in qs] == ["code_stdio", "code_call", "code_stdio"]
    assert {(q.domain, q.source, q.reference) for q in qs} == {("code", "livecodebench", NO_REFERENCE)}
    stdin, call, packed_stdin = qs
    # plain-JSON private tests, then upstream-packed ones: public first, then private, testtype dropped
    assert stdin.meta["tests"] == [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "10 -4\n", "output": "6\n"},
        {"input": "1000000000 1000000000\n", "output": "2000000000\n"},
    ]
    assert packed_stdin.meta["tests"][1:] == [
        {"input": "1\na\n", "output": "a\n"},
        {"input": "3\nab\nba\nzzz\n", "output": "ba\nab\nzzz\n"},
    ]
    assert stdin.meta["n_public_tests"] == 1 and stdin.meta["contest_date"] == "2023-05-13"
    assert stdin.meta["platform"] == "atcoder" and "fn_name" not in stdin.meta
    assert "standard input" in stdin.question and stdin.question.startswith("You are given two integers")
    assert call.meta["fn_name"] == "sumEven" and call.meta["starter_code"].startswith("class Solution:")
    assert "Solution().sumEven" in call.question and "def sumEven(self, nums" in call.question
    assert [t["output"] for t in call.meta["tests"]] == ["6", "0", "8"]
    assert load_dataset("livecodebench") == qs == load_dataset("livecodebench:v1")


def test_livecodebench_windows(data_dir):
    assert lcb_window("v1") == (lcb_window("2023-05-01..2024-03-31"))
    v6 = load_livecodebench("v6")  # test6.jsonl: 2025-01-11 is before the window, 2025-02-01 its first day
    assert [q.meta["contest_date"] for q in v6] == ["2025-02-01", "2025-04-05"]
    span = load_dataset("livecodebench:2023-09-17..2025-01-11")  # every file present, ends inclusive
    assert [q.id for q in span] == ["livecodebench/2859", "livecodebench/1950A", "livecodebench/3412"]
    assert len(load_dataset("livecodebench:2023-01-01..2026-01-01", limit=4)) == 4
    assert load_dataset(f"livecodebench:v1@{LCB / 'test6.jsonl'}") == []
    assert [q.id for q in load_livecodebench("v6", path=LCB)] == [q.id for q in v6]  # a directory


@pytest.mark.parametrize("window", ["v7", "2024-01-01", "2025-02-30..2025-03-01", "2025-02-02..2025-02-01", "a..b"])
def test_livecodebench_bad_windows(window):
    with pytest.raises(ValueError, match="window"):
        lcb_window(window)
    with pytest.raises(ValueError) as info:
        load_dataset(f"livecodebench:{window}")
    assert "livecodebench[:v1|v6|<from>..<to>]" in str(info.value)


def test_hostile_pickle_is_refused_not_unpickled(monkeypatch, capsys):
    def forbidden(*args, **kwargs):
        raise AssertionError("the loader unpickled test cases")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)
    with pytest.raises(DataFormatError) as info:
        load_livecodebench("v1", path=LCB / "hostile.jsonl")
    assert info.value.line == 2
    assert "holds more than a string" in str(info.value) and "refusing to unpickle untrusted data" in str(info.value)
    assert "unpickled" not in capsys.readouterr().out
    assert len(load_livecodebench("v1", path=LCB / "hostile.jsonl", limit=1)) == 1  # the good row before it


def test_pickled_string_reads_only_a_lone_string():
    assert pickled_string(pickle.dumps("[]", protocol=0)) == "[]"
    assert pickled_string(pickle.dumps("x" * 300, protocol=5)) == "x" * 300
    with pytest.raises(ValueError, match="opcode EMPTY_LIST"):
        pickled_string(pickle.dumps(["[]"], protocol=4))
    with pytest.raises(ValueError, match="not a valid pickle"):
        pickled_string(pickle.dumps("[]", protocol=4)[:5])
    with pytest.raises(ValueError, match="neither JSON nor base64"):
        unpack_private_tests("{not json")
    assert json.loads(unpack_private_tests(_pack('[{"input": "", "output": "", "testtype": "stdin"}]')))


@pytest.mark.parametrize(
    "change, needle",
    [
        (
            {"public_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "functional"}])},
            "all be 'stdin'",
        ),
        ({"private_test_cases": json.dumps([{"input": "1", "output": "1", "testtype": "other"}])}, "'other'"),
        ({"metadata": "{}"}, "func_name"),
        ({"contest_date": "May 2023"}, "contest_date"),
        ({"public_test_cases": "[1, 2]"}, "public_test_cases[0]"),
        ({"private_test_cases": _pack(["a", "b"])}, "opcode"),
        ({"question_id": ""}, "question_id"),
    ],
)
def test_livecodebench_malformed_rows_name_their_line(tmp_path, change, needle):
    good, functional = _lcb_rows()[:2]
    bad = dict(functional if "func_name" in needle else good, **change)
    f = _write_jsonl(tmp_path / "lcb.jsonl", [good, bad])
    with pytest.raises(DataFormatError) as info:
        load_livecodebench("2000-01-01..2100-01-01", path=f)
    assert info.value.line == 2 and needle in str(info.value)


def test_livecodebench_missing_files_say_what_works(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    monkeypatch.setattr(files, "_REPO_ROOT", tmp_path / "repo")
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("livecodebench:v6")
    msg = str(info.value)
    assert "livecodebench/test6.jsonl" in msg and ENV_VAR in msg
    assert "livecodebench@<path>" in msg and "hf:livecodebench/code_generation_lite" in msg
    with pytest.raises(FileNotFoundError, match="test5.jsonl"):
        load_dataset("livecodebench:2024-01-01..2024-02-01")
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        load_dataset(f"livecodebench@{tmp_path / 'nowhere.jsonl'}")


# ---------------------------------------------------------------- BigCodeBench


def test_bigcodebench_complete_and_instruct(data_dir):
    rows = [row for _, row in iter_rows(FIXTURES / "bigcodebench" / "v0.1.4.parquet")]
    complete = load_bigcodebench()
    assert [q.id for q in complete] == [f"bigcodebench/BigCodeBench/{n}" for n in range(4)]
    q, row = complete[0], rows[0]
    assert (q.domain, q.answer_kind, q.source) == ("code", "code_unittest", "bigcodebench")
    assert q.reference == row["code_prompt"] + row["canonical_solution"]
    assert row["complete_prompt"].rstrip() in q.question
    assert q.meta == {
        "task_id": "BigCodeBench/0",
        "split": "complete",
        "entry_point": "task_func",
        "prompt": row["complete_prompt"],
        "code_prompt": row["code_prompt"],
        "test": row["test"],
        "libs": ["collections", "re"],
    }
    instruct = load_dataset("bigcodebench:instruct", limit=2)
    assert [i.id for i in instruct] == ["bigcodebench/instruct/BigCodeBench/0", "bigcodebench/instruct/BigCodeBench/1"]
    assert instruct[0].question == row["instruct_prompt"].strip() and instruct[0].reference == q.reference
    assert load_dataset("bigcodebench") == load_dataset(f"bigcodebench:complete@{FIXTURES / 'bigcodebench'}")


def test_bigcodebench_malformed_rows(tmp_path):
    rows = [row for _, row in iter_rows(FIXTURES / "bigcodebench" / "v0.1.4.parquet")][:2]
    f = _write_jsonl(tmp_path / "v0.1.4.jsonl", [rows[0], dict(rows[1], libs="['unclosed")])
    with pytest.raises(DataFormatError) as info:
        load_bigcodebench(path=f)
    assert info.value.line == 2 and "libs" in str(info.value)
    _write_jsonl(f, [rows[0], {k: v for k, v in rows[1].items() if k != "test"}])
    with pytest.raises(DataFormatError, match="line 2: missing field 'test'"):
        load_bigcodebench(path=f)
    with pytest.raises(ValueError, match="split"):
        load_bigcodebench("hard", path=f)


# ---------------------------------------------------------------- GPQA


def _gpqa_rows() -> list[dict]:
    return [row for _, row in iter_rows(FIXTURES / "gpqa" / "gpqa_diamond.csv")]


def test_gpqa_choices_are_shuffled_deterministically(data_dir):
    qs = load_gpqa()
    assert [q.reference for q in qs] == ["D", "C", "D", "C"]  # pinned: the permutation is part of the data
    for q, row in zip(qs, _gpqa_rows()):
        assert q.id == f"gpqa/{row['Record ID']}"
        assert (q.domain, q.answer_kind, q.source) == ("science", "choice", "gpqa")
        assert q.meta["choices"]["ABCD".index(q.reference)] == row["Correct Answer"].strip()
        assert sorted(q.meta["choices"]) == sorted(
            row[k].strip() for k in ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
        )
        assert q.meta["n_choices"] == 4 and q.meta["subject"] == row["Subdomain"]
        assert f"{q.reference}. {row['Correct Answer'].strip()}" in q.question
        assert q.question.startswith(row["Question"].strip())
    assert load_gpqa() == qs == load_dataset("gpqa:diamond")
    assert sorted(gpqa_permutation("recX")) == [0, 1, 2, 3]
    assert gpqa_permutation("recX") == gpqa_permutation("recX", GPQA_SEED)
    other = load_gpqa(seed="another seed")
    assert [q.reference for q in other] != [q.reference for q in qs]
    assert all(
        o.meta["choices"]["ABCD".index(o.reference)] == q.meta["choices"]["ABCD".index(q.reference)]
        for o, q in zip(other, qs)
    )


def test_gpqa_malformed_csv_names_the_record_line(tmp_path):
    rows = _gpqa_rows()
    f = tmp_path / "gpqa_diamond.csv"
    with open(f, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([rows[2], dict(rows[0], **{"Incorrect Answer 2": "  "})])  # rows[2]: lines 2-4
    with pytest.raises(DataFormatError) as info:
        load_dataset(f"gpqa@{f}")
    assert info.value.line == 5 and "Incorrect Answer 2" in str(info.value)


# ---------------------------------------------------------------- RLPR


def test_rlpr_splits(data_dir):
    test = load_rlpr()
    assert [q.id for q in test] == ["rlpr/test/0", "rlpr/test/1", "rlpr/test/2"]
    assert [q.reference for q in test] == ["Na", "6", "1989"]
    q = test[0]
    assert (q.domain, q.answer_kind, q.source) == ("reasoning", "freeform", "rlpr")
    assert q.question == "What is the chemical symbol of sodium?"
    assert q.meta["data_source"] == "WebInstruct-verified-val_Avg2" and "\\boxed{}" in q.meta["system_prompt"]
    train = load_dataset("rlpr:train")
    assert [t.reference for t in train] == ["Canberra", "60 km/h", "carbon dioxide", "x + 1"]
    assert load_dataset("rlpr") == test and load_dataset(f"rlpr:train@{FIXTURES / 'rlpr' / 'train.parquet'}") == train


def test_rlpr_row_forms_and_errors(tmp_path):
    rows = [
        {"prompt": "Plain question?", "reward_model": {"ground_truth": ["first", "second"]}},
        {"prompt": [{"role": "system", "content": "s"}], "reward_model": {"ground_truth": "x"}},
    ]
    f = _write_jsonl(tmp_path / "rlpr.jsonl", rows)
    (q,) = load_rlpr("train", path=f, limit=1)
    assert (q.question, q.reference, q.meta["answers"]) == ("Plain question?", "first", ["first", "second"])
    with pytest.raises(DataFormatError) as info:
        load_rlpr("train", path=f)
    assert info.value.line == 2 and "user message" in str(info.value)
    _write_jsonl(f, [dict(rows[0], reward_model={"style": "rule"})])
    with pytest.raises(DataFormatError, match="ground_truth"):
        load_rlpr("train", path=f)


# ---------------------------------------------------------------- hf: rows and specs


def test_hf_rows_of_each_new_schema_match_the_local_loaders():
    lcb = _lcb_rows() + _lcb_rows("test6.jsonl")
    hub = questions_from_hf_rows(lcb, "livecodebench/code_generation_lite@release_v6", "test")
    assert hub == load_livecodebench("2000-01-01..2100-01-01", path=LCB / "test.jsonl") + load_livecodebench(
        "2000-01-01..2100-01-01", path=LCB / "test6.jsonl"
    )
    bcb = [row for _, row in iter_rows(FIXTURES / "bigcodebench" / "v0.1.4.parquet")]
    assert questions_from_hf_rows(bcb, "bigcodebench/bigcodebench", "v0.1.4") == load_bigcodebench(
        path=FIXTURES / "bigcodebench"
    )
    assert questions_from_hf_rows(_gpqa_rows(), "Idavidrein/gpqa@gpqa_diamond", "train") == load_gpqa(
        path=FIXTURES / "gpqa"
    )
    rlpr = [row for _, row in iter_rows(FIXTURES / "rlpr" / "train.parquet")]
    assert questions_from_hf_rows(rlpr, "openbmb/RLPR-Train-Dataset", "train") == load_rlpr(
        "train", path=FIXTURES / "rlpr"
    )


def test_spec_forms_are_listed():
    for form in (
        "livecodebench[:v1|v6|<from>..<to>]",
        "bigcodebench[:complete|instruct]",
        "gpqa[:diamond",
        "rlpr[:test|train]",
        "<benchmark>[:<split>]@<path>",
    ):
        assert any(f.startswith(form) for f in DATASET_SPEC_FORMS), form


@pytest.mark.parametrize(
    "spec, needle",
    [
        ("bigcodebench:hard", "bigcodebench has the split(s)"),
        ("gpqa:experts", "gpqa has the split(s)"),
        ("rlpr:dev", "rlpr has the split(s)"),
        ("gpqa@", "'@' must be followed"),
        ("samples:mixed@/tmp/x.jsonl", "no @<path>"),
        ("nope@/tmp/x.csv", "unknown dataset 'nope'"),
        ("humaneval:x@/tmp/h.jsonl", "humaneval has only"),
    ],
)
def test_bad_benchmark_specs(spec, needle):
    with pytest.raises(ValueError) as info:
        load_dataset(spec)
    msg = str(info.value)
    assert needle in msg and "gpqa[:diamond|main|extended]" in msg and "jsonl:<path>" in msg


def test_at_path_serves_the_older_benchmarks_too(tmp_path):
    f = _write_jsonl(tmp_path / "g.jsonl", [{"question": "Q?", "answer": "#### 7"}])
    assert [(q.id, q.reference) for q in load_dataset(f"gsm8k:train@{f}")] == [("gsm8k/train/0", "7")]
    m = _write_jsonl(tmp_path / "m.jsonl", [{"problem": "P", "answer": "3", "unique_id": "test/algebra/1.json"}])
    assert load_dataset(f"math500@{m}")[0].id == "math500/test/algebra/1"


# ---------------------------------------------------------------- real grading (about 0.5 s each: not slow)


def _answer(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}```\n"


def test_livecodebench_solutions_grade_in_the_sandbox(data_dir):
    stdin, call, _ = load_livecodebench("v1")
    repeat = load_livecodebench("v6")[1]
    good_stdin = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert grade_code(stdin.answer_kind, _answer(good_stdin), stdin.meta, sandbox=BOX).verdict is Verdict.CORRECT
    assert grade_code(stdin.answer_kind, _answer("print(3)\n"), stdin.meta, sandbox=BOX).verdict is Verdict.WRONG
    good_call = (
        "from typing import List\n\nclass Solution:\n    def sumEven(self, nums: List[int]) -> int:\n"
        "        return sum(n for n in nums if n % 2 == 0)\n"
    )
    assert grade_code(call.answer_kind, _answer(good_call), call.meta, sandbox=BOX).verdict is Verdict.CORRECT
    wrong_call = good_call.replace("n % 2 == 0", "n > 0")
    assert grade_code(call.answer_kind, _answer(wrong_call), call.meta, sandbox=BOX).verdict is Verdict.WRONG
    two_args = "class Solution:\n    def repeatWord(self, word: str, k: int) -> str:\n        return word * k\n"
    assert grade_code(repeat.answer_kind, _answer(two_args), repeat.meta, sandbox=BOX).verdict is Verdict.CORRECT


def test_bigcodebench_reference_grades_correct_and_a_wrong_body_wrong(data_dir):
    for q in load_bigcodebench():
        result = grade_code(q.answer_kind, _answer(q.reference), q.meta, sandbox=BOX)
        assert result.verdict is Verdict.CORRECT, (q.id, result.detail)
    q = load_bigcodebench("instruct")[1]
    wrong = q.meta["code_prompt"] + "    return sorted(numbers)\n"
    assert grade_code(q.answer_kind, _answer(wrong), q.meta, sandbox=BOX).verdict is Verdict.WRONG
    body_only = q.reference.split("\n", 2)[2]  # the canonical body alone, as a completion
    assert grade_code(q.answer_kind, body_only, q.meta, sandbox=BOX).verdict is Verdict.CORRECT
